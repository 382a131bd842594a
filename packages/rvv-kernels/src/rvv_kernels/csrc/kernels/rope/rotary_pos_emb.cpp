// Rotary embedding with per-token cos/sin rows (SGLang's apply_rotary_pos_emb: neox
// layout over the whole head, cos and sin given per element), fp32 arithmetic.
#include <cstddef>
#include <cstdint>

#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

using F = vec::F32<4>;

// Strips of the half head outside heads: each strip of cos/sin (both halves) is loaded
// once per token for every head. Both halves of a strip are loaded before either is
// stored, so out == x works.
template <class T, class C>
void rotary_pos_emb_impl(const RotaryPosEmbArgs& a, std::int64_t begin, std::int64_t end) {
  const std::int64_t half = a.head_size / 2;
  const T* x = static_cast<const T*>(a.x);
  T* out = static_cast<T*>(a.out);
  for (std::int64_t t = begin; t < end; ++t) {
    const C* cos = static_cast<const C*>(a.cos) + t * a.cos_stride_t;
    const C* sin = static_cast<const C*>(a.sin) + t * a.sin_stride_t;
    const T* xt = x + t * a.x_stride_t;
    T* ot = out + t * a.out_stride_t;
    for (std::int64_t j = 0; j < half;) {
      const std::size_t vl = F::setvl(static_cast<std::size_t>(half - j));
      const F::V c1 = F::load(cos + j, vl);
      const F::V c2 = F::load(cos + half + j, vl);
      const F::V s1 = F::load(sin + j, vl);
      const F::V s2 = F::load(sin + half + j, vl);
      for (std::int64_t h = 0; h < a.heads; ++h) {
        const T* xi = xt + h * a.x_stride_h + j;
        T* oi = ot + h * a.out_stride_h + j;
        const F::V x1 = F::load(xi, vl);
        const F::V x2 = F::load(xi + half, vl);
        F::store(oi, F::sub(F::mul(x1, c1, vl), F::mul(x2, s1, vl), vl), vl);
        F::store(oi + half, F::fmacc(F::mul(x2, c2, vl), x1, s2, vl), vl);
      }
      j += static_cast<std::int64_t>(vl);
    }
  }
}

template <class T>
void rotary_pos_emb_dispatch(const RotaryPosEmbArgs& a, std::int64_t begin, std::int64_t end) {
  switch (a.cos_dtype) {
    case DType::kF32:
      return rotary_pos_emb_impl<T, float>(a, begin, end);
    case DType::kBF16:
      return rotary_pos_emb_impl<T, bf16>(a, begin, end);
    case DType::kF16:
      return rotary_pos_emb_impl<T, f16>(a, begin, end);
    default:
      return;  // rejected by the caller
  }
}

}  // namespace

void rotary_pos_emb(const RotaryPosEmbArgs& args, std::int64_t token_begin,
                    std::int64_t token_end) {
  switch (args.dtype) {
    case DType::kF32:
      return rotary_pos_emb_dispatch<float>(args, token_begin, token_end);
    case DType::kBF16:
      return rotary_pos_emb_dispatch<bf16>(args, token_begin, token_end);
    case DType::kF16:
      return rotary_pos_emb_dispatch<f16>(args, token_begin, token_end);
    default:
      return;  // not a floating-point activation dtype: rejected by the caller
  }
}

}  // namespace rvvk::RVVK_NS
