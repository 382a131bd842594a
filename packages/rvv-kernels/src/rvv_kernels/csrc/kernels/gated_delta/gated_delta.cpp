// The gated delta rule (Gated DeltaNet's linear attention) in its recurrent form, one
// (sequence, value head) at a time, fp32 throughout. The state is [v_dim, k_dim]: row i
// maps keys to value component i, so every step is a dot product and an axpy along a
// contiguous row.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

using F = vec::F32<4>;

inline float dot(const float* a, const float* b, std::int64_t n) {
  const std::size_t vlmax = F::vlmax();
  F::V acc = F::splat(0.0f, vlmax);
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    acc = F::fmacc_tu(acc, F::load(a + i, vl), F::load(b + i, vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
  return F::reduce_sum(acc, vlmax);
}

// row = row * decay + d * k; returns row . q (of the updated row).
inline float update_row(float* row, const float* k, const float* q, float decay, float d,
                        std::int64_t n) {
  const std::size_t vlmax = F::vlmax();
  F::V acc = F::splat(0.0f, vlmax);
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    F::V s = F::mul(F::load(row + i, vl), decay, vl);
    s = F::fmacc(s, d, F::load(k + i, vl), vl);
    F::store(row + i, s, vl);
    acc = F::fmacc_tu(acc, s, F::load(q + i, vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
  return F::reduce_sum(acc, vlmax);
}

}  // namespace

void gated_delta_rule(float* state, std::int64_t state_stride, const float* q,
                      std::int64_t q_stride, const float* k, std::int64_t k_stride,
                      const float* v, std::int64_t v_stride, const float* g,
                      const float* beta, float* out, std::int64_t out_stride,
                      std::int64_t tokens, std::int64_t k_dim, std::int64_t v_dim,
                      float scale) {
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* qt = q + t * q_stride;
    const float* kt = k + t * k_stride;
    const float* vt = v + t * v_stride;
    float* ot = out + t * out_stride;
    const float decay = std::exp(g[t]);
    const float b = beta[t];
    for (std::int64_t i = 0; i < v_dim; ++i) {
      float* row = state + i * state_stride;
      // (decay S) k = decay (S k): the decayed state's prediction of v.
      const float d = b * (vt[i] - decay * dot(row, kt, k_dim));
      ot[i] = scale * update_row(row, kt, qt, decay, d, k_dim);
    }
  }
}

}  // namespace rvvk::RVVK_NS
