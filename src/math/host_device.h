// Marks functions compiled by both g++ (CPU backend) and nvcc (CUDA backend).
#pragma once

#if defined(__CUDACC__)
#define TIGON_HD __host__ __device__ __forceinline__
#else
#define TIGON_HD inline
#endif
