// LayerNorm CUDA backward: dx and the dW/dB partial rows (bwd_kernels.cuh), then each wanted
// gradient's partial rows added in order and rounded (RMSNorm's dw_finish.cuh), all on the
// caller's stream. Never allocates and never synchronizes (CUDA graphs).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/dispatch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/launch.cuh"
#include "cuda/common/pack_fit.h"
#include "cuda/layer_norm/bwd_kernels.cuh"
#include "cuda/layer_norm/entry.h"
#include "cuda/layer_norm/layout.h"
#include "cuda/rms_norm/dw_finish.cuh"
#include "ops/layer_norm_args.h"
#include "tigon/error.h"

namespace tigon::cuda {
namespace layer_norm {
namespace {

template <typename X, typename W, int P>
bool bwd_vectorizable(const detail::LayerNormBwdArgs& a) {
  return strides_fit(a.rows, a.hidden, P, {a.dy_row_stride, a.x_row_stride, a.dx_row_stride}) &&
         aligned(a.dy, kPackAlignment<X, P>) && aligned(a.x, kPackAlignment<X, P>) &&
         aligned(a.dx, kPackAlignment<X, P>) &&
         (a.weight == nullptr || aligned(a.weight, kPackAlignment<W, P>));
}

float* dw_partials(const detail::LayerNormBwdArgs& a) {
  return a.dw != nullptr ? static_cast<float*>(a.workspace) : nullptr;
}

float* db_partials(const detail::LayerNormBwdArgs& a) {
  if (a.db == nullptr) return nullptr;
  const std::int64_t skip = a.dw != nullptr ? dw_groups(a.rows, a.hidden).groups * a.hidden : 0;
  return static_cast<float*>(a.workspace) + skip;
}

template <typename X, typename W, int P>
void launch_bwd(const detail::LayerNormBwdArgs& a, Forced forced, cudaStream_t stream) {
  const BwdConfig c = forced == Forced::kStreaming ? streaming_bwd_config(a.rows, a.hidden, P)
                                                   : bwd_config(a.rows, a.hidden, P);
  BwdParams p;
  p.dy = a.dy;
  p.dy_row_stride = a.dy_row_stride;
  p.x = a.x;
  p.x_row_stride = a.x_row_stride;
  p.weight = a.weight;
  p.mean = a.mean;
  p.rstd = a.rstd;
  p.dx = a.dx;
  p.dx_row_stride = a.dx_row_stride;
  p.dw_partials = dw_partials(a);
  p.db_partials = db_partials(a);
  p.rows = a.rows;
  p.hidden = a.hidden;
  p.groups = c.groups;
  p.split = c.split;
  const std::int64_t grid = std::min(c.groups.groups, kMaxGridBlocks);
  if (c.kernel == BwdKernel::kStreaming) {
    launch_kernel(layer_norm_bwd_streaming_kernel<X, W, P>, grid, dim3(kStreamThreads), 0, 1,
                  stream, p);
    return;
  }
  // Row slots share a block only at one pack a thread (the slots' sums meet in shared memory).
  if (rows_per_block(c.split) > 1 && c.packs_per_thread != 1) {
    throw Error(ErrorCode::kInvalidArgument, "tigon::layer_norm (CUDA): no kernel for this config");
  }
  const dim3 block(c.split.block_threads);
  switch (c.packs_per_thread) {
    case 1:
      launch_kernel(layer_norm_bwd_rows_kernel<X, W, P, 1>, grid, block, 0, 1, stream, p);
      return;
    case 2:
      launch_kernel(layer_norm_bwd_rows_kernel<X, W, P, 2>, grid, block, 0, 1, stream, p);
      return;
    case 4:
      launch_kernel(layer_norm_bwd_rows_kernel<X, W, P, 4>, grid, block, 0, 1, stream, p);
      return;
    default: break;
  }
  throw Error(ErrorCode::kInvalidArgument, "tigon::layer_norm (CUDA): no kernel for this config");
}

// Adds the partial rows of one gradient in order and rounds to T, launched right behind the kernel
// before it as its programmatic dependent where the device allows.
template <typename T>
void finish(const float* partials, std::int64_t groups, std::int64_t hidden, T* out, int device,
            cudaStream_t stream) {
  const rms_norm::FinishConfig c = rms_norm::finish_config(hidden);
  const std::int64_t tiles = std::min(ceil_div(hidden, c.columns), kMaxGridBlocks);
  const bool vector = c.vector && hidden % 4 == 0 && aligned(partials, 16);
  const auto launch = [&]<int kLanes>() {
    launch_dependent_kernel(rms_norm::rms_norm_dw_finish_kernel<T, kLanes>, tiles,
                            dim3(c.columns / kLanes, rms_norm::kFinishThreads / c.columns), 0, 1,
                            dependent_launch_available(device), stream, partials, groups, hidden,
                            out);
  };
  if (vector) {
    launch.template operator()<4>();
  } else {
    launch.template operator()<1>();
  }
}

// A parameter's storage type: float32 or X (the validation layer sets X when absent).
template <typename X, typename F>
void dispatch_parameter(DType dtype, F&& f) {
  if (dtype == DType::kFloat32) {
    f(detail::TypeTag<float>{});
  } else {
    f(detail::TypeTag<X>{});
  }
}

}  // namespace

void bwd_forced(const detail::LayerNormBwdArgs& a, Forced forced, int device, void* stream) {
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.rows == 0) {  // no rows: dW and dB are sums of nothing
    if (a.dw != nullptr) {
      TIGON_CUDA_CHECK(cudaMemsetAsync(a.dw, 0, element_size(a.weight_dtype) * a.hidden, s));
    }
    if (a.db != nullptr) {
      TIGON_CUDA_CHECK(cudaMemsetAsync(a.db, 0, element_size(a.db_dtype) * a.hidden, s));
    }
    return;
  }
  detail::dispatch_dtype(a.x_dtype, [&](auto x_tag) {
    using X = typename decltype(x_tag)::type;
    dispatch_parameter<X>(a.weight_dtype, [&](auto w_tag) {
      using W = typename decltype(w_tag)::type;
      constexpr int kVec = static_cast<int>(16 / sizeof(X));
      if (bwd_vectorizable<X, W, kVec>(a)) {
        launch_bwd<X, W, kVec>(a, forced, s);
      } else {
        launch_bwd<X, W, 1>(a, forced, s);
      }
      const std::int64_t groups = dw_groups(a.rows, a.hidden).groups;
      if (a.dw != nullptr) {
        finish<W>(dw_partials(a), groups, a.hidden, static_cast<W*>(a.dw), device, s);
      }
      if (a.db != nullptr) {
        dispatch_parameter<X>(a.db_dtype, [&](auto db_tag) {
          using DB = typename decltype(db_tag)::type;
          finish<DB>(db_partials(a), groups, a.hidden, static_cast<DB*>(a.db), device, s);
        });
      }
    });
  });
}

}  // namespace layer_norm

std::size_t layer_norm_bwd_workspace_size(std::int64_t rows, std::int64_t hidden, DType,
                                          bool wants_dw, bool wants_db, int) {
  return sizeof(float) *
         static_cast<std::size_t>(layer_norm::partial_floats(rows, hidden, wants_dw, wants_db));
}

void layer_norm_bwd(const detail::LayerNormBwdArgs& a, int device, void* stream) {
  layer_norm::bwd_forced(a, layer_norm::Forced::kNone, device, stream);
}

}  // namespace tigon::cuda
