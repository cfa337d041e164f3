// GPU tests of the fused linear cross-entropy: the float32 accumulation of a 16-bit dW in place
// (bit for bit the float32 dW of the same GEMMs rounded once, for odd and even V and sizes whose
// in-place narrowing runs many uneven rounds); reduction none's backward with a per-row upstream
// and the token scale (with use_token_scaling) in every reduction against the CPU backend, on the
// vector and scalar row paths and the slice kernel, bitwise run to run; and its predictions and
// token accuracy on logits that every GEMM computes exactly (small integers, many ties), equal to
// the CPU backend's and to a brute-force argmax, for the slice kernel (one and two CTAs a row) and
// the row kernel. Without a CUDA device every test reports SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
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
using tigon::Reduction;
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

// A problem run on either backend: loss, and the gradients as floats.
struct Flce {
  std::int64_t n, h, v;
  DType dtype;
  HostTensor x, w;
  std::vector<float> bias, token_scale;
  std::vector<std::int64_t> y;
  tigon::FusedLinearCrossEntropyParams params;

  Flce(std::int64_t n_, std::int64_t h_, std::int64_t v_, DType d)
      : n(n_), h(h_), v(v_), dtype(d), x(d, {n_, h_}), w(d, {v_, h_}) {
    std::mt19937 rng(static_cast<unsigned>(v_ + 3 * h_));
    x.fill_normal(rng);
    w.fill_normal(rng, 0.0f, 0.3f);
    std::normal_distribution<float> nd;
    std::uniform_real_distribution<float> u(0.0f, 2.0f);
    for (std::int64_t j = 0; j < v; ++j) bias.push_back(nd(rng));
    std::uniform_int_distribution<std::int64_t> cls(0, v - 1);
    for (std::int64_t i = 0; i < n; ++i) {
      y.push_back(i % 7 == 3 ? -100 : cls(rng));
      token_scale.push_back(i % 11 == 5 ? -0.5f : u(rng));
    }
  }

  std::int64_t loss_numel() const { return params.ce.reduction == Reduction::kNone ? n : 1; }

  struct Result {
    std::vector<float> loss, dx, dw, db;
  };

  // The forward with gradients, or (with `upstream`) without them and then the backward.
  Result run(Device device, bool scaled, const std::vector<float>* upstream) {
    const bool cuda = device.type == tigon::DeviceType::kCUDA;
    std::vector<DeviceBuffer> keep;
    auto put = [&](TensorView t, const void* host, std::size_t bytes) {
      if (!cuda) return t;
      keep.emplace_back(host, bytes);
      t.data = keep.back().data();
      t.device = device;
      return t;
    };
    auto flat = [&](void* p, DType d, std::int64_t count) {
      return put(TensorView::contiguous(p, d, {count}), p, count * tigon::element_size(d));
    };
    tigon::FusedLinearCrossEntropyInputs in;
    in.hidden = put(x.view(), x.bytes(), n * h * tigon::element_size(dtype));
    in.weight = put(w.view(), w.bytes(), v * h * tigon::element_size(dtype));
    in.bias = flat(bias.data(), DType::kFloat32, v);
    in.target = flat(y.data(), DType::kInt64, n);
    if (scaled) in.token_scale = flat(token_scale.data(), DType::kFloat32, n);
    Result r;
    r.loss.assign(loss_numel(), 0.0f);
    HostTensor dx(dtype, {n, h}), dw(DType::kFloat32, {v, h});
    r.db.assign(v, 0.0f);
    const std::size_t out_begin = keep.size();
    const TensorView loss = flat(r.loss.data(), DType::kFloat32, loss_numel());
    tigon::FusedLinearCrossEntropyGrads g{
        put(dx.view(), dx.bytes(), n * h * tigon::element_size(dtype)),
        put(dw.view(), dw.bytes(), v * h * 4), flat(r.db.data(), DType::kFloat32, v)};
    std::vector<float> up = upstream ? *upstream : std::vector<float>{};
    const TensorView grad_loss =
        upstream ? flat(up.data(), DType::kFloat32, static_cast<std::int64_t>(up.size()))
                 : TensorView{};
    const std::size_t bytes = tigon::fused_linear_cross_entropy_workspace_size(params, in, g);
    std::vector<unsigned char> host_ws(cuda ? 0 : bytes);
    DeviceBuffer dev_ws(cuda ? bytes : 0);
    const Workspace ws{cuda ? dev_ws.data() : host_ws.data(), bytes};
    if (upstream) {
      tigon::fused_linear_cross_entropy(params, in, {loss}, {}, ws);
      tigon::fused_linear_cross_entropy_bwd(params, in, grad_loss, g, ws);
    } else {
      tigon::fused_linear_cross_entropy(params, in, {loss}, g, ws);
    }
    if (cuda) {
      tigon::testing::cuda_ok(cudaDeviceSynchronize(), "sync");
      keep[out_begin].download(r.loss.data(), r.loss.size() * 4);
      keep[out_begin + 1].download(dx.bytes(), n * h * tigon::element_size(dtype));
      keep[out_begin + 2].download(dw.bytes(), v * h * 4);
      keep[out_begin + 3].download(r.db.data(), r.db.size() * 4);
    }
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < h; ++k) r.dx.push_back(dx.get(i, k));
    for (std::int64_t j = 0; j < v; ++j)
      for (std::int64_t k = 0; k < h; ++k) r.dw.push_back(dw.get(j, k));
    return r;
  }
};

// |got - want| <= tol * max |want| elementwise.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (float v : want) scale = std::max(scale, double(std::abs(v)));
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * scale + 1e-30) << what << " at " << i;
  }
}

void expect_same_as_cpu(Flce& f, bool scaled, const std::vector<float>* upstream,
                        const std::string& what) {
  const auto want = f.run(Device{}, scaled, upstream);
  const auto got = f.run(Device::cuda(0), scaled, upstream);
  const double tol = f.dtype == DType::kFloat32 ? 1e-4 : 3e-2;
  expect_close(got.loss, want.loss, f.dtype == DType::kFloat32 ? 1e-5 : 1e-2, what + " loss");
  expect_close(got.dx, want.dx, tol, what + " dx");
  expect_close(got.dw, want.dw, tol, what + " dw");
  expect_close(got.db, want.db, tol, what + " db");
  const auto again = f.run(Device::cuda(0), scaled, upstream);
  EXPECT_EQ(again.dx, got.dx) << what << ": bitwise run to run";
  EXPECT_EQ(again.dw, got.dw) << what;
  EXPECT_EQ(again.loss, got.loss) << what;
}

// V = 1000: two-pass row kernel or slices by dtype; 1001: the scalar path; 32000: slices in
// clusters. Plain rows (the per-row upstream alone takes the non-plain kernels) and all options.
TEST(FusedLinearCrossEntropyCuda, ReductionNoneBackwardMatchesTheCpuBackend) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (DType d : {DType::kFloat32, DType::kBFloat16})
    for (std::int64_t v : {1000, 1001, 32000})
      for (int options = 0; options < 2; ++options)
        for (int scaled = 0; scaled < 3; ++scaled) {
          Flce f(300, 64, v, d);
          f.params.ce.reduction = Reduction::kNone;
          f.params.chunk_rows = 128;
          if (options) {
            f.params.ce.label_smoothing = 0.1f;
            f.params.ce.lse_square_scale = 1e-3f;
            f.params.ce.softcap = 20.0f;
          }
          f.params.use_token_scaling = scaled == 2;
          std::vector<float> g(f.n);
          std::mt19937 rng(static_cast<unsigned>(v));
          std::normal_distribution<float> nd;
          for (float& x : g) x = nd(rng);
          g[1] = 0.0f;
          expect_same_as_cpu(f, scaled > 0, &g,
                             std::string(tigon::dtype_name(d)) + " V=" + std::to_string(v) +
                                 " options=" + std::to_string(options) +
                                 " scaled=" + std::to_string(scaled));
        }
}

TEST(FusedLinearCrossEntropyCuda, TokenScaleInEveryReductionMatchesTheCpuBackend) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (DType d : {DType::kFloat32, DType::kBFloat16})
    for (Reduction red : {Reduction::kNone, Reduction::kSum, Reduction::kMean})
      for (bool by_prob : {false, true}) {
        Flce f(300, 64, 32000, d);
        f.params.ce.reduction = red;
        f.params.ce.label_smoothing = 0.05f;
        f.params.chunk_rows = 96;
        f.params.use_token_scaling = by_prob;
        const std::string what = std::string(tigon::dtype_name(d)) + " " +
                                 tigon::reduction_name(red) + (by_prob ? " p_y" : "");
        expect_same_as_cpu(f, true, nullptr, what);
        if (red == Reduction::kNone) continue;
        const std::vector<float> g{0.75f};
        expect_same_as_cpu(f, true, &g, what + " backward");
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
