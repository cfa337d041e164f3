// RoPE formulas over Ops (src/math/lanes.h) for one rotated channel pair (i, i + h) and one
// pass-through channel. The cast order is the spec (include/tigon/ops/rope.h, docs/ops/rope.md).
// No include guard: see src/math/lanes.h.

// T: activation storage type (q, k and dx), C: cos / sin storage type.
template <typename T, typename C>
struct RopeLanes {
  using P = math::Promote<T, C>;  // y and dy: PyTorch's promotion of T and C

  // HF's three eager ops in P: q * cos, rotate_half(q) * sin, their sum. The product of two
  // storage values is exact in float32, so round_P of the float32 product is the op's result.
  template <class Ops>
  TIGON_LANES static typename Ops::V first(typename Ops::V x1, typename Ops::V x2,
                                           typename Ops::V c1, typename Ops::V s1) {
    return Ops::template round<P>(Ops::template round<P>(x1 * c1) +
                                  Ops::template round<P>(Ops::neg(x2) * s1));
  }
  template <class Ops>
  TIGON_LANES static typename Ops::V second(typename Ops::V x1, typename Ops::V x2,
                                            typename Ops::V c2, typename Ops::V s2) {
    return Ops::template round<P>(Ops::template round<P>(x2 * c2) +
                                  Ops::template round<P>(x1 * s2));
  }

  // Backward: each multiply's gradient is formed in P and rounded to T (the dtype of the
  // multiply's input), then the two gradients of a channel are summed in T. "+ 0" is the
  // zero-filled slice gradient autograd adds: it turns a -0 sum into +0 (never folded away
  // without -ffast-math).
  template <class Ops>
  TIGON_LANES static typename Ops::V branch(typename Ops::V dy, typename Ops::V factor) {
    return Ops::template round<T>(Ops::template round<P>(dy * factor));
  }
  template <class Ops>
  TIGON_LANES static typename Ops::V grad_first(typename Ops::V dy1, typename Ops::V dy2,
                                                typename Ops::V c1, typename Ops::V s2) {
    return Ops::template round<T>(branch<Ops>(dy1, c1) + branch<Ops>(dy2, s2)) + Ops::splat(0.0f);
  }
  template <class Ops>
  TIGON_LANES static typename Ops::V grad_second(typename Ops::V dy1, typename Ops::V dy2,
                                                 typename Ops::V c2, typename Ops::V s1) {
    return Ops::template round<T>(branch<Ops>(dy2, c2) - branch<Ops>(dy1, s1)) + Ops::splat(0.0f);
  }

  // Channels >= R: the forward copies (widening to P is exact); the backward rounds to T.
  template <class Ops>
  TIGON_LANES static typename Ops::V grad_pass(typename Ops::V dy) {
    return Ops::template round<T>(dy) + Ops::splat(0.0f);
  }
};
