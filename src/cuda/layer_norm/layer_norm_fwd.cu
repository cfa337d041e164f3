// LayerNorm CUDA forward: picks the pack width (16 bytes when every pointer and row stride allow,
// else scalar) and the kernel (fwd_config), and launches on the caller's stream. Never allocates
// and never synchronizes, so the call can be captured in a CUDA graph.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/dispatch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/launch.cuh"
#include "cuda/common/pack_fit.h"
#include "cuda/layer_norm/entry.h"
#include "cuda/layer_norm/fwd_kernels.cuh"
#include "cuda/layer_norm/layout.h"
#include "ops/layer_norm_args.h"

namespace tigon::cuda {
namespace layer_norm {
namespace {

template <typename X, typename W, typename B, int P>
bool fwd_vectorizable(const detail::LayerNormFwdArgs& a) {
  return strides_fit(a.rows, a.hidden, P, {a.x_row_stride, a.y_row_stride}) &&
         aligned(a.x, kPackAlignment<X, P>) && aligned(a.y, kPackAlignment<X, P>) &&
         (a.weight == nullptr || aligned(a.weight, kPackAlignment<W, P>)) &&
         (a.bias == nullptr || aligned(a.bias, kPackAlignment<B, P>));
}

template <typename X, typename W, typename B, int P>
void launch_fwd(const detail::LayerNormFwdArgs& a, Forced forced, cudaStream_t stream) {
  const FwdConfig c = forced == Forced::kStreaming ? streaming_fwd_config(ceil_div(a.hidden, P))
                                                   : fwd_config(a.hidden, P);
  FwdParams p;
  p.x = a.x;
  p.x_row_stride = a.x_row_stride;
  p.weight = a.weight;
  p.bias = a.bias;
  p.y = a.y;
  p.y_row_stride = a.y_row_stride;
  p.mean = a.mean;
  p.rstd = a.rstd;
  p.rows = a.rows;
  p.hidden = a.hidden;
  p.eps = a.params.eps;
  p.split = c.split;
  if (c.kernel == FwdKernel::kStreaming) {
    launch_kernel(layer_norm_fwd_streaming_kernel<X, W, B, P>, std::min(a.rows, kMaxGridBlocks),
                  dim3(kStreamThreads), 0, 1, stream, p);
    return;
  }
  const std::int64_t units = ceil_div(a.rows, rows_per_block(c.split));
  launch_kernel(layer_norm_fwd_rows_kernel<X, W, B, P>, std::min(units, kMaxGridBlocks),
                dim3(c.split.block_threads), 0, 1, stream, p);
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

void fwd_forced(const detail::LayerNormFwdArgs& a, Forced forced, int device, void* stream) {
  if (a.rows == 0) return;
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  detail::dispatch_dtype(a.x_dtype, [&](auto x_tag) {
    using X = typename decltype(x_tag)::type;
    dispatch_parameter<X>(a.weight_dtype, [&](auto w_tag) {
      using W = typename decltype(w_tag)::type;
      dispatch_parameter<X>(a.bias_dtype, [&](auto b_tag) {
        using B = typename decltype(b_tag)::type;
        constexpr int kVec = static_cast<int>(16 / sizeof(X));
        if (fwd_vectorizable<X, W, B, kVec>(a)) {
          launch_fwd<X, W, B, kVec>(a, forced, s);
        } else {
          launch_fwd<X, W, B, 1>(a, forced, s);
        }
      });
    });
  });
}

}  // namespace layer_norm

void layer_norm_fwd(const detail::LayerNormFwdArgs& a, int device, void* stream) {
  layer_norm::fwd_forced(a, layer_norm::Forced::kNone, device, stream);
}

}  // namespace tigon::cuda
