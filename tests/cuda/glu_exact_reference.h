// A reference for the SwiGLU / GeGLU CUDA kernels, compiled in the test (glu_exact_reference.cu):
// math::Glu element by element on the device, with CUDA's expf / tanhf, IEEE division and nvcc's
// default FMA contraction, as src/cuda/glu compiles it, and none of the kernels' fast paths.
#pragma once

#include <cstdint>

#include "tigon/dtype.h"
#include "tigon/ops/glu.h"

namespace tigon::testing {

// Dense device arrays of n elements of dtype t; synchronous.
void exact_glu_fwd(GluActivation act, DType t, const void* a, const void* b, void* y,
                   std::int64_t n);
void exact_glu_bwd(GluActivation act, DType t, const void* dy, const void* a, const void* b,
                   void* da, void* db, std::int64_t n);

// How many of the n 16-bit values of a (device array, dtype t) the fast gate
// (cuda/glu/glu_fast.cuh) leaves undecided (including those out of its range): the exact path's
// share. Synchronous.
std::int64_t fast_gate_undecided(GluActivation act, DType t, const void* a, std::int64_t n);

}  // namespace tigon::testing
