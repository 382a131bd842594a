// Extend attention's fp32 products on AVX2 (x86_avx2): both products on whole
// 16-lane chunks with 12 accumulators in registers (6 keys x 16 query rows,
// 6 query rows x 16 value columns), the generic forms on the rest. Its q.k
// asks for the block's converted V rows and its P.V for the next block's K
// rows (where they are converted already), a few lines per tile (Lines): a
// request's converted rows live in L3, and without this each product's first
// pass over a block waited for them. No bf16 matrix path.
#pragma once

#include <immintrin.h>

#include "../generic/extend_attention_fp32.h"
#include "../generic/extend_attention_no_bf16mm.h"

namespace rvvk::RVVK_NS {
namespace {

// x86_avx2: register-blocked products over whole 16-lane chunks (two ymm),
// 12 accumulators. The LMUL-2 forms above keep only 6 (3 keys or rows x 2
// ymm), fewer than the FMA latency x throughput (4 x 2) needs, and re-load
// their partial sums per 8 dimensions.
namespace avx2 {
constexpr std::int64_t kLanes = 16;  // query rows (qk) / value columns (pv) per chunk
constexpr int kTile = 6;             // keys (qk) / query rows (pv) per chunk

// Up to kTile pairs of accumulators as named variables (GCC keeps an array of
// __m256 indexed in an unrolled loop on the stack, storing it every step).
template <int N>
struct Acc {
  __m256 a0, b0, a1, b1, a2, b2, a3, b3, a4, b4, a5, b5;
  // acc_i += s_i * (u, w) for the N scalars s at p (s_i = p[i * stride]).
  // f(a_i, b_i, i) for each pair i < N (load, scale, multiply-add or store them).
  template <class F>
  RVVK_ALWAYS_INLINE void each(F f) {
    f(a0, b0, 0);
    if constexpr (N > 1) f(a1, b1, 1);
    if constexpr (N > 2) f(a2, b2, 2);
    if constexpr (N > 3) f(a3, b3, 3);
    if constexpr (N > 4) f(a4, b4, 4);
    if constexpr (N > 5) f(a5, b5, 5);
  }
  // acc_i += s_i * (u, w) for the N scalars s at p (s_i = p[i * stride]).
  RVVK_ALWAYS_INLINE void fma(const float* p, std::int64_t stride, __m256 u, __m256 w) {
    each([&](__m256& a, __m256& b, int i) RVVK_ALWAYS_INLINE {
      const __m256 x = _mm256_broadcast_ss(p + i * stride);
      a = _mm256_fmadd_ps(x, u, a);
      b = _mm256_fmadd_ps(x, w, b);
    });
  }
};

// s[j][c0 + 0..16) = sum_d k_j[d] * qt[d][c0 + ..] for the NK keys at kc.
template <int NK>
RVVK_ALWAYS_INLINE inline void qk_tile(const float* qt, std::int64_t ld, std::int64_t dim,
                                        const float* kc, float* s) {
  Acc<NK> acc;
  acc.each([](__m256& a, __m256& b, int) RVVK_ALWAYS_INLINE {
    a = b = _mm256_setzero_ps();
  });
  const float* q = qt;
  for (std::int64_t d = 0; d < dim; ++d, q += ld)
    acc.fma(kc + d, dim, _mm256_loadu_ps(q), _mm256_loadu_ps(q + 8));
  acc.each([&](__m256& a, __m256& b, int i) RVVK_ALWAYS_INLINE {
    _mm256_storeu_ps(s + i * ld, a);
    _mm256_storeu_ps(s + i * ld + 8, b);
  });
}

// o[r + i][c0 + 0..16) = o[..] * alpha[r + i] + sum_j p[j][r + i] * vc[j][c0 + ..]
// for the NR query rows at o.
template <int NR>
RVVK_ALWAYS_INLINE inline void pv_tile(float* o, std::int64_t dim_v, const float* alpha,
                                        const float* p, std::int64_t ld, const float* vc,
                                        std::int64_t lv, std::int64_t nb) {
  Acc<NR> acc;
  acc.each([&](__m256& a, __m256& b, int i) RVVK_ALWAYS_INLINE {
    const __m256 al = _mm256_broadcast_ss(alpha + i);
    a = _mm256_mul_ps(_mm256_loadu_ps(o + i * dim_v), al);
    b = _mm256_mul_ps(_mm256_loadu_ps(o + i * dim_v + 8), al);
  });
  const float* v = vc;
  for (std::int64_t j = 0; j < nb; ++j, p += ld, v += lv)
    acc.fma(p, 1, _mm256_loadu_ps(v), _mm256_loadu_ps(v + 8));
  acc.each([&](__m256& a, __m256& b, int i) RVVK_ALWAYS_INLINE {
    _mm256_storeu_ps(o + i * dim_v, a);
    _mm256_storeu_ps(o + i * dim_v + 8, b);
  });
}

template <template <int> class F, class... A>
RVVK_ALWAYS_INLINE inline void by_count(int n, A... args) {
  switch (n) {
    case 6: F<6>::run(args...); break;
    case 5: F<5>::run(args...); break;
    case 4: F<4>::run(args...); break;
    case 3: F<3>::run(args...); break;
    case 2: F<2>::run(args...); break;
    case 1: F<1>::run(args...); break;
    default: break;
  }
}
template <int N>
struct QkTile {
  static void run(const float* qt, std::int64_t ld, std::int64_t dim, const float* kc,
                  float* s) {
    qk_tile<N>(qt, ld, dim, kc, s);
  }
};
template <int N>
struct PvTile {
  static void run(float* o, std::int64_t dim_v, const float* alpha, const float* p,
                  std::int64_t ld, const float* vc, std::int64_t lv, std::int64_t nb) {
    pv_tile<N>(o, dim_v, alpha, p, ld, vc, lv, nb);
  }
};

// fn(c, i, n) for each tile: the whole chunks c of kLanes in [0, whole) by
// the tiles [i, i + n) (n <= kTile) of `count` keys or query rows; each tile
// first asks pf for its share of lines.
template <class Fn>
RVVK_ALWAYS_INLINE inline void each_tile(std::int64_t whole, std::int64_t count, Lines& pf,
                                         Fn fn) {
  pf.spread(whole / kLanes * ((count + kTile - 1) / kTile));
  for (std::int64_t c = 0; c < whole; c += kLanes)
    for (std::int64_t i = 0; i < count; i += kTile) {
      pf.ask();
      fn(c, i, static_cast<int>(std::min<std::int64_t>(kTile, count - i)));
    }
}

// The whole chunks of query rows; returns where the rest starts.
std::int64_t qk_block(const float* qt, std::int64_t nqr, std::int64_t ld, std::int64_t dim,
                      const float* kc, std::int64_t nb, float* s, Lines& pf) {
  const std::int64_t whole = nqr / kLanes * kLanes;
  each_tile(whole, nb, pf, [&](std::int64_t c, std::int64_t j, int n) RVVK_ALWAYS_INLINE {
    by_count<QkTile>(n, qt + c, ld, dim, kc + j * dim, s + j * ld + c);
  });
  return whole;
}

// The whole chunks of value columns for all query rows; returns where the
// rest starts.
std::int64_t pv_block(float* o, std::int64_t dim_v, const float* alpha, const float* p,
                      std::int64_t nqr, std::int64_t ld, const float* vc, std::int64_t lv,
                      std::int64_t nb, Lines& pf) {
  const std::int64_t whole = dim_v / kLanes * kLanes;
  each_tile(whole, nqr, pf, [&](std::int64_t c, std::int64_t r, int n) RVVK_ALWAYS_INLINE {
    by_count<PvTile>(n, o + r * dim_v + c, dim_v, alpha + r, p + r, ld, vc + c, lv, nb);
  });
  return whole;
}
}  // namespace avx2

// Scores of the block's nb keys for all nqr query rows: whole chunks of 16
// rows by avx2::qk_block, the rest (fewer than 16 rows) by the generic form.
inline void qk_block(const float* qt, std::int64_t nqr, std::int64_t ld, std::int64_t dim,
                     const float* kc, std::int64_t nb, float* s, Lines& pf) {
  const std::int64_t c0 = avx2::qk_block(qt, nqr, ld, dim, kc, nb, s, pf);
  if (c0 < nqr) qk_keys_block(qt, nqr, ld, dim, kc, nb, s, c0);
}

// o = o * alpha + P.V: whole chunks of 16 value columns by avx2::pv_block, the
// rest by the generic form.
inline void pv_block(float* o, std::int64_t dim_v, const float* alpha, const float* p,
                     std::int64_t nqr, std::int64_t ld, const float* vc, std::int64_t lv,
                     std::int64_t nb, Lines& pf) {
  pv_cols(o, dim_v, alpha, p, nqr, ld, vc, lv, nb,
          avx2::pv_block(o, dim_v, alpha, p, nqr, ld, vc, lv, nb, pf));
}
}  // namespace
}  // namespace rvvk::RVVK_NS
