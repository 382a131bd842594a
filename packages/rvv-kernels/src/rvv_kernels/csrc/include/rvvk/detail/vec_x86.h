// The x86 vector layer's F32<L> and I8Acc<L>, shared by AVX2 and AVX-512.
//
// A vector of LMUL L is L hardware registers; everything ISA-specific comes from
// the register traits Reg (avx2::Reg in vec_avx2.h, avx512::Reg in vec_avx512.h):
//   V, I            one fp32 / int32 register; kLanes fp32 lanes per register
//   Lanes           which lanes of one register are active (a count on AVX2, a
//                   mask on AVX-512): lanes(vl, i) for register i, kAll, and
//                   any(l) for "at least one"
//   arithmetic      splat, add, sub, mul, div, max, fmadd (and vec_math.h's
//                   primitives, so exp/tanh/erf come from math::)
//   load_part<T>(p, l), st(p, v, l)        loads / stores of one register's lanes
//   fmacc_part, keep, add_part, max_first, max_part, hsum, hmax
//                                          the `_tu` form and the reductions
//   load_u32_part, bf16_low, bf16_high, store_i8_part, exp_nonpositive
//   W, I16, load_i8_part, splat_i16, mul_i8, add_i16, acc_i16, zero_i32, cvt_i32
//                                          I8Acc's int8 lanes of one register
// Arithmetic runs on all lanes (tail agnostic); the `_tu` forms, reductions,
// loads and stores honour vl, as vec.h says.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rvvk/detail/scalar.h"
#include "rvvk/detail/vec_math.h"

namespace rvvk::RVVK_NS::vec::x86 {

template <class Reg, int LMUL>
struct F32 {
  static_assert(LMUL == 1 || LMUL == 2 || LMUL == 4 || LMUL == 8, "LMUL 1, 2, 4 or 8");
  using Rv = typename Reg::V;
  static constexpr int R = LMUL;  // registers per vector
  static constexpr std::size_t K = Reg::kLanes;
  static constexpr std::size_t N = K * static_cast<std::size_t>(LMUL);
  struct V {
    Rv r[R];
  };
  // Packed bf16 pairs of the linear layers (see vec_rvv.h).
  struct U {
    typename Reg::I r[R];
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
    for (int i = 0; i < R; ++i) r.r[i] = Reg::splat(s);
    return r;
  }
  static V add(V a, V b, std::size_t) { return zip(a, b, [](Rv x, Rv y) { return Reg::add(x, y); }); }
  static V sub(V a, V b, std::size_t) { return zip(a, b, [](Rv x, Rv y) { return Reg::sub(x, y); }); }
  static V mul(V a, V b, std::size_t) { return zip(a, b, [](Rv x, Rv y) { return Reg::mul(x, y); }); }
  static V div(V a, V b, std::size_t) { return zip(a, b, [](Rv x, Rv y) { return Reg::div(x, y); }); }
  // max(a, b) keeps a where either is NaN (the portable layer's `a < b ? b : a`):
  // the x86 max returns its second operand when either is NaN.
  static V max(V a, V b, std::size_t) { return zip(a, b, [](Rv x, Rv y) { return Reg::max(y, x); }); }
  static V mul(V a, float s, std::size_t) {
    const Rv k = Reg::splat(s);
    return map(a, [k](Rv x) { return Reg::mul(x, k); });
  }
  static V add(V a, float s, std::size_t) {
    const Rv k = Reg::splat(s);
    return map(a, [k](Rv x) { return Reg::add(x, k); });
  }
  static V fmacc(V acc, V a, V b, std::size_t) {
    for (int i = 0; i < R; ++i) acc.r[i] = Reg::fmadd(a.r[i], b.r[i], acc.r[i]);
    return acc;
  }
  static V fmacc_tu(V acc, V a, V b, std::size_t vl) {
    if (vl == N) return fmacc(acc, a, b, vl);
    for (int i = 0; i < R; ++i) acc.r[i] = Reg::fmacc_part(acc.r[i], a.r[i], b.r[i], Reg::lanes(vl, i));
    return acc;
  }
  // acc + s * b
  static V fmacc(V acc, float s, V b, std::size_t) {
    const Rv k = Reg::splat(s);
    for (int i = 0; i < R; ++i) acc.r[i] = Reg::fmadd(k, b.r[i], acc.r[i]);
    return acc;
  }
  RVVK_ALWAYS_INLINE static float reduce_sum(V v, std::size_t vl) {
    if (vl == N) {
      for (int w = R / 2; w > 0; w /= 2)
        for (int i = 0; i < w; ++i) v.r[i] = Reg::add(v.r[i], v.r[i + w]);
      return Reg::hsum(v.r[0]);
    }
    Rv acc = Reg::keep(v.r[0], Reg::lanes(vl, 0));
    for (int i = 1; i < R; ++i) acc = Reg::add_part(acc, v.r[i], Reg::lanes(vl, i));
    return Reg::hsum(acc);
  }
  RVVK_ALWAYS_INLINE static float reduce_max(V v, std::size_t vl) {
    Rv acc = Reg::max_first(v.r[0], Reg::lanes(vl, 0));
    for (int i = 1; i < R; ++i) acc = Reg::max_part(acc, v.r[i], Reg::lanes(vl, i));
    return Reg::hmax(acc);
  }
  static V exp(V x, std::size_t) { return map(x, [](Rv v) { return math::exp<Reg>(v, K); }); }
  static V exp_nonpositive(V x, std::size_t) {
    return map(x, [](Rv v) { return Reg::exp_nonpositive(v); });
  }
  static V tanh(V x, std::size_t) { return map(x, [](Rv v) { return math::tanh<Reg>(v, K); }); }
  static V erf(V x, std::size_t) { return map(x, [](Rv v) { return math::erf<Reg>(v, K); }); }
  static V abs(V v, std::size_t) { return map(v, [](Rv x) { return Reg::abs(x); }); }

  static U load_u32(const std::uint32_t* p, std::size_t vl) {
    U r;
    for (int i = 0; i < R; ++i) r.r[i] = Reg::load_u32_part(p + K * i, Reg::lanes(vl, i));
    return r;
  }
  static V bf16_low(U w, std::size_t) {
    V r;
    for (int i = 0; i < R; ++i) r.r[i] = Reg::bf16_low(w.r[i]);
    return r;
  }
  static V bf16_high(U w, std::size_t) {
    V r;
    for (int i = 0; i < R; ++i) r.r[i] = Reg::bf16_high(w.r[i]);
    return r;
  }
  // p[i] = clamp(round_half_even(v[i]), -127, 127) as int8 (finite v; MXCSR rounding).
  static void store_i8_rne(std::int8_t* p, V v, std::size_t vl) {
    for (int i = 0; i < R; ++i) {
      const typename Reg::Lanes l = Reg::lanes(vl, i);
      if (!Reg::any(l)) break;
      Reg::store_i8_part(p + K * i, v.r[i], l);
    }
  }

  template <class T>
  RVVK_ALWAYS_INLINE static V load(const T* p, std::size_t vl) {
    V r;
    if (vl == N) {  // whole vectors: no tail handling
      for (int i = 0; i < R; ++i) r.r[i] = Reg::ld(p + K * i, Reg::kAll);
      return r;
    }
    for (int i = 0; i < R; ++i) r.r[i] = Reg::load_part(p + K * i, Reg::lanes(vl, i));
    return r;
  }
  template <class T>
  RVVK_ALWAYS_INLINE static void store(T* p, V v, std::size_t vl) {
    if (vl == N) {
      for (int i = 0; i < R; ++i) Reg::st(p + K * i, v.r[i], Reg::kAll);
      return;
    }
    for (int i = 0; i < R; ++i) {
      const typename Reg::Lanes l = Reg::lanes(vl, i);
      if (!Reg::any(l)) break;
      Reg::st(p + K * i, v.r[i], l);
    }
  }
  // Strided access (element i at p[i * stride], stride in elements, may be negative):
  // through a contiguous buffer.
  template <class T>
  static V load_strided(const T* p, std::ptrdiff_t stride, std::size_t vl) {
    alignas(sizeof(Rv)) float buf[N];
    for (std::size_t i = 0; i < vl; ++i)
      buf[i] = scalar::to_f32(p[static_cast<std::ptrdiff_t>(i) * stride]);
    return load(static_cast<const float*>(buf), vl);
  }
  template <class T>
  static void store_strided(T* p, std::ptrdiff_t stride, V v, std::size_t vl) {
    alignas(sizeof(Rv)) float buf[N];
    store(static_cast<float*>(buf), v, vl);
    for (std::size_t i = 0; i < vl; ++i)
      p[static_cast<std::ptrdiff_t>(i) * stride] = scalar::from_f32<T>(buf[i]);
  }
};

// Exact int32 accumulators of int8 x int8 products (see vec_rvv.h); the products
// are formed in int16 (exact) and macc2 sums the pair in int16 like the RVV code.
template <class Reg, int LMUL>
struct I8Acc {
  static constexpr int R = LMUL;
  static constexpr std::size_t K = Reg::kLanes;
  static constexpr std::size_t N = F32<Reg, LMUL>::N;
  struct V {
    typename Reg::I r[R];
  };
  struct W {
    typename Reg::W r[R];  // K int8 each
  };
  static std::size_t setvl(std::size_t n) { return n < N ? n : N; }
  static constexpr std::size_t vlmax() { return N; }
  static V zero(std::size_t) {
    V v;
    for (int i = 0; i < R; ++i) v.r[i] = Reg::zero_i32();
    return v;
  }
  static W load(const std::int8_t* p, std::size_t vl) {
    W w;
    for (int i = 0; i < R; ++i) w.r[i] = Reg::load_i8_part(p + K * i, Reg::lanes(vl, i));
    return w;
  }
  static V macc(V acc, std::int8_t a, W w, std::size_t) {
    const typename Reg::I16 k = Reg::splat_i16(a);
    for (int i = 0; i < R; ++i) acc.r[i] = Reg::acc_i16(acc.r[i], Reg::mul_i8(w.r[i], k));
    return acc;
  }
  static V macc2(V acc, std::int8_t a0, W w0, std::int8_t a1, W w1, std::size_t) {
    const typename Reg::I16 k0 = Reg::splat_i16(a0), k1 = Reg::splat_i16(a1);
    for (int i = 0; i < R; ++i) {
      const typename Reg::I16 prod = Reg::add_i16(Reg::mul_i8(w0.r[i], k0), Reg::mul_i8(w1.r[i], k1));
      acc.r[i] = Reg::acc_i16(acc.r[i], prod);
    }
    return acc;
  }
  static typename F32<Reg, LMUL>::V to_f32(V v, std::size_t) {
    typename F32<Reg, LMUL>::V r;
    for (int i = 0; i < R; ++i) r.r[i] = Reg::to_f32(v.r[i], K);
    return r;
  }
};

}  // namespace rvvk::RVVK_NS::vec::x86
