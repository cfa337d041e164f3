// kl_div / jsd / tvd on CUDA against the CPU backend: every op, dtype, reduction (kNone with a
// float32 and an input-dtype loss), log_target, beta (0 and 1 included), ignored rows, all rows
// ignored, no rows, vocabularies 37 (one partial group), 8193 (two segments), 32001 (odd,
// unaligned rows: the scalar path) and 128256, the fused forward gradient (also in place), the
// backward with upstream gradients. Every plan (16-byte and scalar access, grids of 1 and 7 CTAs
// and the device's) is forced and must give the default plan's bits, as must a second run.
//
// vs the CPU: the gradient of tvd and of kl_div without log_target (no exp or log) and tvd's kNone
// loss bitwise; other elements within one ulp of their dtype plus 1e-6 of their terms' magnitude
// (the device's expf / logf are not glibc's); reduced losses within 1e-5 of the sum of |terms|
// over the denominator (the sums run in another order).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpp/host_tensor.h"
#include "cpp/test_support.h"
#include "cuda/divergence/launch.h"
#include "cuda/divergence/plan.h"
#include "cuda_test_support.h"
#include "ops/divergence_args.h"
#include "tigon/tigon.h"

namespace {

using tigon::Device;
using tigon::DType;
using tigon::Reduction;
using tigon::TensorView;
using tigon::cuda::divergence::Access;
using tigon::cuda::divergence::Plan;
using tigon::testing::DeviceBuffer;
using tigon::testing::HostTensor;
using tigon::testing::ulp_at;

enum class Kind { kKlDiv, kJsd, kTvd };

struct Case {
  Kind kind;
  DType dtype;
  Reduction reduction;
  bool log_target = false;
  float beta = 0.5f;
  bool labels = false;
  DType none_dtype = DType::kFloat32;
};

struct Shape {
  std::vector<std::int64_t> sizes;
  bool padded;  // rows padded to 16-byte boundaries (the 16-byte path), else packed
};

std::string case_name(const Case& c) {
  const char* kinds[] = {"kl_div", "jsd", "tvd"};
  std::string s = std::string(kinds[static_cast<int>(c.kind)]) + "_" + tigon::dtype_name(c.dtype) +
                  "_" + tigon::reduction_name(c.reduction);
  if (c.kind == Kind::kKlDiv && c.log_target) s += "_logtarget";
  if (c.kind == Kind::kJsd) s += "_beta" + std::to_string(static_cast<int>(c.beta * 10));
  if (c.labels) s += "_labels";
  if (c.reduction == Reduction::kNone) s += std::string("_loss") + tigon::dtype_name(c.none_dtype);
  return s;
}

Reduction effective(const Case& c) {
  return c.kind == Kind::kJsd ? Reduction::kBatchMean : c.reduction;
}

// Elements whose CUDA and CPU values must have the same bits: no exp or log in them.
bool exact_grad(const Case& c) {
  return c.kind == Kind::kTvd || (c.kind == Kind::kKlDiv && !c.log_target);
}

std::int64_t padded_stride(std::int64_t v, std::int64_t extra) { return (v + 7) / 8 * 8 + extra; }

// The magnitude an element's float32 rounding error is relative to (for loss and gradient).
double magnitude(const Case& c, double x, double t) {
  switch (c.kind) {
    case Kind::kKlDiv:
      if (c.log_target) return std::exp(t) * (1 + std::fabs(t) + std::fabs(x));
      return std::fabs(t) * (1 + std::fabs(t == 0.0 ? 0.0 : std::log(t)) + std::fabs(x));
    case Kind::kJsd: return (std::exp(t) + std::exp(x)) * (2 + 2 * std::fabs(x) + 2 * std::fabs(t));
    case Kind::kTvd: return 0.5 * (std::fabs(x) + std::fabs(t));
  }
  return 0.0;
}

// A host tensor and its device copy (same row stride, same bytes).
struct Mirrored {
  HostTensor host;
  DeviceBuffer device;
  Mirrored(DType dtype, const std::vector<std::int64_t>& sizes, std::int64_t stride = -1)
      : host(dtype, sizes, stride), device(host.byte_count()) {}
  void upload() { device.upload(host.bytes(), host.byte_count()); }
  void download() { device.download(host.bytes(), host.byte_count()); }
  TensorView cpu_view() { return host.view(); }
  TensorView cuda_view() {
    TensorView v = host.view();
    v.data = device.data();
    v.device = Device::cuda(0);
    return v;
  }
  std::vector<unsigned char> device_bytes() const { return device.download(device.bytes()); }
};

class Problem {
 public:
  Problem(const Case& c, const Shape& shape, std::uint32_t seed)
      : c_(c),
        sizes_(shape.sizes),
        vocab_(shape.sizes.back()),
        padded_(shape.padded),
        input_(c.dtype, shape.sizes, shape.padded ? padded_stride(vocab_, 8) : vocab_),
        target_(c.dtype, shape.sizes, shape.padded ? padded_stride(vocab_, 16) : vocab_),
        grad_(c.dtype, shape.sizes, shape.padded ? padded_stride(vocab_, 24) : vocab_),
        loss_none_(c.none_dtype, shape.sizes, shape.padded ? padded_stride(vocab_, 0) : vocab_),
        upstream_none_(c.none_dtype, shape.sizes, shape.padded ? padded_stride(vocab_, 8) : vocab_),
        scalar_(DType::kFloat32, {1}),
        upstream_(DType::kFloat32, {1}),
        ws_(1) {
    rows_ = input_.host.rows();
    std::mt19937 rng(seed);
    fill_distribution(input_.host, rng, c.kind != Kind::kTvd);
    const bool target_log = c.kind == Kind::kJsd || (c.kind == Kind::kKlDiv && c.log_target);
    fill_distribution(target_.host, rng, target_log);
    if (c.kind == Kind::kKlDiv && !c.log_target && rows_ > 0 && vocab_ > 1) {
      target_.host.set(0, 1, 0.0f);
    }
    labels_.assign(static_cast<std::size_t>(rows_), 7);
    if (c.labels) {
      for (std::int64_t r = 0; r < rows_; r += 3) labels_[r] = -100;
    }
    std::uniform_real_distribution<float> up(-2.0f, 2.0f);
    for (std::int64_t r = 0; r < rows_; ++r)
      for (std::int64_t j = 0; j < vocab_; ++j) upstream_none_.host.set(r, j, up(rng));
    input_.upload();
    target_.upload();
    upstream_none_.upload();
    labels_device_ = DeviceBuffer(labels_.data(), labels_.size() * sizeof(std::int64_t));
  }

  void ignore_all() {
    labels_.assign(labels_.size(), -100);
    labels_device_.upload(labels_.data(), labels_.size() * sizeof(std::int64_t));
  }

  bool none() const { return effective(c_) == Reduction::kNone; }

  // The forward with its fused gradient, and the backward with upstream u (scalar reductions) or
  // the per-element upstream (kNone), on both backends; compared element by element.
  void check_against_cpu(float u) {
    // CPU.
    float cpu_loss = 0.0f;
    HostTensor cpu_grad(c_.dtype, sizes_), cpu_bwd(c_.dtype, sizes_);
    HostTensor cpu_loss_none(c_.none_dtype, sizes_);
    {
      tigon::DivergenceInputs in = cpu_inputs();
      std::vector<std::uint8_t> ws(workspace_size(in));
      const TensorView loss =
          none() ? cpu_loss_none.view() : TensorView::contiguous(&cpu_loss, DType::kFloat32, {1});
      call_fwd(in, loss, cpu_grad.view(), {ws.data(), ws.size()});
      const TensorView up =
          none() ? upstream_none_.cpu_view() : TensorView::contiguous(&u, DType::kFloat32, {1});
      call_bwd(in, up, cpu_bwd.view(), {ws.data(), ws.size()});
    }
    // CUDA: the default plan.
    run_cuda_forward();
    float gpu_loss = 0.0f;
    if (!none()) scalar_.device.download(&gpu_loss, sizeof(float));
    loss_none_.download();
    grad_.download();
    const HostTensor gpu_grad = grad_.host;
    const HostTensor gpu_loss_none = loss_none_.host;
    upstream_.host.set(0, 0, u);
    upstream_.upload();
    run_cuda_backward();
    grad_.download();
    const HostTensor& gpu_bwd = grad_.host;

    const double d = denominator();
    const double s = d != 0.0 ? 1.0 / d : 0.0;
    double mag_sum = 0.0;
    for (std::int64_t r = 0; r < rows_; ++r) {
      const bool ignored = c_.labels && labels_[r] == -100;
      for (std::int64_t j = 0; j < vocab_; ++j) {
        const double x = input_.host.get(r, j), t = target_.host.get(r, j);
        const double mag = ignored ? 0.0 : magnitude(c_, x, t);
        mag_sum += mag;
        const std::string at = " at (" + std::to_string(r) + ", " + std::to_string(j) + ")";
        const double fwd_scale = none() ? 1.0 : s;
        expect_close(c_.dtype, gpu_grad.get(r, j), cpu_grad.get(r, j), mag * fwd_scale,
                     exact_grad(c_), "forward gradient" + at);
        const double bwd_scale =
            none() ? std::fabs(upstream_none_.host.get(r, j)) : s * std::fabs(u);
        expect_close(c_.dtype, gpu_bwd.get(r, j), cpu_bwd.get(r, j), mag * bwd_scale,
                     exact_grad(c_), "backward gradient" + at);
        if (none()) {
          expect_close(c_.none_dtype, gpu_loss_none.get(r, j), cpu_loss_none.get(r, j), mag,
                       c_.kind == Kind::kTvd, "kNone loss" + at);
        }
      }
    }
    EXPECT_EQ(mismatches_, 0) << "elements outside the tolerance (first 5 reported above)";
    mismatches_ = 0;
    if (!none()) {
      const double tol = 1e-5 * mag_sum * s + ulp_at(DType::kFloat32, cpu_loss);
      EXPECT_NEAR(gpu_loss, cpu_loss, tol) << "reduced loss: CUDA " << gpu_loss << " vs CPU "
                                           << cpu_loss << " (denominator " << d << ")";
    }
  }

  // Every plan, run twice, gives the default plan's bits (loss, gradient, backward); the
  // gradient written into the input gives them too.
  void check_plans_and_repeats() {
    poison_outputs();
    run_cuda_forward();
    const auto loss_bits = loss_bytes();
    const auto grad_bits = grad_.device_bytes();
    upstream_.host.set(0, 0, -0.75f);
    upstream_.upload();
    grad_.device.fill(0x55);
    run_cuda_backward();
    const auto bwd_bits = grad_.device_bytes();
    const Plan chosen = tigon::cuda::divergence::divergence_plan(args(false));
    EXPECT_EQ(chosen.access, padded_ ? Access::kVector : Access::kScalar)
        << "the default plan's access (padded rows: 16-byte)";
    std::vector<Plan> plans = {{Access::kScalar, 0}, {Access::kScalar, 1}, {Access::kScalar, 7}};
    if (padded_) {
      plans.insert(plans.end(), {{Access::kVector, 0}, {Access::kVector, 1}, {Access::kVector, 7}});
    }
    for (const Plan& plan : plans) {
      for (int run = 0; run < 2; ++run) {
        const std::string what =
            std::string(plan.access == Access::kVector ? "16-byte" : "scalar") +
            " access, max_ctas " + std::to_string(plan.max_ctas) + ", run " + std::to_string(run);
        poison_outputs();
        tigon::cuda::divergence::fwd_with_plan(args(false), plan, 0, nullptr);
        tigon::testing::cuda_ok(cudaDeviceSynchronize(), "forward");
        EXPECT_TRUE(loss_bytes() == loss_bits) << "loss bits differ: " << what;
        EXPECT_TRUE(grad_.device_bytes() == grad_bits) << "forward gradient bits differ: " << what;
        grad_.device.fill(0x55);
        tigon::cuda::divergence::bwd_with_plan(args(true), plan, 0, nullptr);
        tigon::testing::cuda_ok(cudaDeviceSynchronize(), "backward");
        EXPECT_TRUE(grad_.device_bytes() == bwd_bits) << "backward gradient bits differ: " << what;
      }
    }
    // In place: the gradient written into a copy of the input (same row stride).
    Mirrored inplace(c_.dtype, sizes_, input_stride());
    inplace.host = input_.host;
    inplace.upload();
    run_cuda_forward(&inplace);
    inplace.download();
    const std::size_t size = tigon::element_size(c_.dtype);
    for (std::int64_t r = 0; r < rows_; ++r) {
      for (std::int64_t j = 0; j < vocab_; ++j) {
        std::uint32_t want = 0;
        std::memcpy(&want, grad_bits.data() + (r * grad_stride() + j) * size, size);
        const std::uint32_t got = inplace.host.bits(r, j);
        ASSERT_EQ(got, want) << "gradient in place vs out of place, bits at (" << r << ", " << j
                             << ")";
      }
    }
  }

  // Every row ignored: loss 0 and gradient 0 on the device.
  void check_all_ignored() {
    ignore_all();
    run_cuda_forward();
    float loss = -1.0f;
    if (!none()) {
      scalar_.device.download(&loss, sizeof(float));
      EXPECT_EQ(loss, 0.0f) << "loss with every row ignored";
    }
    grad_.download();
    for (std::int64_t r = 0; r < rows_; ++r)
      for (std::int64_t j = 0; j < vocab_; ++j)
        ASSERT_EQ(grad_.host.get(r, j), 0.0f) << "gradient of an ignored row at " << r << ", " << j;
  }

 private:
  std::int64_t input_stride() const { return padded_ ? padded_stride(vocab_, 8) : vocab_; }
  std::int64_t grad_stride() const { return padded_ ? padded_stride(vocab_, 24) : vocab_; }

  // Outputs (padding included) set to one pattern before each compared run, so that whole
  // buffers compare: the kernels must write every element and nothing else.
  void poison_outputs() {
    grad_.device.fill(0x55);
    loss_none_.device.fill(0x55);
    scalar_.device.fill(0x55);
  }

  std::vector<unsigned char> loss_bytes() const {
    return none() ? loss_none_.device_bytes() : scalar_.device_bytes();
  }

  tigon::DivergenceInputs cpu_inputs() {
    tigon::DivergenceInputs in{input_.cpu_view(), target_.cpu_view(), {}};
    if (c_.labels) in.labels = TensorView::contiguous(labels_.data(), DType::kInt64, {rows_});
    return in;
  }
  tigon::DivergenceInputs cuda_inputs(Mirrored* input = nullptr) {
    tigon::DivergenceInputs in{(input ? input : &input_)->cuda_view(), target_.cuda_view(), {}};
    if (c_.labels) {
      in.labels =
          TensorView::contiguous(labels_device_.data(), DType::kInt64, {rows_}, Device::cuda(0));
    }
    return in;
  }

  TensorView cuda_scalar(Mirrored& m) {
    return TensorView::contiguous(m.device.data(), DType::kFloat32, {1}, Device::cuda(0));
  }

  void ensure_workspace(std::size_t bytes) {
    if (ws_.bytes() < bytes) ws_ = DeviceBuffer(bytes);
  }

  // The public forward on the device; the gradient into grad_, or into `inplace` (its input).
  void run_cuda_forward(Mirrored* inplace = nullptr) {
    tigon::DivergenceInputs in = cuda_inputs(inplace);
    ensure_workspace(workspace_size(in));
    const TensorView loss = none() ? loss_none_.cuda_view() : cuda_scalar(scalar_);
    const TensorView grad = inplace ? inplace->cuda_view() : grad_.cuda_view();
    call_fwd(in, loss, grad, {ws_.data(), ws_.bytes()});
    tigon::testing::cuda_ok(cudaDeviceSynchronize(), "forward");
  }
  void run_cuda_backward() {
    tigon::DivergenceInputs in = cuda_inputs();
    ensure_workspace(workspace_size(in));
    const TensorView up = none() ? upstream_none_.cuda_view() : cuda_scalar(upstream_);
    call_bwd(in, up, grad_.cuda_view(), {ws_.data(), ws_.bytes()});
    tigon::testing::cuda_ok(cudaDeviceSynchronize(), "backward");
  }

  // The validated arguments the public entry points pass the backend, for the forced plans.
  tigon::detail::DivergenceArgs args(bool backward) {
    tigon::detail::DivergenceArgs a;
    a.kind = static_cast<tigon::math::DivergenceKind>(static_cast<int>(c_.kind));
    a.options.log_target = c_.log_target;
    a.options.beta = c_.beta;
    a.reduction = effective(c_);
    a.ignore_index = -100;
    a.rows = rows_;
    a.vocab = vocab_;
    a.first_dim = sizes_.front();
    a.dtype = c_.dtype;
    a.input = input_.device.data();
    a.input_row_stride = input_stride();
    a.target = target_.device.data();
    a.target_row_stride = padded_ ? padded_stride(vocab_, 16) : vocab_;
    a.labels = c_.labels ? static_cast<const std::int64_t*>(labels_device_.data()) : nullptr;
    a.grad = grad_.device.data();
    a.grad_row_stride = grad_stride();
    if (backward) {
      a.grad_loss = none() ? upstream_none_.device.data() : upstream_.device.data();
      a.grad_loss_dtype = none() ? c_.none_dtype : DType::kFloat32;
      a.grad_loss_row_stride = none() ? (padded_ ? padded_stride(vocab_, 8) : vocab_) : 0;
    } else {
      a.loss = none() ? loss_none_.device.data() : scalar_.device.data();
      a.loss_dtype = none() ? c_.none_dtype : DType::kFloat32;
      a.loss_row_stride = none() ? (padded_ ? padded_stride(vocab_, 0) : vocab_) : 0;
    }
    a.workspace = ws_.floats();
    a.workspace_bytes = ws_.bytes();
    return a;
  }

  double denominator() const {
    std::int64_t n = 0;
    for (std::int64_t r = 0; r < rows_; ++r) n += c_.labels && labels_[r] == -100 ? 0 : 1;
    switch (effective(c_)) {
      case Reduction::kMean: return static_cast<double>(n) * static_cast<double>(vocab_);
      case Reduction::kBatchMean:
        return c_.kind == Kind::kKlDiv ? static_cast<double>(sizes_.front())
                                       : static_cast<double>(n);
      default: return 1.0;
    }
  }

  // One element vs the CPU's; the first few mismatches of a problem are reported, then a count.
  void expect_close(DType dtype, double got, double want, double mag, bool exact,
                    const std::string& what) {
    const double tol = exact ? 0.0 : ulp_at(dtype, want) + 1e-6 * mag;
    const bool ok =
        exact ? got == want || (std::isnan(got) && std::isnan(want)) : std::fabs(got - want) <= tol;
    if (ok) return;
    if (++mismatches_ <= 5) {
      ADD_FAILURE() << what << (exact ? " (bitwise)" : "") << ": CUDA " << got << " vs CPU " << want
                    << " (tolerance " << tol << ")";
    }
  }

  // Rows of a softmax (or its log) of random logits, computed in float64 and stored rounded.
  void fill_distribution(HostTensor& h, std::mt19937& rng, bool log) {
    std::normal_distribution<double> dist(0.0, 2.0);
    std::vector<double> z(static_cast<std::size_t>(vocab_));
    for (std::int64_t r = 0; r < rows_; ++r) {
      double m = -INFINITY, s = 0.0;
      for (auto& v : z) m = std::fmax(m, v = dist(rng));
      for (double v : z) s += std::exp(v - m);
      const double lse = m + std::log(s);
      for (std::int64_t j = 0; j < vocab_; ++j) {
        h.set(r, j, static_cast<float>(log ? z[j] - lse : std::exp(z[j] - lse)));
      }
    }
  }

  std::size_t workspace_size(const tigon::DivergenceInputs& in) {
    switch (c_.kind) {
      case Kind::kKlDiv: return tigon::kl_div_workspace_size(kl_params(), in);
      case Kind::kJsd: return tigon::jsd_workspace_size(jsd_params(), in);
      case Kind::kTvd: return tigon::tvd_workspace_size(tvd_params(), in);
    }
    return 0;
  }
  void call_fwd(const tigon::DivergenceInputs& in, const TensorView& loss, const TensorView& grad,
                tigon::Workspace ws) {
    switch (c_.kind) {
      case Kind::kKlDiv: return tigon::kl_div_fwd(kl_params(), in, loss, grad, ws);
      case Kind::kJsd: return tigon::jsd_fwd(jsd_params(), in, loss, grad, ws);
      case Kind::kTvd: return tigon::tvd_fwd(tvd_params(), in, loss, grad, ws);
    }
  }
  void call_bwd(const tigon::DivergenceInputs& in, const TensorView& up, const TensorView& grad,
                tigon::Workspace ws) {
    switch (c_.kind) {
      case Kind::kKlDiv: return tigon::kl_div_bwd(kl_params(), in, up, grad, ws);
      case Kind::kJsd: return tigon::jsd_bwd(jsd_params(), in, up, grad, ws);
      case Kind::kTvd: return tigon::tvd_bwd(tvd_params(), in, up, grad, ws);
    }
  }
  tigon::KlDivParams kl_params() const { return {c_.reduction, c_.log_target}; }
  tigon::JsdParams jsd_params() const { return {c_.beta, -100}; }
  tigon::TvdParams tvd_params() const { return {c_.reduction, -100}; }

  Case c_;
  std::vector<std::int64_t> sizes_;
  std::int64_t vocab_;
  bool padded_;
  std::int64_t rows_ = 0;
  Mirrored input_, target_, grad_, loss_none_, upstream_none_, scalar_, upstream_;
  std::vector<std::int64_t> labels_;
  DeviceBuffer labels_device_, ws_;
  std::int64_t mismatches_ = 0;
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const Reduction reductions[] = {Reduction::kNone, Reduction::kSum, Reduction::kMean,
                                  Reduction::kBatchMean};
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (Reduction r : reductions) {
      std::vector<DType> none_dtypes = {DType::kFloat32};
      if (r == Reduction::kNone && t != DType::kFloat32) none_dtypes.push_back(t);
      for (DType none_dtype : none_dtypes) {
        for (bool log_target : {false, true}) {
          cases.push_back({Kind::kKlDiv, t, r, log_target, 0.5f, false, none_dtype});
        }
        for (bool labels : {false, true}) {
          cases.push_back({Kind::kTvd, t, r, false, 0.5f, labels, none_dtype});
        }
      }
    }
    for (float beta : {0.0f, 0.1f, 0.5f, 0.9f, 1.0f}) {
      for (bool labels : {false, true}) {
        cases.push_back({Kind::kJsd, t, Reduction::kBatchMean, false, beta, labels});
      }
    }
  }
  return cases;
}

const Shape kShapes[] = {
    {{2, 3, 37}, true},   // kl_div batchmean divides by 2; one partial group per row
    {{5, 8193}, true},    // two segments, the second one element
    {{4, 32001}, false},  // odd, packed rows: the scalar path
    {{3, 128256}, true},  // Llama 3's vocabulary
};

class DivergenceCuda : public ::testing::TestWithParam<Case> {};

TEST_P(DivergenceCuda, MatchesTheCpuBackend) {
  SKIP_WITHOUT_CUDA_DEVICE();
  std::uint32_t seed = 11;
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE("shape [" + std::to_string(shape.sizes.front()) + ", ..., " +
                 std::to_string(shape.sizes.back()) + "]");
    Problem p(GetParam(), shape, ++seed);
    p.check_against_cpu(1.0f);
    p.check_against_cpu(-2.5f);
  }
}

TEST_P(DivergenceCuda, EveryPlanAndRunGivesTheSameBits) {
  SKIP_WITHOUT_CUDA_DEVICE();
  std::uint32_t seed = 101;
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE("shape [" + std::to_string(shape.sizes.front()) + ", ..., " +
                 std::to_string(shape.sizes.back()) + "]");
    Problem p(GetParam(), shape, ++seed);
    p.check_plans_and_repeats();
  }
}

TEST_P(DivergenceCuda, AllRowsIgnored) {
  SKIP_WITHOUT_CUDA_DEVICE();
  if (!GetParam().labels) GTEST_SKIP() << "no labels";
  Problem p(GetParam(), {{6, 1000}, true}, 3);
  p.check_all_ignored();
}

INSTANTIATE_TEST_SUITE_P(AllOptions, DivergenceCuda, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return case_name(info.param); });

// No rows: a reduced loss of 0 (kl_div batchmean over [0, V]; tvd's mean over no rows).
TEST(DivergenceCudaEdges, EmptyInputGivesZeroLoss) {
  SKIP_WITHOUT_CUDA_DEVICE();
  DeviceBuffer x(64), t(64), loss(sizeof(float)), ws(1024);
  loss.fill(0x55);
  const TensorView xv = TensorView::contiguous(x.data(), DType::kFloat32, {0, 8}, Device::cuda(0));
  const TensorView tv = TensorView::contiguous(t.data(), DType::kFloat32, {0, 8}, Device::cuda(0));
  const tigon::DivergenceInputs in{xv, tv, {}};
  const tigon::KlDivParams params{Reduction::kBatchMean, false};
  ASSERT_LE(tigon::kl_div_workspace_size(params, in), ws.bytes());
  tigon::kl_div_fwd(params, in,
                    TensorView::contiguous(loss.data(), DType::kFloat32, {1}, Device::cuda(0)), {},
                    {ws.data(), ws.bytes()});
  float got = -1.0f;
  loss.download(&got, sizeof(float));
  EXPECT_EQ(got, 0.0f) << "kl_div batchmean over no rows";
}

}  // namespace
