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
  float* row_ce;
  float* row_z;
  float* dbias;
  void* blas;
  std::size_t blas_bytes;
};

std::size_t logits_bytes(const FlceArgs& a) {
  return align(static_cast<std::size_t>(a.chunk_rows * a.ce.vocab) * element_size(a.dtype));
}

Carved carve(const FlceArgs& a, std::size_t* total) {
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
  c.row_ce = static_cast<float*>(take(sizeof(float) * a.ce.rows));
  c.row_z = static_cast<float*>(take(sizeof(float) * a.ce.rows));
  c.dbias = static_cast<float*>(take(a.grad_bias ? sizeof(float) * a.ce.vocab : 0));
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

}  // namespace

std::size_t fused_linear_cross_entropy_workspace_size(const FlceArgs& a) {
  std::size_t total = 0;
  carve(a, &total);
  return total;
}

void fused_linear_cross_entropy(const FlceArgs& a, int device, void* stream_ptr) {
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream_ptr);
  const Carved w = carve(a, nullptr);
  const std::int64_t n = a.ce.rows, v = a.ce.vocab, h = a.hidden_size;
  const DeviceInfo info = device_info(device);
  cublasHandle_t handle =
      a.cublas_handle ? static_cast<cublasHandle_t>(a.cublas_handle) : own_handle(device);
  TIGON_CUBLAS_CHECK(cublasSetStream(handle, s));
  if (w.blas_bytes) TIGON_CUBLAS_CHECK(cublasSetWorkspace(handle, w.blas, w.blas_bytes));
  const cudaDataType_t t = cuda_type(a.dtype);
  const float one = 1.0f, zero = 0.0f;

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
    detail::CrossEntropyArgs c = a.ce;
    c.rows = rows;
    c.logits = w.logits;
    c.logits_row_stride = v;
    c.target = a.ce.target + r0;
    c.grad = a.needs_grad() ? w.logits : nullptr;
    c.grad_row_stride = v;
    c.lse = nullptr;
    if (c.params.reduction == Reduction::kNone) {
      c.loss = a.ce.loss + r0;
      c.z_loss = a.ce.z_loss ? a.ce.z_loss + r0 : nullptr;
    }
    cross_entropy::forward_rows(c, w.header, w.weights, w.row_ce + r0, w.row_z + r0, device, s);
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
    if (a.grad_weight) {
      // dW[V, H] (+)= dL^T X: column-major dW^T[H, V] = X^T[H, rows] (dL^T)^T.
      const float* beta = r0 == 0 ? &zero : &one;
      TIGON_CUBLAS_CHECK(cublasGemmEx(
          handle, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(h), static_cast<int>(v),
          static_cast<int>(rows), &one, x, t, static_cast<int>(a.hidden_row_stride), w.logits, t,
          static_cast<int>(v), beta, a.grad_weight, cuda_type(a.grad_weight_dtype),
          static_cast<int>(h), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    if (a.grad_bias) {
      detail::dispatch_dtype(a.dtype, [&](auto tt) {
        using T = typename decltype(tt)::type;
        launch_kernel(column_sum_kernel<T>, blocks_for(v, info.sm_count), dim3(256), 0, 1, s,
                      static_cast<const T*>(w.logits), rows, v, w.dbias, r0 == 0);
      });
    }
  }
  if (a.grad_bias) {
    detail::dispatch_dtype(a.grad_bias_dtype, [&](auto gt) {
      using G = typename decltype(gt)::type;
      launch_kernel(convert_kernel<G>, blocks_for(v, info.sm_count), dim3(256), 0, 1, s,
                    static_cast<const float*>(w.dbias), static_cast<G*>(a.grad_bias), v);
    });
  }
  if (a.ce.params.reduction != Reduction::kNone) {
    cross_entropy::finish(w.header, w.row_ce, w.row_z, n, a.ce.loss, a.ce.z_loss, s);
  }
}

}  // namespace tigon::cuda
