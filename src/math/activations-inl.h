// exp and tanh over Ops (src/math/lanes.h), the host's float32 exp / tanh: built from correctly
// rounded +, -, *, / only, so every lane of every backend and vector width gives the same bits,
// independent of the libm. No include guard: see src/math/lanes.h.

// exp(x) = 2^n * exp(r), r = x - n * ln2 in [-ln2/2, ln2/2] (Cody-Waite: ln2_hi has 15
// significant bits, so n * ln2_hi and x - n * ln2_hi are exact). exp(r) = 1 + r + q with the
// rounding error of 1 + r and of r itself carried separately, which keeps the result within
// about 0.6 ulp. Inputs above 89 overflow to +inf, below -104 underflow to 0; NaN stays NaN.
template <class Ops>
TIGON_LANES typename Ops::V exp_lanes(typename Ops::V x0) {
  using V = typename Ops::V;
  const V x = Ops::clamp(x0, Ops::splat(-104.0f), Ops::splat(89.0f));  // NaN: x0 at the end
  const V log2e = Ops::splat(1.44269502162933349609375f);
  const V round = Ops::splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const V ln2_hi = Ops::splat(0.693145751953125f);
  const V ln2_lo = Ops::splat(1.428606765330187045e-06f);
  const V n = (x * log2e + round) - round;
  const V r_hi = x - n * ln2_hi;  // exact
  const V c = n * ln2_lo;
  const V r = r_hi - c;
  // TwoSum: the exact rounding error of r_hi - c.
  const V bb = r - r_hi;
  const V r_lo = (r_hi - (r - bb)) + (Ops::neg(c) - bb);
  // q = exp(r) - 1 - r, degree-8 Taylor (truncation < 0.05 ulp for |r| <= ln2 / 2).
  V p = Ops::splat(1.0f / 40320.0f);
  p = Ops::splat(1.0f / 5040.0f) + r * p;
  p = Ops::splat(1.0f / 720.0f) + r * p;
  p = Ops::splat(1.0f / 120.0f) + r * p;
  p = Ops::splat(1.0f / 24.0f) + r * p;
  p = Ops::splat(1.0f / 6.0f) + r * p;
  p = Ops::splat(0.5f) + r * p;
  const V q = (r * r) * p;
  const V one = Ops::splat(1.0f);
  const V hi = one + r;
  const V hi_err = (one - hi) + r;  // exact (Fast2Sum, |1| >= |r|)
  const V e = hi + (hi_err + (r_lo + r_lo * r + q));
  return Ops::select(Ops::is_nan(x0), x0, Ops::ldexp(e, n));
}

// tanh(x): an odd polynomial below 0.625, 1 - 2 / (exp(2|x|) + 1) above, +-1 from 9 on (where
// tanh rounds to 1). NaN stays NaN. Both branches are computed and one is selected.
template <class Ops>
TIGON_LANES typename Ops::V tanh_lanes(typename Ops::V x) {
  using V = typename Ops::V;
  const V zero = Ops::splat(0.0f), one = Ops::splat(1.0f);
  const auto negative = x < zero;
  const V y = Ops::select(negative, Ops::neg(x), x);
  // tanh(y) = y + y^3 * P(y^2), P fitted for relative error < 2e-10 on [0, 0.625].
  const V s = y * y;
  V p = Ops::splat(0.0021489840000867844f);
  p = Ops::splat(-0.008184662088751793f) + s * p;
  p = Ops::splat(0.021703999489545822f) + s * p;
  p = Ops::splat(-0.05394745245575905f) + s * p;
  p = Ops::splat(0.13333211839199066f) + s * p;
  p = Ops::splat(-0.3333333134651184f) + s * p;
  const V small = y + y * (s * p);
  const V large = one - Ops::splat(2.0f) / (exp_lanes<Ops>(y + y) + one);
  V t = Ops::select(y < Ops::splat(9.0f), large, one);
  t = Ops::select(y < Ops::splat(0.625f), small, t);
  t = Ops::select(negative, Ops::neg(t), t);
  return Ops::select(Ops::is_nan(x), x, t);
}
