// The vector layer's polynomial math, written once for every vector ISA.
//
// exp, tanh and erf are templates over a register-traits type R: one hardware
// register on x86 (vec_avx2.h's avx2::Reg, vec_avx512.h's avx512::Reg; `vl` is
// ignored there) or one LMUL register group on RVV (vec_rvv.h's rvv::Reg<L>).
// R gives the vector types V (fp32), I (int32) and M (a lane mask) and these
// primitives, each one instruction (or the ISA's shortest equivalent) so that
// every ISA runs the same operations in the same order and rounds alike:
//   splat(c)            c in every lane
//   mul(a, b)           a * b          mul_s(a, c)     a * c
//   add_s(a, c)         a + c          sub_s(a, c)     a - c
//   rsub_s(a, c)        c - a          rdiv_s(a, c)    c / a
//   min_s(a, c)         min(a, c)      max_s(a, c)     max(a, c)   (c where a is NaN)
//   fmadd(a, b, c)      a * b + c, one rounding
//   fmacc_s(acc, c, b)  acc + c * b, one rounding
//   nmsac_s(acc, c, b)  acc - c * b, one rounding
//   abs(a)              |a|            copysign(a, b)  |a| with b's sign
//   cvt_rne(a) -> I     round to nearest even    to_f32(I) -> V
//   add_exponent(y, n)  y's bits + (n << 23) read as a float (y * 2^n, no checks)
//   lt_s(a, c), gt_s(a, c) -> M    ordered compares (false for NaN)
//   zero_where(a, m)    0 where m      set_where(a, m, c)   c where m
//   select(m, a, b)     a where m, else b
// (each also takes the active length vl last). The coefficients are in
// math::coef below, shared with the ISAs' exp_nonpositive.
#pragma once

#include <cstddef>
#include <utility>

namespace rvvk::RVVK_NS::vec::math {

namespace coef {
// exp: x = n ln2 + r with ln2 = kLn2Hi + kLn2Lo (kLn2Hi exact in few bits, so
// n kLn2Hi is exact), |r| <= ln2 / 2; exp(r) = 1 + r + r^2 P(r), P of degree 5.
inline constexpr float kExpMin = -87.33654f;  // below: exactly 0 (masked scores, -inf)
inline constexpr float kExpMax = 88.3762626647949f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kExpP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                   4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
// exp_nonpositive: x log2(e) = n + f with log2(e) = kLog2eHi + kLog2eLo, 2^f by a
// degree-5 polynomial (least squares on [-1/2, 1/2]: relative error 1.1e-7).
inline constexpr float kLog2eHi = 1.44269502e+00f;
inline constexpr float kLog2eLo = 1.925963e-8f;
inline constexpr float kExp2P[6] = {1.3218672248e-3f, 9.6716983244e-3f, 5.5508930236e-2f,
                                    2.4022237957e-1f, 6.9314688444e-1f, 1.0f};
// tanh saturates to 1 above this.
inline constexpr float kTanhMax = 40.0f;
// erf: x + x P(x^2) for |x| <= 1 (P degree 6), else sign(x) (1 - exp(Q(u))) with
// u = min(|x|, kErfMax) - kErfShift, Q (degree 8) ~ log(erfc); weighted-minimax fits,
// relative error < 2e-7; erf rounds to 1 beyond kErfMax.
inline constexpr float kErfP[7] = {7.85386073e-05f, -8.01019371e-04f, 5.18832775e-03f,
                                   -2.68538129e-02f, 1.12835854e-01f, -3.76126260e-01f,
                                   1.28379166e-01f};
inline constexpr float kErfMax = 3.95f;
inline constexpr float kErfShift = 2.5f;
inline constexpr float kErfQ[9] = {1.62011258e-06f,  -1.32878758e-05f, 7.73762004e-05f,
                                   -4.20217548e-04f, 2.16517528e-03f,  -1.08584482e-02f,
                                   -9.43893671e-01f, -5.35268068e+00f, -7.80681515e+00f};
}  // namespace coef

// Horner steps p = (...(p x + c[F]) x + ...) + c[K-1], one fused step per
// coefficient (unrolled at compile time).
template <class R, std::size_t F, std::size_t K, std::size_t... k>
inline typename R::V horner_steps(typename R::V p, typename R::V x, const float (&c)[K],
                                  std::size_t vl, std::index_sequence<k...>) {
  ((p = R::fmadd(p, x, R::splat(c[F + k], vl), vl)), ...);
  return p;
}
// Horner's rule (...(c[0] x + c[1]) x + ...) + c[K-1], starting from a splat c[0].
template <class R, std::size_t K>
inline typename R::V horner(typename R::V x, const float (&c)[K], std::size_t vl) {
  return horner_steps<R, 1>(R::splat(c[0], vl), x, c, vl, std::make_index_sequence<K - 1>());
}

// exp(x): range reduction to [-ln2/2, ln2/2], degree-6 polynomial, exponent by
// integer add. Relative error < 2e-7; x < -87.33654 gives exactly 0.
template <class R>
inline typename R::V exp(typename R::V x, std::size_t vl) {
  using V = typename R::V;
  const typename R::M tiny = R::lt_s(x, coef::kExpMin, vl);
  x = R::max_s(R::min_s(x, coef::kExpMax, vl), coef::kExpMin, vl);
  const typename R::I n = R::cvt_rne(R::mul_s(x, coef::kLog2e, vl), vl);
  const V nf = R::to_f32(n, vl);
  V r = R::nmsac_s(x, coef::kLn2Hi, nf, vl);
  r = R::nmsac_s(r, coef::kLn2Lo, nf, vl);
  V p = R::fmacc_s(R::splat(coef::kExpP[1], vl), coef::kExpP[0], r, vl);
  p = horner_steps<R, 2>(p, r, coef::kExpP, vl, std::make_index_sequence<4>());
  V y = R::fmadd(p, R::mul(r, r, vl), r, vl);
  y = R::add_s(y, 1.0f, vl);
  return R::zero_where(R::add_exponent(y, n, vl), tiny, vl);
}

// tanh(x) = 1 - 2 / (exp(2x) + 1), saturating to 1 above 40 (and to -1 below
// through exp's 0).
template <class R>
inline typename R::V tanh(typename R::V x, std::size_t vl) {
  const typename R::V e = exp<R>(R::mul_s(x, 2.0f, vl), vl);
  const typename R::V t = R::rsub_s(R::rdiv_s(R::add_s(e, 1.0f, vl), 2.0f, vl), 1.0f, vl);
  return R::set_where(t, R::gt_s(x, coef::kTanhMax, vl), 1.0f, vl);
}

// erf(x), see coef::kErfP. NaN stays NaN (P gives NaN and |x| > 1 is false).
template <class R>
inline typename R::V erf(typename R::V x, std::size_t vl) {
  using V = typename R::V;
  const V a = R::abs(x, vl);
  const V p = horner<R>(R::mul(a, a, vl), coef::kErfP, vl);
  const V small = R::fmadd(p, a, a, vl);
  const V u = R::sub_s(R::min_s(a, coef::kErfMax, vl), coef::kErfShift, vl);
  const V big = R::rsub_s(exp<R>(horner<R>(u, coef::kErfQ, vl), vl), 1.0f, vl);
  const V r = R::select(R::gt_s(a, 1.0f, vl), big, small, vl);
  return R::copysign(r, x, vl);
}

}  // namespace rvvk::RVVK_NS::vec::math
