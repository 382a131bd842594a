// LayerNorm over rows, fp32 arithmetic for every dtype; weight and bias in fp32 or the
// activations' dtype (SGLang's LayerNorm keeps fp32 parameters by default).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

using F = vec::F32<4>;

// Two passes for the statistics (mean, then the mean of squared deviations): as accurate
// as the data allow even when the mean is large against the spread, where E[x^2] - mean^2
// would cancel. The third pass writes the output; a row is small enough to stay in cache.
template <class T, class W>
void layernorm_row(T* out, const T* x, const W* w, const W* b, std::int64_t n, float eps) {
  const std::size_t vlmax = F::vlmax();
  const F::V one = F::splat(1.0f, vlmax);
  F::V acc = F::splat(0.0f, vlmax);
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    acc = F::fmacc_tu(acc, F::load(x + i, vl), one, vl);
    i += static_cast<std::int64_t>(vl);
  }
  const float mean = F::reduce_sum(acc, vlmax) / static_cast<float>(n);
  acc = F::splat(0.0f, vlmax);
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    const F::V d = F::add(F::load(x + i, vl), -mean, vl);
    acc = F::fmacc_tu(acc, d, d, vl);
    i += static_cast<std::int64_t>(vl);
  }
  const float var = F::reduce_sum(acc, vlmax) / static_cast<float>(n);
  const float rstd = 1.0f / std::sqrt(var + eps);
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    const F::V d = F::mul(F::add(F::load(x + i, vl), -mean, vl), rstd, vl);
    const F::V wv = F::load(w + i, vl);
    if (b) {
      F::store(out + i, F::fmacc(F::load(b + i, vl), d, wv, vl), vl);
    } else {
      F::store(out + i, F::mul(d, wv, vl), vl);
    }
    i += static_cast<std::int64_t>(vl);
  }
}

// Residual add then LayerNorm: s = x + r in fp32 (recomputed by each pass rather than kept
// in an fp32 row buffer); r = dtype(s) and out = layernorm(s), the statistics of the
// unrounded sum. `out` may alias `x` (not `r`).
template <class T, class W>
void fused_add_layernorm_row(T* out, const T* x, T* r, const W* w, const W* b, std::int64_t n,
                             float eps) {
  const std::size_t vlmax = F::vlmax();
  const F::V one = F::splat(1.0f, vlmax);
  F::V acc = F::splat(0.0f, vlmax);
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    acc = F::fmacc_tu(acc, F::add(F::load(x + i, vl), F::load(r + i, vl), vl), one, vl);
    i += static_cast<std::int64_t>(vl);
  }
  const float mean = F::reduce_sum(acc, vlmax) / static_cast<float>(n);
  acc = F::splat(0.0f, vlmax);
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    const F::V d = F::add(F::add(F::load(x + i, vl), F::load(r + i, vl), vl), -mean, vl);
    acc = F::fmacc_tu(acc, d, d, vl);
    i += static_cast<std::int64_t>(vl);
  }
  const float var = F::reduce_sum(acc, vlmax) / static_cast<float>(n);
  const float rstd = 1.0f / std::sqrt(var + eps);
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    const F::V s = F::add(F::load(x + i, vl), F::load(r + i, vl), vl);
    F::store(r + i, s, vl);
    const F::V d = F::mul(F::add(s, -mean, vl), rstd, vl);
    const F::V wv = F::load(w + i, vl);
    if (b) {
      F::store(out + i, F::fmacc(F::load(b + i, vl), d, wv, vl), vl);
    } else {
      F::store(out + i, F::mul(d, wv, vl), vl);
    }
    i += static_cast<std::int64_t>(vl);
  }
}

template <class T, class W>
void fused_add_layernorm_impl(void* out, std::int64_t out_stride, const void* in,
                              std::int64_t in_stride, void* res, std::int64_t res_stride,
                              const void* weight, const void* bias, std::int64_t rows,
                              std::int64_t cols, float eps) {
  if (cols <= 0) return;
  for (std::int64_t r = 0; r < rows; ++r) {
    fused_add_layernorm_row(static_cast<T*>(out) + r * out_stride,
                            static_cast<const T*>(in) + r * in_stride,
                            static_cast<T*>(res) + r * res_stride, static_cast<const W*>(weight),
                            static_cast<const W*>(bias), cols, eps);
  }
}

template <class T>
void fused_add_layernorm_dispatch(DType param_dtype, void* out, std::int64_t out_stride,
                                  const void* in, std::int64_t in_stride, void* res,
                                  std::int64_t res_stride, const void* weight, const void* bias,
                                  std::int64_t rows, std::int64_t cols, float eps) {
  if (param_dtype == DType::kF32) {
    fused_add_layernorm_impl<T, float>(out, out_stride, in, in_stride, res, res_stride, weight,
                                       bias, rows, cols, eps);
  } else {
    fused_add_layernorm_impl<T, T>(out, out_stride, in, in_stride, res, res_stride, weight, bias,
                                   rows, cols, eps);
  }
}

template <class T, class W>
void layernorm_impl(void* out, std::int64_t out_stride, const void* in, std::int64_t in_stride,
                    const void* weight, const void* bias, std::int64_t rows, std::int64_t cols,
                    float eps) {
  if (cols <= 0) return;
  for (std::int64_t r = 0; r < rows; ++r) {
    layernorm_row(static_cast<T*>(out) + r * out_stride, static_cast<const T*>(in) + r * in_stride,
                  static_cast<const W*>(weight), static_cast<const W*>(bias), cols, eps);
  }
}

template <class T>
void layernorm_dispatch(DType param_dtype, void* out, std::int64_t out_stride, const void* in,
                        std::int64_t in_stride, const void* weight, const void* bias,
                        std::int64_t rows, std::int64_t cols, float eps) {
  if (param_dtype == DType::kF32) {
    layernorm_impl<T, float>(out, out_stride, in, in_stride, weight, bias, rows, cols, eps);
  } else {
    layernorm_impl<T, T>(out, out_stride, in, in_stride, weight, bias, rows, cols, eps);
  }
}

}  // namespace

void layernorm(DType dtype, void* out, std::int64_t out_stride, const void* input,
               std::int64_t input_stride, DType param_dtype, const void* weight,
               const void* bias, std::int64_t rows, std::int64_t cols, float eps) {
  switch (dtype) {
    case DType::kF32:
      return layernorm_dispatch<float>(param_dtype, out, out_stride, input, input_stride, weight,
                                       bias, rows, cols, eps);
    case DType::kBF16:
      return layernorm_dispatch<bf16>(param_dtype, out, out_stride, input, input_stride, weight,
                                      bias, rows, cols, eps);
    case DType::kF16:
      return layernorm_dispatch<f16>(param_dtype, out, out_stride, input, input_stride, weight,
                                     bias, rows, cols, eps);
    default:
      return;  // not a floating-point activation dtype: rejected by the caller
  }
}

void fused_add_layernorm(DType dtype, void* out, std::int64_t out_stride, const void* input,
                         std::int64_t input_stride, void* residual, std::int64_t residual_stride,
                         DType param_dtype, const void* weight, const void* bias,
                         std::int64_t rows, std::int64_t cols, float eps) {
  switch (dtype) {
    case DType::kF32:
      return fused_add_layernorm_dispatch<float>(param_dtype, out, out_stride, input,
                                                 input_stride, residual, residual_stride, weight,
                                                 bias, rows, cols, eps);
    case DType::kBF16:
      return fused_add_layernorm_dispatch<bf16>(param_dtype, out, out_stride, input,
                                                input_stride, residual, residual_stride, weight,
                                                bias, rows, cols, eps);
    case DType::kF16:
      return fused_add_layernorm_dispatch<f16>(param_dtype, out, out_stride, input, input_stride,
                                               residual, residual_stride, weight, bias, rows,
                                               cols, eps);
    default:
      return;  // not a floating-point activation dtype: rejected by the caller
  }
}

}  // namespace rvvk::RVVK_NS
