// The LayerNorm CUDA entry points with a kernel choice the tests can force: every config the
// launch functions (layout.h) can return runs in the tests, the streaming kernels also on rows
// short enough for the register kernels (then within the CPU tolerance, their sums having
// another order).
#pragma once

#include "ops/layer_norm_args.h"

namespace tigon::cuda::layer_norm {

enum class Forced { kNone, kStreaming };

// As tigon::cuda::layer_norm_fwd/_bwd, with kStreaming: the streaming kernels whatever the shape.
void fwd_forced(const detail::LayerNormFwdArgs& a, Forced forced, int device, void* stream);
void bwd_forced(const detail::LayerNormBwdArgs& a, Forced forced, int device, void* stream);

}  // namespace tigon::cuda::layer_norm
