// GPU tests of the PolyNorm CUDA backend against the CPU backend on the same inputs: every x dtype,
// float32 or x-dtype parameters, odd H, strided rows, in place, every launch config forced (16-byte
// packs or one element at a time; chunks kept in registers or read twice). Both backends use
// math/poly_norm.h without FMA contraction; only the order of the float32 row sums differs (the
// CPU's 16 lanes, the device's threads), so y and dx are within a few float32 roundings of the
// CPU's before the final rounding, and most 16-bit elements are bitwise equal. Across configs, run
// to run and for a row alone vs in a batch, everything is bitwise identical. Without a CUDA device
// every test reports SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "cuda/common/chunk_layout.h"
#include "cuda/mirrored_tensor.h"
#include "cuda/poly_norm/config.h"
#include "ops/poly_norm_args.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::TensorView;
using tigon::testing::cuda_ok;
using tigon::testing::DeviceBuffer;
using tigon::testing::HostTensor;
using tigon::testing::MirroredTensor;
using tigon::testing::ulp_at;
namespace pn = tigon::cuda::poly_norm;

constexpr float kEps = 1e-6f;

struct Case {
  DType x_dtype;
  DType p_dtype;
};

std::string case_name(const Case& c) {
  return std::string("x") + tigon::dtype_name(c.x_dtype) + "_p" + tigon::dtype_name(c.p_dtype);
}

struct Shape {
  std::int64_t rows, hidden, pad;
};

std::string shape_name(const Shape& s) {
  return std::to_string(s.rows) + "x" + std::to_string(s.hidden) + " pad " + std::to_string(s.pad);
}

// Float64 magnitudes the CPU-vs-CUDA tolerances scale with: per element, the sizes of the three
// normalized terms (y) and of the three gradient terms (dx); per parameter, the sums of the terms'
// magnitudes.
struct Scales {
  std::vector<double> y, dx;
  double dweight[3] = {0.0, 0.0, 0.0};
  double dbias = 0.0;
};

double round_to(DType t, double v) {
  HostTensor h(t, {1});
  h.set(0, 0, static_cast<float>(v));
  return h.get(0, 0);
}

Scales scales_of(const HostTensor& x, const HostTensor& dy, const HostTensor& w) {
  const std::int64_t rows = x.rows(), hidden = x.hidden();
  const DType t = x.dtype();
  Scales s;
  s.y.assign(rows * hidden, 0.0);
  s.dx.assign(rows * hidden, 0.0);
  const double w0 = std::fabs(w.get(0, 0)), w1 = std::fabs(w.get(0, 1)),
               w2 = std::fabs(w.get(0, 2));
  for (std::int64_t i = 0; i < rows; ++i) {
    double sq[3] = {0, 0, 0}, dot[3] = {0, 0, 0};
    std::vector<double> p1(hidden), p2(hidden), p3(hidden);
    for (std::int64_t j = 0; j < hidden; ++j) {
      const double v = x.get(i, j);
      p1[j] = v;
      p2[j] = round_to(t, v * v);
      p3[j] = round_to(t, v * v * v);
      sq[0] += p1[j] * p1[j];
      sq[1] += p2[j] * p2[j];
      sq[2] += p3[j] * p3[j];
      const double g = std::fabs(dy.get(i, j));
      dot[0] += g * std::fabs(p1[j]);
      dot[1] += g * std::fabs(p2[j]);
      dot[2] += g * std::fabs(p3[j]);
      s.dbias += g;
    }
    double r[3];
    for (int k = 0; k < 3; ++k) r[k] = 1.0 / std::sqrt(sq[k] / hidden + kEps);
    s.dweight[0] += r[2] * dot[2];
    s.dweight[1] += r[1] * dot[1];
    s.dweight[2] += r[0] * dot[0];
    for (std::int64_t j = 0; j < hidden; ++j) {
      const double v = x.get(i, j), g = std::fabs(dy.get(i, j));
      s.y[i * hidden + j] = w0 * std::fabs(p3[j]) * r[2] + w1 * std::fabs(p2[j]) * r[1] +
                            w2 * std::fabs(p1[j]) * r[0];
      const double c[3] = {r[0] * r[0] * r[0] * dot[0] / hidden,
                           r[1] * r[1] * r[1] * dot[1] / hidden,
                           r[2] * r[2] * r[2] * dot[2] / hidden};
      s.dx[i * hidden + j] = w0 * 3 * v * v * (r[2] * g + std::fabs(p3[j]) * c[2]) +
                             w1 * 2 * std::fabs(v) * (r[1] * g + std::fabs(p2[j]) * c[1]) +
                             w2 * (r[0] * g + std::fabs(p1[j]) * c[0]);
    }
  }
  return s;
}

// got vs the CPU's `expected`: within a rounding of T plus 1e-5 of the terms' magnitude; returns ""
// or the first failure and the count. Also counts the bitwise-equal elements.
std::string near_diff(const char* what, const HostTensor& expected, const HostTensor& got,
                      const std::vector<double>& scale, std::int64_t* equal) {
  const std::int64_t rows = expected.rows(), hidden = expected.hidden();
  std::int64_t bad = 0;
  std::string first;
  *equal = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < hidden; ++j) {
      const double e = expected.get(i, j), g = got.get(i, j);
      if (expected.bits(i, j) == got.bits(i, j)) ++*equal;
      const double tol = ulp_at(expected.dtype(), e) + 1e-5 * scale[i * hidden + j];
      if (!(std::fabs(e - g) <= tol)) {
        if (bad == 0) {
          first = std::string(what) + "[" + std::to_string(i) + "," + std::to_string(j) +
                  "]: expected " + std::to_string(e) + ", got " + std::to_string(g) +
                  ", tolerance " + std::to_string(tol);
        }
        ++bad;
      }
    }
  }
  if (bad == 0) return "";
  return first + "; " + std::to_string(bad) + " of " + std::to_string(rows * hidden) + " differ";
}

class PolyNormCuda : public ::testing::TestWithParam<Case> {
 protected:
  void check(const Shape& shape) {
    SCOPED_TRACE(shape_name(shape));
    const Case c = GetParam();
    const DType t = c.x_dtype, p = c.p_dtype;
    const std::int64_t rows = shape.rows, hidden = shape.hidden, stride = hidden + shape.pad;
    std::mt19937 rng(static_cast<unsigned>(rows * 17 + hidden * 5 + shape.pad));
    MirroredTensor x(t, {rows, hidden}, stride), dy(t, {rows, hidden}, stride);
    MirroredTensor w(p, {3}), b(p, {1});
    x.host.fill_normal(rng, 0.0f, 1.0f);
    dy.host.fill_normal(rng);
    w.host.set(0, 0, 0.35f);
    w.host.set(0, 1, -0.6f);
    w.host.set(0, 2, 1.2f);
    b.host.set(0, 0, 0.125f);
    for (MirroredTensor* m : {&x, &dy, &w, &b}) m->upload();

    // CPU backend: the oracle.
    HostTensor y_cpu(t, {rows, hidden}, stride), dx_cpu(t, {rows, hidden}, stride);
    HostTensor dw_cpu(p, {3}), db_cpu(p, {1});
    std::vector<std::uint8_t> ws_cpu(tigon::poly_norm_bwd_workspace_size(x.host.view()));
    tigon::poly_norm_fwd(x.host.view(), w.host.view(), b.host.view(), y_cpu.view(), kEps);
    tigon::poly_norm_bwd(dy.host.view(), x.host.view(), w.host.view(), b.host.view(), dx_cpu.view(),
                         dw_cpu.view(), db_cpu.view(), kEps, {ws_cpu.data(), ws_cpu.size()});

    // CUDA backend through the public API (the config it picks).
    MirroredTensor y(t, {rows, hidden}, stride), dx(t, {rows, hidden}, stride);
    MirroredTensor dw(p, {3}), db(p, {1});
    DeviceBuffer ws(tigon::poly_norm_bwd_workspace_size(x.device_view()));
    tigon::poly_norm_fwd(x.device_view(), w.device_view(), b.device_view(), y.device_view(), kEps);
    tigon::poly_norm_bwd(dy.device_view(), x.device_view(), w.device_view(), b.device_view(),
                         dx.device_view(), dw.device_view(), db.device_view(), kEps,
                         {ws.data(), ws.bytes()});
    cuda_ok(cudaDeviceSynchronize(), "poly_norm kernels");
    for (MirroredTensor* m : {&y, &dx, &dw, &db}) m->download();

    const Scales s = scales_of(x.host, dy.host, w.host);
    std::int64_t y_equal = 0, dx_equal = 0;
    EXPECT_EQ(near_diff("y", y_cpu, y.host, s.y, &y_equal), "");
    EXPECT_EQ(near_diff("dx", dx_cpu, dx.host, s.dx, &dx_equal), "");
    std::cout << "  " << shape_name(shape) << ": y bitwise equal to the CPU's on " << y_equal
              << " of " << rows * hidden << ", dx on " << dx_equal << "\n";
    for (int k = 0; k < 3; ++k) {
      EXPECT_NEAR(dw.host.get(0, k), dw_cpu.get(0, k),
                  2 * ulp_at(p, dw_cpu.get(0, k)) + 1e-5 * s.dweight[k])
          << "dweight[" << k << "]";
    }
    EXPECT_NEAR(db.host.get(0, 0), db_cpu.get(0, 0),
                2 * ulp_at(p, db_cpu.get(0, 0)) + 1e-5 * s.dbias)
        << "dbias";

    // Run to run: the same bits.
    {
      MirroredTensor y2(t, {rows, hidden}, stride), dx2(t, {rows, hidden}, stride), dw2(p, {3}),
          db2(p, {1});
      tigon::poly_norm_fwd(x.device_view(), w.device_view(), b.device_view(), y2.device_view(),
                           kEps);
      tigon::poly_norm_bwd(dy.device_view(), x.device_view(), w.device_view(), b.device_view(),
                           dx2.device_view(), dw2.device_view(), db2.device_view(), kEps,
                           {ws.data(), ws.bytes()});
      cuda_ok(cudaDeviceSynchronize(), "poly_norm rerun");
      EXPECT_EQ(y2.device_bytes(), y.device_bytes()) << "y differs run to run";
      EXPECT_EQ(dx2.device_bytes(), dx.device_bytes()) << "dx differs run to run";
      EXPECT_EQ(dw2.device_bytes(), dw.device_bytes()) << "dweight differs run to run";
      EXPECT_EQ(db2.device_bytes(), db.device_bytes()) << "dbias differs run to run";
    }

    // Every launch config the inputs allow: the same bits as the picked one.
    const bool vectorizable = tigon::cuda::chunks_vectorizable(
        tigon::element_size(t), rows, hidden, {x.device_view().data, y.device_view().data},
        {stride, stride});
    const bool resident_fits = pn::row_split(hidden).thread_chunks() <= pn::kResidentChunks;
    for (bool vector : {false, true}) {
      for (bool resident : {false, true}) {
        if ((vector && !vectorizable) || (resident && !resident_fits)) continue;
        SCOPED_TRACE(std::string("forced config: ") + (vector ? "16-byte packs" : "one element") +
                     (resident ? ", chunks in registers" : ", chunks read twice"));
        const pn::Config config{vector, resident};
        MirroredTensor y2(t, {rows, hidden}, stride), dx2(t, {rows, hidden}, stride), dw2(p, {3}),
            db2(p, {1});
        tigon::detail::PolyNormFwdArgs f;
        f.params.weight = w.device_view().data;
        f.params.weight_dtype = p;
        f.params.bias = b.device_view().data;
        f.params.bias_dtype = p;
        f.params.eps = kEps;
        f.rows = rows;
        f.hidden = hidden;
        f.x = x.device_view().data;
        f.x_row_stride = stride;
        f.x_dtype = t;
        f.y = y2.device_view().data;
        f.y_row_stride = stride;
        pn::fwd_with_config(f, &config, 0, nullptr);
        tigon::detail::PolyNormBwdArgs bw;
        bw.params = f.params;
        bw.rows = rows;
        bw.hidden = hidden;
        bw.dy = dy.device_view().data;
        bw.dy_row_stride = stride;
        bw.x = f.x;
        bw.x_row_stride = stride;
        bw.x_dtype = t;
        bw.dx = dx2.device_view().data;
        bw.dx_row_stride = stride;
        bw.dweight = dw2.device_view().data;
        bw.dbias = db2.device_view().data;
        bw.workspace = ws.data();
        bw.workspace_bytes = ws.bytes();
        pn::bwd_with_config(bw, &config, 0, nullptr);
        cuda_ok(cudaDeviceSynchronize(), "poly_norm forced config");
        EXPECT_EQ(y2.device_bytes(), y.device_bytes()) << "y differs from the picked config's";
        EXPECT_EQ(dx2.device_bytes(), dx.device_bytes()) << "dx differs from the picked config's";
        EXPECT_EQ(dw2.device_bytes(), dw.device_bytes()) << "dweight differs";
        EXPECT_EQ(db2.device_bytes(), db.device_bytes()) << "dbias differs";
      }
    }

    // In place (dx is dy): the same dx and gradients.
    {
      MirroredTensor dy_in(t, {rows, hidden}, stride), dw2(p, {3}), db2(p, {1});
      dy_in.host = dy.host;
      dy_in.upload();
      tigon::poly_norm_bwd(dy_in.device_view(), x.device_view(), w.device_view(), b.device_view(),
                           dy_in.device_view(), dw2.device_view(), db2.device_view(), kEps,
                           {ws.data(), ws.bytes()});
      cuda_ok(cudaDeviceSynchronize(), "poly_norm bwd in place");
      EXPECT_EQ(dy_in.device_bytes(), dx.device_bytes()) << "in-place dx differs";
      EXPECT_EQ(dw2.device_bytes(), dw.device_bytes()) << "in-place dweight differs";
    }

    // A row's result does not depend on the batch: the last row alone gives the same y.
    {
      MirroredTensor x1(t, {1, hidden}), y1(t, {1, hidden});
      for (std::int64_t j = 0; j < hidden; ++j) x1.host.set(0, j, x.host.get(rows - 1, j));
      x1.upload();
      tigon::poly_norm_fwd(x1.device_view(), w.device_view(), b.device_view(), y1.device_view(),
                           kEps);
      cuda_ok(cudaDeviceSynchronize(), "poly_norm one row");
      y1.download();
      for (std::int64_t j = 0; j < hidden; ++j) {
        ASSERT_EQ(y1.host.bits(0, j), y.host.bits(rows - 1, j))
            << "y[" << rows - 1 << "," << j << "] alone vs in the batch";
      }
    }
  }
};

TEST_P(PolyNormCuda, OddAndSmallHidden) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (Shape s : {Shape{5, 1, 0}, Shape{7, 3, 0}, Shape{9, 8, 0}, Shape{33, 1031, 0}}) check(s);
}

TEST_P(PolyNormCuda, AlignedRows) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // 1024: four rows a CTA; 16384: 512 threads a row; 40000: chunks read twice only.
  for (Shape s : {Shape{37, 1024, 0}, Shape{3, 16384, 0}, Shape{2, 40000, 0}, Shape{1000, 64, 0}})
    check(s);
}

TEST_P(PolyNormCuda, StridedRows) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (Shape s : {Shape{130, 4096, 8}, Shape{64, 2050, 3}}) check(s);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (DType x : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    cases.push_back({x, x});
    if (x != DType::kFloat32) cases.push_back({x, DType::kFloat32});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, PolyNormCuda, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return case_name(info.param); });

TEST(PolyNormCudaEmpty, ZeroRowsGiveZeroGradients) {
  SKIP_WITHOUT_CUDA_DEVICE();
  MirroredTensor x(DType::kFloat32, {0, 4}), w(DType::kFloat32, {3}), b(DType::kFloat32, {1});
  MirroredTensor dw(DType::kFloat32, {3}), db(DType::kFloat32, {1});
  for (MirroredTensor* m : {&dw, &db}) {
    for (std::int64_t j = 0; j < m->host.hidden(); ++j) m->host.set(0, j, 3.0f);
    m->upload();
  }
  DeviceBuffer ws(tigon::poly_norm_bwd_workspace_size(x.device_view()));
  tigon::poly_norm_bwd(x.device_view(), x.device_view(), w.device_view(), b.device_view(),
                       x.device_view(), dw.device_view(), db.device_view(), kEps,
                       {ws.data(), ws.bytes()});
  cuda_ok(cudaDeviceSynchronize(), "poly_norm bwd, zero rows");
  for (MirroredTensor* m : {&dw, &db}) {
    m->download();
    for (std::int64_t j = 0; j < m->host.hidden(); ++j) EXPECT_EQ(m->host.get(0, j), 0.0f);
  }
}

}  // namespace
