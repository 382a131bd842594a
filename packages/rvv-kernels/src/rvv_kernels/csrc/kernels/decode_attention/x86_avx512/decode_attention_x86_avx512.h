// Decode attention's products on AVX-512 (x86_avx512, and under the bf16 dot
// products of x86_avx512_bf16 / x86_amx). Products<Dot, ...> takes q.k of bf16
// q over a bf16 cache from Dot where Dot::kAvailable (x86_avx512_bf16/).
#pragma once

#include <immintrin.h>

#include "../decode_attention_common.h"

namespace rvvk::RVVK_NS {
namespace {

// Keys per block. The next block's K and V rows are prefetched while this one
// is computed.
constexpr std::int64_t kBlock = 64;

// The block's two products on AVX-512. The generic forms reduce every (key,
// head) dot product on its own and convert each K and V row once per group of
// <= 4 heads; here:
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
// (low half: Reg::bf16_low) and 2i + 1 (high half: Reg::bf16_high).
template <class T>
inline constexpr bool kPairs = std::is_same_v<T, bf16>;
template <class T>
inline bool uses_pairs(std::int64_t n) {
  return kPairs<T> && n % 32 == 0;
}
using vec::avx512::Reg;

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
          const __m512 v0 = Reg::bf16_low(raw), v1 = Reg::bf16_high(raw);
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

// x86::qk_block's scratch (16 keys' K rows in fp32) and q as it is (bf16) for
// the dot products.
struct Scratch {
  std::vector<Row> kf;
  detail::LineVector<bf16> qb;
};

// The driver's interface (see generic::Products). Dot: the bf16 dot products
// of q.k (kAvailable, uses<TQ, TKV>(dim), qk_block(...)) or none.
template <class Dot, class TQ, class TKV>
class Products : ProductsBase {
 public:
  Products(const DecodeAttentionArgs& a, std::int64_t heads, float* q, Scratch& s)
      : ProductsBase(a, q), s_(s) {
    // The bf16 dot products take q as it is (bf16) and scale the scores instead.
    if constexpr (Dot::kAvailable) dot_ = Dot::template uses<TQ, TKV>(dim_);
    if (dot_) s_.qb.resize(static_cast<std::size_t>(heads * dim_));
  }

  void prepare_q(std::int64_t g, const TQ* src) {
    if constexpr (std::is_same_v<TQ, bf16>) {
      if (dot_) {
        std::copy_n(src, dim_, s_.qb.data() + g * dim_);
        return;
      }
    }
    scale_q(q_ + g * dim_, src, dim_, scale_);
  }

  // The dot products spread the next block's K rows over their passes and the V
  // product its V rows; the other form asks for both during its K conversion.
  void qk(std::int64_t h, const BlockRows<TKV>& r, float* scores) const {
    const Prefetch<TKV> pf{r.k_bytes, r.v_bytes, r.k + kBlock, r.v + kBlock, r.next, 0};
    prefetch_first(r);
    const float* const qf = q_ + h * group_ * dim_;
    if constexpr (Dot::kAvailable && std::is_same_v<TQ, bf16> && std::is_same_v<TKV, bf16>) {
      if (dot_) {
        const Prefetch<TKV> pf_k{r.k_bytes, r.v_bytes, r.k + kBlock, nullptr, r.next, 0};
        Dot::qk_block(s_.qb.data() + h * group_ * dim_, dim_, group_, r.k, r.nb, scores, scale_,
                      pf_k);
        return;
      }
    }
    qk_block(qf, dim_, group_, r.k, r.nb, scores, pf, s_.kf);
  }

  void pv(float* acc, const BlockRows<TKV>& r, const float* p) const {
    const Prefetch<TKV> pf_v{r.k_bytes, r.v_bytes, nullptr, r.v + kBlock, r.next, 0};
    pv_block(acc, dim_v_, group_, r.v, r.nb, p, dot_ ? &pf_v : nullptr);
  }

  void to_natural(float* out) const {
    if (uses_pairs<TKV>(dim_v_)) from_pairs<32>(out, dim_v_);
  }

 private:
  Scratch& s_;
  bool dot_ = false;
};

// No bf16 dot products (x86_avx512).
struct NoDot {
  static constexpr bool kAvailable = false;
};
}  // namespace x86
}  // namespace
}  // namespace rvvk::RVVK_NS
