// PolyNorm CUDA backend entry points: the op's device made current, the config picked (config.h),
// the row kernel launched on the caller's stream, then dweight and dbias finished from the per-row
// partials in a fixed order (scalar_sums_finish.cuh). Never allocates and never synchronizes, so
// the calls can be captured in a CUDA graph.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/dispatch.h"
#include "cuda/common/chunk_layout.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/launch.cuh"
#include "cuda/common/scalar_sums_finish.cuh"
#include "cuda/poly_norm/config.h"
#include "cuda/poly_norm/kernels.cuh"
#include "ops/poly_norm_args.h"

namespace tigon::cuda {
namespace poly_norm {
namespace {

Params params_of(const detail::PolyNormParams& d, std::int64_t rows, std::int64_t hidden) {
  Params p;
  p.weight = d.weight;
  p.weight_dtype = d.weight_dtype;
  p.bias = d.bias;
  p.bias_dtype = d.bias_dtype;
  p.eps = d.eps;
  p.rows = rows;
  p.hidden = hidden;
  p.split = row_split(hidden);
  return p;
}

bool resident(std::int64_t hidden) { return row_split(hidden).thread_chunks() <= kResidentChunks; }

Config fwd_config(const detail::PolyNormFwdArgs& a) {
  return {chunks_vectorizable(element_size(a.x_dtype), a.rows, a.hidden, {a.x, a.y},
                              {a.x_row_stride, a.y_row_stride}),
          resident(a.hidden)};
}

Config bwd_config(const detail::PolyNormBwdArgs& a) {
  return {chunks_vectorizable(element_size(a.x_dtype), a.rows, a.hidden, {a.dy, a.x, a.dx},
                              {a.dy_row_stride, a.x_row_stride, a.dx_row_stride}),
          resident(a.hidden)};
}

std::int64_t grid_of(const Params& p) {
  const std::int64_t per_block = p.split.rows_per_block();
  return std::min((p.rows + per_block - 1) / per_block, kMaxGridBlocks);
}

// Calls f.template operator()<X, kVector, kResident>() for the config.
template <typename F>
void dispatch(DType x_dtype, const Config& c, F&& f) {
  detail::dispatch_dtype(x_dtype, [&](auto tag) {
    using X = typename decltype(tag)::type;
    if (c.vector && c.resident) f.template operator()<X, true, true>();
    if (c.vector && !c.resident) f.template operator()<X, true, false>();
    if (!c.vector && c.resident) f.template operator()<X, false, true>();
    if (!c.vector && !c.resident) f.template operator()<X, false, false>();
  });
}

}  // namespace

void fwd_with_config(const detail::PolyNormFwdArgs& a, const Config* forced, int device,
                     void* stream) {
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.rows == 0) return;
  const Config c = forced ? *forced : fwd_config(a);
  FwdParams f;
  f.p = params_of(a.params, a.rows, a.hidden);
  f.x = a.x;
  f.x_row_stride = a.x_row_stride;
  f.y = a.y;
  f.y_row_stride = a.y_row_stride;
  dispatch(a.x_dtype, c, [&]<typename X, bool kVector, bool kResident>() {
    launch_kernel(poly_norm_fwd_kernel<X, kVector, kResident>, grid_of(f.p),
                  dim3(f.p.split.block_threads), 0, 1, s, f);
  });
}

void bwd_with_config(const detail::PolyNormBwdArgs& a, const Config* forced, int device,
                     void* stream) {
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.rows == 0) {
    TIGON_CUDA_CHECK(cudaMemsetAsync(a.dweight, 0, 3 * element_size(a.params.weight_dtype), s));
    TIGON_CUDA_CHECK(cudaMemsetAsync(a.dbias, 0, element_size(a.params.bias_dtype), s));
    return;
  }
  const Config c = forced ? *forced : bwd_config(a);
  BwdParams b;
  b.p = params_of(a.params, a.rows, a.hidden);
  b.dy = a.dy;
  b.dy_row_stride = a.dy_row_stride;
  b.x = a.x;
  b.x_row_stride = a.x_row_stride;
  b.dx = a.dx;
  b.dx_row_stride = a.dx_row_stride;
  b.row_partials = static_cast<float*>(a.workspace);
  dispatch(a.x_dtype, c, [&]<typename X, bool kVector, bool kResident>() {
    launch_kernel(poly_norm_bwd_kernel<X, kVector, kResident>, grid_of(b.p),
                  dim3(b.p.split.block_threads), 0, 1, s, b);
  });
  const std::size_t w = element_size(a.params.weight_dtype);
  ScalarSumsOut out;
  for (int k = 0; k < 3; ++k) {
    out.ptr[k] = static_cast<char*>(a.dweight) + k * w;
    out.dtype[k] = a.params.weight_dtype;
  }
  out.ptr[3] = a.dbias;
  out.dtype[3] = a.params.bias_dtype;
  launch_scalar_sums_finish(b.row_partials, a.rows, kRowPartials, out, s);
}

}  // namespace poly_norm

std::size_t poly_norm_bwd_workspace_size(std::int64_t rows, std::int64_t, int) {
  return static_cast<std::size_t>(rows) * poly_norm::kRowPartials * sizeof(float);
}

void poly_norm_fwd(const detail::PolyNormFwdArgs& args, int device, void* stream) {
  poly_norm::fwd_with_config(args, nullptr, device, stream);
}

void poly_norm_bwd(const detail::PolyNormBwdArgs& args, int device, void* stream) {
  poly_norm::bwd_with_config(args, nullptr, device, stream);
}

}  // namespace tigon::cuda
