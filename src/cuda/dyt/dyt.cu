// DyT CUDA backend entry points: the op's device made current, the config picked (config.h), the
// kernels launched on the caller's stream, then the parameter gradients finished in a fixed order
// (dgamma, dbeta: RMSNorm's dW finish; dalpha: scalar_sums_finish.cuh). Never allocates and never
// synchronizes, so the calls can be captured in a CUDA graph.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dispatch.h"
#include "cuda/common/chunk_layout.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/launch.cuh"
#include "cuda/common/scalar_sums_finish.cuh"
#include "cuda/dyt/config.h"
#include "cuda/dyt/kernels.cuh"
#include "cuda/rms_norm/dw_finish_launch.cuh"
#include "ops/dyt_args.h"

namespace tigon::cuda {
namespace dyt {
namespace {

// Workspace: dgamma partials [groups][hidden], dbeta partials (with beta) the same, then the
// dalpha partials [groups * tiles]; all float32.
struct WorkspaceLayout {
  std::size_t gamma = 0, beta = 0, alpha = 0, bytes = 0;
};

WorkspaceLayout workspace_layout(std::int64_t rows, std::int64_t hidden, bool has_beta) {
  const Grid g = bwd_grid(rows, hidden);
  const auto column_bytes = static_cast<std::size_t>(g.groups * hidden) * sizeof(float);
  WorkspaceLayout w;
  w.gamma = 0;
  w.beta = column_bytes;
  w.alpha = column_bytes * (has_beta ? 2 : 1);
  w.bytes = w.alpha + static_cast<std::size_t>(g.ctas()) * sizeof(float);
  return w;
}

Params params_of(const detail::DytParams& d, std::int64_t rows, std::int64_t hidden, Grid grid) {
  Params p;
  p.alpha = d.alpha;
  p.alpha_dtype = d.alpha_dtype;
  p.gamma = d.gamma;
  p.gamma_dtype = d.gamma_dtype;
  p.beta = d.beta;
  p.beta_dtype = d.beta_dtype;
  p.rows = rows;
  p.hidden = hidden;
  p.grid = grid;
  return p;
}

Config fwd_config(const detail::DytFwdArgs& a) {
  return {chunks_vectorizable(element_size(a.x_dtype), a.rows, a.hidden, {a.x, a.y},
                              {a.x_row_stride, a.y_row_stride})};
}

Config bwd_config(const detail::DytBwdArgs& a) {
  return {chunks_vectorizable(element_size(a.x_dtype), a.rows, a.hidden, {a.dy, a.x, a.dx},
                              {a.dy_row_stride, a.x_row_stride, a.dx_row_stride})};
}

void zero_gradients(const detail::DytBwdArgs& a, cudaStream_t s) {
  const detail::DytParams& p = a.params;
  TIGON_CUDA_CHECK(cudaMemsetAsync(a.dalpha, 0, element_size(p.alpha_dtype), s));
  TIGON_CUDA_CHECK(cudaMemsetAsync(a.dgamma, 0, element_size(p.gamma_dtype) * a.hidden, s));
  if (a.dbeta) {
    TIGON_CUDA_CHECK(cudaMemsetAsync(a.dbeta, 0, element_size(p.beta_dtype) * a.hidden, s));
  }
}

}  // namespace

void fwd_with_config(const detail::DytFwdArgs& a, const Config* forced, int device, void* stream) {
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.rows == 0) return;
  const Config c = forced ? *forced : fwd_config(a);
  FwdParams f;
  f.p = params_of(a.params, a.rows, a.hidden, fwd_grid(a.rows, a.hidden));
  f.x = a.x;
  f.x_row_stride = a.x_row_stride;
  f.y = a.y;
  f.y_row_stride = a.y_row_stride;
  detail::dispatch_dtype(a.x_dtype, [&](auto tag) {
    using X = typename decltype(tag)::type;
    const auto kernel = c.vector ? &dyt_fwd_kernel<X, true> : &dyt_fwd_kernel<X, false>;
    launch_kernel(kernel, f.p.grid.ctas(), dim3(kThreads), 0, 1, s, f);
  });
}

void bwd_with_config(const detail::DytBwdArgs& a, const Config* forced, int device, void* stream) {
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.rows == 0) {
    zero_gradients(a, s);
    return;
  }
  const Config c = forced ? *forced : bwd_config(a);
  const bool has_beta = a.dbeta != nullptr;
  const WorkspaceLayout wl = workspace_layout(a.rows, a.hidden, has_beta);
  auto* ws = static_cast<char*>(a.workspace);
  BwdParams b;
  b.p = params_of(a.params, a.rows, a.hidden, bwd_grid(a.rows, a.hidden));
  b.dy = a.dy;
  b.dy_row_stride = a.dy_row_stride;
  b.x = a.x;
  b.x_row_stride = a.x_row_stride;
  b.dx = a.dx;
  b.dx_row_stride = a.dx_row_stride;
  b.gamma_partials = reinterpret_cast<float*>(ws + wl.gamma);
  b.beta_partials = has_beta ? reinterpret_cast<float*>(ws + wl.beta) : nullptr;
  b.alpha_partials = reinterpret_cast<float*>(ws + wl.alpha);
  detail::dispatch_dtype(a.x_dtype, [&](auto tag) {
    using X = typename decltype(tag)::type;
    const auto kernel = c.vector ? &dyt_bwd_kernel<X, true> : &dyt_bwd_kernel<X, false>;
    launch_kernel(kernel, b.p.grid.ctas(), dim3(kThreads), 0, 1, s, b);
  });
  const std::int64_t groups = b.p.grid.groups;
  detail::dispatch_dtype(a.params.gamma_dtype, [&](auto tag) {
    using G = typename decltype(tag)::type;
    rms_norm::launch_dw_finish(b.gamma_partials, groups, a.hidden, static_cast<G*>(a.dgamma), false,
                               s);
  });
  if (has_beta) {
    detail::dispatch_dtype(a.params.beta_dtype, [&](auto tag) {
      using B = typename decltype(tag)::type;
      rms_norm::launch_dw_finish(b.beta_partials, groups, a.hidden, static_cast<B*>(a.dbeta), false,
                                 s);
    });
  }
  ScalarSumsOut out;
  out.ptr[0] = a.dalpha;
  out.dtype[0] = a.params.alpha_dtype;
  launch_scalar_sums_finish(b.alpha_partials, b.p.grid.ctas(), 1, out, s);
}

}  // namespace dyt

std::size_t dyt_bwd_workspace_size(std::int64_t rows, std::int64_t hidden, bool has_beta, int) {
  return dyt::workspace_layout(rows, hidden, has_beta).bytes;
}

void dyt_fwd(const detail::DytFwdArgs& args, int device, void* stream) {
  dyt::fwd_with_config(args, nullptr, device, stream);
}

void dyt_bwd(const detail::DytBwdArgs& args, int device, void* stream) {
  dyt::bwd_with_config(args, nullptr, device, stream);
}

}  // namespace tigon::cuda
