// GPU tests of fused residual add + RMSNorm (h = x + residual, y = rms_norm(h)) on CUDA. Each case
// runs the op through the public API and checks, for every casting mode and dtype pair:
//   h      bit for bit the CPU backend's (an elementwise add: no order to differ);
//   y      bit for bit the GPU's plain RMSNorm of that h (the fused kernels are RMSNorm's with the
//          add compiled in), and bit for bit the shared formula on h with the GPU's rstd;
//   rstd   bit for bit the plain RMSNorm's, within RMSNorm's tolerance of the CPU backend's;
//   dx     bit for bit round(dh + the GPU RMSNorm's dx), within tolerance of the CPU backend's;
//   dw     bit for bit the GPU RMSNorm's dw (deterministic), within tolerance of the CPU's;
// plus: two runs give the same bits, dx written over dh (and over dy) equals dx in its own buffer,
// nothing outside a view is written, and every launch config the configs can return for a shape
// gives the same bits. Without a CUDA device every test reports SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cpp/test_support.h"
#include "cuda/common/device_properties.h"
#include "cuda/cuda_test_support.h"
#include "cuda/norm_test_data.h"
#include "cuda/rms_norm/modes.h"
#include "math/residual_add.h"
#include "ops/rms_norm_args.h"
#include "tigon/tigon.h"

namespace {

using tigon::CastingMode;
using tigon::Device;
using tigon::DType;
using tigon::RmsNormParams;
using tigon::TensorView;
using tigon::Workspace;
using tigon::testing::cuda_ok;
using tigon::testing::DeviceBuffer;
using tigon::testing::expect_bitwise_equal;
using tigon::testing::expect_outside_untouched;
using tigon::testing::expect_same_values;
using tigon::testing::fill_normal;
using tigon::testing::float_vector_view;
using tigon::testing::floats_from_device;
using tigon::testing::from_device;
using tigon::testing::Matrix;
using tigon::testing::storage_bits;
using tigon::testing::storage_from;
using tigon::testing::to_device;
using tigon::testing::ulp_at;
using tigon::testing::with_math;

const Device kGpu = Device::cuda(0);

struct Case {
  CastingMode mode = CastingMode::kLlama;
  DType x = DType::kBFloat16;
  DType w = DType::kBFloat16;
  bool affine = true;
  std::int64_t hidden = 1;
  std::int64_t rows = 1;
  // Tensor k of (x, residual, h, y, dy, dh, dx) has row stride hidden + pad * (k + 1): all
  // different, multiples of 8 keep the 16-byte path, odd ones force the scalar path.
  std::int64_t pad = 0;
  std::int64_t offset = 0;  // elements every tensor and the weight start into their buffer

  std::string name() const {
    std::string n = tigon::casting_mode_name(mode);
    n += std::string("_x") + tigon::dtype_name(x);
    n += affine ? std::string("_w") + tigon::dtype_name(w) : std::string("_noaffine");
    n += "_H" + std::to_string(hidden) + "_R" + std::to_string(rows);
    if (pad) n += "_pad" + std::to_string(pad);
    if (offset) n += "_offset" + std::to_string(offset);
    return n;
  }
  std::int64_t stride(int k) const { return hidden + pad * (k + 1); }
  Matrix matrix(DType t, int k) const { return Matrix(t, rows, hidden, stride(k), offset); }
};

RmsNormParams params_for(const Case& c) {
  RmsNormParams p;
  p.eps = 1e-6f;
  p.casting_mode = c.mode;
  p.offset = c.affine && c.mode == CastingMode::kGemma ? 1.0f : 0.0f;  // Gemma's (1 + w)
  return p;
}

DType y_dtype_of(const Case& c) {
  return tigon::rms_norm_output_dtype(params_for(c), c.x, c.w, c.affine);
}

// Inputs and the CPU backend's outputs of one case.
struct Host {
  Matrix x, residual, w, dy, dh;  // inputs
  Matrix h, y, dx, dw;            // CPU outputs
  std::vector<float> rstd;        // CPU output
  Matrix norm_dx, norm_dw;        // CPU plain RMSNorm backward of h (for tolerances)
};

Host make_host(const Case& c) {
  std::mt19937 rng(static_cast<std::uint32_t>(std::hash<std::string>{}(c.name())));
  const DType yt = y_dtype_of(c);
  Host h;
  h.x = c.matrix(c.x, 0);
  h.residual = c.matrix(c.x, 1);
  h.h = c.matrix(c.x, 2);
  h.y = c.matrix(yt, 3);
  h.dy = c.matrix(yt, 4);
  h.dh = c.matrix(c.x, 5);
  h.dx = c.matrix(c.x, 6);
  fill_normal(h.x, rng, 0.0f, 1.0f);
  fill_normal(h.residual, rng, 0.0f, 2.0f);
  fill_normal(h.dy, rng, 0.0f, 1.0f);
  fill_normal(h.dh, rng, 0.0f, 1.0f);
  if (c.affine) {
    h.w = Matrix(c.w, 1, c.hidden, c.hidden, c.offset);
    h.dw = Matrix(c.w, 1, c.hidden, c.hidden, 0);
    fill_normal(h.w, rng, c.mode == CastingMode::kGemma ? 0.0f : 1.0f, 0.25f);
  }
  return h;
}

TensorView host_weight(Host& h, const Case& c) {
  return c.affine ? h.w.vector_view(h.w.bytes.data(), Device::cpu()) : TensorView{};
}

void run_cpu(const Case& c, Host& h) {
  const RmsNormParams p = params_for(c);
  const TensorView w = host_weight(h, c);
  h.rstd.assign(static_cast<std::size_t>(c.rows), 0.0f);
  const TensorView rstd = float_vector_view(h.rstd.data(), c.rows, Device::cpu());
  tigon::fused_add_rms_norm_fwd(p, h.x.host_view(), h.residual.host_view(), w, h.h.host_view(),
                                h.y.host_view(), rstd);
  const TensorView dw =
      c.affine ? h.dw.vector_view(h.dw.bytes.data(), Device::cpu()) : TensorView{};
  std::vector<float> ws(tigon::fused_add_rms_norm_bwd_workspace_size(p, h.h.host_view(), w) / 4 +
                        1);
  tigon::fused_add_rms_norm_bwd(p, h.dy.host_view(), h.dh.host_view(), h.h.host_view(), w, rstd,
                                h.dx.host_view(), dw, Workspace{ws.data(), ws.size() * 4});
}

// Device buffers of one case, kept so that runs can be repeated.
class GpuCase {
 public:
  GpuCase(const Case& c, const Host& h) : c_(c), h_(h), p_(params_for(c)) {
    x_ = to_device(h.x);
    residual_ = to_device(h.residual);
    if (c.affine) w_ = to_device(h.w);
    h_out_ = DeviceBuffer(h.h.bytes.size());
    h_in_ = to_device(h.h);  // the CPU's h: the backward's input (the forward's h equals it)
    y_ = DeviceBuffer(h.y.bytes.size());
    rstd_out_ = DeviceBuffer(sizeof(float) * c.rows);
    rstd_in_ = DeviceBuffer(h.rstd.data(), sizeof(float) * c.rows);
    dy_ = DeviceBuffer(h.dy.bytes.size());
    dh_ = DeviceBuffer(h.dh.bytes.size());
    dx_ = DeviceBuffer(h.dx.bytes.size());
    if (c.affine) dw_ = DeviceBuffer(h.dw.bytes.size());
    fwd_ws_bytes_ = tigon::fused_add_rms_norm_fwd_workspace_size(p_, view(h.x, x_), w_view());
    fwd_ws_ = DeviceBuffer(fwd_ws_bytes_);
    bwd_ws_bytes_ = tigon::fused_add_rms_norm_bwd_workspace_size(p_, view(h.h, h_in_), w_view());
    bwd_ws_ = DeviceBuffer(bwd_ws_bytes_);
  }

  static TensorView view(const Matrix& m, const DeviceBuffer& b) { return m.view(b.data(), kGpu); }
  TensorView w_view() const { return c_.affine ? h_.w.vector_view(w_.data(), kGpu) : TensorView{}; }
  TensorView rstd_in() const { return float_vector_view(rstd_in_.floats(), c_.rows, kGpu); }

  struct Forward {
    Matrix h, y;
    std::vector<float> rstd;
  };
  // The fused forward into sentinel-filled h, y and rstd.
  Forward forward() {
    h_out_.fill(0xA5);
    y_.fill(0xA5);
    rstd_out_.fill(0xFF);
    tigon::fused_add_rms_norm_fwd(p_, view(h_.x, x_), view(h_.residual, residual_), w_view(),
                                  view(h_.h, h_out_), view(h_.y, y_),
                                  float_vector_view(rstd_out_.floats(), c_.rows, kGpu),
                                  Workspace{fwd_ws_.data(), fwd_ws_bytes_});
    cuda_ok(cudaDeviceSynchronize(), "fused forward");
    return {from_device(h_out_, h_.h), from_device(y_, h_.y),
            floats_from_device(rstd_out_, c_.rows)};
  }

  // Plain RMSNorm of the CPU's h on the GPU (the unfused composition's second step).
  Forward plain_forward() {
    y_.fill(0xA5);
    rstd_out_.fill(0xFF);
    DeviceBuffer ws(tigon::rms_norm_fwd_workspace_size(p_, view(h_.h, h_in_), w_view()));
    tigon::rms_norm_fwd(p_, view(h_.h, h_in_), w_view(), view(h_.y, y_),
                        float_vector_view(rstd_out_.floats(), c_.rows, kGpu),
                        Workspace{ws.data(), ws.bytes()});
    cuda_ok(cudaDeviceSynchronize(), "plain forward");
    return {h_.h, from_device(y_, h_.y), floats_from_device(rstd_out_, c_.rows)};
  }

  struct Backward {
    Matrix dx, dw;
  };
  enum class Into { kOwnBuffer, kDh, kDy };
  // The fused backward (CPU rstd and h as inputs): dx into a sentinel-filled buffer, or over dh or
  // dy (then returned in that tensor's layout); the workspace starts as NaN bytes.
  Backward backward(Into into) {
    dy_.upload(h_.dy.bytes.data(), h_.dy.bytes.size());
    dh_.upload(h_.dh.bytes.data(), h_.dh.bytes.size());
    dx_.fill(0xA5);
    if (c_.affine) dw_.fill(0xA5);
    bwd_ws_.fill(0xFF);
    const TensorView dx = into == Into::kDh   ? view(h_.dh, dh_)
                          : into == Into::kDy ? view(h_.dy, dy_)
                                              : view(h_.dx, dx_);
    tigon::fused_add_rms_norm_bwd(p_, view(h_.dy, dy_), view(h_.dh, dh_), view(h_.h, h_in_),
                                  w_view(), rstd_in(), dx, dw_view(),
                                  Workspace{bwd_ws_.data(), bwd_ws_bytes_});
    cuda_ok(cudaDeviceSynchronize(), "fused backward");
    Backward out;
    if (into == Into::kDh) {
      out.dx = from_device(dh_, h_.dh);
    } else if (into == Into::kDy) {
      out.dx = from_device(dy_, h_.dy);
    } else {
      out.dx = from_device(dx_, h_.dx);
    }
    if (c_.affine) out.dw = from_device(dw_, h_.dw);
    return out;
  }

  // Plain RMSNorm's backward of the CPU's h on the GPU: the norm's dx (x's dtype) and dw.
  Backward plain_backward() {
    dy_.upload(h_.dy.bytes.data(), h_.dy.bytes.size());
    dx_.fill(0xA5);
    if (c_.affine) dw_.fill(0xA5);
    DeviceBuffer ws(tigon::rms_norm_bwd_workspace_size(p_, view(h_.h, h_in_), w_view()));
    tigon::rms_norm_bwd(p_, view(h_.dy, dy_), view(h_.h, h_in_), w_view(), rstd_in(),
                        view(h_.dx, dx_), dw_view(), Workspace{ws.data(), ws.bytes()});
    cuda_ok(cudaDeviceSynchronize(), "plain backward");
    Backward out;
    out.dx = from_device(dx_, h_.dx);
    if (c_.affine) out.dw = from_device(dw_, h_.dw);
    return out;
  }

 private:
  TensorView dw_view() const {
    return c_.affine ? h_.dw.vector_view(dw_.data(), kGpu) : TensorView{};
  }

  const Case& c_;
  const Host& h_;
  RmsNormParams p_;
  DeviceBuffer x_, residual_, w_, h_out_, h_in_, y_, rstd_out_, rstd_in_, dy_, dh_, dx_, dw_;
  DeviceBuffer fwd_ws_, bwd_ws_;
  std::size_t fwd_ws_bytes_ = 0, bwd_ws_bytes_ = 0;
};

// Values in the view equal bit for bit (layouts may differ).
void expect_view_bits(const Matrix& got, const Matrix& expected, const char* what) {
  std::int64_t bad = 0;
  for (std::int64_t r = 0; r < got.rows; ++r) {
    for (std::int64_t j = 0; j < got.hidden; ++j) {
      if (got.bits(r, j) != expected.bits(r, j) && bad++ < 5) {
        ADD_FAILURE() << what << " (" << r << ", " << j << "): got " << got.get(r, j)
                      << " expected " << expected.get(r, j);
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << ": elements differ bit for bit";
}

// rstd against the CPU backend's: only the float32 summation order differs (error ~ sqrt(H));
// eager mode rounds it to x's dtype, so it may land one step of that dtype away.
void check_rstd_vs_cpu(const Case& c, const std::vector<float>& gpu,
                       const std::vector<float>& cpu) {
  std::int64_t bad = 0;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    double tol = cpu[r] * std::ldexp(1.0, -22) * (1.0 + std::sqrt(double(c.hidden)));
    if (c.mode == CastingMode::kNone) tol = std::max(tol, ulp_at(c.x, cpu[r]) * 1.01);
    if (!(std::fabs(double(gpu[r]) - cpu[r]) <= tol) && bad++ < 5) {
      ADD_FAILURE() << "rstd row " << r << ": gpu " << gpu[r] << " cpu " << cpu[r];
    }
  }
  EXPECT_EQ(bad, 0) << "rstd rows out of tolerance of the CPU backend";
}

// y bit for bit the shared formula on the CPU's h with the GPU's rstd.
template <typename Math, typename X, typename W>
void check_y_formula(const Case& c, const Host& h, const GpuCase::Forward& g) {
  using Y = typename Math::Y;
  const float offset = params_for(c).offset;
  std::int64_t bad = 0;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    for (std::int64_t j = 0; j < c.hidden; ++j) {
      const float s = c.affine ? Math::scale(storage_from<W>(h.w, 0, j), offset) : 1.0f;
      const Y expected = Math::output(Math::normalized(h.h.get(r, j), g.rstd[r]), s);
      if (storage_bits(expected) != g.y.bits(r, j) && bad++ < 5) {
        ADD_FAILURE() << "y(" << r << ", " << j << ") = " << g.y.get(r, j)
                      << ", the formula with the GPU's rstd gives "
                      << tigon::math::to_float(expected);
      }
    }
  }
  EXPECT_EQ(bad, 0) << "y elements off the shared formula";
}

// dx bit for bit round(dh + the GPU RMSNorm's dx), as autograd adds h's two gradients.
template <typename X>
void check_dx_composition(const Case& c, const Host& h, const Matrix& norm_dx, const Matrix& dx) {
  std::int64_t bad = 0;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    for (std::int64_t j = 0; j < c.hidden; ++j) {
      const X expected = tigon::math::ResidualAdd<X>::grad(h.dh.get(r, j), norm_dx.get(r, j));
      if (storage_bits(expected) != dx.bits(r, j) && bad++ < 5) {
        ADD_FAILURE() << "dx(" << r << ", " << j << ") = " << dx.get(r, j)
                      << ", dh + the GPU RMSNorm's dx gives " << tigon::math::to_float(expected);
      }
    }
  }
  EXPECT_EQ(bad, 0) << "dx elements differ from round(dh + the GPU RMSNorm's dx)";
}

// dx and dw against the CPU backend's: the two differ only in the order of the row sum
// mean(m * xhat) (and of dw's sum over rows). dx: RMSNorm's bound (|r * h * r| times a generous
// float32 summation error, and a rounding step either way) plus one step for the add of dh. dw:
// 1e-5 of the sum of |terms| plus a rounding step of the weight's dtype either way.
template <typename Math, typename X, typename W>
void check_backward_vs_cpu(const Case& c, const Host& h, const GpuCase::Backward& g) {
  const float offset = params_for(c).offset;
  std::vector<double> dw_abs(static_cast<std::size_t>(c.hidden), 0.0);
  std::int64_t bad_dx = 0;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    const float rs = h.rstd[r];
    double mean_abs = 0.0;
    for (std::int64_t j = 0; j < c.hidden; ++j) {
      const float s = c.affine ? Math::scale(storage_from<W>(h.w, 0, j), offset) : 1.0f;
      const float dyv = h.dy.get(r, j);
      const float hv = h.h.get(r, j);
      mean_abs += std::fabs(double(Math::grad_scaled(dyv, s)) * double(hv * rs));
      if (c.affine) dw_abs[j] += std::fabs(double(Math::grad_weight_term(dyv, hv, rs)));
    }
    mean_abs /= double(c.hidden);
    const double sum_error = std::ldexp(1.0, -20) * (16.0 + std::sqrt(double(c.hidden))) * mean_abs;
    for (std::int64_t j = 0; j < c.hidden; ++j) {
      const double ref = h.dx.get(r, j);
      const double got = g.dx.get(r, j);
      const double tol =
          3.0 * ulp_at(c.x, ref) + std::fabs(double(rs) * h.h.get(r, j) * rs) * sum_error;
      if (!(std::fabs(got - ref) <= tol) && bad_dx++ < 5) {
        ADD_FAILURE() << "dx(" << r << ", " << j << "): gpu " << got << " cpu " << ref;
      }
    }
  }
  EXPECT_EQ(bad_dx, 0) << "dx elements out of tolerance of the CPU backend";
  if (!c.affine) return;
  std::int64_t bad_dw = 0;
  for (std::int64_t j = 0; j < c.hidden; ++j) {
    const double ref = h.dw.get(0, j);
    const double got = g.dw.get(0, j);
    const double tol = 2.0 * ulp_at(c.w, ref) + 1e-5 * dw_abs[j];
    if (!(std::fabs(got - ref) <= tol) && bad_dw++ < 5) {
      ADD_FAILURE() << "dw(" << j << "): gpu " << got << " cpu " << ref << " tol " << tol;
    }
  }
  EXPECT_EQ(bad_dw, 0) << "dw elements out of tolerance of the CPU backend";
}

void run_case(const Case& c) {
  SCOPED_TRACE(c.name());
  Host h = make_host(c);
  run_cpu(c, h);
  GpuCase gpu(c, h);

  const GpuCase::Forward first = gpu.forward();
  const GpuCase::Forward second = gpu.forward();
  expect_view_bits(first.h, h.h, "h vs the CPU backend");
  expect_outside_untouched(first.h, "h");
  expect_outside_untouched(first.y, "y");
  expect_bitwise_equal(first.h, second.h, "h of two identical forward runs");
  expect_bitwise_equal(first.y, second.y, "y of two identical forward runs");
  EXPECT_EQ(first.rstd, second.rstd) << "rstd of two identical forward runs";
  const GpuCase::Forward plain = gpu.plain_forward();
  expect_bitwise_equal(first.y, plain.y, "y vs the GPU's plain RMSNorm of h");
  EXPECT_EQ(first.rstd, plain.rstd) << "rstd vs the GPU's plain RMSNorm of h";
  check_rstd_vs_cpu(c, first.rstd, h.rstd);

  using Into = GpuCase::Into;
  const GpuCase::Backward b1 = gpu.backward(Into::kOwnBuffer);
  const GpuCase::Backward b2 = gpu.backward(Into::kOwnBuffer);
  expect_outside_untouched(b1.dx, "dx");
  expect_bitwise_equal(b1.dx, b2.dx, "dx of two identical backward runs");
  if (c.affine) expect_bitwise_equal(b1.dw, b2.dw, "dw of two identical backward runs");
  const GpuCase::Backward over_dh = gpu.backward(Into::kDh);
  expect_same_values(over_dh.dx, b1.dx, "dx written over dh vs in its own buffer");
  if (c.affine) expect_bitwise_equal(over_dh.dw, b1.dw, "dw with dx over dh");
  if (y_dtype_of(c) == c.x) {
    const GpuCase::Backward over_dy = gpu.backward(Into::kDy);
    expect_same_values(over_dy.dx, b1.dx, "dx written over dy vs in its own buffer");
  }
  const GpuCase::Backward norm = gpu.plain_backward();
  if (c.affine) expect_bitwise_equal(b1.dw, norm.dw, "dw vs the GPU's plain RMSNorm dw");

  with_math(c.mode, c.x, c.w, c.affine, [&]<typename Math, typename X, typename W>() {
    check_y_formula<Math, X, W>(c, h, first);
    check_dx_composition<X>(c, h, norm.dx, b1.dx);
    check_backward_vs_cpu<Math, X, W>(c, h, b1);
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

const DTypePair kSomePairs[] = {
    {DType::kBFloat16, DType::kBFloat16, true},
    {DType::kBFloat16, DType::kFloat32, true},
    {DType::kFloat32, DType::kFloat32, true},
    {DType::kFloat16, DType::kFloat16, false},
};

struct Scenario {
  std::string name;
  Case layout;  // hidden, rows, pad, offset
  bool all_pairs = true;
};

void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

class FusedAddRmsNormCuda : public ::testing::TestWithParam<Scenario> {};

TEST_P(FusedAddRmsNormCuda, MatchesCpuBackendAndPlainRmsNorm) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Scenario& s = GetParam();
  for (CastingMode mode : {CastingMode::kLlama, CastingMode::kGemma, CastingMode::kNone}) {
    for (const DTypePair& pair :
         s.all_pairs ? std::vector<DTypePair>(std::begin(kAllPairs), std::end(kAllPairs))
                     : std::vector<DTypePair>(std::begin(kSomePairs), std::end(kSomePairs))) {
      Case c = s.layout;
      c.mode = mode;
      c.x = pair.x;
      c.w = pair.w;
      c.affine = pair.affine;
      run_case(c);
    }
  }
}

Scenario scenario(std::string name, std::int64_t hidden, std::int64_t rows, bool all_pairs = true) {
  Scenario s;
  s.name = std::move(name);
  s.layout.hidden = hidden;
  s.layout.rows = rows;
  s.all_pairs = all_pairs;
  return s;
}

// Row lengths for every kernel: a row a thread, a warp, a block (light and 8-pack forward), the
// two-pass forward (16-bit rows of 48-128 KB), clusters (sm_90; slices elsewhere), and rows too
// long for registers (two-pass backward); odd lengths take the scalar path.
std::vector<Scenario> size_scenarios() {
  std::vector<Scenario> v;
  for (std::int64_t h : {1, 3, 127, 1000, 2048, 4096, 4097}) {
    v.push_back(
        scenario("Small_H" + std::to_string(h), h, std::min<std::int64_t>(257, 262144 / h)));
  }
  for (std::int64_t h : {8192, 16384, 24576, 32768, 49152, 65536, 65537, 131072, 262144}) {
    v.push_back(scenario("Large_H" + std::to_string(h), h, 9, /*all_pairs=*/false));
  }
  // Enough rows that CTAs take several row blocks and dW groups.
  v.push_back(scenario("ManyRows_H4096", 4096, 3001, /*all_pairs=*/false));
  return v;
}

// Strided rows (16-byte path with pads of 8, scalar path with odd pads), base pointers one
// element off 16 bytes, a single row.
std::vector<Scenario> layout_scenarios() {
  std::vector<Scenario> v;
  for (std::int64_t h : {1000, 4096}) {
    const std::string suffix = "_H" + std::to_string(h);
    Scenario aligned = scenario("StridedAligned" + suffix, h, 37, /*all_pairs=*/false);
    aligned.layout.pad = 8;
    v.push_back(aligned);
    Scenario odd = scenario("StridedOdd" + suffix, h, 37, /*all_pairs=*/false);
    odd.layout.pad = 1;
    v.push_back(odd);
    Scenario unaligned = scenario("UnalignedPointers" + suffix, h, 37, /*all_pairs=*/false);
    unaligned.layout.offset = 1;
    v.push_back(unaligned);
    v.push_back(scenario("OneRow" + suffix, h, 1, /*all_pairs=*/false));
  }
  return v;
}

std::string scenario_name(const ::testing::TestParamInfo<Scenario>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Sizes, FusedAddRmsNormCuda, ::testing::ValuesIn(size_scenarios()),
                         scenario_name);
INSTANTIATE_TEST_SUITE_P(Layouts, FusedAddRmsNormCuda, ::testing::ValuesIn(layout_scenarios()),
                         scenario_name);

TEST(FusedAddRmsNormCudaEdge, ZeroRowsGivesZeroWeightGradient) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const RmsNormParams p;
  const std::int64_t hidden = 64;
  DeviceBuffer w(2 * hidden), dw(2 * hidden), dummy(16);
  dw.fill(0x7F);
  const auto empty = [&](DType t) {
    return TensorView::contiguous(dummy.data(), t, {0, hidden}, kGpu);
  };
  const TensorView wv = TensorView::contiguous(w.data(), DType::kBFloat16, {hidden}, kGpu);
  const TensorView dwv = TensorView::contiguous(dw.data(), DType::kBFloat16, {hidden}, kGpu);
  const TensorView rstd = TensorView::contiguous(dummy.data(), DType::kFloat32, {0}, kGpu);
  const TensorView e = empty(DType::kBFloat16);
  tigon::fused_add_rms_norm_fwd(p, e, e, wv, e, e, rstd);
  DeviceBuffer ws(std::max<std::size_t>(1, tigon::fused_add_rms_norm_bwd_workspace_size(p, e, wv)));
  tigon::fused_add_rms_norm_bwd(p, e, e, e, wv, rstd, e, dwv, Workspace{ws.data(), ws.bytes()});
  cuda_ok(cudaDeviceSynchronize(), "zero rows");
  const std::vector<unsigned char> got = dw.download(2 * hidden);
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](unsigned char b) { return b == 0; }))
      << "dw of zero rows must be zeros";
}

}  // namespace

// Every forward config fwd_config can return for a shape (device traits: clusters or not, fast
// memory or not) gives the fused forward the same bits, which are those of the plain RMSNorm
// forward of h under the same config; the backward through a cluster and through the slice sums
// (a GPU without clusters) gives the same dx and dw.
TEST(FusedAddRmsNormCudaConfigs, EveryConfigGivesTheSameBits) {
  SKIP_WITHOUT_CUDA_DEVICE();
  using namespace tigon::cuda::rms_norm;  // NOLINT(google-build-using-namespace)
  const bool clusters = tigon::cuda::device_properties(0).clusters;
  for (std::int64_t hidden :
       {8, 1024, 4096, 8200, 8704, 12288, 16384, 24576, 32768, 65536, 131072, 262144}) {
    for (CastingMode mode : {CastingMode::kLlama, CastingMode::kGemma, CastingMode::kNone}) {
      Case c;
      c.mode = mode;
      c.x = DType::kBFloat16;
      c.w = DType::kFloat32;
      c.hidden = hidden;
      c.rows = 19;
      SCOPED_TRACE(c.name());
      const RmsNormParams p = params_for(c);
      Host h = make_host(c);
      run_cpu(c, h);
      const int x_size = 2, pack = 8;
      DeviceBuffer x = to_device(h.x), res = to_device(h.residual), w = to_device(h.w);
      DeviceBuffer hb(h.h.bytes.size()), y(h.y.bytes.size()), rstd(sizeof(float) * c.rows);
      DeviceBuffer dy = to_device(h.dy), dh = to_device(h.dh), dx(h.dx.bytes.size());
      DeviceBuffer dw(h.dw.bytes.size()), h_in = to_device(h.h);
      DeviceBuffer rstd_in(h.rstd.data(), sizeof(float) * c.rows);

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
      a.residual = res.data();
      a.residual_row_stride = hidden;
      a.h = hb.data();
      a.h_row_stride = hidden;
      tigon::detail::RmsNormFwdArgs plain = a;  // RMSNorm of the CPU's h, no residual
      plain.x = h_in.data();
      plain.residual = nullptr;
      plain.h = nullptr;

      std::vector<Matrix> hs, ys;
      std::vector<std::vector<float>> rstds;
      std::vector<FwdConfig> seen;
      for (const DeviceTraits traits : {DeviceTraits{true, false}, DeviceTraits{true, true},
                                        DeviceTraits{false, false}, DeviceTraits{false, true}}) {
        const FwdConfig f = fwd_config(hidden, pack, x_size, traits);
        if (f.split.slices > 1 && !f.slice_sums && !clusters) continue;  // needs sm_90 clusters
        DeviceBuffer ws(sizeof(float) *
                        std::max<std::int64_t>(1, slice_sum_floats(c.rows, f.split, f.slice_sums)));
        a.workspace = plain.workspace = ws.data();
        hb.fill(0xA5);
        y.fill(0xA5);
        rstd.fill(0xFF);
        fwd_with_config(a, &f, 0, nullptr);
        cuda_ok(cudaDeviceSynchronize(), "fused forward");
        hs.push_back(from_device(hb, h.h));
        ys.push_back(from_device(y, h.y));
        rstds.push_back(floats_from_device(rstd, c.rows));
        seen.push_back(f);

        y.fill(0xA5);
        rstd.fill(0xFF);
        fwd_with_config(plain, &f, 0, nullptr);
        cuda_ok(cudaDeviceSynchronize(), "plain forward");
        SCOPED_TRACE("config kernel " + std::to_string(static_cast<int>(f.kernel)) + " slices " +
                     std::to_string(f.split.slices) + " slice_sums " +
                     std::to_string(f.slice_sums) + " threads/row " +
                     std::to_string(f.split.threads_per_row));
        expect_view_bits(hs.back(), h.h, "h vs the CPU backend");
        expect_bitwise_equal(ys.back(), from_device(y, h.y), "fused y vs plain RMSNorm's y");
        EXPECT_EQ(rstds.back(), floats_from_device(rstd, c.rows)) << "fused vs plain rstd";
      }
      ASSERT_FALSE(ys.empty());
      for (std::size_t i = 1; i < ys.size(); ++i) {
        expect_bitwise_equal(hs[i], hs[0], "h under another forward config");
        expect_bitwise_equal(ys[i], ys[0], "y under another forward config");
        EXPECT_EQ(rstds[i], rstds[0]) << "rstd under another forward config";
      }

      tigon::detail::RmsNormBwdArgs b;
      b.params = p;
      b.rows = c.rows;
      b.hidden = hidden;
      b.dy = dy.data();
      b.dy_row_stride = hidden;
      b.dy_dtype = h.dy.dtype;
      b.x = h_in.data();
      b.x_row_stride = hidden;
      b.x_dtype = c.x;
      b.weight = w.data();
      b.weight_dtype = c.w;
      b.rstd = rstd_in.floats();
      b.dx = dx.data();
      b.dx_row_stride = hidden;
      b.dw = dw.data();
      b.dh = dh.data();
      b.dh_row_stride = hidden;
      const BwdConfig without =
          bwd_config(c.rows, hidden, pack, x_size, DeviceTraits{false, false});
      const std::int64_t ws_floats = dw_partial_floats(c.rows, hidden, x_size, true) +
                                     slice_sum_floats(c.rows, without.split, without.slice_sums);
      DeviceBuffer bwd_ws(sizeof(float) * std::max<std::int64_t>(1, ws_floats));
      b.workspace = bwd_ws.data();
      b.workspace_bytes = sizeof(float) * ws_floats;
      std::vector<Matrix> dxs, dws;
      for (const DeviceTraits traits : {DeviceTraits{true, false}, DeviceTraits{false, false}}) {
        if (traits.clusters && !clusters) continue;
        dx.fill(0xA5);
        dw.fill(0xA5);
        bwd_ws.fill(0xFF);
        bwd_with_traits(b, traits, 0, nullptr);
        cuda_ok(cudaDeviceSynchronize(), "fused backward");
        dxs.push_back(from_device(dx, h.dx));
        dws.push_back(from_device(dw, h.dw));
      }
      for (std::size_t i = 1; i < dxs.size(); ++i) {
        expect_bitwise_equal(dxs[i], dxs[0], "dx through the slice sums vs a cluster");
        expect_bitwise_equal(dws[i], dws[0], "dw through the slice sums vs a cluster");
      }
      with_math(c.mode, c.x, c.w, true, [&]<typename Math, typename X, typename W>() {
        check_backward_vs_cpu<Math, X, W>(c, h, GpuCase::Backward{dxs[0], dws[0]});
      });
    }
  }
}
