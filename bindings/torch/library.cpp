// The tigon torch library: build information. Each op registers its schemas in its own
// TORCH_LIBRARY_FRAGMENT (rms_norm.cpp, ...), next to its implementation.
#include <torch/library.h>

#include <string>

#include "tigon/backends.h"

namespace {

// True when both the tigon core and these bindings were compiled with CUDA kernels.
bool has_cuda_kernels() {
#if defined(TIGON_TORCH_WITH_CUDA)
  return tigon::has_cuda_backend();
#else
  return false;
#endif
}

std::string version() { return tigon::version(); }

}  // namespace

TORCH_LIBRARY(tigon, m) {
  m.def("has_cuda_kernels() -> bool", &has_cuda_kernels);
  m.def("version() -> str", &version);
}
