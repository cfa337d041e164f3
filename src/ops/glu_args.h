// SwiGLU / GeGLU arguments after validation: rows of `width` elements, one row stride per tensor.
// The contract between the validation layer (src/ops/glu.cpp) and the backends, which may assume
// all of it holds. When every tensor is dense, the validation layer passes one row of R * N
// elements.
#pragma once

#include <cstdint>

#include "tigon/dtype.h"
#include "tigon/ops/glu.h"

namespace tigon::detail {

struct GluFwdArgs {
  GluActivation activation = GluActivation::kSilu;
  DType dtype = DType::kFloat32;  // of every tensor
  std::int64_t rows = 0;
  std::int64_t width = 0;
  const void* a = nullptr;
  std::int64_t a_row_stride = 0;
  const void* b = nullptr;
  std::int64_t b_row_stride = 0;
  void* y = nullptr;
  std::int64_t y_row_stride = 0;
  float gate_multiplier = 1.0f;  // finite; both 1: the plain op
  float down_multiplier = 1.0f;
  bool scaled() const { return gate_multiplier != 1.0f || down_multiplier != 1.0f; }
};

struct GluBwdArgs {
  GluActivation activation = GluActivation::kSilu;
  DType dtype = DType::kFloat32;
  std::int64_t rows = 0;
  std::int64_t width = 0;
  const void* dy = nullptr;
  std::int64_t dy_row_stride = 0;
  const void* a = nullptr;
  std::int64_t a_row_stride = 0;
  const void* b = nullptr;
  std::int64_t b_row_stride = 0;
  void* da = nullptr;  // may equal a (same row stride)
  std::int64_t da_row_stride = 0;
  void* db = nullptr;  // may equal b (same row stride)
  std::int64_t db_row_stride = 0;
  float gate_multiplier = 1.0f;
  float down_multiplier = 1.0f;
  bool scaled() const { return gate_multiplier != 1.0f || down_multiplier != 1.0f; }
};

}  // namespace tigon::detail

namespace tigon::cpu {
void glu_fwd(const detail::GluFwdArgs& args);
void glu_bwd(const detail::GluBwdArgs& args);
}  // namespace tigon::cpu

namespace tigon::cuda {
void glu_fwd(const detail::GluFwdArgs& args, int device, void* stream);
void glu_bwd(const detail::GluBwdArgs& args, int device, void* stream);
}  // namespace tigon::cuda
