// x86-64 AVX2 implementation of the vector layer (see vec.h for the contract).
//
// For x86-64 CPUs with AVX2 but without AVX-512: the same
// kernel sources vectorised with AVX2 + FMA + F16C, acting as a vector unit with
// VLEN 256: F32<L>::V is L ymm registers (8 L fp32 lanes); setvl/vlmax as on RVV.
// Loads and stores touch exactly `vl` elements: fp32/int32 tails by AVX masked
// moves (which suppress faults on the masked-off lanes), 8- and 16-bit tails
// through a small buffer (AVX2 has no masked byte or word moves); arithmetic
// runs on all lanes (tail agnostic), the `_tu` forms, reductions and stores
// honour vl. F32<L> and I8Acc<L> are vec_x86.h's over this file's register
// traits avx2::Reg; exp/tanh/erf are vec_math.h's (the same operations and
// constants as on RVV), so every vector variant rounds alike.
//
// Compiled only for the x86_avx2 variant (-mavx2 -mfma -mf16c); the dispatcher
// runs it only on CPUs with AVX2, FMA and F16C enabled.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "rvvk/detail/scalar.h"
#include "rvvk/detail/vec_math.h"
#include "rvvk/detail/vec_x86.h"

namespace rvvk::RVVK_NS::vec {

// VLEN of the vector unit this layer acts as (vec.h adds vlen_bits(), kIsRvv, kHasZvfh).
inline constexpr std::size_t kVlenBits = 256;

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

// Register traits of one ymm register for vec_x86.h and vec_math.h (`vl` ignored):
// a register's active lanes are a count n <= 8.
struct Reg {
  using V = __m256;
  using I = __m256i;
  using M = __m256;  // all-ones lanes where true
  using Lanes = std::size_t;
  using W = __m128i;    // 8 int8 in the low half
  using I16 = __m128i;  // 8 int16
  static constexpr std::size_t kLanes = 8;
  static constexpr Lanes kAll = 8;
  static Lanes lanes(std::size_t vl, int i) { return active(vl, i); }
  static bool any(Lanes n) { return n != 0; }

  static V splat(float c, std::size_t = 0) { return _mm256_set1_ps(c); }
  static V add(V a, V b, std::size_t = 0) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b, std::size_t = 0) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b, std::size_t = 0) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b, std::size_t = 0) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V fmadd(V a, V b, V c, std::size_t = 0) { return _mm256_fmadd_ps(a, b, c); }
  static V mul_s(V a, float c, std::size_t) { return _mm256_mul_ps(a, splat(c)); }
  static V add_s(V a, float c, std::size_t) { return _mm256_add_ps(a, splat(c)); }
  static V sub_s(V a, float c, std::size_t) { return _mm256_sub_ps(a, splat(c)); }
  static V rsub_s(V a, float c, std::size_t) { return _mm256_sub_ps(splat(c), a); }
  static V rdiv_s(V a, float c, std::size_t) { return _mm256_div_ps(splat(c), a); }
  static V min_s(V a, float c, std::size_t) { return _mm256_min_ps(a, splat(c)); }
  static V max_s(V a, float c, std::size_t) { return _mm256_max_ps(a, splat(c)); }
  static V fmacc_s(V acc, float c, V b, std::size_t) { return _mm256_fmadd_ps(splat(c), b, acc); }
  static V nmsac_s(V acc, float c, V b, std::size_t) { return _mm256_fnmadd_ps(b, splat(c), acc); }
  static V abs(V a, std::size_t = 0) { return _mm256_andnot_ps(splat(-0.0f), a); }
  static V copysign(V a, V b, std::size_t) {
    return _mm256_or_ps(abs(a), _mm256_and_ps(b, splat(-0.0f)));
  }
  static I cvt_rne(V a, std::size_t) { return _mm256_cvtps_epi32(a); }
  static V to_f32(I n, std::size_t) { return _mm256_cvtepi32_ps(n); }
  static V add_exponent(V y, I n, std::size_t) {
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(y), _mm256_slli_epi32(n, 23)));
  }
  static M lt_s(V a, float c, std::size_t) { return _mm256_cmp_ps(a, splat(c), _CMP_LT_OQ); }
  static M gt_s(V a, float c, std::size_t) { return _mm256_cmp_ps(a, splat(c), _CMP_GT_OQ); }
  static V zero_where(V a, M m, std::size_t) { return _mm256_andnot_ps(m, a); }
  static V set_where(V a, M m, float c, std::size_t) { return _mm256_blendv_ps(a, splat(c), m); }
  static V select(M m, V a, V b, std::size_t) { return _mm256_blendv_ps(b, a, m); }
  // exp(x) for x <= 0 (a softmax's score minus its max), with exp's contract
  // there: x log2(e) = n + f with n an integer and |f| <= 1/2 (f from an exact
  // product by FMA plus the low part of log2(e), so the reduction adds no error
  // that grows with |x|), 2^f by math::coef::kExp2P, times 2^n built as a
  // float's exponent field; x < -87.33654 (masked scores, -inf) gives exactly 0,
  // so results are normal numbers or 0; NaN stays NaN. 15 instructions against
  // exp's 19. x > 0 is outside its contract.
  static V exp_nonpositive(V x) {
    namespace c = math::coef;
    const __m256 tiny = _mm256_cmp_ps(x, splat(c::kExpMin), _CMP_LT_OQ);
    const __m256 log2e = splat(c::kLog2eHi);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_fmadd_ps(x, splat(c::kLog2eLo), _mm256_fmsub_ps(x, log2e, n));
    __m256 p = _mm256_fmadd_ps(splat(c::kExp2P[0]), f, splat(c::kExp2P[1]));
    p = math::horner_steps<Reg, 2>(p, f, c::kExp2P, 0, std::make_index_sequence<4>());
    // 2^n = (n + 127) << 23 as a float: n >= -126 wherever x is not tiny
    const __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
  }

  template <class T>
  static V ld(const T* p, Lanes n) {
    return avx2::ld(p, n);
  }
  template <class T>
  static V load_part(const T* p, Lanes n) {
    return n ? avx2::ld(p, n) : _mm256_setzero_ps();
  }
  template <class T>
  static void st(T* p, V v, Lanes n) {
    avx2::st(p, v, n);
  }
  static V fmacc_part(V acc, V a, V b, Lanes n) {
    return _mm256_blendv_ps(acc, _mm256_fmadd_ps(a, b, acc), _mm256_castsi256_ps(mask32(n)));
  }
  static V keep(V v, Lanes n) { return _mm256_and_ps(v, _mm256_castsi256_ps(mask32(n))); }
  static V add_part(V acc, V v, Lanes n) { return _mm256_add_ps(acc, keep(v, n)); }
  // maxps(x, acc) keeps acc where x is NaN, as the other layers' reductions
  static V max_part(V acc, V v, Lanes n) {
    return _mm256_blendv_ps(acc, _mm256_max_ps(v, acc), _mm256_castsi256_ps(mask32(n)));
  }
  static V max_first(V v, Lanes n) { return max_part(_mm256_set1_ps(-__builtin_inff()), v, n); }
  static float hsum(V v) { return avx2::hsum(v); }
  static float hmax(V v) { return avx2::hmax(v); }

  static I load_u32_part(const std::uint32_t* p, Lanes n) {
    return n == 8 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                  : _mm256_maskload_epi32(reinterpret_cast<const int*>(p), mask32(n));
  }
  static V bf16_low(I w) { return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)); }
  static V bf16_high(I w) {
    return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static void store_i8_part(std::int8_t* p, V v, Lanes n) {
    const __m256i q = _mm256_min_epi32(
        _mm256_max_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    const __m128i b = _mm_packs_epi16(w, w);  // bytes 0-7: the 8 lanes in order
    if (n == 8) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(p), b);
    } else {
      alignas(16) std::int8_t buf[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(buf), b);
      std::memcpy(p, buf, n);
    }
  }

  static I zero_i32() { return _mm256_setzero_si256(); }
  static W load_i8_part(const std::int8_t* p, Lanes n) { return n ? ld8(p, n) : _mm_setzero_si128(); }
  static I16 splat_i16(std::int8_t a) { return _mm_set1_epi16(a); }
  static I16 mul_i8(W w, I16 k) { return _mm_mullo_epi16(_mm_cvtepi8_epi16(w), k); }
  static I16 add_i16(I16 a, I16 b) { return _mm_add_epi16(a, b); }
  static I acc_i16(I acc, I16 prod) { return _mm256_add_epi32(acc, _mm256_cvtepi16_epi32(prod)); }
};

}  // namespace avx2

template <int LMUL>
using F32 = x86::F32<avx2::Reg, LMUL>;
template <int LMUL>
using I8Acc = x86::I8Acc<avx2::Reg, LMUL>;

}  // namespace rvvk::RVVK_NS::vec
