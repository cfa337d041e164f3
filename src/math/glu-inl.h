// SwiGLU / GeGLU formulas over Ops (src/math/lanes.h): the activations and the gated product of
// one element. The cast order is the spec (include/tigon/ops/glu.h, docs/ops/glu.md); it follows
// PyTorch's own float32 silu / gelu(tanh) kernels and autograd through Hugging Face's eager MLP.
// No include guard: see src/math/lanes.h.

template <GluActivation kAct>
struct ActivationLanes;

template <>
struct ActivationLanes<GluActivation::kSilu> {
  template <class Ops>
  TIGON_LANES static typename Ops::V forward(typename Ops::V a) {
    return a / (Ops::splat(1.0f) + Ops::exp(Ops::neg(a)));
  }
  // PyTorch's silu_backward: dy * sigmoid * (1 + x * (1 - sigmoid)).
  template <class Ops>
  TIGON_LANES static typename Ops::V backward(typename Ops::V g, typename Ops::V a) {
    using V = typename Ops::V;
    const V one = Ops::splat(1.0f);
    const V s = one / (one + Ops::exp(Ops::neg(a)));
    return (g * s) * (one + a * (one - s));
  }
};

template <>
struct ActivationLanes<GluActivation::kGeluTanh> {
  static constexpr float kBeta = 0.7978845608028654f;  // float32(sqrt(2) * (2 / sqrt(pi)) / 2)
  static constexpr float kKappa = 0.044715f;
  template <class Ops>
  TIGON_LANES static typename Ops::V forward(typename Ops::V a) {
    using V = typename Ops::V;
    const V cube = (a * a) * a;
    const V inner = Ops::splat(kBeta) * (a + Ops::splat(kKappa) * cube);
    return (Ops::splat(0.5f) * a) * (Ops::splat(1.0f) + Ops::tanh(inner));
  }
  // PyTorch's gelu_backward (approximate="tanh"), term for term.
  template <class Ops>
  TIGON_LANES static typename Ops::V backward(typename Ops::V g, typename Ops::V a) {
    using V = typename Ops::V;
    const V one = Ops::splat(1.0f), half = Ops::splat(0.5f), beta = Ops::splat(kBeta);
    const V a_sq = a * a;
    const V cube = a * a_sq;
    const V inner = beta * (a + Ops::splat(kKappa) * cube);
    const V t = Ops::tanh(inner);
    const V left = half * a;
    const V right = one + t;
    const V left_derivative = half * right;
    const V tanh_derivative = one - t * t;
    constexpr float kThreeKappa = 3.0f * kKappa;  // one float32 rounding, as 3.0f * kKappa
    const V inner_derivative = beta * (one + Ops::splat(kThreeKappa) * a_sq);
    const V right_derivative = (left * tanh_derivative) * inner_derivative;
    return g * (left_derivative + right_derivative);
  }
};

// T: storage type of every tensor. The functions return float32 values that the caller stores
// as T (the final rounding); every intermediate rounding to T is here.
template <GluActivation kAct, typename T>
struct GluLanes {
  using Act = ActivationLanes<kAct>;

  // h = act(a) rounded to T, as HF's act_fn(gate) returns it.
  template <class Ops>
  TIGON_LANES static typename Ops::V gate(typename Ops::V a) {
    return Ops::template round<T>(Act::template forward<Ops>(a));
  }

  template <class Ops>
  TIGON_LANES static typename Ops::V forward(typename Ops::V a, typename Ops::V b) {
    return gate<Ops>(a) * b;
  }

  template <class Ops>
  TIGON_LANES static void backward(typename Ops::V dy, typename Ops::V a, typename Ops::V b,
                                   typename Ops::V& da, typename Ops::V& db) {
    const typename Ops::V g = Ops::template round<T>(dy * b);  // dL/dh, a tensor of T in autograd
    db = dy * gate<Ops>(a);
    da = Act::template backward<Ops>(g, a);
  }

  // With multipliers gm, dm (float32; include/tigon/ops/glu.h): HF's gate(x) * gate_multiplier
  // is a tensor of T, so the activation's input is rounded to T; the output's multiplier rounds
  // again. Each step is exact for a multiplier of 1. The products are never contracted into a
  // later add (float32 keeps no rounding in between: nvcc could otherwise fuse a * gm into the
  // activation's first FMA, which PyTorch's separate kernels do not).
  template <class Ops>
  TIGON_LANES static typename Ops::V scaled(typename Ops::V x, typename Ops::V m) {
    return Ops::template round<T>(Ops::mul_rn(x, m));
  }

  template <class Ops>
  TIGON_LANES static typename Ops::V forward(typename Ops::V a, typename Ops::V b,
                                             typename Ops::V gm, typename Ops::V dm) {
    const typename Ops::V c = Ops::template round<T>(gate<Ops>(scaled<Ops>(a, gm)) * b);
    return scaled<Ops>(c, dm);
  }

  template <class Ops>
  TIGON_LANES static void backward(typename Ops::V dy, typename Ops::V a, typename Ops::V b,
                                   typename Ops::V gm, typename Ops::V dm, typename Ops::V& da,
                                   typename Ops::V& db) {
    backward<Ops>(scaled<Ops>(dy, dm), scaled<Ops>(a, gm), b, da, db);  // dc, z
    da = scaled<Ops>(Ops::template round<T>(da), gm);                   // dL/da = dL/dz * gm
  }
};
