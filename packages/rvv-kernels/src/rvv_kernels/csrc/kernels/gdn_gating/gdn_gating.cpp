// Gated DeltaNet gating: g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b), fp32
// arithmetic on the vector layer (no vector log: softplus through atanh's series).
#include <cstddef>
#include <cstdint>

#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

using F = vec::F32<4>;

// softplus(x) = max(x, 0) + log1p(e), e = exp(-|x|) in (0, 1]. log1p(e) = 2 atanh(u) with
// u = e / (2 + e) in (0, 1/3]: atanh(u) = u (1 + w/3 + w^2/5 + ...), w = u^2 <= 1/9, nine
// terms leave a truncation error below 2^-28 relative. For x > 20 the log1p term is below
// half an ulp of x, so the result is x, as torch's softplus(threshold=20) gives.
inline F::V softplus(F::V x, std::size_t vl) {
  const F::V e = F::exp(F::mul(F::abs(x, vl), -1.0f, vl), vl);
  const F::V u = F::div(e, F::add(e, 2.0f, vl), vl);
  const F::V w = F::mul(u, u, vl);
  constexpr float kCoef[] = {1.0f / 15, 1.0f / 13, 1.0f / 11, 1.0f / 9,
                             1.0f / 7,  1.0f / 5,  1.0f / 3,  1.0f};
  F::V p = F::splat(1.0f / 17, vl);
  for (const float c : kCoef) p = F::fmacc(F::splat(c, vl), p, w, vl);  // p = c + p w
  const F::V log1p = F::mul(F::mul(u, p, vl), 2.0f, vl);
  return F::add(F::max(x, F::splat(0.0f, vl), vl), log1p, vl);
}

template <class T, class P, class B>
void gating_impl(const GdnGatingArgs& args, std::int64_t begin, std::int64_t end) {
  const P* a_log = static_cast<const P*>(args.a_log);
  const B* dt_bias = static_cast<const B*>(args.dt_bias);
  for (std::int64_t r = begin; r < end; ++r) {
    const T* a = static_cast<const T*>(args.a) + r * args.a_stride;
    const T* b = static_cast<const T*>(args.b) + r * args.b_stride;
    float* g = args.g + r * args.g_stride;
    T* beta = static_cast<T*>(args.beta) + r * args.beta_stride;
    for (std::int64_t h = 0; h < args.heads;) {
      const std::size_t vl = F::setvl(static_cast<std::size_t>(args.heads - h));
      const F::V x = F::add(F::load(a + h, vl), F::load(dt_bias + h, vl), vl);
      const F::V decay = F::exp(F::load(a_log + h, vl), vl);
      F::store(g + h, F::mul(F::mul(decay, softplus(x, vl), vl), -1.0f, vl), vl);
      // sigmoid(b) = 1 / (1 + exp(-b))
      const F::V nb = F::mul(F::load(b + h, vl), -1.0f, vl);
      F::store(beta + h, F::div(F::splat(1.0f, vl), F::add(F::exp(nb, vl), 1.0f, vl), vl), vl);
      h += static_cast<std::int64_t>(vl);
    }
  }
}

template <class T, class P>
void gating_bias(const GdnGatingArgs& args, std::int64_t begin, std::int64_t end) {
  if (args.dt_bias_dtype == DType::kF32) {
    gating_impl<T, P, float>(args, begin, end);
  } else {
    gating_impl<T, P, T>(args, begin, end);
  }
}

template <class T>
void gating_params(const GdnGatingArgs& args, std::int64_t begin, std::int64_t end) {
  if (args.a_log_dtype == DType::kF32) {
    gating_bias<T, float>(args, begin, end);
  } else {
    gating_bias<T, T>(args, begin, end);
  }
}

}  // namespace

void gdn_gating(const GdnGatingArgs& args, std::int64_t row_begin, std::int64_t row_end) {
  switch (args.dtype) {
    case DType::kF32:
      return gating_params<float>(args, row_begin, row_end);
    case DType::kBF16:
      return gating_params<bf16>(args, row_begin, row_end);
    case DType::kF16:
      return gating_params<f16>(args, row_begin, row_end);
    default:
      return;  // not a floating-point activation dtype: rejected by the caller
  }
}

}  // namespace rvvk::RVVK_NS
