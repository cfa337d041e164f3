// Softmax-then-top-k routing, CPU backend: one row per work item (src/math/moe_router.h). The
// backward reads the forward's ids back, so both see the same experts.
#include <cstdint>
#include <type_traits>

#include "core/dispatch.h"
#include "cpu/parallel.h"
#include "math/float_types.h"
#include "math/moe_router.h"
#include "ops/moe_router_args.h"

namespace tigon::cpu {
namespace {

using detail::MoeRouterArgs;
using math::from_float;
using math::to_float;

template <typename T, typename W>
void forward(const MoeRouterArgs& a) {
  const std::int64_t e = a.experts, k = a.top_k;
  parallel_for(a.rows, e * k, [&](std::int64_t t) {
    const T* x = static_cast<const T*>(a.logits) + t * a.logits_row_stride;
    const auto at = [&](std::int64_t j) { return to_float(x[j]); };
    const math::RouterRow row = math::router_row(e, at);
    const auto prob = [&](std::int64_t j) { return math::router_prob(at(j), row); };
    std::int64_t* ids = a.topk_ids + t * k;
    math::router_top_k(e, prob, k, ids);
    float s = 0.0f;
    for (std::int64_t n = 0; n < k; ++n) s += prob(ids[n]);
    W* w = static_cast<W*>(a.topk_weights) + t * k;
    for (std::int64_t n = 0; n < k; ++n)
      w[n] = from_float<W>(a.renormalize ? prob(ids[n]) / s : prob(ids[n]));
  });
}

template <typename T, typename W>
void backward(const MoeRouterArgs& a) {
  const std::int64_t e = a.experts, k = a.top_k;
  parallel_for(a.rows, e * k, [&](std::int64_t t) {
    const T* x = static_cast<const T*>(a.logits) + t * a.logits_row_stride;
    const auto at = [&](std::int64_t j) { return to_float(x[j]); };
    const math::RouterRow row = math::router_row(e, at);
    const auto prob = [&](std::int64_t j) { return math::router_prob(at(j), row); };
    const std::int64_t* ids = a.topk_ids + t * k;
    const W* gw = static_cast<const W*>(a.grad_weights) + t * k;
    // dv_k: through the renormalization (HF: v / v.sum(-1, keepdim=True)).
    float s = 0.0f, c = 0.0f;
    if (a.renormalize) {
      float dot = 0.0f;
      for (std::int64_t n = 0; n < k; ++n) s += prob(ids[n]);
      for (std::int64_t n = 0; n < k; ++n) dot += to_float(gw[n]) * prob(ids[n]);
      c = -dot / (s * s);
    }
    const auto dv = [&](std::int64_t n) {
      return a.renormalize ? to_float(gw[n]) / s + c : to_float(gw[n]);
    };
    const auto dp = [&](std::int64_t j) {
      for (std::int64_t n = 0; n < k; ++n)
        if (ids[n] == j) return dv(n);
      return 0.0f;
    };
    // torch's softmax backward: p_j * (dp_j - sum_i dp_i p_i), the sum over i increasing.
    float dot = 0.0f;
    for (std::int64_t j = 0; j < e; ++j) dot += dp(j) * prob(j);
    T* g = static_cast<T*>(a.grad_logits) + t * e;
    for (std::int64_t j = 0; j < e; ++j) g[j] = from_float<T>(prob(j) * (dp(j) - dot));
  });
}

template <typename F>
void dispatch(const MoeRouterArgs& a, F&& f) {
  detail::dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (a.weight_dtype == DType::kFloat32) {
      f(tag, detail::TypeTag<float>{});
    } else {
      f(tag, detail::TypeTag<T>{});
    }
  });
}

}  // namespace

void moe_router_fwd(const MoeRouterArgs& args) {
  dispatch(args, [&](auto t, auto w) {
    forward<typename decltype(t)::type, typename decltype(w)::type>(args);
  });
}

void moe_router_bwd(const MoeRouterArgs& args) {
  dispatch(args, [&](auto t, auto w) {
    backward<typename decltype(t)::type, typename decltype(w)::type>(args);
  });
}

}  // namespace tigon::cpu
