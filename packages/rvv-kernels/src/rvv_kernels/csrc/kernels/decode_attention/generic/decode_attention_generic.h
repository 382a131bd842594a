// Decode attention's products on the vector layer alone (namespace generic):
// every (key, head) dot product reduced on its own, each K and V row converted
// once per group of up to 4 heads. The portable variant uses them as they are,
// RVV for all but bf16 caches (rvv/), x86 not at all.
#pragma once

#include "../decode_attention_common.h"

namespace rvvk::RVVK_NS {
namespace {

// Keys per block. The next block's K and V rows are prefetched while this one
// is computed.
constexpr std::int64_t kBlock = 64;

namespace generic {
// scores[g * kBlock + j] = qf[g] . k_j for heads g0 <= g < g0 + NG; prefetches
// pf's rows along the way (key j: pf's row j), when pf is given.
template <int NG, class TK>
void qk_heads(const float* qf, std::int64_t dim, const TK* const* krows, std::int64_t nb,
              float* scores, std::int64_t g0, const Prefetch<TK>* pf) {
  const std::size_t vlmax = F::vlmax();
  const float* q0 = qf + g0 * dim;
  for (std::int64_t j = 0; j < nb; ++j) {
    if (detail::kCanPrefetch && pf && j < pf->n) {
      detail::prefetch(pf->k[j], pf->k_bytes);
      detail::prefetch(pf->v[j], pf->v_bytes);
    }
    const TK* k = krows[j];
    F::V a0 = F::splat(0.0f, vlmax), a1 = a0, a2 = a0, a3 = a0;
    for (std::int64_t i = 0; i < dim;) {
      const std::size_t vl = F::setvl(static_cast<std::size_t>(dim - i));
      const F::V kv = F::load(k + i, vl);
      a0 = F::fmacc_tu(a0, kv, F::load(q0 + i, vl), vl);
      if constexpr (NG > 1) a1 = F::fmacc_tu(a1, kv, F::load(q0 + dim + i, vl), vl);
      if constexpr (NG > 2) a2 = F::fmacc_tu(a2, kv, F::load(q0 + 2 * dim + i, vl), vl);
      if constexpr (NG > 3) a3 = F::fmacc_tu(a3, kv, F::load(q0 + 3 * dim + i, vl), vl);
      i += static_cast<std::int64_t>(vl);
    }
    float* s = scores + g0 * kBlock + j;
    s[0] = F::reduce_sum(a0, vlmax);
    if constexpr (NG > 1) s[kBlock] = F::reduce_sum(a1, vlmax);
    if constexpr (NG > 2) s[2 * kBlock] = F::reduce_sum(a2, vlmax);
    if constexpr (NG > 3) s[3 * kBlock] = F::reduce_sum(a3, vlmax);
  }
}

// acc[g] += sum_j p[g, j] * v_j for heads g0 <= g < g0 + NG.
template <int NG, class TV>
void pv_heads(float* acc, std::int64_t dim_v, const TV* const* vrows, std::int64_t nb,
              const float* p, std::int64_t g0) {
  float* c0 = acc + g0 * dim_v;
  const float* p0 = p + g0 * kBlock;
  for (std::int64_t i = 0; i < dim_v;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(dim_v - i));
    F::V a0 = F::load(c0 + i, vl), a1 = a0, a2 = a0, a3 = a0;
    if constexpr (NG > 1) a1 = F::load(c0 + dim_v + i, vl);
    if constexpr (NG > 2) a2 = F::load(c0 + 2 * dim_v + i, vl);
    if constexpr (NG > 3) a3 = F::load(c0 + 3 * dim_v + i, vl);
    for (std::int64_t j = 0; j < nb; ++j) {
      const F::V vv = F::load(vrows[j] + i, vl);
      a0 = F::fmacc(a0, p0[j], vv, vl);
      if constexpr (NG > 1) a1 = F::fmacc(a1, p0[kBlock + j], vv, vl);
      if constexpr (NG > 2) a2 = F::fmacc(a2, p0[2 * kBlock + j], vv, vl);
      if constexpr (NG > 3) a3 = F::fmacc(a3, p0[3 * kBlock + j], vv, vl);
    }
    F::store(c0 + i, a0, vl);
    if constexpr (NG > 1) F::store(c0 + dim_v + i, a1, vl);
    if constexpr (NG > 2) F::store(c0 + 2 * dim_v + i, a2, vl);
    if constexpr (NG > 3) F::store(c0 + 3 * dim_v + i, a3, vl);
    i += static_cast<std::int64_t>(vl);
  }
}

// No scratch beyond the driver's.
struct Scratch {};

// The interface the driver uses (see decode_attention.cpp): q of the task's
// heads scaled into fp32, the block's scores q.k, the accumulators += P.V, and
// the output rows' order (natural here).
template <class TQ, class TKV>
class Products : protected ProductsBase {
 public:
  // heads: the task's query heads; q: the driver's fp32 q scratch (heads x dim).
  Products(const DecodeAttentionArgs& a, std::int64_t /*heads*/, float* q, Scratch& /*s*/)
      : ProductsBase(a, q) {}

  // Head g's q (src: dim elements) into the form the products read.
  void prepare_q(std::int64_t g, const TQ* src) { scale_q(q_ + g * dim_, src, dim_, scale_); }

  // scores[g * kBlock + j] = q[h * group + g] . k_j for the group's heads g
  // (KV head h of the task), prefetching the next block's rows along the way.
  void qk(std::int64_t h, const BlockRows<TKV>& r, float* scores) const {
    const Prefetch<TKV> pf{r.k_bytes, r.v_bytes, r.k + kBlock, r.v + kBlock, r.next, 0};
    prefetch_first(r);
    const float* const qf = q_ + h * group_ * dim_;
    for_head_groups<4>(group_, [&](auto ng, std::int64_t g0) {
      qk_heads<decltype(ng)::value>(qf, dim_, r.k, r.nb, scores, g0, g0 == 0 ? &pf : nullptr);
    });
  }

  // acc[g] += sum_j p[g * kBlock + j] * v_j for the group's heads.
  void pv(float* acc, const BlockRows<TKV>& r, const float* p) const {
    for_head_groups<4>(group_, [&](auto ng, std::int64_t g0) {
      pv_heads<decltype(ng)::value>(acc, dim_v_, r.v, r.nb, p, g0);
    });
  }

  // An output row (dim_v values, the accumulator's order) into natural order.
  void to_natural(float* /*out*/) const {}
};
}  // namespace generic
}  // namespace
}  // namespace rvvk::RVVK_NS
