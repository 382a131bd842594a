// RMSNorm and fused residual-add + RMSNorm, fp32 accumulation for every dtype.
// A weight offset serves Gemma's variant, which scales by (1 + weight); no weight, the
// weightless norm (sgl-kernel's l2norm); a gate, the gated norm (times silu(gate)).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

// LMUL 4: x, weight and the bf16/fp16 narrowing temporaries fit in 32 registers.
using F = vec::F32<4>;

template <class T>
float sum_of_squares(const T* x, std::int64_t n) {
  const std::size_t vlmax = F::vlmax();
  F::V acc = F::splat(0.0f, vlmax);
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    const F::V v = F::load(x + i, vl);
    acc = F::fmacc_tu(acc, v, v, vl);
    i += static_cast<std::int64_t>(vl);
  }
  return F::reduce_sum(acc, vlmax);
}

// out = x * inv_rms * (w + w_offset). `out` may alias `x`.
template <bool kOffset, class T>
void scale_by_weight(T* out, const T* x, const T* w, float inv_rms, float w_offset,
                     std::int64_t n) {
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    const F::V v = F::mul(F::load(x + i, vl), inv_rms, vl);
    F::V wv = F::load(w + i, vl);
    if constexpr (kOffset) wv = F::add(wv, w_offset, vl);
    F::store(out + i, F::mul(v, wv, vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
}

// out = x * inv_rms (no weight). `out` may alias `x`.
template <class T>
void scale_only(T* out, const T* x, float inv_rms, std::int64_t n) {
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    F::store(out + i, F::mul(F::load(x + i, vl), inv_rms, vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
}

template <class T>
void scale_by_weight(T* out, const T* x, const T* w, float inv_rms, float w_offset,
                     std::int64_t n) {
  if (w == nullptr) {
    scale_only(out, x, inv_rms, n);
  } else if (w_offset == 0.0f) {
    scale_by_weight<false>(out, x, w, inv_rms, w_offset, n);
  } else {
    scale_by_weight<true>(out, x, w, inv_rms, w_offset, n);
  }
}

inline float inv_rms(float sum_sq, std::int64_t n, float eps) {
  return 1.0f / std::sqrt(sum_sq / static_cast<float>(n) + eps);
}

template <class T>
void rmsnorm_impl(T* out, std::int64_t out_stride, const T* in, std::int64_t in_stride,
                  const T* w, std::int64_t rows, std::int64_t cols, float eps,
                  float w_offset) {
  if (cols <= 0) return;
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* x = in + r * in_stride;
    scale_by_weight(out + r * out_stride, x, w, inv_rms(sum_of_squares(x, cols), cols, eps),
                    w_offset, cols);
  }
}

// SiLU in fp32: g / (1 + exp(-g)) (the activation kernels' form).
inline F::V silu(F::V g, std::size_t vl) {
  return F::div(g, F::add(F::exp(F::mul(g, -1.0f, vl), vl), 1.0f, vl), vl);
}

// out = x * inv_rms(x) * w * silu(g), the product taken in that order in fp32.
template <class T>
void rmsnorm_gated_impl(T* out, std::int64_t out_stride, const T* in, std::int64_t in_stride,
                        const T* w, const T* gate, std::int64_t gate_stride, std::int64_t rows,
                        std::int64_t cols, float eps) {
  if (cols <= 0) return;
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* x = in + r * in_stride;
    const T* g = gate + r * gate_stride;
    T* o = out + r * out_stride;
    const float scale = inv_rms(sum_of_squares(x, cols), cols, eps);
    for (std::int64_t i = 0; i < cols;) {
      const std::size_t vl = F::setvl(static_cast<std::size_t>(cols - i));
      const F::V v = F::mul(F::mul(F::load(x + i, vl), scale, vl), F::load(w + i, vl), vl);
      F::store(o + i, F::mul(v, silu(F::load(g + i, vl), vl), vl), vl);
      i += static_cast<std::int64_t>(vl);
    }
  }
}

// As sgl-kernel's CPU op: the sum s = x + y is taken in fp32, residual = dtype(s) (rounded
// once) and input = dtype(s * inv_rms(s) * (w + w_offset)), the norm of the fp32 sum, not of
// the rounded residual. Pass 2 recomputes s from x and the original y rather than keeping
// an fp32 row buffer.
template <class T>
void fused_add_rmsnorm_impl(T* in, std::int64_t in_stride, T* res, std::int64_t res_stride,
                            const T* w, std::int64_t rows, std::int64_t cols, float eps,
                            float w_offset) {
  if (cols <= 0) return;
  const std::size_t vlmax = F::vlmax();
  for (std::int64_t r = 0; r < rows; ++r) {
    T* x = in + r * in_stride;
    T* y = res + r * res_stride;
    // Pass 1: sum of squares of s = x + y in fp32; nothing is written.
    F::V acc = F::splat(0.0f, vlmax);
    for (std::int64_t i = 0; i < cols;) {
      const std::size_t vl = F::setvl(static_cast<std::size_t>(cols - i));
      const F::V s = F::add(F::load(x + i, vl), F::load(y + i, vl), vl);
      acc = F::fmacc_tu(acc, s, s, vl);
      i += static_cast<std::int64_t>(vl);
    }
    const float scale = inv_rms(F::reduce_sum(acc, vlmax), cols, eps);
    // Pass 2: y = dtype(s), x = dtype(s * scale * (w + w_offset)).
    for (std::int64_t i = 0; i < cols;) {
      const std::size_t vl = F::setvl(static_cast<std::size_t>(cols - i));
      const F::V s = F::add(F::load(x + i, vl), F::load(y + i, vl), vl);
      F::store(y + i, s, vl);
      F::V wv = F::load(w + i, vl);
      if (w_offset != 0.0f) wv = F::add(wv, w_offset, vl);
      F::store(x + i, F::mul(F::mul(s, scale, vl), wv, vl), vl);
      i += static_cast<std::int64_t>(vl);
    }
  }
}

}  // namespace

void rmsnorm(DType dtype, void* out, std::int64_t out_stride, const void* input,
             std::int64_t input_stride, const void* weight, std::int64_t rows,
             std::int64_t cols, float eps, float weight_offset) {
  switch (dtype) {
    case DType::kF32:
      return rmsnorm_impl(static_cast<float*>(out), out_stride, static_cast<const float*>(input),
                          input_stride, static_cast<const float*>(weight), rows, cols, eps,
                          weight_offset);
    case DType::kBF16:
      return rmsnorm_impl(static_cast<bf16*>(out), out_stride, static_cast<const bf16*>(input),
                          input_stride, static_cast<const bf16*>(weight), rows, cols, eps,
                          weight_offset);
    case DType::kF16:
      return rmsnorm_impl(static_cast<f16*>(out), out_stride, static_cast<const f16*>(input),
                          input_stride, static_cast<const f16*>(weight), rows, cols, eps,
                          weight_offset);
    default:
      return;  // not a floating-point activation dtype: rejected by the caller
  }
}

void rmsnorm_gated(DType dtype, void* out, std::int64_t out_stride, const void* input,
                   std::int64_t input_stride, const void* weight, const void* gate,
                   std::int64_t gate_stride, std::int64_t rows, std::int64_t cols, float eps) {
  switch (dtype) {
    case DType::kF32:
      return rmsnorm_gated_impl(static_cast<float*>(out), out_stride,
                                static_cast<const float*>(input), input_stride,
                                static_cast<const float*>(weight),
                                static_cast<const float*>(gate), gate_stride, rows, cols, eps);
    case DType::kBF16:
      return rmsnorm_gated_impl(static_cast<bf16*>(out), out_stride,
                                static_cast<const bf16*>(input), input_stride,
                                static_cast<const bf16*>(weight), static_cast<const bf16*>(gate),
                                gate_stride, rows, cols, eps);
    case DType::kF16:
      return rmsnorm_gated_impl(static_cast<f16*>(out), out_stride,
                                static_cast<const f16*>(input), input_stride,
                                static_cast<const f16*>(weight), static_cast<const f16*>(gate),
                                gate_stride, rows, cols, eps);
    default:
      return;  // not a floating-point activation dtype: rejected by the caller
  }
}

void fused_add_rmsnorm(DType dtype, void* input, std::int64_t input_stride, void* residual,
                       std::int64_t residual_stride, const void* weight, std::int64_t rows,
                       std::int64_t cols, float eps, float weight_offset) {
  switch (dtype) {
    case DType::kF32:
      return fused_add_rmsnorm_impl(static_cast<float*>(input), input_stride,
                                    static_cast<float*>(residual), residual_stride,
                                    static_cast<const float*>(weight), rows, cols, eps,
                                    weight_offset);
    case DType::kBF16:
      return fused_add_rmsnorm_impl(static_cast<bf16*>(input), input_stride,
                                    static_cast<bf16*>(residual), residual_stride,
                                    static_cast<const bf16*>(weight), rows, cols, eps,
                                    weight_offset);
    case DType::kF16:
      return fused_add_rmsnorm_impl(static_cast<f16*>(input), input_stride,
                                    static_cast<f16*>(residual), residual_stride,
                                    static_cast<const f16*>(weight), rows, cols, eps,
                                    weight_offset);
    default:
      return;  // not a floating-point activation dtype: rejected by the caller
  }
}

}  // namespace rvvk::RVVK_NS
