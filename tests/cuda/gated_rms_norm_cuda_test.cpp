// GPU tests of the gated RMSNorm CUDA backend against the CPU backend (the oracle), through the
// public API on the same inputs. The two differ in exactly two places, each bounded here: the
// order of a row's float32 sums (rstd; dx's sum(m * xhat)) and exp inside silu (CUDA's expf, as
// PyTorch's CUDA kernels use, against the CPU's own float32 exp). Everything else is the shared
// formula (src/math/gated_rms_norm.h), so y, dgate and dx sit within one rounding of the CPU's.
// Every launch config the pure config function can return (row kernel, two-pass kernel; 16-byte
// and scalar packs) is hit by a case, named in the case's name. Also: runs repeat bit for bit,
// a row's results do not depend on the batch, nothing outside a view is written, and dx / dgate
// written in place over dy equal those written to their own buffers. Without a CUDA device every
// test reports SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "cpp/test_support.h"
#include "cuda/cuda_test_support.h"
#include "cuda/gated_rms_norm/layout.cuh"
#include "math/float_types.h"
#include "math/gated_rms_norm.h"
#include "tigon/tigon.h"

namespace {

using tigon::Device;
using tigon::DType;
using tigon::GatedRmsNormParams;
using tigon::TensorView;
using tigon::Workspace;
using tigon::testing::cuda_ok;
using tigon::testing::DeviceBuffer;
using tigon::testing::ulp_at;

float load_element(DType t, const unsigned char* base, std::int64_t i) {
  if (t == DType::kFloat32) {
    float v;
    std::memcpy(&v, base + 4 * i, 4);
    return v;
  }
  std::uint16_t b;
  std::memcpy(&b, base + 2 * i, 2);
  return t == DType::kFloat16 ? tigon::math::to_float(tigon::math::Half{b})
                              : tigon::math::to_float(tigon::math::BFloat16{b});
}

void store_element(DType t, unsigned char* base, std::int64_t i, float v) {
  if (t == DType::kFloat32) {
    std::memcpy(base + 4 * i, &v, 4);
    return;
  }
  const std::uint16_t b = t == DType::kFloat16
                              ? tigon::math::from_float<tigon::math::Half>(v).bits
                              : tigon::math::from_float<tigon::math::BFloat16>(v).bits;
  std::memcpy(base + 2 * i, &b, 2);
}

// A [rows, hidden] matrix with a row stride, `offset` elements into its buffer, as raw host bytes;
// elements outside the view hold the sentinel byte 0xA5.
struct Matrix {
  DType dtype = DType::kFloat32;
  std::int64_t rows = 0, hidden = 0, stride = 0, offset = 0;
  std::vector<unsigned char> bytes;

  Matrix() = default;
  Matrix(DType t, std::int64_t r, std::int64_t h, std::int64_t s, std::int64_t off)
      : dtype(t), rows(r), hidden(h), stride(s), offset(off) {
    const std::int64_t n = offset + (rows > 0 ? (rows - 1) * stride + hidden : 0);
    bytes.assign(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * size(), 0xA5);
  }
  std::size_t size() const { return tigon::element_size(dtype); }
  std::int64_t index(std::int64_t r, std::int64_t j) const { return offset + r * stride + j; }
  float get(std::int64_t r, std::int64_t j) const {
    return load_element(dtype, bytes.data(), index(r, j));
  }
  void set(std::int64_t r, std::int64_t j, float v) {
    store_element(dtype, bytes.data(), index(r, j), v);
  }
  std::uint32_t bits(std::int64_t r, std::int64_t j) const {
    std::uint32_t b = 0;
    std::memcpy(&b, bytes.data() + size() * index(r, j), std::min(size(), sizeof b));
    return b;
  }
  TensorView view(void* base, Device device, std::int64_t view_rows = -1) const {
    TensorView v;
    v.data = static_cast<unsigned char*>(base) + offset * size();
    v.dtype = dtype;
    v.device = device;
    v.ndim = 2;
    v.sizes[0] = view_rows < 0 ? rows : view_rows;
    v.sizes[1] = hidden;
    v.strides[0] = stride;
    v.strides[1] = 1;
    return v;
  }
  TensorView vector_view(void* base, Device device) const {
    TensorView v = view(base, device);
    v.ndim = 1;
    v.sizes[0] = hidden;
    v.strides[0] = 1;
    return v;
  }
  TensorView host() { return view(bytes.data(), Device::cpu()); }
};

TensorView floats(float* data, std::int64_t n, Device device) {
  return TensorView::contiguous(data, DType::kFloat32, {n}, device);
}

struct Case {
  DType x = DType::kBFloat16;
  DType w = DType::kBFloat16;
  std::int64_t hidden = 128;
  std::int64_t rows = 1;
  std::int64_t pad = 0;     // extra elements in every row tensor's row stride
  std::int64_t offset = 0;  // elements every tensor starts into its buffer (1: scalar path)

  std::string name() const {
    const int x_size = static_cast<int>(tigon::element_size(x));
    const bool vector = offset % (16 / x_size) == 0 && hidden % (16 / x_size) == 0 &&
                        (rows == 1 || (hidden + pad) % (16 / x_size) == 0);
    const auto c =
        tigon::cuda::gated_rms_norm::config(rows, hidden, vector ? 16 / x_size : 1, x_size);
    std::string n = std::string("x") + tigon::dtype_name(x) + "_w" + tigon::dtype_name(w) + "_H" +
                    std::to_string(hidden) + "_R" + std::to_string(rows);
    if (pad) n += "_pad" + std::to_string(pad);
    if (offset) n += "_offset" + std::to_string(offset);
    n += c.kernel == tigon::cuda::gated_rms_norm::Kernel::kTwoPass ? "_twopass" : "_rows";
    n += vector ? "_vec" : "_scalar";
    return n;
  }
};

struct Inputs {
  Matrix x, gate, dy, w;
};

struct Outputs {
  Matrix y, dx, dgate, dw;
  std::vector<float> rstd;
};

Inputs make_inputs(const Case& c) {
  std::mt19937 rng(static_cast<std::uint32_t>(std::hash<std::string>{}(c.name())));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::int64_t s = c.hidden + c.pad;
  Inputs in{Matrix(c.x, c.rows, c.hidden, s, c.offset), Matrix(c.x, c.rows, c.hidden, s, c.offset),
            Matrix(c.x, c.rows, c.hidden, s, c.offset),
            Matrix(c.w, 1, c.hidden, c.hidden, c.offset)};
  for (std::int64_t r = 0; r < c.rows; ++r) {
    for (std::int64_t j = 0; j < c.hidden; ++j) {
      in.x.set(r, j, normal(rng));
      in.gate.set(r, j, 2.0f * normal(rng));
      in.dy.set(r, j, normal(rng));
    }
  }
  for (std::int64_t j = 0; j < c.hidden; ++j) in.w.set(0, j, 1.0f + 0.25f * normal(rng));
  return in;
}

Outputs empty_outputs(const Case& c) {
  const std::int64_t s = c.hidden + c.pad;
  Outputs o{Matrix(c.x, c.rows, c.hidden, s, c.offset), Matrix(c.x, c.rows, c.hidden, s, c.offset),
            Matrix(c.x, c.rows, c.hidden, s, c.offset), Matrix(c.w, 1, c.hidden, c.hidden, 0),
            std::vector<float>(static_cast<std::size_t>(c.rows))};
  return o;
}

const GatedRmsNormParams kParams{1e-6f};

Outputs run_cpu(const Case& c, Inputs& in) {
  Outputs o = empty_outputs(c);
  const TensorView w = in.w.vector_view(in.w.bytes.data(), Device::cpu());
  tigon::gated_rms_norm_fwd(kParams, in.x.host(), in.gate.host(), w, o.y.host(),
                            floats(o.rstd.data(), c.rows, Device::cpu()));
  std::vector<float> ws(tigon::gated_rms_norm_bwd_workspace_size(kParams, in.x.host(), w) / 4 + 1);
  tigon::gated_rms_norm_bwd(kParams, in.dy.host(), in.x.host(), in.gate.host(), w,
                            floats(o.rstd.data(), c.rows, Device::cpu()), o.dx.host(),
                            o.dgate.host(), o.dw.vector_view(o.dw.bytes.data(), Device::cpu()),
                            Workspace{ws.data(), ws.size() * sizeof(float)});
  return o;
}

DeviceBuffer to_device(const Matrix& m) { return DeviceBuffer(m.bytes.data(), m.bytes.size()); }

Matrix from_device(const DeviceBuffer& b, const Matrix& layout) {
  Matrix m = layout;
  b.download(m.bytes.data(), m.bytes.size());
  return m;
}

enum class InPlace { kNone, kDxOverDy, kDgateOverDy };

// The GPU forward and backward of `rows` (<= c.rows) leading rows; the backward takes the CPU's
// rstd (`cpu_rstd`), so its comparison is free of the forward's. Outputs start as sentinels; the
// workspace as NaN bytes, so a partial read before it is written shows.
Outputs run_gpu(const Case& c, const Inputs& in, const std::vector<float>& cpu_rstd,
                std::int64_t rows, InPlace in_place = InPlace::kNone) {
  const Device dev = Device::cuda(0);
  Outputs o = empty_outputs(c);
  DeviceBuffer x = to_device(in.x), gate = to_device(in.gate), dy = to_device(in.dy),
               w = to_device(in.w), y = to_device(o.y), dx = to_device(o.dx),
               dgate = to_device(o.dgate), dw = to_device(o.dw);
  DeviceBuffer rstd(sizeof(float) * c.rows), rstd_in(sizeof(float) * c.rows);
  rstd.fill(0xFF);
  rstd_in.upload(cpu_rstd.data(), sizeof(float) * c.rows);
  const TensorView xv = in.x.view(x.data(), dev, rows), gv = in.gate.view(gate.data(), dev, rows),
                   dyv = in.dy.view(dy.data(), dev, rows);
  const TensorView wv = in.w.vector_view(w.data(), dev);
  const std::size_t fwd_ws = tigon::gated_rms_norm_fwd_workspace_size(kParams, xv, wv);
  DeviceBuffer fwd_workspace(fwd_ws);
  tigon::gated_rms_norm_fwd(kParams, xv, gv, wv, o.y.view(y.data(), dev, rows),
                            floats(rstd.floats(), rows, dev),
                            Workspace{fwd_workspace.data(), fwd_ws});
  const std::size_t bwd_ws = tigon::gated_rms_norm_bwd_workspace_size(kParams, xv, wv);
  DeviceBuffer bwd_workspace(bwd_ws);
  bwd_workspace.fill(0xFF);
  const TensorView dxv = in_place == InPlace::kDxOverDy ? dyv : o.dx.view(dx.data(), dev, rows);
  const TensorView dgv =
      in_place == InPlace::kDgateOverDy ? dyv : o.dgate.view(dgate.data(), dev, rows);
  tigon::gated_rms_norm_bwd(kParams, dyv, xv, gv, wv, floats(rstd_in.floats(), rows, dev), dxv, dgv,
                            o.dw.vector_view(dw.data(), dev),
                            Workspace{bwd_workspace.data(), bwd_ws});
  cuda_ok(cudaDeviceSynchronize(), "gated_rms_norm forward + backward");
  o.y = from_device(y, o.y);
  o.dx = from_device(in_place == InPlace::kDxOverDy ? dy : dx, o.dx);
  o.dgate = from_device(in_place == InPlace::kDgateOverDy ? dy : dgate, o.dgate);
  o.dw = from_device(dw, o.dw);
  rstd.download(o.rstd.data(), sizeof(float) * c.rows);
  return o;
}

// Bit-identical elements of a and b in rows [0, rows) (all of `bytes` with rows < 0: padding too).
void expect_same_bits(const Matrix& a, const Matrix& b, const std::string& what,
                      std::int64_t rows = -1) {
  std::int64_t differ = 0;
  if (rows < 0) {
    differ = a.bytes == b.bytes ? 0 : 1;
  } else {
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t j = 0; j < a.hidden; ++j) differ += a.bits(r, j) != b.bits(r, j);
    }
  }
  EXPECT_EQ(differ, 0) << what << ": not bit-identical";
}

// Elements outside the views (padding, offset) still hold the sentinel.
void expect_outside_untouched(const Matrix& m, const std::string& what) {
  Matrix sentinel(m.dtype, m.rows, m.hidden, m.stride, m.offset);
  std::int64_t touched = 0;
  for (std::int64_t r = 0; r < m.rows; ++r) {
    for (std::int64_t j = 0; j < m.hidden; ++j) sentinel.set(r, j, m.get(r, j));
  }
  for (std::size_t i = 0; i < m.bytes.size(); ++i) touched += m.bytes[i] != sentinel.bytes[i];
  EXPECT_EQ(touched, 0) << what << ": bytes outside the view were written";
}

// Counts and reports the first few failures of one property.
class Failures {
 public:
  explicit Failures(std::string what) : what_(std::move(what)) {}
  void add(std::int64_t r, std::int64_t j, double got, double want, double tol) {
    if (count_++ < 5) {
      ADD_FAILURE() << what_ << "(" << r << ", " << j << "): gpu " << got << ", expected " << want
                    << " within " << tol;
    }
  }
  ~Failures() { EXPECT_EQ(count_, 0) << what_ << ": elements out of tolerance"; }

 private:
  std::string what_;
  std::int64_t count_ = 0;
};

template <typename X, typename W>
void check_against_cpu(const Case& c, const Inputs& in, const Outputs& cpu, const Outputs& gpu) {
  using Math = tigon::math::GatedRmsNorm<X, W>;
  using Norm = typename Math::Norm;
  const auto wt = [&](std::int64_t j) {
    if constexpr (std::is_same_v<W, float>) {
      return in.w.get(0, j);
    } else {
      return W{static_cast<std::uint16_t>(in.w.bits(0, j))};
    }
  };
  // exp's float32 ulp or two inside silu moves a 16-bit result by at most one rounding step.
  const double exp_steps = c.x == DType::kFloat32 ? 8.0 : 1.0;
  const double eps32 = std::ldexp(1.0, -23);
  Failures rstd_bad("rstd"), y_bad("y"), dgate_bad("dgate"), dx_bad("dx"), dw_bad("dw");
  std::int64_t y_exact = 0, dgate_exact = 0;
  std::vector<double> dw_abs(static_cast<std::size_t>(c.hidden), 0.0);
  for (std::int64_t r = 0; r < c.rows; ++r) {
    // rstd: only the order of the float32 sum of squares differs (error grows like sqrt(H)).
    const double rtol = cpu.rstd[r] * std::ldexp(1.0, -22) * (1.0 + std::sqrt(double(c.hidden)));
    if (!(std::fabs(double(gpu.rstd[r]) - cpu.rstd[r]) <= rtol)) {
      rstd_bad.add(r, 0, gpu.rstd[r], cpu.rstd[r], rtol);
    }
    const float rg = gpu.rstd[r], rc = cpu.rstd[r];
    double mean_abs = 0.0;
    for (std::int64_t j = 0; j < c.hidden; ++j) {
      const float xv = in.x.get(r, j), gv = in.gate.get(r, j), dyv = in.dy.get(r, j);
      // y: the shared formula with the GPU's own rstd, up to exp.
      const double want_y = tigon::math::to_float(Math::output(Math::weighted(xv, rg, wt(j)), gv));
      const double y_tol = exp_steps * ulp_at(c.x, want_y);
      if (!(std::fabs(gpu.y.get(r, j) - want_y) <= y_tol))
        y_bad.add(r, j, gpu.y.get(r, j), want_y, y_tol);
      y_exact += gpu.y.bits(r, j) == cpu.y.bits(r, j);
      // dgate: the same rstd (the CPU's) on both sides, so up to exp.
      const double want_dg = cpu.dgate.get(r, j);
      const double dg_tol = exp_steps * ulp_at(c.x, want_dg) +
                            4.0 * eps32 * std::fabs(dyv * Math::weighted(xv, rc, wt(j)));
      if (!(std::fabs(gpu.dgate.get(r, j) - want_dg) <= dg_tol)) {
        dgate_bad.add(r, j, gpu.dgate.get(r, j), want_dg, dg_tol);
      }
      dgate_exact += gpu.dgate.bits(r, j) == cpu.dgate.bits(r, j);
      const float dp = Math::grad_norm_output(dyv, gv);
      mean_abs += std::fabs(double(Norm::grad_scaled(dp, Norm::scale(wt(j), 0.0f))) * (xv * rc));
      dw_abs[j] += std::fabs(double(Norm::grad_weight_term(dp, xv, rc)));
    }
    mean_abs /= double(c.hidden);
    // dx: the order of sum(m * xhat) and exp in m.
    const double sum_error = std::ldexp(1.0, -20) * (16.0 + std::sqrt(double(c.hidden))) * mean_abs;
    for (std::int64_t j = 0; j < c.hidden; ++j) {
      const float xv = in.x.get(r, j);
      const double m = Norm::grad_scaled(Math::grad_norm_output(in.dy.get(r, j), in.gate.get(r, j)),
                                         Norm::scale(wt(j), 0.0f));
      const double want = cpu.dx.get(r, j);
      const double tol = 2.0 * ulp_at(c.x, want) + std::fabs(double(rc) * xv * rc) * sum_error +
                         8.0 * eps32 * std::fabs(rc * m);
      if (!(std::fabs(gpu.dx.get(r, j) - want) <= tol))
        dx_bad.add(r, j, gpu.dx.get(r, j), want, tol);
    }
  }
  // dW: the same terms summed over rows in another order.
  for (std::int64_t j = 0; j < c.hidden; ++j) {
    const double want = cpu.dw.get(0, j);
    const double tol = 2.0 * ulp_at(c.w, want) + 1e-5 * dw_abs[j];
    if (!(std::fabs(gpu.dw.get(0, j) - want) <= tol)) dw_bad.add(0, j, gpu.dw.get(0, j), want, tol);
  }
  if (c.x != DType::kFloat32) {
    const double total = double(c.rows) * double(c.hidden);
    EXPECT_GE(y_exact / total, 0.99) << "fraction of y bit-identical to the CPU backend";
    EXPECT_GE(dgate_exact / total, 0.99) << "fraction of dgate bit-identical to the CPU backend";
  }
}

void run_case(const Case& c) {
  SCOPED_TRACE(c.name());
  Inputs in = make_inputs(c);
  const Outputs cpu = run_cpu(c, in);
  const Outputs gpu = run_gpu(c, in, cpu.rstd, c.rows);

  tigon::detail::dispatch_dtype(c.x, [&](auto x_tag) {
    tigon::detail::dispatch_dtype(c.w, [&](auto w_tag) {
      check_against_cpu<typename decltype(x_tag)::type, typename decltype(w_tag)::type>(c, in, cpu,
                                                                                        gpu);
    });
  });
  expect_outside_untouched(gpu.y, "y");
  expect_outside_untouched(gpu.dx, "dx");
  expect_outside_untouched(gpu.dgate, "dgate");

  // Run to run: the same bits.
  const Outputs again = run_gpu(c, in, cpu.rstd, c.rows);
  expect_same_bits(gpu.y, again.y, "y, second run");
  EXPECT_EQ(gpu.rstd, again.rstd) << "rstd, second run";
  expect_same_bits(gpu.dx, again.dx, "dx, second run");
  expect_same_bits(gpu.dgate, again.dgate, "dgate, second run");
  expect_same_bits(gpu.dw, again.dw, "dw, second run");

  // A row's results do not depend on the batch: the leading rows alone give the same bits.
  if (c.rows > 1) {
    const std::int64_t head = std::min<std::int64_t>(c.rows - 1, 3);
    const Outputs part = run_gpu(c, in, cpu.rstd, head);
    expect_same_bits(gpu.y, part.y, "y of the leading rows run alone", head);
    for (std::int64_t r = 0; r < head; ++r)
      EXPECT_EQ(gpu.rstd[r], part.rstd[r]) << "rstd row " << r;
    expect_same_bits(gpu.dx, part.dx, "dx of the leading rows run alone", head);
    expect_same_bits(gpu.dgate, part.dgate, "dgate of the leading rows run alone", head);
  }

  // In place: dx, or dgate, written over dy.
  const Outputs dx_in_place = run_gpu(c, in, cpu.rstd, c.rows, InPlace::kDxOverDy);
  expect_same_bits(gpu.dx, dx_in_place.dx, "dx written over dy", c.rows);
  expect_same_bits(gpu.dgate, dx_in_place.dgate, "dgate beside dx over dy", c.rows);
  const Outputs dgate_in_place = run_gpu(c, in, cpu.rstd, c.rows, InPlace::kDgateOverDy);
  expect_same_bits(gpu.dgate, dgate_in_place.dgate, "dgate written over dy", c.rows);
  expect_same_bits(gpu.dx, dgate_in_place.dx, "dx beside dgate over dy", c.rows);
  expect_same_bits(gpu.dw, dgate_in_place.dw, "dw with dgate over dy");
}

class GatedRmsNormCuda : public ::testing::TestWithParam<Case> {};

TEST_P(GatedRmsNormCuda, MatchesCpuBackend) {
  SKIP_WITHOUT_CUDA_DEVICE();
  run_case(GetParam());
}

std::vector<Case> cases() {
  const DType bf16 = DType::kBFloat16, f16 = DType::kFloat16, f32 = DType::kFloat32;
  std::vector<Case> v;
  for (const auto& [x, w] :
       std::vector<std::pair<DType, DType>>{{bf16, bf16}, {f16, f16}, {f32, f32}, {bf16, f32}}) {
    // Qwen3-Next's head_dim rows (several rows a block), dW over many groups.
    v.push_back({x, w, 128, 4096});
    v.push_back({x, w, 128, 7});
    v.push_back({x, w, 64, 1000, 64});
    v.push_back({x, w, 4096, 300});
    v.push_back({x, w, 1000, 37, 8, 1});  // scalar packs
    v.push_back({x, w, 20000, 19});       // two-pass on every dtype
    v.push_back({x, w, 3000, 21, 0, 1});  // scalar packs, two-pass
  }
  v.push_back({bf16, bf16, 1, 5});
  v.push_back({bf16, bf16, 128, 1});
  v.push_back({f16, f16, 16384, 9});  // the longest register row on the 16-byte path
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, GatedRmsNormCuda, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name();
                         });

}  // namespace
