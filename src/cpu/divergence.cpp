// kl_div / jsd / tvd CPU backend. Rows run in parallel; each reads its input and target once,
// writing the per-element loss (kNone) or its row sum (lane_sum's fixed order) and the gradient
// in the same pass. Row sums are added in float64 in a fixed order: the same bits at any thread
// count.
#include <cstdint>
#include <type_traits>

#include "core/dispatch.h"
#include "cpu/lane_sum.h"
#include "cpu/parallel.h"
#include "math/divergence.h"
#include "math/float_types.h"
#include "ops/divergence_args.h"

namespace tigon::cpu {
namespace {

using detail::DivergenceArgs;
using math::DivergenceKind;
using math::from_float;
using math::to_float;

template <typename T>
T* row_of(void* base, std::int64_t stride, std::int64_t row) {
  return static_cast<T*>(base) + row * stride;
}
template <typename T>
const T* row_of(const void* base, std::int64_t stride, std::int64_t row) {
  return static_cast<const T*>(base) + row * stride;
}

template <typename T>
void zero_row(T* row, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) row[j] = from_float<T>(0.0f);
}

std::int64_t rows_counted(const DivergenceArgs& a) {
  if (a.labels == nullptr) return a.rows;
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < a.rows; ++i) n += a.ignored(i) ? 0 : 1;
  return n;
}

// E: the element type of the kNone loss (forward) or upstream gradient (backward); float when
// the reduction is not kNone (then unused).
template <DivergenceKind K, typename T, typename E>
struct Rows {
  const DivergenceArgs& a;
  float grad_scale;  // s * u of the header (forward: s; ignored per element for kNone backward)

  // Forward: the row's loss sum (kNone: the loss elements), and the gradient if asked.
  float forward(std::int64_t r) const {
    T* g = a.grad ? row_of<T>(a.grad, a.grad_row_stride, r) : nullptr;
    E* l = a.reduction == Reduction::kNone ? row_of<E>(a.loss, a.loss_row_stride, r) : nullptr;
    if (a.ignored(r)) {
      if (g) zero_row(g, a.vocab);
      if (l) zero_row(l, a.vocab);
      return 0.0f;
    }
    const T* x = row_of<T>(a.input, a.input_row_stride, r);
    const T* t = row_of<T>(a.target, a.target_row_stride, r);
    const auto term = [&](std::int64_t j) {
      return math::divergence_term<K>(to_float(x[j]), to_float(t[j]), a.options);
    };
    if (l) {
      for (std::int64_t j = 0; j < a.vocab; ++j) {
        const math::DivergenceTerm e = term(j);
        l[j] = from_float<E>(e.loss);
        if (g) g[j] = from_float<T>(e.grad * grad_scale);
      }
      return 0.0f;
    }
    if (g == nullptr) return lane_sum(a.vocab, [&](std::int64_t j) { return term(j).loss; });
    return lane_sum(a.vocab, [&](std::int64_t j) {
      const math::DivergenceTerm e = term(j);
      g[j] = from_float<T>(e.grad * grad_scale);
      return e.loss;
    });
  }

  void backward(std::int64_t r) const {
    T* g = row_of<T>(a.grad, a.grad_row_stride, r);
    if (a.ignored(r)) return zero_row(g, a.vocab);
    const T* x = row_of<T>(a.input, a.input_row_stride, r);
    const T* t = row_of<T>(a.target, a.target_row_stride, r);
    if (a.reduction == Reduction::kNone) {
      const E* u = row_of<E>(a.grad_loss, a.grad_loss_row_stride, r);
      for (std::int64_t j = 0; j < a.vocab; ++j) {
        const float dx = math::divergence_term<K>(to_float(x[j]), to_float(t[j]), a.options).grad;
        g[j] = from_float<T>(dx * to_float(u[j]));
      }
      return;
    }
    for (std::int64_t j = 0; j < a.vocab; ++j) {
      const float dx = math::divergence_term<K>(to_float(x[j]), to_float(t[j]), a.options).grad;
      g[j] = from_float<T>(dx * grad_scale);
    }
  }
};

// Calls f(Rows<K, T, E>{...}) for the args' kind, dtype and kNone element dtype `element`.
template <typename F>
void dispatch(const DivergenceArgs& a, DType element, float grad_scale, F&& f) {
  detail::dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto with_kind = [&](auto kind) {
      if (a.reduction == Reduction::kNone && element != DType::kFloat32) {
        f(Rows<decltype(kind)::value, T, T>{a, grad_scale});
      } else {
        f(Rows<decltype(kind)::value, T, float>{a, grad_scale});
      }
    };
    switch (a.kind) {
      case DivergenceKind::kJsd:
        return with_kind(std::integral_constant<DivergenceKind, DivergenceKind::kJsd>{});
      case DivergenceKind::kTvd:
        return with_kind(std::integral_constant<DivergenceKind, DivergenceKind::kTvd>{});
      case DivergenceKind::kKlDiv: break;
    }
    with_kind(std::integral_constant<DivergenceKind, DivergenceKind::kKlDiv>{});
  });
}

}  // namespace

std::size_t divergence_workspace_size(const DivergenceArgs& a) {
  return a.reduction == Reduction::kNone ? 0 : static_cast<std::size_t>(a.rows) * sizeof(float);
}

void divergence_fwd(const DivergenceArgs& a) {
  const double denominator = detail::divergence_denominator(a, rows_counted(a));
  const float scale = math::divergence_scale(denominator);
  float* row_sums = a.workspace;
  dispatch(a, a.loss_dtype, scale, [&](const auto& rows) {
    parallel_for(a.rows, 2 * a.vocab, [&](std::int64_t r) {
      const float sum = rows.forward(r);
      if (row_sums) row_sums[r] = sum;
    });
  });
  if (a.reduction == Reduction::kNone) return;
  const double total = lane_sum<double>(a.rows, [&](std::int64_t r) { return row_sums[r]; });
  *static_cast<float*>(a.loss) = math::divergence_reduced(total, denominator);
}

void divergence_bwd(const DivergenceArgs& a) {
  float scale = 1.0f;
  if (a.reduction != Reduction::kNone) {
    const double denominator = detail::divergence_denominator(a, rows_counted(a));
    scale = math::divergence_scale(denominator) * *static_cast<const float*>(a.grad_loss);
  }
  dispatch(a, a.grad_loss_dtype, scale, [&](const auto& rows) {
    parallel_for(a.rows, a.vocab, [&](std::int64_t r) { rows.backward(r); });
  });
}

}  // namespace tigon::cpu
