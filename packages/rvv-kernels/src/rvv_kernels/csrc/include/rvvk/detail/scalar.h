// Scalar element types and conversions shared by every variant.
#pragma once

#include <cstdint>
#include <cstring>

namespace rvvk {

// Storage-only 16-bit float types: the kernels compute in fp32.
struct bf16 {
  std::uint16_t bits;
};
struct f16 {
  std::uint16_t bits;
};
// 8-bit KV-cache element types (read-only in the kernels).
struct fp8e4m3 {
  std::uint8_t bits;
};
struct fp8e5m2 {
  std::uint8_t bits;
};

namespace scalar {

inline float bits_to_f32(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline std::uint32_t f32_to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float to_f32(float x) { return x; }
inline float to_f32(bf16 x) { return bits_to_f32(static_cast<std::uint32_t>(x.bits) << 16); }
inline float to_f32(f16 x) {
  const std::uint32_t sign = static_cast<std::uint32_t>(x.bits & 0x8000u) << 16;
  const std::uint32_t em = x.bits & 0x7fffu;
  std::uint32_t u;
  if (em >= 0x7c00u) {
    u = (em << 13) | 0x7f800000u;  // inf / nan
  } else {
    // Scaling by 2^112 re-biases the exponent and normalises subnormals.
    u = f32_to_bits(bits_to_f32(em << 13) * 0x1p112f);
  }
  return bits_to_f32(u | sign);
}

inline float to_f32(fp8e5m2 x) { return to_f32(f16{static_cast<std::uint16_t>(x.bits << 8)}); }
inline float to_f32(fp8e4m3 x) {
  const std::uint32_t sign = static_cast<std::uint32_t>(x.bits & 0x80u) << 24;
  const std::uint32_t em = x.bits & 0x7fu;
  if (em == 0x7fu) return bits_to_f32(sign | 0x7fc00000u);  // the only NaN encoding
  // Scaling by 2^120 re-biases the exponent (7 -> 127) and normalises subnormals.
  return bits_to_f32(f32_to_bits(bits_to_f32(em << 20) * 0x1p120f) | sign);
}
inline float to_f32(std::int8_t x) { return static_cast<float>(x); }

// Round to nearest, ties to even; NaN stays NaN (quiet).
inline bf16 to_bf16(float f) {
  const std::uint32_t u = f32_to_bits(f);
  if (f != f) return bf16{0x7fc0};
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<std::uint16_t>(rounded >> 16)};
}

// Round to nearest, ties to even; overflow to inf; subnormals kept.
inline f16 to_f16(float f) {
  std::uint32_t u = f32_to_bits(f);
  const std::uint32_t sign = u & 0x80000000u;
  u ^= sign;
  std::uint32_t o;
  if (u >= 0x47800000u) {  // >= 65536: inf or nan (or overflow to inf)
    o = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (u < 0x38800000u) {  // below the smallest normal f16: let the FPU round
    o = f32_to_bits(bits_to_f32(u) + 0.5f) - 0x3f000000u;
  } else {
    o = (u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13;
  }
  return f16{static_cast<std::uint16_t>(o | (sign >> 16))};
}

template <class T>
inline T from_f32(float x);
template <>
inline float from_f32<float>(float x) { return x; }
template <>
inline bf16 from_f32<bf16>(float x) { return to_bf16(x); }
template <>
inline f16 from_f32<f16>(float x) { return to_f16(x); }

}  // namespace scalar
}  // namespace rvvk
