// Mixture-of-experts experts, CPU backend: the routing by a counting sort, then per expert, in
// tiles of kTileRows sorted positions, the two GEMMs in float32 (src/cpu/gemm.h; 16-bit operands
// converted exactly) around the GLU, with every rounding of include/tigon/ops/moe_experts.h
// (src/math/moe_experts.h). Per-slot results go to [N * K, .] buffers by sorted position; the
// combine (forward) and dhidden (backward) then add each token's slots in HF's fixed orders.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/dispatch.h"
#include "cpu/gemm.h"
#include "cpu/lane_sum.h"
#include "cpu/parallel.h"
#include "math/glu.h"
#include "math/moe_experts.h"
#include "ops/moe_experts_args.h"

namespace tigon::cpu {
namespace {

using detail::MoeExpertsBwdArgs;
using detail::MoeExpertsFwdArgs;
using detail::MoeExpertsShape;
using detail::MoeExpertsTensors;
using math::from_float;
using math::to_float;

// Sorted positions per GEMM tile: a constant, so the dW sums (beta = 1 across tiles) are a
// function of the shape and the routing only.
constexpr std::int64_t kTileRows = 256;

std::int64_t tile_rows(const MoeExpertsShape& s) {
  return std::max<std::int64_t>(1, std::min(kTileRows, s.slots()));
}

// Bump allocation over the workspace; with a null base it only counts the bytes.
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<unsigned char*>(base)) {}
  template <typename X>
  X* take(std::int64_t count) {
    X* p = base_ ? reinterpret_cast<X*>(base_ + used_) : nullptr;
    used_ += (static_cast<std::size_t>(count) * sizeof(X) + 63) / 64 * 64;
    return p;
  }
  std::size_t used() const { return used_; }

 private:
  unsigned char* base_;
  std::size_t used_ = 0;
};

struct FwdBuffers {
  float* w1 = nullptr;               // one expert's w_gate_up in float32 (16-bit T only)
  float* w2 = nullptr;               // one expert's w_down in float32 (16-bit T only)
  float* x = nullptr;                // [R, H] tile of gathered hidden states
  float* a = nullptr;                // [R, 2I]
  float* y = nullptr;                // [R, I]
  float* d = nullptr;                // [R, H]
  std::int64_t* position = nullptr;  // [N * K]: each slot's sorted position
  void* expert_out = nullptr;        // [N * K, H] in T when the forward saves nothing
  std::size_t bytes = 0;
};

FwdBuffers carve_fwd(const MoeExpertsShape& s, void* base, bool saving) {
  Carver c(base);
  FwdBuffers b;
  const std::int64_t r = tile_rows(s), h = s.hidden, i = s.intermediate;
  const bool narrow = s.dtype != DType::kFloat32;
  b.w1 = narrow ? c.take<float>(2 * i * h) : nullptr;
  b.w2 = narrow ? c.take<float>(h * i) : nullptr;
  b.x = c.take<float>(r * h);
  b.a = c.take<float>(r * 2 * i);
  b.y = c.take<float>(r * i);
  b.d = c.take<float>(r * h);
  b.position = c.take<std::int64_t>(s.slots());
  if (!saving) b.expert_out = c.take<unsigned char>(s.slots() * h * element_size(s.dtype));
  b.bytes = c.used();
  return b;
}

struct BwdBuffers {
  float* w1 = nullptr;
  float* w2 = nullptr;
  float* x = nullptr;    // [R, H]
  float* dd = nullptr;   // [R, H]
  float* y = nullptr;    // [R, I]
  float* dy = nullptr;   // [R, I]
  float* da = nullptr;   // [R, 2I]
  float* dx = nullptr;   // [R, H]
  float* dw1 = nullptr;  // [2I, H] accumulator
  float* dw2 = nullptr;  // [H, I] accumulator
  std::int64_t* position = nullptr;
  void* dx_slots = nullptr;  // [N * K, H] in T
  std::size_t bytes = 0;
};

BwdBuffers carve_bwd(const MoeExpertsShape& s, void* base) {
  Carver c(base);
  BwdBuffers b;
  const std::int64_t r = tile_rows(s), h = s.hidden, i = s.intermediate;
  const bool narrow = s.dtype != DType::kFloat32;
  b.w1 = narrow ? c.take<float>(2 * i * h) : nullptr;
  b.w2 = narrow ? c.take<float>(h * i) : nullptr;
  b.x = c.take<float>(r * h);
  b.dd = c.take<float>(r * h);
  b.y = c.take<float>(r * i);
  b.dy = c.take<float>(r * i);
  b.da = c.take<float>(r * 2 * i);
  b.dx = c.take<float>(r * h);
  b.dw1 = c.take<float>(2 * i * h);
  b.dw2 = c.take<float>(h * i);
  b.position = c.take<std::int64_t>(s.slots());
  b.dx_slots = c.take<unsigned char>(s.slots() * h * element_size(s.dtype));
  b.bytes = c.used();
  return b;
}

// The slots sorted by (expert, slot): counts, offsets, a stable scatter; and each slot's position
// (dropped slots, expert E, last).
void route(const MoeExpertsShape& s, const MoeExpertsTensors& t, std::int64_t* position) {
  const std::int64_t e_count = s.experts, p_count = s.slots();
  std::int64_t* offsets = t.expert_offsets;
  std::fill(offsets, offsets + e_count + 1, 0);
  // counts of experts [0, E) in offsets[1..E]; dropped slots need no count
  for (std::int64_t p = 0; p < p_count; ++p)
    if (t.topk_ids[p] < e_count) ++offsets[t.topk_ids[p] + 1];
  for (std::int64_t e = 0; e < e_count; ++e) offsets[e + 1] += offsets[e];
  std::int64_t dropped = offsets[e_count];
  // offsets[e] serves as expert e's cursor (slots in increasing order: a stable sort) ...
  for (std::int64_t p = 0; p < p_count; ++p) {
    const std::int64_t e = t.topk_ids[p];
    position[p] = e < e_count ? offsets[e]++ : dropped++;
  }
  // ... so it ends as expert e's end, the start of e + 1: shifted back to the starts.
  for (std::int64_t e = e_count; e > 0; --e) offsets[e] = offsets[e - 1];
  offsets[0] = 0;
  for (std::int64_t p = 0; p < p_count; ++p) t.sorted_slots[position[p]] = p;
}

void positions_from_sorted(const MoeExpertsShape& s, const MoeExpertsTensors& t,
                           std::int64_t* position) {
  for (std::int64_t j = 0; j < s.slots(); ++j) position[t.sorted_slots[j]] = j;
}

// A token's routed slots k in increasing (expert, k) order (ascending) or decreasing: calls
// f(k) for each, skipping dropped slots. K is small (top-k): a selection by scanning.
template <typename F>
void for_each_slot_in_order(const std::int64_t* ids, std::int64_t top_k, std::int64_t experts,
                            bool ascending, F&& f) {
  std::int64_t last_e = ascending ? -1 : experts, last_k = ascending ? -1 : top_k;
  for (std::int64_t n = 0; n < top_k; ++n) {
    std::int64_t best = -1;
    for (std::int64_t k = 0; k < top_k; ++k) {
      const std::int64_t e = ids[k];
      if (e >= experts) continue;
      const bool after = ascending ? (e > last_e || (e == last_e && k > last_k))
                                   : (e < last_e || (e == last_e && k < last_k));
      if (!after) continue;
      if (best < 0) {
        best = k;
        continue;
      }
      const std::int64_t be = ids[best];
      const bool better =
          ascending ? (e < be || (e == be && k < best)) : (e > be || (e == be && k > best));
      if (better) best = k;
    }
    if (best < 0) return;
    f(best);
    last_e = ids[best];
    last_k = best;
  }
}

template <typename T>
const float* expert_weights_f32(const T* w, std::int64_t count, float* buffer) {
  if constexpr (std::is_same_v<T, float>) {
    (void)count;
    (void)buffer;
    return w;
  } else {
    parallel_for(count, 1, [&](std::int64_t i) { buffer[i] = to_float(w[i]); });
    return buffer;
  }
}

template <typename T>
void gather_rows(const MoeExpertsShape& s, const MoeExpertsTensors& t, const std::int64_t* slots,
                 std::int64_t rows, float* x) {
  const auto* hidden = static_cast<const T*>(t.hidden);
  const std::int64_t h = s.hidden;
  parallel_for(rows, h, [&](std::int64_t i) {
    const T* src = hidden + (slots[i] / s.top_k) * t.hidden_row_stride;
    for (std::int64_t c = 0; c < h; ++c) x[i * h + c] = to_float(src[c]);
  });
}

template <GluActivation kAct, typename T, typename W>
void forward(const MoeExpertsFwdArgs& args) {
  using Glu = math::Glu<kAct, T>;
  using Moe = math::MoeExperts<T, W>;
  const MoeExpertsShape& s = args.shape;
  const MoeExpertsTensors& t = args.t;
  const bool saving = t.saved_expert_out != nullptr;
  const FwdBuffers b = carve_fwd(s, args.workspace, saving);
  const std::int64_t h = s.hidden, i2 = 2 * s.intermediate, im = s.intermediate, k = s.top_k;
  route(s, t, b.position);
  auto* expert_out = static_cast<T*>(saving ? t.saved_expert_out : b.expert_out);
  auto* saved_a = static_cast<T*>(t.saved_gate_up);
  const std::int64_t tile = tile_rows(s);

  for (std::int64_t e = 0; e < s.experts; ++e) {
    const std::int64_t begin = t.expert_offsets[e], end = t.expert_offsets[e + 1];
    if (begin == end) continue;
    const float* w1 =
        expert_weights_f32(static_cast<const T*>(t.w_gate_up) + e * i2 * h, i2 * h, b.w1);
    const float* w2 =
        expert_weights_f32(static_cast<const T*>(t.w_down) + e * h * im, h * im, b.w2);
    for (std::int64_t j0 = begin; j0 < end; j0 += tile) {
      const std::int64_t rows = std::min(tile, end - j0);
      gather_rows<T>(s, t, t.sorted_slots + j0, rows, b.x);
      gemm_f32(false, true, rows, i2, h, b.x, h, w1, h, 0.0f, b.a, i2);
      parallel_for(rows, i2, [&](std::int64_t r) {
        float* a = b.a + r * i2;
        for (std::int64_t c = 0; c < i2; ++c) a[c] = math::round_to<T>(a[c]);
        if (saved_a)
          for (std::int64_t c = 0; c < i2; ++c) saved_a[(j0 + r) * i2 + c] = from_float<T>(a[c]);
        for (std::int64_t c = 0; c < im; ++c)
          b.y[r * im + c] = to_float(Glu::forward(a[c], a[im + c]));
      });
      gemm_f32(false, true, rows, h, im, b.y, im, w2, im, 0.0f, b.d, h);
      parallel_for(rows, h, [&](std::int64_t r) {
        for (std::int64_t c = 0; c < h; ++c)
          expert_out[(j0 + r) * h + c] = from_float<T>(b.d[r * h + c]);
      });
    }
  }

  // HF's index_add_: each token's contributions in increasing expert order, in T, from 0.
  const auto* ids = t.topk_ids;
  const auto* w = static_cast<const W*>(t.topk_weights);
  auto* out = static_cast<T*>(args.out);
  parallel_for(s.tokens, k * h, [&](std::int64_t tok) {
    T* row = out + tok * h;
    std::fill(row, row + h, from_float<T>(0.0f));
    for_each_slot_in_order(ids + tok * k, k, s.experts, true, [&](std::int64_t kk) {
      const std::int64_t p = tok * k + kk;
      const T* d = expert_out + b.position[p] * h;
      for (std::int64_t c = 0; c < h; ++c) row[c] = Moe::add(row[c], Moe::weighted(d[c], w[p]));
    });
  });
}

template <typename G>
void store_grad(const float* acc, std::int64_t count, void* dst) {
  auto* g = static_cast<G*>(dst);
  parallel_for(count, 1, [&](std::int64_t i) { g[i] = from_float<G>(acc[i]); });
}

void store_grad(DType dtype, const float* acc, std::int64_t count, void* dst) {
  detail::dispatch_dtype(
      dtype, [&](auto tag) { store_grad<typename decltype(tag)::type>(acc, count, dst); });
}

template <GluActivation kAct, typename T, typename W>
void backward(const MoeExpertsBwdArgs& args) {
  using Glu = math::Glu<kAct, T>;
  using Moe = math::MoeExperts<T, W>;
  const MoeExpertsShape& s = args.shape;
  const MoeExpertsTensors& t = args.t;
  const BwdBuffers b = carve_bwd(s, args.workspace);
  const std::int64_t h = s.hidden, i2 = 2 * s.intermediate, im = s.intermediate, k = s.top_k;
  positions_from_sorted(s, t, b.position);
  const auto* ids = t.topk_ids;
  const auto* w = static_cast<const W*>(t.topk_weights);
  const auto* dout = static_cast<const T*>(args.grad_out);
  const auto* expert_out = static_cast<const T*>(t.saved_expert_out);
  const auto* saved_a = static_cast<const T*>(t.saved_gate_up);
  auto* dx_slots = static_cast<T*>(b.dx_slots);
  auto* dw = static_cast<W*>(args.grad_topk_weights);
  const bool need_dx = args.grad_hidden != nullptr;
  const bool need_dw1 = args.grad_w_gate_up != nullptr, need_dw2 = args.grad_w_down != nullptr;
  const bool need_glu = need_dx || need_dw1;
  const std::int64_t tile = tile_rows(s);

  if (dw) {  // dropped slots get zeros; routed ones are written below
    parallel_for(s.slots(), 1, [&](std::int64_t p) {
      if (ids[p] >= s.experts) dw[p] = from_float<W>(0.0f);
    });
  }
  for (std::int64_t e = 0; e < s.experts; ++e) {
    const std::int64_t begin = t.expert_offsets[e], end = t.expert_offsets[e + 1];
    const float* w1 =
        need_dx ? expert_weights_f32(static_cast<const T*>(t.w_gate_up) + e * i2 * h, i2 * h, b.w1)
                : nullptr;
    const float* w2 =
        need_glu && begin < end
            ? expert_weights_f32(static_cast<const T*>(t.w_down) + e * h * im, h * im, b.w2)
            : nullptr;
    if (begin == end) {
      if (need_dw1) std::fill(b.dw1, b.dw1 + i2 * h, 0.0f);
      if (need_dw2) std::fill(b.dw2, b.dw2 + h * im, 0.0f);
    }
    for (std::int64_t j0 = begin; j0 < end; j0 += tile) {
      const std::int64_t rows = std::min(tile, end - j0);
      const std::int64_t* slots = t.sorted_slots + j0;
      const float beta = j0 == begin ? 0.0f : 1.0f;
      // dd = round_T(dout * w); dw = round_W(sum_h round_P(dout * d)).
      parallel_for(rows, h, [&](std::int64_t r) {
        const std::int64_t p = slots[r];
        const T* g = dout + (p / k) * h;
        for (std::int64_t c = 0; c < h; ++c)
          b.dd[r * h + c] = to_float(Moe::grad_expert_out(g[c], w[p]));
        if (dw) {
          const T* d = expert_out + (j0 + r) * h;
          dw[p] = Moe::grad_weight(
              lane_sum(h, [&](std::int64_t c) { return Moe::grad_weight_term(g[c], d[c]); }));
        }
      });
      if (!need_glu && !need_dw2) continue;
      // y recomputed from the saved gate_up (the forward's bits).
      parallel_for(rows, im, [&](std::int64_t r) {
        const T* a = saved_a + (j0 + r) * i2;
        for (std::int64_t c = 0; c < im; ++c)
          b.y[r * im + c] = to_float(Glu::forward(to_float(a[c]), to_float(a[im + c])));
      });
      if (need_dw2) gemm_f32(true, false, h, im, rows, b.dd, h, b.y, im, beta, b.dw2, im);
      if (!need_glu) continue;
      gemm_f32(false, false, rows, im, h, b.dd, h, w2, im, 0.0f, b.dy, im);
      parallel_for(rows, im, [&](std::int64_t r) {
        const T* a = saved_a + (j0 + r) * i2;
        for (std::int64_t c = 0; c < im; ++c) {
          const float g = math::round_to<T>(b.dy[r * im + c]);
          const auto grads = Glu::backward(g, to_float(a[c]), to_float(a[im + c]));
          b.da[r * i2 + c] = to_float(grads.da);
          b.da[r * i2 + im + c] = to_float(grads.db);
        }
      });
      if (need_dw1) {
        gather_rows<T>(s, t, slots, rows, b.x);
        gemm_f32(true, false, i2, h, rows, b.da, i2, b.x, h, beta, b.dw1, h);
      }
      if (need_dx) {
        gemm_f32(false, false, rows, h, i2, b.da, i2, w1, h, 0.0f, b.dx, h);
        parallel_for(rows, h, [&](std::int64_t r) {
          for (std::int64_t c = 0; c < h; ++c)
            dx_slots[(j0 + r) * h + c] = from_float<T>(b.dx[r * h + c]);
        });
      }
    }
    if (need_dw1)
      store_grad(args.grad_w_gate_up_dtype, b.dw1, i2 * h,
                 static_cast<unsigned char*>(args.grad_w_gate_up) +
                     e * i2 * h * element_size(args.grad_w_gate_up_dtype));
    if (need_dw2)
      store_grad(args.grad_w_down_dtype, b.dw2, h * im,
                 static_cast<unsigned char*>(args.grad_w_down) +
                     e * h * im * element_size(args.grad_w_down_dtype));
  }

  if (!need_dx) return;
  // HF's autograd adds the experts' gradients of hidden in decreasing expert order, in T.
  auto* dhidden = static_cast<T*>(args.grad_hidden);
  parallel_for(s.tokens, k * h, [&](std::int64_t tok) {
    T* row = dhidden + tok * h;
    std::fill(row, row + h, from_float<T>(0.0f));
    for_each_slot_in_order(ids + tok * k, k, s.experts, false, [&](std::int64_t kk) {
      const T* dx = dx_slots + b.position[tok * k + kk] * h;
      for (std::int64_t c = 0; c < h; ++c) row[c] = Moe::add(row[c], dx[c]);
    });
  });
}

// f(activation, T, W) as template parameters.
template <typename F>
void dispatch(const MoeExpertsShape& s, F&& f) {
  detail::dispatch_dtype(s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto with_w = [&](auto act) {
      if (s.weight_dtype == DType::kFloat32) {
        f(act, tag, detail::TypeTag<float>{});
      } else {
        f(act, tag, detail::TypeTag<T>{});
      }
    };
    if (s.activation == GluActivation::kGeluTanh) {
      with_w(std::integral_constant<GluActivation, GluActivation::kGeluTanh>{});
    } else {
      with_w(std::integral_constant<GluActivation, GluActivation::kSilu>{});
    }
  });
}

}  // namespace

std::size_t moe_experts_fwd_workspace_size(const MoeExpertsShape& shape, bool saving) {
  return carve_fwd(shape, nullptr, saving).bytes;
}

std::size_t moe_experts_bwd_workspace_size(const MoeExpertsShape& shape) {
  return carve_bwd(shape, nullptr).bytes;
}

void moe_experts_fwd(const MoeExpertsFwdArgs& args) {
  dispatch(args.shape, [&](auto act, auto t_tag, auto w_tag) {
    forward<decltype(act)::value, typename decltype(t_tag)::type, typename decltype(w_tag)::type>(
        args);
  });
}

void moe_experts_bwd(const MoeExpertsBwdArgs& args) {
  dispatch(args.shape, [&](auto act, auto t_tag, auto w_tag) {
    backward<decltype(act)::value, typename decltype(t_tag)::type, typename decltype(w_tag)::type>(
        args);
  });
}

}  // namespace tigon::cpu
