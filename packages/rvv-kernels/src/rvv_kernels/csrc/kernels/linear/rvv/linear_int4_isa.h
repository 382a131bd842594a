// INT4 linear micro-kernels on RVV 1.0 intrinsics (the nibble unpacking and the widening
// integer multiply-adds the shared vector layer does not have). Included by
// linear_int4.cpp after Int4Ctx.
//
// Both kernels keep a block of MR rows times one strip of a panel (vl channels) in
// registers: per byte row of the panel one byte vector is loaded and split into its low
// nibbles (k even: vand 15) and high nibbles (k odd: vsrl 4), then used for all MR rows.
//  - W4A8: vwmaccsu.vx (int8 activation x unsigned nibble) into int16 for up to 8 byte
//    rows (16 k's: |sum| <= 16 * 128 * 15 = 30720 < 32768, so -128 is fine too), then
//    vwadd.wv into the group's int32 sums; per group acc -= S_g * z (vnmsac), then in fp32
//    y = y + (float(acc) * a_scale) * scale.
//  - W4A16: q - z by vwsubu.vv (u8 - u8, wrapping to the signed int16 difference), vfwcvt
//    to fp32 (exact), vfmacc.vf per row into the group's fp32 sums; per group
//    y = y + scale * sum (vfmacc.vv).
// The rows' running sums y live in cx.ybuf (fp32, one load and store per group), which
// leaves the 32 vector registers to the accumulators.
#pragma once

#include <riscv_vector.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "rvvk/detail/vec.h"

namespace rvvk::RVVK_NS {
namespace int4isa {

// Q<L32>: a strip whose fp32 / int32 vectors have LMUL L32, its byte (L32 / 4) and 16-bit
// (L32 / 2) vectors, and the intrinsics whose names carry the type.
template <int L32>
struct Q;
#define RVVK_INT4_Q(L32, E8, E16, E32)                                                      \
  template <>                                                                               \
  struct Q<L32> {                                                                           \
    using U8 = vuint8##E8##_t;                                                              \
    using I16 = vint16##E16##_t;                                                            \
    using I32 = vint32##E32##_t;                                                            \
    using F = vfloat32##E32##_t;                                                            \
    static std::size_t setvl(std::size_t n) { return __riscv_vsetvl_e8##E8(n); }            \
    static U8 load8(const std::uint8_t* p, std::size_t vl) { return __riscv_vle8_v_u8##E8(p, vl); } \
    static I16 zero16(std::size_t vl) { return __riscv_vmv_v_x_i16##E16(0, vl); }          \
    static I32 zero32(std::size_t vl) { return __riscv_vmv_v_x_i32##E32(0, vl); }          \
    static I32 widen32(U8 z, std::size_t vl) {                                              \
      return __riscv_vreinterpret_v_u32##E32##_i32##E32(__riscv_vzext_vf4(z, vl));          \
    }                                                                                       \
    static F loadf(const float* p, std::size_t vl) { return __riscv_vle32_v_f32##E32(p, vl); } \
    static F splatf(float x, std::size_t vl) { return __riscv_vfmv_v_f_f32##E32(x, vl); }   \
    /* q - z (both 0..15) in int16 */                                                       \
    static I16 diff(U8 q, U8 z, std::size_t vl) {                                           \
      return __riscv_vreinterpret_v_u16##E16##_i16##E16(__riscv_vwsubu_vv(q, z, vl));      \
    }                                                                                       \
  };
RVVK_INT4_Q(2, mf2, m1, m2)
RVVK_INT4_Q(4, m1, m2, m4)
#undef RVVK_INT4_Q

// Byte rows summed in int16 before widening into int32 (see the header comment).
constexpr std::int64_t kInt16Rows = 8;

// y rows [0, MR) of the strip: the bias (or 0).
template <class T>
inline void init_rows(const Int4Ctx& cx, int mr, std::int64_t n0, std::int64_t c,
                      std::size_t vl) {
  const typename T::F b = cx.bias ? T::loadf(cx.bias + n0 + c, vl) : T::splatf(0.0f, vl);
  for (int r = 0; r < mr; ++r) __riscv_vse32(cx.ybuf + r * cx.panel + c, b, vl);
}

template <int L32, class OutT>
inline void store_rows(const Int4Ctx& cx, int mr, std::int64_t c, OutT* out,
                       std::int64_t out_stride, std::size_t vl) {
  using F = vec::F32<L32>;
  for (int r = 0; r < mr; ++r) {
    F::store(out + r * out_stride + c, Q<L32>::loadf(cx.ybuf + r * cx.panel + c, vl), vl);
  }
}

template <int L32, int MR, class OutT>
void w4a8_block(const Int4Ctx& cx, const std::uint8_t* panel, const std::int8_t* ai,
                const std::int32_t* sums, const float* a_scales, std::int64_t n0, OutT* out,
                std::int64_t out_stride) {
  using T = Q<L32>;
  const std::int64_t nr = cx.panel, cols_left = std::min(nr, cx.n - n0);
  for (std::int64_t c = 0; c < cols_left;) {
    const std::size_t vl = T::setvl(static_cast<std::size_t>(cols_left - c));
    init_rows<T>(cx, MR, n0, c, vl);
    for (std::int64_t g = 0; g < cx.groups; ++g) {
#define RVVK_DECL(i) typename T::I32 acc##i = T::zero32(vl);
      RVVK_ROWS(RVVK_DECL)
#undef RVVK_DECL
      const std::int64_t ge = cx.group_end(g);
      for (std::int64_t kb = cx.group_begin(g); kb < ge;) {
        const std::int64_t kc = std::min(ge, kb + kInt16Rows);
#define RVVK_DECL(i) typename T::I16 s##i = T::zero16(vl);
        RVVK_ROWS(RVVK_DECL)
#undef RVVK_DECL
        const std::uint8_t* w = panel + kb * nr + c;
        // One byte row: its low nibbles (k = 2 kb) and high nibbles (k = 2 kb + 1) times
        // every row's activations.
#define RVVK_STEP(kbv, wp)                                                 \
  {                                                                        \
    const std::int8_t* ak = ai + 2 * (kbv) * MR;                           \
    const typename T::U8 b = T::load8(wp, vl);                             \
    const typename T::U8 lo = __riscv_vand(b, 15, vl);                     \
    const typename T::U8 hi = __riscv_vsrl(b, 4, vl);                      \
    RVVK_ROWS(RVVK_MAC)                                                    \
  }
#define RVVK_MAC(i)                                                   \
  if constexpr (MR > i) {                                             \
    s##i = __riscv_vwmaccsu(s##i, ak[i], lo, vl);                     \
    s##i = __riscv_vwmaccsu(s##i, ak[MR + i], hi, vl);                \
  }
        if (kc - kb == kInt16Rows) {
          // A full strip, unrolled: one vsetvli per strip, not per byte row.
#pragma clang loop unroll(full)
          for (std::int64_t u = 0; u < kInt16Rows; ++u) RVVK_STEP(kb + u, w + u * nr)
          kb = kc;
        } else {
          for (; kb < kc; ++kb, w += nr) RVVK_STEP(kb, w)
        }
#undef RVVK_MAC
#undef RVVK_STEP
#define RVVK_WIDEN(i) \
  if constexpr (MR > i) acc##i = __riscv_vwadd_wv(acc##i, s##i, vl);
        RVVK_ROWS(RVVK_WIDEN)
#undef RVVK_WIDEN
      }
      const typename T::I32 z = T::widen32(T::load8(cx.zeros + g * cx.n + n0 + c, vl), vl);
      const typename T::F sc = T::loadf(cx.scales + g * cx.n + n0 + c, vl);
      // (float(acc - S_g z) * a_scale) * scale added to y: three fp32 roundings, in order
#define RVVK_EPI(i)                                                                     \
  if constexpr (MR > i) {                                                               \
    float* y = cx.ybuf + i * nr + c;                                                    \
    acc##i = __riscv_vnmsac(acc##i, sums[i * cx.groups + g], z, vl);                    \
    typename T::F t = __riscv_vfmul(__riscv_vfcvt_f(acc##i, vl), a_scales[i], vl);      \
    t = __riscv_vfmul(t, sc, vl);                                                       \
    __riscv_vse32(y, __riscv_vfadd(T::loadf(y, vl), t, vl), vl);                        \
  }
      RVVK_ROWS(RVVK_EPI)
#undef RVVK_EPI
    }
    store_rows<L32>(cx, MR, c, out + n0, out_stride, vl);
    c += static_cast<std::int64_t>(vl);
  }
}

template <int L32, int MR, class OutT>
void w4a16_block(const Int4Ctx& cx, const std::uint8_t* panel, const float* xs,
                 std::int64_t n0, OutT* out, std::int64_t out_stride) {
  using T = Q<L32>;
  const std::int64_t nr = cx.panel, cols_left = std::min(nr, cx.n - n0);
  for (std::int64_t c = 0; c < cols_left;) {
    const std::size_t vl = T::setvl(static_cast<std::size_t>(cols_left - c));
    init_rows<T>(cx, MR, n0, c, vl);
    for (std::int64_t g = 0; g < cx.groups; ++g) {
      const typename T::U8 z = T::load8(cx.zeros + g * cx.n + n0 + c, vl);
#define RVVK_DECL(i) typename T::F s##i = T::splatf(0.0f, vl);
      RVVK_ROWS(RVVK_DECL)
#undef RVVK_DECL
      const std::int64_t ge = cx.group_end(g);
      const std::uint8_t* w = panel + cx.group_begin(g) * nr + c;
      const float* xk = xs + 2 * cx.group_begin(g) * MR;
      // Tail-undisturbed FMAs (vl is the same throughout, so no lane differs): they tie
      // the accumulator to the destination, where clang otherwise picks vfmadd into the
      // weight's register and copies the sum back every byte row.
#define RVVK_MAC(i, f, off)                                    \
  if constexpr (MR > i) s##i = __riscv_vfmacc_tu(s##i, xk[(off) + i], f, vl);
#define RVVK_MAC0L(i) RVVK_MAC(i, l0, 0)
#define RVVK_MAC0H(i) RVVK_MAC(i, h0, MR)
#define RVVK_MAC1L(i) RVVK_MAC(i, l1, 2 * MR)
#define RVVK_MAC1H(i) RVVK_MAC(i, h1, 3 * MR)
      std::int64_t kb = cx.group_begin(g);
      // Two byte rows per step, their byte ops, then the conversions, then the fp32 ops:
      // three vtypes per two byte rows.
      for (; kb + 2 <= ge; kb += 2, w += 2 * nr, xk += 4 * MR) {
        const typename T::U8 b0 = T::load8(w, vl);
        const typename T::U8 b1 = T::load8(w + nr, vl);
        const typename T::I16 d0l = T::diff(__riscv_vand(b0, 15, vl), z, vl);
        const typename T::I16 d0h = T::diff(__riscv_vsrl(b0, 4, vl), z, vl);
        const typename T::I16 d1l = T::diff(__riscv_vand(b1, 15, vl), z, vl);
        const typename T::I16 d1h = T::diff(__riscv_vsrl(b1, 4, vl), z, vl);
        const typename T::F l0 = __riscv_vfwcvt_f(d0l, vl);
        const typename T::F h0 = __riscv_vfwcvt_f(d0h, vl);
        const typename T::F l1 = __riscv_vfwcvt_f(d1l, vl);
        const typename T::F h1 = __riscv_vfwcvt_f(d1h, vl);
        RVVK_ROWS(RVVK_MAC0L)
        RVVK_ROWS(RVVK_MAC0H)
        RVVK_ROWS(RVVK_MAC1L)
        RVVK_ROWS(RVVK_MAC1H)
      }
      if (kb < ge) {  // an odd byte row left
        const typename T::U8 b0 = T::load8(w, vl);
        const typename T::I16 d0l = T::diff(__riscv_vand(b0, 15, vl), z, vl);
        const typename T::I16 d0h = T::diff(__riscv_vsrl(b0, 4, vl), z, vl);
        const typename T::F l0 = __riscv_vfwcvt_f(d0l, vl);
        const typename T::F h0 = __riscv_vfwcvt_f(d0h, vl);
        RVVK_ROWS(RVVK_MAC0L)
        RVVK_ROWS(RVVK_MAC0H)
      }
#undef RVVK_MAC0L
#undef RVVK_MAC0H
#undef RVVK_MAC1L
#undef RVVK_MAC1H
#undef RVVK_MAC
      const typename T::F sc = T::loadf(cx.scales + g * cx.n + n0 + c, vl);
#define RVVK_EPI(i)                                                               \
  if constexpr (MR > i) {                                                         \
    float* y = cx.ybuf + i * nr + c;                                              \
    __riscv_vse32(y, __riscv_vfmacc(T::loadf(y, vl), sc, s##i, vl), vl);          \
  }
      RVVK_ROWS(RVVK_EPI)
#undef RVVK_EPI
    }
    store_rows<L32>(cx, MR, c, out + n0, out_stride, vl);
    c += static_cast<std::int64_t>(vl);
  }
}

// Register budgets (32 vector registers): W4A8 holds per row an int32 (L32) and an int16
// (L32 / 2) accumulator plus three byte vectors; W4A16 per row one fp32 sum (L32) plus two
// dequantised fp32 vectors.
template <class OutT>
void w4a8_rows(int mr, const Int4Ctx& cx, const std::uint8_t* panel, const std::int8_t* ai,
               const std::int32_t* sums, const float* a_scales, std::int64_t n0, OutT* out,
               std::int64_t out_stride) {
  switch (mr) {
#define RVVK_CASE(R, L)                                                                   \
  case R:                                                                                 \
    return w4a8_block<L, R, OutT>(cx, panel, ai, sums, a_scales, n0, out, out_stride);
    RVVK_CASE(1, 4) RVVK_CASE(2, 4) RVVK_CASE(3, 4) RVVK_CASE(4, 4)
    RVVK_CASE(5, 2) RVVK_CASE(6, 2) RVVK_CASE(7, 2) RVVK_CASE(8, 2)
#undef RVVK_CASE
  }
}

template <class OutT>
void w4a16_rows(int mr, const Int4Ctx& cx, const std::uint8_t* panel, const float* xs,
                std::int64_t n0, OutT* out, std::int64_t out_stride) {
  switch (mr) {
#define RVVK_CASE(R, L)                                                                  \
  case R:                                                                                \
    return w4a16_block<L, R, OutT>(cx, panel, xs, n0, out, out_stride);
    RVVK_CASE(1, 4) RVVK_CASE(2, 4) RVVK_CASE(3, 2) RVVK_CASE(4, 2)
    RVVK_CASE(5, 2) RVVK_CASE(6, 2) RVVK_CASE(7, 2) RVVK_CASE(8, 2)
#undef RVVK_CASE
  }
}

}  // namespace int4isa
}  // namespace rvvk::RVVK_NS
