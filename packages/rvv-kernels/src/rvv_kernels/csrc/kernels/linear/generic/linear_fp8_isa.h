// FP8 e4m3 weight decoding for linear_fp8.cpp, plain C++ (the portable and x86 variants).
// Included inside no namespace; defines rvvk::RVVK_NS::Fp8Weights<L>.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rvvk/detail/dispatch.h"
#include "rvvk/detail/scalar.h"
#include "rvvk/detail/vec.h"

namespace rvvk::RVVK_NS {
namespace {

// Fp8Weights<L>::load(p, vl): the e4m3 bytes p[0, vl) as fp32 lanes (LMUL L) holding
// fp8 value * 2^kExponent, exactly. The bits come from integer operations: the byte
// sign-extended to 32 bits and shifted left by 20 puts the sign at bit 31 and the 4
// exponent and 3 mantissa bits at bits 20..26 (an fp32 with the exponent bias 7 read as
// 127, so the value times 2^-120; e4m3 subnormals land on fp32 subnormals); the
// sign-extension copies in bits 27..30 are cleared. 0x7f / 0xff (e4m3fn's NaN) decode
// as +-480, not NaN. load2(p0, p1, vl, fn) calls fn with the decodes of p0 and p1,
// load4(p, stride, vl, fn) with those of p + i * stride, i < 4.
template <int L>
struct Fp8Weights {
  using F = vec::F32<L>;
  static constexpr int kExponent = -120;
  static std::uint32_t bits(std::uint8_t b) {
    const auto wide =
        static_cast<std::uint32_t>(static_cast<std::int32_t>(static_cast<std::int8_t>(b)));
    return (wide << 20) & 0x87f00000u;
  }
  // sum + x * w (the grouped decodes' multiply-add).
  static typename F::V mac(typename F::V sum, float x, typename F::V w, std::size_t vl) {
    return F::fmacc(sum, x, w, vl);
  }
  static typename F::V load(const std::uint8_t* p, std::size_t vl) {
    float lanes[F::vlmax()];
    for (std::size_t i = 0; i < vl; ++i) lanes[i] = scalar::bits_to_f32(bits(p[i]));
    return F::load(lanes, vl);
  }
  template <class Fn>
  RVVK_ALWAYS_INLINE static void load2(const std::uint8_t* p0, const std::uint8_t* p1,
                                       std::size_t vl, Fn&& fn) {
    fn(load(p0, vl), load(p1, vl));
  }
  template <class Fn>
  RVVK_ALWAYS_INLINE static void load4(const std::uint8_t* p, std::ptrdiff_t stride,
                                       std::size_t vl, Fn&& fn) {
    fn(load(p, vl), load(p + stride, vl), load(p + 2 * stride, vl), load(p + 3 * stride, vl));
  }
};

}  // namespace
}  // namespace rvvk::RVVK_NS
