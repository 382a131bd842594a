// Split-KV decode attention over an indexed KV cache (see DecodeAttentionArgs).
//
// Stage 1, per (request, split, pair of KV heads: kDecodeKvHeadsPerTask): the
// query heads of a KV head's group are handled together so each K and V row is
// loaded once per group of up to 4 heads, and the pair's two KV heads take each
// block of keys in turn, so their pieces of a cache row (adjacent in SGLang's
// [tokens, kv_heads, dim] pools) are read one block apart, not a whole split
// apart.
// Keys are taken in blocks of kBlock: scores for the block
// (q . k, one vector reduction per key and head), optional tanh logit cap,
// online softmax (vector exp), then P.V accumulated in fp32. On x86 (AVX-512
// and AVX2) the two products have their own forms (namespace x86 below): on
// AVX-512 each K row converted once for all the group's heads and each V row
// once per 8 heads, on AVX2 both once per 6 heads, bf16 rows in pairs (see
// kPairs). Which of the two is faster on an AVX-512 CPU depends on the CPU
// (scratch program, B16 / context 8192, bf16, two threads, splits handed out
// dynamically, alternating runs): on a 2-core Zen 4 (512-bit FMAs as two
// 256-bit halves) the AVX-512 form took 9.9-10.0 ms against the AVX2 form's
// 7.7-8.3 over consecutive rows and 10.7-11.4 against 8.8-11.7 over random
// ones; on a 2-core AVX-512/AMX Xeon 12.5-13.6 against 10.4-11.9 over
// consecutive rows but 20.1-21.8 against 27.0-28.3 over random ones (rows
// 7919 apart on 4 KiB pages, no cache flush between calls; through the op, 2
// MiB pages, 960 MiB written before each call: 13.4-14.2 against 13.0-13.4
// and 14.3-14.7 against 16.4-17.3). The
// AVX-512 variants keep the AVX-512 form; the AVX2 form's K prefetch distance
// (kAhead 16, 32, 48) did not close the random-row gap on the Xeon.
// x86_avx512_bf16 (AVX512-BF16: Zen 4, Sapphire Rapids and later) takes q.k of
// bf16 q over a bf16 cache by vdpbf16ps instead (qk_block_dot), and every
// AVX-512 variant reads bf16 V rows of whole 32s in pairs; on the 2-core Zen 4
// (scratch program, alternating runs; one thread, rows in cache, B1 / context
// 2048) a call's median went from 0.19-0.24 ms (the AVX-512 form) to
// 0.13-0.16, and at B16 / context 8192 over random rows in DRAM (two threads,
// 2 MiB pages, 960 MiB written before each call) the fastest of 9 calls from
// 14.5-16.3 to 9.2-10.2 ms. Tried there and not kept: q.k with the keys in
// lanes (each 32-dim chunk of 16 K rows transposed, q pairs broadcast: no
// reduction, but the transposes' cross-lane shuffles made it 0.15-0.18 ms);
// the dot products on ymm (8 lanes, 2 or 4 heads per 8-to-1 transpose-add:
// 0.143-0.156 against 0.138 ms); 2 or 6 heads per pass instead of 4 (slower);
// prefetcht0 (2x slower) and prefetchnta (2x slower) instead of prefetcht1;
// key blocks of 32
// and 128 (no better than 64); the next block's lines asked for at the pace of
// the block's work, or the current block's V rows during q.k and the next
// block's K rows during P.V, instead of shares of the K rows over the q.k
// passes and of the V rows over the P.V passes (same or slower).
// A pair of KV heads per task, on a 2-core Zen 3 (x86_avx2; context 8192, bf16,
// two threads, 2 MiB pages, 64 MiB read before each call, the calls of both
// builds interleaved in one process, medians of 15-21) against one KV head per
// task: B16 over random rows 23.8 -> 21.0 and 21.8 -> 21.0 ms in two runs, over
// consecutive rows 14.8 -> 15.0 and 24.5 -> 20.1 (the host's memory was slower
// in the second run), B4 random 6.20 -> 5.67, B1 random 1.73 -> 1.53. Tried
// there and not kept: the pair's first head prefetching both heads' rows (512
// bytes) and the second none (B16 random 29.9 ms); the V rows prefetched with
// the K rows during q.k (25.5 ms).
// Stage 2 merges the splits with their log-sum-exp and the optional sink.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "rvvk/detail/aligned.h"
#include "rvvk/detail/dispatch.h"
#include "rvvk/detail/kv_cache.h"
#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

using F = vec::F32<4>;
// Keys per block. The next block's K and V rows are prefetched while this one is
// computed. On AVX2 (x86_avx2) 32: with the prefetching below, B16 / context
// 8192 over random rows on a Zen 3, two threads on 2 MiB pages, took 20-24 ms
// against 27-30 with 64 and 22-27 with 16 (the 64-key form of an earlier
// prefetch scheme: 55-66 ms on one thread against 65-73 with 64).
#if defined(RVVK_VEC_AVX2)
constexpr std::int64_t kBlock = 32;
// On AVX2 the K product prefetches the K row kAhead keys ahead of the one it
// is on (8, 16 and 32 measured the same).
constexpr std::int64_t kAhead = 16;
#else
constexpr std::int64_t kBlock = 64;
#endif
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

using detail::at;
using detail::cache_row;

// s[0, n) *= f[0, n)
void mul_rows(float* s, const float* f, std::int64_t n) {
  for (std::int64_t j = 0; j < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - j));
    F::store(s + j, F::mul(F::load(s + j, vl), F::load(f + j, vl), vl), vl);
    j += static_cast<std::int64_t>(vl);
  }
}

// Rows to prefetch: n K rows of k_bytes and V rows of v_bytes.
template <class TKV>
struct Prefetch {
  std::int64_t k_bytes, v_bytes;
  const TKV* const* k = nullptr;  // null: no K rows
  const TKV* const* v = nullptr;  // null: no V rows
  std::int64_t n = 0;        // rows [0, n)
  std::int64_t ahead = 0;    // on key j, the products prefetch row j + ahead
  // Prefetches key j's rows. Always inlined: GCC 12 infers that an out-of-line
  // function doing nothing but prefetch has no side effects and drops its calls.
  RVVK_ALWAYS_INLINE void row(std::int64_t j) const {
    if (k) detail::prefetch(k[j], k_bytes);
    if (v) detail::prefetch(v[j], v_bytes);
  }
  // Prefetches the rows j of [lo, hi) (and of [0, n)) with j % mod == rem: a
  // share of the rows, when mod passes over the same keys spread them.
  RVVK_ALWAYS_INLINE void share(std::int64_t lo, std::int64_t hi, std::int64_t mod,
                                std::int64_t rem) const {
    hi = std::min(hi, n);
    for (std::int64_t j = lo + (rem - lo % mod + mod) % mod; j < hi; j += mod) row(j);
  }
};

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

// fn(integral_constant<int, N>{}, g0) for one group of the n (< N + 1) heads
// from g0, N the group size as a compile-time constant.
template <int N, class Fn>
void head_group_rest(std::int64_t n, std::int64_t g0, Fn& fn) {
  if constexpr (N > 0) {
    if (n == N) {
      fn(std::integral_constant<int, N>{}, g0);
    } else {
      head_group_rest<N - 1>(n, g0, fn);
    }
  }
}

// The heads in groups of Max, then one group of the rest: fn(integral_constant<
// int, N>{}, g0) for heads [g0, g0 + N).
template <int Max, class Fn>
void for_head_groups(std::int64_t heads, Fn&& fn) {
  std::int64_t g = 0;
  for (; g + Max <= heads; g += Max) fn(std::integral_constant<int, Max>{}, g);
  head_group_rest<Max - 1>(heads - g, g, fn);
}

// Pair order of bf16 rows read W elements at a time (W = 2 x the fp32 lanes of a
// register; see the x86 forms): per W elements the even ones, then the odd ones.
// x[0, n) (n a multiple of W) from natural order to pair order, in place.
template <int W>
void to_pairs(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; i += W) {
    float t[W];
    for (int e = 0; e < W / 2; ++e) {
      t[e] = x[i + 2 * e];
      t[W / 2 + e] = x[i + 2 * e + 1];
    }
    std::copy_n(t, W, x + i);
  }
}
// x[0, n) from pair order to natural order, in place.
template <int W>
void from_pairs(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; i += W) {
    float t[W];
    for (int e = 0; e < W / 2; ++e) {
      t[2 * e] = x[i + e];
      t[2 * e + 1] = x[i + W / 2 + e];
    }
    std::copy_n(t, W, x + i);
  }
}

#if defined(RVVK_VEC_AVX512)
// The block's two products on AVX-512 (the x86_avx512, x86_avx512_bf16 and
// x86_amx variants). The generic forms above reduce every (key, head) dot
// product on its own and convert each K and V row once per group of <= 4
// heads; here:
// - K: 16 keys at a time, their rows are converted to fp32 once (zero-padded to
//   a multiple of 16 dims, 16 dims of the 16 keys side by side) into an L1
//   scratch; then per head one accumulator per key (16 FMAs per q vector) and
//   one 16-to-1 transpose-add (45 instructions) for the 16 scores. With
//   AVX512-BF16, bf16 q over bf16 K rows of whole 32s instead go by vdpbf16ps
//   on the rows as they are (qk_block_dot: up to 4 heads x 4 keys per
//   transpose-add, the scores scaled after), the next block's K rows
//   prefetched in shares over its passes;
// - V: the accumulators of up to 8 heads x 32 dims stay in registers while each
//   V row is converted once and multiplied into all of them; bf16 rows of
//   whole 32s are read in pairs (a shift and a mask give the even and the odd
//   elements, the accumulators kept in that order), and with the dot products
//   the next block's V rows are prefetched in shares over the passes.
namespace x86 {
using vec::avx512::ld;
using vec::avx512::lanes;
using vec::avx512::st;

// Lane j (0 <= j < 16) of the result is the sum of the lanes of a[j].
RVVK_ALWAYS_INLINE inline __m512 sum16(const __m512* a) {
  __m512 b[8], c[4];
  for (int i = 0; i < 8; ++i)  // per 128-bit lane: a[2i]: lanes 0,2; a[2i+1]: 1,3
    b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                         _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane: keys 4i..4i+3, in order
    const __m512d x = _mm512_castps_pd(b[2 * i]), y = _mm512_castps_pd(b[2 * i + 1]);
    c[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  constexpr int kEven = _MM_SHUFFLE(2, 0, 2, 0), kOdd = _MM_SHUFFLE(3, 1, 3, 1);
  const __m512 d0 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], kEven),
                                  _mm512_shuffle_f32x4(c[0], c[1], kOdd));
  const __m512 d1 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], kEven),
                                  _mm512_shuffle_f32x4(c[2], c[3], kOdd));
  return _mm512_add_ps(_mm512_shuffle_f32x4(d0, d1, kEven), _mm512_shuffle_f32x4(d0, d1, kOdd));
}

// One zmm of scratch (a struct: std::vector<__m512> would drop __m512's
// attributes from the template argument, which GCC warns about).
struct alignas(64) Row {
  __m512 v;
};
static_assert(sizeof(Row) == sizeof(__m512), "Row is a bare zmm");

// scores[g * kBlock + j] = qf[g] . k_j for all `group` heads, 16 keys at a time;
// prefetches pf's rows (key j: pf's row j) along the way. kf: scratch.
template <class TK>
void qk_block(const float* qf, std::int64_t dim, std::int64_t group, const TK* const* krows,
              std::int64_t nb, float* scores, const Prefetch<TK>& pf, std::vector<Row>& kf) {
  const std::int64_t dv = (dim + 15) / 16;  // zmm per padded row
  if (static_cast<std::int64_t>(kf.size()) < 16 * dv) kf.resize(static_cast<std::size_t>(16 * dv));
  Row* const rows = kf.data();  // 16 dims of the 16 keys side by side: rows[i * 16 + j]
  for (std::int64_t c0 = 0; c0 < nb; c0 += 16) {
    const std::int64_t n = std::min<std::int64_t>(16, nb - c0);
    for (std::int64_t j = 0; j < n; ++j) {
      if (c0 + j < pf.n) {
        detail::prefetch(pf.k[c0 + j], pf.k_bytes);
        detail::prefetch(pf.v[c0 + j], pf.v_bytes);
      }
      const TK* k = krows[c0 + j];
      for (std::int64_t i = 0; i < dv; ++i)
        rows[i * 16 + j].v = ld(k + 16 * i, lanes(static_cast<std::size_t>(dim - 16 * i), 0));
    }
    for (std::int64_t j = n; j < 16; ++j)
      for (std::int64_t i = 0; i < dv; ++i) rows[i * 16 + j].v = _mm512_setzero_ps();
    for (std::int64_t g = 0; g < group; ++g) {
      const float* q = qf + g * dim;
      const Row* kc = rows;
      __m512 acc[16];
      for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
      for (std::int64_t i = 0; i < dv; ++i, kc += 16) {
        const __m512 qv = ld(q + 16 * i, lanes(static_cast<std::size_t>(dim - 16 * i), 0));
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(kc[j].v, qv, acc[j]);
      }
      st(scores + g * kBlock + c0, sum16(acc), lanes(static_cast<std::size_t>(n), 0));
    }
  }
}

// bf16 rows in pairs: lane i of a 512-bit load of 32 bf16 holds elements 2i
// (low half) and 2i + 1 (high half).
template <class T>
inline constexpr bool kPairs = std::is_same_v<T, bf16>;
template <class T>
inline bool uses_pairs(std::int64_t n) {
  return kPairs<T> && n % 32 == 0;
}
RVVK_ALWAYS_INLINE inline __m512 pairs_even(__m512i raw) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
}
RVVK_ALWAYS_INLINE inline __m512 pairs_odd(__m512i raw) {
  return _mm512_castsi512_ps(
      _mm512_and_si512(raw, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

#if defined(__AVX512BF16__)
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
    // Compressed in a register: vcompressps to memory is microcoded on Zen 4.
    for (int h = 1; h < NH; ++h)
      _mm512_mask_storeu_ps(scores + (g0 + h) * kBlock + c0, m,
                            _mm512_maskz_compress_ps(static_cast<__mmask16>(m << (h * KS)), sums));
  }
}

// Heads per pass of qk_heads_dot (KS = 4 keys): 3 and 4 ran alike, 2 and 6
// slower (Zen 4, in cache).
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
#else
template <class TQ, class TK>
inline bool uses_dot(std::int64_t) {
  return false;
}
#endif

// acc[g] += sum_j p[g, j] * v_j for heads g0 <= g < g0 + NG, 32 dims at a time
// (acc in pair order where uses_pairs<TV>(dim_v)).
template <int NG, class TV>
void pv_heads(float* acc, std::int64_t dim_v, const TV* const* vrows, std::int64_t nb,
              const float* p, std::int64_t g0, const Prefetch<TV>* pf, std::int64_t pass,
              std::int64_t passes) {
  float* c = acc + g0 * dim_v;
  const float* p0 = p + g0 * kBlock;
  if constexpr (kPairs<TV>) {
    if (uses_pairs<TV>(dim_v)) {
      for (std::int64_t i = 0; i < dim_v; i += 32, ++pass) {
        if (pf) pf->share(0, nb, passes, pass);
        __m512 a0[NG], a1[NG];
        for (int g = 0; g < NG; ++g) {
          a0[g] = _mm512_loadu_ps(c + g * dim_v + i);
          a1[g] = _mm512_loadu_ps(c + g * dim_v + i + 16);
        }
        for (std::int64_t j = 0; j < nb; ++j) {
          const __m512i raw = _mm512_loadu_si512(vrows[j] + i);
          const __m512 v0 = pairs_even(raw), v1 = pairs_odd(raw);
          for (int g = 0; g < NG; ++g) {
            const __m512 pj = _mm512_set1_ps(p0[g * kBlock + j]);
            a0[g] = _mm512_fmadd_ps(pj, v0, a0[g]);
            a1[g] = _mm512_fmadd_ps(pj, v1, a1[g]);
          }
        }
        for (int g = 0; g < NG; ++g) {
          _mm512_storeu_ps(c + g * dim_v + i, a0[g]);
          _mm512_storeu_ps(c + g * dim_v + i + 16, a1[g]);
        }
      }
      return;
    }
  }
  for (std::int64_t i = 0; i < dim_v; i += 32) {
    const __mmask16 m0 = lanes(static_cast<std::size_t>(dim_v - i), 0);
    const __mmask16 m1 = lanes(static_cast<std::size_t>(dim_v - i), 1);
    __m512 a0[NG], a1[NG];
    for (int g = 0; g < NG; ++g) {
      a0[g] = ld(c + g * dim_v + i, m0);
      a1[g] = ld(c + g * dim_v + i + 16, m1);
    }
    for (std::int64_t j = 0; j < nb; ++j) {
      const __m512 v0 = ld(vrows[j] + i, m0), v1 = ld(vrows[j] + i + 16, m1);
      for (int g = 0; g < NG; ++g) {
        const __m512 pj = _mm512_set1_ps(p0[g * kBlock + j]);
        a0[g] = _mm512_fmadd_ps(pj, v0, a0[g]);
        a1[g] = _mm512_fmadd_ps(pj, v1, a1[g]);
      }
    }
    for (int g = 0; g < NG; ++g) {
      st(c + g * dim_v + i, a0[g], m0);
      if (m1) st(c + g * dim_v + i + 16, a1[g], m1);
    }
  }
}

// pf's rows (when given) are spread over the passes (head groups x 32 dims).
template <class TV>
void pv_block(float* acc, std::int64_t dim_v, std::int64_t group, const TV* const* vrows,
              std::int64_t nb, const float* p, const Prefetch<TV>* pf = nullptr) {
  const std::int64_t per_group = (dim_v + 31) / 32;
  const std::int64_t passes = (group + 7) / 8 * per_group;
  for_head_groups<8>(group, [&](auto ng, std::int64_t g0) {
    pv_heads<decltype(ng)::value>(acc, dim_v, vrows, nb, p, g0, pf, g0 / 8 * per_group, passes);
  });
}
}  // namespace x86
#endif  // RVVK_VEC_AVX512

#if defined(RVVK_VEC_AVX2)
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
// its use. On a Zen 3, B16 / context 8192 over random rows, two threads: about
// 1.35x faster than a whole next block's rows asked for during the K product
// (with the earlier form of the K product: 8 keys' rows converted to an fp32
// scratch, then 8 accumulators per head; same speed in cache, slower from DRAM).
// From DRAM the time is about the sum of the compute and the memory's time,
// not the larger of the two (2-core Zen 3 VM, 2026-12-03, scratch program,
// two threads, B16 / context 8192, random rows on 2 MiB pages, 64 MiB written
// before each call, variants alternating call by call; ns per key and KV head
// and thread): 166 as it is; 126 with the products reading 128 rows that stay
// in L2 while the prefetches still ask for the real rows; 93 with those
// L2 rows and no prefetch (the compute alone); 307 from DRAM with no prefetch
// (a second run: 221, 166, 98, 405). So the prefetch stream alone, with no
// demand miss, costs the time the memory takes for it, and the demand reads
// add more. Tried there and not kept: one line asked for per 16 dims of q.k
// and per 2 keys of P.V (the next block's K and V rows paced over the whole
// block: same); the rows asked for 1, 2, 3 or 4 blocks ahead (1.1-1.4x
// slower); prefetcht0, prefetcht2, prefetchnta (same, within the host's
// drift); one prefetch per 128 or 256 bytes (1.5-1.7x slower: the hardware
// does not fetch the rest of the row).
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
// 16 values in fp32 for one load and two simple instructions, against two
// widening loads and two shifts. The fp32 operands on the other side (q for
// q.k, the accumulators for P.V) are kept in the same order per 16 elements:
// the even elements, then the odd ones (to_pairs / from_pairs).
template <class T>
inline constexpr bool kPairs = std::is_same_v<T, bf16>;
RVVK_ALWAYS_INLINE inline __m256 pairs_even(__m256i raw) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
}
RVVK_ALWAYS_INLINE inline __m256 pairs_odd(__m256i raw) {
  return _mm256_castsi256_ps(
      _mm256_and_si256(raw, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}
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
// FMAs, the q.k loop bound by Zen 3's two 256-bit loads a cycle); with it, one
// load per chunk (14 per 24 FMAs, no spills). B4 / context 1024 in the L3, one
// thread, both forms alternating call by call in one process (2-core Zen 3 VM,
// 2026-12-03): 70.3 -> 67.3 and 124 -> 112 ns per key and KV head; B16 /
// context 8192 from DRAM (two threads, 64 MiB written before each call):
// 16.96 -> 16.32 ms.
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
        kv[s] = half == 0 ? pairs_even(raw) : pairs_odd(raw);
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
      const __m256 ke = pairs_even(raw), ko = pairs_odd(raw);
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
          const __m256 v0 = pairs_even(raw), v1 = pairs_odd(raw);
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
}  // namespace x86
#endif  // RVVK_VEC_AVX2

#if defined(__riscv_v_intrinsic)
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
// aligned (uses_pairs). bench-kernels decode case at VLEN 256 (estimated
// cycles on the in-order DLEN-128 model of bench-e2e-riscv; the rvv-kernels
// README has all VLENs): 10.68 M cycles with the generic forms, 8.66 M with
// pairs and q.k by rows (3 heads per pass at LMUL 4, one vector reduction per
// key and head), 6.53 M with q.k by gathers.
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
}  // namespace rvv
#endif  // __riscv_v_intrinsic

void scale_row(float* x, std::int64_t n, float s) {
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    F::store(x + i, F::mul(F::load(x + i, vl), s, vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
}

// Online-softmax update of one head with the block's raw scores s[0, nb):
// s becomes the unnormalised probabilities; returns the factor by which the
// head's earlier accumulator must be scaled.
float softmax_block(float* s, std::int64_t nb, float cap, float& m, float& l) {
  if (cap > 0.0f) {
    for (std::int64_t j = 0; j < nb;) {
      const std::size_t vl = F::setvl(static_cast<std::size_t>(nb - j));
      F::store(s + j, F::mul(F::tanh(F::mul(F::load(s + j, vl), 1.0f / cap, vl), vl), cap, vl), vl);
      j += static_cast<std::int64_t>(vl);
    }
  }
  float mb = kNegInf;
  for (std::int64_t j = 0; j < nb;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(nb - j));
    mb = std::max(mb, F::reduce_max(F::load(s + j, vl), vl));
    j += static_cast<std::int64_t>(vl);
  }
  const float m_new = std::max(m, mb);
  float sum = 0.0f;
  for (std::int64_t j = 0; j < nb;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(nb - j));
    // exp, not exp_nonpositive (s - m_new <= 0 here too): with these short loops
    // (kBlock keys) the RVV build retired 0.3% more instructions in all with the
    // latter (bench-kernels decode case, VLEN 256: 4,006,241 against 3,994,288).
    const F::V e = F::exp(F::add(F::load(s + j, vl), -m_new, vl), vl);
    F::store(s + j, e, vl);
    sum += F::reduce_sum(e, vl);
    j += static_cast<std::int64_t>(vl);
  }
  const float alpha = m == kNegInf ? 0.0f : std::exp(m - m_new);
  l = l * alpha + sum;
  m = m_new;
  return alpha;
}

struct Scratch {
  detail::LineVector<float> q, acc, scores;
  std::vector<float> m, l;
#if defined(RVVK_VEC_AVX512) || defined(RVVK_VEC_AVX2)
  // x86::qk_block's scratch: 16 keys' K rows in fp32 (AVX-512), the heads'
  // 8-lane partial scores (AVX2)
  std::vector<x86::Row> kf;
#endif
#if defined(RVVK_VEC_AVX512)
  detail::LineVector<bf16> qb;  // q as it is, for x86::qk_block_dot
#endif
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// One task: request b, split `split`, KV heads [kv0, kv0 + nkv) (nkv <=
// kDecodeKvHeadsPerTask). The KV heads take each key block in turn, so a cache
// row's pieces of these heads are fetched one block apart at most, not a whole
// split apart.
template <class TQ, class TKV>
void partial_task(const DecodeAttentionArgs& a, std::int64_t task) {
  const std::int64_t splits = a.num_splits, hkv = a.num_kv_heads;
  const std::int64_t kv_groups = decode_attention_kv_groups(a);
  const std::int64_t b = task / (kv_groups * splits);
  const std::int64_t kv0 = (task / splits) % kv_groups * kDecodeKvHeadsPerTask;
  const std::int64_t nkv = std::min(kDecodeKvHeadsPerTask, hkv - kv0);
  const std::int64_t split = task % splits;
  const std::int64_t group = a.num_heads / hkv;
  const std::int64_t heads = nkv * group;  // query heads kv0 * group + [0, heads)
  const std::int64_t dim = a.head_dim, dim_v = a.head_dim_v;

  const std::int64_t len = a.seq_lens[b];
  const std::int64_t start = a.window > 0 ? std::max<std::int64_t>(0, len - a.window) : 0;
  const std::int64_t per_split = (len - start + splits - 1) / splits;
  const std::int64_t lo = std::min(len, start + split * per_split);
  const std::int64_t hi = std::min(len, lo + per_split);

  Scratch& sc = scratch();
  sc.q.resize(static_cast<std::size_t>(heads * dim));
  sc.acc.assign(static_cast<std::size_t>(heads * dim_v), 0.0f);
  sc.scores.resize(static_cast<std::size_t>(group * kBlock));
  sc.m.assign(static_cast<std::size_t>(heads), kNegInf);
  sc.l.assign(static_cast<std::size_t>(heads), 0.0f);

#if defined(RVVK_VEC_AVX512)
  // The bf16 dot products take q as it is (bf16) and scale the scores instead.
  const bool dot = x86::uses_dot<TQ, TKV>(dim);
  if (dot) sc.qb.resize(static_cast<std::size_t>(heads * dim));
#endif
#if defined(__riscv_v_intrinsic)
  // bf16 rows in pairs: q and the P.V accumulators in pair order.
  const bool pairs = rvv::uses_pairs<TKV>(a.cache, dim, dim_v);
#endif
  for (std::int64_t g = 0; g < heads; ++g) {
    const std::int64_t q_off = b * a.q_stride_b + (kv0 * group + g) * a.q_stride_h;
#if defined(RVVK_VEC_AVX512)
    if (dot) {
      std::copy_n(at<bf16>(a.q, q_off), dim, sc.qb.data() + g * dim);
      continue;
    }
#endif
    const TQ* src = at<TQ>(a.q, q_off);
    float* dst = sc.q.data() + g * dim;
    for (std::int64_t i = 0; i < dim;) {
      const std::size_t vl = F::setvl(static_cast<std::size_t>(dim - i));
      F::store(dst + i, F::mul(F::load(src + i, vl), a.sm_scale * a.cache.k_scale, vl), vl);
      i += static_cast<std::int64_t>(vl);
    }
#if defined(RVVK_VEC_AVX2)
    if (x86::uses_pairs<TKV>(dim)) to_pairs<16>(dst, dim);
#elif defined(__riscv_v_intrinsic)
    if (pairs) rvv::split_pairs(dst, dim);
#endif
  }

  const KvCache& c = a.cache;
  // int8 caches carry a scale per token and KV head, applied to the scores (K)
  // and to the probabilities after the softmax sums (V).
  constexpr bool kPerToken = std::is_same_v<TKV, std::int8_t>;
  const std::int64_t req = a.req_pool_indices[b];
  // Per KV head, the row pointers (and for int8 the scales) of the current block
  // ([0, kBlock)) and of the next one ([kBlock, 2 kBlock)), moved down after
  // each block.
  const TKV* kb[kDecodeKvHeadsPerTask][2 * kBlock];
  const TKV* vb[kDecodeKvHeadsPerTask][2 * kBlock];
  float kscale[kPerToken ? kDecodeKvHeadsPerTask : 1][kPerToken ? 2 * kBlock : 1];
  float vscale[kPerToken ? kDecodeKvHeadsPerTask : 1][kPerToken ? 2 * kBlock : 1];
  std::int64_t ready = 0;  // rows of the current block already in kb/vb
  // The KV heads' K and V rows (and scales) of positions [p0, p0 + n) (n <=
  // kBlock), at [off, off + n). Loops over j innermost, which the compilers
  // vectorise (RVV: with the heads innermost the decode bench case retired 2.5%
  // more instructions at VLEN 256).
  auto rows_of = [&](std::int64_t p0, std::int64_t n, std::int64_t off) {
    std::int64_t rows[kBlock];
    for (std::int64_t j = 0; j < n; ++j) rows[j] = cache_row(c, req, p0 + j);
    for (std::int64_t h = 0; h < nkv; ++h) {
      const std::int64_t kh = (kv0 + h) * c.k_stride_h, vh = (kv0 + h) * c.v_stride_h;
      for (std::int64_t j = 0; j < n; ++j) {
        kb[h][off + j] = at<TKV>(c.k, rows[j] * c.k_stride_t + kh);
        vb[h][off + j] = at<TKV>(c.v, rows[j] * c.v_stride_t + vh);
      }
      if constexpr (kPerToken) {
        for (std::int64_t j = 0; j < n; ++j) {
          kscale[h][off + j] = c.k_scales[rows[j] * c.scales_stride + kv0 + h];
          vscale[h][off + j] = c.v_scales[rows[j] * c.scales_stride + kv0 + h];
        }
      }
    }
  };
  const std::int64_t k_bytes = dim * static_cast<std::int64_t>(sizeof(TKV));
  const std::int64_t v_bytes = dim_v * static_cast<std::int64_t>(sizeof(TKV));
  for (std::int64_t t0 = lo; t0 < hi; t0 += kBlock) {
    const std::int64_t nb = std::min(kBlock, hi - t0);
    if (ready < nb) rows_of(t0 + ready, nb - ready, ready);
    // The next block's rows, to prefetch (none where the target cannot).
    const std::int64_t next =
        detail::kCanPrefetch ? std::clamp<std::int64_t>(hi - t0 - kBlock, 0, kBlock) : 0;
    rows_of(t0 + kBlock, next, kBlock);
    for (std::int64_t h = 0; h < nkv; ++h) {
      const TKV* const* kr = kb[h];
      const TKV* const* vr = vb[h];
      float* const acc = sc.acc.data() + h * group * dim_v;
      float* const m = sc.m.data() + h * group;
      float* const l = sc.l.data() + h * group;
#if defined(RVVK_VEC_AVX2)
      // AVX2: the K product asks for the K row kAhead keys ahead of the one it
      // is on (into the next block at its end), the V product for the next
      // block's V rows spread over its passes: requests evenly spread over the
      // block, each well ahead of its use. (A whole block's rows at once, a
      // block ahead, as below, kept the decode at about half the rate at which
      // this machine streams such rows.)
      if (t0 == lo) {  // nothing prefetched the first rows
        for (std::int64_t j = 0; j < std::min(nb, kAhead); ++j) detail::prefetch(kr[j], k_bytes);
        for (std::int64_t j = 0; j < nb; ++j) detail::prefetch(vr[j], v_bytes);
      }
      const Prefetch<TKV> pf_k{k_bytes, v_bytes, kr, nullptr, nb + next, kAhead};
      const Prefetch<TKV> pf_v{k_bytes, v_bytes, nullptr, vr + kBlock, next, 0};
      x86::qk_block(sc.q.data() + h * group * dim, dim, group, kr, nb, sc.scores.data(), pf_k,
                    sc.kf);
#else
      const Prefetch<TKV> pf{k_bytes, v_bytes, kr + kBlock, vr + kBlock, next, 0};
      if (detail::kCanPrefetch && t0 == lo) {  // nothing prefetched the first block
        for (std::int64_t j = 0; j < nb; ++j) {
          detail::prefetch(kr[j], k_bytes);
          detail::prefetch(vr[j], v_bytes);
        }
      }
      const float* const qf = sc.q.data() + h * group * dim;
#if defined(RVVK_VEC_AVX512)
      // The dot products spread the next block's K rows over their passes and
      // the V product its V rows; the other form asks for both during its K
      // conversion.
      const Prefetch<TKV> pf_k{k_bytes, v_bytes, kr + kBlock, nullptr, next, 0};
      const Prefetch<TKV> pf_v{k_bytes, v_bytes, nullptr, vr + kBlock, next, 0};
#if defined(__AVX512BF16__)
      if constexpr (std::is_same_v<TQ, bf16> && std::is_same_v<TKV, bf16>) {
        if (dot)
          x86::qk_block_dot(sc.qb.data() + h * group * dim, dim, group, kr, nb, sc.scores.data(),
                            a.sm_scale * a.cache.k_scale, pf_k);
        else
          x86::qk_block(qf, dim, group, kr, nb, sc.scores.data(), pf, sc.kf);
      } else
#endif
      {
        x86::qk_block(qf, dim, group, kr, nb, sc.scores.data(), pf, sc.kf);
      }
#else
#if defined(__riscv_v_intrinsic)
      if constexpr (std::is_same_v<TKV, bf16>) {
        if (pairs) {
          // With Zicbop, the next block's rows up front (the generic q.k spreads
          // them over its keys); without it (this project's builds) nothing.
          if constexpr (detail::kCanPrefetch)
            for (std::int64_t j = 0; j < pf.n; ++j) pf.row(j);
          for_head_groups<rvv::kHeads>(group, [&](auto ng, std::int64_t g0) {
            rvv::qk_gather<decltype(ng)::value>(qf, dim, kr, nb, sc.scores.data(), g0);
          });
        }
      }
      if (!pairs)
#endif
        for_head_groups<4>(group, [&](auto ng, std::int64_t g0) {
          qk_heads<decltype(ng)::value>(qf, dim, kr, nb, sc.scores.data(), g0,
                                        g0 == 0 ? &pf : nullptr);
        });
#endif
#endif
      for (std::int64_t g = 0; g < group; ++g) {
        float* s = sc.scores.data() + g * kBlock;
        if constexpr (kPerToken) mul_rows(s, kscale[h], nb);
        const float alpha = softmax_block(s, nb, a.logit_cap, m[g], l[g]);
        if constexpr (kPerToken) mul_rows(s, vscale[h], nb);
        if (alpha != 1.0f) scale_row(acc + g * dim_v, dim_v, alpha);
      }
#if defined(RVVK_VEC_AVX2)
      x86::pv_block(acc, dim_v, group, vr, nb, sc.scores.data(), pf_v);
#elif defined(RVVK_VEC_AVX512)
      x86::pv_block(acc, dim_v, group, vr, nb, sc.scores.data(), dot ? &pf_v : nullptr);
#else
#if defined(__riscv_v_intrinsic)
      if constexpr (std::is_same_v<TKV, bf16>) {
        if (pairs) {
          for_head_groups<rvv::kHeads>(group, [&](auto ng, std::int64_t g0) {
            rvv::pv_heads<decltype(ng)::value>(acc, dim_v, vr, nb, sc.scores.data(), g0);
          });
        }
      }
      if (!pairs)
#endif
        for_head_groups<4>(group, [&](auto ng, std::int64_t g0) {
          pv_heads<decltype(ng)::value>(acc, dim_v, vr, nb, sc.scores.data(), g0);
        });
#endif
    }
    for (std::int64_t h = 0; h < nkv; ++h) {
      std::copy_n(kb[h] + kBlock, next, kb[h]);
      std::copy_n(vb[h] + kBlock, next, vb[h]);
      if constexpr (kPerToken) {
        std::copy_n(kscale[h] + kBlock, next, kscale[h]);
        std::copy_n(vscale[h] + kBlock, next, vscale[h]);
      }
    }
    ready = next;
  }

  for (std::int64_t g = 0; g < heads; ++g) {
    const std::int64_t hq = kv0 * group + g;
    float* out = a.partial + ((b * a.num_heads + hq) * splits + split) * (dim_v + 1);
    const float l = sc.l[static_cast<std::size_t>(g)];
    if (l > 0.0f) {
      std::copy_n(sc.acc.data() + g * dim_v, dim_v, out);
#if defined(RVVK_VEC_AVX2)
      if (x86::uses_pairs<TKV>(dim_v)) from_pairs<16>(out, dim_v);
#elif defined(RVVK_VEC_AVX512)
      if (x86::uses_pairs<TKV>(dim_v)) from_pairs<32>(out, dim_v);
#elif defined(__riscv_v_intrinsic)
      if (pairs) rvv::join_pairs(out, dim_v);
#endif
      scale_row(out, dim_v, a.cache.v_scale / l);
      out[dim_v] = sc.m[static_cast<std::size_t>(g)] + std::log(l);
    } else {
      std::fill_n(out, dim_v, 0.0f);
      out[dim_v] = kNegInf;
    }
  }
}

template <class TO>
void merge_task(const DecodeAttentionArgs& a, std::int64_t task) {
  const std::int64_t b = task / a.num_heads, h = task % a.num_heads;
  const std::int64_t splits = a.num_splits, dim_v = a.head_dim_v;
  const float* part = a.partial + (b * a.num_heads + h) * splits * (dim_v + 1);
  float mx = a.sinks ? a.sinks[h] : kNegInf;
  for (std::int64_t s = 0; s < splits; ++s) mx = std::max(mx, part[s * (dim_v + 1) + dim_v]);
  TO* o = static_cast<TO*>(a.o) + b * a.o_stride_b + h * a.o_stride_h;
  float weights[64];
  std::vector<float> many;
  float* w = weights;
  if (splits > 64) {
    many.resize(static_cast<std::size_t>(splits));
    w = many.data();
  }
  std::fill_n(w, splits, 0.0f);
  float denom = 0.0f;
  if (mx != kNegInf) {
    for (std::int64_t s = 0; s < splits; ++s) {
      const float lse = part[s * (dim_v + 1) + dim_v];
      w[s] = lse == kNegInf ? 0.0f : std::exp(lse - mx);
      denom += w[s];
    }
    if (a.sinks) denom += std::exp(a.sinks[h] - mx);
  }
  const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;
  for (std::int64_t i = 0; i < dim_v;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(dim_v - i));
    F::V acc = F::splat(0.0f, vl);
    for (std::int64_t s = 0; s < splits; ++s)
      if (w[s] != 0.0f) acc = F::fmacc(acc, w[s], F::load(part + s * (dim_v + 1) + i, vl), vl);
    F::store(o + i, F::mul(acc, inv, vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
}

}  // namespace

void decode_attention_partial(const DecodeAttentionArgs& a, std::int64_t task_begin,
                              std::int64_t task_end) {
  detail::visit_activation(a.q_dtype, [&](auto q) {
    detail::visit_cache(a.cache.dtype, [&](auto kv) {
      for (std::int64_t t = task_begin; t < task_end; ++t)
        partial_task<typename decltype(q)::type, typename decltype(kv)::type>(a, t);
    });
  });
}

void decode_attention_merge(const DecodeAttentionArgs& a, std::int64_t task_begin,
                            std::int64_t task_end) {
  for (std::int64_t t = task_begin; t < task_end; ++t) {
    switch (a.o_dtype) {
      case DType::kF32:
        merge_task<float>(a, t);
        break;
      case DType::kBF16:
        merge_task<bf16>(a, t);
        break;
      case DType::kF16:
        merge_task<f16>(a, t);
        break;
      default:
        return;  // not an activation dtype: rejected by the caller's validation
    }
  }
}

}  // namespace rvvk::RVVK_NS
