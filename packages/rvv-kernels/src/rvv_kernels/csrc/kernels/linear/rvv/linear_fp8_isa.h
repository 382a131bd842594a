// FP8 e4m3 weight decoding for linear_fp8.cpp on RVV 1.0 (no fp8 or fp16 arithmetic
// needed). Defines rvvk::RVVK_NS::Fp8Weights<L>.
#pragma once

#include <riscv_vector.h>

#include <cstddef>
#include <cstdint>

#include "rvvk/detail/dispatch.h"
#include "rvvk/detail/vec.h"

namespace rvvk::RVVK_NS {
namespace {

// Fp8Weights<L>::load(p, vl): the e4m3 bytes p[0, vl) as fp32 lanes (LMUL L) holding
// fp8 value * 2^kExponent, exactly, in three integer instructions after the byte load:
// sign-extend to 32 bits (vsext.vf4), shift left by 20 (sign at bit 31, the 4 exponent
// and 3 mantissa bits at bits 20..26: an fp32 whose exponent bias 7 is read as 127, so
// the value times 2^-120, e4m3 subnormals landing on fp32 subnormals) and clear the
// sign copies in bits 27..30. 0x7f / 0xff (e4m3fn's NaN) decode as +-480, not NaN.
template <int L>
struct Fp8Weights {
  using F = vec::F32<L>;
  using T = vec::rvv::Lmul<L>;
  static constexpr int kExponent = -120;
  static typename F::V load(const std::uint8_t* p, std::size_t vl) {
    const typename T::I8 b = T::le_i8(reinterpret_cast<const std::int8_t*>(p), vl);
    const typename T::I w = __riscv_vsll(__riscv_vsext_vf4(b, vl), 20, vl);
    return T::as_f(__riscv_vand(w, static_cast<std::int32_t>(0x87f00000u), vl));
  }
  template <class Fn>
  RVVK_ALWAYS_INLINE static void load2(const std::uint8_t* p0, const std::uint8_t* p1,
                                       std::size_t vl, Fn&& fn) {
    const typename T::I8 b0 = T::le_i8(reinterpret_cast<const std::int8_t*>(p0), vl);
    const typename T::I8 b1 = T::le_i8(reinterpret_cast<const std::int8_t*>(p1), vl);
    const typename T::I16 h0 = __riscv_vwmul(b0, std::int8_t{64}, vl);
    const typename T::I16 h1 = __riscv_vwmul(b1, std::int8_t{64}, vl);
    const typename T::I i0 = __riscv_vwmul(h0, std::int16_t{16384}, vl);
    const typename T::I i1 = __riscv_vwmul(h1, std::int16_t{16384}, vl);
    fn(T::as_f(__riscv_vand(i0, static_cast<std::int32_t>(0x87f00000u), vl)),
       T::as_f(__riscv_vand(i1, static_cast<std::int32_t>(0x87f00000u), vl)));
  }
};

}  // namespace
}  // namespace rvvk::RVVK_NS
