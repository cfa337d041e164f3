// GPU tests of the fused linear cross-entropy's float32 accumulation of a 16-bit dW in place: bit
// for bit the float32 dW of the same GEMMs rounded once, for odd and even V and sizes whose
// in-place narrowing runs many uneven rounds. Without a CUDA device every test reports SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cpp/host_tensor.h"
#include "cuda/cuda_test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::Device;
using tigon::DType;
using tigon::TensorView;
using tigon::Workspace;
using tigon::testing::DeviceBuffer;
using tigon::testing::HostTensor;

TensorView on_device(TensorView v, const DeviceBuffer& b) {
  v.data = b.data();
  v.device = Device::cuda(0);
  return v;
}

// dW's bits in `dtype`: a float32 gradient rounded once on the host, or a `dtype` gradient
// accumulated in float32 in place.
std::vector<std::uint16_t> dw_bits(HostTensor& x, HostTensor& w, std::vector<std::int64_t>& y,
                                   std::int64_t chunk, bool fp32_grad) {
  const std::int64_t n = x.rows(), h = x.hidden(), v = w.rows();
  const DType dtype = x.dtype();
  DeviceBuffer dx(x.bytes(), n * h * 2), dw_in(w.bytes(), v * h * 2), dy(y.data(), 8 * n);
  tigon::FusedLinearCrossEntropyParams p;
  p.chunk_rows = chunk;
  p.fp32_weight_grad_accumulation = !fp32_grad;
  tigon::FusedLinearCrossEntropyInputs in;
  in.hidden = on_device(x.view(), dx);
  in.weight = on_device(w.view(), dw_in);
  in.target = TensorView::contiguous(dy.data(), DType::kInt64, {n}, Device::cuda(0));
  HostTensor grad(fp32_grad ? DType::kFloat32 : dtype, {v, h});
  DeviceBuffer dgrad(static_cast<std::size_t>(v * h) * (fp32_grad ? 4 : 2));
  dgrad.fill(0x7f);  // garbage: every element must be written
  tigon::FusedLinearCrossEntropyGrads g;
  g.weight = on_device(grad.view(), dgrad);
  DeviceBuffer ws(tigon::fused_linear_cross_entropy_workspace_size(p, in, g));
  DeviceBuffer loss(4);
  tigon::fused_linear_cross_entropy(
      p, in, TensorView::contiguous(loss.data(), DType::kFloat32, {1}, Device::cuda(0)), {}, g,
      Workspace{ws.data(), ws.bytes()});
  tigon::testing::cuda_ok(cudaDeviceSynchronize(), "sync");
  dgrad.download(grad.bytes(), dgrad.bytes());
  HostTensor rounded(dtype, {v, h});
  std::vector<std::uint16_t> bits;
  for (std::int64_t j = 0; j < v; ++j)
    for (std::int64_t k = 0; k < h; ++k) {
      rounded.set(j, k, grad.get(j, k));
      bits.push_back(static_cast<std::uint16_t>(rounded.bits(j, k)));
    }
  return bits;
}

TEST(FusedLinearCrossEntropyCuda, Fp32AccumulatedDweightIsTheFloat32OneRoundedOnce) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (DType d : {DType::kBFloat16, DType::kFloat16})
    for (std::int64_t v : {1, 2, 3, 7, 4097, 32000, 32001})
      for (std::int64_t h : {33, 64}) {
        const std::int64_t n = 300;
        HostTensor x(d, {n, h}), w(d, {v, h});
        std::mt19937 rng(static_cast<unsigned>(v + h));
        x.fill_normal(rng);
        w.fill_normal(rng, 0.0f, 0.3f);
        std::uniform_int_distribution<std::int64_t> cls(0, v - 1);
        std::vector<std::int64_t> y;
        for (std::int64_t i = 0; i < n; ++i) y.push_back(i % 9 == 4 ? -100 : cls(rng));
        EXPECT_EQ(dw_bits(x, w, y, 128, false), dw_bits(x, w, y, 128, true))
            << "V=" << v << " H=" << h << " " << tigon::dtype_name(d);
      }
}

}  // namespace
