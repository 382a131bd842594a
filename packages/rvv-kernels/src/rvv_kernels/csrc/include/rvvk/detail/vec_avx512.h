// x86-64 AVX-512 implementation of the vector layer (see vec.h for the contract).
//
// The host-side counterpart of vec_rvv.h, so the same kernel sources run vectorised
// on x86 servers (and the x86 side-by-side benchmark measures kernels rather than
// an emulation). It behaves as a vector unit with VLEN 512: F32<L>::V is L zmm
// registers (16 L fp32 lanes); setvl/vlmax as on RVV; loads and stores touch
// exactly `vl` elements (AVX-512 masked moves, which also suppress faults on the
// masked-off lanes); arithmetic runs on all lanes (tail agnostic); the `_tu` forms,
// reductions and stores honour vl. exp/tanh/erf are the polynomial approximations
// of vec_rvv.h (same constants, same special cases), so both vector variants round
// alike.
//
// Compiled only for the x86_avx512 variant (-mavx512f -mavx512bw -mavx512vl
// -mavx512dq -mfma -mf16c); the dispatcher runs it only on CPUs (and kernels) with
// AVX-512F/BW/VL/DQ enabled.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "rvvk/detail/scalar.h"

namespace rvvk::RVVK_NS::vec {

inline constexpr bool kIsRvv = false;
inline constexpr bool kHasZvfh = false;
inline constexpr std::size_t kAvx512VlenBits = 512;

inline std::size_t vlen_bits() { return kAvx512VlenBits; }

// LMUL of the extend kernel's matrix products (three accumulators and an operand
// live at once): 4 here, since 3 x 8 + 8 zmm would leave no register for the
// broadcast scalars and spill (RVV keeps those in scalar registers).
inline constexpr int kMatrixLmul = 4;

namespace avx512 {

constexpr __mmask16 kAll = static_cast<__mmask16>(0xffff);

// Lanes [16 i, 16 i + 16) of a vector with active length vl, as a mask.
inline __mmask16 lanes(std::size_t vl, int i) {
  const std::size_t lo = static_cast<std::size_t>(i) * 16;
  if (vl >= lo + 16) return kAll;
  if (vl <= lo) return 0;
  return static_cast<__mmask16>((1u << (vl - lo)) - 1u);
}

inline __m512 splat(float x) { return _mm512_set1_ps(x); }

// Raw 16-, 8- and 32-bit element loads of the lanes in m (whole vectors unmasked:
// with a constant mask the test folds away).
inline __m256i ld16(const void* p, __mmask16 m) {
  return m == kAll ? _mm256_loadu_si256(static_cast<const __m256i*>(p))
                   : _mm256_maskz_loadu_epi16(m, p);
}
inline __m128i ld8(const void* p, __mmask16 m) {
  return m == kAll ? _mm_loadu_si128(static_cast<const __m128i*>(p)) : _mm_maskz_loadu_epi8(m, p);
}

// 16 elements (those in m) of each storage type -> fp32.
inline __m512 ld(const float* p, __mmask16 m) {
  return m == kAll ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}
inline __m512 ld(const bf16* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(ld16(p, m)), 16));
}
inline __m512 ld(const f16* p, __mmask16 m) { return _mm512_cvtph_ps(ld16(p, m)); }
inline __m512 ld(const std::int8_t* p, __mmask16 m) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(ld8(p, m)));
}
// fp8 e4m3 (fn) by integer arithmetic like the scalar code: scale by 2^120; 0x7f is NaN.
inline __m512 ld(const fp8e4m3* p, __mmask16 m) {
  const __m512i w = _mm512_cvtepu8_epi32(ld8(p, m));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x80)), 24);
  const __m512i em = _mm512_and_si512(w, _mm512_set1_epi32(0x7f));
  const __m512 scaled =
      _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(em, 20)), _mm512_set1_ps(0x1p120f));
  __m512i bits = _mm512_castps_si512(scaled);
  const __mmask16 nan = _mm512_cmpeq_epi32_mask(em, _mm512_set1_epi32(0x7f));
  bits = _mm512_mask_mov_epi32(bits, nan, _mm512_set1_epi32(0x7fc00000));
  return _mm512_castsi512_ps(_mm512_or_si512(bits, sign));
}
// fp8 e5m2 is the high byte of an fp16.
inline __m512 ld(const fp8e5m2* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(ld8(p, m)), 8));
}

// Round to nearest even; NaN -> 0x7fc0 (as scalar::to_bf16).
inline __m512i bf16_bits(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i h = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_mov_epi32(h, nan, _mm512_set1_epi32(0x7fc0));
}

inline void st16(void* p, __m256i h, __mmask16 m) {
  if (m == kAll) {
    _mm256_storeu_si256(static_cast<__m256i*>(p), h);
  } else {
    _mm256_mask_storeu_epi16(p, m, h);
  }
}
inline void st(float* p, __m512 v, __mmask16 m) {
  if (m == kAll) {
    _mm512_storeu_ps(p, v);
  } else {
    _mm512_mask_storeu_ps(p, m, v);
  }
}
inline void st(bf16* p, __m512 v, __mmask16 m) { st16(p, _mm512_cvtepi32_epi16(bf16_bits(v)), m); }
// Round to nearest even, overflow to inf, subnormals kept (F16C does all three).
inline void st(f16* p, __m512 v, __mmask16 m) {
  st16(p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), m);
}

// exp(x) as in vec_rvv.h: range reduction to [-ln2/2, ln2/2], degree-6 polynomial,
// exponent by integer add; x < -87.33 gives exactly 0.
inline __m512 exp(__m512 x) {
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, splat(-87.33654f), _CMP_LT_OQ);
  x = _mm512_max_ps(_mm512_min_ps(x, splat(88.3762626647949f)), splat(-87.33654f));
  const __m512i n = _mm512_cvtps_epi32(_mm512_mul_ps(x, splat(1.44269504088896341f)));
  const __m512 nf = _mm512_cvtepi32_ps(n);
  __m512 r = _mm512_fnmadd_ps(nf, splat(0.693359375f), x);
  r = _mm512_fnmadd_ps(nf, splat(-2.12194440e-4f), r);
  __m512 p = _mm512_fmadd_ps(splat(1.9875691500e-4f), r, splat(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, splat(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, splat(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, splat(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, splat(5.0000001201e-1f));
  __m512 y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
  y = _mm512_add_ps(y, splat(1.0f));
  const __m512i bits = _mm512_add_epi32(_mm512_castps_si512(y), _mm512_slli_epi32(n, 23));
  return _mm512_mask_mov_ps(_mm512_castsi512_ps(bits), tiny, _mm512_setzero_ps());
}

// exp(x) for x <= 0 (a softmax's score minus its max), with exp's contract
// there: x log2(e) = n + f with n an integer and |f| <= 1/2 (f from an exact
// product by FMA plus the low part of log2(e), so the reduction adds no error
// that grows with |x|), 2^f by a degree-5 polynomial (least squares on
// [-1/2, 1/2]: relative error 1.1e-7), times 2^n by vscalefps; x < -87.33654
// (masked scores, -inf) gives exactly 0 (no subnormal results), NaN stays NaN:
// 11 instructions, not exp's 18. x > 0 is outside its contract.
inline __m512 exp_nonpositive(__m512 x) {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, splat(-87.33654f), _CMP_NLT_UQ);
  const __m512 log2e = splat(1.44269502e+00f);  // log2(e) = log2e + 1.925963e-8
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_fmadd_ps(x, splat(1.925963e-8f), _mm512_fmsub_ps(x, log2e, n));
  __m512 p = _mm512_fmadd_ps(splat(1.3218672248e-3f), f, splat(9.6716983244e-3f));
  p = _mm512_fmadd_ps(p, f, splat(5.5508930236e-2f));
  p = _mm512_fmadd_ps(p, f, splat(2.4022237957e-1f));
  p = _mm512_fmadd_ps(p, f, splat(6.9314688444e-1f));
  p = _mm512_fmadd_ps(p, f, splat(1.0f));
  return _mm512_maskz_scalef_ps(keep, p, n);
}

// tanh(x) = 1 - 2 / (exp(2x) + 1), saturating to 1 above 40.
inline __m512 tanh(__m512 x) {
  const __m512 e = exp(_mm512_mul_ps(x, splat(2.0f)));
  const __m512 t = _mm512_sub_ps(splat(1.0f), _mm512_div_ps(splat(2.0f), _mm512_add_ps(e, splat(1.0f))));
  return _mm512_mask_mov_ps(t, _mm512_cmp_ps_mask(x, splat(40.0f), _CMP_GT_OQ), splat(1.0f));
}

// erf as in vec_rvv.h: x + x P(x^2) for |x| <= 1, else sign(x) (1 - exp(Q(min(|x|, 3.95) - 2.5))).
inline __m512 erf(__m512 x) {
  const __m512 a = _mm512_abs_ps(x);
  const __m512 t = _mm512_mul_ps(a, a);
  __m512 p = splat(7.85386073e-05f);
  p = _mm512_fmadd_ps(p, t, splat(-8.01019371e-04f));
  p = _mm512_fmadd_ps(p, t, splat(5.18832775e-03f));
  p = _mm512_fmadd_ps(p, t, splat(-2.68538129e-02f));
  p = _mm512_fmadd_ps(p, t, splat(1.12835854e-01f));
  p = _mm512_fmadd_ps(p, t, splat(-3.76126260e-01f));
  p = _mm512_fmadd_ps(p, t, splat(1.28379166e-01f));
  const __m512 small = _mm512_fmadd_ps(p, a, a);
  const __m512 u = _mm512_sub_ps(_mm512_min_ps(a, splat(3.95f)), splat(2.5f));
  __m512 q = splat(1.62011258e-06f);
  q = _mm512_fmadd_ps(q, u, splat(-1.32878758e-05f));
  q = _mm512_fmadd_ps(q, u, splat(7.73762004e-05f));
  q = _mm512_fmadd_ps(q, u, splat(-4.20217548e-04f));
  q = _mm512_fmadd_ps(q, u, splat(2.16517528e-03f));
  q = _mm512_fmadd_ps(q, u, splat(-1.08584482e-02f));
  q = _mm512_fmadd_ps(q, u, splat(-9.43893671e-01f));
  q = _mm512_fmadd_ps(q, u, splat(-5.35268068e+00f));
  q = _mm512_fmadd_ps(q, u, splat(-7.80681515e+00f));
  const __m512 big = _mm512_sub_ps(splat(1.0f), exp(q));
  const __m512 r = _mm512_mask_mov_ps(small, _mm512_cmp_ps_mask(a, splat(1.0f), _CMP_GT_OQ), big);
  // copy x's sign onto r (NaN stays NaN: small is NaN for NaN x and |x| > 1 is false)
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
  return _mm512_castsi512_ps(_mm512_or_si512(
      _mm512_andnot_si512(_mm512_set1_epi32(INT32_MIN), _mm512_castps_si512(r)), sign));
}

}  // namespace avx512

template <int LMUL>
struct F32 {
  static_assert(LMUL == 1 || LMUL == 2 || LMUL == 4 || LMUL == 8, "LMUL 1, 2, 4 or 8");
  static constexpr int R = LMUL;  // zmm registers per vector
  static constexpr std::size_t N = 16 * static_cast<std::size_t>(LMUL);
  struct V {
    __m512 r[R];
  };
  // Packed bf16 pairs of the linear layers (see vec_rvv.h).
  struct U {
    __m512i r[R];
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
    for (int i = 0; i < R; ++i) r.r[i] = _mm512_set1_ps(s);
    return r;
  }
  static V add(V a, V b, std::size_t) { return zip(a, b, [](__m512 x, __m512 y) { return _mm512_add_ps(x, y); }); }
  static V sub(V a, V b, std::size_t) { return zip(a, b, [](__m512 x, __m512 y) { return _mm512_sub_ps(x, y); }); }
  static V mul(V a, V b, std::size_t) { return zip(a, b, [](__m512 x, __m512 y) { return _mm512_mul_ps(x, y); }); }
  static V div(V a, V b, std::size_t) { return zip(a, b, [](__m512 x, __m512 y) { return _mm512_div_ps(x, y); }); }
  // max(a, b) keeps a where either is NaN (the portable layer's `a < b ? b : a`).
  static V max(V a, V b, std::size_t) { return zip(a, b, [](__m512 x, __m512 y) { return _mm512_max_ps(y, x); }); }
  static V mul(V a, float s, std::size_t) {
    const __m512 k = _mm512_set1_ps(s);
    return map(a, [k](__m512 x) { return _mm512_mul_ps(x, k); });
  }
  static V add(V a, float s, std::size_t) {
    const __m512 k = _mm512_set1_ps(s);
    return map(a, [k](__m512 x) { return _mm512_add_ps(x, k); });
  }
  static V fmacc(V acc, V a, V b, std::size_t) {
    for (int i = 0; i < R; ++i) acc.r[i] = _mm512_fmadd_ps(a.r[i], b.r[i], acc.r[i]);
    return acc;
  }
  static V fmacc_tu(V acc, V a, V b, std::size_t vl) {
    if (vl == N) return fmacc(acc, a, b, vl);
    for (int i = 0; i < R; ++i)
      acc.r[i] = _mm512_mask3_fmadd_ps(a.r[i], b.r[i], acc.r[i], avx512::lanes(vl, i));
    return acc;
  }
  // acc + s * b
  static V fmacc(V acc, float s, V b, std::size_t) {
    const __m512 k = _mm512_set1_ps(s);
    for (int i = 0; i < R; ++i) acc.r[i] = _mm512_fmadd_ps(k, b.r[i], acc.r[i]);
    return acc;
  }
  RVVK_ALWAYS_INLINE static float reduce_sum(V v, std::size_t vl) {
    if (vl == N) {
      for (int w = R / 2; w > 0; w /= 2)
        for (int i = 0; i < w; ++i) v.r[i] = _mm512_add_ps(v.r[i], v.r[i + w]);
      return _mm512_reduce_add_ps(v.r[0]);
    }
    __m512 acc = _mm512_maskz_mov_ps(avx512::lanes(vl, 0), v.r[0]);
    for (int i = 1; i < R; ++i) acc = _mm512_mask_add_ps(acc, avx512::lanes(vl, i), acc, v.r[i]);
    return _mm512_reduce_add_ps(acc);
  }
  RVVK_ALWAYS_INLINE static float reduce_max(V v, std::size_t vl) {
    const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
    __m512 acc = _mm512_mask_mov_ps(ninf, avx512::lanes(vl, 0), v.r[0]);
    for (int i = 1; i < R; ++i) acc = _mm512_mask_max_ps(acc, avx512::lanes(vl, i), acc, v.r[i]);
    return _mm512_reduce_max_ps(acc);
  }
  static V exp(V x, std::size_t) { return map(x, [](__m512 v) { return avx512::exp(v); }); }
  static V exp_nonpositive(V x, std::size_t) {
    return map(x, [](__m512 v) { return avx512::exp_nonpositive(v); });
  }
  static V tanh(V x, std::size_t) { return map(x, [](__m512 v) { return avx512::tanh(v); }); }
  static V erf(V x, std::size_t) { return map(x, [](__m512 v) { return avx512::erf(v); }); }
  static V abs(V v, std::size_t) { return map(v, [](__m512 x) { return _mm512_abs_ps(x); }); }

  static U load_u32(const std::uint32_t* p, std::size_t vl) {
    U r;
    for (int i = 0; i < R; ++i) r.r[i] = _mm512_maskz_loadu_epi32(avx512::lanes(vl, i), p + 16 * i);
    return r;
  }
  static V bf16_low(U w, std::size_t) {
    V r;
    for (int i = 0; i < R; ++i) r.r[i] = _mm512_castsi512_ps(_mm512_slli_epi32(w.r[i], 16));
    return r;
  }
  static V bf16_high(U w, std::size_t) {
    V r;
    const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    for (int i = 0; i < R; ++i) r.r[i] = _mm512_castsi512_ps(_mm512_and_si512(w.r[i], hi));
    return r;
  }
  // p[i] = clamp(round_half_even(v[i]), -127, 127) as int8 (finite v; MXCSR rounding).
  static void store_i8_rne(std::int8_t* p, V v, std::size_t vl) {
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    for (int i = 0; i < R; ++i) {
      const __mmask16 m = avx512::lanes(vl, i);
      if (!m) break;
      const __m512i q = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(v.r[i]), lo), hi);
      _mm512_mask_cvtepi32_storeu_epi8(p + 16 * i, m, q);
    }
  }

  template <class T>
  RVVK_ALWAYS_INLINE static V load(const T* p, std::size_t vl) {
    V r;
    if (vl == N) {  // whole vectors: no mask arithmetic
      for (int i = 0; i < R; ++i) r.r[i] = avx512::ld(p + 16 * i, avx512::kAll);
      return r;
    }
    for (int i = 0; i < R; ++i) r.r[i] = avx512::ld(p + 16 * i, avx512::lanes(vl, i));
    return r;
  }
  template <class T>
  RVVK_ALWAYS_INLINE static void store(T* p, V v, std::size_t vl) {
    if (vl == N) {
      for (int i = 0; i < R; ++i) avx512::st(p + 16 * i, v.r[i], avx512::kAll);
      return;
    }
    for (int i = 0; i < R; ++i) {
      const __mmask16 m = avx512::lanes(vl, i);
      if (!m) break;
      avx512::st(p + 16 * i, v.r[i], m);
    }
  }
  // Strided access (element i at p[i * stride], stride in elements, may be negative):
  // through a contiguous buffer.
  template <class T>
  static V load_strided(const T* p, std::ptrdiff_t stride, std::size_t vl) {
    alignas(64) float buf[N];
    for (std::size_t i = 0; i < vl; ++i)
      buf[i] = scalar::to_f32(p[static_cast<std::ptrdiff_t>(i) * stride]);
    return load(static_cast<const float*>(buf), vl);
  }
  template <class T>
  static void store_strided(T* p, std::ptrdiff_t stride, V v, std::size_t vl) {
    alignas(64) float buf[N];
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
    __m512i r[R];
  };
  struct W {
    __m128i r[R];
  };
  static std::size_t setvl(std::size_t n) { return n < N ? n : N; }
  static constexpr std::size_t vlmax() { return N; }
  static V zero(std::size_t) {
    V v;
    for (int i = 0; i < R; ++i) v.r[i] = _mm512_setzero_si512();
    return v;
  }
  static W load(const std::int8_t* p, std::size_t vl) {
    W w;
    for (int i = 0; i < R; ++i) w.r[i] = _mm_maskz_loadu_epi8(avx512::lanes(vl, i), p + 16 * i);
    return w;
  }
  static V macc(V acc, std::int8_t a, W w, std::size_t) {
    const __m256i k = _mm256_set1_epi16(a);
    for (int i = 0; i < R; ++i) {
      const __m256i prod = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(w.r[i]), k);
      acc.r[i] = _mm512_add_epi32(acc.r[i], _mm512_cvtepi16_epi32(prod));
    }
    return acc;
  }
  static V macc2(V acc, std::int8_t a0, W w0, std::int8_t a1, W w1, std::size_t) {
    const __m256i k0 = _mm256_set1_epi16(a0), k1 = _mm256_set1_epi16(a1);
    for (int i = 0; i < R; ++i) {
      const __m256i prod = _mm256_add_epi16(_mm256_mullo_epi16(_mm256_cvtepi8_epi16(w0.r[i]), k0),
                                            _mm256_mullo_epi16(_mm256_cvtepi8_epi16(w1.r[i]), k1));
      acc.r[i] = _mm512_add_epi32(acc.r[i], _mm512_cvtepi16_epi32(prod));
    }
    return acc;
  }
  static typename F32<LMUL>::V to_f32(V v, std::size_t) {
    typename F32<LMUL>::V r;
    for (int i = 0; i < R; ++i) r.r[i] = _mm512_cvtepi32_ps(v.r[i]);
    return r;
  }
};

}  // namespace rvvk::RVVK_NS::vec
