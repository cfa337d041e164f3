// Fused linear cross-entropy on CUDA: per chunk of rows, cuBLAS GEMMs (T in, float32 compute)
// around the cross-entropy row kernel, which writes the logits' gradient over the chunk logits.
// Everything on the caller's stream inside the caller's workspace; no host synchronization.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/dispatch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/launch.cuh"
#include "cuda/cross_entropy/steps.h"
#include "math/float_types.h"
#include "ops/fused_linear_cross_entropy_args.h"
#include "tigon/error.h"

namespace tigon::cuda {
namespace {

using detail::FlceArgs;

constexpr std::size_t kCublasWorkspace = std::size_t{32} << 20;  // Hopper's recommendation

void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(ErrorCode::kCudaError,
                std::string("cuBLAS error ") + cublasGetStatusString(status) + " (" + call + ")");
  }
}
#define TIGON_CUBLAS_CHECK(call) check_cublas((call), #call)

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kFloat16: return CUDA_R_16F;
    case DType::kBFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// A handle per thread and device when the caller does not lend one.
cublasHandle_t own_handle(int device) {
  constexpr int kMaxDevices = 64;
  thread_local cublasHandle_t handles[kMaxDevices] = {};
  if (device < 0 || device >= kMaxDevices) {
    throw Error(ErrorCode::kInvalidArgument, "fused_linear_cross_entropy: device out of range");
  }
  if (handles[device] == nullptr) TIGON_CUBLAS_CHECK(cublasCreate(&handles[device]));
  return handles[device];
}

std::size_t align(std::size_t b) { return (b + 255) / 256 * 256; }

struct Carved {
  void* logits;
  float* header;
  float* weights;
  detail::RowTerms row;  // [N] each
  float* dbias;
  float* dweight;  // rows [0, R) of a 16-bit dweight accumulated in float32 (dweight_fp32)
  void* blas;
  std::size_t blas_bytes;
};

std::size_t logits_bytes(const FlceArgs& a) {
  return align(static_cast<std::size_t>(a.chunk_rows * a.ce.vocab) * element_size(a.dtype));
}

Carved carve(const FlceArgs& a, int device, std::size_t* total) {
  auto* base = static_cast<unsigned char*>(a.workspace);
  std::size_t off = 0;
  Carved c{};
  auto take = [&](std::size_t bytes) {
    void* p = base ? base + off : nullptr;
    off += align(bytes);
    return p;
  };
  c.logits = take(logits_bytes(a));
  c.header = static_cast<float*>(take(sizeof(float) * cross_entropy::kHeaderFloats));
  c.weights = static_cast<float*>(take(a.ce.weight ? sizeof(float) * a.ce.vocab : 0));
  c.row.ce = static_cast<float*>(take(sizeof(float) * a.ce.rows));
  c.row.z = static_cast<float*>(take(sizeof(float) * a.ce.rows));
  c.row.hit = static_cast<float*>(take(sizeof(float) * a.ce.rows));
  // The CE slice kernel's results on GPUs without clusters (slice_pass.h).
  if (!device_properties(device).clusters) {
    c.row.slices =
        static_cast<float*>(take(sizeof(float) * a.ce.rows * detail::kSliceFloatsPerRow));
  }
  c.dbias = static_cast<float*>(take(a.grad_bias ? sizeof(float) * a.ce.vocab : 0));
  const std::size_t low_floats =
      a.dweight_fp32 ? detail::dweight_split(a.ce.vocab, a.hidden_size).low_floats() : 0;
  c.dweight = static_cast<float*>(take(sizeof(float) * low_floats));
  c.blas_bytes = a.needs_grad() || a.ce.rows > 0 ? kCublasWorkspace : 0;
  c.blas = take(c.blas_bytes);
  if (total) *total = off;
  return c;
}

template <typename T, typename B>
__global__ void add_bias_kernel(T* logits, std::int64_t rows, std::int64_t vocab, const B* bias) {
  const std::int64_t total = rows * vocab;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    logits[i] = math::from_float<T>(math::to_float(logits[i]) + math::to_float(bias[i % vocab]));
  }
}

// dbias[j] (+)= sum over the chunk's rows of dL[i, j]: one thread per column, rows in order.
template <typename T>
__global__ void column_sum_kernel(const T* dl, std::int64_t rows, std::int64_t vocab, float* acc,
                                  bool first) {
  for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; j < vocab;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float s = first ? 0.0f : acc[j];
    for (std::int64_t i = 0; i < rows; ++i) s += math::to_float(dl[i * vocab + j]);
    acc[j] = s;
  }
}

template <typename G>
__global__ void convert_kernel(const float* src, G* dst, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = math::from_float<G>(src[i]);
  }
}

std::int64_t blocks_for(std::int64_t n, int sm_count) {
  return std::max<std::int64_t>(1, std::min<std::int64_t>((n + 255) / 256, 16 * sm_count));
}

// Step (a) of fused_linear_cross_entropy_dweight.h: storage float j -> T element d + j. The
// float and T accesses alias the same bytes; the schedule keeps each launch's reads and writes
// disjoint, and the top block reads everything before the barrier.
constexpr int kTopThreads = 1024;
constexpr int kTopPerThread = static_cast<int>(detail::kNarrowingTopBlock / kTopThreads);

template <typename T>
__global__ void __launch_bounds__(kTopThreads)
    narrow_top_kernel(float* storage, std::int64_t lo, std::int64_t hi, std::int64_t d) {
  float v[kTopPerThread];
#pragma unroll
  for (int i = 0; i < kTopPerThread; ++i) {
    const std::int64_t j = lo + threadIdx.x + i * kTopThreads;
    if (j < hi) v[i] = storage[j];
  }
  __syncthreads();
  T* out = reinterpret_cast<T*>(storage);
#pragma unroll
  for (int i = 0; i < kTopPerThread; ++i) {
    const std::int64_t j = lo + threadIdx.x + i * kTopThreads;
    if (j < hi) out[d + j] = math::from_float<T>(v[i]);
  }
}

template <typename T>
__global__ void narrow_round_kernel(float* storage, std::int64_t lo, std::int64_t hi,
                                    std::int64_t d) {
  T* out = reinterpret_cast<T*>(storage);
  for (std::int64_t j = lo + blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       j < hi; j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[d + j] = math::from_float<T>(storage[j]);
  }
}

// dW rows [row0, row0 + count) (+)= dL[:, row0 : row0 + count]^T X into c (ldc = H).
// Column-major: dW^T[H, count] = X^T[H, rows] (dL^T)^T.
void gemm_dweight(cublasHandle_t handle, const FlceArgs& a, const void* x, const void* dl,
                  std::int64_t rows, std::int64_t row0, std::int64_t count, const float* beta,
                  void* c, cudaDataType_t c_type) {
  if (count == 0) return;
  const cudaDataType_t t = cuda_type(a.dtype);
  const float one = 1.0f;
  const void* dl_cols = static_cast<const unsigned char*>(dl) + row0 * element_size(a.dtype);
  TIGON_CUBLAS_CHECK(cublasGemmEx(
      handle, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(a.hidden_size), static_cast<int>(count),
      static_cast<int>(rows), &one, x, t, static_cast<int>(a.hidden_row_stride), dl_cols, t,
      static_cast<int>(a.ce.vocab), beta, c, c_type, static_cast<int>(a.hidden_size),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Steps (a) and (b): the float32 accumulators (workspace rows [0, R), storage rows [R, V)) to
// the gradient in T, in place.
template <typename T>
void finish_dweight(const detail::DweightSplit& split, const float* low, void* grad, int sm_count,
                    cudaStream_t s) {
  auto* storage = static_cast<float*>(grad);
  const std::int64_t d = split.dst_offset;
  detail::for_each_narrowing_step(
      split, detail::kNarrowingTopBlock,
      [&](std::int64_t lo, std::int64_t hi) {
        launch_kernel(narrow_top_kernel<T>, 1, dim3(kTopThreads), 0, 1, s, storage, lo, hi, d);
      },
      [&](std::int64_t lo, std::int64_t hi) {
        launch_kernel(narrow_round_kernel<T>, blocks_for(hi - lo, sm_count), dim3(256), 0, 1, s,
                      storage, lo, hi, d);
      });
  launch_kernel(convert_kernel<T>, blocks_for(d, sm_count), dim3(256), 0, 1, s, low,
                static_cast<T*>(grad), d);
}

}  // namespace

std::size_t fused_linear_cross_entropy_workspace_size(const FlceArgs& a, int device) {
  std::size_t total = 0;
  carve(a, device, &total);
  return total;
}

void fused_linear_cross_entropy(const FlceArgs& a, int device, void* stream_ptr) {
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream_ptr);
  const Carved w = carve(a, device, nullptr);
  const std::int64_t n = a.ce.rows, v = a.ce.vocab, h = a.hidden_size;
  const DeviceProperties& info = device_properties(device);
  cublasHandle_t handle =
      a.cublas_handle ? static_cast<cublasHandle_t>(a.cublas_handle) : own_handle(device);
  TIGON_CUBLAS_CHECK(cublasSetStream(handle, s));
  if (w.blas_bytes) TIGON_CUBLAS_CHECK(cublasSetWorkspace(handle, w.blas, w.blas_bytes));
  const cudaDataType_t t = cuda_type(a.dtype);
  const float one = 1.0f, zero = 0.0f;
  const detail::DweightSplit split = detail::dweight_split(v, h);

  cross_entropy::prepare(a.ce, w.header, w.weights, s);
  if (n == 0 && a.grad_weight) {
    TIGON_CUDA_CHECK(
        cudaMemsetAsync(a.grad_weight, 0, element_size(a.grad_weight_dtype) * v * h, s));
  }
  if (n == 0 && a.grad_bias) TIGON_CUDA_CHECK(cudaMemsetAsync(w.dbias, 0, sizeof(float) * v, s));

  const std::size_t elem = element_size(a.dtype);
  for (std::int64_t r0 = 0; r0 < n; r0 += a.chunk_rows) {
    const std::int64_t rows = std::min(a.chunk_rows, n - r0);
    const void* x = static_cast<const unsigned char*>(a.hidden) + r0 * a.hidden_row_stride * elem;
    // Row-major L[rows, V] = X W^T is column-major L^T[V, rows] = W^T(op T of col-major [H, V])
    // X^T.
    TIGON_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(v),
                                    static_cast<int>(rows), static_cast<int>(h), &one, a.weight, t,
                                    static_cast<int>(h), x, t,
                                    static_cast<int>(a.hidden_row_stride), &zero, w.logits, t,
                                    static_cast<int>(v), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (a.bias) {
      detail::dispatch_dtype(a.dtype, [&](auto tt) {
        detail::dispatch_dtype(a.bias_dtype, [&](auto bt) {
          using T = typename decltype(tt)::type;
          using B = typename decltype(bt)::type;
          launch_kernel(add_bias_kernel<T, B>, blocks_for(rows * v, info.sm_count), dim3(256), 0, 1,
                        s, static_cast<T*>(w.logits), rows, v, static_cast<const B*>(a.bias));
        });
      });
    }
    const detail::CrossEntropyArgs c = detail::chunk_args(a, r0, rows, w.logits);
    cross_entropy::forward_rows(c, w.header, w.weights, w.row.offset(r0), false, device, s);
    if (!a.needs_grad()) continue;
    if (a.grad_hidden) {
      // dX[rows, H] = dL W: column-major dX^T[H, rows] = W^T[H, V] dL^T[V, rows].
      void* dx = static_cast<unsigned char*>(a.grad_hidden) + r0 * h * elem;
      TIGON_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(h),
                                      static_cast<int>(rows), static_cast<int>(v), &one, a.weight,
                                      t, static_cast<int>(h), w.logits, t, static_cast<int>(v),
                                      &zero, dx, t, static_cast<int>(h), CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
    }
    if (a.grad_weight) {  // dW[V, H] (+)= dL^T X
      const float* beta = r0 == 0 ? &zero : &one;
      if (a.split_dweight()) {  // float32 rows [0, R) and [R, V) (..._dweight.h)
        auto* g = static_cast<float*>(a.grad_weight);
        float* low = a.dweight_fp32 ? w.dweight : g;
        float* high = a.dweight_fp32 ? g : g + split.dst_offset;
        gemm_dweight(handle, a, x, w.logits, rows, 0, split.low_rows, beta, low, CUDA_R_32F);
        gemm_dweight(handle, a, x, w.logits, rows, split.low_rows, v - split.low_rows, beta, high,
                     CUDA_R_32F);
      } else {
        gemm_dweight(handle, a, x, w.logits, rows, 0, v, beta, a.grad_weight,
                     cuda_type(a.grad_weight_dtype));
      }
    }
    if (a.grad_bias) {
      detail::dispatch_dtype(a.dtype, [&](auto tt) {
        using T = typename decltype(tt)::type;
        launch_kernel(column_sum_kernel<T>, blocks_for(v, info.sm_count), dim3(256), 0, 1, s,
                      static_cast<const T*>(w.logits), rows, v, w.dbias, r0 == 0);
      });
    }
  }
  if (a.dweight_fp32 && n > 0) {
    detail::dispatch_dtype(a.grad_weight_dtype, [&](auto gt) {
      finish_dweight<typename decltype(gt)::type>(split, w.dweight, a.grad_weight, info.sm_count,
                                                  s);
    });
  }
  if (a.grad_bias) {
    detail::dispatch_dtype(a.grad_bias_dtype, [&](auto gt) {
      using G = typename decltype(gt)::type;
      launch_kernel(convert_kernel<G>, blocks_for(v, info.sm_count), dim3(256), 0, 1, s,
                    static_cast<const float*>(w.dbias), static_cast<G*>(a.grad_bias), v);
    });
  }
  if (a.ce.loss && a.ce.params.reduction != Reduction::kNone) {  // not in a backward
    cross_entropy::finish(a.ce, w.header, w.row, false, device, s);
  }
}

}  // namespace tigon::cuda
