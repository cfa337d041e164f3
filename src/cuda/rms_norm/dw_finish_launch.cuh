// Host side of the dW finishing kernel (dw_finish.cuh), shared by every op whose dW comes as
// float32 partial rows per dW group (layout.cuh's DwGroups): RMSNorm, gated RMSNorm.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/dispatch.h"
#include "cuda/common/launch.cuh"
#include "cuda/rms_norm/dw_finish.cuh"
#include "cuda/rms_norm/layout.cuh"

namespace tigon::cuda::rms_norm {

// dw = round_W(sum over the `groups` partial rows of `partials` ([groups, hidden] float32)), rows
// added in order. Launched right behind the partials kernel, as its programmatic dependent where
// the device allows: its launch overlaps the partials kernel's tail, and it waits for it before
// reading.
inline void finish_dw_partials(const float* partials, std::int64_t groups, std::int64_t hidden,
                               DType weight_dtype, void* dw, int device, cudaStream_t stream) {
  const FinishConfig c = finish_config(hidden);
  const int columns = c.columns;
  const std::int64_t tiles = std::min(ceil_div(hidden, columns), kMaxGridBlocks);
  const bool vector =
      c.vector && hidden % 4 == 0 && reinterpret_cast<std::uintptr_t>(partials) % 16 == 0;
  detail::dispatch_dtype(weight_dtype, [&](auto w_tag) {
    using W = typename decltype(w_tag)::type;
    const auto launch = [&]<int kLanes>() {
      launch_dependent_kernel(rms_norm_dw_finish_kernel<W, kLanes>, tiles,
                              dim3(columns / kLanes, kFinishThreads / columns), 0, 1,
                              dependent_launch_available(device), stream, partials, groups, hidden,
                              static_cast<W*>(dw));
    };
    if (vector) {
      launch.template operator()<4>();
    } else {
      launch.template operator()<1>();
    }
  });
}

}  // namespace tigon::cuda::rms_norm
