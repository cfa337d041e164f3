// Host side of the gated RMSNorm forward: picks the pack width (16 bytes where every pointer and
// row stride allows, else one element), takes the config for the shape, launches.
#include <algorithm>

#include "core/dispatch.h"
#include "cuda/common/launch.cuh"
#include "cuda/common/pack_fit.h"
#include "cuda/gated_rms_norm/fwd_kernels.cuh"
#include "cuda/gated_rms_norm/launch.h"
#include "cuda/gated_rms_norm/layout.cuh"
#include "cuda/rms_norm/launch.cuh"

namespace tigon::cuda::gated_rms_norm {
namespace {

template <typename X, typename W, int P>
bool vectorizable(const detail::GatedRmsNormFwdArgs& a) {
  return strides_fit(a.rows, a.hidden, P, {a.x_row_stride, a.gate_row_stride, a.y_row_stride}) &&
         aligned(a.x, kPackAlignment<X, P>) && aligned(a.gate, kPackAlignment<X, P>) &&
         aligned(a.y, kPackAlignment<X, P>) && aligned(a.weight, kPackAlignment<W, P>);
}

template <typename X, typename W, int P>
void launch(const detail::GatedRmsNormFwdArgs& a, cudaStream_t stream) {
  const Config c = config(a.rows, a.hidden, P, static_cast<int>(sizeof(X)));
  FwdParams p;
  p.x = a.x;
  p.x_row_stride = a.x_row_stride;
  p.gate = a.gate;
  p.gate_row_stride = a.gate_row_stride;
  p.weight = a.weight;
  p.y = a.y;
  p.y_row_stride = a.y_row_stride;
  p.rstd = a.rstd;
  p.rows = a.rows;
  p.hidden = a.hidden;
  p.eps = a.params.eps;
  p.split = c.split;
  if (c.kernel == Kernel::kTwoPass) {
    launch_kernel(gated_rms_norm_fwd_two_pass_kernel<X, W, P>, std::min(a.rows, kMaxGridBlocks),
                  dim3(kTwoPassThreads), 0, 1, stream, p);
    return;
  }
  const std::int64_t blocks = rms_norm::ceil_div(a.rows, rms_norm::rows_per_block(c.split));
  launch_kernel(gated_rms_norm_fwd_kernel<X, W, P>, std::min(blocks, kMaxGridBlocks),
                dim3(c.split.block_threads), 0, 1, stream, p);
}

}  // namespace

void launch_fwd(const detail::GatedRmsNormFwdArgs& a, cudaStream_t stream) {
  detail::dispatch_dtype(a.x_dtype, [&](auto x_tag) {
    detail::dispatch_dtype(a.weight_dtype, [&](auto w_tag) {
      using X = typename decltype(x_tag)::type;
      using W = typename decltype(w_tag)::type;
      constexpr int kVec = static_cast<int>(16 / sizeof(X));
      if (vectorizable<X, W, kVec>(a)) {
        launch<X, W, kVec>(a, stream);
      } else {
        launch<X, W, 1>(a, stream);
      }
    });
  });
}

}  // namespace tigon::cuda::gated_rms_norm
