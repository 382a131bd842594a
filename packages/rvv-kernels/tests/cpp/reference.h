// Scalar helpers for the element-wise kernel tests: dtype conversions in double,
// a typed byte buffer, a small random generator. They do not share code with
// the kernels (in particular not rvvk/detail/). The attention tests' reference
// is the conformance suite's (tests/conformance, via case_file.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "rvvk/rvvk.h"

namespace ref {

inline double decode_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline double decode_f16(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0x1f) {
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (exp == 0) {
    v = std::ldexp(mant, -24);
  } else {
    v = std::ldexp(1024 + mant, exp - 25);
  }
  return sign ? -v : v;
}

// Magnitude-ordered codes 0..inf_code; round |x| to the nearest, ties to even,
// treating the infinity code as the next value after the largest finite one.
template <class Decode>
std::uint16_t encode_rne(double x, Decode decode, std::uint16_t inf_code, std::uint16_t nan_code,
                         double after_max) {
  if (std::isnan(x)) return nan_code;
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  auto value = [&](std::uint32_t c) { return c == inf_code ? after_max : decode(c); };
  if (a >= after_max) return sign | inf_code;
  std::uint32_t lo = 0, hi = inf_code;  // value(lo) <= a < value(hi)
  while (hi - lo > 1) {
    const std::uint32_t mid = (lo + hi) / 2;
    if (value(mid) <= a) lo = mid; else hi = mid;
  }
  const double dlo = a - value(lo), dhi = value(hi) - a;
  std::uint32_t c = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
  return static_cast<std::uint16_t>(sign | c);
}

inline double decode_e5m2(std::uint16_t b) { return decode_f16(static_cast<std::uint16_t>(b << 8)); }

inline double decode_e4m3(std::uint16_t b) {
  const int sign = (b >> 7) & 1, exp = (b >> 3) & 0xf, mant = b & 7;
  double v;
  if (exp == 0xf && mant == 7) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(mant, -9);
  } else {
    v = std::ldexp(8 + mant, exp - 10);
  }
  return sign ? -v : v;
}

inline std::uint16_t encode_bf16(double x) {
  return encode_rne(x, decode_bf16, 0x7f80, 0x7fc0, std::ldexp(1.0, 128));
}
inline std::uint16_t encode_f16(double x) {
  return encode_rne(x, decode_f16, 0x7c00, 0x7e00, 65536.0);
}

// Storage of a tensor of `dtype` in a byte vector, read/written as double
// (fp8 read only). kI8 holds integers: set() rounds to the nearest and clamps
// to [-127, 127].
struct Buffer {
  rvvk::DType dtype;
  std::vector<unsigned char> bytes;
  Buffer(rvvk::DType dt, std::size_t n) : dtype(dt), bytes(n * elem_size(dt)) {}
  static std::size_t elem_size(rvvk::DType dt) {
    switch (dt) {
      case rvvk::DType::kF32:
        return 4;
      case rvvk::DType::kBF16:
      case rvvk::DType::kF16:
        return 2;
      default:
        return 1;
    }
  }
  std::size_t size() const { return bytes.size() / elem_size(dtype); }
  void* data() { return bytes.data(); }
  double get(std::size_t i) const {
    if (dtype == rvvk::DType::kF32) {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      return f;
    }
    if (elem_size(dtype) == 1) {
      const std::uint8_t b = bytes[i];
      if (dtype == rvvk::DType::kI8) return static_cast<std::int8_t>(b);
      return dtype == rvvk::DType::kFP8E4M3 ? decode_e4m3(b) : decode_e5m2(b);
    }
    std::uint16_t h;
    std::memcpy(&h, &bytes[i * 2], 2);
    return dtype == rvvk::DType::kBF16 ? decode_bf16(h) : decode_f16(h);
  }
  std::uint32_t raw(std::size_t i) const {
    std::uint32_t u = 0;
    std::memcpy(&u, &bytes[i * elem_size(dtype)], elem_size(dtype));
    return u;
  }
  // Stores x rounded to the dtype.
  void set(std::size_t i, double x) {
    if (dtype == rvvk::DType::kF32) {
      const float f = static_cast<float>(x);
      std::memcpy(&bytes[i * 4], &f, 4);
      return;
    }
    if (dtype == rvvk::DType::kI8) {
      bytes[i] = static_cast<std::uint8_t>(
          static_cast<std::int8_t>(std::max(-127.0, std::min(127.0, std::nearbyint(x)))));
      return;
    }
    if (elem_size(dtype) == 1) std::abort();  // fp8: no test stores values (they read codes)
    const std::uint16_t h = dtype == rvvk::DType::kBF16 ? encode_bf16(x) : encode_f16(x);
    std::memcpy(&bytes[i * 2], &h, 2);
  }
};

// Rounds x to the dtype and back.
inline double round_to(rvvk::DType dt, double x) {
  Buffer b(dt, 1);
  b.set(0, x);
  return b.get(0);
}

// Spacing of representable values of dtype around x.
inline double ulp(rvvk::DType dt, double x) {
  const int mant_bits = dt == rvvk::DType::kF32 ? 23 : dt == rvvk::DType::kBF16 ? 7 : 10;
  const int min_exp = dt == rvvk::DType::kF16 ? -14 : -126;
  int e;
  std::frexp(x, &e);
  return std::ldexp(1.0, std::max(e - 1, min_exp) - mant_bits);
}

// The dtypes' short names, in rvvk::DType order (the attention case files use them too).
inline constexpr const char* kDTypeNames[] = {"f32", "bf16", "f16", "e4m3", "e5m2", "i8"};
inline constexpr int kDTypeCount = sizeof kDTypeNames / sizeof kDTypeNames[0];

inline const char* name(rvvk::DType dt) {
  const int i = static_cast<int>(dt);
  return i >= 0 && i < kDTypeCount ? kDTypeNames[i] : "?";
}

// Small deterministic generator (xorshift64*).
struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * (next() >> 11) * 0x1p-53; }
};

}  // namespace ref
