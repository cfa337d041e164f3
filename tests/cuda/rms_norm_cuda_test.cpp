// GPU tests of the RMSNorm CUDA backend. Every result is checked against the CPU backend (the
// oracle) through the public API on the same inputs, and the forward output additionally against
// the shared formula applied with the GPU's own rstd (bit for bit). Without a CUDA device every
// test reports SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "cpp/test_support.h"
#include "cuda/common/device_properties.h"
#include "cuda/cuda_test_support.h"
#include "cuda/host_matrix.h"
#include "cuda/rms_norm/modes.h"
#include "math/float_types.h"
#include "math/rms_norm.h"
#include "ops/rms_norm_args.h"
#include "tigon/tigon.h"

namespace {

using tigon::CastingMode;
using tigon::Device;
using tigon::DType;
using tigon::RmsNormParams;
using tigon::Stream;
using tigon::TensorView;
using tigon::Workspace;
using tigon::testing::cuda_ok;
using tigon::testing::DeviceBuffer;
using tigon::testing::element_bits;
using tigon::testing::fill_normal;
using tigon::testing::float_vector_view;
using tigon::testing::floats_from_device;
using tigon::testing::from_device;
using tigon::testing::Matrix;
using tigon::testing::to_device;
using tigon::testing::ulp_at;

// Calls f.template operator()<Math, X, W>() for the case's options (W = X without a weight).
template <typename F>
void with_math(CastingMode mode, DType x, DType w, bool affine, F&& f) {
  tigon::detail::dispatch_casting_mode(mode, [&](auto m) {
    tigon::detail::dispatch_dtype(x, [&](auto x_tag) {
      using X = typename decltype(x_tag)::type;
      if (!affine) {
        f.template operator()<tigon::math::RmsNorm<decltype(m)::value, X, X, false>, X, X>();
        return;
      }
      tigon::detail::dispatch_dtype(w, [&](auto w_tag) {
        using W = typename decltype(w_tag)::type;
        f.template operator()<tigon::math::RmsNorm<decltype(m)::value, X, W, true>, X, W>();
      });
    });
  });
}

template <typename T>
T storage_from(const Matrix& m, std::int64_t r, std::int64_t j) {
  if constexpr (std::is_same_v<T, float>) {
    return m.get(r, j);
  } else {
    return T{static_cast<std::uint16_t>(m.bits(r, j))};
  }
}

template <typename T>
std::uint32_t storage_bits(T v) {
  if constexpr (std::is_same_v<T, float>) {
    std::uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
  } else {
    return v.bits;
  }
}

// ---------------------------------------------------------------------------------------------
// One forward + backward comparison.

struct Case {
  CastingMode mode = CastingMode::kLlama;
  DType x = DType::kBFloat16;
  DType w = DType::kBFloat16;
  bool affine = true;
  std::int64_t hidden = 1;
  std::int64_t rows = 1;
  std::int64_t x_pad = 0, y_pad = 0, dy_pad = 0, dx_pad = 0;  // row stride = hidden + pad
  std::int64_t offset = 0;  // elements every tensor and the weight start into their buffer
  std::int64_t workspace_offset = 0;  // floats the workspace starts into its buffer

  std::string name() const {
    std::string n = tigon::casting_mode_name(mode);
    n += std::string("_x") + tigon::dtype_name(x);
    n += affine ? std::string("_w") + tigon::dtype_name(w) : std::string("_noaffine");
    n += "_H" + std::to_string(hidden) + "_R" + std::to_string(rows);
    if (x_pad || y_pad || dy_pad || dx_pad) {
      n += "_pad" + std::to_string(x_pad) + "_" + std::to_string(y_pad) + "_" +
           std::to_string(dy_pad) + "_" + std::to_string(dx_pad);
    }
    if (offset) n += "_offset" + std::to_string(offset);
    if (workspace_offset) n += "_wsoffset" + std::to_string(workspace_offset);
    return n;
  }
};

RmsNormParams params_for(const Case& c) {
  RmsNormParams p;
  p.eps = 1e-6f;
  p.casting_mode = c.mode;
  p.offset = c.affine && c.mode == CastingMode::kGemma ? 1.0f : 0.0f;  // Gemma's (1 + w)
  return p;
}

// Everything one case needs on the host: inputs and the CPU backend's outputs.
struct HostRun {
  Matrix x, w, dy, y, dx;
  std::vector<float> rstd;
  Matrix dw;
};

HostRun make_inputs(const Case& c, DType y_dtype) {
  std::mt19937 rng(static_cast<std::uint32_t>(std::hash<std::string>{}(c.name())));
  HostRun h;
  h.x = Matrix(c.x, c.rows, c.hidden, c.hidden + c.x_pad, c.offset);
  h.dy = Matrix(y_dtype, c.rows, c.hidden, c.hidden + c.dy_pad, c.offset);
  h.y = Matrix(y_dtype, c.rows, c.hidden, c.hidden + c.y_pad, c.offset);
  h.dx = Matrix(c.x, c.rows, c.hidden, c.hidden + c.dx_pad, c.offset);
  fill_normal(h.x, rng, 0.0f, 1.0f);
  fill_normal(h.dy, rng, 0.0f, 1.0f);
  if (c.affine) {
    h.w = Matrix(c.w, 1, c.hidden, c.hidden, c.offset);
    h.dw = Matrix(c.w, 1, c.hidden, c.hidden, 0);
    const float center = c.mode == CastingMode::kGemma ? 0.0f : 1.0f;
    fill_normal(h.w, rng, center, 0.25f);
  }
  return h;
}

void run_cpu(const Case& c, HostRun& h) {
  const RmsNormParams p = params_for(c);
  const TensorView w = c.affine ? h.w.vector_view(h.w.bytes.data(), Device::cpu()) : TensorView{};
  h.rstd.assign(static_cast<std::size_t>(c.rows), 0.0f);
  tigon::rms_norm_fwd(p, h.x.host_view(), w, h.y.host_view(),
                      float_vector_view(h.rstd.data(), c.rows, Device::cpu()));
  const TensorView dw =
      c.affine ? h.dw.vector_view(h.dw.bytes.data(), Device::cpu()) : TensorView{};
  std::vector<float> workspace(tigon::rms_norm_bwd_workspace_size(p, h.x.host_view(), w) / 4 + 1);
  tigon::rms_norm_bwd(p, h.dy.host_view(), h.x.host_view(), w,
                      float_vector_view(h.rstd.data(), c.rows, Device::cpu()), h.dx.host_view(), dw,
                      Workspace{workspace.data(), workspace.size() * sizeof(float)});
}

// The GPU side of a case, with every buffer kept so runs can be repeated.
struct GpuRun {
  Matrix y, dx, dw;
  std::vector<float> rstd;
};

class GpuCase {
 public:
  GpuCase(const Case& c, const HostRun& h) : c_(c), h_(h), p_(params_for(c)) {
    x_ = to_device(h.x);
    if (c.affine) w_ = to_device(h.w);
    rstd_in_ = DeviceBuffer(sizeof(float) * c.rows);
    rstd_in_.upload(h.rstd.data(), sizeof(float) * c.rows);
    rstd_out_ = DeviceBuffer(sizeof(float) * c.rows);
    y_ = DeviceBuffer(h.y.bytes.size());
    dy_ = DeviceBuffer(h.dy.bytes.size());
    dx_ = DeviceBuffer(h.dx.bytes.size());
    if (c.affine) dw_ = DeviceBuffer(h.dw.bytes.size());
    const std::size_t ws = tigon::rms_norm_bwd_workspace_size(p_, x_view(), w_view());
    workspace_bytes_ = ws;
    workspace_ = DeviceBuffer(ws + sizeof(float) * c.workspace_offset);
    fwd_workspace_bytes_ = tigon::rms_norm_fwd_workspace_size(p_, x_view(), w_view());
    fwd_workspace_ = DeviceBuffer(fwd_workspace_bytes_);
  }

  TensorView x_view() const { return h_.x.view(x_.data(), Device::cuda(0)); }
  TensorView w_view() const {
    return c_.affine ? h_.w.vector_view(w_.data(), Device::cuda(0)) : TensorView{};
  }

  // Forward into sentinel-filled y and rstd.
  void forward(GpuRun& out, Stream stream = {}) {
    y_.fill(0xA5);
    rstd_out_.fill(0xFF);
    tigon::rms_norm_fwd(p_, x_view(), w_view(), h_.y.view(y_.data(), Device::cuda(0)),
                        float_vector_view(rstd_out_.floats(), c_.rows, Device::cuda(0)),
                        Workspace{fwd_workspace_.data(), fwd_workspace_bytes_}, stream);
    cuda_ok(cudaDeviceSynchronize(), "forward");
    out.y = from_device(y_, h_.y);
    out.rstd = floats_from_device(rstd_out_, c_.rows);
  }

  // Backward with the CPU's rstd as input, dx into a sentinel-filled buffer (or over dy, in place,
  // then out.dx has dy's layout); the workspace starts as NaN bytes, so a partial that is read
  // before it is written shows.
  void backward(GpuRun& out, bool in_place, Stream stream = {}) {
    dy_.upload(h_.dy.bytes.data(), h_.dy.bytes.size());
    dx_.fill(0xA5);
    if (c_.affine) dw_.fill(0xA5);
    workspace_.fill(0xFF);
    const TensorView dy = h_.dy.view(dy_.data(), Device::cuda(0));
    const TensorView dx = in_place ? dy : h_.dx.view(dx_.data(), Device::cuda(0));
    const TensorView dw = c_.affine ? h_.dw.vector_view(dw_.data(), Device::cuda(0)) : TensorView{};
    Workspace ws{workspace_.floats() + c_.workspace_offset, workspace_bytes_};
    tigon::rms_norm_bwd(p_, dy, x_view(), w_view(),
                        float_vector_view(rstd_in_.floats(), c_.rows, Device::cuda(0)), dx, dw, ws,
                        stream);
    cuda_ok(cudaDeviceSynchronize(), "backward");
    if (in_place) {
      out.dx = from_device(dy_, h_.dy);
      out.dx.dtype = h_.dx.dtype;  // dy's buffer now holds dx (same dtype when in place)
    } else {
      out.dx = from_device(dx_, h_.dx);
    }
    if (c_.affine) out.dw = from_device(dw_, h_.dw);
  }

 private:
  const Case& c_;
  const HostRun& h_;
  RmsNormParams p_;
  DeviceBuffer x_, w_, rstd_in_, rstd_out_, y_, dy_, dx_, dw_, workspace_, fwd_workspace_;
  std::size_t workspace_bytes_ = 0, fwd_workspace_bytes_ = 0;
};

void expect_bitwise_equal(const Matrix& a, const Matrix& b, const char* what) {
  ASSERT_EQ(a.bytes.size(), b.bytes.size());
  std::int64_t first = -1;
  std::int64_t count = 0;
  const std::int64_t n = static_cast<std::int64_t>(a.bytes.size() / a.element_size());
  for (std::int64_t i = 0; i < n; ++i) {
    if (element_bits(a.dtype, a.bytes.data(), i) != element_bits(b.dtype, b.bytes.data(), i)) {
      if (first < 0) first = i;
      ++count;
    }
  }
  EXPECT_EQ(count, 0) << what << ": " << count << " elements differ, first at buffer index "
                      << first;
}

// Elements outside the view must still hold the sentinel: nothing was written out of bounds.
void expect_outside_untouched(const Matrix& m, const char* what) {
  const std::int64_t n = static_cast<std::int64_t>(m.bytes.size() / m.element_size());
  std::int64_t touched = 0;
  const std::uint32_t sentinel = m.element_size() == 4 ? 0xA5A5A5A5u : 0xA5A5u;
  for (std::int64_t i = 0; i < n; ++i) {
    if (!m.in_view(i) && element_bits(m.dtype, m.bytes.data(), i) != sentinel) ++touched;
  }
  EXPECT_EQ(touched, 0) << what << ": elements outside the view were written";
}

// rstd: Llama and Gemma keep it in float32, where only the summation order differs (error grows
// like sqrt(H) for a sum of squares); eager mode rounds it to x's dtype, so it may land one value
// of that dtype away when the float32 sums straddle a rounding boundary.
void check_rstd(const Case& c, const std::vector<float>& gpu, const std::vector<float>& cpu) {
  std::int64_t bad = 0;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    double tol = cpu[r] * std::ldexp(1.0, -22) * (1.0 + std::sqrt(double(c.hidden)));
    if (c.mode == CastingMode::kNone) tol = std::max(tol, ulp_at(c.x, cpu[r]) * 1.01);
    if (!(std::fabs(double(gpu[r]) - cpu[r]) <= tol)) {
      if (bad++ < 5) ADD_FAILURE() << "rstd row " << r << ": gpu " << gpu[r] << " cpu " << cpu[r];
    }
  }
  EXPECT_EQ(bad, 0) << "rstd rows out of tolerance";
}

// y: (1) bit for bit the shared formula applied with the GPU's own rstd; (2) against the CPU
// backend: identical bits in rows whose rstd matched, within the first-order effect of the rstd
// difference elsewhere; >= 99% identical overall for 16-bit outputs (Llama, Gemma).
template <typename Math, typename X, typename W>
void check_forward(const Case& c, const HostRun& h, const GpuRun& g) {
  using Y = typename Math::Y;
  const float offset = params_for(c).offset;
  std::int64_t formula_mismatch = 0, exact = 0, far = 0;
  const DType yt = h.y.dtype;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    const bool same_rstd = std::memcmp(&g.rstd[r], &h.rstd[r], sizeof(float)) == 0;
    for (std::int64_t j = 0; j < c.hidden; ++j) {
      const float s = c.affine ? Math::scale(storage_from<W>(h.w, 0, j), offset) : 1.0f;
      const Y expected = Math::output(Math::normalized(h.x.get(r, j), g.rstd[r]), s);
      const std::uint32_t gpu_bits = g.y.bits(r, j);
      if (storage_bits(expected) != gpu_bits) {
        if (formula_mismatch++ < 5) {
          ADD_FAILURE() << "y(" << r << ", " << j << ") = " << g.y.get(r, j)
                        << " differs from the formula with the GPU rstd: "
                        << tigon::math::to_float(expected);
        }
      }
      const std::uint32_t cpu_bits = h.y.bits(r, j);
      if (gpu_bits == cpu_bits) {
        ++exact;
        continue;
      }
      // Same rstd: the same formula on the same inputs, so the same bits. Different rstd: y moves
      // by |x s| |dr|, plus one step of the dtype x * r is rounded to (x's; float32 for Gemma),
      // plus a rounding of y either way.
      bool ok = false;
      if (!same_rstd) {
        const double x = std::fabs(double(h.x.get(r, j)));
        const double dr = std::fabs(double(g.rstd[r]) - double(h.rstd[r]));
        const DType n_dtype = c.mode == CastingMode::kGemma ? DType::kFloat32 : c.x;
        const double n_step = ulp_at(n_dtype, x * h.rstd[r]);
        const double tol =
            std::fabs(double(s)) * (x * dr + n_step) * 1.01 + 2.0 * ulp_at(yt, h.y.get(r, j));
        ok = std::fabs(double(g.y.get(r, j)) - h.y.get(r, j)) <= tol;
      }
      if (!ok && far++ < 5) {
        ADD_FAILURE() << "y(" << r << ", " << j << "): gpu " << g.y.get(r, j) << " cpu "
                      << h.y.get(r, j) << (same_rstd ? " (same rstd)" : "");
      }
    }
  }
  EXPECT_EQ(formula_mismatch, 0);
  EXPECT_EQ(far, 0);
  const double total = double(c.rows) * double(c.hidden);
  if (yt != DType::kFloat32 && c.mode != CastingMode::kNone) {
    // Both backends' float32 sums of squares drift from the exact sum like sqrt(H); past 64K
    // elements that flips the 16-bit rounding of a few percent of x * r in the worst orders.
    const double min_exact = c.hidden <= 65536 ? 0.99 : 0.95;
    EXPECT_GE(exact / total, min_exact) << "bitwise-equal fraction of y";
  }
}

// dx: the CPU and GPU differ only in the order of the row sum mean(m * xhat); bound its effect by
// |r * xhat| * (a generous float32 summation error) plus a rounding step of x's dtype either way.
// dW: same terms, different order of the float32 sum over rows: 1e-5 of the sum of |terms|, plus
// a rounding step of the weight's dtype either way.
template <typename Math, typename X, typename W>
void check_backward(const Case& c, const HostRun& h, const GpuRun& g) {
  const float offset = params_for(c).offset;
  std::vector<double> dw_abs(static_cast<std::size_t>(c.hidden), 0.0);
  std::int64_t bad_dx = 0;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    const float rs = h.rstd[r];
    double mean_abs = 0.0;
    for (std::int64_t j = 0; j < c.hidden; ++j) {
      const float s = c.affine ? Math::scale(storage_from<W>(h.w, 0, j), offset) : 1.0f;
      const float dyv = h.dy.get(r, j);
      const float xv = h.x.get(r, j);
      mean_abs += std::fabs(double(Math::grad_scaled(dyv, s)) * double(xv * rs));
      if (c.affine) dw_abs[j] += std::fabs(double(Math::grad_weight_term(dyv, xv, rs)));
    }
    mean_abs /= double(c.hidden);
    const double sum_error = std::ldexp(1.0, -20) * (16.0 + std::sqrt(double(c.hidden))) * mean_abs;
    for (std::int64_t j = 0; j < c.hidden; ++j) {
      const double ref = h.dx.get(r, j);
      const double got = g.dx.get(r, j);
      const double tol =
          2.0 * ulp_at(c.x, ref) + std::fabs(double(rs) * h.x.get(r, j) * rs) * sum_error;
      if (!(std::fabs(got - ref) <= tol)) {
        if (bad_dx++ < 5)
          ADD_FAILURE() << "dx(" << r << ", " << j << "): gpu " << got << " cpu " << ref;
      }
    }
  }
  EXPECT_EQ(bad_dx, 0) << "dx elements out of tolerance";
  if (!c.affine) return;
  std::int64_t bad_dw = 0;
  for (std::int64_t j = 0; j < c.hidden; ++j) {
    const double ref = h.dw.get(0, j);
    const double got = g.dw.get(0, j);
    const double tol = 2.0 * ulp_at(c.w, ref) + 1e-5 * dw_abs[j];
    if (!(std::fabs(got - ref) <= tol)) {
      if (bad_dw++ < 5)
        ADD_FAILURE() << "dw(" << j << "): gpu " << got << " cpu " << ref << " tol " << tol;
    }
  }
  EXPECT_EQ(bad_dw, 0) << "dw elements out of tolerance";
}

// Same values element by element (the two matrices may have different layouts).
void expect_same_values(const Matrix& a, const Matrix& b, const char* what) {
  std::int64_t count = 0;
  for (std::int64_t r = 0; r < a.rows; ++r) {
    for (std::int64_t j = 0; j < a.hidden; ++j) count += a.bits(r, j) != b.bits(r, j);
  }
  EXPECT_EQ(count, 0) << what << ": " << count << " elements differ";
}

// Forward and backward of one case on the GPU and on the CPU backend, compared. Also: repeated
// runs give the same bits, nothing outside the views is written, and (when dx's dtype is dy's)
// dx written in place over dy is bit for bit dx written to its own buffer.
void run_case(const Case& c) {
  SCOPED_TRACE(c.name());
  const RmsNormParams p = params_for(c);
  const DType y_dtype = tigon::rms_norm_output_dtype(p, c.x, c.w, c.affine);
  HostRun h = make_inputs(c, y_dtype);
  run_cpu(c, h);

  GpuCase gpu(c, h);
  GpuRun first, second;
  gpu.forward(first);
  gpu.forward(second);
  expect_outside_untouched(first.y, "y");
  expect_bitwise_equal(first.y, second.y, "y of two identical forward runs");
  EXPECT_EQ(first.rstd, second.rstd) << "rstd of two identical forward runs";

  gpu.backward(first, /*in_place=*/false);
  gpu.backward(second, /*in_place=*/false);
  expect_outside_untouched(first.dx, "dx");
  expect_bitwise_equal(first.dx, second.dx, "dx of two identical backward runs");
  if (c.affine) expect_bitwise_equal(first.dw, second.dw, "dw of two identical backward runs");
  if (y_dtype == c.x) {
    GpuRun in_place;
    gpu.backward(in_place, /*in_place=*/true);
    expect_same_values(in_place.dx, first.dx, "dx in place vs in its own buffer");
    if (c.affine) expect_bitwise_equal(in_place.dw, first.dw, "dw in place vs out of place");
  }

  check_rstd(c, first.rstd, h.rstd);
  with_math(c.mode, c.x, c.w, c.affine, [&]<typename Math, typename X, typename W>() {
    check_forward<Math, X, W>(c, h, first);
    check_backward<Math, X, W>(c, h, first);
  });
}

struct DTypePair {
  DType x, w;
  bool affine;
};

const DTypePair kAllPairs[] = {
    {DType::kFloat32, DType::kFloat32, true},   {DType::kFloat32, DType::kFloat16, true},
    {DType::kFloat32, DType::kBFloat16, true},  {DType::kFloat16, DType::kFloat32, true},
    {DType::kFloat16, DType::kFloat16, true},   {DType::kFloat16, DType::kBFloat16, true},
    {DType::kBFloat16, DType::kFloat32, true},  {DType::kBFloat16, DType::kFloat16, true},
    {DType::kBFloat16, DType::kBFloat16, true}, {DType::kFloat32, DType::kFloat32, false},
    {DType::kFloat16, DType::kFloat16, false},  {DType::kBFloat16, DType::kBFloat16, false},
};

// A few pairs for the bigger scenarios: same-dtype 16-bit, bf16 activations with float32 master
// weights, float32, no weight.
const DTypePair kSomePairs[] = {
    {DType::kBFloat16, DType::kBFloat16, true},
    {DType::kBFloat16, DType::kFloat32, true},
    {DType::kFloat32, DType::kFloat32, true},
    {DType::kFloat16, DType::kFloat16, false},
};

const CastingMode kModes[] = {CastingMode::kLlama, CastingMode::kGemma, CastingMode::kNone};

// One test: a shape and layout, run for every casting mode and dtype pair of the list (or, with
// llama_only, in Llama mode only: the casting mode changes the arithmetic, not the grid, the
// staged rings or the dW groups, which the dtypes and the weight do).
struct Scenario {
  std::string name;
  Case layout;  // hidden, rows, pads, offsets (mode and dtypes are set per run)
  bool all_pairs = true;
  bool llama_only = false;
};

void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

class RmsNormCuda : public ::testing::TestWithParam<Scenario> {};

TEST_P(RmsNormCuda, MatchesCpuBackend) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Scenario& s = GetParam();
  for (CastingMode mode : kModes) {
    if (s.llama_only && mode != CastingMode::kLlama) continue;
    auto run_pair = [&](const DTypePair& pair) {
      Case c = s.layout;
      c.mode = mode;
      c.x = pair.x;
      c.w = pair.w;
      c.affine = pair.affine;
      run_case(c);
    };
    if (s.all_pairs) {
      for (const DTypePair& pair : kAllPairs) run_pair(pair);
    } else {
      for (const DTypePair& pair : kSomePairs) run_pair(pair);
    }
  }
}

std::int64_t rows_for(std::int64_t hidden) {
  return std::clamp<std::int64_t>((std::int64_t{1} << 18) / hidden, 3, 257);
}

Scenario scenario(std::string name, std::int64_t hidden, bool all_pairs = true) {
  Scenario s;
  s.name = std::move(name);
  s.layout.hidden = hidden;
  s.layout.rows = rows_for(hidden);
  s.all_pairs = all_pairs;
  return s;
}

// Sizes covering the row-per-thread, warp, block and two-pass paths; odd sizes take the scalar
// path, even ones the vector path.
std::vector<Scenario> size_scenarios() {
  std::vector<Scenario> v;
  for (std::int64_t h : {1, 3, 127, 1000, 4097})
    v.push_back(scenario("Small_H" + std::to_string(h), h));
  for (std::int64_t h : {8192, 65537, 262144})
    v.push_back(scenario("Large_H" + std::to_string(h), h));
  // The two-pass forward's range, 16-bit rows of 48 to 128 KB (kTwoPassMaxRowBytes, layout.cuh);
  // float32 x at 32768 too.
  for (std::int64_t h : {32768, 49152})
    v.push_back(scenario("TwoPassForward_H" + std::to_string(h), h, /*all_pairs=*/false));
  return v;
}

// Sizes that split rows over thread-block clusters on sm_90 (over big blocks or two passes
// elsewhere).
std::vector<Scenario> cluster_scenarios() {
  std::vector<Scenario> v;
  for (std::int64_t h : {16384, 24576, 65536, 131072}) {
    Scenario s = scenario("Cluster_H" + std::to_string(h), h, /*all_pairs=*/false);
    s.layout.rows += 1;
    v.push_back(s);
  }
  return v;
}

// Enough rows that every CTA of the staged kernels' persistent grid goes round its shared-memory
// ring several times, and that a backward CTA takes several dW groups when blocks are big
// (ctest also runs this suite with TIGON_RMS_NORM_TUNING=...block_threads=512). Llama mode only:
// the CPU reference of 20M elements per mode and pair took 70 s of every ctest variant.
std::vector<Scenario> many_row_scenarios() {
  std::vector<Scenario> v;
  for (const auto [h, rows] : {std::pair<std::int64_t, std::int64_t>{1024, 20000}, {4096, 5003}}) {
    Scenario s = scenario("ManyRows_H" + std::to_string(h), h, /*all_pairs=*/false);
    s.layout.rows = rows;
    s.llama_only = true;
    v.push_back(s);
  }
  return v;
}

// Row-strided views (padding keeping 16-byte alignment: vector path; odd padding: scalar path),
// base pointers one element off 16 bytes, a workspace 4 bytes off, a single row.
std::vector<Scenario> layout_scenarios() {
  std::vector<Scenario> v;
  for (std::int64_t h : {1000, 4096}) {
    const std::string suffix = "_H" + std::to_string(h);
    Scenario s = scenario("", h, /*all_pairs=*/false);
    s.layout.rows = 37;

    Scenario aligned = s;
    aligned.name = "StridedAligned" + suffix;
    aligned.layout.x_pad = 8;
    aligned.layout.y_pad = 24;
    aligned.layout.dy_pad = 16;
    aligned.layout.dx_pad = 40;
    v.push_back(aligned);

    Scenario odd = s;
    odd.name = "StridedOdd" + suffix;
    odd.layout.x_pad = 1;
    odd.layout.y_pad = 3;
    odd.layout.dy_pad = 5;
    odd.layout.dx_pad = 7;
    v.push_back(odd);

    Scenario unaligned = s;
    unaligned.name = "UnalignedPointers" + suffix;
    unaligned.layout.offset = 1;
    v.push_back(unaligned);

    Scenario workspace = s;
    workspace.name = "UnalignedWorkspace" + suffix;
    workspace.layout.workspace_offset = 1;
    v.push_back(workspace);

    Scenario one_row = s;
    one_row.name = "EdgeOneRow" + suffix;
    one_row.layout.rows = 1;
    v.push_back(one_row);
  }
  return v;
}

std::string scenario_name(const ::testing::TestParamInfo<Scenario>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Sizes, RmsNormCuda, ::testing::ValuesIn(size_scenarios()), scenario_name);
INSTANTIATE_TEST_SUITE_P(Clusters, RmsNormCuda, ::testing::ValuesIn(cluster_scenarios()),
                         scenario_name);
INSTANTIATE_TEST_SUITE_P(ManyRows, RmsNormCuda, ::testing::ValuesIn(many_row_scenarios()),
                         scenario_name);
INSTANTIATE_TEST_SUITE_P(Layouts, RmsNormCuda, ::testing::ValuesIn(layout_scenarios()),
                         scenario_name);

// ---------------------------------------------------------------------------------------------

TEST(RmsNormCudaEdge, ZeroRowsGivesZeroWeightGradient) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::int64_t hidden = 1000;
  RmsNormParams p;
  DeviceBuffer x(2 * hidden), w(2 * hidden), y(2 * hidden), rstd(4), dw(2 * hidden);
  dw.fill(0x5A);
  const Device d = Device::cuda(0);
  const TensorView xv = TensorView::contiguous(x.data(), DType::kBFloat16, {0, hidden}, d);
  const TensorView wv = TensorView::contiguous(w.data(), DType::kBFloat16, {hidden}, d);
  const TensorView yv = TensorView::contiguous(y.data(), DType::kBFloat16, {0, hidden}, d);
  const TensorView rv = TensorView::contiguous(rstd.data(), DType::kFloat32, {0}, d);
  const TensorView dwv = TensorView::contiguous(dw.data(), DType::kBFloat16, {hidden}, d);
  tigon::rms_norm_fwd(p, xv, wv, yv, rv);
  EXPECT_EQ(tigon::rms_norm_bwd_workspace_size(p, xv, wv), 0u);
  tigon::rms_norm_bwd(p, yv, xv, wv, rv, xv, dwv, {});
  cuda_ok(cudaDeviceSynchronize(), "sync");
  std::vector<std::uint16_t> host(hidden, 1);
  dw.download(host.data(), 2 * hidden);
  EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](std::uint16_t b) { return b == 0; }));
}

TEST(RmsNormCudaEdge, InvalidDeviceIsACudaError) {
  SKIP_WITHOUT_CUDA_DEVICE();
  int count = 0;
  cuda_ok(cudaGetDeviceCount(&count), "count");
  const Device bad = Device::cuda(count + 3);
  std::vector<float> dummy(16);
  RmsNormParams p;
  const TensorView xv = TensorView::contiguous(dummy.data(), DType::kFloat32, {2, 4}, bad);
  const TensorView yv = TensorView::contiguous(dummy.data() + 8, DType::kFloat32, {2, 4}, bad);
  const TensorView rv = TensorView::contiguous(dummy.data(), DType::kFloat32, {2}, bad);
  int before = -1;
  cuda_ok(cudaGetDevice(&before), "get device");
  try {
    tigon::rms_norm_fwd(p, xv, TensorView{}, yv, rv);
    ADD_FAILURE() << "expected a tigon::Error";
  } catch (const tigon::Error& e) {
    EXPECT_EQ(e.code(), tigon::ErrorCode::kCudaError) << e.what();
  }
  int after = -1;
  cuda_ok(cudaGetDevice(&after), "get device");
  EXPECT_EQ(before, after);
}

// The same forward + backward captured into a CUDA graph on a non-default stream gives the eager
// results bit for bit (the ops neither allocate nor synchronize).
TEST(RmsNormCudaGraph, CaptureMatchesEager) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Case c;
  c.mode = CastingMode::kLlama;
  c.x = DType::kBFloat16;
  c.w = DType::kFloat32;
  c.hidden = 4096;
  c.rows = 1000;
  const RmsNormParams p = params_for(c);
  const DType y_dtype = tigon::rms_norm_output_dtype(p, c.x, c.w, true);
  HostRun h = make_inputs(c, y_dtype);
  const Device d = Device::cuda(0);
  DeviceBuffer x = to_device(h.x), w = to_device(h.w), dy = to_device(h.dy);
  DeviceBuffer y(h.y.bytes.size()), rstd(sizeof(float) * c.rows), dx(h.x.bytes.size()),
      dw(h.dw.bytes.size());
  const TensorView xv = h.x.view(x.data(), d), wv = h.w.vector_view(w.data(), d);
  const TensorView yv = h.y.view(y.data(), d), dyv = h.dy.view(dy.data(), d);
  const TensorView dxv = h.x.view(dx.data(), d), dwv = h.dw.vector_view(dw.data(), d);
  const TensorView rv = float_vector_view(rstd.floats(), c.rows, d);
  DeviceBuffer ws(tigon::rms_norm_bwd_workspace_size(p, xv, wv));
  const Workspace workspace{ws.data(), ws.bytes()};

  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  auto run = [&] {
    tigon::rms_norm_fwd(p, xv, wv, yv, rv, {}, Stream{stream});
    tigon::rms_norm_bwd(p, dyv, xv, wv, rv, dxv, dwv, workspace, Stream{stream});
  };
  run();
  cuda_ok(cudaStreamSynchronize(stream), "eager");
  const Matrix y_eager = from_device(y, h.y), dx_eager = from_device(dx, h.x),
               dw_eager = from_device(dw, h.dw);
  const std::vector<float> rstd_eager = floats_from_device(rstd, c.rows);

  y.fill(0);
  dx.fill(0);
  dw.fill(0);
  rstd.fill(0);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
  run();
  cuda_ok(cudaStreamEndCapture(stream, &graph), "end capture");
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  cuda_ok(cudaGraphLaunch(exec, stream), "launch");
  cuda_ok(cudaGraphLaunch(exec, stream), "launch again");
  cuda_ok(cudaStreamSynchronize(stream), "graph");
  expect_bitwise_equal(from_device(y, h.y), y_eager, "y graph vs eager");
  expect_bitwise_equal(from_device(dx, h.x), dx_eager, "dx graph vs eager");
  expect_bitwise_equal(from_device(dw, h.dw), dw_eager, "dw graph vs eager");
  EXPECT_EQ(floats_from_device(rstd, c.rows), rstd_eager);
  cuda_ok(cudaGraphExecDestroy(exec), "destroy exec");
  cuda_ok(cudaGraphDestroy(graph), "destroy graph");
  cuda_ok(cudaStreamDestroy(stream), "destroy stream");
}

// More than 2^31 elements (bf16, H = 4096): rows past the 2^31-element mark are computed, and their
// gradients reach dW. x repeats a random block of rows; dy is zero except in a few rows at both
// ends, so dW is exactly those rows' terms and the CPU can check it from those rows alone.
TEST(RmsNormCudaHuge, MoreThan2To31Elements) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::int64_t hidden = 4096;
  const std::int64_t rows = (std::int64_t{1} << 31) / hidden + 8;
  const std::size_t bytes = static_cast<std::size_t>(rows * hidden) * 2;
  std::size_t free_bytes = 0, total_bytes = 0;
  cuda_ok(cudaMemGetInfo(&free_bytes, &total_bytes), "mem info");
  if (free_bytes < 2 * bytes + (std::size_t{1} << 30))
    GTEST_SKIP() << "needs ~9.5 GB of free device memory";

  const RmsNormParams p;  // Llama, bf16 weight: y and dy are bf16 like x
  const std::int64_t block_rows = 8192;
  std::mt19937 rng(1234);
  Matrix x_block(DType::kBFloat16, block_rows, hidden, hidden, 0);
  fill_normal(x_block, rng, 0.0f, 1.0f);
  Matrix w(DType::kBFloat16, 1, hidden, hidden, 0);
  fill_normal(w, rng, 1.0f, 0.25f);

  const Device d = Device::cuda(0);
  DeviceBuffer x(bytes), y(bytes), rstd(sizeof(float) * rows), dw(2 * hidden), wd = to_device(w);
  DeviceBuffer block = to_device(x_block);
  for (std::int64_t r = 0; r < rows; r += block_rows) {
    const std::int64_t n = std::min(block_rows, rows - r);
    cuda_ok(cudaMemcpy(static_cast<char*>(x.data()) + r * hidden * 2, block.data(), n * hidden * 2,
                       cudaMemcpyDeviceToDevice),
            "fill x");
  }
  const TensorView xv = TensorView::contiguous(x.data(), DType::kBFloat16, {rows, hidden}, d);
  const TensorView yv = TensorView::contiguous(y.data(), DType::kBFloat16, {rows, hidden}, d);
  const TensorView wv = w.vector_view(wd.data(), d);
  const TensorView rv = float_vector_view(rstd.floats(), rows, d);
  tigon::rms_norm_fwd(p, xv, wv, yv, rv);
  cuda_ok(cudaDeviceSynchronize(), "forward");

  // The rows checked: both ends and both sides of the 2^31-element boundary. They are compared
  // with the CPU backend run on just those rows, with the tolerances of the other tests.
  const std::int64_t boundary = (std::int64_t{1} << 31) / hidden;
  const std::vector<std::int64_t> checked = {
      0, 1, 2, boundary - 1, boundary, boundary + 1, rows - 2, rows - 1};
  Case c;
  c.x = c.w = DType::kBFloat16;
  c.hidden = hidden;
  c.rows = static_cast<std::int64_t>(checked.size());
  HostRun h;
  GpuRun g;
  h.x = Matrix(DType::kBFloat16, c.rows, hidden, hidden, 0);
  h.w = w;
  h.y = g.y = h.dy = h.dx = g.dx = h.x;
  h.dw = g.dw = w;
  h.rstd.assign(c.rows, 0.0f);
  g.rstd.assign(c.rows, 0.0f);
  const std::size_t row_bytes = hidden * 2;
  auto device_row = [&](const DeviceBuffer& b, std::int64_t r) {
    return static_cast<char*>(b.data()) + r * row_bytes;
  };
  for (std::int64_t i = 0; i < c.rows; ++i) {
    const std::int64_t r = checked[i];
    std::memcpy(&h.x.bytes[i * row_bytes], &x_block.bytes[(r % block_rows) * row_bytes], row_bytes);
    cuda_ok(
        cudaMemcpy(&g.y.bytes[i * row_bytes], device_row(y, r), row_bytes, cudaMemcpyDeviceToHost),
        "y row");
    cuda_ok(cudaMemcpy(&g.rstd[i], rstd.floats() + r, 4, cudaMemcpyDeviceToHost), "rstd row");
  }
  const TensorView w_host = h.w.vector_view(h.w.bytes.data(), Device::cpu());
  tigon::rms_norm_fwd(p, h.x.host_view(), w_host, h.y.host_view(),
                      float_vector_view(h.rstd.data(), c.rows, Device::cpu()));
  check_rstd(c, g.rstd, h.rstd);

  // Backward in place into y's buffer, which now holds dy: zero except the checked rows, so dW is
  // exactly the checked rows' terms. Both backends take the GPU's rstd.
  fill_normal(h.dy, rng, 0.0f, 1.0f);
  y.fill(0);
  for (std::int64_t i = 0; i < c.rows; ++i) {
    cuda_ok(cudaMemcpy(device_row(y, checked[i]), &h.dy.bytes[i * row_bytes], row_bytes,
                       cudaMemcpyHostToDevice),
            "dy row");
  }
  DeviceBuffer ws(tigon::rms_norm_bwd_workspace_size(p, xv, wv));
  tigon::rms_norm_bwd(p, yv, xv, wv, rv, yv, w.vector_view(dw.data(), d),
                      Workspace{ws.data(), ws.bytes()});
  cuda_ok(cudaDeviceSynchronize(), "backward");
  for (std::int64_t i = 0; i < c.rows; ++i) {
    cuda_ok(cudaMemcpy(&g.dx.bytes[i * row_bytes], device_row(y, checked[i]), row_bytes,
                       cudaMemcpyDeviceToHost),
            "dx row");
  }
  dw.download(g.dw.bytes.data(), row_bytes);
  const std::vector<float> rstd_forward = h.rstd;
  h.rstd = g.rstd;
  std::vector<float> cpu_ws(tigon::rms_norm_bwd_workspace_size(p, h.x.host_view(), w_host) / 4 + 1);
  tigon::rms_norm_bwd(p, h.dy.host_view(), h.x.host_view(), w_host,
                      float_vector_view(h.rstd.data(), c.rows, Device::cpu()), h.dx.host_view(),
                      h.dw.vector_view(h.dw.bytes.data(), Device::cpu()),
                      Workspace{cpu_ws.data(), cpu_ws.size() * 4});
  with_math(c.mode, c.x, c.w, true, [&]<typename Math, typename X, typename W>() {
    check_forward<Math, X, W>(c, HostRun{h.x, h.w, h.dy, h.y, h.dx, rstd_forward, h.dw}, g);
    check_backward<Math, X, W>(c, h, g);
  });

  // A row whose dy is zero has dx == 0.
  std::vector<std::uint16_t> zero_row(hidden, 1);
  cuda_ok(cudaMemcpy(zero_row.data(), static_cast<char*>(y.data()) + (boundary - 1000) * hidden * 2,
                     hidden * 2, cudaMemcpyDeviceToHost),
          "zero row");
  EXPECT_TRUE(std::all_of(zero_row.begin(), zero_row.end(),
                          [](std::uint16_t b) { return (b & 0x7fff) == 0; }));
}

}  // namespace

// Every forward config fwd_config can return for a shape, on any device, gives the same bits (the
// light kernel folding its upper half against the 8-pack kernel with half the threads): rows of
// every length the two pair at, and lengths where they do not (one config only).
TEST(RmsNormCudaConfigs, EveryForwardConfigGivesTheSameBits) {
  SKIP_WITHOUT_CUDA_DEVICE();
  using namespace tigon::cuda::rms_norm;  // NOLINT(google-build-using-namespace)
  for (std::int64_t hidden : {8, 1024, 4096, 8200, 8704, 10240, 12288, 14336, 16384}) {
    for (CastingMode mode : {CastingMode::kLlama, CastingMode::kGemma, CastingMode::kNone}) {
      Case c;
      c.mode = mode;
      c.x = DType::kBFloat16;
      c.w = DType::kFloat32;
      c.hidden = hidden;
      c.rows = 37;
      SCOPED_TRACE(c.name());
      const RmsNormParams p = params_for(c);
      HostRun h = make_inputs(c, tigon::rms_norm_output_dtype(p, c.x, c.w, true));
      const Device d = Device::cuda(0);
      DeviceBuffer x = to_device(h.x), w = to_device(h.w);
      DeviceBuffer y(h.y.bytes.size()), rstd(sizeof(float) * c.rows);
      tigon::detail::RmsNormFwdArgs a;
      a.params = p;
      a.rows = c.rows;
      a.hidden = hidden;
      a.x = x.data();
      a.x_row_stride = hidden;
      a.x_dtype = c.x;
      a.weight = w.data();
      a.weight_dtype = c.w;
      a.y = y.data();
      a.y_row_stride = hidden;
      a.y_dtype = h.y.dtype;
      a.rstd = rstd.floats();
      std::vector<Matrix> ys;
      std::vector<std::vector<float>> rstds;
      std::vector<FwdConfig> seen;
      for (const DeviceTraits traits : {DeviceTraits{true, false}, DeviceTraits{true, true},
                                        DeviceTraits{false, false}, DeviceTraits{false, true}}) {
        const FwdConfig f = fwd_config(hidden, 8, 2, traits);
        // Only configs this device can run: clusters need sm_90 code, and a split without a
        // cluster is the same kernel whatever the device says of them.
        if (f.split.slices > 1 && !tigon::cuda::device_properties(0).clusters) continue;
        y.fill(0xA5);
        rstd.fill(0xFF);
        fwd_with_config(a, &f, 0, nullptr);
        cuda_ok(cudaDeviceSynchronize(), "forward");
        ys.push_back(from_device(y, h.y));
        rstds.push_back(floats_from_device(rstd, c.rows));
        seen.push_back(f);
      }
      ASSERT_FALSE(ys.empty());
      for (std::size_t i = 1; i < ys.size(); ++i) {
        expect_bitwise_equal(ys[i], ys[0], "y under another forward config");
        EXPECT_EQ(rstds[i], rstds[0]) << "rstd under another forward config";
      }
      // Where two kernels serve the shape, both ran.
      if (hidden == 16384) {
        EXPECT_TRUE(std::any_of(seen.begin(), seen.end(),
                                [](const FwdConfig& f) { return f.kernel == FwdKernel::kRows; }));
        EXPECT_TRUE(std::any_of(seen.begin(), seen.end(), [](const FwdConfig& f) {
          return f.kernel == FwdKernel::kLightRows && f.fold_half;
        }));
      }
    }
  }
}

// Rows split into slices give the same bits through a cluster and, as on a GPU without clusters
// (an A100), through the slice sums in global memory (SlicePass): forward and backward, forced
// here on this GPU.
TEST(RmsNormCudaConfigs, SliceSumsGiveTheClusterBits) {
  SKIP_WITHOUT_CUDA_DEVICE();
  if (!tigon::cuda::device_properties(0).clusters) GTEST_SKIP() << "needs sm_90 clusters";
  using namespace tigon::cuda::rms_norm;  // NOLINT(google-build-using-namespace)
  const DeviceTraits with{true, false}, without{false, false};
  const struct {
    DType x;
    std::int64_t hidden;
    bool affine;
  } shapes[] = {{DType::kBFloat16, 24576, true},  {DType::kBFloat16, 65536, true},
                {DType::kBFloat16, 131072, true}, {DType::kBFloat16, 131072, false},
                {DType::kFloat32, 12288, true},   {DType::kFloat32, 20480, true},
                {DType::kFloat32, 65536, false}};
  for (const auto& shape : shapes) {
    for (CastingMode mode : {CastingMode::kLlama, CastingMode::kGemma}) {
      Case c;
      c.mode = mode;
      c.x = shape.x;
      c.w = DType::kFloat32;
      c.affine = shape.affine;
      c.hidden = shape.hidden;
      c.rows = 19;
      SCOPED_TRACE(c.name());
      const RmsNormParams p = params_for(c);
      HostRun h = make_inputs(c, tigon::rms_norm_output_dtype(p, c.x, c.w, c.affine));
      run_cpu(c, h);  // the backward's rstd input
      const int x_size = static_cast<int>(tigon::element_size(c.x));
      const int pack = 16 / x_size;
      DeviceBuffer x = to_device(h.x), dy = to_device(h.dy);
      DeviceBuffer w = c.affine ? to_device(h.w) : DeviceBuffer(4);
      DeviceBuffer y(h.y.bytes.size()), rstd(sizeof(float) * c.rows), dx(h.dx.bytes.size());
      DeviceBuffer dw(c.affine ? h.dw.bytes.size() : 4);
      DeviceBuffer rstd_in(sizeof(float) * c.rows);
      rstd_in.upload(h.rstd.data(), sizeof(float) * c.rows);

      tigon::detail::RmsNormFwdArgs a;
      a.params = p;
      a.rows = c.rows;
      a.hidden = c.hidden;
      a.x = x.data();
      a.x_row_stride = c.hidden;
      a.x_dtype = c.x;
      a.weight = c.affine ? w.data() : nullptr;
      a.weight_dtype = c.affine ? c.w : c.x;
      a.y = y.data();
      a.y_row_stride = c.hidden;
      a.y_dtype = h.y.dtype;
      a.rstd = rstd.floats();
      const FwdConfig clustered = fwd_config(c.hidden, pack, x_size, with);
      const FwdConfig sliced = fwd_config(c.hidden, pack, x_size, without);
      DeviceBuffer fwd_ws(sizeof(float) *
                          std::max<std::int64_t>(1, slice_sum_floats(c.rows, sliced.split, true)));
      a.workspace = fwd_ws.data();
      std::vector<Matrix> ys;
      std::vector<std::vector<float>> rstds;
      for (const FwdConfig& f : {clustered, sliced}) {
        y.fill(0xA5);
        rstd.fill(0xFF);
        fwd_with_config(a, &f, 0, nullptr);
        cuda_ok(cudaDeviceSynchronize(), "forward");
        ys.push_back(from_device(y, h.y));
        rstds.push_back(floats_from_device(rstd, c.rows));
      }
      if (sliced.split.slices > 1) {
        EXPECT_TRUE(sliced.slice_sums);
        expect_bitwise_equal(ys[1], ys[0], "y through the slice sums");
        EXPECT_EQ(rstds[1], rstds[0]) << "rstd through the slice sums";
      }

      tigon::detail::RmsNormBwdArgs b;
      b.params = p;
      b.rows = c.rows;
      b.hidden = c.hidden;
      b.dy = dy.data();
      b.dy_row_stride = c.hidden;
      b.dy_dtype = h.dy.dtype;
      b.x = x.data();
      b.x_row_stride = c.hidden;
      b.x_dtype = c.x;
      b.weight = c.affine ? w.data() : nullptr;
      b.weight_dtype = c.affine ? c.w : c.x;
      b.rstd = rstd_in.floats();
      b.dx = dx.data();
      b.dx_row_stride = c.hidden;
      b.dw = c.affine ? dw.data() : nullptr;
      const BwdConfig bwd = bwd_config(c.rows, c.hidden, pack, x_size, without);
      const std::int64_t ws_floats = dw_partial_floats(c.rows, c.hidden, x_size, c.affine) +
                                     slice_sum_floats(c.rows, bwd.split, bwd.slice_sums);
      DeviceBuffer bwd_ws(sizeof(float) * std::max<std::int64_t>(1, ws_floats));
      b.workspace = bwd_ws.data();
      b.workspace_bytes = sizeof(float) * ws_floats;
      std::vector<Matrix> dxs, dws;
      for (const DeviceTraits traits : {with, without}) {
        dx.fill(0xA5);
        dw.fill(0xA5);
        bwd_ws.fill(0xFF);
        bwd_with_traits(b, traits, 0, nullptr);
        cuda_ok(cudaDeviceSynchronize(), "backward");
        dxs.push_back(from_device(dx, h.dx));
        if (c.affine) dws.push_back(from_device(dw, h.dw));
      }
      if (bwd.split.slices > 1) {
        EXPECT_TRUE(bwd.slice_sums);
        expect_bitwise_equal(dxs[1], dxs[0], "dx through the slice sums");
        if (c.affine) expect_bitwise_equal(dws[1], dws[0], "dw through the slice sums");
      }
      EXPECT_TRUE(sliced.split.slices > 1 || bwd.split.slices > 1) << "no slices: a useless case";
    }
  }
}

// Launches read the device's properties once (some attribute queries cost hundreds of us), never
// per call.
TEST(RmsNormCudaHostCost, LaunchesQueryTheDeviceOnce) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Case c;
  c.hidden = 4096;
  c.rows = 4;
  const RmsNormParams p = params_for(c);
  HostRun h = make_inputs(c, tigon::rms_norm_output_dtype(p, c.x, c.w, true));
  run_cpu(c, h);  // the backward's rstd input
  GpuCase gpu(c, h);
  GpuRun warm;
  gpu.forward(warm);
  gpu.backward(warm, false);
  const std::int64_t before = tigon::cuda::device_property_queries();
  for (int i = 0; i < 10; ++i) {
    GpuRun r;
    gpu.forward(r);
    gpu.backward(r, false);
  }
  EXPECT_EQ(tigon::cuda::device_property_queries(), before);
}
