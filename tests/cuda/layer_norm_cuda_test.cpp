// GPU tests of the LayerNorm CUDA backend. Every result is checked against the CPU backend (the
// oracle) through the public API on the same inputs, y additionally bit for bit against the
// shared formula applied with the GPU's own mean and rstd. Each case runs with the kernels the
// launch functions pick and again with the streaming kernels forced (every config layout.h can
// return; the layout test checks which shapes take which). Without a CUDA device every test
// reports SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "cpp/test_support.h"
#include "cuda/cuda_test_support.h"
#include "cuda/norm_test_data.h"
#include "cuda/layer_norm/entry.h"
#include "math/float_types.h"
#include "math/layer_norm.h"
#include "ops/layer_norm_args.h"
#include "tigon/tigon.h"

namespace {

using tigon::Device;
using tigon::DType;
using tigon::LayerNormParams;
using tigon::Stream;
using tigon::TensorView;
using tigon::Workspace;
using tigon::cuda::layer_norm::Forced;
using tigon::testing::cuda_ok;
using tigon::testing::DeviceBuffer;
using tigon::testing::element_bits;
using tigon::testing::fill_normal;
using tigon::testing::float_vector_view;
using tigon::testing::floats_from_device;
using tigon::testing::from_device;
using tigon::testing::expect_bitwise_equal;
using tigon::testing::expect_outside_untouched;
using tigon::testing::expect_same_values;
using tigon::testing::Matrix;
using tigon::testing::storage_bits;
using tigon::testing::storage_from;
using tigon::testing::to_device;
using tigon::testing::ulp_at;

// A parameter's dtype, or absent.
struct Param {
  bool present = false;
  DType dtype = DType::kFloat32;
};

std::string param_name(const Param& p) { return p.present ? tigon::dtype_name(p.dtype) : "none"; }

struct Case {
  DType x = DType::kBFloat16;
  Param w, b;
  std::int64_t hidden = 1;
  std::int64_t rows = 1;
  std::int64_t x_pad = 0, y_pad = 0, dy_pad = 0, dx_pad = 0;  // row stride = hidden + pad
  std::int64_t offset = 0;            // elements every tensor and parameter start into its buffer
  std::int64_t workspace_offset = 0;  // floats the workspace starts into its buffer
  float x_mean = 0.0f;                // x ~ N(x_mean, 1)
  Forced forced = Forced::kNone;

  std::string name() const {
    std::string n = std::string("x") + tigon::dtype_name(x) + "_w" + param_name(w) + "_b" +
                    param_name(b) + "_H" + std::to_string(hidden) + "_R" + std::to_string(rows);
    if (x_pad || y_pad || dy_pad || dx_pad) {
      n += "_pad" + std::to_string(x_pad) + "_" + std::to_string(y_pad) + "_" +
           std::to_string(dy_pad) + "_" + std::to_string(dx_pad);
    }
    if (offset) n += "_offset" + std::to_string(offset);
    if (workspace_offset) n += "_wsoffset" + std::to_string(workspace_offset);
    if (x_mean != 0.0f) n += "_mean" + std::to_string(static_cast<int>(x_mean));
    if (forced == Forced::kStreaming) n += "_forced_streaming";
    return n;
  }
};

LayerNormParams params_for(const Case&) {
  LayerNormParams p;
  p.eps = 1e-5f;
  return p;
}

// Inputs and the CPU backend's outputs.
struct HostRun {
  Matrix x, w, b, dy, y, dx, dw, db;
  std::vector<float> mean, rstd;
};

TensorView param_view(const Param& p, Matrix& m, void* base, Device d) {
  return p.present ? m.vector_view(base, d) : TensorView{};
}

HostRun make_inputs(const Case& c) {
  std::mt19937 rng(static_cast<std::uint32_t>(std::hash<std::string>{}(c.name())));
  HostRun h;
  h.x = Matrix(c.x, c.rows, c.hidden, c.hidden + c.x_pad, c.offset);
  h.dy = Matrix(c.x, c.rows, c.hidden, c.hidden + c.dy_pad, c.offset);
  h.y = Matrix(c.x, c.rows, c.hidden, c.hidden + c.y_pad, c.offset);
  h.dx = Matrix(c.x, c.rows, c.hidden, c.hidden + c.dx_pad, c.offset);
  fill_normal(h.x, rng, c.x_mean, 1.0f);
  fill_normal(h.dy, rng, 0.0f, 1.0f);
  h.w = Matrix(c.w.dtype, 1, c.hidden, c.hidden, c.offset);
  h.dw = Matrix(c.w.dtype, 1, c.hidden, c.hidden, 0);
  h.b = Matrix(c.b.dtype, 1, c.hidden, c.hidden, c.offset);
  // dB has the bias's dtype (x's when there is no bias: then dB is still asked for, as torch's
  // F.layer_norm(x, w) would not, to test dB without a bias too).
  h.db = Matrix(c.b.present ? c.b.dtype : c.x, 1, c.hidden, c.hidden, 0);
  fill_normal(h.w, rng, 1.0f, 0.25f);
  fill_normal(h.b, rng, 0.0f, 0.5f);
  return h;
}

void run_cpu(const Case& c, HostRun& h) {
  const LayerNormParams p = params_for(c);
  const Device cpu = Device::cpu();
  const TensorView w = param_view(c.w, h.w, h.w.bytes.data(), cpu);
  const TensorView b = param_view(c.b, h.b, h.b.bytes.data(), cpu);
  h.mean.assign(static_cast<std::size_t>(c.rows), 0.0f);
  h.rstd.assign(static_cast<std::size_t>(c.rows), 0.0f);
  const TensorView mean = float_vector_view(h.mean.data(), c.rows, cpu);
  const TensorView rstd = float_vector_view(h.rstd.data(), c.rows, cpu);
  tigon::layer_norm_fwd(p, h.x.host_view(), w, b, h.y.host_view(), mean, rstd);
  const TensorView dw = param_view(c.w, h.dw, h.dw.bytes.data(), cpu);
  const TensorView db = h.db.vector_view(h.db.bytes.data(), cpu);
  std::vector<float> workspace(
      tigon::layer_norm_bwd_workspace_size(p, h.x.host_view(), c.w.present, true) / 4 + 1);
  tigon::layer_norm_bwd(p, h.dy.host_view(), h.x.host_view(), w, mean, rstd, h.dx.host_view(), dw,
                        db, Workspace{workspace.data(), workspace.size() * sizeof(float)});
}

struct GpuRun {
  Matrix y, dx, dw, db;
  std::vector<float> mean, rstd;
};

// The GPU side of a case, with every buffer kept so runs can be repeated.
class GpuCase {
 public:
  GpuCase(const Case& c, HostRun& h) : c_(c), h_(h), p_(params_for(c)) {
    x_ = to_device(h.x);
    w_ = to_device(h.w);
    b_ = to_device(h.b);
    mean_in_ = DeviceBuffer(h.mean.data(), sizeof(float) * c.rows);
    rstd_in_ = DeviceBuffer(h.rstd.data(), sizeof(float) * c.rows);
    mean_out_ = DeviceBuffer(sizeof(float) * c.rows);
    rstd_out_ = DeviceBuffer(sizeof(float) * c.rows);
    y_ = DeviceBuffer(h.y.bytes.size());
    dy_ = DeviceBuffer(h.dy.bytes.size());
    dx_ = DeviceBuffer(h.dx.bytes.size());
    dw_ = DeviceBuffer(h.dw.bytes.size());
    db_ = DeviceBuffer(h.db.bytes.size());
    workspace_bytes_ = tigon::layer_norm_bwd_workspace_size(p_, x_view(), c.w.present, true);
    workspace_ = DeviceBuffer(workspace_bytes_ + sizeof(float) * c.workspace_offset);
  }

  TensorView x_view() const { return h_.x.view(x_.data(), Device::cuda(0)); }
  TensorView w_view() const { return param_view(c_.w, h_.w, w_.data(), Device::cuda(0)); }
  TensorView b_view() const { return param_view(c_.b, h_.b, b_.data(), Device::cuda(0)); }

  // Forward into sentinel-filled y, mean and rstd, through the entry point with c.forced (after
  // the public API's validation of the same arguments: a zero-row check-only call).
  void forward(GpuRun& out, Stream stream = {}) {
    y_.fill(0xA5);
    mean_out_.fill(0xFF);
    rstd_out_.fill(0xFF);
    const TensorView y = h_.y.view(y_.data(), Device::cuda(0));
    const TensorView mean = float_vector_view(mean_out_.floats(), c_.rows, Device::cuda(0));
    const TensorView rstd = float_vector_view(rstd_out_.floats(), c_.rows, Device::cuda(0));
    if (c_.forced == Forced::kNone) {
      tigon::layer_norm_fwd(p_, x_view(), w_view(), b_view(), y, mean, rstd, {}, stream);
    } else {
      tigon::detail::LayerNormFwdArgs a;
      a.params = p_;
      a.rows = c_.rows;
      a.hidden = c_.hidden;
      a.x = x_view().data;
      a.x_row_stride = h_.x.stride;
      a.x_dtype = c_.x;
      a.weight = c_.w.present ? w_view().data : nullptr;
      a.weight_dtype = c_.w.present ? c_.w.dtype : c_.x;
      a.bias = c_.b.present ? b_view().data : nullptr;
      a.bias_dtype = c_.b.present ? c_.b.dtype : c_.x;
      a.y = y.data;
      a.y_row_stride = h_.y.stride;
      a.mean = mean_out_.floats();
      a.rstd = rstd_out_.floats();
      tigon::cuda::layer_norm::fwd_forced(a, c_.forced, 0, stream.cuda_stream);
    }
    cuda_ok(cudaDeviceSynchronize(), "forward");
    out.y = from_device(y_, h_.y);
    out.mean = floats_from_device(mean_out_, c_.rows);
    out.rstd = floats_from_device(rstd_out_, c_.rows);
  }

  // Backward with the CPU's mean and rstd, dx into a sentinel-filled buffer (or over dy, in place:
  // then out.dx has dy's layout); the workspace starts as NaN bytes, so a partial read before it is
  // written shows.
  void backward(GpuRun& out, bool in_place, Stream stream = {}) {
    dy_.upload(h_.dy.bytes.data(), h_.dy.bytes.size());
    dx_.fill(0xA5);
    dw_.fill(0xA5);
    db_.fill(0xA5);
    workspace_.fill(0xFF);
    const Device d = Device::cuda(0);
    const TensorView dy = h_.dy.view(dy_.data(), d);
    const TensorView dx = in_place ? dy : h_.dx.view(dx_.data(), d);
    const TensorView dw = param_view(c_.w, h_.dw, dw_.data(), d);
    const TensorView db = h_.db.vector_view(db_.data(), d);
    const TensorView mean = float_vector_view(mean_in_.floats(), c_.rows, d);
    const TensorView rstd = float_vector_view(rstd_in_.floats(), c_.rows, d);
    Workspace ws{workspace_.floats() + c_.workspace_offset, workspace_bytes_};
    if (c_.forced == Forced::kNone) {
      tigon::layer_norm_bwd(p_, dy, x_view(), w_view(), mean, rstd, dx, dw, db, ws, stream);
    } else {
      tigon::detail::LayerNormBwdArgs a;
      a.params = p_;
      a.rows = c_.rows;
      a.hidden = c_.hidden;
      a.dy = dy.data;
      a.dy_row_stride = h_.dy.stride;
      a.x = x_view().data;
      a.x_row_stride = h_.x.stride;
      a.x_dtype = c_.x;
      a.weight = c_.w.present ? w_view().data : nullptr;
      a.weight_dtype = c_.w.present ? c_.w.dtype : c_.x;
      a.mean = mean_in_.floats();
      a.rstd = rstd_in_.floats();
      a.dx = dx.data;
      a.dx_row_stride = in_place ? h_.dy.stride : h_.dx.stride;
      a.dw = c_.w.present ? dw.data : nullptr;
      a.db = db.data;
      a.db_dtype = h_.db.dtype;
      a.workspace = ws.data;
      a.workspace_bytes = ws.bytes;
      tigon::cuda::layer_norm::bwd_forced(a, c_.forced, 0, stream.cuda_stream);
    }
    cuda_ok(cudaDeviceSynchronize(), "backward");
    if (in_place) {
      out.dx = from_device(dy_, h_.dy);
    } else {
      out.dx = from_device(dx_, h_.dx);
    }
    if (c_.w.present) out.dw = from_device(dw_, h_.dw);
    out.db = from_device(db_, h_.db);
  }

 private:
  const Case& c_;
  HostRun& h_;
  LayerNormParams p_;
  DeviceBuffer x_, w_, b_, mean_in_, rstd_in_, mean_out_, rstd_out_, y_, dy_, dx_, dw_, db_,
      workspace_;
  std::size_t workspace_bytes_ = 0;
};

// A float32 sum of n terms in any fixed order is within about 2^-24 * (depth of the order) of the
// exact sum, relative to the sum of |terms|; both backends' orders are at most ~16 + sqrt(n) deep.
double sum_tolerance(std::int64_t n, double sum_abs) {
  return std::ldexp(1.0, -22) * (16.0 + std::sqrt(double(n))) * sum_abs;
}

// mean and rstd: the same formulas on sums in another order.
void check_statistics(const Case& c, const HostRun& h, const GpuRun& g) {
  std::int64_t bad = 0;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    double sum_abs = 0.0;
    for (std::int64_t j = 0; j < c.hidden; ++j) sum_abs += std::fabs(double(h.x.get(r, j)));
    const double mean_tol =
        sum_tolerance(c.hidden, sum_abs) / double(c.hidden) + ulp_at(DType::kFloat32, h.mean[r]);
    // rstd moves by its relative sum error (the variance's, halved) and by the mean's error
    // (first order zero: the centered sum is stationary in the mean).
    const double rstd_tol =
        h.rstd[r] * (std::ldexp(1.0, -21) * (16.0 + std::sqrt(double(c.hidden))));
    if (!(std::fabs(double(g.mean[r]) - h.mean[r]) <= mean_tol)) {
      if (bad++ < 5)
        ADD_FAILURE() << "mean row " << r << ": gpu " << g.mean[r] << " cpu " << h.mean[r]
                      << " tol " << mean_tol;
    }
    if (!(std::fabs(double(g.rstd[r]) - h.rstd[r]) <= rstd_tol)) {
      if (bad++ < 5)
        ADD_FAILURE() << "rstd row " << r << ": gpu " << g.rstd[r] << " cpu " << h.rstd[r]
                      << " tol " << rstd_tol;
    }
  }
  EXPECT_EQ(bad, 0) << "mean/rstd rows out of tolerance";
}


// y: (1) bit for bit the shared formula with the GPU's own mean and rstd; (2) against the CPU
// backend: identical bits in rows whose statistics matched, elsewhere within the first-order
// effect of the statistics' difference plus two steps of x's dtype; for 16-bit x, >= 99% of all
// elements identical to the CPU's.
template <typename X, typename W, typename B>
void check_forward(const Case& c, const HostRun& h, const GpuRun& g) {
  using Math = tigon::math::LayerNorm<X, W, B>;
  std::int64_t formula_mismatch = 0, exact = 0, far = 0;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    const bool same_stats = g.mean[r] == h.mean[r] && g.rstd[r] == h.rstd[r];
    for (std::int64_t j = 0; j < c.hidden; ++j) {
      const float w = c.w.present ? tigon::math::to_float(storage_from<W>(h.w, 0, j)) : 1.0f;
      const float b = c.b.present ? tigon::math::to_float(storage_from<B>(h.b, 0, j)) : 0.0f;
      const float x = h.x.get(r, j);
      const X expected = Math::output(Math::normalized(x, g.mean[r], g.rstd[r]), w, b);
      const std::uint32_t gpu_bits = g.y.bits(r, j);
      if (storage_bits(expected) != gpu_bits && formula_mismatch++ < 5) {
        ADD_FAILURE() << "y(" << r << ", " << j << ") = " << g.y.get(r, j)
                      << " differs from the formula with the GPU's mean and rstd: "
                      << tigon::math::to_float(expected);
      }
      if (gpu_bits == h.y.bits(r, j)) {
        ++exact;
        continue;
      }
      bool ok = false;
      if (!same_stats) {
        const double dm = std::fabs(double(g.mean[r]) - h.mean[r]);
        const double dr = std::fabs(double(g.rstd[r]) - h.rstd[r]);
        const double centered = std::fabs(double(x) - h.mean[r]);
        const double tol =
            std::fabs(double(w)) * (centered * dr + h.rstd[r] * dm) * 1.01 +
            std::fabs(double(w)) * ulp_at(DType::kFloat32, centered * h.rstd[r]) * 4 +
            2.0 * ulp_at(c.x, h.y.get(r, j));
        ok = std::fabs(double(g.y.get(r, j)) - h.y.get(r, j)) <= tol;
      }
      if (!ok && far++ < 5) {
        ADD_FAILURE() << "y(" << r << ", " << j << "): gpu " << g.y.get(r, j) << " cpu "
                      << h.y.get(r, j) << (same_stats ? " (same mean and rstd)" : "");
      }
    }
  }
  EXPECT_EQ(formula_mismatch, 0) << "y elements off the shared formula";
  EXPECT_EQ(far, 0) << "y elements out of tolerance vs the CPU backend";
  const double total = double(c.rows) * double(c.hidden);
  if (c.x != DType::kFloat32 && total >= 1000) {
    EXPECT_GE(exact / total, 0.99) << "bitwise-equal fraction of y vs the CPU backend";
  }
}

// dx: the backends differ only in the order of the row sums sum(g * xhat) and sum(g): bound their
// effect, rstd * (|xhat| * err(mean(g xhat)) + err(mean(g))), plus two steps of x's dtype. dW, dB:
// the same terms summed over rows in another order: 1e-5 of the sum of |terms| plus two steps of
// the gradient's dtype.
template <typename X, typename W>
void check_backward(const Case& c, const HostRun& h, const GpuRun& g) {
  using Math = tigon::math::LayerNorm<X, W, X>;
  std::vector<double> dw_abs(static_cast<std::size_t>(c.hidden), 0.0);
  std::vector<double> db_abs(static_cast<std::size_t>(c.hidden), 0.0);
  std::int64_t bad_dx = 0;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    const float mean = h.mean[r], rs = h.rstd[r];
    double gx_abs = 0.0, g_abs = 0.0, gx_sum = 0.0, g_sum = 0.0;
    const auto weight_at = [&](std::int64_t j) {
      return c.w.present ? tigon::math::to_float(storage_from<W>(h.w, 0, j)) : 1.0f;
    };
    for (std::int64_t j = 0; j < c.hidden; ++j) {
      const float d = h.dy.get(r, j);
      const float xhat = Math::normalized(h.x.get(r, j), mean, rs);
      gx_abs += std::fabs(double(d) * weight_at(j) * xhat);
      g_abs += std::fabs(double(d) * weight_at(j));
      gx_sum += double(d) * weight_at(j) * xhat;
      g_sum += double(d) * weight_at(j);
      dw_abs[j] += std::fabs(double(d) * xhat);
      db_abs[j] += std::fabs(double(d));
    }
    const double err_gx = sum_tolerance(c.hidden, gx_abs) / double(c.hidden);
    const double err_g = sum_tolerance(c.hidden, g_abs) / double(c.hidden);
    const double c1 = gx_sum / double(c.hidden), c2 = g_sum / double(c.hidden);
    for (std::int64_t j = 0; j < c.hidden; ++j) {
      const double ref = h.dx.get(r, j);
      const double got = g.dx.get(r, j);
      const double xhat = Math::normalized(h.x.get(r, j), mean, rs);
      // Other c1, c2 also round (g - c2), xhat * c1 and their difference differently: a float32
      // step of each, before the multiplication by rstd (where dx cancels, far more than a step
      // of dx).
      const double gv = double(h.dy.get(r, j)) * weight_at(j);
      const double steps = ulp_at(DType::kFloat32, std::fabs(gv - c2)) +
                           ulp_at(DType::kFloat32, std::fabs(xhat * c1)) +
                           ulp_at(DType::kFloat32, std::fabs(gv - c2 - xhat * c1));
      const double tol =
          2.0 * ulp_at(c.x, ref) + rs * (std::fabs(xhat) * err_gx + err_g + 2.0 * steps) * 1.01;
      if (!(std::fabs(got - ref) <= tol) && bad_dx++ < 5) {
        ADD_FAILURE() << "dx(" << r << ", " << j << "): gpu " << got << " cpu " << ref << " tol "
                      << tol;
      }
    }
  }
  EXPECT_EQ(bad_dx, 0) << "dx elements out of tolerance";
  auto check_column_sums = [&](const Matrix& gpu, const Matrix& cpu,
                               const std::vector<double>& abs_sums, const char* what) {
    std::int64_t bad = 0;
    for (std::int64_t j = 0; j < c.hidden; ++j) {
      const double ref = cpu.get(0, j), got = gpu.get(0, j);
      const double tol = 2.0 * ulp_at(cpu.dtype, ref) + 1e-5 * abs_sums[j];
      if (!(std::fabs(got - ref) <= tol) && bad++ < 5) {
        ADD_FAILURE() << what << "(" << j << "): gpu " << got << " cpu " << ref << " tol " << tol;
      }
    }
    EXPECT_EQ(bad, 0) << what << " elements out of tolerance";
  };
  if (c.w.present) check_column_sums(g.dw, h.dw, dw_abs, "dw");
  check_column_sums(g.db, h.db, db_abs, "db");
}

// Calls f.template operator()<X, W, B>() for the case's dtypes (X for an absent parameter).
template <typename F>
void with_types(const Case& c, F&& f) {
  tigon::detail::dispatch_dtype(c.x, [&](auto x_tag) {
    using X = typename decltype(x_tag)::type;
    tigon::detail::dispatch_dtype(c.w.present ? c.w.dtype : c.x, [&](auto w_tag) {
      using W = typename decltype(w_tag)::type;
      tigon::detail::dispatch_dtype(c.b.present ? c.b.dtype : c.x, [&](auto b_tag) {
        using B = typename decltype(b_tag)::type;
        f.template operator()<X, W, B>();
      });
    });
  });
}

// Forward and backward of one case on the GPU and on the CPU backend, compared; repeated runs give
// the same bits, nothing outside the views is written, and dx written in place over dy is bit for
// bit dx written to its own buffer.
void run_case(const Case& c) {
  SCOPED_TRACE(c.name());
  HostRun h = make_inputs(c);
  run_cpu(c, h);

  GpuCase gpu(c, h);
  GpuRun first, second, in_place;
  gpu.forward(first);
  gpu.forward(second);
  expect_outside_untouched(first.y, "y");
  expect_bitwise_equal(first.y, second.y, "y of two identical forward runs");
  EXPECT_EQ(first.mean, second.mean) << "mean of two identical forward runs";
  EXPECT_EQ(first.rstd, second.rstd) << "rstd of two identical forward runs";

  gpu.backward(first, /*in_place=*/false);
  gpu.backward(second, /*in_place=*/false);
  expect_outside_untouched(first.dx, "dx");
  expect_bitwise_equal(first.dx, second.dx, "dx of two identical backward runs");
  if (c.w.present) expect_bitwise_equal(first.dw, second.dw, "dw of two identical backward runs");
  expect_bitwise_equal(first.db, second.db, "db of two identical backward runs");
  gpu.backward(in_place, /*in_place=*/true);
  expect_same_values(in_place.dx, first.dx, "dx in place vs in its own buffer");
  if (c.w.present) expect_bitwise_equal(in_place.dw, first.dw, "dw in place vs out of place");
  expect_bitwise_equal(in_place.db, first.db, "db in place vs out of place");

  check_statistics(c, h, first);
  with_types(c, [&]<typename X, typename W, typename B>() {
    check_forward<X, W, B>(c, h, first);
    check_backward<X, W>(c, h, first);
  });
}

struct Params {
  Param w, b;
};

// Parameters per x dtype: both in x's dtype, both float32, none, only a weight, only a bias, a
// float32 weight with a bias in x's dtype.
std::vector<Params> all_params(DType x) {
  const Param px{true, x}, pf{true, DType::kFloat32}, none{};
  return {{px, px}, {pf, pf}, {none, none}, {px, none}, {none, px}, {pf, px}};
}

const DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

struct Scenario {
  std::string name;
  Case layout;            // hidden, rows, pads, offsets, x_mean (dtypes are set per run)
  bool all_pairs = true;  // every parameter combination, else x's dtype for both
};

void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

class LayerNormCuda : public ::testing::TestWithParam<Scenario> {};

TEST_P(LayerNormCuda, MatchesCpuBackend) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Scenario& s = GetParam();
  for (const Forced forced : {Forced::kNone, Forced::kStreaming}) {
    for (const DType x : kDtypes) {
      std::vector<Params> params = all_params(x);
      if (!s.all_pairs) params.resize(1);
      for (const Params& pp : params) {
        Case c = s.layout;
        c.x = x;
        c.w = pp.w;
        c.b = pp.b;
        c.forced = forced;
        run_case(c);
      }
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

// Sizes across the register kernels' splits (several rows a block, one pack a thread; 2 and 4
// packs a thread in the backward) and the streaming kernels (float32 forward past 16384, every
// backward past 2048 16-byte packs); odd sizes take the scalar path.
std::vector<Scenario> size_scenarios() {
  std::vector<Scenario> v;
  for (std::int64_t h : {1, 3, 64, 127, 1000, 1024, 4096, 4097})
    v.push_back(scenario("Small_H" + std::to_string(h), h));
  for (std::int64_t h : {8192, 16384, 32768, 65537})
    v.push_back(scenario("Large_H" + std::to_string(h), h, /*all_pairs=*/false));
  return v;
}

// Many rows: many dW groups, several row slots a block (H 64, 1024), long groups.
std::vector<Scenario> many_row_scenarios() {
  std::vector<Scenario> v;
  for (const auto [h, rows] :
       {std::pair<std::int64_t, std::int64_t>{64, 9001}, {1024, 5003}, {4096, 2049}}) {
    Scenario s = scenario("ManyRows_H" + std::to_string(h), h, /*all_pairs=*/false);
    s.layout.rows = rows;
    v.push_back(s);
  }
  return v;
}

// Row-strided views (padding keeping 16-byte alignment: vector path; odd padding: scalar path),
// pointers one element off 16 bytes, a workspace 4 bytes off, a single row, a large mean.
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

    Scenario large_mean = s;
    large_mean.name = "LargeMean" + suffix;
    large_mean.layout.x_mean = 100.0f;
    v.push_back(large_mean);
  }
  return v;
}

std::string scenario_name(const ::testing::TestParamInfo<Scenario>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Sizes, LayerNormCuda, ::testing::ValuesIn(size_scenarios()),
                         scenario_name);
INSTANTIATE_TEST_SUITE_P(ManyRows, LayerNormCuda, ::testing::ValuesIn(many_row_scenarios()),
                         scenario_name);
INSTANTIATE_TEST_SUITE_P(Layouts, LayerNormCuda, ::testing::ValuesIn(layout_scenarios()),
                         scenario_name);

// ---------------------------------------------------------------------------------------------

TEST(LayerNormCudaEdge, ZeroRowsGivesZeroParameterGradients) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::int64_t hidden = 1000;
  LayerNormParams p;
  DeviceBuffer x(2 * hidden), w(2 * hidden), y(2 * hidden), stats(8), dw(2 * hidden),
      db(4 * hidden);
  dw.fill(0x5A);
  db.fill(0x5A);
  const Device d = Device::cuda(0);
  const TensorView xv = TensorView::contiguous(x.data(), DType::kBFloat16, {0, hidden}, d);
  const TensorView wv = TensorView::contiguous(w.data(), DType::kBFloat16, {hidden}, d);
  const TensorView yv = TensorView::contiguous(y.data(), DType::kBFloat16, {0, hidden}, d);
  const TensorView sv = TensorView::contiguous(stats.data(), DType::kFloat32, {0}, d);
  const TensorView dwv = TensorView::contiguous(dw.data(), DType::kBFloat16, {hidden}, d);
  const TensorView dbv = TensorView::contiguous(db.data(), DType::kFloat32, {hidden}, d);
  tigon::layer_norm_fwd(p, xv, wv, {}, yv, sv, sv);
  EXPECT_EQ(tigon::layer_norm_bwd_workspace_size(p, xv, true, true), 0u);
  tigon::layer_norm_bwd(p, yv, xv, wv, sv, sv, xv, dwv, dbv, {});
  cuda_ok(cudaDeviceSynchronize(), "sync");
  std::vector<std::uint16_t> dw_host(hidden, 1);
  dw.download(dw_host.data(), 2 * hidden);
  EXPECT_TRUE(std::all_of(dw_host.begin(), dw_host.end(), [](std::uint16_t b) { return b == 0; }));
  std::vector<std::uint32_t> db_host(hidden, 1);
  db.download(db_host.data(), 4 * hidden);
  EXPECT_TRUE(std::all_of(db_host.begin(), db_host.end(), [](std::uint32_t b) { return b == 0; }));
}

// Forward and backward captured in a CUDA graph on a non-blocking stream and replayed: the same
// bits as eager calls.
TEST(LayerNormCudaGraph, CapturedCallsMatchEagerOnes) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Case c;
  c.x = DType::kBFloat16;
  c.w = {true, DType::kBFloat16};
  c.b = {true, DType::kBFloat16};
  c.hidden = 4096;
  c.rows = 300;
  HostRun h = make_inputs(c);
  const LayerNormParams p = params_for(c);
  const Device d = Device::cuda(0);
  DeviceBuffer x = to_device(h.x), w = to_device(h.w), b = to_device(h.b), dy = to_device(h.dy);
  DeviceBuffer y(h.y.bytes.size()), mean(4 * c.rows), rstd(4 * c.rows), dx(h.x.bytes.size()),
      dw(h.dw.bytes.size()), db(h.db.bytes.size());
  const TensorView xv = h.x.view(x.data(), d), wv = h.w.vector_view(w.data(), d),
                   bv = h.b.vector_view(b.data(), d), yv = h.y.view(y.data(), d),
                   dyv = h.dy.view(dy.data(), d), dxv = h.x.view(dx.data(), d),
                   dwv = h.dw.vector_view(dw.data(), d), dbv = h.db.vector_view(db.data(), d);
  const TensorView mv = float_vector_view(mean.floats(), c.rows, d);
  const TensorView rv = float_vector_view(rstd.floats(), c.rows, d);
  DeviceBuffer ws(tigon::layer_norm_bwd_workspace_size(p, xv, true, true));
  const Workspace workspace{ws.data(), ws.bytes()};

  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  auto run = [&] {
    tigon::layer_norm_fwd(p, xv, wv, bv, yv, mv, rv, {}, Stream{stream});
    tigon::layer_norm_bwd(p, dyv, xv, wv, mv, rv, dxv, dwv, dbv, workspace, Stream{stream});
  };
  run();
  cuda_ok(cudaStreamSynchronize(stream), "eager");
  const Matrix y_eager = from_device(y, h.y), dx_eager = from_device(dx, h.x),
               dw_eager = from_device(dw, h.dw), db_eager = from_device(db, h.db);
  const std::vector<float> mean_eager = floats_from_device(mean, c.rows);

  for (DeviceBuffer* buffer : {&y, &dx, &dw, &db, &mean, &rstd}) buffer->fill(0);
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
  expect_bitwise_equal(from_device(db, h.db), db_eager, "db graph vs eager");
  EXPECT_EQ(floats_from_device(mean, c.rows), mean_eager);
  cuda_ok(cudaGraphExecDestroy(exec), "destroy exec");
  cuda_ok(cudaGraphDestroy(graph), "destroy graph");
  cuda_ok(cudaStreamDestroy(stream), "destroy stream");
}

}  // namespace
