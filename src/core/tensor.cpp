#include "tigon/tensor.h"
#include "tigon/backends.h"

namespace tigon {

TensorView TensorView::contiguous(void* data, DType dtype,
                                  std::initializer_list<std::int64_t> sizes, Device device) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = static_cast<int>(sizes.size());
  int d = 0;
  for (std::int64_t s : sizes) t.sizes[d++] = s;
  std::int64_t stride = 1;
  for (d = t.ndim - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.sizes[d];
  }
  return t;
}

std::int64_t TensorView::numel() const noexcept {
  std::int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= sizes[d];
  return n;
}

bool has_cuda_backend() noexcept {
#if defined(TIGON_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

const char* version() noexcept { return TIGON_VERSION_STRING; }

}  // namespace tigon
