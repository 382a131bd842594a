// Decode attention's products on RVV (rvv, rvv_zvfh): bf16 caches read in pairs
// (namespace rvv below); other caches take the generic forms.
#pragma once

#include <riscv_vector.h>

#include "../generic/decode_attention_generic.h"

namespace rvvk::RVVK_NS {
namespace {

// The two products on RVV for bf16 caches (namespace rvv): RVV has no bf16
// arithmetic, and widening a bf16 row element-wise (vle16, vzext.vf2, vsll) is
// three instructions, two of them at twice the fp32 register group. A 32-bit
// load instead holds elements 2i (low half) and 2i + 1 (high half) in lane i:
// one shift gives the even elements in fp32, one mask the odd ones, each at
// the fp32 group of half the elements. The fp32 operands on the other side are
// kept split the same way for the whole row (pair order: q's and the P.V
// accumulators' even elements, then their odd ones; split_pairs / join_pairs),
// so this is VLEN-agnostic. q.k puts the keys in lanes (qk_gather: one indexed
// load gathers a word of every key's row, each head accumulates it times its
// scalar q elements: no reduction per key and head, no vector load of q per
// product); P.V keeps up to 6 heads' accumulators in registers while each V
// row is converted once (pv_heads). Both at LMUL 2. Rows must be 4-byte
// aligned (uses_pairs).
namespace rvv {
using V2 = vec::F32<2>;  // both products: LMUL 2
constexpr int kHeads = 6;  // heads per pass of each product
// qk_gather reads the row pointers as 64-bit offsets.
static_assert(sizeof(const bf16*) == sizeof(std::uint64_t), "rv64: 64-bit pointers");

inline bool aligned4(const void* base, std::int64_t stride_t, std::int64_t stride_h) {
  return (reinterpret_cast<std::uintptr_t>(base) % 4 == 0) && stride_t % 2 == 0 &&
         stride_h % 2 == 0;
}
// Whether a bf16 cache's rows go by pairs: even head sizes, 4-byte aligned rows.
template <class TKV>
inline bool uses_pairs(const KvCache& c, std::int64_t dim, std::int64_t dim_v) {
  return std::is_same_v<TKV, bf16> && dim > 0 && dim_v > 0 && dim % 2 == 0 && dim_v % 2 == 0 &&
         aligned4(c.k, c.k_stride_t, c.k_stride_h) && aligned4(c.v, c.v_stride_t, c.v_stride_h);
}

// x[0, n) (n even) from natural order to pair order (the even elements, then
// the odd ones), and back.
inline void split_pairs(float* x, std::int64_t n) {
  std::vector<float> t(x, x + n);
  for (std::int64_t i = 0; i < n / 2; ++i) {
    x[i] = t[static_cast<std::size_t>(2 * i)];
    x[n / 2 + i] = t[static_cast<std::size_t>(2 * i + 1)];
  }
}
inline void join_pairs(float* x, std::int64_t n) {
  std::vector<float> t(x, x + n);
  for (std::int64_t i = 0; i < n / 2; ++i) {
    x[2 * i] = t[static_cast<std::size_t>(i)];
    x[2 * i + 1] = t[static_cast<std::size_t>(n / 2 + i)];
  }
}

RVVK_ALWAYS_INLINE inline const std::uint32_t* words(const bf16* row) {
  return reinterpret_cast<const std::uint32_t*>(row);
}

// scores[g * kBlock + j] = qp[g] . k_j for heads g0 <= g < g0 + NG (q in pair
// order), keys in lanes: for each 32-bit word w of the rows, one indexed load
// gathers word w of up to vlmax keys (offsets from the first key's row), a
// shift and a mask give their elements 2w and 2w + 1 in fp32, and each head
// accumulates them times its scalar q elements (vfmacc.vf). No reduction per
// key and head, and q is read as scalars instead of one vector load per product.
template <int NG>
void qk_gather(const float* qp, std::int64_t dim, const bf16* const* krows, std::int64_t nb,
               float* scores, std::int64_t g0) {
  const std::int64_t half = dim / 2;
  const float* q = qp + g0 * dim;
  for (std::int64_t j0 = 0; j0 < nb;) {
    const std::size_t vl = V2::setvl(static_cast<std::size_t>(nb - j0));
    const std::uint32_t* base = words(krows[j0]);
    const vuint64m4_t idx = __riscv_vsub_vx_u64m4(
        __riscv_vle64_v_u64m4(reinterpret_cast<const std::uint64_t*>(krows + j0), vl),
        reinterpret_cast<std::uintptr_t>(base), vl);
    V2::V s0 = V2::splat(0.0f, vl), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0;
    for (std::int64_t w = 0; w < half; ++w) {
      const V2::U col = __riscv_vluxei64_v_u32m2(base + w, idx, vl);
      const V2::V ke = V2::bf16_low(col, vl), ko = V2::bf16_high(col, vl);
      const float* qw = q + w;
      s0 = V2::fmacc(V2::fmacc(s0, qw[0], ke, vl), qw[half], ko, vl);
      if constexpr (NG > 1) s1 = V2::fmacc(V2::fmacc(s1, qw[dim], ke, vl), qw[dim + half], ko, vl);
      if constexpr (NG > 2)
        s2 = V2::fmacc(V2::fmacc(s2, qw[2 * dim], ke, vl), qw[2 * dim + half], ko, vl);
      if constexpr (NG > 3)
        s3 = V2::fmacc(V2::fmacc(s3, qw[3 * dim], ke, vl), qw[3 * dim + half], ko, vl);
      if constexpr (NG > 4)
        s4 = V2::fmacc(V2::fmacc(s4, qw[4 * dim], ke, vl), qw[4 * dim + half], ko, vl);
      if constexpr (NG > 5)
        s5 = V2::fmacc(V2::fmacc(s5, qw[5 * dim], ke, vl), qw[5 * dim + half], ko, vl);
    }
    float* s = scores + g0 * kBlock + j0;
    V2::store(s, s0, vl);
    if constexpr (NG > 1) V2::store(s + kBlock, s1, vl);
    if constexpr (NG > 2) V2::store(s + 2 * kBlock, s2, vl);
    if constexpr (NG > 3) V2::store(s + 3 * kBlock, s3, vl);
    if constexpr (NG > 4) V2::store(s + 4 * kBlock, s4, vl);
    if constexpr (NG > 5) V2::store(s + 5 * kBlock, s5, vl);
    j0 += static_cast<std::int64_t>(vl);
  }
}

// acc[g] += sum_j p[g, j] * v_j for heads g0 <= g < g0 + NG (acc in pair order).
template <int NG>
void pv_heads(float* acc, std::int64_t dim_v, const bf16* const* vrows, std::int64_t nb,
              const float* p, std::int64_t g0) {
  const std::int64_t half = dim_v / 2;
  float* c = acc + g0 * dim_v;
  const float* p0 = p + g0 * kBlock;
  for (std::int64_t i = 0; i < half;) {
    const std::size_t vl = V2::setvl(static_cast<std::size_t>(half - i));
    V2::V e0 = V2::load(c + i, vl), o0 = V2::load(c + half + i, vl);
    V2::V e1 = e0, o1 = o0, e2 = e0, o2 = o0, e3 = e0, o3 = o0, e4 = e0, o4 = o0, e5 = e0, o5 = o0;
    if constexpr (NG > 1) e1 = V2::load(c + dim_v + i, vl), o1 = V2::load(c + dim_v + half + i, vl);
    if constexpr (NG > 2)
      e2 = V2::load(c + 2 * dim_v + i, vl), o2 = V2::load(c + 2 * dim_v + half + i, vl);
    if constexpr (NG > 3)
      e3 = V2::load(c + 3 * dim_v + i, vl), o3 = V2::load(c + 3 * dim_v + half + i, vl);
    if constexpr (NG > 4)
      e4 = V2::load(c + 4 * dim_v + i, vl), o4 = V2::load(c + 4 * dim_v + half + i, vl);
    if constexpr (NG > 5)
      e5 = V2::load(c + 5 * dim_v + i, vl), o5 = V2::load(c + 5 * dim_v + half + i, vl);
    for (std::int64_t j = 0; j < nb; ++j) {
      const V2::U raw = V2::load_u32(words(vrows[j]) + i, vl);
      const V2::V ve = V2::bf16_low(raw, vl), vo = V2::bf16_high(raw, vl);
      const float* pj = p0 + j;
      e0 = V2::fmacc(e0, pj[0], ve, vl);
      o0 = V2::fmacc(o0, pj[0], vo, vl);
      if constexpr (NG > 1) e1 = V2::fmacc(e1, pj[kBlock], ve, vl), o1 = V2::fmacc(o1, pj[kBlock], vo, vl);
      if constexpr (NG > 2)
        e2 = V2::fmacc(e2, pj[2 * kBlock], ve, vl), o2 = V2::fmacc(o2, pj[2 * kBlock], vo, vl);
      if constexpr (NG > 3)
        e3 = V2::fmacc(e3, pj[3 * kBlock], ve, vl), o3 = V2::fmacc(o3, pj[3 * kBlock], vo, vl);
      if constexpr (NG > 4)
        e4 = V2::fmacc(e4, pj[4 * kBlock], ve, vl), o4 = V2::fmacc(o4, pj[4 * kBlock], vo, vl);
      if constexpr (NG > 5)
        e5 = V2::fmacc(e5, pj[5 * kBlock], ve, vl), o5 = V2::fmacc(o5, pj[5 * kBlock], vo, vl);
    }
    V2::store(c + i, e0, vl);
    V2::store(c + half + i, o0, vl);
    if constexpr (NG > 1) V2::store(c + dim_v + i, e1, vl), V2::store(c + dim_v + half + i, o1, vl);
    if constexpr (NG > 2)
      V2::store(c + 2 * dim_v + i, e2, vl), V2::store(c + 2 * dim_v + half + i, o2, vl);
    if constexpr (NG > 3)
      V2::store(c + 3 * dim_v + i, e3, vl), V2::store(c + 3 * dim_v + half + i, o3, vl);
    if constexpr (NG > 4)
      V2::store(c + 4 * dim_v + i, e4, vl), V2::store(c + 4 * dim_v + half + i, o4, vl);
    if constexpr (NG > 5)
      V2::store(c + 5 * dim_v + i, e5, vl), V2::store(c + 5 * dim_v + half + i, o5, vl);
    i += static_cast<std::int64_t>(vl);
  }
}

// The generic products, with bf16 rows in pairs where uses_pairs allows: q and
// the P.V accumulators in pair order.
template <class TQ, class TKV>
class Products : public generic::Products<TQ, TKV> {
  using Base = generic::Products<TQ, TKV>;

 public:
  Products(const DecodeAttentionArgs& a, std::int64_t heads, float* q, generic::Scratch& s)
      : Base(a, heads, q, s), pairs_(uses_pairs<TKV>(a.cache, a.head_dim, a.head_dim_v)) {}

  void prepare_q(std::int64_t g, const TQ* src) {
    Base::prepare_q(g, src);
    if (pairs_) split_pairs(this->q_ + g * this->dim_, this->dim_);
  }

  void qk(std::int64_t h, const BlockRows<TKV>& r, float* scores) const {
    if constexpr (std::is_same_v<TKV, bf16>) {
      if (pairs_) {
        const Prefetch<TKV> pf{r.k_bytes, r.v_bytes, r.k + kBlock, r.v + kBlock, r.next, 0};
        prefetch_first(r);
        // With Zicbop, the next block's rows up front (the generic q.k spreads
        // them over its keys); without it (this project's builds) nothing.
        if constexpr (detail::kCanPrefetch)
          for (std::int64_t j = 0; j < pf.n; ++j) pf.row(j);
        const float* const qf = this->q_ + h * this->group_ * this->dim_;
        for_head_groups<kHeads>(this->group_, [&](auto ng, std::int64_t g0) {
          qk_gather<decltype(ng)::value>(qf, this->dim_, r.k, r.nb, scores, g0);
        });
        return;
      }
    }
    Base::qk(h, r, scores);
  }

  void pv(float* acc, const BlockRows<TKV>& r, const float* p) const {
    if constexpr (std::is_same_v<TKV, bf16>) {
      if (pairs_) {
        for_head_groups<kHeads>(this->group_, [&](auto ng, std::int64_t g0) {
          pv_heads<decltype(ng)::value>(acc, this->dim_v_, r.v, r.nb, p, g0);
        });
        return;
      }
    }
    Base::pv(acc, r, p);
  }

  void to_natural(float* out) const {
    if (pairs_) join_pairs(out, this->dim_v_);
  }

 private:
  bool pairs_;
};
}  // namespace rvv

using IsaScratch = generic::Scratch;
template <class TQ, class TKV>
using Products = rvv::Products<TQ, TKV>;
}  // namespace
}  // namespace rvvk::RVVK_NS
