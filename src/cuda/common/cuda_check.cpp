#include "cuda/common/cuda_check.h"

#include <string>

#include "tigon/error.h"

namespace tigon::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // reset the non-sticky error so the next call starts clean
  std::string message = "tigon: CUDA error ";
  message += cudaGetErrorName(status);
  message += ": ";
  message += cudaGetErrorString(status);
  message += " (";
  message += call;
  message += " at ";
  message += file;
  message += ':';
  message += std::to_string(line);
  message += ')';
  throw Error(ErrorCode::kCudaError, message);
}

DeviceGuard::DeviceGuard(int device) {
  TIGON_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    TIGON_CUDA_CHECK(cudaSetDevice(device));
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  // A destructor must not throw; restoring a device that was valid a moment ago does not fail.
  if (changed_) (void)cudaSetDevice(previous_);
}

}  // namespace tigon::cuda
