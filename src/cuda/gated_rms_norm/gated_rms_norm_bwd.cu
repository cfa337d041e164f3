// Host side of the gated RMSNorm backward: pack width as the forward's (the workspace's alignment
// too, for the 16-byte dW partial stores), the config for the shape, dx / dgate / dW partials.
#include <algorithm>

#include "core/dispatch.h"
#include "cuda/common/launch.cuh"
#include "cuda/common/pack_fit.h"
#include "cuda/gated_rms_norm/bwd_kernels.cuh"
#include "cuda/gated_rms_norm/launch.h"
#include "cuda/gated_rms_norm/layout.cuh"
#include "cuda/rms_norm/launch.cuh"

namespace tigon::cuda::gated_rms_norm {
namespace {

template <typename X, typename W, int P>
bool vectorizable(const detail::GatedRmsNormBwdArgs& a) {
  return strides_fit(a.rows, a.hidden, P,
                     {a.dy_row_stride, a.x_row_stride, a.gate_row_stride, a.dx_row_stride,
                      a.dgate_row_stride}) &&
         aligned(a.dy, kPackAlignment<X, P>) && aligned(a.x, kPackAlignment<X, P>) &&
         aligned(a.gate, kPackAlignment<X, P>) && aligned(a.dx, kPackAlignment<X, P>) &&
         aligned(a.dgate, kPackAlignment<X, P>) && aligned(a.weight, kPackAlignment<W, P>) &&
         aligned(a.workspace, kPackAlignment<float, P>);
}

template <typename X, typename W, int P>
void launch(const detail::GatedRmsNormBwdArgs& a, cudaStream_t stream) {
  using Norm = typename math::GatedRmsNorm<X, W>::Norm;
  const Config c = config(a.rows, a.hidden, P, static_cast<int>(sizeof(X)));
  BwdParams p;
  p.dy = a.dy;
  p.dy_row_stride = a.dy_row_stride;
  p.x = a.x;
  p.x_row_stride = a.x_row_stride;
  p.gate = a.gate;
  p.gate_row_stride = a.gate_row_stride;
  p.weight = a.weight;
  p.rstd = a.rstd;
  p.dx = a.dx;
  p.dx_row_stride = a.dx_row_stride;
  p.dgate = a.dgate;
  p.dgate_row_stride = a.dgate_row_stride;
  p.partials = static_cast<float*>(a.workspace);
  p.rows = a.rows;
  p.hidden = a.hidden;
  p.groups = c.groups;
  p.split = c.split;
  // One CTA per dW group: which rows a group sums never depends on the grid.
  if (c.kernel == Kernel::kTwoPass) {
    launch_kernel(gated_rms_norm_bwd_two_pass_kernel<X, W, P>, c.groups.groups,
                  dim3(kTwoPassThreads), 0, 1, stream, p);
    return;
  }
  launch_kernel(gated_rms_norm_bwd_kernel<X, W, P>, c.groups.groups, dim3(c.split.block_threads),
                sizeof(float) * rms_norm::dw_slot_floats<Norm, P>(c.split), 1, stream, p);
}

}  // namespace

void launch_bwd(const detail::GatedRmsNormBwdArgs& a, cudaStream_t stream) {
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
