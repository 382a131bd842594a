// RVV 1.0 implementation of the vector layer (see vec.h for the contract).
//
// F32<L> and I8Acc<L> are templates over rvv::Lmul<L>, the types of one LMUL
// and the few intrinsics whose names carry the type (setvl, splats, loads,
// reinterprets); everything else calls the overloaded `__riscv_*` intrinsics,
// which pick the instruction from the argument types. exp, tanh and erf are
// vec_math.h's over rvv::Reg<L>.
#pragma once

#include <riscv_vector.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "rvvk/detail/scalar.h"
#include "rvvk/detail/vec_math.h"

namespace rvvk::RVVK_NS::vec {

inline constexpr bool kIsRvv = true;
#if defined(__riscv_zvfh)
inline constexpr bool kHasZvfh = true;
#else
inline constexpr bool kHasZvfh = false;
#endif

// VLEN in bits of the CPU running this code.
inline std::size_t vlen_bits() { return __riscv_vsetvlmax_e8m1() * 8; }

// LMUL of the extend kernel's matrix products: the longest vectors (three
// accumulators and the operand fill the 32 registers; scalars live apart).
inline constexpr int kMatrixLmul = 8;

namespace rvv {

// Lmul<L>: fp32 (V), uint32 (U) and int32 (I) vectors at LMUL L, the 16-bit (H16,
// I16) and 8-bit (U8, I8) vectors with the same element count, the mask type M,
// and the intrinsics that cannot be overloaded on their arguments.
template <int L>
struct Lmul;

#if defined(__riscv_zvfh)
#define RVVK_LMUL_F16(H)                                                                  \
  using F16 = vfloat16##H##_t;                                                            \
  static F16 le_f16(const _Float16* p, std::size_t vl) { return __riscv_vle16_v_f16##H(p, vl); } \
  static F16 as_f16(H16 h) { return __riscv_vreinterpret_v_u16##H##_f16##H(h); }          \
  static H16 as_u16(F16 h) { return __riscv_vreinterpret_v_f16##H##_u16##H(h); }
#else
#define RVVK_LMUL_F16(H)
#endif

#define RVVK_LMUL(L, LM, H, Q, B)                                                           \
  template <>                                                                              \
  struct Lmul<L> {                                                                         \
    using V = vfloat32##LM##_t;                                                             \
    using U = vuint32##LM##_t;                                                              \
    using I = vint32##LM##_t;                                                               \
    using H16 = vuint16##H##_t;                                                            \
    using I16 = vint16##H##_t;                                                             \
    using U8 = vuint8##Q##_t;                                                              \
    using I8 = vint8##Q##_t;                                                               \
    using M = vbool##B##_t;                                                                \
    static std::size_t setvl(std::size_t n) { return __riscv_vsetvl_e32##LM(n); }           \
    static std::size_t vlmax() { return __riscv_vsetvlmax_e32##LM(); }                      \
    static V splat(float x, std::size_t vl) { return __riscv_vfmv_v_f_f32##LM(x, vl); }     \
    static U splat_u(std::uint32_t x, std::size_t vl) { return __riscv_vmv_v_x_u32##LM(x, vl); } \
    static I splat_i(std::int32_t x, std::size_t vl) { return __riscv_vmv_v_x_i32##LM(x, vl); } \
    static V le_f32(const float* p, std::size_t vl) { return __riscv_vle32_v_f32##LM(p, vl); } \
    static U le_u32(const std::uint32_t* p, std::size_t vl) { return __riscv_vle32_v_u32##LM(p, vl); } \
    static H16 le_u16(const std::uint16_t* p, std::size_t vl) { return __riscv_vle16_v_u16##H(p, vl); } \
    static I8 le_i8(const std::int8_t* p, std::size_t vl) { return __riscv_vle8_v_i8##Q(p, vl); } \
    static U8 le_u8(const std::uint8_t* p, std::size_t vl) { return __riscv_vle8_v_u8##Q(p, vl); } \
    static V lse_f32(const float* p, std::ptrdiff_t bytes, std::size_t vl) {               \
      return __riscv_vlse32_v_f32##LM(p, bytes, vl);                                        \
    }                                                                                      \
    static H16 lse_u16(const std::uint16_t* p, std::ptrdiff_t bytes, std::size_t vl) {     \
      return __riscv_vlse16_v_u16##H(p, bytes, vl);                                        \
    }                                                                                      \
    static V as_f(U u) { return __riscv_vreinterpret_v_u32##LM##_f32##LM(u); }               \
    static V as_f(I i) { return __riscv_vreinterpret_v_i32##LM##_f32##LM(i); }               \
    static U as_u(V v) { return __riscv_vreinterpret_v_f32##LM##_u32##LM(v); }               \
    static I as_i(V v) { return __riscv_vreinterpret_v_f32##LM##_i32##LM(v); }               \
    RVVK_LMUL_F16(H)                                                                       \
  };
RVVK_LMUL(1, m1, mf2, mf4, 32)
RVVK_LMUL(2, m2, m1, mf2, 16)
RVVK_LMUL(4, m4, m2, m1, 8)
RVVK_LMUL(8, m8, m4, m2, 4)
#undef RVVK_LMUL
#undef RVVK_LMUL_F16

// Register traits of one LMUL-L register group for vec_math.h: each primitive
// is one instruction.
template <int L>
struct Reg : Lmul<L> {
  using T = Lmul<L>;
  using V = typename T::V;
  using I = typename T::I;
  using M = typename T::M;
  static V mul(V a, V b, std::size_t vl) { return __riscv_vfmul(a, b, vl); }
  static V mul_s(V a, float c, std::size_t vl) { return __riscv_vfmul(a, c, vl); }
  static V add_s(V a, float c, std::size_t vl) { return __riscv_vfadd(a, c, vl); }
  static V sub_s(V a, float c, std::size_t vl) { return __riscv_vfsub(a, c, vl); }
  static V rsub_s(V a, float c, std::size_t vl) { return __riscv_vfrsub(a, c, vl); }
  static V rdiv_s(V a, float c, std::size_t vl) { return __riscv_vfrdiv(a, c, vl); }
  static V min_s(V a, float c, std::size_t vl) { return __riscv_vfmin(a, c, vl); }
  static V max_s(V a, float c, std::size_t vl) { return __riscv_vfmax(a, c, vl); }
  static V fmadd(V a, V b, V c, std::size_t vl) { return __riscv_vfmadd(a, b, c, vl); }
  static V fmacc_s(V acc, float c, V b, std::size_t vl) { return __riscv_vfmacc(acc, c, b, vl); }
  static V nmsac_s(V acc, float c, V b, std::size_t vl) { return __riscv_vfnmsac(acc, c, b, vl); }
  static V abs(V a, std::size_t vl) { return __riscv_vfabs(a, vl); }
  static V copysign(V a, V b, std::size_t vl) { return __riscv_vfsgnj(a, b, vl); }
  static I cvt_rne(V a, std::size_t vl) { return __riscv_vfcvt_x(a, vl); }  // frm: RNE
  static V to_f32(I n, std::size_t vl) { return __riscv_vfcvt_f(n, vl); }
  static V add_exponent(V y, I n, std::size_t vl) {
    return T::as_f(__riscv_vadd(T::as_i(y), __riscv_vsll(n, 23, vl), vl));
  }
  static M lt_s(V a, float c, std::size_t vl) { return __riscv_vmflt(a, c, vl); }
  static M gt_s(V a, float c, std::size_t vl) { return __riscv_vmfgt(a, c, vl); }
  static V zero_where(V a, M m, std::size_t vl) { return __riscv_vfmerge(a, 0.0f, m, vl); }
  static V set_where(V a, M m, float c, std::size_t vl) { return __riscv_vfmerge(a, c, m, vl); }
  static V select(M m, V a, V b, std::size_t vl) { return __riscv_vmerge(b, a, m, vl); }
};

}  // namespace rvv

// F32<L>: fp32 lanes at LMUL L.
template <int L>
struct F32 {
  using T = rvv::Lmul<L>;
  using V = typename T::V;
  using U = typename T::U;
  using H16 = typename T::H16;
  using U8 = typename T::U8;
  using Mask = typename T::M;
  static std::size_t setvl(std::size_t n) { return T::setvl(n); }
  static std::size_t vlmax() { return T::vlmax(); }
  static V splat(float x, std::size_t vl) { return T::splat(x, vl); }
  static V add(V a, V b, std::size_t vl) { return __riscv_vfadd(a, b, vl); }
  static V sub(V a, V b, std::size_t vl) { return __riscv_vfsub(a, b, vl); }
  static V mul(V a, V b, std::size_t vl) { return __riscv_vfmul(a, b, vl); }
  static V mul(V a, float s, std::size_t vl) { return __riscv_vfmul(a, s, vl); }
  static V fmacc(V acc, V a, V b, std::size_t vl) { return __riscv_vfmacc(acc, a, b, vl); }
  static V fmacc_tu(V acc, V a, V b, std::size_t vl) { return __riscv_vfmacc_tu(acc, a, b, vl); }
  static float reduce_sum(V v, std::size_t vl) {
    const vfloat32m1_t zero = __riscv_vfmv_v_f_f32m1(0.0f, 1);
    return __riscv_vfmv_f(__riscv_vfredusum(v, zero, vl));
  }
  static V add(V a, float s, std::size_t vl) { return __riscv_vfadd(a, s, vl); }
  static V max(V a, V b, std::size_t vl) { return __riscv_vfmax(a, b, vl); }
  static V div(V a, V b, std::size_t vl) { return __riscv_vfdiv(a, b, vl); }
  // acc + s * b
  static V fmacc(V acc, float s, V b, std::size_t vl) { return __riscv_vfmacc(acc, s, b, vl); }
  static float reduce_max(V v, std::size_t vl) {
    const vfloat32m1_t init = __riscv_vfmv_v_f_f32m1(-__builtin_inff(), 1);
    return __riscv_vfmv_f(__riscv_vfredmax(v, init, vl));
  }
  static V exp(V x, std::size_t vl) { return math::exp<rvv::Reg<L>>(x, vl); }
  // exp(x) for x <= 0 (softmax scores minus their max), with exp's contract there:
  // x log2(e) = n + f, |f| <= 1/2 (f from an exact product by FMA plus the low
  // part of log2(e): no reduction error growing with |x|), 2^f by
  // math::coef::kExp2P (relative error about 2e-7), 2^n as a float's exponent
  // field; x < -87.33 gives exactly 0. x > 0 is outside its contract.
  static V exp_nonpositive(V x, std::size_t vl) {
    namespace c = math::coef;
    const Mask tiny = __riscv_vmflt(x, c::kExpMin, vl);
    // n to nearest (frm is RNE)
    const typename T::I n = __riscv_vfcvt_x(__riscv_vfmul(x, c::kLog2eHi, vl), vl);
    V f = __riscv_vfmsub(x, c::kLog2eHi, __riscv_vfcvt_f(n, vl), vl);
    f = __riscv_vfmacc(f, c::kLog2eLo, x, vl);
    // Horner steps as a multiply then an add of a scalar: no splat constants to
    // hoist (and spill) in a caller's loop; as many instructions as vfmv+vfmadd.
    V p = __riscv_vfadd(__riscv_vfmul(f, c::kExp2P[0], vl), c::kExp2P[1], vl);
    p = __riscv_vfadd(__riscv_vfmul(p, f, vl), c::kExp2P[2], vl);
    p = __riscv_vfadd(__riscv_vfmul(p, f, vl), c::kExp2P[3], vl);
    p = __riscv_vfadd(__riscv_vfmul(p, f, vl), c::kExp2P[4], vl);
    p = __riscv_vfadd(__riscv_vfmul(p, f, vl), c::kExp2P[5], vl);
    // 2^n = (n + 127) << 23 as a float: n >= -126 wherever x is not tiny
    const typename T::I e = __riscv_vsll(__riscv_vadd(n, 127, vl), 23, vl);
    const V y = __riscv_vfmul(p, T::as_f(e), vl);
    return __riscv_vfmerge(y, 0.0f, tiny, vl);
  }
  static V tanh(V x, std::size_t vl) { return math::tanh<rvv::Reg<L>>(x, vl); }
  static V erf(V x, std::size_t vl) { return math::erf<rvv::Reg<L>>(x, vl); }
  static V abs(V v, std::size_t vl) { return __riscv_vfabs(v, vl); }

  // bf16: widen by shifting into the high half; narrow with RNE.
  static V widen_bf16(H16 h, std::size_t vl) {
    return T::as_f(__riscv_vsll(__riscv_vzext_vf2(h, vl), 16, vl));
  }
  static H16 narrow_bf16(V v, std::size_t vl) {
    U u = T::as_u(v);
    const U lsb = __riscv_vand(__riscv_vsrl(u, 16, vl), 1, vl);
    u = __riscv_vadd(u, __riscv_vadd(lsb, 0x7fff, vl), vl);
    const H16 h = __riscv_vnsrl(u, 16, vl);
    const Mask nan = __riscv_vmfne(v, v, vl);
    return __riscv_vmerge(h, 0x7fc0, nan, vl);
  }
  // A narrow float's bits w (sign at bit kSign, exponent and mantissa below it)
  // as fp32: the magnitude shifted left by kShift (the mantissas' tops meet)
  // times 2^(127 - bias) = scale, exact for normal and subnormal values; then
  // special(bits, em, shifted) sets the inf / NaN codes (em: the magnitude
  // bits, shifted: them shifted) and the sign goes on last.
  template <unsigned kSign, unsigned kShift, class Special>
  static V widen_narrow_float(U w, float scale, Special special, std::size_t vl) {
    const U sign = __riscv_vsll(__riscv_vand(w, 1u << kSign, vl), 31 - kSign, vl);
    const U em = __riscv_vand(w, (1u << kSign) - 1, vl);
    const U shifted = __riscv_vsll(em, kShift, vl);
    const V scaled = __riscv_vfmul(T::as_f(shifted), scale, vl);
    return T::as_f(__riscv_vor(special(T::as_u(scaled), em, shifted), sign, vl));
  }
  // fp16 by integer arithmetic, for CPUs without Zvfh(min): exponent 0x1f is
  // inf / NaN (fp32's all-ones exponent over the shifted mantissa).
  static V widen_f16_int(H16 h, std::size_t vl) {
    auto special = [vl](U bits, U em, U shifted) {
      const Mask infnan = __riscv_vmsgeu(em, 0x7c00, vl);
      return __riscv_vmerge(bits, __riscv_vor(shifted, 0x7f800000, vl), infnan, vl);
    };
    return widen_narrow_float<15, 13>(__riscv_vzext_vf2(h, vl), 0x1p112f, special, vl);
  }
  // fp8 e4m3 (fn): a 2^120 scale, no infinities; 0x7f is the NaN.
  static V widen_e4m3(U8 b, std::size_t vl) {
    auto special = [vl](U bits, U em, U /*shifted*/) {
      return __riscv_vmerge(bits, 0x7fc00000u, __riscv_vmseq(em, 0x7f, vl), vl);
    };
    return widen_narrow_float<7, 20>(__riscv_vzext_vf4(b, vl), 0x1p120f, special, vl);
  }
  static H16 narrow_f16_int(V v, std::size_t vl) {
    U u = T::as_u(v);
    const U sign = __riscv_vand(u, 0x80000000u, vl);
    u = __riscv_vxor(u, sign, vl);
    // normal range: re-bias and round to nearest even
    const U odd = __riscv_vand(__riscv_vsrl(u, 13, vl), 1, vl);
    U o = __riscv_vadd(__riscv_vadd(u, 0xc8000fffu, vl), odd, vl);
    o = __riscv_vsrl(o, 13, vl);
    // subnormal range: let the FPU round by adding 0.5f
    const V sub = __riscv_vfadd(T::as_f(u), 0.5f, vl);
    const U os = __riscv_vsub(T::as_u(sub), 0x3f000000u, vl);
    o = __riscv_vmerge(o, os, __riscv_vmsltu(u, 0x38800000u, vl), vl);
    // overflow, inf, nan
    const U big =
        __riscv_vmerge(T::splat_u(0x7c00u, vl), 0x7e00u, __riscv_vmsgtu(u, 0x7f800000u, vl), vl);
    o = __riscv_vmerge(o, big, __riscv_vmsgeu(u, 0x47800000u, vl), vl);
    o = __riscv_vor(o, __riscv_vsrl(sign, 16, vl), vl);
    return __riscv_vnsrl(o, 0, vl);
  }
#if defined(__riscv_zvfh)
  // Zvfh: hardware conversions (round to nearest even under the default frm).
  static V widen_f16(H16 h, std::size_t vl) { return __riscv_vfwcvt_f(T::as_f16(h), vl); }
  static H16 narrow_f16(V v, std::size_t vl) { return T::as_u16(__riscv_vfncvt_f(v, vl)); }
  static V load_f16(const std::uint16_t* p, std::size_t vl) {
    return __riscv_vfwcvt_f(T::le_f16(reinterpret_cast<const _Float16*>(p), vl), vl);
  }
  static void store_f16(std::uint16_t* p, V v, std::size_t vl) {
    __riscv_vse16(reinterpret_cast<_Float16*>(p), __riscv_vfncvt_f(v, vl), vl);
  }
#else
  static V widen_f16(H16 h, std::size_t vl) { return widen_f16_int(h, vl); }
  static H16 narrow_f16(V v, std::size_t vl) { return narrow_f16_int(v, vl); }
  static V load_f16(const std::uint16_t* p, std::size_t vl) {
    return widen_f16_int(T::le_u16(p, vl), vl);
  }
  static void store_f16(std::uint16_t* p, V v, std::size_t vl) {
    __riscv_vse16(p, narrow_f16_int(v, vl), vl);
  }
#endif
  // Linear layers' packed bf16 weights: two k-consecutive bf16 in one 32-bit word
  // (low half first); each half becomes fp32 in one instruction.
  static U load_u32(const std::uint32_t* p, std::size_t vl) { return T::le_u32(p, vl); }
  static V bf16_low(U w, std::size_t vl) { return T::as_f(__riscv_vsll(w, 16, vl)); }
  static V bf16_high(U w, std::size_t vl) { return T::as_f(__riscv_vand(w, 0xffff0000u, vl)); }
  // p[i] = clamp(round_half_even(v[i]), -127, 127) as int8 (finite v).
  static void store_i8_rne(std::int8_t* p, V v, std::size_t vl) {
    typename T::I i = __riscv_vfcvt_x(v, vl);  // frm: round to nearest even
    i = __riscv_vmin(__riscv_vmax(i, -127, vl), 127, vl);
    __riscv_vse8(p, __riscv_vncvt_x(__riscv_vncvt_x(i, vl), vl), vl);
  }

  // Storage types: float, bf16, f16, int8 and the fp8 KV-cache types (loads only).
  template <class S>
  static V load(const S* p, std::size_t vl) {
    if constexpr (std::is_same_v<S, float>) {
      return T::le_f32(p, vl);
    } else if constexpr (std::is_same_v<S, bf16>) {
      return widen_bf16(T::le_u16(reinterpret_cast<const std::uint16_t*>(p), vl), vl);
    } else if constexpr (std::is_same_v<S, f16>) {
      return load_f16(reinterpret_cast<const std::uint16_t*>(p), vl);
    } else if constexpr (std::is_same_v<S, std::int8_t>) {
      return __riscv_vfcvt_f(__riscv_vsext_vf4(T::le_i8(p, vl), vl), vl);
    } else if constexpr (std::is_same_v<S, fp8e4m3>) {
      return widen_e4m3(T::le_u8(reinterpret_cast<const std::uint8_t*>(p), vl), vl);
    } else {
      static_assert(std::is_same_v<S, fp8e5m2>, "load: float, bf16, f16, int8, fp8");
      const U8 b = T::le_u8(reinterpret_cast<const std::uint8_t*>(p), vl);
      return widen_f16(__riscv_vsll(__riscv_vzext_vf2(b, vl), 8, vl), vl);
    }
  }
  template <class S>
  static void store(S* p, V v, std::size_t vl) {
    if constexpr (std::is_same_v<S, float>) {
      __riscv_vse32(p, v, vl);
    } else if constexpr (std::is_same_v<S, bf16>) {
      __riscv_vse16(reinterpret_cast<std::uint16_t*>(p), narrow_bf16(v, vl), vl);
    } else {
      static_assert(std::is_same_v<S, f16>, "store: float, bf16, f16");
      store_f16(reinterpret_cast<std::uint16_t*>(p), v, vl);
    }
  }
  // Strided access: element i at p[i * stride] (stride in elements, may be negative).
  template <class S>
  static V load_strided(const S* p, std::ptrdiff_t stride, std::size_t vl) {
    if constexpr (std::is_same_v<S, float>) {
      return T::lse_f32(p, stride * 4, vl);
    } else {
      static_assert(std::is_same_v<S, bf16> || std::is_same_v<S, f16>,
                    "load_strided: float, bf16, f16");
      const H16 h = T::lse_u16(reinterpret_cast<const std::uint16_t*>(p), stride * 2, vl);
      if constexpr (std::is_same_v<S, bf16>) {
        return widen_bf16(h, vl);
      } else {
        return widen_f16(h, vl);
      }
    }
  }
  template <class S>
  static void store_strided(S* p, std::ptrdiff_t stride, V v, std::size_t vl) {
    if constexpr (std::is_same_v<S, float>) {
      __riscv_vsse32(p, stride * 4, v, vl);
    } else if constexpr (std::is_same_v<S, bf16>) {
      __riscv_vsse16(reinterpret_cast<std::uint16_t*>(p), stride * 2, narrow_bf16(v, vl), vl);
    } else {
      static_assert(std::is_same_v<S, f16>, "store_strided: float, bf16, f16");
      __riscv_vsse16(reinterpret_cast<std::uint16_t*>(p), stride * 2, narrow_f16(v, vl), vl);
    }
  }
};

// I8Acc<L>: exact int32 accumulators (LMUL L) of int8 x int8 products, for the
// W8A8 GEMM. W is the int8 vector with the same element count (LMUL L / 4).
template <int L>
struct I8Acc {
  using T = rvv::Lmul<L>;
  using V = typename T::I;
  using W = typename T::I8;
  static std::size_t setvl(std::size_t n) { return T::setvl(n); }
  static std::size_t vlmax() { return T::vlmax(); }
  static V zero(std::size_t vl) { return T::splat_i(0, vl); }
  static W load(const std::int8_t* p, std::size_t vl) { return T::le_i8(p, vl); }
  // acc + a * w: the int16 product is exact, the widening add too.
  static V macc(V acc, std::int8_t a, W w, std::size_t vl) {
    return __riscv_vwadd_wv(acc, __riscv_vwmul(w, a, vl), vl);
  }
  // acc + a0 * w0 + a1 * w1 with the pair summed in int16: exact unless both
  // products are (-128) * (-128) (the only way past 32767); callers ensure that.
  static V macc2(V acc, std::int8_t a0, W w0, std::int8_t a1, W w1, std::size_t vl) {
    typename T::I16 p = __riscv_vwmul(w0, a0, vl);
    p = __riscv_vwmacc(p, a1, w1, vl);
    return __riscv_vwadd_wv(acc, p, vl);
  }
  static typename F32<L>::V to_f32(V v, std::size_t vl) { return __riscv_vfcvt_f(v, vl); }
};

}  // namespace rvvk::RVVK_NS::vec
