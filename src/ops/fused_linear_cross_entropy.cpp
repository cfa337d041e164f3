// Fused linear cross-entropy: the one validation point, then dispatch to a backend.
#include "tigon/ops/fused_linear_cross_entropy.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "ops/fused_linear_cross_entropy_args.h"
#include "tigon/backends.h"

namespace tigon {
namespace {

using detail::FlceArgs;

constexpr const char* kOp = "fused_linear_cross_entropy";
// Automatic chunks: on CUDA, logits of at most 256 MiB (at least 64 rows); on the CPU, logits
// of 256 KiB (L2) but at least 256 rows, the depth of the dW product.
constexpr std::int64_t kChunkLogitsBytes = std::int64_t{256} << 20;
constexpr std::int64_t kCpuChunkLogitsBytes = std::int64_t{256} << 10;

bool is_contiguous(const TensorView& t) {
  std::int64_t expected = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.sizes[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.sizes[d];
  }
  return true;
}

void check_matrix(const char* arg, const TensorView& t, std::int64_t rows, std::int64_t cols,
                  Device device) {
  TIGON_CHECK_ARG(t.device == device, kOp, arg, "a tensor on the hidden states' device",
                  detail::device_string(t.device));
  const bool shape = cols < 0 ? (t.ndim == 1 && t.sizes[0] == rows)
                              : (t.ndim == 2 && t.sizes[0] == rows && t.sizes[1] == cols);
  if (!shape) {  // the message is built only on failure
    std::string want = "shape [";
    want += std::to_string(rows);
    if (cols >= 0) want.append(", ").append(std::to_string(cols));
    want += "]";
    detail::throw_argument_error(kOp, arg, want, detail::shape_string(t));
  }
  TIGON_CHECK_ARG(is_contiguous(t), kOp, arg, "a contiguous tensor", detail::shape_string(t));
  TIGON_CHECK_ARG(t.data != nullptr || rows == 0 || cols == 0, kOp, arg, "a non-null pointer",
                  "nullptr");
}

void check_dtype(const char* arg, DType got, DType a, DType b, const char* what) {
  TIGON_CHECK_ARG(got == a || got == b, kOp, arg, what, dtype_name(got), ErrorCode::kTypeError);
}

FlceArgs checked(const FusedLinearCrossEntropyParams& params,
                 const FusedLinearCrossEntropyInputs& in, const FusedLinearCrossEntropyGrads& g) {
  const TensorView& h = in.hidden;
  TIGON_CHECK_ARG(is_floating(h.dtype), kOp, "hidden", "dtype float32, float16 or bfloat16",
                  dtype_name(h.dtype), ErrorCode::kTypeError);
  TIGON_CHECK_ARG(h.ndim == 2, kOp, "hidden", "a [N, H] tensor", detail::shape_string(h));
  const detail::RowLayout hl = detail::row_layout(kOp, "hidden", h);
  TIGON_CHECK_ARG(hl.hidden > 0, kOp, "hidden", "H >= 1", detail::shape_string(h));
  const Device device = h.device;
  TIGON_CHECK_ARG(device.type == DeviceType::kCPU || has_cuda_backend(), kOp, "hidden",
                  "a CPU tensor (this build of tigon has no CUDA backend)",
                  detail::device_string(device), ErrorCode::kBackendUnavailable);
  const TensorView& w = in.weight;
  TIGON_CHECK_ARG(w.ndim == 2 && w.sizes[1] == hl.hidden && w.sizes[0] > 0, kOp, "weight",
                  "a [V, " + std::to_string(hl.hidden) + "] tensor (V >= 1)",
                  detail::shape_string(w));
  const std::int64_t vocab = w.sizes[0];
  check_matrix("weight", w, vocab, hl.hidden, device);
  detail::check_cuda_vocab(kOp, "weight", vocab, device);
  TIGON_CHECK_ARG(w.dtype == h.dtype, kOp, "weight",
                  std::string("dtype ") + dtype_name(h.dtype) + " (the hidden states' dtype)",
                  dtype_name(w.dtype), ErrorCode::kTypeError);

  // The cross-entropy part is validated by the cross-entropy rules on a [N, V] stand-in view.
  FlceArgs a;
  a.ce.params = params.ce;
  a.ce.rows = hl.rows;
  a.ce.vocab = vocab;
  a.ce.logits_dtype = h.dtype;
  TIGON_CHECK_ARG(
      in.target.dtype == DType::kInt64 && in.target.device == device && in.target.ndim == 1 &&
          in.target.sizes[0] == hl.rows && (hl.rows <= 1 || in.target.strides[0] == 1),
      kOp, "target", "a contiguous int64 tensor of " + std::to_string(hl.rows) + " elements",
      detail::shape_string(in.target) + " " + dtype_name(in.target.dtype));
  a.ce.target = static_cast<const std::int64_t*>(in.target.data);
  if (in.class_weight.defined()) {
    check_matrix("class_weight", in.class_weight, vocab, -1, device);
    TIGON_CHECK_ARG(is_floating(in.class_weight.dtype), kOp, "class_weight", "a float dtype",
                    dtype_name(in.class_weight.dtype), ErrorCode::kTypeError);
    a.ce.weight = in.class_weight.data;
    a.ce.weight_dtype = in.class_weight.dtype;
  }
  if (in.divisor.defined()) {
    TIGON_CHECK_ARG(params.ce.reduction == Reduction::kSum, kOp, "divisor",
                    "no divisor unless reduction is sum", reduction_name(params.ce.reduction));
    check_matrix("divisor", in.divisor, 1, -1, device);
    check_dtype("divisor", in.divisor.dtype, DType::kFloat32, DType::kFloat32, "dtype float32");
    a.ce.divisor = static_cast<const float*>(in.divisor.data);
  }
  if (in.token_scale.defined()) {
    check_matrix("token_scale", in.token_scale, hl.rows, -1, device);
    check_dtype("token_scale", in.token_scale.dtype, DType::kFloat32, DType::kFloat32,
                "dtype float32");
    a.ce.token_scale = static_cast<const float*>(in.token_scale.data);
  }
  a.ce.token_scale_by_target_prob = params.use_token_scaling;
  const CrossEntropyParams& p = params.ce;
  TIGON_CHECK_ARG(p.label_smoothing >= 0.0f && p.label_smoothing <= 1.0f, kOp, "label_smoothing",
                  "a value in [0, 1]", std::to_string(p.label_smoothing));
  TIGON_CHECK_ARG(p.lse_square_scale >= 0.0f, kOp, "lse_square_scale", "a value >= 0",
                  std::to_string(p.lse_square_scale));
  TIGON_CHECK_ARG(p.softcap >= 0.0f, kOp, "softcap", "0 (off) or > 0", std::to_string(p.softcap));
  TIGON_CHECK_ARG(params.chunk_rows >= 0, kOp, "chunk_rows", ">= 0 (0: automatic)",
                  std::to_string(params.chunk_rows));

  a.hidden_size = hl.hidden;
  a.hidden = h.data;
  a.hidden_row_stride = hl.row_stride;
  a.dtype = h.dtype;
  a.weight = w.data;
  if (in.bias.defined()) {
    check_matrix("bias", in.bias, vocab, -1, device);
    TIGON_CHECK_ARG(is_floating(in.bias.dtype), kOp, "bias", "a float dtype",
                    dtype_name(in.bias.dtype), ErrorCode::kTypeError);
    a.bias = in.bias.data;
    a.bias_dtype = in.bias.dtype;
  }
  if (g.hidden.defined()) {
    check_matrix("grad_hidden", g.hidden, hl.rows, hl.hidden, device);
    check_dtype("grad_hidden", g.hidden.dtype, h.dtype, h.dtype, "the hidden states' dtype");
    a.grad_hidden = g.hidden.data;
  }
  if (g.weight.defined()) {
    check_matrix("grad_weight", g.weight, vocab, hl.hidden, device);
    check_dtype("grad_weight", g.weight.dtype, DType::kFloat32, w.dtype,
                "float32 or the weight's dtype");
    a.grad_weight = g.weight.data;
    a.grad_weight_dtype = g.weight.dtype;
    a.dweight_fp32 = params.fp32_weight_grad_accumulation && g.weight.dtype != DType::kFloat32;
    TIGON_CHECK_ARG(!a.dweight_fp32 || reinterpret_cast<std::uintptr_t>(g.weight.data) % 4 == 0,
                    kOp, "grad_weight",
                    "a 4-byte aligned pointer (float32 accumulation in its storage)",
                    "a pointer aligned to 2 bytes");
  }
  if (g.bias.defined()) {
    TIGON_CHECK_ARG(in.bias.defined(), kOp, "grad_bias", "no tensor without a bias", "a tensor");
    check_matrix("grad_bias", g.bias, vocab, -1, device);
    check_dtype("grad_bias", g.bias.dtype, DType::kFloat32, in.bias.dtype,
                "float32 or the bias's dtype");
    a.grad_bias = g.bias.data;
    a.grad_bias_dtype = g.bias.dtype;
  }
  std::int64_t chunk = params.chunk_rows;
  if (chunk == 0) {
    const std::int64_t row_bytes = vocab * static_cast<std::int64_t>(element_size(h.dtype));
    const bool cpu = device.type == DeviceType::kCPU;
    chunk = std::max<std::int64_t>(
        cpu ? 256 : 64, (cpu ? kCpuChunkLogitsBytes : kChunkLogitsBytes) / row_bytes / 64 * 64);
  }
  a.chunk_rows = std::max<std::int64_t>(1, std::min(chunk, hl.rows));
  return a;
}

std::size_t workspace_for(const FlceArgs& a, Device d) {
  return d.type == DeviceType::kCUDA ? cuda::fused_linear_cross_entropy_workspace_size(a, d.index)
                                     : cpu::fused_linear_cross_entropy_workspace_size(a);
}

// A float32 contiguous tensor of the loss's size: [N] for reduction none, one element otherwise.
float* loss_sized(const char* arg, const TensorView& t, const FlceArgs& a, Device device) {
  const std::int64_t n = a.ce.params.reduction == Reduction::kNone ? a.ce.rows : 1;
  TIGON_CHECK_ARG(
      t.dtype == DType::kFloat32 && t.device == device && t.numel() == n && is_contiguous(t), kOp,
      arg, "a contiguous float32 tensor of " + std::to_string(n) + " elements",
      detail::shape_string(t));
  return static_cast<float*>(t.data);
}

void run(FlceArgs& a, Device device, Workspace workspace, Stream stream, void* cublas_handle) {
  detail::check_workspace(kOp, workspace, workspace_for(a, device),
                          "fused_linear_cross_entropy_workspace_size");
  a.workspace = workspace.data;
  a.workspace_bytes = workspace.bytes;
  a.cublas_handle = cublas_handle;
  if (device.type == DeviceType::kCUDA) {
    cuda::fused_linear_cross_entropy(a, device.index, stream.cuda_stream);
  } else {
    cpu::fused_linear_cross_entropy(a);
  }
}

}  // namespace

std::int64_t fused_linear_cross_entropy_chunk_rows(const FusedLinearCrossEntropyParams& params,
                                                   const FusedLinearCrossEntropyInputs& inputs) {
  return checked(params, inputs, {}).chunk_rows;
}

std::size_t fused_linear_cross_entropy_workspace_size(const FusedLinearCrossEntropyParams& params,
                                                      const FusedLinearCrossEntropyInputs& inputs,
                                                      const FusedLinearCrossEntropyGrads& grads) {
  return workspace_for(checked(params, inputs, grads), inputs.hidden.device);
}

void fused_linear_cross_entropy(const FusedLinearCrossEntropyParams& params,
                                const FusedLinearCrossEntropyInputs& inputs,
                                const CrossEntropyOutputs& outputs,
                                const FusedLinearCrossEntropyGrads& grads, Workspace workspace,
                                Stream stream, void* cublas_handle) {
  FlceArgs a = checked(params, inputs, grads);
  const Device device = inputs.hidden.device;
  detail::set_loss_outputs(kOp, outputs, device, a.ce);
  run(a, device, workspace, stream, cublas_handle);
}

std::size_t fused_linear_cross_entropy_bwd_workspace_size(
    const FusedLinearCrossEntropyParams& params, const FusedLinearCrossEntropyInputs& inputs,
    const FusedLinearCrossEntropyGrads& grads) {
  return fused_linear_cross_entropy_workspace_size(params, inputs, grads);
}

// The forward's chunk loop without loss outputs, for the upstream grad_loss.
void fused_linear_cross_entropy_bwd(const FusedLinearCrossEntropyParams& params,
                                    const FusedLinearCrossEntropyInputs& inputs,
                                    const TensorView& grad_loss,
                                    const FusedLinearCrossEntropyGrads& grads, Workspace workspace,
                                    Stream stream, void* cublas_handle) {
  FlceArgs a = checked(params, inputs, grads);
  const Device device = inputs.hidden.device;
  a.ce.grad_loss = loss_sized("grad_loss", grad_loss, a, device);
  if (!a.needs_grad()) return;
  run(a, device, workspace, stream, cublas_handle);
}

}  // namespace tigon
