// GPU tests of the fused linear cross-entropy's float32 accumulation of a 16-bit dW in place: bit
// for bit the float32 dW of the same GEMMs rounded once, for odd and even V and sizes whose
// in-place narrowing runs many uneven rounds; and its predictions and token accuracy on logits
// that every GEMM computes exactly (small integers, many ties), equal to the CPU backend's and
// to a brute-force argmax, for the slice kernel (one and two CTAs a row) and the row kernel.
// Without a CUDA device every test reports SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
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
      p, in, {TensorView::contiguous(loss.data(), DType::kFloat32, {1}, Device::cuda(0))}, g,
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

// Hidden states and weights of small integers: the logits (|x . w| <= 64, integers) are exact in
// every dtype and GEMM, so CPU and GPU see the same logits, with many exact ties.
struct IntegerProblem {
  std::int64_t n, h = 16, v;
  DType dtype;
  HostTensor x, w;
  std::vector<std::int64_t> y, want_predicted;

  IntegerProblem(DType d, std::int64_t n_, std::int64_t v_)
      : n(n_), v(v_), dtype(d), x(d, {n_, 16}), w(d, {v_, 16}) {
    std::mt19937 rng(static_cast<unsigned>(v_));
    std::uniform_int_distribution<int> small(-2, 2);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < h; ++k) x.set(i, k, static_cast<float>(small(rng)));
    for (std::int64_t j = 0; j < v; ++j)
      for (std::int64_t k = 0; k < h; ++k) w.set(j, k, static_cast<float>(small(rng)));
    std::uniform_int_distribution<std::int64_t> cls(0, v - 1);
    for (std::int64_t i = 0; i < n; ++i) {
      std::int64_t best = 0;  // the first of the largest exact logits
      double best_value = -INFINITY;
      for (std::int64_t j = 0; j < v; ++j) {
        double dot = 0;
        for (std::int64_t k = 0; k < h; ++k) dot += double(x.get(i, k)) * w.get(j, k);
        if (dot > best_value) best_value = dot, best = j;
      }
      y.push_back(i % 7 == 3 ? -100 : i % 2 == 0 ? best : cls(rng));
      want_predicted.push_back(y.back() == -100 ? -1 : best);
    }
  }

  tigon::FusedLinearCrossEntropyInputs inputs(void* hidden, void* weight, void* target,
                                              Device device) {
    tigon::FusedLinearCrossEntropyInputs in;
    in.hidden = TensorView::contiguous(hidden, dtype, {n, h}, device);
    in.weight = TensorView::contiguous(weight, dtype, {v, h}, device);
    in.target = TensorView::contiguous(target, DType::kInt64, {n}, device);
    return in;
  }
};

struct Predictions {
  std::vector<float> loss, accuracy;
  std::vector<std::int64_t> predicted;
};

Predictions run_flce(IntegerProblem& pr, tigon::Reduction reduction, std::int64_t chunk, bool gpu) {
  tigon::FusedLinearCrossEntropyParams p;
  p.ce.reduction = reduction;
  p.chunk_rows = chunk;
  const std::int64_t nl = reduction == tigon::Reduction::kNone ? pr.n : 1;
  Predictions r{std::vector<float>(nl), std::vector<float>(nl, -1.0f),
                std::vector<std::int64_t>(pr.n, -7)};
  const bool grads = reduction != tigon::Reduction::kNone;
  HostTensor dx(pr.dtype, {pr.n, pr.h});
  if (!gpu) {
    tigon::FusedLinearCrossEntropyInputs in =
        pr.inputs(pr.x.bytes(), pr.w.bytes(), pr.y.data(), {});
    tigon::FusedLinearCrossEntropyGrads g;
    if (grads) g.hidden = dx.view();
    tigon::CrossEntropyOutputs out{
        TensorView::contiguous(r.loss.data(), DType::kFloat32, {nl}),
        {},
        TensorView::contiguous(r.predicted.data(), DType::kInt64, {pr.n}),
        TensorView::contiguous(r.accuracy.data(), DType::kFloat32, {nl})};
    std::vector<unsigned char> ws(tigon::fused_linear_cross_entropy_workspace_size(p, in, g));
    tigon::fused_linear_cross_entropy(p, in, out, g, Workspace{ws.data(), ws.size()});
    return r;
  }
  const std::size_t e = tigon::element_size(pr.dtype);
  DeviceBuffer dh(pr.x.bytes(), pr.n * pr.h * e), dw(pr.w.bytes(), pr.v * pr.h * e),
      dy(pr.y.data(), 8 * pr.n), dloss(4 * nl), dacc(4 * nl), dpred(8 * pr.n), dgx(pr.n * pr.h * e);
  const Device cuda = Device::cuda(0);
  tigon::FusedLinearCrossEntropyInputs in = pr.inputs(dh.data(), dw.data(), dy.data(), cuda);
  tigon::FusedLinearCrossEntropyGrads g;
  if (grads) g.hidden = TensorView::contiguous(dgx.data(), pr.dtype, {pr.n, pr.h}, cuda);
  tigon::CrossEntropyOutputs out{TensorView::contiguous(dloss.data(), DType::kFloat32, {nl}, cuda),
                                 {},
                                 TensorView::contiguous(dpred.data(), DType::kInt64, {pr.n}, cuda),
                                 TensorView::contiguous(dacc.data(), DType::kFloat32, {nl}, cuda)};
  DeviceBuffer ws(tigon::fused_linear_cross_entropy_workspace_size(p, in, g));
  tigon::fused_linear_cross_entropy(p, in, out, g, Workspace{ws.data(), ws.bytes()});
  tigon::testing::cuda_ok(cudaDeviceSynchronize(), "sync");
  dloss.download(r.loss.data(), 4 * nl);
  dacc.download(r.accuracy.data(), 4 * nl);
  dpred.download(r.predicted.data(), 8 * pr.n);
  return r;
}

TEST(FusedLinearCrossEntropyCuda, PredictionsMatchCpuAndBruteForce) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // V = 1000: the slice kernel, one CTA a row; bf16 V = 40000 and fp32 V = 20000: two CTAs (a
  // cluster on sm_90); bf16 V = 70000, fp32 V = 40000: the row kernel.
  const struct {
    DType dtype;
    std::int64_t v;
  } shapes[] = {{DType::kBFloat16, 1000}, {DType::kBFloat16, 40000}, {DType::kBFloat16, 70000},
                {DType::kFloat32, 1000},  {DType::kFloat32, 20000},  {DType::kFloat32, 40000}};
  for (const auto& shape : shapes)
    for (tigon::Reduction red :
         {tigon::Reduction::kMean, tigon::Reduction::kSum, tigon::Reduction::kNone}) {
      IntegerProblem pr(shape.dtype, 300, shape.v);
      const Predictions want = run_flce(pr, red, 128, false);
      ASSERT_EQ(want.predicted, pr.want_predicted);
      for (std::int64_t chunk : {0, 128, 77}) {
        const Predictions got = run_flce(pr, red, chunk, true);
        const std::string what = std::string(tigon::dtype_name(shape.dtype)) + " V " +
                                 std::to_string(shape.v) + " " + tigon::reduction_name(red) +
                                 " chunk " + std::to_string(chunk);
        EXPECT_EQ(got.predicted, want.predicted) << what;
        EXPECT_EQ(got.accuracy, want.accuracy) << what;
        for (std::size_t i = 0; i < want.loss.size(); ++i)
          EXPECT_NEAR(got.loss[i], want.loss[i], 1e-5 * std::abs(want.loss[i]) + 1e-6) << what;
      }
    }
}

}  // namespace
