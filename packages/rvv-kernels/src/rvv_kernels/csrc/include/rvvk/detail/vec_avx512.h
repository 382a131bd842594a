// x86-64 AVX-512 implementation of the vector layer (see vec.h for the contract).
//
// The host-side counterpart of vec_rvv.h, so the same kernel sources run vectorised
// on x86 servers (and the x86 side-by-side benchmark measures kernels rather than
// an emulation). It behaves as a vector unit with VLEN 512: F32<L>::V is L zmm
// registers (16 L fp32 lanes); setvl/vlmax as on RVV; loads and stores touch
// exactly `vl` elements (AVX-512 masked moves, which also suppress faults on the
// masked-off lanes); arithmetic runs on all lanes (tail agnostic); the `_tu` forms,
// reductions and stores honour vl. F32<L> and I8Acc<L> are vec_x86.h's over this
// file's register traits avx512::Reg; exp/tanh/erf are vec_math.h's (the same
// operations and constants as on RVV), so every vector variant rounds alike.
//
// Compiled only for the x86_avx512 variant (-mavx512f -mavx512bw -mavx512vl
// -mavx512dq -mfma -mf16c); the dispatcher runs it only on CPUs (and kernels) with
// AVX-512F/BW/VL/DQ enabled.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "rvvk/detail/scalar.h"
#include "rvvk/detail/vec_math.h"
#include "rvvk/detail/vec_x86.h"

namespace rvvk::RVVK_NS::vec {

// VLEN of the vector unit this layer acts as (vec.h adds vlen_bits(), kIsRvv, kHasZvfh).
inline constexpr std::size_t kVlenBits = 512;

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

// Register traits of one zmm register for vec_x86.h and vec_math.h (`vl` ignored):
// a register's active lanes are a mask.
struct Reg {
  using V = __m512;
  using I = __m512i;
  using M = __mmask16;
  using Lanes = __mmask16;
  using W = __m128i;    // 16 int8
  using I16 = __m256i;  // 16 int16
  static constexpr std::size_t kLanes = 16;
  static constexpr Lanes kAll = avx512::kAll;
  static Lanes lanes(std::size_t vl, int i) { return avx512::lanes(vl, i); }
  static bool any(Lanes m) { return m != 0; }

  static V splat(float c, std::size_t = 0) { return _mm512_set1_ps(c); }
  static V add(V a, V b, std::size_t = 0) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b, std::size_t = 0) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b, std::size_t = 0) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b, std::size_t = 0) { return _mm512_div_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V fmadd(V a, V b, V c, std::size_t = 0) { return _mm512_fmadd_ps(a, b, c); }
  static V mul_s(V a, float c, std::size_t) { return _mm512_mul_ps(a, splat(c)); }
  static V add_s(V a, float c, std::size_t) { return _mm512_add_ps(a, splat(c)); }
  static V sub_s(V a, float c, std::size_t) { return _mm512_sub_ps(a, splat(c)); }
  static V rsub_s(V a, float c, std::size_t) { return _mm512_sub_ps(splat(c), a); }
  static V rdiv_s(V a, float c, std::size_t) { return _mm512_div_ps(splat(c), a); }
  static V min_s(V a, float c, std::size_t) { return _mm512_min_ps(a, splat(c)); }
  static V max_s(V a, float c, std::size_t) { return _mm512_max_ps(a, splat(c)); }
  static V fmacc_s(V acc, float c, V b, std::size_t) { return _mm512_fmadd_ps(splat(c), b, acc); }
  static V nmsac_s(V acc, float c, V b, std::size_t) { return _mm512_fnmadd_ps(b, splat(c), acc); }
  static V abs(V a, std::size_t = 0) { return _mm512_abs_ps(a); }
  static V copysign(V a, V b, std::size_t) {
    const __m512i sign_bit = _mm512_set1_epi32(INT32_MIN);
    const __m512i sign = _mm512_and_si512(_mm512_castps_si512(b), sign_bit);
    return _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_andnot_si512(sign_bit, _mm512_castps_si512(a)), sign));
  }
  static I cvt_rne(V a, std::size_t) { return _mm512_cvtps_epi32(a); }
  static V to_f32(I n, std::size_t) { return _mm512_cvtepi32_ps(n); }
  static V add_exponent(V y, I n, std::size_t) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(y), _mm512_slli_epi32(n, 23)));
  }
  static M lt_s(V a, float c, std::size_t) { return _mm512_cmp_ps_mask(a, splat(c), _CMP_LT_OQ); }
  static M gt_s(V a, float c, std::size_t) { return _mm512_cmp_ps_mask(a, splat(c), _CMP_GT_OQ); }
  static V zero_where(V a, M m, std::size_t) { return _mm512_mask_mov_ps(a, m, _mm512_setzero_ps()); }
  static V set_where(V a, M m, float c, std::size_t) { return _mm512_mask_mov_ps(a, m, splat(c)); }
  static V select(M m, V a, V b, std::size_t) { return _mm512_mask_mov_ps(b, m, a); }
  // exp(x) for x <= 0 (a softmax's score minus its max), with exp's contract
  // there: x log2(e) = n + f with n an integer and |f| <= 1/2 (f from an exact
  // product by FMA plus the low part of log2(e), so the reduction adds no error
  // that grows with |x|), 2^f by math::coef::kExp2P, times 2^n by vscalefps;
  // x < -87.33654 (masked scores, -inf) gives exactly 0 (no subnormal results),
  // NaN stays NaN: 11 instructions, not exp's 18. x > 0 is outside its contract.
  static V exp_nonpositive(V x) {
    namespace c = math::coef;
    const __mmask16 keep = _mm512_cmp_ps_mask(x, splat(c::kExpMin), _CMP_NLT_UQ);
    const __m512 log2e = splat(c::kLog2eHi);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_fmadd_ps(x, splat(c::kLog2eLo), _mm512_fmsub_ps(x, log2e, n));
    __m512 p = _mm512_fmadd_ps(splat(c::kExp2P[0]), f, splat(c::kExp2P[1]));
    p = math::horner_steps<Reg, 2>(p, f, c::kExp2P, 0, std::make_index_sequence<4>());
    return _mm512_maskz_scalef_ps(keep, p, n);
  }

  template <class T>
  static V ld(const T* p, Lanes m) {
    return avx512::ld(p, m);
  }
  template <class T>
  static V load_part(const T* p, Lanes m) {
    return avx512::ld(p, m);
  }
  template <class T>
  static void st(T* p, V v, Lanes m) {
    avx512::st(p, v, m);
  }
  static V fmacc_part(V acc, V a, V b, Lanes m) { return _mm512_mask3_fmadd_ps(a, b, acc, m); }
  static V keep(V v, Lanes m) { return _mm512_maskz_mov_ps(m, v); }
  static V add_part(V acc, V v, Lanes m) { return _mm512_mask_add_ps(acc, m, acc, v); }
  static V max_first(V v, Lanes m) {
    return _mm512_mask_mov_ps(_mm512_set1_ps(-__builtin_inff()), m, v);
  }
  static V max_part(V acc, V v, Lanes m) { return _mm512_mask_max_ps(acc, m, acc, v); }
  static float hsum(V v) { return _mm512_reduce_add_ps(v); }
  static float hmax(V v) { return _mm512_reduce_max_ps(v); }

  static I load_u32_part(const std::uint32_t* p, Lanes m) { return _mm512_maskz_loadu_epi32(m, p); }
  static V bf16_low(I w) { return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)); }
  static V bf16_high(I w) {
    return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static void store_i8_part(std::int8_t* p, V v, Lanes m) {
    const __m512i q = _mm512_min_epi32(
        _mm512_max_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
    _mm512_mask_cvtepi32_storeu_epi8(p, m, q);
  }

  static I zero_i32() { return _mm512_setzero_si512(); }
  static W load_i8_part(const std::int8_t* p, Lanes m) { return _mm_maskz_loadu_epi8(m, p); }
  static I16 splat_i16(std::int8_t a) { return _mm256_set1_epi16(a); }
  static I16 mul_i8(W w, I16 k) { return _mm256_mullo_epi16(_mm256_cvtepi8_epi16(w), k); }
  static I16 add_i16(I16 a, I16 b) { return _mm256_add_epi16(a, b); }
  static I acc_i16(I acc, I16 prod) { return _mm512_add_epi32(acc, _mm512_cvtepi16_epi32(prod)); }
};

// tanh of one register (extend attention's logit cap).
inline __m512 tanh(__m512 x) { return math::tanh<Reg>(x, 16); }

}  // namespace avx512

template <int LMUL>
using F32 = x86::F32<avx512::Reg, LMUL>;
template <int LMUL>
using I8Acc = x86::I8Acc<avx512::Reg, LMUL>;

}  // namespace rvvk::RVVK_NS::vec
