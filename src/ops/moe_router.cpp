// Softmax-then-top-k routing: the one validation point, then dispatch to a backend.
#include "tigon/ops/moe_router.h"

#include <string>

#include "core/check.h"
#include "ops/moe_router_args.h"

namespace tigon {
namespace {

using detail::MoeRouterArgs;

constexpr const char* kOp = "moe_router";

void check_matrix(const char* arg, const TensorView& t, std::int64_t rows, std::int64_t cols,
                  Device device) {
  detail::check_device(kOp, arg, t, device, "logits' device");
  TIGON_CHECK_ARG(t.ndim == 2 && t.sizes[0] == rows && t.sizes[1] == cols, kOp, arg,
                  "shape [" + std::to_string(rows) + ", " + std::to_string(cols) + "]",
                  detail::shape_string(t));
  detail::contiguous_numel(kOp, arg, t);
}

MoeRouterArgs checked(const MoeRouterParams& params, const TensorView& logits,
                      const TensorView& ids, DType weight_dtype, const char* weights_arg) {
  TIGON_CHECK_ARG(logits.ndim == 2, kOp, "logits", "a [N, E] tensor", detail::shape_string(logits));
  detail::check_floating(kOp, "logits", logits.dtype);
  const detail::RowLayout l = detail::row_layout(kOp, "logits", logits);
  detail::check_backend(kOp, "logits", logits.device);
  MoeRouterArgs a;
  a.rows = l.rows;
  a.experts = l.hidden;
  TIGON_CHECK_ARG(params.top_k >= 1 && params.top_k <= a.experts, kOp, "top_k",
                  "a value in [1, " + std::to_string(a.experts) + "] (the number of experts)",
                  std::to_string(params.top_k));
  a.top_k = params.top_k;
  a.renormalize = params.renormalize;
  a.dtype = logits.dtype;
  a.logits = logits.data;
  a.logits_row_stride = l.row_stride;
  check_matrix("topk_ids", ids, a.rows, a.top_k, logits.device);
  detail::check_dtype(kOp, "topk_ids", ids.dtype, DType::kInt64);
  a.topk_ids = static_cast<std::int64_t*>(ids.data);
  TIGON_CHECK_ARG(weight_dtype == DType::kFloat32 || weight_dtype == a.dtype, kOp, weights_arg,
                  std::string("dtype float32 or ") + dtype_name(a.dtype) + " (logits' dtype)",
                  dtype_name(weight_dtype), ErrorCode::kTypeError);
  a.weight_dtype = weight_dtype;
  return a;
}

}  // namespace

void moe_router_fwd(const MoeRouterParams& params, const TensorView& logits,
                    const TensorView& topk_ids, const TensorView& topk_weights, Stream stream) {
  MoeRouterArgs a = checked(params, logits, topk_ids, topk_weights.dtype, "topk_weights");
  check_matrix("topk_weights", topk_weights, a.rows, a.top_k, logits.device);
  a.topk_weights = topk_weights.data;
  if (logits.device.type == DeviceType::kCUDA) {
    cuda::moe_router_fwd(a, logits.device.index, stream.cuda_stream);
  } else {
    cpu::moe_router_fwd(a);
  }
}

void moe_router_bwd(const MoeRouterParams& params, const TensorView& grad_weights,
                    const TensorView& logits, const TensorView& topk_ids,
                    const TensorView& grad_logits, Stream stream) {
  MoeRouterArgs a = checked(params, logits, topk_ids, grad_weights.dtype, "grad_weights");
  check_matrix("grad_weights", grad_weights, a.rows, a.top_k, logits.device);
  a.grad_weights = grad_weights.data;
  check_matrix("grad_logits", grad_logits, a.rows, a.experts, logits.device);
  detail::check_dtype(kOp, "grad_logits", grad_logits.dtype, a.dtype, " (logits' dtype)");
  a.grad_logits = grad_logits.data;
  if (logits.device.type == DeviceType::kCUDA) {
    cuda::moe_router_bwd(a, logits.device.index, stream.cuda_stream);
  } else {
    cpu::moe_router_bwd(a);
  }
}

}  // namespace tigon
