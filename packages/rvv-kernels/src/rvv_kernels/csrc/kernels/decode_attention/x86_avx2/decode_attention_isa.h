// Decode attention's products on AVX2 (x86_avx2), 8 lanes a register.
#pragma once

#include <immintrin.h>

#include "../decode_attention_common.h"

namespace rvvk::RVVK_NS {
namespace {

// Keys per block: 32 with the prefetching below (the next block's K and V rows
// are asked for while this one is computed).
constexpr std::int64_t kBlock = 32;
// The K product prefetches the K row kAhead keys ahead of the one it is on.
constexpr std::int64_t kAhead = 16;

// The two products on AVX2 (x86_avx2), 8 lanes a register:
// - K: up to 6 heads x KS keys of accumulators in registers (2 keys for 5-6
//   heads, up to 8 for one head: at most 12 of the 16 ymm), each 8-dim chunk of
//   a K row converted once and multiplied into all the heads; the 8-lane sums
//   go to an L1 scratch and one 8-to-1 transpose-add makes 8 keys' scores;
// - V: the accumulators of up to 6 heads x 16 dims stay in registers (12 of
//   the 16 ymm) while each V row is converted once and multiplied into all.
// Prefetching: the K product asks for the K row kAhead keys ahead (across the
// block's end), the V product for the next block's V rows spread over its
// passes, so the requests are spread over the block and each comes well before
// its use.
namespace x86 {
using vec::avx2::active;
using vec::avx2::ld;
using vec::avx2::st;

// Lane j (0 <= j < 8) of the result is the sum of the lanes of a[j].
RVVK_ALWAYS_INLINE inline __m256 sum8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  // per 128-bit half: the partial sums of keys 0-3 (u0) and 4-7 (u1)
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// One ymm of scratch (a struct, as in the AVX-512 form).
struct alignas(32) Row {
  __m256 v;
};
static_assert(sizeof(Row) == sizeof(__m256), "Row is a bare ymm");

inline std::size_t rest(std::int64_t n) { return active(static_cast<std::size_t>(n), 0); }

// Keys per step of qk_heads for NG heads: NG x KS accumulators, at most 12, so
// with the operands they fit the 16 ymm.
template <int NG>
inline constexpr int kKeysPerStep = NG == 1 ? 8 : NG == 2 ? 6 : NG == 3 ? 4 : NG == 4 ? 3 : 2;
// Rows of scratch per head in qk_heads' partial sums: a block plus a step's overhang.
constexpr std::int64_t kPartRows = kBlock + 8;

// acc[g][s] += qf[g0 + g] . k_s over the 8-dim chunk at d (n dims of it), for KS
// keys: each K chunk is converted once and multiplied into all NG heads. With
// at least as many heads as keys the keys' chunks stay in registers while the
// heads' q chunks stream from L1; else the other way round.
template <int NG, int KS, class TK>
RVVK_ALWAYS_INLINE inline void qk_chunk(__m256 (&acc)[NG][KS], const float* q, std::int64_t dim,
                                        const TK* const (&k)[KS], std::int64_t d, std::size_t n) {
  if constexpr (NG >= KS) {
    __m256 kv[KS];
    for (int s = 0; s < KS; ++s) kv[s] = ld(k[s] + d, n);
    for (int g = 0; g < NG; ++g) {
      const __m256 qv = ld(q + g * dim + d, n);
      for (int s = 0; s < KS; ++s) acc[g][s] = _mm256_fmadd_ps(qv, kv[s], acc[g][s]);
    }
  } else {
    __m256 qv[NG];
    for (int g = 0; g < NG; ++g) qv[g] = ld(q + g * dim + d, n);
    for (int s = 0; s < KS; ++s) {
      const __m256 kv = ld(k[s] + d, n);
      for (int g = 0; g < NG; ++g) acc[g][s] = _mm256_fmadd_ps(qv[g], kv, acc[g][s]);
    }
  }
}

// bf16 rows in pairs: a 256-bit load of 16 bf16 holds elements 2i (low half)
// and 2i + 1 (high half) in 32-bit lane i, so the low elements are the lanes
// shifted left by 16 and the high ones the lanes with the low half cleared:
// 16 values in fp32 for one load and two simple instructions (the vector
// layer's Reg::bf16_low / bf16_high), against two widening loads and two
// shifts. The fp32 operands on the other side (q for q.k, the accumulators for
// P.V) are kept in the same order per 16 elements: the even elements, then the
// odd ones (to_pairs / from_pairs).
template <class T>
inline constexpr bool kPairs = std::is_same_v<T, bf16>;
using vec::avx2::Reg;
RVVK_ALWAYS_INLINE inline __m256i load_pairs(const bf16* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Whether rows of n elements of T go by pairs: bf16 rows of whole 16s. Then
// the q rows (for K) and the P.V accumulators (for V) are in pair order.
template <class T>
inline bool uses_pairs(std::int64_t n) {
  return kPairs<T> && n % 16 == 0;
}

// Keeps v in a register from here on. GCC 12 otherwise folds the load of a q
// chunk into each of the KS FMAs that use it (6 heads x 2 keys: 26 loads per 24
// FMAs, the q.k loop bound by two 256-bit loads a cycle); with it, one load per
// chunk (14 per 24 FMAs, no spills).
RVVK_ALWAYS_INLINE inline void in_register(__m256& v) { __asm__("" : "+x"(v)); }

// qk_chunk over the 16 dims at d of bf16 K rows, q in pair order there.
template <int NG, int KS>
RVVK_ALWAYS_INLINE inline void qk_chunk_pairs(__m256 (&acc)[NG][KS], const float* q,
                                              std::int64_t dim, const bf16* const (&k)[KS],
                                              std::int64_t d) {
  if constexpr (NG >= KS) {
    for (int half = 0; half < 2; ++half) {
      __m256 kv[KS];
      for (int s = 0; s < KS; ++s) {
        const __m256i raw = load_pairs(k[s] + d);
        kv[s] = half == 0 ? Reg::bf16_low(raw) : Reg::bf16_high(raw);
      }
      for (int g = 0; g < NG; ++g) {
        __m256 qv = _mm256_loadu_ps(q + g * dim + d + 8 * half);
        in_register(qv);
        for (int s = 0; s < KS; ++s) acc[g][s] = _mm256_fmadd_ps(qv, kv[s], acc[g][s]);
      }
    }
  } else {
    __m256 qe[NG], qo[NG];
    for (int g = 0; g < NG; ++g) {
      qe[g] = _mm256_loadu_ps(q + g * dim + d);
      qo[g] = _mm256_loadu_ps(q + g * dim + d + 8);
    }
    for (int s = 0; s < KS; ++s) {
      const __m256i raw = load_pairs(k[s] + d);
      const __m256 ke = Reg::bf16_low(raw), ko = Reg::bf16_high(raw);
      for (int g = 0; g < NG; ++g) {
        acc[g][s] = _mm256_fmadd_ps(qe[g], ke, acc[g][s]);
        acc[g][s] = _mm256_fmadd_ps(qo[g], ko, acc[g][s]);
      }
    }
  }
}

// part[g * kPartRows + j]: 8 lanes summing to qf[g0 + g] . k_j, for heads
// g0 <= g < g0 + NG, KS keys at a time (a last short step repeats its first
// key; those sums land in the overhang and are never read). On key j
// prefetches pf's row j + pf.ahead, when pf is given. Where uses_pairs<TK>(dim),
// qk_chunk_pairs (q in pair order).
template <int NG, class TK>
void qk_heads(const float* qf, std::int64_t dim, const TK* const* krows, std::int64_t nb,
              Row* part, std::int64_t g0, const Prefetch<TK>* pf) {
  constexpr int KS = kKeysPerStep<NG>;
  const std::int64_t full = dim - dim % 8;
  const std::size_t tail = static_cast<std::size_t>(dim % 8);
  const float* q = qf + g0 * dim;
  Row* out = part + g0 * kPartRows;
  for (std::int64_t j0 = 0; j0 < nb; j0 += KS) {
    const TK* k[KS];
    for (int s = 0; s < KS; ++s) k[s] = krows[j0 + s < nb ? j0 + s : j0];
    if (pf)
      for (std::int64_t j = j0 + pf->ahead; j < std::min(j0 + KS + pf->ahead, pf->n); ++j)
        pf->row(j);
    __m256 acc[NG][KS];
    for (int g = 0; g < NG; ++g)
      for (int s = 0; s < KS; ++s) acc[g][s] = _mm256_setzero_ps();
    if (uses_pairs<TK>(dim)) {
      if constexpr (kPairs<TK>)
        for (std::int64_t d = 0; d < dim; d += 16) qk_chunk_pairs<NG, KS>(acc, q, dim, k, d);
    } else {
      for (std::int64_t d = 0; d < full; d += 8) qk_chunk<NG, KS>(acc, q, dim, k, d, 8);
      if (tail) qk_chunk<NG, KS>(acc, q, dim, k, full, tail);
    }
    for (int g = 0; g < NG; ++g)
      for (int s = 0; s < KS; ++s) out[g * kPartRows + j0 + s].v = acc[g][s];
  }
}

// scores[g * kBlock + j] = qf[g] . k_j for all `group` heads; pf as in
// qk_heads. part: scratch.
template <class TK>
void qk_block(const float* qf, std::int64_t dim, std::int64_t group, const TK* const* krows,
              std::int64_t nb, float* scores, const Prefetch<TK>& pf, std::vector<Row>& part) {
  if (static_cast<std::int64_t>(part.size()) < group * kPartRows)
    part.resize(static_cast<std::size_t>(group * kPartRows));
  for_head_groups<6>(group, [&](auto ng, std::int64_t g0) {
    qk_heads<decltype(ng)::value>(qf, dim, krows, nb, part.data(), g0, g0 == 0 ? &pf : nullptr);
  });
  for (std::int64_t g = 0; g < group; ++g)
    for (std::int64_t c0 = 0; c0 < nb; c0 += 8)
      st(scores + g * kBlock + c0, sum8(&part[static_cast<std::size_t>(g * kPartRows + c0)].v),
         static_cast<std::size_t>(std::min<std::int64_t>(8, nb - c0)));
}

// acc[g] += sum_j p[g, j] * v_j for heads g0 <= g < g0 + NG, 16 dims at a time
// (acc in pair order where uses_pairs<TV>(dim_v)). Spreads pf's rows (when
// given) over the passes: before the pass over dims [16t, 16t + 16), the rows
// j with j % passes == t.
template <int NG, class TV>
void pv_heads(float* acc, std::int64_t dim_v, const TV* const* vrows, std::int64_t nb,
              const float* p, std::int64_t g0, const Prefetch<TV>* pf) {
  float* c = acc + g0 * dim_v;
  const float* p0 = p + g0 * kBlock;
  const std::int64_t passes = (dim_v + 15) / 16;
  for (std::int64_t i = 0, t = 0; i < dim_v; i += 16, ++t) {
    if (pf)
      for (std::int64_t j = t; j < pf->n; j += passes) pf->row(j);
    const std::size_t n0 = rest(dim_v - i), n1 = dim_v - i > 8 ? rest(dim_v - i - 8) : 0;
    __m256 a0[NG], a1[NG];
    for (int g = 0; g < NG; ++g) {
      a0[g] = ld(c + g * dim_v + i, n0);
      a1[g] = n1 ? ld(c + g * dim_v + i + 8, n1) : _mm256_setzero_ps();
    }
    if (uses_pairs<TV>(dim_v)) {  // a0: the even dims of the 16, a1 the odd ones
      for (std::int64_t j = 0; j < nb; ++j) {
        if constexpr (kPairs<TV>) {
          const __m256i raw = load_pairs(vrows[j] + i);
          const __m256 v0 = Reg::bf16_low(raw), v1 = Reg::bf16_high(raw);
          for (int g = 0; g < NG; ++g) {
            const __m256 pj = _mm256_set1_ps(p0[g * kBlock + j]);
            a0[g] = _mm256_fmadd_ps(pj, v0, a0[g]);
            a1[g] = _mm256_fmadd_ps(pj, v1, a1[g]);
          }
        }
      }
    } else if (n1 == 8) {  // a whole 16 dims: no tails in the key loop
      for (std::int64_t j = 0; j < nb; ++j) {
        const __m256 v0 = ld(vrows[j] + i, 8), v1 = ld(vrows[j] + i + 8, 8);
        for (int g = 0; g < NG; ++g) {
          const __m256 pj = _mm256_set1_ps(p0[g * kBlock + j]);
          a0[g] = _mm256_fmadd_ps(pj, v0, a0[g]);
          a1[g] = _mm256_fmadd_ps(pj, v1, a1[g]);
        }
      }
    } else {
      for (std::int64_t j = 0; j < nb; ++j) {
        const __m256 v0 = ld(vrows[j] + i, n0);
        const __m256 v1 = n1 ? ld(vrows[j] + i + 8, n1) : _mm256_setzero_ps();
        for (int g = 0; g < NG; ++g) {
          const __m256 pj = _mm256_set1_ps(p0[g * kBlock + j]);
          a0[g] = _mm256_fmadd_ps(pj, v0, a0[g]);
          a1[g] = _mm256_fmadd_ps(pj, v1, a1[g]);
        }
      }
    }
    for (int g = 0; g < NG; ++g) {
      st(c + g * dim_v + i, a0[g], n0);
      if (n1) st(c + g * dim_v + i + 8, a1[g], n1);
    }
  }
}

template <class TV>
void pv_block(float* acc, std::int64_t dim_v, std::int64_t group, const TV* const* vrows,
              std::int64_t nb, const float* p, const Prefetch<TV>& pf) {
  for_head_groups<6>(group, [&](auto ng, std::int64_t g0) {
    pv_heads<decltype(ng)::value>(acc, dim_v, vrows, nb, p, g0, g0 == 0 ? &pf : nullptr);
  });
}

// x86::qk_block's scratch: the heads' 8-lane partial scores.
struct Scratch {
  std::vector<Row> kf;
};

// The driver's interface (see generic::Products): q and the P.V accumulators in
// pair order where uses_pairs allows; the K product asks for the K row kAhead
// keys ahead of the one it is on (into the next block at its end), the V
// product for the next block's V rows spread over its passes: requests evenly
// spread over the block, each well ahead of its use.
template <class TQ, class TKV>
class Products : ProductsBase {
 public:
  Products(const DecodeAttentionArgs& a, std::int64_t /*heads*/, float* q, Scratch& s)
      : ProductsBase(a, q), s_(s) {}

  void prepare_q(std::int64_t g, const TQ* src) {
    float* dst = q_ + g * dim_;
    scale_q(dst, src, dim_, scale_);
    if (uses_pairs<TKV>(dim_)) to_pairs<16>(dst, dim_);
  }

  void qk(std::int64_t h, const BlockRows<TKV>& r, float* scores) const {
    if (r.first) {  // nothing prefetched the first rows
      for (std::int64_t j = 0; j < std::min(r.nb, kAhead); ++j) detail::prefetch(r.k[j], r.k_bytes);
      for (std::int64_t j = 0; j < r.nb; ++j) detail::prefetch(r.v[j], r.v_bytes);
    }
    const Prefetch<TKV> pf_k{r.k_bytes, r.v_bytes, r.k, nullptr, r.nb + r.next, kAhead};
    qk_block(q_ + h * group_ * dim_, dim_, group_, r.k, r.nb, scores, pf_k, s_.kf);
  }

  void pv(float* acc, const BlockRows<TKV>& r, const float* p) const {
    const Prefetch<TKV> pf_v{r.k_bytes, r.v_bytes, nullptr, r.v + kBlock, r.next, 0};
    pv_block(acc, dim_v_, group_, r.v, r.nb, p, pf_v);
  }

  void to_natural(float* out) const {
    if (uses_pairs<TKV>(dim_v_)) from_pairs<16>(out, dim_v_);
  }

 private:
  Scratch& s_;
};
}  // namespace x86

using IsaScratch = x86::Scratch;
template <class TQ, class TKV>
using Products = x86::Products<TQ, TKV>;
}  // namespace
}  // namespace rvvk::RVVK_NS
