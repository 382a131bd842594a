// Decode attention on AVX512-BF16 (x86_avx512_bf16, and x86_amx through it):
// the AVX-512 products, with q.k of bf16 q over bf16 K rows of whole 32s by
// vdpbf16ps on the rows as they are (qk_block_dot: up to 4 heads x 4 keys per
// transpose-add, the scores scaled after; the next block's K rows prefetched in
// shares over its passes, and the V product's V rows over its passes).
#pragma once

#include "../x86_avx512/decode_attention_x86_avx512.h"

namespace rvvk::RVVK_NS {
namespace {

namespace x86 {
// Whether q.k goes by bf16 dot products: q and K rows bf16, dims in whole 32s.
template <class TQ, class TK>
inline bool uses_dot(std::int64_t dim) {
  return std::is_same_v<TQ, bf16> && std::is_same_v<TK, bf16> && dim % 32 == 0;
}
// scores[g * kBlock + j] = scale * (qb[g] . k_j) for heads g0 <= g < g0 + NH,
// KS = 16 / NH keys at a time, by vdpbf16ps (pairs of bf16 products, exact,
// summed in fp32): K is read as it is (no conversion, no scratch), each K
// chunk once for the NH heads, and one transpose-add gives the NH x KS scores.
// Step c0 prefetches pf's rows [c0, c0 + KS) of this pass's share.
template <int NH>
RVVK_ALWAYS_INLINE inline void qk_heads_dot(const bf16* qb, std::int64_t dim,
                                            const bf16* const* krows, std::int64_t nb,
                                            float* scores, __m512 sv, std::int64_t g0,
                                            const Prefetch<bf16>& pf, std::int64_t pass,
                                            std::int64_t passes) {
  constexpr int KS = 16 / NH;
  const std::int64_t nc = dim / 32;
  const bf16* q = qb + g0 * dim;
  for (std::int64_t c0 = 0; c0 < nb; c0 += KS) {
    const std::int64_t n = std::min<std::int64_t>(KS, nb - c0);
    pf.share(c0, c0 + KS, passes, pass);
    const bf16* k[KS];
    for (int j = 0; j < KS; ++j) k[j] = krows[c0 + (j < n ? j : 0)];
    __m512 acc[16];  // acc[h * KS + j]: head g0 + h, key c0 + j; those past NH x KS stay 0
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
    for (std::int64_t i = 0; i < nc; ++i) {
      __m512bh qv[NH];
      for (int h = 0; h < NH; ++h) qv[h] = (__m512bh)_mm512_loadu_si512(q + h * dim + 32 * i);
#pragma GCC unroll 16
      for (int j = 0; j < KS; ++j) {
        const __m512bh kv = (__m512bh)_mm512_loadu_si512(k[j] + 32 * i);
        for (int h = 0; h < NH; ++h)
          acc[h * KS + j] = _mm512_dpbf16_ps(acc[h * KS + j], kv, qv[h]);
      }
    }
    const __m512 sums = _mm512_mul_ps(sum16(acc), sv);  // lanes as acc
    const __mmask16 m = static_cast<__mmask16>((1u << n) - 1u);
    _mm512_mask_storeu_ps(scores + g0 * kBlock + c0, m, sums);
    // Compressed in a register, then a masked store: vcompressps with a memory operand
    // is microcoded (slow) on some AVX-512 cores.
    for (int h = 1; h < NH; ++h)
      _mm512_mask_storeu_ps(scores + (g0 + h) * kBlock + c0, m,
                            _mm512_maskz_compress_ps(static_cast<__mmask16>(m << (h * KS)), sums));
  }
}

// Heads per pass of qk_heads_dot (KS = 4 keys: 16 accumulators).
constexpr int kDotHeads = 4;

// scores[g * kBlock + j] = scale * (qb[g] . k_j) for all `group` heads, in
// passes of up to kDotHeads heads; pf's rows spread over the passes.
inline void qk_block_dot(const bf16* qb, std::int64_t dim, std::int64_t group,
                         const bf16* const* krows, std::int64_t nb, float* scores, float scale,
                         const Prefetch<bf16>& pf) {
  const __m512 sv = _mm512_set1_ps(scale);
  const std::int64_t passes = (group + kDotHeads - 1) / kDotHeads;
  for_head_groups<kDotHeads>(group, [&](auto nh, std::int64_t g0) {
    qk_heads_dot<decltype(nh)::value>(qb, dim, krows, nb, scores, sv, g0, pf, g0 / kDotHeads,
                                      passes);
  });
}

// The bf16 dot products for Products.
struct Bf16Dot {
  static constexpr bool kAvailable = true;
  template <class TQ, class TK>
  static bool uses(std::int64_t dim) {
    return uses_dot<TQ, TK>(dim);
  }
  static void qk_block(const bf16* qb, std::int64_t dim, std::int64_t group,
                       const bf16* const* krows, std::int64_t nb, float* scores, float scale,
                       const Prefetch<bf16>& pf) {
    qk_block_dot(qb, dim, group, krows, nb, scores, scale, pf);
  }
};
}  // namespace x86

using IsaScratch = x86::Scratch;
template <class TQ, class TKV>
using Products = x86::Products<x86::Bf16Dot, TQ, TKV>;
}  // namespace
}  // namespace rvvk::RVVK_NS
