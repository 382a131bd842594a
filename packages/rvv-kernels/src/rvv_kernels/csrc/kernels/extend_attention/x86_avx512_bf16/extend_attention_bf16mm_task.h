// The bf16 matrix path of extend attention, part 3: the online softmax per
// query row and the task, over the tile products (Tiles, qk_tiles, pv_tiles)
// the including ISA header declared before.
#pragma once

#include "extend_attention_bf16mm_layout.h"

namespace rvvk::RVVK_NS {
namespace {

namespace bf16mm {
// Lanes [lo, hi) of the 16 at 16 * i, as a mask.
inline __mmask16 lanes_in(std::int64_t lo, std::int64_t hi, int i) {
  auto bits = [](std::int64_t n) {
    n = std::clamp<std::int64_t>(n, 0, 16);
    return static_cast<std::uint32_t>((1u << n) - 1u);
  };
  return static_cast<__mmask16>(bits(hi - 16 * i) & ~bits(lo - 16 * i));
}

// 2^t for t = n + f, |f| <= 1/2 (n integral, as a float); 0 where keep is
// clear. The degree-4 polynomial is within 3e-6 of 2^f (relative; p is
// rounded to bf16 next, by up to 2^-8), with p(0) = 1 exactly.
RVVK_ALWAYS_INLINE inline __m512 exp2_split(__m512 n, __m512 f, __mmask16 keep) {
  __m512 p = _mm512_set1_ps(9.5827961341e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5906306952e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4024099112e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9312423468e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(keep, p, n);
}

// Online softmax of row s[0, kN) whose visible keys are [lo, hi), in base 2:
// the row's scores are x = s * k (k = sm_scale * log2(e) > 0; with a logit
// cap, x = cap * log2(e) * tanh(s * sm_scale / cap) and k = 1); m (the running
// max of x) and l updated; p = 2^(x - m) rounded to bf16 written to p16, and l
// sums the rounded p (so the weights P.V applies are exactly the ones it
// divides by). Returns alpha = 2^(m_old - m_new).
//
// p in bf16 is what P.V multiplies, as in torch's own CPU flash attention and
// SGLang's CPU extend kernel.
template <bool kWhole>
RVVK_ALWAYS_INLINE inline float softmax_row(const float* s, std::int64_t lo, std::int64_t hi,
                                            float k, float scale, float cap, float* m, float* l,
                                            std::uint16_t* p16) {
  constexpr int kZ = static_cast<int>(kN / 16);
  __m512 x[kZ];
  __mmask16 vis[kZ];
  if (cap > 0.0f) {
    const __m512 in = _mm512_set1_ps(scale / cap), out = _mm512_set1_ps(cap * kLog2e);
    for (int i = 0; i < kZ; ++i)
      x[i] = _mm512_mul_ps(vec::avx512::tanh(_mm512_mul_ps(_mm512_loadu_ps(s + 16 * i), in)), out);
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < kZ; ++i) x[i] = _mm512_loadu_ps(s + 16 * i);
  }
  // The max of the visible x (in units of k); x is raw s without a cap, and
  // max(s) * k = max(s * k) for k > 0 (rounding is monotonic).
  __m512 mx = _mm512_set1_ps(-INFINITY);
  if constexpr (kWhole) {
#pragma GCC unroll 8
    for (int i = 0; i < kZ; i += 2) mx = _mm512_max_ps(mx, _mm512_max_ps(x[i], x[i + 1]));
  } else {
    for (int i = 0; i < kZ; ++i) {
      vis[i] = lanes_in(lo, hi, i);
      mx = _mm512_mask_max_ps(mx, vis[i], mx, x[i]);
    }
  }
  const float m_old = *m;
  const float m_new = std::max(m_old, _mm512_reduce_max_ps(mx) * k);
  const float alpha = m_new == m_old ? 1.0f : std::exp2(m_old - m_new);
  const __m512 kv = _mm512_set1_ps(k), mv = _mm512_set1_ps(m_new);
  const __m512 t_min = _mm512_set1_ps(-126.0f);  // 2^t below this is 0 (no denormals)
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  __m512 sum = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int i = 0; i < kZ; i += 2) {
    __m512 p[2];
    for (int j = 0; j < 2; ++j) {
      const __m512 t = _mm512_fmsub_ps(x[i + j], kv, mv);  // <= 0 up to rounding
      const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      // A whole block's t are finite: 2^t below 2^-126 comes out of vscalefps
      // as a denormal or 0, and bf16 conversion and vdpbf16ps flush denormals,
      // so p and l see 0 either way (t_min only matters with masked lanes,
      // whose t may be anything).
      __mmask16 keep = 0xffff;
      if constexpr (!kWhole) keep = vis[i + j] & _mm512_cmp_ps_mask(t, t_min, _CMP_GE_OQ);
      p[j] = exp2_split(n, _mm512_sub_ps(t, n), keep);
    }
    const __m512bh pb = _mm512_cvtne2ps_pbh(p[1], p[0]);
    _mm512_storeu_si512(p16 + 16 * i, reinterpret_cast<__m512i>(pb));
    sum = _mm512_dpbf16_ps(sum, pb, ones);  // the rounded p, in pairs
  }
  *m = m_new;
  *l = *l * alpha + _mm512_reduce_add_ps(sum);
  return alpha;
}

// Head sizes of whole tile rows, and no per-tensor cache scales (they apply to
// the cached keys only, not the new ones; the fp32 path folds them per row).
bool eligible(const ExtendAttentionArgs& a) {
  return a.head_dim % 32 == 0 && a.head_dim_v % 32 == 0 && a.cache.k_scale == 1.0f &&
         a.cache.v_scale == 1.0f && a.sm_scale > 0.0f;
}

void task(const ExtendAttentionArgs& a, std::int64_t task) {
  TaskSpan ts;
  if (!locate(a, task, ts)) return;
  const std::int64_t kvh = ts.kvh, m0 = ts.m0, len = ts.len, prefix = ts.prefix;
  const std::int64_t start = ts.start, group = ts.group, nqr = ts.nqr;
  const std::int64_t nqr_pad = (nqr + kR - 1) / kR * kR;
  const std::int64_t dim = a.head_dim, dim_v = a.head_dim_v;
  const std::int64_t window = a.window;
  // Scores to base-2 exponents: x = s * k (with a cap, softmax_row applies it
  // and x comes out in base 2).
  const float cap = a.logit_cap, scale = a.sm_scale;
  const float k = cap > 0.0f ? 1.0f : scale * kLog2e;

  Scratch& sc = scratch();
  sc.q.assign(static_cast<std::size_t>(nqr_pad * dim), 0);
  sc.kb.resize(static_cast<std::size_t>(dim / 32 * (kN / 16) * 256));
  sc.vb.resize(static_cast<std::size_t>(kN / 32 * (dim_v / 16) * 256));
  sc.s.resize(static_cast<std::size_t>(nqr_pad * kN));
  sc.p.assign(static_cast<std::size_t>(nqr_pad * kN), 0);  // pad rows stay 0
  sc.o.assign(static_cast<std::size_t>(nqr_pad * dim_v), 0.0f);
  sc.m.assign(static_cast<std::size_t>(nqr), kMinit);
  sc.l.assign(static_cast<std::size_t>(nqr), 0.0f);
  for (std::int64_t r = 0; r < nqr; ++r) {
    std::memcpy(sc.q.data() + r * dim, at<std::uint16_t>(a.q, ts.q_offset(a, r)),
                static_cast<std::size_t>(dim) * 2);
  }

  const KvCache& c = a.cache;
  const std::int64_t req = ts.req;
  const std::uint16_t* krows[kN];
  const std::uint16_t* vrows[kN];
  // Key blocks start at multiples of kN (a whole block is the same for every
  // task of the request); positions before a row's window are masked, and
  // those before every row's window (ts.req_lo) are zeros, their rows unread.
  const std::int64_t kb_size = dim / 32 * (kN / 16) * 256, vb_size = kN / 32 * (dim_v / 16) * 256;
  const std::int64_t whole = len / kN;
  const bool reuse = whole * (kb_size + vb_size) <= kMaxPackedWords;
  Packed& pk = packed();
  if (reuse && (pk.b != ts.b || pk.kvh != kvh)) {
    pk.b = ts.b;
    pk.kvh = kvh;
    pk.kb.resize(static_cast<std::size_t>(whole * kb_size));
    pk.vb.resize(static_cast<std::size_t>(whole * vb_size));
    pk.have.assign(static_cast<std::size_t>(whole), 0);
  }
  for (std::int64_t p0 = ts.pos_lo / kN * kN; p0 < ts.pos_end; p0 += kN) {
    const std::int64_t nb = std::min(kN, ts.pos_end - p0);
    const std::size_t blk = static_cast<std::size_t>(p0 / kN);
    const bool shared = reuse && nb == kN;
    std::uint32_t* kb = shared ? pk.kb.data() + blk * kb_size : sc.kb.data();
    std::uint32_t* vb = shared ? pk.vb.data() + blk * vb_size : sc.vb.data();
    if (!(shared && pk.have[blk])) {  // not packed by an earlier task of this call
      for (std::int64_t j = 0; j < kN; ++j) {
        const std::int64_t pos = p0 + j;
        if (j >= nb || pos < ts.req_lo) {  // past the block / seen by no query: zeros
          krows[j] = vrows[j] = nullptr;
        } else if (pos < prefix) {
          const std::int64_t row = cache_row(c, req, pos);
          krows[j] = at<std::uint16_t>(c.k, row * c.k_stride_t + kvh * c.k_stride_h);
          vrows[j] = at<std::uint16_t>(c.v, row * c.v_stride_t + kvh * c.v_stride_h);
        } else {
          const std::int64_t tok = start + pos - prefix;
          krows[j] = at<std::uint16_t>(a.k, tok * a.k_stride_t + kvh * a.k_stride_h);
          vrows[j] = at<std::uint16_t>(a.v, tok * a.v_stride_t + kvh * a.v_stride_h);
        }
      }
      pack_k(krows, dim, kb);
      pack_v(vrows, dim_v, vb);
      if (shared) pk.have[blk] = 1;
    }
    // Keys of the block in whole pairs of tiles: a task's last block is often
    // partial, and its scores and p past nk are neither computed nor read.
    const std::int64_t nk = (nb + 31) / 32 * 32;
    qk_tiles(sc.q.data(), nqr_pad, dim, kb, nk, sc.s.data());
    for (std::int64_t r = 0; r < nqr; ++r) {
      const std::int64_t qpos = prefix + m0 + r / group;  // the row's position
      const std::int64_t vis_lo = window > 0 ? qpos - window + 1 : 0;
      const std::int64_t vis_end = a.causal ? qpos + 1 : len;
      const std::int64_t lo = std::clamp<std::int64_t>(vis_lo - p0, 0, nb);
      const std::int64_t hi = std::clamp<std::int64_t>(vis_end - p0, lo, nb);
      float* const srow = sc.s.data() + r * kN;
      std::uint16_t* const prow = sc.p.data() + r * kN;
      float* const mr = &sc.m[r];
      float* const lr = &sc.l[r];
      const float alpha = lo == 0 && hi == kN
                              ? softmax_row<true>(srow, lo, hi, k, scale, cap, mr, lr, prow)
                              : softmax_row<false>(srow, lo, hi, k, scale, cap, mr, lr, prow);
      if (alpha != 1.0f) {
        float* orow = sc.o.data() + r * dim_v;
        const __m512 k = _mm512_set1_ps(alpha);
        for (std::int64_t i = 0; i < dim_v; i += 16)
          _mm512_storeu_ps(orow + i, _mm512_mul_ps(_mm512_loadu_ps(orow + i), k));
      }
    }
    pv_tiles(sc.p.data(), nqr_pad, vb, nk, dim_v, sc.o.data());
  }
  // m in natural units for store_rows (the sinks are).
  for (std::int64_t r = 0; r < nqr; ++r) sc.m[r] *= kLn2;
  store_rows<bf16>(a, kvh, start + m0, nqr, sc.o.data(), sc.m.data(), sc.l.data());
}
}  // namespace bf16mm

inline bool run_bf16mm(const ExtendAttentionArgs& a, std::int64_t task_begin,
                       std::int64_t task_end) {
  if (a.dtype != DType::kBF16 || a.cache.dtype != DType::kBF16 || !bf16mm::eligible(a))
    return false;
  const bf16mm::Tiles tiles;
  bf16mm::packed().b = -1;  // nothing packed by an earlier call is valid
  for (std::int64_t t = task_begin; t < task_end; ++t) bf16mm::task(a, t);
  return true;
}
}  // namespace
}  // namespace rvvk::RVVK_NS
