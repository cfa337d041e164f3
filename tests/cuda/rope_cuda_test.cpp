// GPU tests of the RoPE CUDA backend: every result is compared bit for bit with the CPU backend
// (itself tested against the float64 oracle) on the same inputs, through the public API: all
// dtype pairs, forward and backward, GQA, partial rotary, odd head dims, HF's transposed views,
// padded / strided / misaligned views (scalar path), in place, determinism, CUDA-graph capture
// and tensors past 2^31 elements. Without a CUDA device every test reports SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpp/strided_tensor.h"
#include "cuda/cuda_test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::Device;
using tigon::DType;
using tigon::Stream;
using tigon::TensorView;
using tigon::testing::cuda_ok;
using tigon::testing::DeviceBuffer;
using tigon::testing::StridedTensor;

// A device copy of a StridedTensor's whole buffer; view() has the same layout on the device.
class DeviceCopy {
 public:
  explicit DeviceCopy(const StridedTensor& host)
      : host_(&host), buffer_(host.storage().data(), host.storage().size()) {}

  TensorView view() const {
    return host_->view(Device::cuda(0),
                       static_cast<std::uint8_t*>(buffer_.data()) + host_->offset_bytes());
  }
  // The device buffer's bytes, laid out as `like`.
  StridedTensor to_host(const StridedTensor& like) const {
    StridedTensor out = like;
    buffer_.download(out.storage().data(), out.storage().size());
    return out;
  }

 private:
  const StridedTensor* host_;
  DeviceBuffer buffer_;
};

void expect_same_bits(const StridedTensor& gpu, const StridedTensor& cpu, const std::string& what) {
  std::int64_t differing = 0;
  cpu.for_each([&](auto a, auto b, auto c, auto d) {
    if (gpu.bits(a, b, c, d) != cpu.bits(a, b, c, d) && ++differing <= 5) {
      ADD_FAILURE() << what << " (" << a << ", " << b << ", " << c << ", " << d << "): gpu "
                    << gpu.get(a, b, c, d) << ", cpu " << cpu.get(a, b, c, d);
    }
  });
  EXPECT_EQ(differing, 0) << what;
}

enum class Layout { kContiguous, kHeadsInner, kPadded, kStrided, kMisaligned };

StridedTensor make(DType dtype, std::array<std::int64_t, 4> sizes, Layout layout) {
  switch (layout) {
    case Layout::kContiguous: return StridedTensor(dtype, sizes);
    case Layout::kHeadsInner: return StridedTensor(dtype, sizes, {0, 2, 1, 3});
    case Layout::kPadded: return StridedTensor(dtype, sizes, {0, 2, 1, 3}, 8);
    case Layout::kStrided: return StridedTensor(dtype, sizes, {0, 1, 2, 3}, 0, 2);
    case Layout::kMisaligned: return StridedTensor(dtype, sizes, {0, 2, 1, 3}, 0, 1, 1);
  }
  return StridedTensor(dtype, sizes);
}

struct Case {
  std::string name;
  DType t = DType::kBFloat16, c = DType::kBFloat16;
  std::int64_t batch = 2, hq = 8, hk = 2, seq = 33, dim = 128, rotary = 128;
  bool cos_batched = true;
  Layout layout = Layout::kHeadsInner;
  Layout out_layout = Layout::kHeadsInner;
  bool in_place = false;
};

std::vector<Case> cases() {
  std::vector<Case> all;
  const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  for (DType t : dtypes) {
    for (DType c : dtypes) {
      Case base;
      base.t = t;
      base.c = c;
      base.name = std::string(tigon::dtype_name(t)) + "_cos_" + tigon::dtype_name(c);
      all.push_back(base);
      Case partial = base;  // Phi3: 96-dim heads, 32 rotated; odd pass-through width
      partial.name += "_partial";
      partial.dim = 96;
      partial.rotary = 32;
      partial.cos_batched = false;
      all.push_back(partial);
    }
  }
  const std::array<std::pair<const char*, Layout>, 4> layouts = {
      {{"contiguous", Layout::kContiguous},
       {"padded", Layout::kPadded},
       {"last_stride_2", Layout::kStrided},
       {"misaligned", Layout::kMisaligned}}};
  for (const auto& [name, layout] : layouts) {
    Case c;
    c.name = std::string("layout_") + name;
    c.layout = c.out_layout = layout;
    all.push_back(c);
  }
  for (std::int64_t dim : {32, 64, 92, 256}) {
    Case c;
    c.name = "head_dim_" + std::to_string(dim);
    c.dim = c.rotary = dim;
    all.push_back(c);
  }
  Case odd;
  odd.name = "odd_head_dim_33_rotary_16";
  odd.dim = 33;
  odd.rotary = 16;
  all.push_back(odd);
  Case mqa;
  mqa.name = "mqa_many_heads";
  mqa.hq = 73;
  mqa.hk = 1;
  mqa.dim = mqa.rotary = 64;
  all.push_back(mqa);
  for (DType t : {DType::kBFloat16, DType::kFloat32}) {
    Case c;
    c.name = std::string("in_place_") + tigon::dtype_name(t);
    c.t = c.c = t;
    c.in_place = true;
    c.dim = 96;
    c.rotary = 64;
    all.push_back(c);
  }
  return all;
}

class RopeCuda : public ::testing::TestWithParam<Case> {};

TEST_P(RopeCuda, MatchesCpuBackendBitwise) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Case& c = GetParam();
  std::mt19937 rng(99);
  const DType p = tigon::rope_output_dtype(c.t, c.c);
  StridedTensor cos(c.c, {c.cos_batched ? c.batch : 1, 1, c.seq, c.rotary});
  StridedTensor sin(c.c, {c.cos_batched ? c.batch : 1, 1, c.seq, c.rotary});
  cos.fill_normal(rng);
  sin.fill_normal(rng);
  cos.set(0, 0, 0, 1, 0.0f);
  StridedTensor q = make(c.t, {c.batch, c.hq, c.seq, c.dim}, c.layout);
  StridedTensor k = make(c.t, {c.batch, c.hk, c.seq, c.dim}, c.layout);
  q.fill_normal(rng);
  k.fill_normal(rng);
  StridedTensor dyq = make(p, q.sizes(), c.layout), dyk = make(p, k.sizes(), c.layout);
  dyq.fill_normal(rng);
  dyk.fill_normal(rng);
  for (std::int64_t j = 0; j < c.dim; ++j) dyq.set(0, 0, 0, j, 0.0f);

  // CPU results.
  StridedTensor yq = make(p, q.sizes(), c.out_layout), yk = make(p, k.sizes(), c.out_layout);
  StridedTensor dxq = make(c.t, q.sizes(), c.out_layout), dxk = make(c.t, k.sizes(), c.out_layout);
  tigon::rope_fwd(q.view(), k.view(), cos.view(), sin.view(), yq.view(), yk.view());
  tigon::rope_bwd(dyq.view(), dyk.view(), cos.view(), sin.view(), dxq.view(), dxk.view());

  // The same on the GPU (in place: outputs are the inputs' buffers).
  DeviceCopy gq(q), gk(k), gcos(cos), gsin(sin), gdyq(dyq), gdyk(dyk);
  DeviceCopy gyq(yq), gyk(yk), gdxq(dxq), gdxk(dxk);
  const TensorView out_q = c.in_place ? gq.view() : gyq.view();
  const TensorView out_k = c.in_place ? gk.view() : gyk.view();
  const TensorView dx_q = c.in_place ? gdyq.view() : gdxq.view();
  const TensorView dx_k = c.in_place ? gdyk.view() : gdxk.view();
  tigon::rope_fwd(gq.view(), gk.view(), gcos.view(), gsin.view(), out_q, out_k);
  tigon::rope_bwd(gdyq.view(), gdyk.view(), gcos.view(), gsin.view(), dx_q, dx_k);
  cuda_ok(cudaDeviceSynchronize(), "rope");
  expect_same_bits(c.in_place ? gq.to_host(q) : gyq.to_host(yq), yq, "y_q");
  expect_same_bits(c.in_place ? gk.to_host(k) : gyk.to_host(yk), yk, "y_k");
  expect_same_bits(c.in_place ? gdyq.to_host(dyq) : gdxq.to_host(dxq), dxq, "dx_q");
  expect_same_bits(c.in_place ? gdyk.to_host(dyk) : gdxk.to_host(dxk), dxk, "dx_k");
}

INSTANTIATE_TEST_SUITE_P(Cases, RopeCuda, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// Run to run and across streams, the bits never change (no reductions, no atomics), and a CUDA
// graph capture on a non-default stream replays the eager result.
TEST(RopeCudaDeterminism, RepeatedRunsAndGraphCaptureAreIdentical) {
  SKIP_WITHOUT_CUDA_DEVICE();
  std::mt19937 rng(5);
  StridedTensor q(DType::kBFloat16, {4, 32, 256, 128}, {0, 2, 1, 3});
  StridedTensor k(DType::kBFloat16, {4, 8, 256, 128}, {0, 2, 1, 3});
  StridedTensor cos(DType::kBFloat16, {4, 1, 256, 128}), sin(DType::kBFloat16, {4, 1, 256, 128});
  q.fill_normal(rng);
  k.fill_normal(rng);
  cos.fill_normal(rng);
  sin.fill_normal(rng);
  DeviceCopy gq(q), gk(k), gcos(cos), gsin(sin), gyq(q), gyk(k);
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  auto run = [&] {
    tigon::rope_fwd(gq.view(), gk.view(), gcos.view(), gsin.view(), gyq.view(), gyk.view(),
                    Stream{stream});
  };
  run();
  cuda_ok(cudaStreamSynchronize(stream), "first");
  const StridedTensor first_q = gyq.to_host(q), first_k = gyk.to_host(k);
  for (int i = 0; i < 3; ++i) {
    run();
    cuda_ok(cudaStreamSynchronize(stream), "again");
    expect_same_bits(gyq.to_host(q), first_q, "y_q rerun");
  }
  // On the test's stream: the legacy stream's memset would not be ordered before the graph.
  cuda_ok(cudaMemsetAsync(gyq.view().data, 0, q.storage().size() - q.offset_bytes(), stream),
          "clear");
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
  run();
  cuda_ok(cudaStreamEndCapture(stream, &graph), "end capture");
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  cuda_ok(cudaGraphLaunch(exec, stream), "launch");
  cuda_ok(cudaStreamSynchronize(stream), "graph");
  expect_same_bits(gyq.to_host(q), first_q, "y_q graph");
  expect_same_bits(gyk.to_host(k), first_k, "y_k graph");
  cuda_ok(cudaGraphExecDestroy(exec), "destroy exec");
  cuda_ok(cudaGraphDestroy(graph), "destroy graph");
  cuda_ok(cudaStreamDestroy(stream), "destroy stream");
}

// Past 2^31 elements (vector path, 32-bit item indices, 64-bit offsets) and past 2^32 items
// (misaligned: scalar path, 64-bit item indices). q is a constant pattern; the rows at the end
// are compared with the CPU backend run on a copy of those rows.
class RopeCudaHuge : public ::testing::TestWithParam<bool> {};

TEST_P(RopeCudaHuge, RowsPastTheIndexLimits) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const bool scalar = GetParam();
  const std::int64_t dim = 128;
  const std::int64_t rows =
      scalar ? (std::int64_t{1} << 33) / dim + 64 : (std::int64_t{1} << 31) / dim + 64;
  const std::int64_t misalign = scalar ? 1 : 0;
  const std::size_t bytes = static_cast<std::size_t>(rows * dim + misalign) * 2;
  std::size_t free_bytes = 0, total_bytes = 0;
  cuda_ok(cudaMemGetInfo(&free_bytes, &total_bytes), "mem info");
  if (free_bytes < 2 * bytes + (std::size_t{1} << 30)) {
    GTEST_SKIP() << "needs " << (2 * bytes >> 30) + 1 << " GiB of free device memory";
  }
  std::mt19937 rng(3);
  StridedTensor cos(DType::kBFloat16, {1, 1, 1, dim}), sin(DType::kBFloat16, {1, 1, 1, dim});
  cos.fill_normal(rng);
  sin.fill_normal(rng);
  DeviceCopy gcos(cos), gsin(sin);
  void* x = nullptr;
  void* y = nullptr;
  cuda_ok(cudaMalloc(&x, bytes), "malloc x");
  cuda_ok(cudaMalloc(&y, bytes), "malloc y");
  cuda_ok(cudaMemset(x, 0x3f, bytes), "fill x");  // every bf16 element 0x3f3f
  auto* xs = static_cast<std::uint16_t*>(x) + misalign;
  auto* ys = static_cast<std::uint16_t*>(y) + misalign;
  const Device d = Device::cuda(0);
  const TensorView xv = TensorView::contiguous(xs, DType::kBFloat16, {1, 1, rows, dim}, d);
  const TensorView yv = TensorView::contiguous(ys, DType::kBFloat16, {1, 1, rows, dim}, d);
  tigon::rope_fwd(xv, {}, gcos.view(), gsin.view(), yv, {});
  cuda_ok(cudaDeviceSynchronize(), "rope");

  const std::int64_t tail = 16;
  StridedTensor x_tail(DType::kBFloat16, {1, 1, tail, dim}),
      y_cpu(DType::kBFloat16, x_tail.sizes());
  x_tail.for_each([&](auto a, auto b, auto s, auto j) {
    x_tail.set(a, b, s, j, tigon::math::bf16_bits_to_float(0x3f3f));
  });
  tigon::rope_fwd(x_tail.view(), {}, cos.view(), sin.view(), y_cpu.view(), {});
  StridedTensor y_gpu(DType::kBFloat16, x_tail.sizes());
  cuda_ok(cudaMemcpy(y_gpu.storage().data(), ys + (rows - tail) * dim,
                     static_cast<std::size_t>(tail * dim) * 2, cudaMemcpyDeviceToHost),
          "tail");
  expect_same_bits(y_gpu, y_cpu, "last rows");
  cudaFree(x);
  cudaFree(y);
}

INSTANTIATE_TEST_SUITE_P(Paths, RopeCudaHuge, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "scalar_64bit" : "vector"; });

TEST(RopeCudaEdge, DeviceMismatchIsNamed) {
  SKIP_WITHOUT_CUDA_DEVICE();
  StridedTensor q(DType::kFloat32, {1, 2, 3, 8}), cos(DType::kFloat32, {1, 1, 3, 8});
  DeviceCopy gq(q), gy(q);
  try {
    tigon::rope_fwd(gq.view(), {}, cos.view(), cos.view(), gy.view(), {});
    ADD_FAILURE() << "no error";
  } catch (const tigon::Error& e) {
    EXPECT_NE(std::string(e.what()).find("argument 'cos'"), std::string::npos) << e.what();
  }
}

}  // namespace
