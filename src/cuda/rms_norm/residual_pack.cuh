// fused_add_rms_norm's residual add on packs (math::ResidualAdd): the forward's h = x + residual,
// stored to h and kept in registers as the row the norm reads, and the backward's dh + the norm's
// dx. Used by the kernels' kResidual instantiations only; plain RMSNorm never includes this code.
#pragma once

#include "cuda/common/vector_access.cuh"
#include "math/residual_add.h"

namespace tigon::cuda::rms_norm {

// h = x + residual for one pack, returned in registers and, with `store`, written to h_out.
template <typename X, int P>
__device__ __forceinline__ Pack<X, P> add_residual_pack(const Pack<X, P>& x,
                                                        const Pack<X, P>& residual, X* h_out,
                                                        bool store) {
  X out[P];
#pragma unroll
  for (int i = 0; i < P; ++i) out[i] = math::ResidualAdd<X>::sum(x.at(i), residual.at(i));
  Pack<X, P> h;
  vector_detail::words_of<X, P>(out, h.words);
  if (store) store_words_global<X, P>(h_out, h.words);
  return h;
}

}  // namespace tigon::cuda::rms_norm
