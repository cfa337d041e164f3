// Float32 matrix products for the CPU backend (fused linear cross-entropy, the MoE experts):
// through the BLAS that CMake found (cblas_sgemm; cmake/blas.cmake), else plain parallel loops
// (lane_sum). Deterministic for a given BLAS build, CPU and thread count.
#pragma once

#include <cstdint>

namespace tigon::cpu {

// Row-major C[m, n] = op(A) op(B) + beta * C (op(X) = X^T when transposed); beta is 0 or 1.
void gemm_f32(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
              const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
              float* c, std::int64_t ldc);

}  // namespace tigon::cpu
