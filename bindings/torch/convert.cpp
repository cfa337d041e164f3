#include "convert.h"

#include <c10/core/ScalarType.h>

namespace tigon::torch_binding {
namespace {

std::optional<DType> to_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::kFloat32;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kLong: return DType::kInt64;
    default: return std::nullopt;
  }
}

}  // namespace

// Messages are built by concatenation, not with iostreams (c10::str): formatting through an
// ostream is what crashed when a toolchain linked a second, static libstdc++ into this module.
std::string argument_message(std::string_view op, std::string_view arg, std::string_view expected,
                             std::string_view got) {
  std::string s = "tigon::";
  s.append(op).append(": argument '").append(arg).append("': expected ");
  s.append(expected).append(", got ").append(got);
  return s;
}

std::string int_list(c10::IntArrayRef values) {
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(values[i]);
  }
  return s + "]";
}

TensorView to_view(const at::Tensor& t, std::string_view op, std::string_view arg) {
  TORCH_CHECK_VALUE(t.defined(), argument_message(op, arg, "a defined tensor", "an undefined one"));
  TORCH_CHECK_VALUE(t.layout() == at::kStrided,
                    argument_message(op, arg, "a strided (dense) tensor",
                                     "a sparse or other non-strided layout"));
  const std::optional<DType> dtype = to_dtype(t.scalar_type());
  TORCH_CHECK_TYPE(
      dtype.has_value(),
      argument_message(op, arg, "dtype float32, float16 or bfloat16 (int64 for index tensors)",
                       "torch." + c10::getDtypeNames(t.scalar_type()).first));
  TensorView v;
  v.dtype = *dtype;
  if (t.is_cuda()) {
    v.device = Device::cuda(t.get_device());
  } else {
    TORCH_CHECK_VALUE(t.is_cpu(), argument_message(op, arg, "a CPU or CUDA tensor",
                                                   "a tensor on " + t.device().str()));
    v.device = Device::cpu();
  }
  TORCH_CHECK_VALUE(t.dim() <= TensorView::kMaxDims,
                    argument_message(op, arg, "a tensor with at most 8 dimensions",
                                     std::to_string(t.dim()) + " dimensions"));
  v.ndim = static_cast<int>(t.dim());
  for (int d = 0; d < v.ndim; ++d) {
    v.sizes[d] = t.size(d);
    v.strides[d] = t.stride(d);
  }
  // data_ptr() of a tensor without storage would throw; an empty tensor may have a null pointer.
  v.data = t.numel() == 0 ? nullptr : t.data_ptr();
  return v;
}

TensorView to_view(const std::optional<at::Tensor>& t, std::string_view op, std::string_view arg) {
  if (!t.has_value() || !t->defined()) return TensorView{};
  return to_view(*t, op, arg);
}

at::ScalarType to_scalar_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return at::kFloat;
    case DType::kFloat16: return at::kHalf;
    case DType::kBFloat16: return at::kBFloat16;
    case DType::kInt64: return at::kLong;
  }
  TORCH_CHECK(false, "tigon: unknown DType " + std::to_string(static_cast<int>(dtype)));
}

bool has_row_layout(const at::Tensor& t) {
  if (t.dim() < 1 || t.dim() > TensorView::kMaxDims) return true;  // the core reports it
  const int64_t hidden = t.size(-1);
  const int64_t rows = hidden == 0 ? 0 : t.numel() / hidden;
  if (t.numel() == 0) return true;
  if (hidden != 1 && t.stride(-1) != 1) return false;
  int64_t stride = -1;
  int64_t span = 1;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (stride < 0) {
      stride = t.stride(d);
      span = t.size(d);
      continue;
    }
    if (t.stride(d) != stride * span) return false;
    span *= t.size(d);
  }
  const int64_t row_stride = stride < 0 ? hidden : stride;
  return rows == 1 || row_stride >= hidden;
}

at::Tensor with_row_layout(const at::Tensor& t) { return has_row_layout(t) ? t : t.contiguous(); }

CastingMode parse_casting_mode(std::string_view mode, std::string_view op) {
  if (mode == "llama") return CastingMode::kLlama;
  if (mode == "gemma") return CastingMode::kGemma;
  if (mode == "none") return CastingMode::kNone;
  C10_THROW_ERROR(ValueError, argument_message(op, "casting_mode", "'llama', 'gemma' or 'none'",
                                               "'" + std::string(mode) + "'"));
}

Reduction parse_reduction(std::string_view reduction, std::string_view op, bool batchmean) {
  if (reduction == "mean") return Reduction::kMean;
  if (reduction == "sum") return Reduction::kSum;
  if (reduction == "none") return Reduction::kNone;
  if (batchmean && reduction == "batchmean") return Reduction::kBatchMean;
  C10_THROW_ERROR(ValueError, argument_message(op, "reduction",
                                               batchmean ? "'batchmean', 'mean', 'sum' or 'none'"
                                                         : "'mean', 'sum' or 'none'",
                                               "'" + std::string(reduction) + "'"));
}

CrossEntropyParams cross_entropy_params(int64_t ignore_index, std::string_view reduction,
                                        double label_smoothing, double lse_square_scale,
                                        double softcap, std::string_view op) {
  CrossEntropyParams p;
  p.ignore_index = ignore_index;
  p.reduction = parse_reduction(reduction, op, /*batchmean=*/false);
  p.label_smoothing = static_cast<float>(label_smoothing);
  p.lse_square_scale = static_cast<float>(lse_square_scale);
  p.softcap = static_cast<float>(softcap);
  return p;
}

void rethrow_as_torch_error(const Error& error) {
  switch (error.code()) {
    case ErrorCode::kInvalidArgument: C10_THROW_ERROR(ValueError, error.what());
    case ErrorCode::kTypeError: C10_THROW_ERROR(TypeError, error.what());
    default: C10_THROW_ERROR(Error, error.what());
  }
}

}  // namespace tigon::torch_binding
