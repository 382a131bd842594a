// Extend (prefill) attention over SGLang's indexed KV cache plus the new
// tokens' own K/V (see ExtendAttentionArgs): the driver, the same for every
// variant. The fp32 path's two matrix products (qk_block, pv_block) and the
// bf16 matrix path (run_bf16mm) come from the variant's extend_attention_isa.h
// (generic/, x86_avx2/, x86_avx512_bf16/, x86_amx/).
//
// One task = (request, KV head, block of up to kExtendBlockM query tokens). All
// query heads of the KV head's group are handled together: the task's query
// rows are the (token, head) pairs qr = token * group + head, up to 32 x group,
// so each K and V row is read and converted once per task and key block.
// Tiled online softmax (flash-attention style), no full score matrix; per
// block of kBlockN key positions (the prefix from the cache through
// req_to_token, then the new tokens; positions no query row of the task sees
// under causality / the window are skipped):
//  - K and V rows -> fp32 with their scales folded in (fp8 per tensor, int8 per
//    token and KV head), cached rows prefetched a few positions ahead (where
//    the target can: detail::kCanPrefetch). Each
//    position is converted once per call and thread for all the request's query
//    blocks the thread runs (Converted; per task when the request is too long
//    for it). Key blocks start at multiples of kBlockN.
//  - scores s[j][qr] into a kBlockN x rows tile. Normally q is converted once
//    per task, scaled by sm_scale and stored transposed, qt[d][qr], and the
//    scores of three keys are vectors over the query rows accumulated along d
//    with the key elements as scalars (LMUL 8; when the rows span several
//    vectors, the key elements of 8 dimensions stay in scalar registers for all
//    of them). Tasks with few query rows (short extends) use dot products
//    along the head dimension instead (use_transposed_q).
//  - logit cap, then masks: kMasked into the rows that must not see a key
//    (causal, window); the visible rows of a key are contiguous.
//  - online softmax with the running max / sum as vectors over the query rows
//    (two passes per strip of rows: the max, then exp_nonpositive with the sum;
//    masked scores give exactly 0, a row that saw no key yet keeps m = kMinit,
//    l = 0, never NaN).
//  - P.V: o[qr][:] = o[qr][:] * alpha[qr] + sum_j p[j][qr] * v_j[:], vectors
//    along the head dimension, three query rows sharing each V load.
//  - x86_avx2 runs both products on whole 16-lane chunks (x86_avx2/), the
//    generic forms on the rest. The rows of qt, s and V are padded to an odd
//    number of cache lines (padded_stride).
// Finally o / l (the sink, if any, joins the denominator) in the output dtype.
// Tasks share no mutable state (thread_local scratch), so results do not depend
// on how tasks are spread over calls or threads.
// The x86_amx and x86_avx512_bf16 variants run bf16 q over a bf16 cache (head
// sizes multiples of 32) through their own task with the matrix products on
// bf16 pairs - AMX tiles, or AVX512-BF16 dot products on the same packed
// layouts: see x86_avx512_bf16/extend_attention_bf16mm_layout.h.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "rvvk/detail/aligned.h"
#include "rvvk/detail/dispatch.h"
#include "rvvk/detail/kv_cache.h"
#include "rvvk/detail/rows.h"
#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

#include "extend_attention_common.h"
#include "extend_attention_isa.h"

namespace rvvk::RVVK_NS {
namespace {

struct Scratch {
  detail::LineVector<float> qt, s, o, kc, vc, m, l, alpha, tmp;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// K / V of one request and KV head in fp32 (scales folded in), shared by the
// tasks of that request a thread runs within one call; have[i]: how many
// positions of block i (kBlockN from i * kBlockN) are converted. Requests
// longer than kMaxConvertedWords / (dim + dim_v) positions convert per task.
struct Converted {
  std::int64_t b = -1, kvh = -1;
  detail::LineVector<float> k, v;
  std::vector<std::int32_t> have;
};
Converted& converted() {
  thread_local Converted c;
  return c;
}
constexpr std::int64_t kMaxConvertedWords = std::int64_t{4} << 20;  // 16 MiB

// dst[0, n) = src[0, n) * scale in fp32.
template <class T>
void convert_row(float* dst, const T* src, std::int64_t n, float scale) {
  scale_row<FM>(dst, src, n, scale);
}

void fill_row(float* dst, std::int64_t n, float x) {
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = FM::setvl(static_cast<std::size_t>(n - i));
    FM::store(dst + i, FM::splat(x, vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
}


// Scores by dot products along the head dimension, for tasks with few query
// rows (short extends, where a vector over the query rows would be short):
// s[r] = qn[r] . k for the NR rows at qn (rows of `dim`), one K load per
// vector shared by the rows, then one reduction per row. (Three rows: the K
// vector, three q vectors and three accumulators fit the LMUL-4 registers
// even when the scheduler starts all loads first.)
template <int NR>
inline void qk_dot_rows(const float* qn, std::int64_t dim, const float* k, float* s) {
  const std::size_t vlmax = FD::vlmax();
  FD::V a0 = FD::splat(0.0f, vlmax), a1 = a0, a2 = a0;
  // Whole vectors tail-agnostic, a last partial one tail-undisturbed (its
  // lanes past vl keep earlier sums for the reduction over vlmax lanes).
  std::int64_t i = 0;
  for (; i + static_cast<std::int64_t>(vlmax) <= dim; i += static_cast<std::int64_t>(vlmax)) {
    const FD::V kv = FD::load(k + i, vlmax);
    a0 = FD::fmacc(a0, kv, FD::load(qn + i, vlmax), vlmax);
    if constexpr (NR > 1) a1 = FD::fmacc(a1, kv, FD::load(qn + dim + i, vlmax), vlmax);
    if constexpr (NR > 2) a2 = FD::fmacc(a2, kv, FD::load(qn + 2 * dim + i, vlmax), vlmax);
  }
  if (i < dim) {
    const std::size_t vl = FD::setvl(static_cast<std::size_t>(dim - i));
    const FD::V kv = FD::load(k + i, vl);
    a0 = FD::fmacc_tu(a0, kv, FD::load(qn + i, vl), vl);
    if constexpr (NR > 1) a1 = FD::fmacc_tu(a1, kv, FD::load(qn + dim + i, vl), vl);
    if constexpr (NR > 2) a2 = FD::fmacc_tu(a2, kv, FD::load(qn + 2 * dim + i, vl), vl);
  }
  s[0] = FD::reduce_sum(a0, vlmax);
  if constexpr (NR > 1) s[1] = FD::reduce_sum(a1, vlmax);
  if constexpr (NR > 2) s[2] = FD::reduce_sum(a2, vlmax);
}

void qk_dot_block(const float* qn, std::int64_t nqr, std::int64_t ld, std::int64_t dim,
                  const float* kc, std::int64_t nb, float* s) {
  for (std::int64_t j = 0; j < nb; ++j) {
    const float* k = kc + j * dim;
    float* row = s + j * ld;
    std::int64_t r = 0;
    for (; r + 3 <= nqr; r += 3) qk_dot_rows<3>(qn + r * dim, dim, k, row + r);
    if (nqr - r == 2) qk_dot_rows<2>(qn + r * dim, dim, k, row + r);
    if (nqr - r == 1) qk_dot_rows<1>(qn + r * dim, dim, k, row + r);
  }
}

// s[0, n) = cap * tanh(s[0, n) / cap) (one row of the block's scores).
void cap_row(float* s, std::int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = FS::setvl(static_cast<std::size_t>(n - i));
    FS::store(s + i, FS::mul(FS::tanh(FS::mul(FS::load(s + i, vl), inv, vl), vl), cap, vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
}

// Online softmax over the block, vectorised over query rows: s becomes the
// unnormalised probabilities, m / l the running max / sum, alpha the factor
// for the rows' earlier accumulators. Per strip of rows two passes over the
// strip's columns of s (a few KiB: the second finds them in L1): the max,
// then exp with the sum. Every exp argument is a score or an old max minus
// its row's new max (<= 0; masked scores far below), so exp_nonpositive.
void softmax_block(float* s, std::int64_t nqr, std::int64_t ld, std::int64_t nb, float* m, float* l,
                   float* alpha) {
  for (std::int64_t c = 0; c < nqr;) {
    const std::size_t vl = FE::setvl(static_cast<std::size_t>(nqr - c));
    const FE::V m_old = FE::load(m + c, vl);
    FE::V mx = m_old;
    const float* col = s + c;
    for (std::int64_t j = 0; j < nb; ++j, col += ld) mx = FE::max(mx, FE::load(col, vl), vl);
    const FE::V a = FE::exp_nonpositive(FE::sub(m_old, mx, vl), vl);
    FE::store(m + c, mx, vl);
    FE::store(alpha + c, a, vl);
    FE::V sum = FE::mul(FE::load(l + c, vl), a, vl);
    float* p = s + c;
    for (std::int64_t j = 0; j < nb; ++j, p += ld) {
      const FE::V e = FE::exp_nonpositive(FE::sub(FE::load(p, vl), mx, vl), vl);
      FE::store(p, e, vl);
      sum = FE::add(sum, e, vl);
    }
    FE::store(l + c, sum, vl);
    c += static_cast<std::int64_t>(vl);
  }
}

// Whether the task computes its scores with q transposed (vectors over the
// query rows) rather than by dot products along the head dimension. Measured
// instruction counts (D = 128): the dot products cost about (13 + 6.5 c) per
// query row and key, c = vectors per head row at LMUL 4; the transposed form
// about 3.5 D per key for up to a vector of rows. Crossover at VLEN 256 about
// 13 rows, at VLEN 1024 about 29.
bool use_transposed_q(std::int64_t nqr, std::int64_t dim) {
  const std::int64_t c = (dim + static_cast<std::int64_t>(FD::vlmax()) - 1) /
                         static_cast<std::int64_t>(FD::vlmax());
  return nqr * (2 + c) * 8 >= 5 * dim;
}
template <class T, class TKV>
void extend_task(const ExtendAttentionArgs& a, std::int64_t task) {
  TaskSpan ts;
  if (!locate(a, task, ts)) return;
  const std::int64_t kvh = ts.kvh, m0 = ts.m0, rows = ts.rows, prefix = ts.prefix;
  const std::int64_t start = ts.start, group = ts.group, nqr = ts.nqr;
  const std::int64_t dim = a.head_dim, dim_v = a.head_dim_v;
  const std::int64_t window = a.window;
  // Row strides of qt / s and of the fp32 V rows (see padded_stride).
  const std::int64_t ld = padded_stride(nqr), lv = padded_stride(dim_v);

  Scratch& sc = scratch();
  sc.qt.resize(static_cast<std::size_t>(dim * ld));
  sc.s.resize(static_cast<std::size_t>(kBlockN * ld));
  sc.o.assign(static_cast<std::size_t>(nqr * dim_v), 0.0f);
  sc.kc.resize(static_cast<std::size_t>(kBlockN * dim));
  sc.vc.resize(static_cast<std::size_t>(kBlockN * lv));
  sc.m.assign(static_cast<std::size_t>(nqr), kMinit);
  sc.l.assign(static_cast<std::size_t>(nqr), 0.0f);
  sc.alpha.resize(static_cast<std::size_t>(nqr));
  sc.tmp.resize(static_cast<std::size_t>(4 * dim));

  // q rows -> fp32 * sm_scale: in rows qn[qr][d] for the dot-product path,
  // else transposed into qt[d][qr], four rows at a time.
  const bool transposed = use_transposed_q(nqr, dim);
  auto q_row = [&](std::int64_t r) { return at<T>(a.q, ts.q_offset(a, r)); };
  float* qt = sc.qt.data();
  if (!transposed) {
    for (std::int64_t r = 0; r < nqr; ++r) convert_row(qt + r * dim, q_row(r), dim, a.sm_scale);
  }
  float* tmp = sc.tmp.data();
  for (std::int64_t r0 = 0; transposed && r0 < nqr; r0 += 4) {
    const std::int64_t n = std::min<std::int64_t>(4, nqr - r0);
    for (std::int64_t k = 0; k < n; ++k) convert_row(tmp + k * dim, q_row(r0 + k), dim, a.sm_scale);
    if (n == 4) {
      const float* t0 = tmp;
      const float* t1 = tmp + dim;
      const float* t2 = tmp + 2 * dim;
      const float* t3 = tmp + 3 * dim;
      float* dst = qt + r0;
      std::int64_t d = 0;
      for (; d + 4 <= dim; d += 4) {  // 4 x 4 tiles
        float* e0 = dst;
        float* e1 = e0 + ld;
        float* e2 = e1 + ld;
        float* e3 = e2 + ld;
        const float x00 = t0[d], x01 = t0[d + 1], x02 = t0[d + 2], x03 = t0[d + 3];
        const float x10 = t1[d], x11 = t1[d + 1], x12 = t1[d + 2], x13 = t1[d + 3];
        const float x20 = t2[d], x21 = t2[d + 1], x22 = t2[d + 2], x23 = t2[d + 3];
        const float x30 = t3[d], x31 = t3[d + 1], x32 = t3[d + 2], x33 = t3[d + 3];
        e0[0] = x00, e0[1] = x10, e0[2] = x20, e0[3] = x30;
        e1[0] = x01, e1[1] = x11, e1[2] = x21, e1[3] = x31;
        e2[0] = x02, e2[1] = x12, e2[2] = x22, e2[3] = x32;
        e3[0] = x03, e3[1] = x13, e3[2] = x23, e3[3] = x33;
        dst = e3 + ld;
      }
      for (; d < dim; ++d, dst += ld) {
        dst[0] = t0[d];
        dst[1] = t1[d];
        dst[2] = t2[d];
        dst[3] = t3[d];
      }
    } else {
      for (std::int64_t k = 0; k < n; ++k)
        for (std::int64_t d = 0; d < dim; ++d) qt[d * ld + r0 + k] = tmp[k * dim + d];
    }
  }

  const KvCache& c = a.cache;
  constexpr bool kPerToken = std::is_same_v<TKV, std::int8_t>;
  const std::int64_t req = ts.req;
  float* s = sc.s.data();
  // K / V rows in fp32, scales folded in: for the whole request and KV head in
  // the thread's Converted store when it fits (each position converted once
  // for all the tasks of the request this thread runs), else per block into
  // the task's scratch. Blocks start at multiples of kBlockN either way.
  const std::int64_t len = ts.len;
  Converted& cv = converted();
  const bool reuse = len * (dim + dim_v) <= kMaxConvertedWords;
  if (reuse && (cv.b != ts.b || cv.kvh != kvh)) {
    cv.b = ts.b;
    cv.kvh = kvh;
    cv.k.resize(static_cast<std::size_t>(len * dim));
    cv.v.resize(static_cast<std::size_t>(len * lv));
    cv.have.assign(static_cast<std::size_t>((len + kBlockN - 1) / kBlockN), 0);
  }
  // Positions [lo, hi) -> rows [0, hi - lo) of kd / vd; cached rows are
  // prefetched kAhead positions ahead (they are scattered over the cache).
  // Positions below ts.req_lo (seen by no query of the request, so masked for
  // every task sharing the block) get zero rows without reading the cache.
  auto convert = [&](std::int64_t lo, std::int64_t hi, float* kd, float* vd) {
    constexpr std::int64_t kAhead = 4;
    const std::int64_t first = std::min(std::max(lo, ts.req_lo), hi);
    for (std::int64_t pos = lo; pos < first; ++pos) {
      fill_row(kd + (pos - lo) * dim, dim, 0.0f);
      fill_row(vd + (pos - lo) * lv, dim_v, 0.0f);
    }
    const std::int64_t cached_end = std::min(hi, prefix);
    auto k_row = [&](std::int64_t row) {
      return at<TKV>(c.k, row * c.k_stride_t + kvh * c.k_stride_h);
    };
    auto v_row = [&](std::int64_t row) {
      return at<TKV>(c.v, row * c.v_stride_t + kvh * c.v_stride_h);
    };
    // Always inlined: see detail::prefetch.
    auto prefetch_pos = [&](std::int64_t pos) RVVK_ALWAYS_INLINE {
      const std::int64_t row = cache_row(c, req, pos);
      detail::prefetch(k_row(row), dim * static_cast<std::int64_t>(sizeof(TKV)));
      detail::prefetch(v_row(row), dim_v * static_cast<std::int64_t>(sizeof(TKV)));
    };
    if constexpr (detail::kCanPrefetch) {
      for (std::int64_t pos = first; pos < std::min(first + kAhead, cached_end); ++pos)
        prefetch_pos(pos);
    }
    for (std::int64_t pos = first; pos < cached_end; ++pos) {
      if constexpr (detail::kCanPrefetch) {
        if (pos + kAhead < cached_end) prefetch_pos(pos + kAhead);
      }
      const std::int64_t row = cache_row(c, req, pos);
      float ks = c.k_scale, vs = c.v_scale;
      if constexpr (kPerToken) {
        ks *= c.k_scales[row * c.scales_stride + kvh];
        vs *= c.v_scales[row * c.scales_stride + kvh];
      }
      const std::int64_t j = pos - lo;
      convert_row(kd + j * dim, k_row(row), dim, ks);
      convert_row(vd + j * lv, v_row(row), dim_v, vs);
    }
    for (std::int64_t pos = std::max(first, prefix); pos < hi; ++pos) {
      const std::int64_t t = start + pos - prefix;
      const std::int64_t j = pos - lo;
      convert_row(kd + j * dim, at<T>(a.k, t * a.k_stride_t + kvh * a.k_stride_h), dim, 1.0f);
      convert_row(vd + j * lv, at<T>(a.v, t * a.v_stride_t + kvh * a.v_stride_h), dim_v,
                  1.0f);
    }
  };
  for (std::int64_t p0 = ts.pos_lo / kBlockN * kBlockN; p0 < ts.pos_end; p0 += kBlockN) {
    const std::int64_t nb = std::min(kBlockN, ts.pos_end - p0);
    const float* kc = sc.kc.data();
    const float* vc = sc.vc.data();
    if (reuse) {
      kc = cv.k.data() + p0 * dim;
      vc = cv.v.data() + p0 * lv;
      std::int32_t& have = cv.have[static_cast<std::size_t>(p0 / kBlockN)];
      if (have < nb) {
        convert(p0 + have, p0 + nb, cv.k.data() + (p0 + have) * dim,
                cv.v.data() + (p0 + have) * lv);
        have = static_cast<std::int32_t>(nb);
      }
    } else {
      convert(p0, p0 + nb, sc.kc.data(), sc.vc.data());
    }

    // While q.k runs, this block's V rows are asked for; while P.V runs, the
    // next block's K rows, when they are converted already (see Lines).
    Lines v_lines(vc, nb, dim_v, lv), k_lines;
    if (const std::int64_t p1 = p0 + kBlockN; reuse && p1 < ts.pos_end) {
      const std::int64_t ready = cv.have[static_cast<std::size_t>(p1 / kBlockN)];
      if (ready > 0) k_lines = Lines(cv.k.data() + p1 * dim, ready, dim, dim);
    }
    if (transposed) {
      qk_block(qt, nqr, ld, dim, kc, nb, s, v_lines);
    } else {
      qk_dot_block(qt, nqr, ld, dim, kc, nb, s);
    }
    if (a.logit_cap > 0.0f) {
      for (std::int64_t j = 0; j < nb; ++j) cap_row(s + j * ld, nqr, a.logit_cap);
    }

    // Mask the query rows that do not see key j: rows before it (causal) and
    // rows more than window - 1 after it. The visible rows are contiguous.
    for (std::int64_t j = 0; j < nb; ++j) {
      const std::int64_t rel = p0 + j - prefix - m0;  // key position - first query position
      const std::int64_t r_lo = a.causal ? std::max<std::int64_t>(0, rel) : 0;
      const std::int64_t r_end = window > 0 ? std::min(rows, rel + window) : rows;
      float* row = s + j * ld;
      if (r_lo > 0) fill_row(row, std::min(r_lo, rows) * group, kMasked);
      if (r_end < rows) {
        const std::int64_t from = std::max<std::int64_t>(r_end, 0) * group;
        fill_row(row + from, nqr - from, kMasked);
      }
    }

    softmax_block(s, nqr, ld, nb, sc.m.data(), sc.l.data(), sc.alpha.data());
    pv_block(sc.o.data(), dim_v, sc.alpha.data(), s, nqr, ld, vc, lv, nb, k_lines);
  }

  store_rows<T>(a, kvh, start + m0, nqr, sc.o.data(), sc.m.data(), sc.l.data());
}
}  // namespace

void extend_attention(const ExtendAttentionArgs& a, std::int64_t task_begin,
                      std::int64_t task_end) {
  if (run_bf16mm(a, task_begin, task_end)) return;
  converted().b = -1;  // nothing converted by an earlier call is valid
  detail::visit_activation(a.dtype, [&](auto act) {
    detail::visit_cache(a.cache.dtype, [&](auto kv) {
      for (std::int64_t t = task_begin; t < task_end; ++t)
        extend_task<typename decltype(act)::type, typename decltype(kv)::type>(a, t);
    });
  });
}

}  // namespace rvvk::RVVK_NS
