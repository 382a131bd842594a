// Decode attention's products on RVV (rvv, rvv_zvfh): bf16 and int8 caches read
// in pairs (namespace rvv below); other caches take the generic forms.
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
// row is converted once (pv_heads). Both at LMUL 2. Rows must start on whole
// words (uses_pairs).
//
// int8 caches go by pairs too (PairRows<std::int8_t>), in 16-bit words: word w
// of a row holds elements 2w (low byte) and 2w + 1 (high byte). At SEW 16 a
// shift left by 8 (low byte) or a mask of the high byte leaves each element
// times 256 as an int16 with nothing below it, and one widening conversion
// (vfwcvt.f.x.v) makes it fp32, exact, at the fp32 group of the elements it
// converts: two instructions per element beside the fp32 products (bf16: one,
// and a load of twice the words). The factor 256 goes into q's scale (q.k) and
// out of the output row (P.V): powers of two, so every sum rounds as that of
// the unscaled values. The per-token scales are applied once per score, not
// per element: K's to the gather loop's scores (times a vector of the keys'
// scales, before the softmax), V's folded into the probabilities after it (the
// driver).
namespace rvv {
using V2 = vec::F32<2>;  // both products: LMUL 2
constexpr int kHeads = 6;  // heads per pass of each product
// qk_gather reads the row pointers as 64-bit offsets.
static_assert(sizeof(const bf16*) == sizeof(std::uint64_t), "rv64: 64-bit pointers");

// A cache dtype's rows read by pairs: Word (a pair of elements), W (V2's element
// count of them), gather / load of words, and a word's two elements in fp32
// (low: element 2w, high: 2w + 1), each times 1 / kUnit.
template <class TKV>
struct PairRows {
  static constexpr bool kPairs = false;
};
template <>
struct PairRows<bf16> {
  static constexpr bool kPairs = true;
  using Word = std::uint32_t;
  using W = V2::U;
  static constexpr float kUnit = 1.0f;
  static W gather(const Word* base, vuint64m4_t idx, std::size_t vl) {
    return __riscv_vluxei64_v_u32m2(base, idx, vl);
  }
  static W load(const Word* p, std::size_t vl) { return V2::load_u32(p, vl); }
  static V2::V low(W w, std::size_t vl) { return V2::bf16_low(w, vl); }
  static V2::V high(W w, std::size_t vl) { return V2::bf16_high(w, vl); }
};
template <>
struct PairRows<std::int8_t> {
  static constexpr bool kPairs = true;
  using Word = std::int16_t;
  using W = vint16m1_t;  // V2's element count at SEW 16
  static constexpr float kUnit = 1.0f / 256.0f;  // elements convert 8 bits up
  static W gather(const Word* base, vuint64m4_t idx, std::size_t vl) {
    return __riscv_vluxei64_v_i16m1(base, idx, vl);
  }
  static W load(const Word* p, std::size_t vl) { return __riscv_vle16_v_i16m1(p, vl); }
  static V2::V low(W w, std::size_t vl) { return __riscv_vfwcvt_f(__riscv_vsll(w, 8, vl), vl); }
  static V2::V high(W w, std::size_t vl) {
    return __riscv_vfwcvt_f(__riscv_vand(w, static_cast<std::int16_t>(-256), vl), vl);
  }
};

// Whether every row and head of base / strides starts on a `word`-byte boundary
// (two elements a word).
inline bool aligned(const void* base, std::int64_t stride_t, std::int64_t stride_h,
                    std::size_t word) {
  return (reinterpret_cast<std::uintptr_t>(base) % word == 0) && stride_t % 2 == 0 &&
         stride_h % 2 == 0;
}
// Whether a cache's rows go by pairs: bf16 or int8, even head sizes, rows on
// whole words (4 bytes for bf16, 2 for int8).
template <class TKV>
inline bool uses_pairs(const KvCache& c, std::int64_t dim, std::int64_t dim_v) {
  if constexpr (PairRows<TKV>::kPairs) {
    constexpr std::size_t word = sizeof(typename PairRows<TKV>::Word);
    return dim > 0 && dim_v > 0 && dim % 2 == 0 && dim_v % 2 == 0 &&
           aligned(c.k, c.k_stride_t, c.k_stride_h, word) &&
           aligned(c.v, c.v_stride_t, c.v_stride_h, word);
  } else {
    return false;
  }
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

template <class TKV>
RVVK_ALWAYS_INLINE inline const typename PairRows<TKV>::Word* words(const TKV* row) {
  return reinterpret_cast<const typename PairRows<TKV>::Word*>(row);
}

// s_g += q_g[w] ke + q_g[w + half] ko for the heads g < NG (qw = q + w, heads
// dim apart): one word's pair of elements of every key in lanes.
template <int NG>
RVVK_ALWAYS_INLINE inline void qk_word(V2::V& s0, V2::V& s1, V2::V& s2, V2::V& s3, V2::V& s4,
                                       V2::V& s5, V2::V ke, V2::V ko, const float* qw,
                                       std::int64_t dim, std::int64_t half, std::size_t vl) {
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

// scores[g * kBlock + j] = qp[g] . k_j for heads g0 <= g < g0 + NG (q in pair
// order), keys in lanes: for each word w of the rows, one indexed load gathers
// word w of up to vlmax keys (offsets from the first key's row), PairRows gives
// their elements 2w and 2w + 1 in fp32, and each head accumulates them times its
// scalar q elements (vfmacc.vf). No reduction per key and head, and q is read as
// scalars instead of one vector load per product. int8 rows: two words a step
// (their conversions run at SEW 16, the products at SEW 32: one vtype change
// each way per two words), and the scores leave times the keys' scales
// k_scales[0, nb).
template <int NG, class TKV>
void qk_gather(const float* qp, std::int64_t dim, const TKV* const* krows, std::int64_t nb,
               float* scores, std::int64_t g0, const float* k_scales) {
  using P = PairRows<TKV>;
  constexpr bool kInt8 = std::is_same_v<TKV, std::int8_t>;
  const std::int64_t half = dim / 2;
  const float* q = qp + g0 * dim;
  for (std::int64_t j0 = 0; j0 < nb;) {
    const std::size_t vl = V2::setvl(static_cast<std::size_t>(nb - j0));
    const typename P::Word* base = words(krows[j0]);
    const vuint64m4_t idx = __riscv_vsub_vx_u64m4(
        __riscv_vle64_v_u64m4(reinterpret_cast<const std::uint64_t*>(krows + j0), vl),
        reinterpret_cast<std::uintptr_t>(base), vl);
    V2::V s0 = V2::splat(0.0f, vl), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0;
    std::int64_t w = 0;
    if constexpr (kInt8) {
      for (; w + 2 <= half; w += 2) {
        const typename P::W c0 = P::gather(base + w, idx, vl);
        const typename P::W c1 = P::gather(base + w + 1, idx, vl);
        const V2::V ke0 = P::low(c0, vl), ko0 = P::high(c0, vl);
        const V2::V ke1 = P::low(c1, vl), ko1 = P::high(c1, vl);
        qk_word<NG>(s0, s1, s2, s3, s4, s5, ke0, ko0, q + w, dim, half, vl);
        qk_word<NG>(s0, s1, s2, s3, s4, s5, ke1, ko1, q + w + 1, dim, half, vl);
      }
    }
    for (; w < half; ++w) {
      const typename P::W col = P::gather(base + w, idx, vl);
      qk_word<NG>(s0, s1, s2, s3, s4, s5, P::low(col, vl), P::high(col, vl), q + w, dim, half,
                  vl);
    }
    if constexpr (kInt8) {
      const V2::V ks = V2::load(k_scales + j0, vl);
      s0 = V2::mul(s0, ks, vl);
      if constexpr (NG > 1) s1 = V2::mul(s1, ks, vl);
      if constexpr (NG > 2) s2 = V2::mul(s2, ks, vl);
      if constexpr (NG > 3) s3 = V2::mul(s3, ks, vl);
      if constexpr (NG > 4) s4 = V2::mul(s4, ks, vl);
      if constexpr (NG > 5) s5 = V2::mul(s5, ks, vl);
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
template <int NG, class TKV>
void pv_heads(float* acc, std::int64_t dim_v, const TKV* const* vrows, std::int64_t nb,
              const float* p, std::int64_t g0) {
  using P = PairRows<TKV>;
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
      const typename P::W raw = P::load(words(vrows[j]) + i, vl);
      const V2::V ve = P::low(raw, vl), vo = P::high(raw, vl);
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

// The generic products, with bf16 and int8 rows in pairs where uses_pairs
// allows: q (times PairRows' unit) and the P.V accumulators in pair order.
template <class TQ, class TKV>
class Products : public generic::Products<TQ, TKV> {
  using Base = generic::Products<TQ, TKV>;

 public:
  Products(const DecodeAttentionArgs& a, std::int64_t heads, float* q, generic::Scratch& s)
      : Base(a, heads, q, s), pairs_(uses_pairs<TKV>(a.cache, a.head_dim, a.head_dim_v)) {}

  void prepare_q(std::int64_t g, const TQ* src) {
    float* const q = this->q_ + g * this->dim_;
    if constexpr (kUnit != 1.0f) {
      if (pairs_) {
        scale_q(q, src, this->dim_, this->scale_ * kUnit);
        split_pairs(q, this->dim_);
        return;
      }
    }
    Base::prepare_q(g, src);
    if (pairs_) split_pairs(q, this->dim_);
  }

  void qk(std::int64_t h, const BlockRows<TKV>& r, float* scores) const {
    if constexpr (PairRows<TKV>::kPairs) {
      if (pairs_) {
        const Prefetch<TKV> pf{r.k_bytes, r.v_bytes, r.k + kBlock, r.v + kBlock, r.next, 0};
        prefetch_first(r);
        // With Zicbop, the next block's rows up front (the generic q.k spreads
        // them over its keys); without it (this project's builds) nothing.
        if constexpr (detail::kCanPrefetch)
          for (std::int64_t j = 0; j < pf.n; ++j) pf.row(j);
        const float* const qf = this->q_ + h * this->group_ * this->dim_;
        for_head_groups<kHeads>(this->group_, [&](auto ng, std::int64_t g0) {
          qk_gather<decltype(ng)::value, TKV>(qf, this->dim_, r.k, r.nb, scores, g0,
                                              r.k_scales);
        });
        return;
      }
    }
    Base::qk(h, r, scores);
  }

  void pv(float* acc, const BlockRows<TKV>& r, const float* p) const {
    if constexpr (PairRows<TKV>::kPairs) {
      if (pairs_) {
        for_head_groups<kHeads>(this->group_, [&](auto ng, std::int64_t g0) {
          pv_heads<decltype(ng)::value, TKV>(acc, this->dim_v_, r.v, r.nb, p, g0);
        });
        return;
      }
    }
    Base::pv(acc, r, p);
  }

  // int8 caches by pairs: qk has applied the K scales (see ScalesK in the driver).
  bool scales_k() const { return std::is_same_v<TKV, std::int8_t> && pairs_; }

  void to_natural(float* out) const {
    if (pairs_) {
      join_pairs(out, this->dim_v_);
      if constexpr (kUnit != 1.0f) scale_row<F>(out, out, this->dim_v_, kUnit);
    }
  }

 private:
  // The pair form's value of 1: its conversions give the elements times 1 / kUnit,
  // so q (against the K rows) and the output rows (sums of V rows) are scaled by it.
  static constexpr float kUnit = [] {
    if constexpr (PairRows<TKV>::kPairs) {
      return PairRows<TKV>::kUnit;
    } else {
      return 1.0f;
    }
  }();
  bool pairs_;
};
}  // namespace rvv

using IsaScratch = generic::Scratch;
template <class TQ, class TKV>
using Products = rvv::Products<TQ, TKV>;
}  // namespace
}  // namespace rvvk::RVVK_NS
