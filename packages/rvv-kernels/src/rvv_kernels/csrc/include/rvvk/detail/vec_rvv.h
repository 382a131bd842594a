// RVV 1.0 implementation of the vector layer (see vec.h for the contract).
#pragma once

#include <riscv_vector.h>

#include <cstddef>
#include <cstdint>

#include "rvvk/detail/scalar.h"

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

template <int LMUL>
struct F32;

// F32<L>: fp32 lanes at LMUL L. H is the LMUL of the matching 16-bit vector
// and Q of the matching 8-bit vector (same element count), B the mask type's ratio.
#define RVVK_F32_TRAITS(L, M, H, Q, B)                                                          \
  template <>                                                                                \
  struct F32<L> {                                                                            \
    using V = vfloat32##M##_t;                                                               \
    using U = vuint32##M##_t;                                                                \
    using H16 = vuint16##H##_t;                                                              \
    using U8 = vuint8##Q##_t;                                                                \
    using Mask = vbool##B##_t;                                                               \
    static std::size_t setvl(std::size_t n) { return __riscv_vsetvl_e32##M(n); }             \
    static std::size_t vlmax() { return __riscv_vsetvlmax_e32##M(); }                        \
    static V splat(float x, std::size_t vl) { return __riscv_vfmv_v_f_f32##M(x, vl); }       \
    static V add(V a, V b, std::size_t vl) { return __riscv_vfadd_vv_f32##M(a, b, vl); }     \
    static V sub(V a, V b, std::size_t vl) { return __riscv_vfsub_vv_f32##M(a, b, vl); }     \
    static V mul(V a, V b, std::size_t vl) { return __riscv_vfmul_vv_f32##M(a, b, vl); }     \
    static V mul(V a, float s, std::size_t vl) { return __riscv_vfmul_vf_f32##M(a, s, vl); } \
    static V fmacc(V acc, V a, V b, std::size_t vl) {                                        \
      return __riscv_vfmacc_vv_f32##M(acc, a, b, vl);                                        \
    }                                                                                        \
    static V fmacc_tu(V acc, V a, V b, std::size_t vl) {                                     \
      return __riscv_vfmacc_vv_f32##M##_tu(acc, a, b, vl);                                   \
    }                                                                                        \
    static float reduce_sum(V v, std::size_t vl) {                                           \
      const vfloat32m1_t zero = __riscv_vfmv_v_f_f32m1(0.0f, 1);                             \
      return __riscv_vfmv_f_s_f32m1_f32(__riscv_vfredusum_vs_f32##M##_f32m1(v, zero, vl));   \
    }                                                                                        \
    static V add(V a, float s, std::size_t vl) { return __riscv_vfadd_vf_f32##M(a, s, vl); } \
    static V max(V a, V b, std::size_t vl) { return __riscv_vfmax_vv_f32##M(a, b, vl); }     \
    static V div(V a, V b, std::size_t vl) { return __riscv_vfdiv_vv_f32##M(a, b, vl); }     \
    /* acc + s * b */                                                                        \
    static V fmacc(V acc, float s, V b, std::size_t vl) {                                    \
      return __riscv_vfmacc_vf_f32##M(acc, s, b, vl);                                        \
    }                                                                                        \
    static float reduce_max(V v, std::size_t vl) {                                           \
      const vfloat32m1_t init = __riscv_vfmv_v_f_f32m1(-__builtin_inff(), 1);                \
      return __riscv_vfmv_f_s_f32m1_f32(__riscv_vfredmax_vs_f32##M##_f32m1(v, init, vl));    \
    }                                                                                        \
    /* exp(x): range reduction to [-ln2/2, ln2/2], degree-6 polynomial, exponent by       */ \
    /* integer add. Relative error < 2e-7; x < -87.33 gives exactly 0 (masked positions). */ \
    static V exp(V x, std::size_t vl) {                                                      \
      using I = vint32##M##_t;                                                               \
      Mask tiny = __riscv_vmflt_vf_f32##M##_b##B(x, -87.33654f, vl);                         \
      x = __riscv_vfmax_vf_f32##M(__riscv_vfmin_vf_f32##M(x, 88.3762626647949f, vl),        \
                                  -87.33654f, vl);                                           \
      I n = __riscv_vfcvt_x_f_v_i32##M(__riscv_vfmul_vf_f32##M(x, 1.44269504088896341f, vl), vl); \
      V nf = __riscv_vfcvt_f_x_v_f32##M(n, vl);                                              \
      V r = __riscv_vfnmsac_vf_f32##M(x, 0.693359375f, nf, vl);                              \
      r = __riscv_vfnmsac_vf_f32##M(r, -2.12194440e-4f, nf, vl);                             \
      V p = __riscv_vfmv_v_f_f32##M(1.3981999507e-3f, vl);                                   \
      p = __riscv_vfmacc_vf_f32##M(p, 1.9875691500e-4f, r, vl);                              \
      p = __riscv_vfmadd_vv_f32##M(p, r, __riscv_vfmv_v_f_f32##M(8.3334519073e-3f, vl), vl); \
      p = __riscv_vfmadd_vv_f32##M(p, r, __riscv_vfmv_v_f_f32##M(4.1665795894e-2f, vl), vl); \
      p = __riscv_vfmadd_vv_f32##M(p, r, __riscv_vfmv_v_f_f32##M(1.6666665459e-1f, vl), vl); \
      p = __riscv_vfmadd_vv_f32##M(p, r, __riscv_vfmv_v_f_f32##M(5.0000001201e-1f, vl), vl); \
      V y = __riscv_vfmadd_vv_f32##M(p, __riscv_vfmul_vv_f32##M(r, r, vl), r, vl);           \
      y = __riscv_vfadd_vf_f32##M(y, 1.0f, vl);                                              \
      I bits = __riscv_vadd_vv_i32##M(__riscv_vreinterpret_v_f32##M##_i32##M(y),             \
                                      __riscv_vsll_vx_i32##M(n, 23, vl), vl);                \
      return __riscv_vfmerge_vfm_f32##M(__riscv_vreinterpret_v_i32##M##_f32##M(bits), 0.0f,  \
                                        tiny, vl);                                           \
    }                                                                                        \
    /* exp(x) for x <= 0 (softmax scores minus their max), with exp's contract there: */     \
    /* x log2(e) = n + f, |f| <= 1/2 (f from an exact product by FMA plus the low     */     \
    /* part of log2(e): no reduction error growing with |x|), 2^f by a degree-5       */     \
    /* polynomial (relative error about 2e-7), 2^n as a float's exponent field;       */     \
    /* x < -87.33 gives exactly 0. x > 0 is outside its contract.                      */    \
    static V exp_nonpositive(V x, std::size_t vl) {                                          \
      using I = vint32##M##_t;                                                               \
      const Mask tiny = __riscv_vmflt_vf_f32##M##_b##B(x, -87.33654f, vl);                   \
      /* log2(e) = 1.44269502f + 1.925963e-8; n to nearest (frm is RNE) */                   \
      const I n = __riscv_vfcvt_x_f_v_i32##M(__riscv_vfmul_vf_f32##M(x, 1.44269502f, vl), vl);\
      V f = __riscv_vfmsub_vf_f32##M(x, 1.44269502f, __riscv_vfcvt_f_x_v_f32##M(n, vl), vl); \
      f = __riscv_vfmacc_vf_f32##M(f, 1.925963e-8f, x, vl);                                  \
      /* Horner steps as a multiply then an add of a scalar: no splat constants to */        \
      /* hoist (and spill) in a caller's loop; as many instructions as vfmv+vfmadd. */       \
      V p = __riscv_vfadd_vf_f32##M(__riscv_vfmul_vf_f32##M(f, 1.3218672248e-3f, vl),        \
                                    9.6716983244e-3f, vl);                                   \
      p = __riscv_vfadd_vf_f32##M(__riscv_vfmul_vv_f32##M(p, f, vl), 5.5508930236e-2f, vl);  \
      p = __riscv_vfadd_vf_f32##M(__riscv_vfmul_vv_f32##M(p, f, vl), 2.4022237957e-1f, vl);  \
      p = __riscv_vfadd_vf_f32##M(__riscv_vfmul_vv_f32##M(p, f, vl), 6.9314688444e-1f, vl);  \
      p = __riscv_vfadd_vf_f32##M(__riscv_vfmul_vv_f32##M(p, f, vl), 1.0f, vl);              \
      /* 2^n = (n + 127) << 23 as a float: n >= -126 wherever x is not tiny */               \
      const I e = __riscv_vsll_vx_i32##M(__riscv_vadd_vx_i32##M(n, 127, vl), 23, vl);        \
      const V y = __riscv_vfmul_vv_f32##M(p, __riscv_vreinterpret_v_i32##M##_f32##M(e), vl); \
      return __riscv_vfmerge_vfm_f32##M(y, 0.0f, tiny, vl);                                  \
    }                                                                                        \
    /* tanh(x) = 1 - 2 / (exp(2x) + 1), saturating to +-1. */                                \
    static V tanh(V x, std::size_t vl) {                                                     \
      V e = exp(__riscv_vfmul_vf_f32##M(x, 2.0f, vl), vl);                                   \
      V t = __riscv_vfrdiv_vf_f32##M(__riscv_vfadd_vf_f32##M(e, 1.0f, vl), 2.0f, vl);        \
      t = __riscv_vfrsub_vf_f32##M(t, 1.0f, vl);                                             \
      Mask big = __riscv_vmfgt_vf_f32##M##_b##B(x, 40.0f, vl);                               \
      return __riscv_vfmerge_vfm_f32##M(t, 1.0f, big, vl);                                   \
    }                                                                                        \
    /* erf(x) = x + x * P(x^2) for |x| <= 1, else sign(x) * (1 - exp(Q(min(|x|, 3.95) - */   \
    /* 2.5))) with Q ~ log(erfc) (erf rounds to 1 beyond 3.95). P (degree 6) and Q */        \
    /* (degree 8) are weighted-minimax fits; error < 2e-7 relative. NaN stays NaN. */        \
    /* p * x + c: one Horner step. */                                                        \
    static V poly_step(V p, V x, float c, std::size_t vl) {                                  \
      return __riscv_vfmadd_vv_f32##M(p, x, __riscv_vfmv_v_f_f32##M(c, vl), vl);             \
    }                                                                                        \
    static V erf(V x, std::size_t vl) {                                                      \
      const V a = __riscv_vfabs_v_f32##M(x, vl);                                             \
      const V t = __riscv_vfmul_vv_f32##M(a, a, vl);                                         \
      V p = __riscv_vfmv_v_f_f32##M(7.85386073e-05f, vl);                                    \
      p = poly_step(p, t, -8.01019371e-04f, vl);                                             \
      p = poly_step(p, t, 5.18832775e-03f, vl);                                              \
      p = poly_step(p, t, -2.68538129e-02f, vl);                                             \
      p = poly_step(p, t, 1.12835854e-01f, vl);                                              \
      p = poly_step(p, t, -3.76126260e-01f, vl);                                             \
      p = poly_step(p, t, 1.28379166e-01f, vl);                                              \
      const V small = __riscv_vfmadd_vv_f32##M(p, a, a, vl);                                 \
      const V u = __riscv_vfsub_vf_f32##M(__riscv_vfmin_vf_f32##M(a, 3.95f, vl), 2.5f, vl);  \
      V q = __riscv_vfmv_v_f_f32##M(1.62011258e-06f, vl);                                    \
      q = poly_step(q, u, -1.32878758e-05f, vl);                                             \
      q = poly_step(q, u, 7.73762004e-05f, vl);                                              \
      q = poly_step(q, u, -4.20217548e-04f, vl);                                             \
      q = poly_step(q, u, 2.16517528e-03f, vl);                                              \
      q = poly_step(q, u, -1.08584482e-02f, vl);                                             \
      q = poly_step(q, u, -9.43893671e-01f, vl);                                             \
      q = poly_step(q, u, -5.35268068e+00f, vl);                                             \
      q = poly_step(q, u, -7.80681515e+00f, vl);                                             \
      const V big = __riscv_vfrsub_vf_f32##M(exp(q, vl), 1.0f, vl);                          \
      const Mask use_big = __riscv_vmfgt_vf_f32##M##_b##B(a, 1.0f, vl);                      \
      const V r = __riscv_vmerge_vvm_f32##M(small, big, use_big, vl);                        \
      return __riscv_vfsgnj_vv_f32##M(r, x, vl);                                             \
    }                                                                                        \
    /* bf16: widen by shifting into the high half; narrow with RNE. */                       \
    static V widen_bf16(H16 h, std::size_t vl) {                                             \
      U u = __riscv_vsll_vx_u32##M(__riscv_vzext_vf2_u32##M(h, vl), 16, vl);                 \
      return __riscv_vreinterpret_v_u32##M##_f32##M(u);                                      \
    }                                                                                        \
    static H16 narrow_bf16(V v, std::size_t vl) {                                            \
      U u = __riscv_vreinterpret_v_f32##M##_u32##M(v);                                       \
      U lsb = __riscv_vand_vx_u32##M(__riscv_vsrl_vx_u32##M(u, 16, vl), 1, vl);              \
      u = __riscv_vadd_vv_u32##M(u, __riscv_vadd_vx_u32##M(lsb, 0x7fff, vl), vl);            \
      H16 h = __riscv_vnsrl_wx_u16##H(u, 16, vl);                                            \
      Mask nan = __riscv_vmfne_vv_f32##M##_b##B(v, v, vl);                                   \
      return __riscv_vmerge_vxm_u16##H(h, 0x7fc0, nan, vl);                                  \
    }                                                                                        \
    /* fp16 by integer arithmetic, for CPUs without Zvfh(min). */                            \
    static V widen_f16_int(H16 h, std::size_t vl) {                                          \
      U w = __riscv_vzext_vf2_u32##M(h, vl);                                                 \
      U sign = __riscv_vsll_vx_u32##M(__riscv_vand_vx_u32##M(w, 0x8000, vl), 16, vl);        \
      U em = __riscv_vand_vx_u32##M(w, 0x7fff, vl);                                          \
      U shifted = __riscv_vsll_vx_u32##M(em, 13, vl);                                        \
      V scaled = __riscv_vfmul_vf_f32##M(__riscv_vreinterpret_v_u32##M##_f32##M(shifted),    \
                                         0x1p112f, vl);                                      \
      U bits = __riscv_vreinterpret_v_f32##M##_u32##M(scaled);                               \
      Mask infnan = __riscv_vmsgeu_vx_u32##M##_b##B(em, 0x7c00, vl);                         \
      bits = __riscv_vmerge_vvm_u32##M(bits, __riscv_vor_vx_u32##M(shifted, 0x7f800000, vl), \
                                       infnan, vl);                                          \
      return __riscv_vreinterpret_v_u32##M##_f32##M(__riscv_vor_vv_u32##M(bits, sign, vl));  \
    }                                                                                        \
    /* fp8 e4m3 (fn): like widen_f16_int with a 2^120 scale; 0x7f is the NaN. */             \
    static V widen_e4m3(U8 b, std::size_t vl) {                                              \
      U w = __riscv_vzext_vf4_u32##M(b, vl);                                                 \
      U sign = __riscv_vsll_vx_u32##M(__riscv_vand_vx_u32##M(w, 0x80, vl), 24, vl);          \
      U em = __riscv_vand_vx_u32##M(w, 0x7f, vl);                                            \
      U shifted = __riscv_vsll_vx_u32##M(em, 20, vl);                                        \
      V scaled = __riscv_vfmul_vf_f32##M(__riscv_vreinterpret_v_u32##M##_f32##M(shifted),    \
                                         0x1p120f, vl);                                      \
      U bits = __riscv_vreinterpret_v_f32##M##_u32##M(scaled);                               \
      bits = __riscv_vmerge_vxm_u32##M(bits, 0x7fc00000u,                                    \
                                       __riscv_vmseq_vx_u32##M##_b##B(em, 0x7f, vl), vl);    \
      return __riscv_vreinterpret_v_u32##M##_f32##M(__riscv_vor_vv_u32##M(bits, sign, vl));  \
    }                                                                                        \
    static H16 narrow_f16_int(V v, std::size_t vl) {                                         \
      U u = __riscv_vreinterpret_v_f32##M##_u32##M(v);                                       \
      U sign = __riscv_vand_vx_u32##M(u, 0x80000000u, vl);                                   \
      u = __riscv_vxor_vv_u32##M(u, sign, vl);                                               \
      /* normal range: re-bias and round to nearest even */                                  \
      U odd = __riscv_vand_vx_u32##M(__riscv_vsrl_vx_u32##M(u, 13, vl), 1, vl);              \
      U o = __riscv_vadd_vv_u32##M(__riscv_vadd_vx_u32##M(u, 0xc8000fffu, vl), odd, vl);     \
      o = __riscv_vsrl_vx_u32##M(o, 13, vl);                                                 \
      /* subnormal range: let the FPU round by adding 0.5f */                                \
      V sub = __riscv_vfadd_vf_f32##M(__riscv_vreinterpret_v_u32##M##_f32##M(u), 0.5f, vl);  \
      U os = __riscv_vsub_vx_u32##M(__riscv_vreinterpret_v_f32##M##_u32##M(sub),             \
                                    0x3f000000u, vl);                                        \
      o = __riscv_vmerge_vvm_u32##M(o, os, __riscv_vmsltu_vx_u32##M##_b##B(u, 0x38800000u, vl), \
                                    vl);                                                     \
      /* overflow, inf, nan */                                                               \
      U big = __riscv_vmerge_vxm_u32##M(__riscv_vmv_v_x_u32##M(0x7c00u, vl), 0x7e00u,        \
                                        __riscv_vmsgtu_vx_u32##M##_b##B(u, 0x7f800000u, vl), \
                                        vl);                                                 \
      o = __riscv_vmerge_vvm_u32##M(o, big, __riscv_vmsgeu_vx_u32##M##_b##B(u, 0x47800000u, vl), \
                                    vl);                                                     \
      o = __riscv_vor_vv_u32##M(o, __riscv_vsrl_vx_u32##M(sign, 16, vl), vl);                \
      return __riscv_vnsrl_wx_u16##H(o, 0, vl);                                              \
    }                                                                                        \
    static V abs(V v, std::size_t vl) { return __riscv_vfabs_v_f32##M(v, vl); }              \
    /* Linear layers' packed bf16 weights: two k-consecutive bf16 in one 32-bit word   */   \
    /* (low half first); each half becomes fp32 in one instruction.                    */   \
    static U load_u32(const std::uint32_t* p, std::size_t vl) {                              \
      return __riscv_vle32_v_u32##M(p, vl);                                                  \
    }                                                                                        \
    static V bf16_low(U w, std::size_t vl) {                                                 \
      return __riscv_vreinterpret_v_u32##M##_f32##M(__riscv_vsll_vx_u32##M(w, 16, vl));      \
    }                                                                                        \
    static V bf16_high(U w, std::size_t vl) {                                                \
      return __riscv_vreinterpret_v_u32##M##_f32##M(                                         \
          __riscv_vand_vx_u32##M(w, 0xffff0000u, vl));                                       \
    }                                                                                        \
    /* p[i] = clamp(round_half_even(v[i]), -127, 127) as int8 (finite v). */                 \
    static void store_i8_rne(std::int8_t* p, V v, std::size_t vl) {                          \
      vint32##M##_t i = __riscv_vfcvt_x_f_v_i32##M(v, vl); /* frm: round to nearest even */ \
      i = __riscv_vmin_vx_i32##M(__riscv_vmax_vx_i32##M(i, -127, vl), 127, vl);              \
      __riscv_vse8_v_i8##Q(p, __riscv_vncvt_x_x_w_i8##Q(__riscv_vncvt_x_x_w_i16##H(i, vl), vl), \
                           vl);                                                              \
    }                                                                                        \
    RVVK_F32_F16_OPS(M, H)                                                                   \
    template <class T>                                                                       \
    static V load(const T* p, std::size_t vl);                                               \
    template <class T>                                                                       \
    static void store(T* p, V v, std::size_t vl);                                            \
    /* Strided access: element i at p[i * stride] (stride in elements, may be negative). */  \
    template <class T>                                                                       \
    static V load_strided(const T* p, std::ptrdiff_t stride, std::size_t vl);                \
    template <class T>                                                                       \
    static void store_strided(T* p, std::ptrdiff_t stride, V v, std::size_t vl);             \
  };                                                                                         \
  template <>                                                                                \
  inline F32<L>::V F32<L>::load<float>(const float* p, std::size_t vl) {                     \
    return __riscv_vle32_v_f32##M(p, vl);                                                    \
  }                                                                                          \
  template <>                                                                                \
  inline F32<L>::V F32<L>::load<bf16>(const bf16* p, std::size_t vl) {                       \
    return widen_bf16(__riscv_vle16_v_u16##H(reinterpret_cast<const std::uint16_t*>(p), vl), \
                      vl);                                                                   \
  }                                                                                          \
  template <>                                                                                \
  inline F32<L>::V F32<L>::load<f16>(const f16* p, std::size_t vl) {                         \
    return load_f16(reinterpret_cast<const std::uint16_t*>(p), vl);                          \
  }                                                                                          \
  template <>                                                                                \
  inline F32<L>::V F32<L>::load<std::int8_t>(const std::int8_t* p, std::size_t vl) {         \
    return __riscv_vfcvt_f_x_v_f32##M(                                                       \
        __riscv_vsext_vf4_i32##M(__riscv_vle8_v_i8##Q(p, vl), vl), vl);                      \
  }                                                                                          \
  template <>                                                                                \
  inline F32<L>::V F32<L>::load<fp8e4m3>(const fp8e4m3* p, std::size_t vl) {                 \
    return widen_e4m3(__riscv_vle8_v_u8##Q(reinterpret_cast<const std::uint8_t*>(p), vl),    \
                      vl);                                                                   \
  }                                                                                          \
  template <>                                                                                \
  inline F32<L>::V F32<L>::load<fp8e5m2>(const fp8e5m2* p, std::size_t vl) {                 \
    U8 b = __riscv_vle8_v_u8##Q(reinterpret_cast<const std::uint8_t*>(p), vl);               \
    return widen_f16(__riscv_vsll_vx_u16##H(__riscv_vzext_vf2_u16##H(b, vl), 8, vl), vl);    \
  }                                                                                          \
  template <>                                                                                \
  inline void F32<L>::store<float>(float* p, V v, std::size_t vl) {                          \
    __riscv_vse32_v_f32##M(p, v, vl);                                                        \
  }                                                                                          \
  template <>                                                                                \
  inline void F32<L>::store<bf16>(bf16* p, V v, std::size_t vl) {                            \
    __riscv_vse16_v_u16##H(reinterpret_cast<std::uint16_t*>(p), narrow_bf16(v, vl), vl);     \
  }                                                                                          \
  template <>                                                                                \
  inline void F32<L>::store<f16>(f16* p, V v, std::size_t vl) {                              \
    store_f16(reinterpret_cast<std::uint16_t*>(p), v, vl);                                   \
  }                                                                                          \
  template <>                                                                                \
  inline F32<L>::V F32<L>::load_strided<float>(const float* p, std::ptrdiff_t stride,        \
                                               std::size_t vl) {                             \
    return __riscv_vlse32_v_f32##M(p, stride * 4, vl);                                       \
  }                                                                                          \
  template <>                                                                                \
  inline F32<L>::V F32<L>::load_strided<bf16>(const bf16* p, std::ptrdiff_t stride,          \
                                              std::size_t vl) {                              \
    const auto* u = reinterpret_cast<const std::uint16_t*>(p);                               \
    return widen_bf16(__riscv_vlse16_v_u16##H(u, stride * 2, vl), vl);                       \
  }                                                                                          \
  template <>                                                                                \
  inline F32<L>::V F32<L>::load_strided<f16>(const f16* p, std::ptrdiff_t stride,            \
                                             std::size_t vl) {                               \
    const auto* u = reinterpret_cast<const std::uint16_t*>(p);                               \
    return widen_f16(__riscv_vlse16_v_u16##H(u, stride * 2, vl), vl);                        \
  }                                                                                          \
  template <>                                                                                \
  inline void F32<L>::store_strided<float>(float* p, std::ptrdiff_t stride, V v,             \
                                           std::size_t vl) {                                 \
    __riscv_vsse32_v_f32##M(p, stride * 4, v, vl);                                           \
  }                                                                                          \
  template <>                                                                                \
  inline void F32<L>::store_strided<bf16>(bf16* p, std::ptrdiff_t stride, V v,               \
                                          std::size_t vl) {                                  \
    __riscv_vsse16_v_u16##H(reinterpret_cast<std::uint16_t*>(p), stride * 2,                 \
                            narrow_bf16(v, vl), vl);                                         \
  }                                                                                          \
  template <>                                                                                \
  inline void F32<L>::store_strided<f16>(f16* p, std::ptrdiff_t stride, V v,                 \
                                         std::size_t vl) {                                   \
    __riscv_vsse16_v_u16##H(reinterpret_cast<std::uint16_t*>(p), stride * 2,                 \
                            narrow_f16(v, vl), vl);                                          \
  }

#if defined(__riscv_zvfh)
// Zvfh: hardware conversions (round to nearest even under the default frm).
#define RVVK_F32_F16_OPS(M, H)                                                           \
  static V widen_f16(H16 h, std::size_t vl) {                                                \
    return __riscv_vfwcvt_f_f_v_f32##M(__riscv_vreinterpret_v_u16##H##_f16##H(h), vl);       \
  }                                                                                          \
  static H16 narrow_f16(V v, std::size_t vl) {                                               \
    return __riscv_vreinterpret_v_f16##H##_u16##H(__riscv_vfncvt_f_f_w_f16##H(v, vl));       \
  }                                                                                          \
  static V load_f16(const std::uint16_t* p, std::size_t vl) {                            \
    return __riscv_vfwcvt_f_f_v_f32##M(                                                  \
        __riscv_vle16_v_f16##H(reinterpret_cast<const _Float16*>(p), vl), vl);           \
  }                                                                                      \
  static void store_f16(std::uint16_t* p, V v, std::size_t vl) {                         \
    __riscv_vse16_v_f16##H(reinterpret_cast<_Float16*>(p),                               \
                           __riscv_vfncvt_f_f_w_f16##H(v, vl), vl);                      \
  }
#else
#define RVVK_F32_F16_OPS(M, H)                                                           \
  static V widen_f16(H16 h, std::size_t vl) { return widen_f16_int(h, vl); }                 \
  static H16 narrow_f16(V v, std::size_t vl) { return narrow_f16_int(v, vl); }               \
  static V load_f16(const std::uint16_t* p, std::size_t vl) {                            \
    return widen_f16_int(__riscv_vle16_v_u16##H(p, vl), vl);                             \
  }                                                                                      \
  static void store_f16(std::uint16_t* p, V v, std::size_t vl) {                         \
    __riscv_vse16_v_u16##H(p, narrow_f16_int(v, vl), vl);                                \
  }
#endif

RVVK_F32_TRAITS(1, m1, mf2, mf4, 32)
RVVK_F32_TRAITS(2, m2, m1, mf2, 16)
RVVK_F32_TRAITS(4, m4, m2, m1, 8)
RVVK_F32_TRAITS(8, m8, m4, m2, 4)

// I8Acc<L>: exact int32 accumulators (LMUL L) of int8 x int8 products, for the
// W8A8 GEMM. W is the int8 vector with the same element count (LMUL L / 4).
template <int LMUL>
struct I8Acc;
#define RVVK_I8ACC_TRAITS(L, M, H, Q)                                                        \
  template <>                                                                                \
  struct I8Acc<L> {                                                                          \
    using V = vint32##M##_t;                                                                 \
    using W = vint8##Q##_t;                                                                  \
    static std::size_t setvl(std::size_t n) { return __riscv_vsetvl_e32##M(n); }             \
    static std::size_t vlmax() { return __riscv_vsetvlmax_e32##M(); }                        \
    static V zero(std::size_t vl) { return __riscv_vmv_v_x_i32##M(0, vl); }                  \
    static W load(const std::int8_t* p, std::size_t vl) { return __riscv_vle8_v_i8##Q(p, vl); } \
    /* acc + a * w: the int16 product is exact, the widening add too. */                     \
    static V macc(V acc, std::int8_t a, W w, std::size_t vl) {                               \
      return __riscv_vwadd_wv_i32##M(acc, __riscv_vwmul_vx_i16##H(w, a, vl), vl);            \
    }                                                                                        \
    /* acc + a0 * w0 + a1 * w1 with the pair summed in int16: exact unless both     */       \
    /* products are (-128) * (-128) (the only way past 32767); callers ensure that. */       \
    static V macc2(V acc, std::int8_t a0, W w0, std::int8_t a1, W w1, std::size_t vl) {      \
      vint16##H##_t p = __riscv_vwmul_vx_i16##H(w0, a0, vl);                                 \
      p = __riscv_vwmacc_vx_i16##H(p, a1, w1, vl);                                           \
      return __riscv_vwadd_wv_i32##M(acc, p, vl);                                            \
    }                                                                                        \
    static F32<L>::V to_f32(V v, std::size_t vl) { return __riscv_vfcvt_f_x_v_f32##M(v, vl); } \
  };
RVVK_I8ACC_TRAITS(2, m2, m1, mf2)
RVVK_I8ACC_TRAITS(4, m4, m2, m1)
RVVK_I8ACC_TRAITS(8, m8, m4, m2)
#undef RVVK_I8ACC_TRAITS

#undef RVVK_F32_TRAITS
#undef RVVK_F32_F16_OPS

}  // namespace rvvk::RVVK_NS::vec
