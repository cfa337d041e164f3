// Shared by the C++ autograd kernels (bindings/torch/<op>_autograd.cpp). Each is a
// torch::autograd::Function registered with TORCH_LIBRARY_IMPL(tigon, Autograd, m) for the op's
// forward; its forward and backward call tigon's registered operators through the dispatcher, so
// torch.compile (AOTAutograd) traces them as the ops they are.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>

namespace tigon::torch_binding {

// The typed handle of a registered operator ("tigon::rms_norm_bwd"); look it up once (static).
template <typename Signature>
c10::TypedOperatorHandle<Signature> op(const std::string& name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), "").typed<Signature>();
}

// The Autograd kernel of an op with schema `Signature` (returning a Tensor or a tuple of them)
// whose autograd is the torch::autograd::Function F:
//   m.impl("rms_norm_fwd", &AutogradKernel<RmsNormFwd, FwdSignature>::call);
template <typename F, typename Signature>
struct AutogradKernel;

template <typename F, typename... Args>
struct AutogradKernel<F, at::Tensor(Args...)> {
  static at::Tensor call(Args... args) { return std::move(F::apply(args...)[0]); }
};

template <typename F, typename... Outputs, typename... Args>
struct AutogradKernel<F, std::tuple<Outputs...>(Args...)> {
  static std::tuple<Outputs...> call(Args... args) {
    torch::autograd::variable_list r = F::apply(args...);
    return take(r, std::index_sequence_for<Outputs...>{});
  }

 private:
  template <std::size_t... I>
  static std::tuple<Outputs...> take(torch::autograd::variable_list& r,
                                     std::index_sequence<I...> /*unused*/) {
    return {std::move(r[I])...};
  }
};

// A Tensor? kept in AutogradContext::saved_data.
inline std::optional<at::Tensor> optional_of(const c10::IValue& v) {
  return v.isNone() ? std::nullopt : std::optional<at::Tensor>(v.toTensor());
}

}  // namespace tigon::torch_binding
