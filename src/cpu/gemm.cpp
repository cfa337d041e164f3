#include "cpu/gemm.h"

#include <climits>

#include "cpu/lane_sum.h"
#include "cpu/parallel.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

#if defined(TIGON_WITH_BLAS)
extern "C" {
// CBLAS (declared here: cblas.h lives in a vendor-specific directory). Enums as ints.
void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);
int openblas_get_parallel(void) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
void openblas_set_num_threads(int) __attribute__((weak));
}
#endif

namespace tigon::cpu {
namespace {

#if defined(TIGON_WITH_BLAS)
// An OpenBLAS with its own pthreads is held to the threads the caller's OpenMP would use (torch's
// set_num_threads / OMP_NUM_THREADS), one without OpenMP to one thread; the OpenMP build
// (libopenblas0-openmp) already runs on the caller's threads; other BLAS follow their own settings.
void match_blas_threads() {
  if (openblas_get_parallel == nullptr || openblas_set_num_threads == nullptr ||
      openblas_get_num_threads == nullptr || openblas_get_parallel() != 1)
    return;
#if defined(_OPENMP)
  const int want = omp_get_max_threads();
#else
  const int want = 1;
#endif
  if (openblas_get_num_threads() != want) openblas_set_num_threads(want);
}

bool fits_int(std::int64_t v) { return v >= 0 && v <= INT_MAX; }
#endif

}  // namespace

void gemm_f32(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
              std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
              std::int64_t ldc) {
  if (m == 0 || n == 0) return;
#if defined(TIGON_WITH_BLAS)
  if (k > 0 && fits_int(m) && fits_int(n) && fits_int(k) && fits_int(lda) && fits_int(ldb) &&
      fits_int(ldc)) {
    match_blas_threads();
    constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;  // CBLAS_ORDER, _TRANSPOSE
    cblas_sgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
    return;
  }
#endif
  parallel_for(m, n * k, [&](std::int64_t i) {
    for (std::int64_t j = 0; j < n; ++j) {
      const float dot = lane_sum(k, [&](std::int64_t l) {
        return (ta ? a[l * lda + i] : a[i * lda + l]) * (tb ? b[j * ldb + l] : b[l * ldb + j]);
      });
      c[i * ldc + j] = beta == 0.0f ? dot : c[i * ldc + j] + dot;
    }
  });
}

}  // namespace tigon::cpu
