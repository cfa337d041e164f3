// GPU tests of the cross-entropy CUDA backend against the CPU backend (the oracle, itself tested
// against float64) on the same inputs: every option, dtypes, vector and scalar paths (odd vocab,
// unaligned and strided rows), in-place gradients, the recompute backward with a per-row upstream,
// scale_grad, all-ignored batches, large rows, and bitwise determinism run to run; the one-read
// slice kernel (clusters of 1-8 CTAs a row) at and around its size thresholds, with every option,
// and a check that it is the path taken; the predictions and token accuracy on every one of those
// shapes, with ties within and across CTAs, NaN rows and softcap-saturated ties. Without a CUDA
// device every test reports SKIPPED (but the slice planner's, which needs none).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cpp/host_tensor.h"
#include "cuda/common/device_properties.h"
#include "cuda/cross_entropy/slice_plan.h"
#include "cuda/cross_entropy/steps.h"
#include "cuda/cuda_test_support.h"
#include "ops/cross_entropy_args.h"
#include "tigon/tigon.h"

namespace {

using tigon::CrossEntropyInputs;
using tigon::CrossEntropyParams;
using tigon::Device;
using tigon::DType;
using tigon::Reduction;
using tigon::TensorView;
using tigon::Workspace;
using tigon::testing::DeviceBuffer;
using tigon::testing::epsilon_of;
using tigon::testing::HostTensor;

TensorView on(TensorView v, void* base_dev, const void* base_host) {
  v.data = static_cast<char*>(base_dev) +
           (static_cast<const char*>(v.data) - static_cast<const char*>(base_host));
  v.device = Device::cuda(0);
  return v;
}

TensorView vec(void* data, DType dtype, std::int64_t n, Device d) {
  return TensorView::contiguous(data, dtype, {n}, d);
}

struct Case {
  std::string name;
  CrossEntropyParams p;
  DType dtype = DType::kBFloat16;
  std::int64_t n = 13, v = 1000, row_stride = -1;
  int misalign = 0;
  bool weighted = false;
  float divisor = 0;
  bool all_ignored = false;
  std::vector<std::int64_t> targets;  // targets of the first non-ignored rows (else random)
  int cluster = -1;  // expected slice-kernel cluster on sm_90 (0: the row kernel; -1: unchecked)
  bool nan_after_neg_inf = false;  // row 1 starts with seven -inf logits, then a NaN
  bool ties = false;               // rows 1, 2, 3, 5 with the argmax cases of TieClasses
};

// Where the deliberate argmax cases put their classes: t0 in the first slice of a row, t1 and t2
// in the last (for clusters of two CTAs, the second CTA).
struct TieClasses {
  std::int64_t t0, t1, t2;
  explicit TieClasses(std::int64_t v)
      : t0(std::min<std::int64_t>(5, v - 3)), t1(v - v / 4), t2(v - 1) {}
};

struct Outputs {
  std::vector<float> loss, z, lse, accuracy;
  std::vector<std::int64_t> predicted;
  HostTensor grad;
  Outputs(DType d, std::int64_t n, std::int64_t v, std::int64_t stride) : grad(d, {n, v}, stride) {}
};

class Problem {
 public:
  explicit Problem(const Case& c) : c_(c), x_(c.dtype, {c.n, c.v}, c.row_stride) {
    std::mt19937 rng(7);
    x_.fill_normal(rng, 0.0f, 3.0f);
    std::uniform_int_distribution<std::int64_t> cls(0, c.v - 1);
    for (std::int64_t i = 0; i < c.n; ++i) y_.push_back(cls(rng));
    for (std::int64_t i = 0, t = 0; i < c.n && t < static_cast<std::int64_t>(c.targets.size());
         ++i) {
      if (i % 4 != 0) y_[i] = c.targets[t++];
    }
    for (std::int64_t i = 0; i < c.n; i += 4) y_[i] = c.p.ignore_index;
    if (c.all_ignored) y_.assign(c.n, c.p.ignore_index);
    std::uniform_real_distribution<float> u(0.2f, 2.0f);
    for (std::int64_t j = 0; c.weighted && j < c.v; ++j) w_.push_back(u(rng));
    if (c.nan_after_neg_inf) {
      for (std::int64_t j = 0; j < 7; ++j) set_logit(1, j, -INFINITY);
      set_logit(1, 7, NAN);
    }
    if (c.ties) add_ties();
  }

  // Row 1: a three-way tie (t0 wins; a hit). Row 2: a tie within the last slice (t1 wins; the
  // target t2 misses). Row 3: NaNs at t2 and t1 after a huge t0 (t1 wins; a hit). Row 5: t0 and
  // t1 equal once soft-capped (tanh saturates; else t1 wins), the target t0.
  void add_ties() {
    const TieClasses t(c_.v);
    const auto row = [&](std::int64_t i, std::int64_t target, auto&& set) {
      if (i >= c_.n) return;
      set(i);
      if (!c_.all_ignored) y_[i] = target;
    };
    row(1, t.t0, [&](std::int64_t i) {
      for (std::int64_t j : {t.t0, t.t1, t.t2}) set_logit(i, j, 40.0f);
    });
    row(2, t.t2, [&](std::int64_t i) {
      for (std::int64_t j : {t.t1, t.t2}) set_logit(i, j, 40.0f);
    });
    row(3, t.t1, [&](std::int64_t i) {
      set_logit(i, t.t0, 1e4f);
      set_logit(i, t.t2, NAN);
      set_logit(i, t.t1, NAN);
    });
    row(5, t.t0, [&](std::int64_t i) {
      set_logit(i, t.t0, 5e3f);
      set_logit(i, t.t1, 1e4f);
    });
  }

  // Logit (i, j) as the kernels see it: of the view shifted by c.misalign elements.
  void set_logit(std::int64_t i, std::int64_t j, float v) { x_.set(i, j + c_.misalign, v); }

  std::int64_t loss_n() const { return c_.p.reduction == Reduction::kNone ? c_.n : 1; }

  CrossEntropyInputs host_inputs(HostTensor& x) {
    CrossEntropyInputs in;
    in.logits = x.view(c_.misalign);
    in.target = vec(y_.data(), DType::kInt64, c_.n, Device::cpu());
    if (c_.weighted) in.weight = vec(w_.data(), DType::kFloat32, c_.v, Device::cpu());
    if (c_.divisor > 0) in.divisor = vec(&div_, DType::kFloat32, 1, Device::cpu());
    div_ = c_.divisor;
    return in;
  }

  // Forward (+ fused gradient unless !grad, + predictions and accuracy if predict) on the CPU.
  Outputs cpu(bool grad, bool predict = false) {
    HostTensor x = x_;
    Outputs o(c_.dtype, c_.n, c_.v, c_.row_stride);
    o.loss.assign(loss_n(), 0);
    o.z.assign(loss_n(), 0);
    o.lse.assign(c_.n, 0);
    o.accuracy.assign(loss_n(), -1.0f);
    o.predicted.assign(c_.n, -7);
    const CrossEntropyInputs in = host_inputs(x);
    std::vector<std::uint8_t> ws(tigon::cross_entropy_fwd_workspace_size(c_.p, in) + 16);
    tigon::CrossEntropyOutputs out{vec(o.loss.data(), DType::kFloat32, loss_n(), {}),
                                   vec(o.z.data(), DType::kFloat32, loss_n(), {})};
    if (predict) {
      out.predicted = vec(o.predicted.data(), DType::kInt64, c_.n, {});
      out.accuracy = vec(o.accuracy.data(), DType::kFloat32, loss_n(), {});
    }
    tigon::cross_entropy_fwd(c_.p, in, out, vec(o.lse.data(), DType::kFloat32, c_.n, {}),
                             grad ? o.grad.view(c_.misalign) : TensorView{},
                             Workspace{ws.data(), ws.size()});
    return o;
  }

  // The same on the GPU; in_place writes the gradient into the logits.
  Outputs gpu(bool grad, bool in_place, bool predict = false) {
    HostTensor x = x_;
    Outputs o(c_.dtype, c_.n, c_.v, c_.row_stride);
    o.loss.assign(loss_n(), 0);
    o.z.assign(loss_n(), 0);
    o.lse.assign(c_.n, 0);
    o.accuracy.assign(loss_n(), -1.0f);
    o.predicted.assign(c_.n, -7);
    const CrossEntropyInputs hin = host_inputs(x);
    DeviceBuffer dx(x.bytes(), xbytes()), dy(y_.data(), 8 * c_.n), dw(w_.data(), 4 * w_.size()),
        ddiv(&div_, 4), dloss(4 * loss_n()), dz(4 * loss_n()), dlse(4 * c_.n), dgrad(xbytes()),
        dpred(8 * c_.n), dacc(4 * loss_n());
    CrossEntropyInputs in;
    in.logits = on(hin.logits, dx.data(), x.bytes());
    in.target = vec(dy.data(), DType::kInt64, c_.n, Device::cuda(0));
    if (c_.weighted) in.weight = vec(dw.data(), DType::kFloat32, c_.v, Device::cuda(0));
    if (c_.divisor > 0) in.divisor = vec(ddiv.data(), DType::kFloat32, 1, Device::cuda(0));
    DeviceBuffer ws(tigon::cross_entropy_fwd_workspace_size(c_.p, in));
    TensorView g{};
    if (grad) g = in_place ? in.logits : on(o.grad.view(c_.misalign), dgrad.data(), o.grad.bytes());
    tigon::CrossEntropyOutputs out{vec(dloss.data(), DType::kFloat32, loss_n(), Device::cuda(0)),
                                   vec(dz.data(), DType::kFloat32, loss_n(), Device::cuda(0))};
    if (predict) {
      out.predicted = vec(dpred.data(), DType::kInt64, c_.n, Device::cuda(0));
      out.accuracy = vec(dacc.data(), DType::kFloat32, loss_n(), Device::cuda(0));
    }
    tigon::cross_entropy_fwd(c_.p, in, out,
                             vec(dlse.data(), DType::kFloat32, c_.n, Device::cuda(0)), g,
                             Workspace{ws.data(), ws.bytes()});
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (predict) {
      dpred.download(o.predicted.data(), 8 * c_.n);
      dacc.download(o.accuracy.data(), 4 * loss_n());
    }
    dloss.download(o.loss.data(), 4 * loss_n());
    dz.download(o.z.data(), 4 * loss_n());
    dlse.download(o.lse.data(), 4 * c_.n);
    if (grad) (in_place ? dx : dgrad).download(o.grad.bytes(), xbytes());
    return o;
  }

  // The slice-kernel plan forward_rows uses for this problem's device layout (gradient out of
  // place; in place has the same alignment).
  tigon::cuda::cross_entropy::SlicePlan slice_plan() const {
    const std::size_t e = tigon::element_size(c_.dtype);
    DeviceBuffer dx(xbytes()), dgrad(xbytes());
    tigon::detail::CrossEntropyArgs a;
    a.rows = c_.n;
    a.vocab = c_.v;
    a.logits_dtype = c_.dtype;
    a.logits = static_cast<char*>(dx.data()) + c_.misalign * e;
    a.logits_row_stride = c_.row_stride < 0 ? c_.v : c_.row_stride;
    a.grad = static_cast<char*>(dgrad.data()) + c_.misalign * e;
    a.grad_row_stride = a.logits_row_stride;
    return tigon::cuda::cross_entropy::forward_slice_plan(a, 0);
  }

  // Recompute backward with upstream g on the GPU (per row for kNone).
  HostTensor gpu_backward(const std::vector<float>& lse, const std::vector<float>& up) {
    HostTensor x = x_;
    HostTensor out(c_.dtype, {c_.n, c_.v}, c_.row_stride);
    const CrossEntropyInputs hin = host_inputs(x);
    DeviceBuffer dx(x.bytes(), xbytes()), dy(y_.data(), 8 * c_.n), dw(w_.data(), 4 * w_.size()),
        ddiv(&div_, 4), dlse(lse.data(), 4 * c_.n), dup(up.data(), 4 * up.size()), dgrad(xbytes());
    CrossEntropyInputs in;
    in.logits = on(hin.logits, dx.data(), x.bytes());
    in.target = vec(dy.data(), DType::kInt64, c_.n, Device::cuda(0));
    if (c_.weighted) in.weight = vec(dw.data(), DType::kFloat32, c_.v, Device::cuda(0));
    if (c_.divisor > 0) in.divisor = vec(ddiv.data(), DType::kFloat32, 1, Device::cuda(0));
    DeviceBuffer ws(tigon::cross_entropy_bwd_workspace_size(c_.p, in));
    tigon::cross_entropy_bwd(
        c_.p, in, vec(dlse.data(), DType::kFloat32, c_.n, Device::cuda(0)),
        vec(dup.data(), DType::kFloat32, static_cast<std::int64_t>(up.size()), Device::cuda(0)),
        on(out.view(c_.misalign), dgrad.data(), out.bytes()), Workspace{ws.data(), ws.bytes()});
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    dgrad.download(out.bytes(), xbytes());
    return out;
  }

  HostTensor cpu_backward(const std::vector<float>& lse, std::vector<float> up) {
    HostTensor x = x_;
    HostTensor out(c_.dtype, {c_.n, c_.v}, c_.row_stride);
    const CrossEntropyInputs in = host_inputs(x);
    std::vector<float> l = lse;
    tigon::cross_entropy_bwd(
        c_.p, in, vec(l.data(), DType::kFloat32, c_.n, {}),
        vec(up.data(), DType::kFloat32, static_cast<std::int64_t>(up.size()), {}),
        out.view(c_.misalign), Workspace{});
    return out;
  }

 private:
  std::size_t xbytes() const {
    return static_cast<std::size_t>((c_.n - 1) * (c_.row_stride < 0 ? c_.v : c_.row_stride) + c_.v +
                                    c_.misalign) *
               tigon::element_size(c_.dtype) +
           16;
  }
  Case c_;
  HostTensor x_;
  std::vector<std::int64_t> y_;
  std::vector<float> w_;
  float div_ = 1;
};

void expect_close(const std::vector<float>& want, const std::vector<float>& got, double rtol,
                  const char* what) {
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-6 + rtol * std::abs(want[i])) << what << "[" << i << "]";
}

// Within two roundings of the gradient dtype (CPU and GPU exp/log differ by ulps).
void expect_grad_close(const HostTensor& want, const HostTensor& got, DType dtype, double floor) {
  const double tol = 2 * epsilon_of(dtype) + 1e-5;
  for (std::int64_t i = 0; i < want.rows(); ++i)
    for (std::int64_t j = 0; j < want.hidden(); ++j)
      ASSERT_NEAR(got.get(i, j), want.get(i, j), tol * std::abs(want.get(i, j)) + floor)
          << "row " << i << " col " << j;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  auto add = [&](std::string name, auto&& edit) {
    for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      Case c;
      c.name = name + "_" + tigon::dtype_name(d);
      c.dtype = d;
      edit(c);
      out.push_back(c);
    }
  };
  add("mean", [](Case&) {});
  add("sum_divisor", [](Case& c) {
    c.p.reduction = Reduction::kSum;
    c.divisor = 5;
  });
  add("none", [](Case& c) { c.p.reduction = Reduction::kNone; });
  add("weight_smoothing", [](Case& c) {
    c.weighted = true;
    c.p.label_smoothing = 0.1f;
  });
  add("zloss_softcap", [](Case& c) {
    c.p.lse_square_scale = 1e-3f;
    c.p.softcap = 5.0f;
  });
  add("all_options_none", [](Case& c) {
    c.p.reduction = Reduction::kNone;
    c.weighted = true;
    c.p.label_smoothing = 0.2f;
    c.p.lse_square_scale = 1e-4f;
    c.p.softcap = 8.0f;
  });
  add("odd_vocab_unaligned_strided", [](Case& c) {
    c.v = 997;
    c.row_stride = 1003;
    c.misalign = 1;
  });
  add("large_rows", [](Case& c) {
    c.n = 5;
    c.v = 128256;
  });
  add("many_rows", [](Case& c) {
    c.n = 1000;
    c.v = 64;
  });
  add("all_ignored", [](Case& c) { c.all_ignored = true; });
  return out;
}

class CrossEntropyCuda : public ::testing::TestWithParam<Case> {};

TEST_P(CrossEntropyCuda, MatchesCpuBackend) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Case& c = GetParam();
  Problem pr(c);
  const Outputs want = pr.cpu(true);
  const Outputs got = pr.gpu(true, false);
  expect_close(want.loss, got.loss, 2e-5, "loss");
  expect_close(want.z, got.z, 2e-5, "z_loss");
  expect_close(want.lse, got.lse, 1e-6, "lse");
  const double floor = 1e-7 / static_cast<double>(c.n);
  expect_grad_close(want.grad, got.grad, c.dtype, floor);

  // In place, and again: bitwise identical to the out-of-place run (determinism).
  const Outputs inplace = pr.gpu(true, true);
  EXPECT_EQ(inplace.loss, got.loss);
  for (std::int64_t i = 0; i < c.n; ++i)
    for (std::int64_t j = 0; j < c.v; ++j)
      ASSERT_EQ(inplace.grad.bits(i, j, c.misalign), got.grad.bits(i, j, c.misalign))
          << i << "," << j;
  const Outputs again = pr.gpu(false, false);
  EXPECT_EQ(again.loss, got.loss);
  EXPECT_EQ(again.lse, got.lse);
  const Outputs twice = pr.gpu(true, false);
  EXPECT_EQ(twice.loss, got.loss);
  EXPECT_EQ(twice.z, got.z);
  for (std::int64_t i = 0; i < c.n; ++i)
    for (std::int64_t j = 0; j < c.v; ++j)
      ASSERT_EQ(twice.grad.bits(i, j, c.misalign), got.grad.bits(i, j, c.misalign))
          << i << "," << j;

  // The kernel the forward took (clusters need an sm_90 device; c.cluster is the slice plan's,
  // rows past kRowKernelAboveCluster run the row kernel).
  if (c.cluster >= 0 && tigon::cuda::device_properties(0).clusters) {
    EXPECT_EQ(pr.slice_plan().cluster,
              c.cluster > tigon::cuda::cross_entropy::kRowKernelAboveCluster ? 0 : c.cluster);
  }

  // Recompute backward with a non-uniform upstream (per row for none).
  std::vector<float> up(c.p.reduction == Reduction::kNone ? c.n : 1);
  for (std::size_t i = 0; i < up.size(); ++i) up[i] = 0.25f + 0.5f * static_cast<float>(i % 5);
  expect_grad_close(pr.cpu_backward(want.lse, up), pr.gpu_backward(got.lse, up), c.dtype, floor);
}

// Predictions and token accuracy (the rows' argmax in the kernels with options: a runtime flag
// of the row and slice kernels), with the deliberate cases of Problem::add_ties: equal to the
// CPU's bit for bit, with and without the gradient, in place; the loss within the tolerances of
// MatchesCpuBackend (the kernel with options computes it).
TEST_P(CrossEntropyCuda, PredictionsMatchCpuBackend) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Case c = GetParam();
  c.ties = true;
  Problem pr(c);
  const Outputs want = pr.cpu(true, true);
  if (!c.all_ignored && c.n > 3) {  // the CPU itself, on the deliberate rows
    const TieClasses t(c.v);
    const bool capped = c.p.softcap > 0.0f;
    EXPECT_EQ(want.predicted[1], t.t0);
    EXPECT_EQ(want.predicted[2], t.t1);
    EXPECT_EQ(want.predicted[3], t.t1);
    if (c.n > 5) EXPECT_EQ(want.predicted[5], capped ? t.t0 : t.t1);
  }
  for (bool grad : {true, false}) {
    for (bool in_place : {false, true}) {
      if (in_place && !grad) continue;
      const Outputs got = pr.gpu(grad, in_place, true);
      const std::string what =
          std::string(grad ? "with" : "without") + " gradient" + (in_place ? ", in place" : "");
      EXPECT_EQ(got.predicted, want.predicted) << what;
      EXPECT_EQ(got.accuracy, want.accuracy) << what;
      ASSERT_EQ(got.loss.size(), want.loss.size());
      for (std::size_t i = 0; i < want.loss.size(); ++i) {
        if (std::isnan(want.loss[i])) {
          EXPECT_TRUE(std::isnan(got.loss[i])) << what << " loss[" << i << "]";
        } else {
          EXPECT_NEAR(got.loss[i], want.loss[i], 1e-6 + 2e-5 * std::abs(want.loss[i]))
              << what << " loss[" << i << "]";
        }
      }
    }
  }
  const Outputs again = pr.gpu(true, false, true);  // run to run
  EXPECT_EQ(pr.gpu(true, false, true).predicted, again.predicted);
}

INSTANTIATE_TEST_SUITE_P(Gpu, CrossEntropyCuda, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// The one-read slice kernel: one CTA a row up to 64 KB rows, then clusters of 2, 4, 8 CTAs with
// slices <= 64 KB (three CTAs per SM), 8 CTAs up to 100 KB slices, the row kernel past that.
// Shapes on both sides of each threshold, rows = 1, more rows than resident clusters (the
// persistent grid's next-row prefetch), targets at slice boundaries, every option.
std::vector<Case> slice_cases() {
  std::vector<Case> out;
  auto add = [&](std::string name, DType d, std::int64_t n, std::int64_t v, int cluster,
                 auto&& edit) {
    Case c;
    c.name = name + "_" + tigon::dtype_name(d);
    c.dtype = d;
    c.n = n;
    c.v = v;
    c.cluster = cluster;
    edit(c);
    out.push_back(c);
  };
  const auto none = [](Case&) {};
  const DType bf16 = DType::kBFloat16, fp16 = DType::kFloat16, fp32 = DType::kFloat32;
  add("v32000", bf16, 7, 32000, 1, none);
  add("v32000_rows1000", bf16, 1000, 32000, 1, none);
  add("v32768_one_cta", bf16, 5, 32768, 1, none);
  add("v32776_two", bf16, 5, 32776, 2, [](Case& c) { c.targets = {16391, 16392, 0, 32775}; });
  add("v32776_rows300", bf16, 300, 32776, 2, none);
  add("v65536_two", bf16, 5, 65536, 2, none);
  add("v65544_four", bf16, 5, 65544, 4, none);
  add("v131072_four", bf16, 5, 131072, 4, none);
  add("v131080_eight", bf16, 5, 131080, 8, none);
  // V = 128256: slices of 32064 elements; targets at the boundaries.
  for (DType d : {bf16, fp16}) {
    add("v128256", d, 6, 128256, 4, [](Case& c) { c.targets = {32063, 32064, 96192, 128255, 0}; });
  }
  add("v128256_rows1", bf16, 1, 128256, 4, none);
  add("v128256_rows300", bf16, 300, 128256, 4, none);
  add("v128256", fp32, 6, 128256, 8, [](Case& c) { c.targets = {16031, 16032, 112224, 128255}; });
  add("v128256_rows120", fp32, 120, 128256, 8, none);
  add("v256000", bf16, 3, 256000, 8, none);
  add("v204800_eight_100k", fp32, 3, 204800, 8, none);
  add("v204808_row_kernel", fp32, 3, 204808, 0, none);
  add("v300000_row_kernel", fp32, 2, 300000, 0, none);
  add("v128256_odd_stride_row_kernel", bf16, 3, 128256, 0, [](Case& c) { c.row_stride = 128259; });
  add("v128256_unaligned_row_kernel", bf16, 3, 128256, 0, [](Case& c) { c.misalign = 1; });
  for (DType d : {bf16, fp32}) {
    add("v128256_all_options_none", d, 9, 128256, d == bf16 ? 4 : 8, [](Case& c) {
      c.p.reduction = Reduction::kNone;
      c.weighted = true;
      c.p.label_smoothing = 0.2f;
      c.p.lse_square_scale = 1e-4f;
      c.p.softcap = 8.0f;
      c.targets = {32064, 128255};
    });
    add("v128256_weight_smoothing", d, 6, 128256, d == bf16 ? 4 : 8, [](Case& c) {
      c.weighted = true;
      c.p.label_smoothing = 0.1f;
    });
    add("v128256_zloss_softcap_sum", d, 6, 128256, d == bf16 ? 4 : 8, [](Case& c) {
      c.p.lse_square_scale = 1e-3f;
      c.p.softcap = 30.0f;
      c.p.reduction = Reduction::kSum;
      c.divisor = 5;
    });
    add("v128256_ignore_index_in_vocab", d, 6, 128256, d == bf16 ? 4 : 8,
        [](Case& c) { c.p.ignore_index = 7; });
    add("v128256_all_ignored", d, 5, 128256, d == bf16 ? 4 : 8,
        [](Case& c) { c.all_ignored = true; });
  }
  add("v32776_all_options_none", bf16, 5, 32776, 2, [](Case& c) {
    c.p.reduction = Reduction::kNone;
    c.weighted = true;
    c.p.label_smoothing = 0.2f;
    c.p.lse_square_scale = 1e-4f;
    c.p.softcap = 8.0f;
  });
  return out;
}

INSTANTIATE_TEST_SUITE_P(Slices, CrossEntropyCuda, ::testing::ValuesIn(slice_cases()),
                         [](const auto& info) { return info.param.name; });

// A NaN logit makes its row's loss NaN on both backends, also where it follows only -inf logits
// (the online max is still -inf when it arrives), in the row kernel and in the slice kernel.
// Rows over two CTAs give the same bits through a cluster and, as on a GPU without clusters
// (an A100), through the slice results in global memory (slice_pass.h): per-row losses, lse,
// gradient, predictions and hits, forced here on this GPU for plain rows, every option, and
// predictions.
TEST(CrossEntropyCudaSlices, WithoutClustersGiveTheClusterBits) {
  SKIP_WITHOUT_CUDA_DEVICE();
  if (!tigon::cuda::device_properties(0).clusters) GTEST_SKIP() << "needs sm_90 clusters";
  const struct {
    DType dtype;
    std::int64_t v;
  } shapes[] = {{DType::kBFloat16, 40000},
                {DType::kBFloat16, 65536},
                {DType::kFloat32, 20000},
                {DType::kFloat32, 32768}};
  for (const auto& shape : shapes)
    for (int options = 0; options < 3; ++options)  // plain, every option, predictions
      for (bool grad : {false, true}) {
        const std::int64_t n = 37, v = shape.v;
        const std::string what = std::string(tigon::dtype_name(shape.dtype)) + " V " +
                                 std::to_string(v) + " options " + std::to_string(options) +
                                 (grad ? " grad" : "");
        SCOPED_TRACE(what);
        std::mt19937 rng(static_cast<unsigned>(v + options));
        HostTensor x(shape.dtype, {n, v});
        x.fill_normal(rng, 0.0f, 2.0f);
        std::vector<std::int64_t> y(n);
        std::uniform_int_distribution<std::int64_t> cls(0, v - 1);
        for (std::int64_t i = 0; i < n; ++i) y[i] = i % 9 == 4 ? -100 : cls(rng);
        std::vector<float> w(v);
        std::uniform_real_distribution<float> u(0.5f, 1.5f);
        for (float& e : w) e = u(rng);
        const std::size_t xbytes = static_cast<std::size_t>(n * v) * tigon::element_size(x.dtype());
        DeviceBuffer dx(x.bytes(), xbytes), dy(y.data(), 8 * n), dw(w.data(), 4 * v);

        tigon::detail::CrossEntropyArgs a;
        a.params.reduction = Reduction::kNone;
        if (options == 1) {
          a.params.label_smoothing = 0.1f;
          a.params.lse_square_scale = 1e-3f;
          a.params.softcap = 30.0f;
          a.weight = dw.data();
        }
        a.rows = n;
        a.vocab = v;
        a.logits = dx.data();
        a.logits_row_stride = v;
        a.logits_dtype = shape.dtype;
        a.target = static_cast<const std::int64_t*>(dy.data());
        const tigon::cuda::cross_entropy::SlicePlan plan =
            tigon::cuda::cross_entropy::forward_slice_plan(a, 0);
        ASSERT_EQ(plan.cluster, 2) << "the case must split its rows over two CTAs";

        std::vector<std::vector<std::uint8_t>> results[2];
        for (const bool clusters : {true, false}) {
          DeviceBuffer loss(4 * n), z(4 * n), lse(4 * n), pred(8 * n), acc(4 * n), g(xbytes);
          g.fill(0xA5);
          a.loss = loss.floats();
          a.z_loss = z.floats();
          a.lse = lse.floats();
          a.predicted = options == 2 ? static_cast<std::int64_t*>(pred.data()) : nullptr;
          a.accuracy = options == 2 ? acc.floats() : nullptr;
          a.grad = grad ? g.data() : nullptr;
          a.grad_row_stride = v;
          // What a GPU without clusters needs: the slice results besides the rest.
          const std::size_t ws_bytes = 4 * (64 + 3 * n + v + n * tigon::detail::kSliceFloatsPerRow);
          DeviceBuffer ws(ws_bytes);
          a.workspace = ws.data();
          a.workspace_bytes = ws_bytes;
          tigon::cuda::cross_entropy::fwd_with_clusters(a, clusters, 0, nullptr);
          tigon::testing::cuda_ok(cudaDeviceSynchronize(), what.c_str());
          for (const DeviceBuffer* b : {&loss, &z, &lse, &pred, &acc, &g}) {
            std::vector<std::uint8_t> host(b->bytes());
            b->download(host.data(), host.size());
            results[clusters ? 0 : 1].push_back(std::move(host));
          }
        }
        const char* names[] = {"loss", "z_loss", "lse", "predicted", "accuracy", "gradient"};
        for (std::size_t k = 0; k < results[0].size(); ++k) {
          EXPECT_TRUE(results[0][k] == results[1][k]) << names[k] << " differs without clusters";
        }
      }
}

TEST(CrossEntropyCudaEdge, NanAfterNegativeInfinityGivesNan) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (std::int64_t v : {std::int64_t{1000}, std::int64_t{128256}}) {
    Case c;
    c.n = 3;
    c.v = v;
    c.p.reduction = Reduction::kNone;
    c.nan_after_neg_inf = true;
    Problem pr(c);
    for (bool grad : {false, true}) {
      const Outputs want = pr.cpu(grad), got = pr.gpu(grad, false);
      EXPECT_TRUE(std::isnan(want.loss[1])) << "V " << v;
      EXPECT_TRUE(std::isnan(got.loss[1])) << "V " << v << (grad ? " with" : " without") << " grad";
      EXPECT_EQ(got.loss[0], 0.0f);  // row 0 is ignored
      EXPECT_NEAR(got.loss[2], want.loss[2], 1e-5 * std::abs(want.loss[2]));
    }
  }
}

// The CUDA kernels index a row's classes in 32 bits: a larger vocabulary is refused by name before
// any kernel reads the logits (so a small buffer stands in for a 2 GB row here).
TEST(CrossEntropyCudaEdge, VocabularyAbove2To30IsRefused) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::int64_t v = (std::int64_t{1} << 30) + 8, zero = 0;
  DeviceBuffer logits(256), target(&zero, 8), loss(4), z(4), lse(4);
  tigon::CrossEntropyParams p;
  tigon::CrossEntropyInputs in;
  in.logits = TensorView::contiguous(logits.data(), DType::kBFloat16, {1, v}, Device::cuda(0));
  in.target = vec(target.data(), DType::kInt64, 1, Device::cuda(0));
  // The validation layer refuses it, already at the workspace query, and at the op itself.
  const auto expect_refused = [](const auto& call) {
    try {
      call();
      ADD_FAILURE() << "no error";
    } catch (const tigon::Error& e) {
      EXPECT_EQ(e.code(), tigon::ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("argument 'logits'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("2^30"), std::string::npos) << e.what();
    }
  };
  expect_refused([&] { tigon::cross_entropy_fwd_workspace_size(p, in); });
  DeviceBuffer ws(1024);
  expect_refused([&] {
    tigon::cross_entropy_fwd(p, in,
                             {vec(loss.data(), DType::kFloat32, 1, Device::cuda(0)),
                              vec(z.data(), DType::kFloat32, 1, Device::cuda(0))},
                             vec(lse.data(), DType::kFloat32, 1, Device::cuda(0)), TensorView{},
                             Workspace{ws.data(), ws.bytes()});
  });
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(CrossEntropyCudaEdge, ScaleGradSkipsOneAndScales) {
  SKIP_WITHOUT_CUDA_DEVICE();
  HostTensor g(DType::kBFloat16, {3, 37});
  std::mt19937 rng(3);
  g.fill_normal(rng);
  HostTensor want = g;
  DeviceBuffer dg(g.bytes(), 2 * 3 * 37 + 16);
  for (float s : {1.0f, -0.5f}) {
    DeviceBuffer ds(&s, 4);
    TensorView v = on(g.view(), dg.data(), g.bytes());
    tigon::cross_entropy_scale_grad(v, vec(ds.data(), DType::kFloat32, 1, Device::cuda(0)));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    HostTensor got = g;
    dg.download(got.bytes(), 2 * 3 * 37);
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t j = 0; j < 37; ++j) {
        const float w =
            tigon::math::round_to<tigon::math::BFloat16>(want.get(i, j) * (s == 1.0f ? 1.0f : s));
        ASSERT_EQ(got.get(i, j), w);
      }
  }
}

}  // namespace
