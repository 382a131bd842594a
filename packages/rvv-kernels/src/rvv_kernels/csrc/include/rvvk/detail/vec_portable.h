// Portable implementation of the vector layer (see vec.h for the contract).
//
// It emulates a vector unit with a fixed VLEN of kVlenBits in plain C++:
// vectors are small arrays, arithmetic runs over all lanes (tail agnostic, so
// the compiler sees fixed trip counts and may auto-vectorise for the host),
// loads and stores touch exactly `vl` elements. Compiled for riscv64 with
// -march=rv64gc this is also the scalar baseline the RVV build is compared with.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "rvvk/detail/scalar.h"

namespace rvvk::RVVK_NS::vec {

// VLEN of the vector unit this layer acts as (vec.h adds vlen_bits(), kIsRvv, kHasZvfh).
inline constexpr std::size_t kVlenBits = 256;

// LMUL of the extend kernel's matrix products (as on RVV).
inline constexpr int kMatrixLmul = 8;

template <int LMUL>
struct F32 {
  static constexpr std::size_t N = kVlenBits / 32 * LMUL;
  struct V {
    float x[N];
  };

  static std::size_t setvl(std::size_t n) { return n < N ? n : N; }
  static constexpr std::size_t vlmax() { return N; }
  static V splat(float s, std::size_t) {
    V r;
    for (std::size_t i = 0; i < N; ++i) r.x[i] = s;
    return r;
  }
  static V add(V a, V b, std::size_t) {
    for (std::size_t i = 0; i < N; ++i) a.x[i] += b.x[i];
    return a;
  }
  static V sub(V a, V b, std::size_t) {
    for (std::size_t i = 0; i < N; ++i) a.x[i] -= b.x[i];
    return a;
  }
  static V mul(V a, V b, std::size_t) {
    for (std::size_t i = 0; i < N; ++i) a.x[i] *= b.x[i];
    return a;
  }
  static V mul(V a, float s, std::size_t) {
    for (std::size_t i = 0; i < N; ++i) a.x[i] *= s;
    return a;
  }
  static V fmacc(V acc, V a, V b, std::size_t) {
    for (std::size_t i = 0; i < N; ++i) acc.x[i] += a.x[i] * b.x[i];
    return acc;
  }
  static V fmacc_tu(V acc, V a, V b, std::size_t vl) {
    for (std::size_t i = 0; i < vl; ++i) acc.x[i] += a.x[i] * b.x[i];
    return acc;
  }
  static float reduce_sum(V v, std::size_t vl) {
    float s = 0.0f;
    for (std::size_t i = 0; i < vl; ++i) s += v.x[i];
    return s;
  }
  static V add(V a, float s, std::size_t) {
    for (std::size_t i = 0; i < N; ++i) a.x[i] += s;
    return a;
  }
  static V max(V a, V b, std::size_t) {
    for (std::size_t i = 0; i < N; ++i) a.x[i] = a.x[i] < b.x[i] ? b.x[i] : a.x[i];
    return a;
  }
  static V div(V a, V b, std::size_t) {
    for (std::size_t i = 0; i < N; ++i) a.x[i] /= b.x[i];
    return a;
  }
  static V fmacc(V acc, float s, V b, std::size_t) {
    for (std::size_t i = 0; i < N; ++i) acc.x[i] += s * b.x[i];
    return acc;
  }
  static float reduce_max(V v, std::size_t vl) {
    float m = -__builtin_inff();
    for (std::size_t i = 0; i < vl; ++i) m = v.x[i] > m ? v.x[i] : m;
    return m;
  }
  // Same contract as the RVV layer: x < -87.33 gives exactly 0.
  static V exp(V x, std::size_t vl) {
    for (std::size_t i = 0; i < vl; ++i) x.x[i] = x.x[i] < -87.33654f ? 0.0f : std::exp(x.x[i]);
    return x;
  }
  // exp for x <= 0 (the other layers' cheaper form): exp's own results here.
  static V exp_nonpositive(V x, std::size_t vl) { return exp(x, vl); }
  static V tanh(V x, std::size_t vl) {
    for (std::size_t i = 0; i < vl; ++i) x.x[i] = std::tanh(x.x[i]);
    return x;
  }
  static V erf(V x, std::size_t vl) {
    for (std::size_t i = 0; i < vl; ++i) x.x[i] = std::erf(x.x[i]);
    return x;
  }
  static V abs(V v, std::size_t) {
    for (std::size_t i = 0; i < N; ++i) v.x[i] = std::fabs(v.x[i]);
    return v;
  }
  // Packed bf16 pairs of the linear layers (see vec_rvv.h).
  struct U {
    std::uint32_t x[N];
  };
  static U load_u32(const std::uint32_t* p, std::size_t vl) {
    U r;
    for (std::size_t i = 0; i < vl; ++i) r.x[i] = p[i];
    for (std::size_t i = vl; i < N; ++i) r.x[i] = 0;
    return r;
  }
  static V bf16_low(U w, std::size_t) {
    V r;
    for (std::size_t i = 0; i < N; ++i) r.x[i] = scalar::bits_to_f32(w.x[i] << 16);
    return r;
  }
  static V bf16_high(U w, std::size_t) {
    V r;
    for (std::size_t i = 0; i < N; ++i) r.x[i] = scalar::bits_to_f32(w.x[i] & 0xffff0000u);
    return r;
  }
  static void store_i8_rne(std::int8_t* p, V v, std::size_t vl) {
    for (std::size_t i = 0; i < vl; ++i) {
      const float r = std::nearbyint(v.x[i]);  // default rounding: to nearest even
      p[i] = static_cast<std::int8_t>(r < -127.0f ? -127.0f : r > 127.0f ? 127.0f : r);
    }
  }
  template <class T>
  static V load(const T* p, std::size_t vl) {
    V r;
    for (std::size_t i = 0; i < vl; ++i) r.x[i] = scalar::to_f32(p[i]);
    for (std::size_t i = vl; i < N; ++i) r.x[i] = 0.0f;
    return r;
  }
  template <class T>
  static void store(T* p, V v, std::size_t vl) {
    for (std::size_t i = 0; i < vl; ++i) p[i] = scalar::from_f32<T>(v.x[i]);
  }
  template <class T>
  static V load_strided(const T* p, std::ptrdiff_t stride, std::size_t vl) {
    V r;
    for (std::size_t i = 0; i < vl; ++i) {
      r.x[i] = scalar::to_f32(p[static_cast<std::ptrdiff_t>(i) * stride]);
    }
    for (std::size_t i = vl; i < N; ++i) r.x[i] = 0.0f;
    return r;
  }
  template <class T>
  static void store_strided(T* p, std::ptrdiff_t stride, V v, std::size_t vl) {
    for (std::size_t i = 0; i < vl; ++i) {
      p[static_cast<std::ptrdiff_t>(i) * stride] = scalar::from_f32<T>(v.x[i]);
    }
  }
};

// Exact int32 accumulators of int8 x int8 products (see vec_rvv.h). macc2 sums the
// pair in int16 like the RVV code, so a caller that breaks its precondition gets the
// same wrong answer on both paths.
template <int LMUL>
struct I8Acc {
  static constexpr std::size_t N = F32<LMUL>::N;
  struct V {
    std::int32_t x[N];
  };
  struct W {
    std::int8_t x[N];
  };
  static std::size_t setvl(std::size_t n) { return n < N ? n : N; }
  static constexpr std::size_t vlmax() { return N; }
  static V zero(std::size_t) {
    V r;
    for (std::size_t i = 0; i < N; ++i) r.x[i] = 0;
    return r;
  }
  static W load(const std::int8_t* p, std::size_t vl) {
    W r;
    for (std::size_t i = 0; i < vl; ++i) r.x[i] = p[i];
    for (std::size_t i = vl; i < N; ++i) r.x[i] = 0;
    return r;
  }
  static V macc(V acc, std::int8_t a, W w, std::size_t) {
    for (std::size_t i = 0; i < N; ++i) acc.x[i] += a * w.x[i];
    return acc;
  }
  static V macc2(V acc, std::int8_t a0, W w0, std::int8_t a1, W w1, std::size_t) {
    for (std::size_t i = 0; i < N; ++i) {
      acc.x[i] += static_cast<std::int16_t>(a0 * w0.x[i] + a1 * w1.x[i]);
    }
    return acc;
  }
  static typename F32<LMUL>::V to_f32(V v, std::size_t) {
    typename F32<LMUL>::V r;
    for (std::size_t i = 0; i < N; ++i) r.x[i] = static_cast<float>(v.x[i]);
    return r;
  }
};

}  // namespace rvvk::RVVK_NS::vec
