// The exact SwiGLU / GeGLU reference kernels of glu_exact_reference.h. This file gets nvcc's
// default FMA contraction (no -fmad=false), like src/cuda/glu.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/glu/glu_fast.cuh"
#include "glu_exact_reference.h"
#include "math/float_types.h"
#include "math/glu.h"

namespace tigon::testing {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

constexpr int kBlock = 256;
int blocks(std::int64_t n) {
  return static_cast<int>(std::min<std::int64_t>((n + kBlock - 1) / kBlock, 65535));
}

template <GluActivation kAct, typename T>
__global__ void fwd_kernel(const T* a, const T* b, T* y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{kBlock} + threadIdx.x; i < n;
       i += std::int64_t{kBlock} * gridDim.x) {
    y[i] = math::Glu<kAct, T>::forward(math::to_float(a[i]), math::to_float(b[i]));
  }
}

template <GluActivation kAct, typename T>
__global__ void bwd_kernel(const T* dy, const T* a, const T* b, T* da, T* db, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{kBlock} + threadIdx.x; i < n;
       i += std::int64_t{kBlock} * gridDim.x) {
    const auto g = math::Glu<kAct, T>::backward(math::to_float(dy[i]), math::to_float(a[i]),
                                                math::to_float(b[i]));
    da[i] = g.da;
    db[i] = g.db;
  }
}

template <GluActivation kAct, typename T>
__global__ void undecided_kernel(const T* a, std::int64_t n, unsigned long long* count) {
  for (std::int64_t i = blockIdx.x * std::int64_t{kBlock} + threadIdx.x; i < n;
       i += std::int64_t{kBlock} * gridDim.x) {
    const float v = math::to_float(a[i]);
    const auto h = math::fast::gate_pair<kAct, T>(v, v);
    // A NaN gate (a NaN or -inf) makes a NaN product, which the kernels send to the exact path.
    const float g = math::fast::low_value<T>(h.word);
    if (h.undecided != 0 || g != g) atomicAdd(count, 1ull);
  }
}

template <typename F>
void dispatch(GluActivation act, DType t, F&& f) {
  auto with_type = [&](auto act_tag) {
    if (t == DType::kBFloat16) {
      f(act_tag, math::BFloat16{});
    } else if (t == DType::kFloat16) {
      f(act_tag, math::Half{});
    } else {
      f(act_tag, float{});
    }
  };
  if (act == GluActivation::kSilu) {
    with_type(std::integral_constant<GluActivation, GluActivation::kSilu>{});
  } else {
    with_type(std::integral_constant<GluActivation, GluActivation::kGeluTanh>{});
  }
}

}  // namespace

void exact_glu_fwd(GluActivation act, DType t, const void* a, const void* b, void* y,
                   std::int64_t n) {
  dispatch(act, t, [&](auto act_tag, auto type_tag) {
    using T = decltype(type_tag);
    fwd_kernel<decltype(act_tag)::value, T><<<blocks(n), kBlock>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), n);
  });
  check(cudaDeviceSynchronize(), "exact_glu_fwd");
}

void exact_glu_bwd(GluActivation act, DType t, const void* dy, const void* a, const void* b,
                   void* da, void* db, std::int64_t n) {
  dispatch(act, t, [&](auto act_tag, auto type_tag) {
    using T = decltype(type_tag);
    bwd_kernel<decltype(act_tag)::value, T><<<blocks(n), kBlock>>>(
        static_cast<const T*>(dy), static_cast<const T*>(a), static_cast<const T*>(b),
        static_cast<T*>(da), static_cast<T*>(db), n);
  });
  check(cudaDeviceSynchronize(), "exact_glu_bwd");
}

std::int64_t fast_gate_undecided(GluActivation act, DType t, const void* a, std::int64_t n) {
  unsigned long long* count = nullptr;
  check(cudaMalloc(&count, sizeof *count), "cudaMalloc");
  check(cudaMemset(count, 0, sizeof *count), "cudaMemset");
  dispatch(act, t, [&](auto act_tag, auto type_tag) {
    using T = decltype(type_tag);
    if constexpr (sizeof(T) == 2) {
      undecided_kernel<decltype(act_tag)::value, T>
          <<<blocks(n), kBlock>>>(static_cast<const T*>(a), n, count);
    }
  });
  unsigned long long host = 0;
  check(cudaMemcpy(&host, count, sizeof host, cudaMemcpyDeviceToHost), "download");
  check(cudaFree(count), "cudaFree");
  return static_cast<std::int64_t>(host);
}

}  // namespace tigon::testing
