// Rotary position embedding (neox and GPT-J layouts, partial rotary dimension), fp32
// arithmetic, cos/sin table in fp32 or the activations' dtype.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

using F = vec::F32<4>;

// neox: the first elements of the pairs are contiguous (j), GPT-J: every other one (2j).
template <bool kNeox, class T>
F::V load_firsts(const T* p, std::size_t vl) {
  if constexpr (kNeox) {
    return F::load(p, vl);
  } else {
    return F::load_strided(p, 2, vl);
  }
}
template <bool kNeox, class T>
void store_firsts(T* p, F::V v, std::size_t vl) {
  if constexpr (kNeox) {
    F::store(p, v, vl);
  } else {
    F::store_strided(p, 2, v, vl);
  }
}

// Loops strips of the rotary half outside heads, so each strip of cos/sin is loaded once
// per token and reused by every head. Both elements of a pair are loaded before either is
// stored, so out == x works.
template <bool kNeox, class T, class C>
void rope_impl(const RotaryArgs& a, std::int64_t begin, std::int64_t end) {
  const std::int64_t half = a.rotary_dim / 2;
  // neox pairs j with j + half; GPT-J pairs 2j with 2j + 1.
  constexpr std::int64_t kStep = kNeox ? 1 : 2;
  const std::int64_t second = kNeox ? half : 1;
  const bool in_place =
      a.out == a.x && a.out_stride_t == a.x_stride_t && a.out_stride_h == a.x_stride_h;
  const std::int64_t rest = a.head_size - a.rotary_dim;
  const T* x = static_cast<const T*>(a.x);
  T* out = static_cast<T*>(a.out);
  for (std::int64_t t = begin; t < end; ++t) {
    const C* cos = static_cast<const C*>(a.cos_sin_cache) + a.positions[t] * a.cache_stride;
    const C* sin = cos + half;
    const T* xt = x + t * a.x_stride_t;
    T* ot = out + t * a.out_stride_t;
    for (std::int64_t j = 0; j < half;) {
      const std::size_t vl = F::setvl(static_cast<std::size_t>(half - j));
      const F::V c = F::load(cos + j, vl);
      const F::V s = F::load(sin + j, vl);
      const std::int64_t first = j * kStep;
      for (std::int64_t h = 0; h < a.heads; ++h) {
        const T* xi = xt + h * a.x_stride_h + first;
        T* oi = ot + h * a.out_stride_h + first;
        const F::V x1 = load_firsts<kNeox>(xi, vl);
        const F::V x2 = load_firsts<kNeox>(xi + second, vl);
        store_firsts<kNeox>(oi, F::sub(F::mul(x1, c, vl), F::mul(x2, s, vl), vl), vl);
        store_firsts<kNeox>(oi + second, F::fmacc(F::mul(x2, c, vl), x1, s, vl), vl);
      }
      j += static_cast<std::int64_t>(vl);
    }
    if (rest > 0 && !in_place) {
      for (std::int64_t h = 0; h < a.heads; ++h) {
        std::memcpy(ot + h * a.out_stride_h + a.rotary_dim, xt + h * a.x_stride_h + a.rotary_dim,
                    static_cast<std::size_t>(rest) * sizeof(T));
      }
    }
  }
}

template <class T, class C>
void rope_layout(const RotaryArgs& a, std::int64_t begin, std::int64_t end) {
  if (a.neox) {
    rope_impl<true, T, C>(a, begin, end);
  } else {
    rope_impl<false, T, C>(a, begin, end);
  }
}

template <class T>
void rope_dispatch(const RotaryArgs& a, std::int64_t begin, std::int64_t end) {
  if (a.cache_dtype == DType::kF32) {
    rope_layout<T, float>(a, begin, end);
  } else {
    rope_layout<T, T>(a, begin, end);
  }
}

}  // namespace

void rotary_embedding(const RotaryArgs& args, std::int64_t token_begin, std::int64_t token_end) {
  switch (args.dtype) {
    case DType::kF32:
      return rope_dispatch<float>(args, token_begin, token_end);
    case DType::kBF16:
      return rope_dispatch<bf16>(args, token_begin, token_end);
    case DType::kF16:
      return rope_dispatch<f16>(args, token_begin, token_end);
    default:
      return;  // not a floating-point activation dtype: rejected by the caller
  }
}

}  // namespace rvvk::RVVK_NS
