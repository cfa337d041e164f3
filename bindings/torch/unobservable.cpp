#include "unobservable.h"

#include <ATen/CachedTensorUtils.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/SavedTensorHooks.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <string>
#include <utility>

#include "convert.h"

namespace tigon::torch_binding {

bool traced(const at::Tensor& t) {
  return t.key_set().has(c10::DispatchKey::Python) ||
         at::functionalization::impl::isFunctionalTensor(t);
}

bool unobservable(const at::Tensor& t, at::ScalarType dtype, WriteLayout layout) {
  if (!t.defined() || t.layout() != at::kStrided || t.scalar_type() != dtype) return false;
  if (at::GradMode::is_enabled() || t.requires_grad() || traced(t) || t.is_view()) return false;
  if (!torch::autograd::impl::is_tensor_stealable(t) || at::caching::is_cached_tensor(t)) {
    return false;
  }
  if (!t.has_storage() || t.storage().use_count() != 1) return false;
  return layout == WriteLayout::kRows ? has_row_layout(t) : t.is_non_overlapping_and_dense();
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kCount = "tigon.overwritable_inputs";

std::string input_key(std::size_t i) { return "tigon.input" + std::to_string(i); }
std::string version_key(std::size_t i) { return input_key(i) + ".version"; }

at::Tensor take_input(AutogradContext* ctx, std::size_t i) {
  c10::IValue& slot = ctx->saved_data[input_key(i)];
  TORCH_CHECK(slot.isTensor(),
              "Trying to backward through the graph a second time (or directly access saved "
              "tensors after they have already been freed). Saved intermediate values of the graph "
              "are freed when you call .backward() or autograd.grad(). Specify retain_graph=True "
              "if you need to backward through the graph a second time.");
  const int64_t saved_version = ctx->saved_data[version_key(i)].toInt();
  at::Tensor t;
  if (torch::autograd::get_current_graph_task_keep_graph()) {
    t = slot.toTensor();
  } else {
    t = std::move(slot).toTensor();
    slot = c10::IValue();
  }
  TORCH_CHECK(t._version() == saved_version,
              "one of the variables needed for gradient computation has been modified by an "
              "inplace operation: [",
              t.toString(), " ", t.sizes(), "] is at version ", t._version(), "; expected version ",
              saved_version,
              " instead. Hint: a tigon op's inputs may not be modified in place "
              "between its forward and its backward.");
  at::Tensor data = t.variable_data();  // without autograd metadata: returnable as a gradient
  t.reset();                            // the context's reference, if released, was the last
  return data;
}

// Inference tensors have no version counter (and autograd never saves them).
void bump_written_versions_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                                  torch::jit::Stack* stack) {
  const std::vector<c10::Argument>& args = op.schema().arguments();
  std::vector<at::Tensor> written;
  const std::size_t first = stack->size() - args.size();
  for (std::size_t i = 0; i < args.size(); ++i) {
    const c10::AliasInfo* alias = args[i].alias_info();
    const c10::IValue& value = (*stack)[first + i];
    if (alias != nullptr && alias->isWrite() && value.isTensor() &&
        !value.toTensor().is_inference()) {
      written.push_back(value.toTensor());
    }
  }
  op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
  for (const at::Tensor& t : written) torch::autograd::increment_version(t);
}

}  // namespace

void save_inputs(AutogradContext* ctx, bool in_place, const variable_list& inputs,
                 const variable_list& others) {
  // Inference tensors have no version counter; save_for_backward reports them if a graph needs
  // them.
  const bool overwritable = in_place && !at::SavedTensorDefaultHooks::get_hooks().has_value() &&
                            std::none_of(inputs.begin(), inputs.end(),
                                         [](const at::Tensor& t) { return t.is_inference(); });
  ctx->saved_data[kCount] = static_cast<int64_t>(overwritable ? inputs.size() : 0);
  if (!overwritable) {
    variable_list all = inputs;
    all.insert(all.end(), others.begin(), others.end());
    ctx->save_for_backward(std::move(all));
    return;
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    ctx->saved_data[input_key(i)] = inputs[i];
    ctx->saved_data[version_key(i)] = static_cast<int64_t>(inputs[i]._version());
  }
  ctx->save_for_backward(others);
}

variable_list saved_inputs(AutogradContext* ctx) {
  const auto count = static_cast<std::size_t>(ctx->saved_data[kCount].toInt());
  variable_list saved = ctx->get_saved_variables();
  if (count == 0) return saved;
  variable_list all;
  all.reserve(count + saved.size());
  for (std::size_t i = 0; i < count; ++i) all.push_back(take_input(ctx, i));
  for (at::Tensor& t : saved) all.push_back(std::move(t));
  return all;
}

torch::CppFunction bump_written_versions() {
  return torch::CppFunction::makeFromBoxedFunction<&bump_written_versions_kernel>();
}

}  // namespace tigon::torch_binding
