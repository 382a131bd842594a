// x86-64 AVX2 implementation of the vector layer (see vec.h for the contract).
//
// For x86-64 CPUs without AVX-512 (AMD Zen 1-3, Intel client cores): the same
// kernel sources vectorised with AVX2 + FMA + F16C, acting as a vector unit with
// VLEN 256: F32<L>::V is L ymm registers (8 L fp32 lanes); setvl/vlmax as on RVV.
// Loads and stores touch exactly `vl` elements: fp32/int32 tails by AVX masked
// moves (which suppress faults on the masked-off lanes), 8- and 16-bit tails
// through a small buffer (AVX2 has no masked byte or word moves); arithmetic
// runs on all lanes (tail agnostic), the `_tu` forms, reductions and stores
// honour vl. exp/tanh/erf are the polynomial approximations of vec_rvv.h (same
// constants, same special cases), so every vector variant rounds alike.
//
// Compiled only for the x86_avx2 variant (-mavx2 -mfma -mf16c); the dispatcher
// runs it only on CPUs with AVX2, FMA and F16C enabled.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "rvvk/detail/scalar.h"

namespace rvvk::RVVK_NS::vec {

inline constexpr bool kIsRvv = false;
inline constexpr bool kHasZvfh = false;
inline constexpr std::size_t kAvx2VlenBits = 256;

inline std::size_t vlen_bits() { return kAvx2VlenBits; }

// LMUL of the extend kernel's matrix products (three accumulators and an operand
// live at once, plus the three broadcast scalars): 2, since 16 ymm registers do
// not hold 3 x 4 + 4 + 3.
inline constexpr int kMatrixLmul = 2;

namespace avx2 {

inline __m256 splat(float x) { return _mm256_set1_ps(x); }

// Lanes [8 i, 8 i + 8) of a vector with active length vl: how many are active.
inline std::size_t active(std::size_t vl, int i) {
  const std::size_t lo = static_cast<std::size_t>(i) * 8;
  return vl <= lo ? 0 : vl - lo >= 8 ? 8 : vl - lo;
}

// All-ones 32-bit lanes for lanes [0, n) (n <= 8).
inline __m256i mask32(std::size_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Raw loads of n (<= 8) 16- or 8-bit elements; the rest are zero.
inline __m128i ld16(const void* p, std::size_t n) {
  if (n == 8) return _mm_loadu_si128(static_cast<const __m128i*>(p));
  alignas(16) std::uint16_t b[8] = {};
  std::memcpy(b, p, n * 2);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(b));
}
inline __m128i ld8(const void* p, std::size_t n) {
  if (n == 8) return _mm_loadl_epi64(static_cast<const __m128i*>(p));
  alignas(16) std::uint8_t b[16] = {};
  std::memcpy(b, p, n);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(b));
}
inline void st16(void* p, __m128i h, std::size_t n) {
  if (n == 8) {
    _mm_storeu_si128(static_cast<__m128i*>(p), h);
  } else {
    alignas(16) std::uint16_t b[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(b), h);
    std::memcpy(p, b, n * 2);
  }
}

// n (<= 8) elements of each storage type -> fp32 (lanes >= n: zero).
inline __m256 ld(const float* p, std::size_t n) {
  return n == 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask32(n));
}
inline __m256 ld(const bf16* p, std::size_t n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ld16(p, n)), 16));
}
inline __m256 ld(const f16* p, std::size_t n) { return _mm256_cvtph_ps(ld16(p, n)); }
inline __m256 ld(const std::int8_t* p, std::size_t n) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(ld8(p, n)));
}
// fp8 e4m3 (fn) by integer arithmetic like the scalar code: scale by 2^120; 0x7f is NaN.
inline __m256 ld(const fp8e4m3* p, std::size_t n) {
  const __m256i w = _mm256_cvtepu8_epi32(ld8(p, n));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x80)), 24);
  const __m256i em = _mm256_and_si256(w, _mm256_set1_epi32(0x7f));
  const __m256 scaled =
      _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(em, 20)), _mm256_set1_ps(0x1p120f));
  const __m256i nan = _mm256_cmpeq_epi32(em, _mm256_set1_epi32(0x7f));
  const __m256i bits =
      _mm256_blendv_epi8(_mm256_castps_si256(scaled), _mm256_set1_epi32(0x7fc00000), nan);
  return _mm256_castsi256_ps(_mm256_or_si256(bits, sign));
}
// fp8 e5m2 is the high byte of an fp16.
inline __m256 ld(const fp8e5m2* p, std::size_t n) {
  return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(ld8(p, n)), 8));
}

// Round to nearest even; NaN -> 0x7fc0 (as scalar::to_bf16); 8 halves in order.
inline __m128i bf16_bits(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i h = _mm256_srli_epi32(
      _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  h = _mm256_blendv_epi8(h, _mm256_set1_epi32(0x7fc0), nan);
  // h's lanes are < 2^16: the unsigned saturating pack keeps them; it packs per
  // 128-bit half, so take 64-bit words 0 and 2.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08);
  return _mm256_castsi256_si128(packed);
}

inline void st(float* p, __m256 v, std::size_t n) {
  if (n == 8) {
    _mm256_storeu_ps(p, v);
  } else {
    _mm256_maskstore_ps(p, mask32(n), v);
  }
}
inline void st(bf16* p, __m256 v, std::size_t n) { st16(p, bf16_bits(v), n); }
// Round to nearest even, overflow to inf, subnormals kept (F16C does all three).
inline void st(f16* p, __m256 v, std::size_t n) {
  st16(p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), n);
}

inline __m256 select(__m256 mask, __m256 yes, __m256 no) { return _mm256_blendv_ps(no, yes, mask); }

// exp(x) as in vec_rvv.h: range reduction to [-ln2/2, ln2/2], degree-6 polynomial,
// exponent by integer add; x < -87.33 gives exactly 0.
inline __m256 exp(__m256 x) {
  const __m256 tiny = _mm256_cmp_ps(x, splat(-87.33654f), _CMP_LT_OQ);
  x = _mm256_max_ps(_mm256_min_ps(x, splat(88.3762626647949f)), splat(-87.33654f));
  const __m256i n = _mm256_cvtps_epi32(_mm256_mul_ps(x, splat(1.44269504088896341f)));
  const __m256 nf = _mm256_cvtepi32_ps(n);
  __m256 r = _mm256_fnmadd_ps(nf, splat(0.693359375f), x);
  r = _mm256_fnmadd_ps(nf, splat(-2.12194440e-4f), r);
  __m256 p = _mm256_fmadd_ps(splat(1.9875691500e-4f), r, splat(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, splat(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, splat(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, splat(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, splat(5.0000001201e-1f));
  __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  y = _mm256_add_ps(y, splat(1.0f));
  const __m256i bits = _mm256_add_epi32(_mm256_castps_si256(y), _mm256_slli_epi32(n, 23));
  return _mm256_andnot_ps(tiny, _mm256_castsi256_ps(bits));
}

// exp(x) for x <= 0 (a softmax's score minus its max), with exp's contract
// there: x log2(e) = n + f with n an integer and |f| <= 1/2 (f from an exact
// product by FMA plus the low part of log2(e), so the reduction adds no error
// that grows with |x|), 2^f by a degree-5 polynomial (least squares on
// [-1/2, 1/2]: relative error 1.1e-7), times 2^n built as a float's exponent
// field; x < -87.33654 (masked scores, -inf) gives exactly 0, so results are
// normal numbers or 0; NaN stays NaN. 15 instructions against exp's 19. x > 0
// is outside its contract.
inline __m256 exp_nonpositive(__m256 x) {
  const __m256 tiny = _mm256_cmp_ps(x, splat(-87.33654f), _CMP_LT_OQ);
  const __m256 log2e = splat(1.44269502e+00f);  // log2(e) = log2e + 1.925963e-8
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_fmadd_ps(x, splat(1.925963e-8f), _mm256_fmsub_ps(x, log2e, n));
  __m256 p = _mm256_fmadd_ps(splat(1.3218672248e-3f), f, splat(9.6716983244e-3f));
  p = _mm256_fmadd_ps(p, f, splat(5.5508930236e-2f));
  p = _mm256_fmadd_ps(p, f, splat(2.4022237957e-1f));
  p = _mm256_fmadd_ps(p, f, splat(6.9314688444e-1f));
  p = _mm256_fmadd_ps(p, f, splat(1.0f));
  // 2^n = (n + 127) << 23 as a float: n >= -126 wherever x is not tiny
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// tanh(x) = 1 - 2 / (exp(2x) + 1), saturating to 1 above 40.
inline __m256 tanh(__m256 x) {
  const __m256 e = exp(_mm256_mul_ps(x, splat(2.0f)));
  const __m256 t =
      _mm256_sub_ps(splat(1.0f), _mm256_div_ps(splat(2.0f), _mm256_add_ps(e, splat(1.0f))));
  return select(_mm256_cmp_ps(x, splat(40.0f), _CMP_GT_OQ), splat(1.0f), t);
}

inline __m256 abs(__m256 x) { return _mm256_andnot_ps(splat(-0.0f), x); }

// erf as in vec_rvv.h: x + x P(x^2) for |x| <= 1, else sign(x) (1 - exp(Q(min(|x|, 3.95) - 2.5))).
inline __m256 erf(__m256 x) {
  const __m256 a = abs(x);
  const __m256 t = _mm256_mul_ps(a, a);
  __m256 p = splat(7.85386073e-05f);
  p = _mm256_fmadd_ps(p, t, splat(-8.01019371e-04f));
  p = _mm256_fmadd_ps(p, t, splat(5.18832775e-03f));
  p = _mm256_fmadd_ps(p, t, splat(-2.68538129e-02f));
  p = _mm256_fmadd_ps(p, t, splat(1.12835854e-01f));
  p = _mm256_fmadd_ps(p, t, splat(-3.76126260e-01f));
  p = _mm256_fmadd_ps(p, t, splat(1.28379166e-01f));
  const __m256 small = _mm256_fmadd_ps(p, a, a);
  const __m256 u = _mm256_sub_ps(_mm256_min_ps(a, splat(3.95f)), splat(2.5f));
  __m256 q = splat(1.62011258e-06f);
  q = _mm256_fmadd_ps(q, u, splat(-1.32878758e-05f));
  q = _mm256_fmadd_ps(q, u, splat(7.73762004e-05f));
  q = _mm256_fmadd_ps(q, u, splat(-4.20217548e-04f));
  q = _mm256_fmadd_ps(q, u, splat(2.16517528e-03f));
  q = _mm256_fmadd_ps(q, u, splat(-1.08584482e-02f));
  q = _mm256_fmadd_ps(q, u, splat(-9.43893671e-01f));
  q = _mm256_fmadd_ps(q, u, splat(-5.35268068e+00f));
  q = _mm256_fmadd_ps(q, u, splat(-7.80681515e+00f));
  const __m256 big = _mm256_sub_ps(splat(1.0f), exp(q));
  const __m256 r = select(_mm256_cmp_ps(a, splat(1.0f), _CMP_GT_OQ), big, small);
  // copy x's sign onto r (NaN stays NaN: small is NaN for NaN x and |x| > 1 is false)
  return _mm256_or_ps(abs(r), _mm256_and_ps(x, splat(-0.0f)));
}

// Sum of the 8 lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace avx2

template <int LMUL>
struct F32 {
  static_assert(LMUL == 1 || LMUL == 2 || LMUL == 4 || LMUL == 8, "LMUL 1, 2, 4 or 8");
  static constexpr int R = LMUL;  // ymm registers per vector
  static constexpr std::size_t N = 8 * static_cast<std::size_t>(LMUL);
  struct V {
    __m256 r[R];
  };
  // Packed bf16 pairs of the linear layers (see vec_rvv.h).
  struct U {
    __m256i r[R];
  };

  static std::size_t setvl(std::size_t n) { return n < N ? n : N; }
  static constexpr std::size_t vlmax() { return N; }

  template <class Op>
  static V map(V a, Op op) {
    for (int i = 0; i < R; ++i) a.r[i] = op(a.r[i]);
    return a;
  }
  template <class Op>
  static V zip(V a, V b, Op op) {
    for (int i = 0; i < R; ++i) a.r[i] = op(a.r[i], b.r[i]);
    return a;
  }

  static V splat(float s, std::size_t) {
    V r;
    for (int i = 0; i < R; ++i) r.r[i] = _mm256_set1_ps(s);
    return r;
  }
  static V add(V a, V b, std::size_t) { return zip(a, b, [](__m256 x, __m256 y) { return _mm256_add_ps(x, y); }); }
  static V sub(V a, V b, std::size_t) { return zip(a, b, [](__m256 x, __m256 y) { return _mm256_sub_ps(x, y); }); }
  static V mul(V a, V b, std::size_t) { return zip(a, b, [](__m256 x, __m256 y) { return _mm256_mul_ps(x, y); }); }
  static V div(V a, V b, std::size_t) { return zip(a, b, [](__m256 x, __m256 y) { return _mm256_div_ps(x, y); }); }
  // max(a, b) keeps a where either is NaN (the portable layer's `a < b ? b : a`):
  // maxps returns its second operand when either is NaN.
  static V max(V a, V b, std::size_t) { return zip(a, b, [](__m256 x, __m256 y) { return _mm256_max_ps(y, x); }); }
  static V mul(V a, float s, std::size_t) {
    const __m256 k = _mm256_set1_ps(s);
    return map(a, [k](__m256 x) { return _mm256_mul_ps(x, k); });
  }
  static V add(V a, float s, std::size_t) {
    const __m256 k = _mm256_set1_ps(s);
    return map(a, [k](__m256 x) { return _mm256_add_ps(x, k); });
  }
  static V fmacc(V acc, V a, V b, std::size_t) {
    for (int i = 0; i < R; ++i) acc.r[i] = _mm256_fmadd_ps(a.r[i], b.r[i], acc.r[i]);
    return acc;
  }
  static V fmacc_tu(V acc, V a, V b, std::size_t vl) {
    if (vl == N) return fmacc(acc, a, b, vl);
    for (int i = 0; i < R; ++i) {
      const __m256 f = _mm256_fmadd_ps(a.r[i], b.r[i], acc.r[i]);
      acc.r[i] = _mm256_blendv_ps(acc.r[i], f, _mm256_castsi256_ps(avx2::mask32(avx2::active(vl, i))));
    }
    return acc;
  }
  // acc + s * b
  static V fmacc(V acc, float s, V b, std::size_t) {
    const __m256 k = _mm256_set1_ps(s);
    for (int i = 0; i < R; ++i) acc.r[i] = _mm256_fmadd_ps(k, b.r[i], acc.r[i]);
    return acc;
  }
  RVVK_ALWAYS_INLINE static float reduce_sum(V v, std::size_t vl) {
    if (vl == N) {
      for (int w = R / 2; w > 0; w /= 2)
        for (int i = 0; i < w; ++i) v.r[i] = _mm256_add_ps(v.r[i], v.r[i + w]);
      return avx2::hsum(v.r[0]);
    }
    __m256 acc = _mm256_and_ps(v.r[0], _mm256_castsi256_ps(avx2::mask32(avx2::active(vl, 0))));
    for (int i = 1; i < R; ++i)
      acc = _mm256_add_ps(
          acc, _mm256_and_ps(v.r[i], _mm256_castsi256_ps(avx2::mask32(avx2::active(vl, i)))));
    return avx2::hsum(acc);
  }
  RVVK_ALWAYS_INLINE static float reduce_max(V v, std::size_t vl) {
    const __m256 ninf = _mm256_set1_ps(-__builtin_inff());
    __m256 acc = ninf;
    for (int i = 0; i < R; ++i) {
      const __m256 m = _mm256_castsi256_ps(avx2::mask32(avx2::active(vl, i)));
      // maxps(x, acc) keeps acc where x is NaN, as the other layers' reductions
      acc = _mm256_blendv_ps(acc, _mm256_max_ps(v.r[i], acc), m);
    }
    return avx2::hmax(acc);
  }
  static V exp(V x, std::size_t) { return map(x, [](__m256 v) { return avx2::exp(v); }); }
  static V exp_nonpositive(V x, std::size_t) {
    return map(x, [](__m256 v) { return avx2::exp_nonpositive(v); });
  }
  static V tanh(V x, std::size_t) { return map(x, [](__m256 v) { return avx2::tanh(v); }); }
  static V erf(V x, std::size_t) { return map(x, [](__m256 v) { return avx2::erf(v); }); }
  static V abs(V v, std::size_t) { return map(v, [](__m256 x) { return avx2::abs(x); }); }

  static U load_u32(const std::uint32_t* p, std::size_t vl) {
    U r;
    for (int i = 0; i < R; ++i) {
      const std::size_t n = avx2::active(vl, i);
      r.r[i] = n == 8 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8 * i))
                      : _mm256_maskload_epi32(reinterpret_cast<const int*>(p + 8 * i),
                                              avx2::mask32(n));
    }
    return r;
  }
  static V bf16_low(U w, std::size_t) {
    V r;
    for (int i = 0; i < R; ++i) r.r[i] = _mm256_castsi256_ps(_mm256_slli_epi32(w.r[i], 16));
    return r;
  }
  static V bf16_high(U w, std::size_t) {
    V r;
    const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    for (int i = 0; i < R; ++i) r.r[i] = _mm256_castsi256_ps(_mm256_and_si256(w.r[i], hi));
    return r;
  }
  // p[i] = clamp(round_half_even(v[i]), -127, 127) as int8 (finite v; MXCSR rounding).
  static void store_i8_rne(std::int8_t* p, V v, std::size_t vl) {
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    for (int i = 0; i < R; ++i) {
      const std::size_t n = avx2::active(vl, i);
      if (!n) break;
      const __m256i q = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(v.r[i]), lo), hi);
      const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
      const __m128i b = _mm_packs_epi16(w, w);  // bytes 0-7: the 8 lanes in order
      if (n == 8) {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(p + 8 * i), b);
      } else {
        alignas(16) std::int8_t buf[16];
        _mm_store_si128(reinterpret_cast<__m128i*>(buf), b);
        std::memcpy(p + 8 * i, buf, n);
      }
    }
  }

  template <class T>
  RVVK_ALWAYS_INLINE static V load(const T* p, std::size_t vl) {
    V r;
    if (vl == N) {  // whole vectors: no tail handling
      for (int i = 0; i < R; ++i) r.r[i] = avx2::ld(p + 8 * i, 8);
      return r;
    }
    for (int i = 0; i < R; ++i) {
      const std::size_t n = avx2::active(vl, i);
      r.r[i] = n ? avx2::ld(p + 8 * i, n) : _mm256_setzero_ps();
    }
    return r;
  }
  template <class T>
  RVVK_ALWAYS_INLINE static void store(T* p, V v, std::size_t vl) {
    if (vl == N) {
      for (int i = 0; i < R; ++i) avx2::st(p + 8 * i, v.r[i], 8);
      return;
    }
    for (int i = 0; i < R; ++i) {
      const std::size_t n = avx2::active(vl, i);
      if (!n) break;
      avx2::st(p + 8 * i, v.r[i], n);
    }
  }
  // Strided access (element i at p[i * stride], stride in elements, may be negative):
  // through a contiguous buffer.
  template <class T>
  static V load_strided(const T* p, std::ptrdiff_t stride, std::size_t vl) {
    alignas(32) float buf[N];
    for (std::size_t i = 0; i < vl; ++i)
      buf[i] = scalar::to_f32(p[static_cast<std::ptrdiff_t>(i) * stride]);
    return load(static_cast<const float*>(buf), vl);
  }
  template <class T>
  static void store_strided(T* p, std::ptrdiff_t stride, V v, std::size_t vl) {
    alignas(32) float buf[N];
    store(static_cast<float*>(buf), v, vl);
    for (std::size_t i = 0; i < vl; ++i)
      p[static_cast<std::ptrdiff_t>(i) * stride] = scalar::from_f32<T>(buf[i]);
  }
};

// Exact int32 accumulators of int8 x int8 products (see vec_rvv.h); the products
// are formed in int16 (exact) and macc2 sums the pair in int16 like the RVV code.
template <int LMUL>
struct I8Acc {
  static constexpr int R = LMUL;
  static constexpr std::size_t N = F32<LMUL>::N;
  struct V {
    __m256i r[R];
  };
  struct W {
    __m128i r[R];  // 8 int8 each, in the low half
  };
  static std::size_t setvl(std::size_t n) { return n < N ? n : N; }
  static constexpr std::size_t vlmax() { return N; }
  static V zero(std::size_t) {
    V v;
    for (int i = 0; i < R; ++i) v.r[i] = _mm256_setzero_si256();
    return v;
  }
  static W load(const std::int8_t* p, std::size_t vl) {
    W w;
    for (int i = 0; i < R; ++i) {
      const std::size_t n = avx2::active(vl, i);
      w.r[i] = n ? avx2::ld8(p + 8 * i, n) : _mm_setzero_si128();
    }
    return w;
  }
  static V macc(V acc, std::int8_t a, W w, std::size_t) {
    const __m128i k = _mm_set1_epi16(a);
    for (int i = 0; i < R; ++i) {
      const __m128i prod = _mm_mullo_epi16(_mm_cvtepi8_epi16(w.r[i]), k);
      acc.r[i] = _mm256_add_epi32(acc.r[i], _mm256_cvtepi16_epi32(prod));
    }
    return acc;
  }
  static V macc2(V acc, std::int8_t a0, W w0, std::int8_t a1, W w1, std::size_t) {
    const __m128i k0 = _mm_set1_epi16(a0), k1 = _mm_set1_epi16(a1);
    for (int i = 0; i < R; ++i) {
      const __m128i prod = _mm_add_epi16(_mm_mullo_epi16(_mm_cvtepi8_epi16(w0.r[i]), k0),
                                         _mm_mullo_epi16(_mm_cvtepi8_epi16(w1.r[i]), k1));
      acc.r[i] = _mm256_add_epi32(acc.r[i], _mm256_cvtepi16_epi32(prod));
    }
    return acc;
  }
  static typename F32<LMUL>::V to_f32(V v, std::size_t) {
    typename F32<LMUL>::V r;
    for (int i = 0; i < R; ++i) r.r[i] = _mm256_cvtepi32_ps(v.r[i]);
    return r;
  }
};

}  // namespace rvvk::RVVK_NS::vec
