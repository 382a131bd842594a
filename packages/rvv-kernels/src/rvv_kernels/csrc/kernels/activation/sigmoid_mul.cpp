// Sigmoid gates: x * sigmoid(gate), element-wise with a gate per element (Qwen3.5's
// attention output gate) or with one gate per row (Qwen2-MoE's shared-expert gate). fp32
// arithmetic for every dtype, rounded once.
#include <cstddef>
#include <cstdint>

#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

using F = vec::F32<4>;

// x * sigmoid(g) as x / (1 + exp(-g)). For g < -88 exp saturates near fp32's maximum and
// the quotient is a tiny number of x's sign (or 0) instead of the exact, even tinier one.
inline F::V gated(F::V x, F::V g, std::size_t vl) {
  return F::div(x, F::add(F::exp(F::mul(g, -1.0f, vl), vl), 1.0f, vl), vl);
}

template <class T>
void sigmoid_mul_impl(T* out, std::int64_t out_stride, const T* x, std::int64_t x_stride,
                      const T* gate, std::int64_t gate_stride_t, std::int64_t gate_stride_h,
                      std::int64_t rows, std::int64_t heads, std::int64_t head_dim) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t h = 0; h < heads; ++h) {
      const T* xr = x + r * x_stride + h * head_dim;
      const T* gr = gate + r * gate_stride_t + h * gate_stride_h;
      T* o = out + r * out_stride + h * head_dim;
      for (std::int64_t j = 0; j < head_dim;) {
        const std::size_t vl = F::setvl(static_cast<std::size_t>(head_dim - j));
        F::store(o + j, gated(F::load(xr + j, vl), F::load(gr + j, vl), vl), vl);
        j += static_cast<std::int64_t>(vl);
      }
    }
  }
}

template <class T>
void sigmoid_scale_rows_impl(T* out, std::int64_t out_stride, const T* x, std::int64_t x_stride,
                             const float* gate, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    // sigmoid(gate[r]) once per row, in a one-lane vector: the same exp as the other lanes.
    const float s = F::reduce_sum(gated(F::splat(1.0f, 1), F::splat(gate[r], 1), 1), 1);
    const T* xr = x + r * x_stride;
    T* o = out + r * out_stride;
    for (std::int64_t j = 0; j < cols;) {
      const std::size_t vl = F::setvl(static_cast<std::size_t>(cols - j));
      F::store(o + j, F::mul(F::load(xr + j, vl), s, vl), vl);
      j += static_cast<std::int64_t>(vl);
    }
  }
}

}  // namespace

void sigmoid_mul(DType dtype, void* out, std::int64_t out_stride, const void* x,
                 std::int64_t x_stride, const void* gate, std::int64_t gate_stride_t,
                 std::int64_t gate_stride_h, std::int64_t rows, std::int64_t heads,
                 std::int64_t head_dim) {
  switch (dtype) {
    case DType::kF32:
      return sigmoid_mul_impl(static_cast<float*>(out), out_stride, static_cast<const float*>(x),
                              x_stride, static_cast<const float*>(gate), gate_stride_t,
                              gate_stride_h, rows, heads, head_dim);
    case DType::kBF16:
      return sigmoid_mul_impl(static_cast<bf16*>(out), out_stride, static_cast<const bf16*>(x),
                              x_stride, static_cast<const bf16*>(gate), gate_stride_t,
                              gate_stride_h, rows, heads, head_dim);
    case DType::kF16:
      return sigmoid_mul_impl(static_cast<f16*>(out), out_stride, static_cast<const f16*>(x),
                              x_stride, static_cast<const f16*>(gate), gate_stride_t,
                              gate_stride_h, rows, heads, head_dim);
    default:
      return;  // not a floating-point activation dtype: rejected by the caller
  }
}

void sigmoid_scale_rows(DType dtype, void* out, std::int64_t out_stride, const void* x,
                        std::int64_t x_stride, const float* gate, std::int64_t rows,
                        std::int64_t cols) {
  switch (dtype) {
    case DType::kF32:
      return sigmoid_scale_rows_impl(static_cast<float*>(out), out_stride,
                                     static_cast<const float*>(x), x_stride, gate, rows, cols);
    case DType::kBF16:
      return sigmoid_scale_rows_impl(static_cast<bf16*>(out), out_stride,
                                     static_cast<const bf16*>(x), x_stride, gate, rows, cols);
    case DType::kF16:
      return sigmoid_scale_rows_impl(static_cast<f16*>(out), out_stride,
                                     static_cast<const f16*>(x), x_stride, gate, rows, cols);
    default:
      return;  // not a floating-point activation dtype: rejected by the caller
  }
}

}  // namespace rvvk::RVVK_NS
