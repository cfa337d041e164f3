// Host side of the dW finishing kernel (dw_finish.cuh): its tile and vector width from the row
// length and the partials' alignment. Shared by every norm whose column gradients are float32
// partial rows (RMSNorm's and gated RMSNorm's dW, DyT's dgamma and dbeta).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/dispatch.h"
#include "cuda/common/launch.cuh"
#include "cuda/rms_norm/dw_finish.cuh"
#include "cuda/rms_norm/layout.cuh"

namespace tigon::cuda::rms_norm {

// dw[j] = round_W(sum over the `groups` partial rows of partials[g * hidden + j]), in a fixed
// order that depends on (groups, hidden) only. `dependent`: a programmatic dependent launch
// (launch.cuh says when that is allowed).
template <typename W>
void launch_dw_finish(const float* partials, std::int64_t groups, std::int64_t hidden, W* dw,
                      bool dependent, cudaStream_t stream) {
  const FinishConfig c = finish_config(hidden);
  const int columns = c.columns;
  const std::int64_t tiles = std::min(ceil_div(hidden, columns), kMaxGridBlocks);
  const bool vector =
      c.vector && hidden % 4 == 0 && reinterpret_cast<std::uintptr_t>(partials) % 16 == 0;
  const auto launch = [&]<int kLanes>() {
    launch_dependent_kernel(rms_norm_dw_finish_kernel<W, kLanes>, tiles,
                            dim3(columns / kLanes, kFinishThreads / columns), 0, 1, dependent,
                            stream, partials, groups, hidden, dw);
  };
  if (vector) {
    launch.template operator()<4>();
  } else {
    launch.template operator()<1>();
  }
}

// launch_dw_finish for a weight of run-time dtype, launched right behind the partials kernel, as
// its programmatic dependent where the device allows: its launch overlaps the partials kernel's
// tail, and it waits for it before reading.
inline void finish_dw_partials(const float* partials, std::int64_t groups, std::int64_t hidden,
                               DType weight_dtype, void* dw, int device, cudaStream_t stream) {
  detail::dispatch_dtype(weight_dtype, [&](auto w_tag) {
    using W = typename decltype(w_tag)::type;
    launch_dw_finish(partials, groups, hidden, static_cast<W*>(dw),
                     dependent_launch_available(device), stream);
  });
}

}  // namespace tigon::cuda::rms_norm
