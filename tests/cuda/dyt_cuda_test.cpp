// GPU tests of the DyT CUDA backend against the CPU backend on the same inputs: every x dtype,
// float32 or x-dtype parameters, with and without beta, odd H, strided rows, in place, every
// launch config forced. Both use math/dyt.h without FMA contraction; the tanh is CUDA's tanhf on
// the device and tigon's tanh_f32 on the host (math/activations.h, as GeGLU's), which differ by
// float32 ulps: y and dx within a rounding of T plus those ulps, and in 16 bits at least 99% of
// the elements bitwise equal. dalpha, dgamma and dbeta are float32 sums in another fixed order:
// within a few float32 roundings of the CPU's. Across configs, run to run and in place
// everything is bitwise identical. Without a CUDA device every test reports SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "cuda/common/chunk_layout.h"
#include "cuda/dyt/config.h"
#include "cuda/mirrored_tensor.h"
#include "ops/dyt_args.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::TensorView;
using tigon::testing::cuda_ok;
using tigon::testing::DeviceBuffer;
using tigon::testing::HostTensor;
using tigon::testing::MirroredTensor;
using tigon::testing::ulp_at;
namespace dyt = tigon::cuda::dyt;

struct Case {
  DType x_dtype;
  DType p_dtype;
  bool beta;
};

std::string case_name(const Case& c) {
  return std::string("x") + tigon::dtype_name(c.x_dtype) + "_p" + tigon::dtype_name(c.p_dtype) +
         (c.beta ? "_beta" : "_nobeta");
}

struct Shape {
  std::int64_t rows, hidden, pad;
};

std::string shape_name(const Shape& s) {
  return std::to_string(s.rows) + "x" + std::to_string(s.hidden) + " pad " + std::to_string(s.pad);
}

// The backend's arguments for 2-D views (what src/ops/dyt.cpp builds after validation).
tigon::detail::DytParams params_of(const TensorView& x, const TensorView& alpha,
                                   const TensorView& gamma, const TensorView* beta) {
  tigon::detail::DytParams p;
  p.alpha = alpha.data;
  p.alpha_dtype = alpha.dtype;
  p.gamma = gamma.data;
  p.gamma_dtype = gamma.dtype;
  p.beta = beta ? beta->data : nullptr;
  p.beta_dtype = beta ? beta->dtype : x.dtype;
  return p;
}

class DytCuda : public ::testing::TestWithParam<Case> {
 protected:
  void check(const Shape& shape) {
    SCOPED_TRACE(shape_name(shape));
    const Case c = GetParam();
    const DType t = c.x_dtype, p = c.p_dtype;
    const std::int64_t rows = shape.rows, hidden = shape.hidden, stride = hidden + shape.pad;
    std::mt19937 rng(static_cast<unsigned>(rows * 31 + hidden * 7 + shape.pad));
    MirroredTensor x(t, {rows, hidden}, stride), dy(t, {rows, hidden}, stride);
    MirroredTensor alpha(p, {1}), gamma(p, {hidden}), beta(p, {hidden});
    x.host.fill_normal(rng, 0.0f, 2.0f);
    dy.host.fill_normal(rng);
    alpha.host.set(0, 0, 0.7f);
    gamma.host.fill_normal(rng, 1.0f, 0.3f);
    beta.host.fill_normal(rng, 0.0f, 0.3f);
    for (MirroredTensor* m : {&x, &dy, &alpha, &gamma, &beta}) m->upload();
    const TensorView no_beta{};

    // CPU backend: the oracle.
    HostTensor y_cpu(t, {rows, hidden}, stride), dx_cpu(t, {rows, hidden}, stride);
    HostTensor da_cpu(p, {1}), dg_cpu(p, {hidden}), db_cpu(p, {hidden});
    std::vector<std::uint8_t> ws_cpu(tigon::dyt_bwd_workspace_size(x.host.view(), c.beta));
    tigon::dyt_fwd(x.host.view(), alpha.host.view(), gamma.host.view(),
                   c.beta ? beta.host.view() : no_beta, y_cpu.view());
    tigon::dyt_bwd(dy.host.view(), x.host.view(), alpha.host.view(), gamma.host.view(),
                   c.beta ? beta.host.view() : no_beta, dx_cpu.view(), da_cpu.view(), dg_cpu.view(),
                   c.beta ? db_cpu.view() : no_beta, {ws_cpu.data(), ws_cpu.size()});

    // CUDA backend through the public API (the config it picks).
    const TensorView bv = c.beta ? beta.device_view() : no_beta;
    MirroredTensor y(t, {rows, hidden}, stride), dx(t, {rows, hidden}, stride);
    MirroredTensor da(p, {1}), dg(p, {hidden}), db(p, {hidden});
    DeviceBuffer ws(tigon::dyt_bwd_workspace_size(x.device_view(), c.beta));
    tigon::dyt_fwd(x.device_view(), alpha.device_view(), gamma.device_view(), bv, y.device_view());
    tigon::dyt_bwd(dy.device_view(), x.device_view(), alpha.device_view(), gamma.device_view(), bv,
                   dx.device_view(), da.device_view(), dg.device_view(),
                   c.beta ? db.device_view() : no_beta, {ws.data(), ws.bytes()});
    cuda_ok(cudaDeviceSynchronize(), "dyt kernels");
    for (MirroredTensor* m : {&y, &dx, &da, &dg, &db}) m->download();
    check_elements(x.host, dy.host, alpha.host, gamma.host, c.beta ? &beta.host : nullptr, y_cpu,
                   dx_cpu, y.host, dx.host);
    check_parameter_gradients(x.host, dy.host, alpha.host, gamma.host, c.beta, da_cpu, dg_cpu,
                              db_cpu, da.host, dg.host, db.host);

    // Run to run: the same bits.
    {
      MirroredTensor dx2(t, {rows, hidden}, stride), da2(p, {1}), dg2(p, {hidden}),
          db2(p, {hidden});
      tigon::dyt_bwd(dy.device_view(), x.device_view(), alpha.device_view(), gamma.device_view(),
                     bv, dx2.device_view(), da2.device_view(), dg2.device_view(),
                     c.beta ? db2.device_view() : no_beta, {ws.data(), ws.bytes()});
      cuda_ok(cudaDeviceSynchronize(), "dyt bwd rerun");
      EXPECT_EQ(da2.device_bytes(), da.device_bytes()) << "dalpha differs run to run";
      EXPECT_EQ(dg2.device_bytes(), dg.device_bytes()) << "dgamma differs run to run";
      EXPECT_EQ(db2.device_bytes(), db.device_bytes()) << "dbeta differs run to run";
      EXPECT_EQ(dx2.device_bytes(), dx.device_bytes()) << "dx differs run to run";
    }

    // Every launch config the inputs allow: the same bits as the picked one.
    const bool vectorizable = tigon::cuda::chunks_vectorizable(
        tigon::element_size(t), rows, hidden, {x.device_view().data, y.device_view().data},
        {stride, stride});
    for (bool vector : {false, true}) {
      if (vector && !vectorizable) continue;
      SCOPED_TRACE(vector ? "forced config: 16-byte packs" : "forced config: one element");
      const dyt::Config config{vector};
      MirroredTensor y2(t, {rows, hidden}, stride), dx2(t, {rows, hidden}, stride);
      MirroredTensor da2(p, {1}), dg2(p, {hidden}), db2(p, {hidden});
      tigon::detail::DytFwdArgs f;
      f.params = params_of(x.device_view(), alpha.device_view(), gamma.device_view(),
                           c.beta ? &bv : nullptr);
      f.rows = rows;
      f.hidden = hidden;
      f.x = x.device_view().data;
      f.x_row_stride = stride;
      f.x_dtype = t;
      f.y = y2.device_view().data;
      f.y_row_stride = stride;
      dyt::fwd_with_config(f, &config, 0, nullptr);
      tigon::detail::DytBwdArgs b;
      b.params = f.params;
      b.rows = rows;
      b.hidden = hidden;
      b.dy = dy.device_view().data;
      b.dy_row_stride = stride;
      b.x = f.x;
      b.x_row_stride = stride;
      b.x_dtype = t;
      b.dx = dx2.device_view().data;
      b.dx_row_stride = stride;
      b.dalpha = da2.device_view().data;
      b.dgamma = dg2.device_view().data;
      b.dbeta = c.beta ? db2.device_view().data : nullptr;
      b.workspace = ws.data();
      b.workspace_bytes = ws.bytes();
      dyt::bwd_with_config(b, &config, 0, nullptr);
      cuda_ok(cudaDeviceSynchronize(), "dyt forced config");
      EXPECT_EQ(y2.device_bytes(), y.device_bytes()) << "y differs from the picked config's";
      EXPECT_EQ(dx2.device_bytes(), dx.device_bytes()) << "dx differs from the picked config's";
      EXPECT_EQ(da2.device_bytes(), da.device_bytes()) << "dalpha differs from the picked config's";
      EXPECT_EQ(dg2.device_bytes(), dg.device_bytes()) << "dgamma differs from the picked config's";
      EXPECT_EQ(db2.device_bytes(), db.device_bytes()) << "dbeta differs from the picked config's";
    }

    // In place (dx is dy): the same dx and gradients.
    {
      MirroredTensor dy_in(t, {rows, hidden}, stride), da2(p, {1}), dg2(p, {hidden}),
          db2(p, {hidden});
      dy_in.host = dy.host;
      dy_in.upload();
      tigon::dyt_bwd(dy_in.device_view(), x.device_view(), alpha.device_view(), gamma.device_view(),
                     bv, dy_in.device_view(), da2.device_view(), dg2.device_view(),
                     c.beta ? db2.device_view() : no_beta, {ws.data(), ws.bytes()});
      cuda_ok(cudaDeviceSynchronize(), "dyt bwd in place");
      EXPECT_EQ(dy_in.device_bytes(), dx.device_bytes()) << "in-place dx differs";
      EXPECT_EQ(dg2.device_bytes(), dg.device_bytes()) << "in-place dgamma differs";
      EXPECT_EQ(da2.device_bytes(), da.device_bytes()) << "in-place dalpha differs";
    }
  }

  // y and dx against the CPU's: tanhf vs tanh_f32 differ by a few float32 ulps of t (4e-7
  // relative), then one rounding to T; in 16 bits nearly every element is bitwise equal.
  static void check_elements(const HostTensor& x, const HostTensor& dy, const HostTensor& alpha,
                             const HostTensor& gamma, const HostTensor* beta,
                             const HostTensor& y_cpu, const HostTensor& dx_cpu, const HostTensor& y,
                             const HostTensor& dx) {
    const std::int64_t rows = x.rows(), hidden = x.hidden();
    const DType t = x.dtype();
    const double a = std::fabs(alpha.get(0, 0));
    std::int64_t equal = 0, bad = 0;
    std::string first;
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < hidden; ++j) {
        const double g = std::fabs(gamma.get(0, j)), b = beta ? std::fabs(beta->get(0, j)) : 0.0;
        const double d = std::fabs(dy.get(i, j));
        equal += (y.bits(i, j) == y_cpu.bits(i, j)) + (dx.bits(i, j) == dx_cpu.bits(i, j));
        const double y_tol = ulp_at(t, y_cpu.get(i, j)) + 1e-6 * (g + b);
        const double dx_tol = ulp_at(t, dx_cpu.get(i, j)) + 2e-6 * a * d * g;
        const double y_err = std::fabs(double(y.get(i, j)) - y_cpu.get(i, j));
        const double dx_err = std::fabs(double(dx.get(i, j)) - dx_cpu.get(i, j));
        if (!(y_err <= y_tol) || !(dx_err <= dx_tol)) {
          if (bad == 0) {
            first = "[" + std::to_string(i) + "," + std::to_string(j) + "]: y expected " +
                    std::to_string(y_cpu.get(i, j)) + " got " + std::to_string(y.get(i, j)) +
                    "; dx expected " + std::to_string(dx_cpu.get(i, j)) + " got " +
                    std::to_string(dx.get(i, j));
          }
          ++bad;
        }
      }
    }
    EXPECT_EQ(bad, 0) << "first: " << first;
    const double fraction = static_cast<double>(equal) / (2.0 * rows * hidden);
    std::cout << "  y and dx bitwise equal to the CPU's on " << fraction * 100 << "%\n";
    if (t != DType::kFloat32) EXPECT_GE(fraction, 0.99) << "y and dx bitwise equal to the CPU's";
  }

  // dalpha, dgamma, dbeta against the CPU's: float32 sums in different orders, so within
  // 1e-5 of the sum of the terms' magnitudes (float64) plus a rounding of the parameter dtype.
  static void check_parameter_gradients(const HostTensor& x, const HostTensor& dy,
                                        const HostTensor& alpha, const HostTensor& gamma,
                                        bool has_beta, const HostTensor& da_cpu,
                                        const HostTensor& dg_cpu, const HostTensor& db_cpu,
                                        const HostTensor& da, const HostTensor& dg,
                                        const HostTensor& db) {
    const std::int64_t rows = x.rows(), hidden = x.hidden();
    const DType p = alpha.dtype();
    const double a = alpha.get(0, 0);
    double da_scale = 0.0;
    std::vector<double> dg_scale(hidden, 0.0), db_scale(hidden, 0.0);
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < hidden; ++j) {
        const double xv = x.get(i, j), g = dy.get(i, j), th = std::tanh(a * xv);
        da_scale += std::fabs(xv * (1.0 - th * th) * g * gamma.get(0, j));
        dg_scale[j] += std::fabs(g * th);
        db_scale[j] += std::fabs(g);
      }
    }
    const auto tol = [&](double ref, double scale) { return 2 * ulp_at(p, ref) + 1e-5 * scale; };
    EXPECT_NEAR(da.get(0, 0), da_cpu.get(0, 0), tol(da_cpu.get(0, 0), da_scale)) << "dalpha";
    for (std::int64_t j = 0; j < hidden; ++j) {
      ASSERT_NEAR(dg.get(0, j), dg_cpu.get(0, j), tol(dg_cpu.get(0, j), dg_scale[j]))
          << "dgamma[" << j << "]";
      if (has_beta) {
        ASSERT_NEAR(db.get(0, j), db_cpu.get(0, j), tol(db_cpu.get(0, j), db_scale[j]))
            << "dbeta[" << j << "]";
      }
    }
  }
};

TEST_P(DytCuda, OddAndSmallHidden) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (Shape s : {Shape{5, 1, 0}, Shape{7, 3, 0}, Shape{1, 8, 0}, Shape{33, 1031, 0}}) check(s);
}

TEST_P(DytCuda, AlignedRows) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (Shape s : {Shape{37, 1024, 0}, Shape{2, 16384, 0}, Shape{4100, 64, 0}}) check(s);
}

TEST_P(DytCuda, StridedRows) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // pad 8: rows stay 16-byte aligned (packs); pad 3: one element at a time.
  for (Shape s : {Shape{300, 4096, 8}, Shape{64, 2050, 3}}) check(s);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (DType x : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    const std::vector<DType> params =
        x == DType::kFloat32 ? std::vector<DType>{x} : std::vector<DType>{x, DType::kFloat32};
    for (DType p : params) {
      for (bool beta : {true, false}) cases.push_back({x, p, beta});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, DytCuda, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return case_name(info.param); });

TEST(DytCudaEmpty, ZeroRowsGiveZeroGradients) {
  SKIP_WITHOUT_CUDA_DEVICE();
  MirroredTensor x(DType::kFloat32, {0, 4}), alpha(DType::kFloat32, {1}),
      gamma(DType::kFloat32, {4}), beta(DType::kFloat32, {4});
  MirroredTensor dalpha(DType::kFloat32, {1}), dgamma(DType::kFloat32, {4}),
      dbeta(DType::kFloat32, {4});
  for (MirroredTensor* m : {&dalpha, &dgamma, &dbeta}) {
    for (std::int64_t j = 0; j < m->host.hidden(); ++j) m->host.set(0, j, 3.0f);
    m->upload();
  }
  DeviceBuffer ws(tigon::dyt_bwd_workspace_size(x.device_view(), true));
  tigon::dyt_bwd(x.device_view(), x.device_view(), alpha.device_view(), gamma.device_view(),
                 beta.device_view(), x.device_view(), dalpha.device_view(), dgamma.device_view(),
                 dbeta.device_view(), {ws.data(), ws.bytes()});
  cuda_ok(cudaDeviceSynchronize(), "dyt bwd, zero rows");
  for (MirroredTensor* m : {&dalpha, &dgamma, &dbeta}) {
    m->download();
    for (std::int64_t j = 0; j < m->host.hidden(); ++j) EXPECT_EQ(m->host.get(0, j), 0.0f);
  }
}

}  // namespace
