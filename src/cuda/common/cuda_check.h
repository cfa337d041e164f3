// CUDA runtime errors become tigon::Error(kCudaError) naming the call, file and line; a guard makes
// the op's device current for the duration of a call and restores the caller's device afterwards.
// Plain C++ (no device code): included by the .cu launchers and by host-only .cpp files.
#pragma once

#include <cuda_runtime_api.h>

namespace tigon::cuda {

// Throws tigon::Error(ErrorCode::kCudaError, "...<error name>: <description> (<call> at
// file:line)"). Clears the runtime's last-error state first, so a failed launch does not resurface
// in a later check.
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line);

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, call, file, line);
}

// Makes `device` current and restores the previous current device on destruction.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace tigon::cuda

#define TIGON_CUDA_CHECK(call) ::tigon::cuda::check_cuda((call), #call, __FILE__, __LINE__)
