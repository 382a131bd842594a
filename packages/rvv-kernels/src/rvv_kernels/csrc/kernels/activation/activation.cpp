// Gated activations of an MLP (SiLU, erf-GELU, tanh-GELU) times the "up" half, fp32
// arithmetic for every dtype.
#include <cstddef>
#include <cstdint>

#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

using F = vec::F32<4>;

// SiLU: x * sigmoid(x) = x / (1 + exp(-x)). For x < -88 exp saturates near fp32's maximum
// and the result is a tiny number of the right sign instead of the exact, even tinier one.
inline F::V silu(F::V x, std::size_t vl) {
  return F::div(x, F::add(F::exp(F::mul(x, -1.0f, vl), vl), 1.0f, vl), vl);
}

// GELU with erf, as torch computes it: x / 2 * (1 + erf(x / sqrt(2))).
inline F::V gelu(F::V x, std::size_t vl) {
  const F::V half = F::mul(x, 0.5f, vl);
  return F::fmacc(half, half, F::erf(F::mul(x, 0.70710678118654752f, vl), vl), vl);
}

// GELU with tanh: x / 2 * (1 + tanh(u)), u = sqrt(2 / pi) * (x + 0.044715 x^3), computed
// as x / (1 + exp(-2u)) (the same function): no cancellation in 1 + tanh(u) for x < 0.
inline F::V gelu_tanh(F::V x, std::size_t vl) {
  constexpr float kTwoSqrt2OverPi = 1.59576912160573071f;  // 2 * sqrt(2 / pi)
  const F::V x2 = F::mul(x, x, vl);
  const F::V inner = F::mul(x, F::fmacc(F::splat(1.0f, vl), 0.044715f, x2, vl), vl);
  const F::V e = F::exp(F::mul(inner, -kTwoSqrt2OverPi, vl), vl);
  return F::div(x, F::add(e, 1.0f, vl), vl);
}

template <Activation kAct>
F::V activate(F::V x, std::size_t vl) {
  if constexpr (kAct == Activation::kSilu) {
    return silu(x, vl);
  } else if constexpr (kAct == Activation::kGelu) {
    return gelu(x, vl);
  } else {
    return gelu_tanh(x, vl);
  }
}

template <Activation kAct, class T>
void act_and_mul_impl(T* out, std::int64_t out_stride, const T* in, std::int64_t in_stride,
                      std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* gate = in + r * in_stride;
    const T* up = gate + cols;
    T* o = out + r * out_stride;
    for (std::int64_t i = 0; i < cols;) {
      const std::size_t vl = F::setvl(static_cast<std::size_t>(cols - i));
      const F::V a = activate<kAct>(F::load(gate + i, vl), vl);
      F::store(o + i, F::mul(a, F::load(up + i, vl), vl), vl);
      i += static_cast<std::int64_t>(vl);
    }
  }
}

template <class T>
void act_dispatch(Activation act, void* out, std::int64_t out_stride, const void* in,
                  std::int64_t in_stride, std::int64_t rows, std::int64_t cols) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(in);
  switch (act) {
    case Activation::kSilu:
      return act_and_mul_impl<Activation::kSilu>(o, out_stride, x, in_stride, rows, cols);
    case Activation::kGelu:
      return act_and_mul_impl<Activation::kGelu>(o, out_stride, x, in_stride, rows, cols);
    case Activation::kGeluTanh:
      return act_and_mul_impl<Activation::kGeluTanh>(o, out_stride, x, in_stride, rows, cols);
  }
}

}  // namespace

void act_and_mul(Activation act, DType dtype, void* out, std::int64_t out_stride,
                 const void* input, std::int64_t input_stride, std::int64_t rows,
                 std::int64_t cols) {
  switch (dtype) {
    case DType::kF32:
      return act_dispatch<float>(act, out, out_stride, input, input_stride, rows, cols);
    case DType::kBF16:
      return act_dispatch<bf16>(act, out, out_stride, input, input_stride, rows, cols);
    case DType::kF16:
      return act_dispatch<f16>(act, out, out_stride, input, input_stride, rows, cols);
    default:
      return;  // not a floating-point activation dtype: rejected by the caller
  }
}

}  // namespace rvvk::RVVK_NS
