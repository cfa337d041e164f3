// GroupNorm CUDA backend against the CPU backend: every x dtype and parameter dtype, [N, C] and
// [N, C, S] inputs, group counts from 1 to C, unaligned and padded samples, more rows than the
// grid, groups of up to 2^18 elements; run-to-run bitwise, and dx in place equal to out of place.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cpp/host_tensor.h"
#include "cpp/test_support.h"
#include "cuda/cuda_test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::Device;
using tigon::DType;
using tigon::GroupNormParams;
using tigon::TensorView;
using tigon::testing::cuda_ok;
using tigon::testing::DeviceBuffer;
using tigon::testing::epsilon_of;
using tigon::testing::HostTensor;
using tigon::testing::ulp_distance;

struct Case {
  std::int64_t n, c, groups, s, pad;
  int misalign;  // elements: every activation starts this far past an aligned address
  DType x_dtype;
  std::optional<DType> p_dtype;  // weight and bias dtype; nullopt: no affine
};

std::string case_name(const Case& c) {
  std::string s = "n" + std::to_string(c.n) + "_c" + std::to_string(c.c) + "_g" +
                  std::to_string(c.groups) + "_s" + std::to_string(c.s) + "_pad" +
                  std::to_string(c.pad) + "_mis" + std::to_string(c.misalign) + "_" +
                  tigon::dtype_name(c.x_dtype);
  return s + (c.p_dtype ? std::string("_p") + tigon::dtype_name(*c.p_dtype) : "_noaffine");
}

// [N, C, S] view of a [N, C*S (+pad)] buffer at `base` (misalign elements in) on `device`.
TensorView ncs(const Case& c, void* base, Device device) {
  TensorView v;
  v.data = static_cast<char*>(base) + c.misalign * tigon::element_size(c.x_dtype);
  v.dtype = c.x_dtype;
  v.device = device;
  v.ndim = 3;
  v.sizes[0] = c.n;
  v.sizes[1] = c.c;
  v.sizes[2] = c.s;
  v.strides[0] = c.c * c.s + c.pad + c.misalign;
  v.strides[1] = c.s;
  v.strides[2] = 1;
  return v;
}

TensorView on(const TensorView& host_view, void* base, Device device) {
  TensorView v = host_view;
  v.data = base;
  v.device = device;
  return v;
}

struct Outputs {
  std::vector<unsigned char> y, mean, rstd, dx, dw, db, dx_in_place;
};

class GroupNormCuda : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { SKIP_WITHOUT_CUDA_DEVICE(); }

  // Runs forward and backward (out of place, then in place into a copy of dy) on `device`.
  Outputs run(Device device) {
    const Case& c = GetParam();
    const bool cuda = device.type == tigon::DeviceType::kCUDA;
    const std::size_t act_bytes = x_.byte_count(), vec_bytes = w_.byte_count();
    const std::size_t stat_bytes = sizeof(float) * c.n * c.groups;
    auto buffer = [&](HostTensor& h, std::size_t n) -> void* {
      if (!cuda) return h.bytes();
      device_buffers_.emplace_back(h.bytes(), n);
      return device_buffers_.back().data();
    };
    // dx and the in-place buffer start equal (their padding too), so they compare byte for byte.
    HostTensor y = x_, dx = dy_, dy_copy = dy_, dw = w_, db = w_, mean = mean_, rstd = mean_;
    void* xd = buffer(x_, act_bytes);
    void* yd = buffer(y, act_bytes);
    void* dyd = buffer(dy_, act_bytes);
    void* dxd = buffer(dx, act_bytes);
    void* dy2d = buffer(dy_copy, act_bytes);
    void* wd = buffer(w_, vec_bytes);
    void* bd = buffer(b_, vec_bytes);
    void* dwd = buffer(dw, vec_bytes);
    void* dbd = buffer(db, vec_bytes);
    void* meand = buffer(mean, stat_bytes);
    void* rstdd = buffer(rstd, stat_bytes);
    const TensorView wv = c.p_dtype ? on(w_.view(), wd, device) : TensorView{};
    const TensorView bv = c.p_dtype ? on(b_.view(), bd, device) : TensorView{};
    const TensorView mv = on(mean.view(), meand, device), rv = on(rstd.view(), rstdd, device);
    tigon::group_norm_fwd(p_, ncs(c, xd, device), wv, bv, ncs(c, yd, device), mv, rv);
    const std::size_t ws_bytes = tigon::group_norm_bwd_workspace_size(p_, ncs(c, xd, device));
    std::vector<unsigned char> host_ws(ws_bytes);
    DeviceBuffer device_ws(ws_bytes);
    const tigon::Workspace ws{cuda ? device_ws.data() : host_ws.data(), ws_bytes};
    const TensorView dwv = c.p_dtype ? on(dw.view(), dwd, device) : TensorView{};
    const TensorView dbv = c.p_dtype ? on(db.view(), dbd, device) : TensorView{};
    tigon::group_norm_bwd(p_, ncs(c, dyd, device), ncs(c, xd, device), wv, mv, rv,
                          ncs(c, dxd, device), dwv, dbv, ws);
    Outputs o;
    auto fetch = [&](HostTensor& h, void* d, std::size_t n) {
      if (cuda) cuda_ok(cudaMemcpy(h.bytes(), d, n, cudaMemcpyDeviceToHost), "download");
      return std::vector<unsigned char>(h.bytes(), h.bytes() + n);
    };
    o.y = fetch(y, yd, act_bytes);
    o.mean = fetch(mean, meand, stat_bytes);
    o.rstd = fetch(rstd, rstdd, stat_bytes);
    o.dx = fetch(dx, dxd, act_bytes);
    o.dw = fetch(dw, dwd, vec_bytes);
    o.db = fetch(db, dbd, vec_bytes);
    tigon::group_norm_bwd(p_, ncs(c, dy2d, device), ncs(c, xd, device), wv, mv, rv,
                          ncs(c, dy2d, device), dwv, dbv, ws);
    o.dx_in_place = fetch(dy_copy, dy2d, act_bytes);
    if (cuda) cuda_ok(cudaDeviceSynchronize(), "sync");
    return o;
  }

  void prepare() {
    const Case& c = GetParam();
    p_.groups = c.groups;
    p_.eps = 1e-5f;
    std::mt19937 rng(static_cast<unsigned>(c.n * 131 + c.c * 7 + c.s));
    const std::int64_t stride = c.c * c.s + c.pad;
    x_ = HostTensor(c.x_dtype, {c.n, stride + c.misalign});
    dy_ = HostTensor(c.x_dtype, {c.n, stride + c.misalign});
    x_.fill_normal(rng, 0.5f, 2.0f);
    dy_.fill_normal(rng);
    w_ = HostTensor(c.p_dtype.value_or(c.x_dtype), {c.c});
    b_ = HostTensor(c.p_dtype.value_or(c.x_dtype), {c.c});
    w_.fill_normal(rng, 1.0f, 0.3f);
    b_.fill_normal(rng, 0.0f, 0.5f);
    mean_ = HostTensor(DType::kFloat32, {c.n * c.groups});
  }

  GroupNormParams p_;
  HostTensor x_{DType::kFloat32, {1}}, dy_{DType::kFloat32, {1}};
  HostTensor w_{DType::kFloat32, {1}}, b_{DType::kFloat32, {1}}, mean_{DType::kFloat32, {1}};
  std::vector<DeviceBuffer> device_buffers_;
};

// Values of a byte vector of `dtype` elements.
std::vector<double> values(const std::vector<unsigned char>& bytes, DType dtype) {
  HostTensor t(dtype, {static_cast<std::int64_t>(bytes.size() / tigon::element_size(dtype))});
  std::memcpy(t.bytes(), bytes.data(), bytes.size());
  std::vector<double> out(t.hidden());
  for (std::int64_t i = 0; i < t.hidden(); ++i) out[i] = t.get(0, i);
  return out;
}

TEST_P(GroupNormCuda, MatchesTheCpuBackend) {
  const Case& c = GetParam();
  prepare();
  device_buffers_.reserve(16);
  const Outputs cpu = run(Device::cpu());
  const Outputs gpu = run(Device::cuda(0));
  const Outputs again = run(Device::cuda(0));
  EXPECT_EQ(gpu.y, again.y) << "y differs run to run";
  EXPECT_EQ(gpu.dx, again.dx) << "dx differs run to run";
  EXPECT_EQ(gpu.dw, again.dw) << "dw differs run to run";
  EXPECT_EQ(gpu.db, again.db) << "db differs run to run";
  EXPECT_EQ(gpu.dx, gpu.dx_in_place) << "dx in place differs from dx out of place";

  // Statistics: the same float32 sums in another order.
  const auto mc = values(cpu.mean, DType::kFloat32), mg = values(gpu.mean, DType::kFloat32);
  const auto rc = values(cpu.rstd, DType::kFloat32), rg = values(gpu.rstd, DType::kFloat32);
  for (std::size_t i = 0; i < mc.size(); ++i) {
    EXPECT_NEAR(mg[i], mc[i], 1e-5 * (std::fabs(mc[i]) + 1.0 / rc[i])) << "mean " << i;
    EXPECT_NEAR(rg[i], rc[i], 1e-5 * rc[i]) << "rstd " << i;
  }
  // y and dx: within 1 ulp of the CPU's for 16-bit dtypes (most bitwise), float32 rounding else.
  const auto yc = values(cpu.y, c.x_dtype), yg = values(gpu.y, c.x_dtype);
  const auto dxc = values(cpu.dx, c.x_dtype), dxg = values(gpu.dx, c.x_dtype);
  const std::int64_t stride = c.c * c.s + c.pad;
  std::int64_t exact = 0, total = 0;
  for (std::int64_t n = 0; n < c.n; ++n) {
    for (std::int64_t j = 0; j < c.c * c.s; ++j) {
      const std::size_t i = n * (stride + c.misalign) + c.misalign + j;
      const std::int64_t d = ulp_distance(c.x_dtype, yg[i], yc[i]);
      exact += d == 0;
      ++total;
      EXPECT_TRUE(d <= 1 || std::fabs(yg[i] - yc[i]) <= 1e-5 * (std::fabs(yc[i]) + 1.0))
          << "y[" << n << ", " << j << "] " << yg[i] << " vs cpu " << yc[i];
      EXPECT_NEAR(dxg[i], dxc[i], 4 * epsilon_of(c.x_dtype) * std::fabs(dxc[i]) + 1e-4)
          << "dx[" << n << ", " << j << "]";
    }
  }
  if (c.x_dtype != DType::kFloat32) {
    EXPECT_GE(static_cast<double>(exact) / total, 0.99) << "y bitwise-equal fraction";
  }
  if (c.p_dtype) {
    const auto dwc = values(cpu.dw, *c.p_dtype), dwg = values(gpu.dw, *c.p_dtype);
    const auto dbc = values(cpu.db, *c.p_dtype), dbg = values(gpu.db, *c.p_dtype);
    const double scale = std::sqrt(static_cast<double>(c.n * c.s)) + 1.0;
    for (std::int64_t ch = 0; ch < c.c; ++ch) {
      EXPECT_NEAR(dwg[ch], dwc[ch], 2 * epsilon_of(*c.p_dtype) * std::fabs(dwc[ch]) + 1e-4 * scale)
          << "dw[" << ch << "]";
      EXPECT_NEAR(dbg[ch], dbc[ch], 2 * epsilon_of(*c.p_dtype) * std::fabs(dbc[ch]) + 1e-4 * scale)
          << "db[" << ch << "]";
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (DType x : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    out.push_back({4, 64, 8, 1024, 0, 0, x, DType::kFloat32});  // vision-like, aligned
    out.push_back({3, 6, 3, 37, 0, 0, x, x});                   // odd S: scalar tails
    out.push_back({2, 12, 12, 50, 5, 1, x, std::nullopt});      // per-channel groups, unaligned
    out.push_back({700, 64, 8, 1, 0, 0, x, x});                 // [N, C]: tiny groups
  }
  out.push_back({2, 32, 1, 8192, 8, 0, DType::kBFloat16, DType::kBFloat16});  // 2^18-element rows
  out.push_back({5000, 32, 32, 3, 0, 0, DType::kBFloat16, DType::kFloat32});  // rows > grid
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GroupNormCuda, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return case_name(info.param); });

}  // namespace
