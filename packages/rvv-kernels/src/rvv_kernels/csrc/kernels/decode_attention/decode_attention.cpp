// Split-KV decode attention over an indexed KV cache (see DecodeAttentionArgs):
// the driver, the same for every variant. The block's two products (q.k and
// P.V) and the form q and the accumulators take for them come from the
// variant's decode_attention_isa.h (generic/, rvv/, x86_avx2/, x86_avx512/,
// x86_avx512_bf16/; see Products in generic/decode_attention_generic.h).
//
// Stage 1, per (request, split, pair of KV heads: kDecodeKvHeadsPerTask): the
// query heads of a KV head's group are handled together so each K and V row is
// loaded once per group of heads, and the pair's two KV heads take each block of
// keys in turn, so their pieces of a cache row (adjacent in SGLang's
// [tokens, kv_heads, dim] pools) are read one block apart, not a whole split
// apart. Keys are taken in blocks of kBlock: scores for the block (q . k),
// optional tanh logit cap, online softmax (vector exp), then P.V accumulated in
// fp32.
// Stage 2 merges the splits with their log-sum-exp and the optional sink.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "decode_attention_isa.h"
#include "rvvk/detail/aligned.h"
#include "rvvk/detail/dispatch.h"
#include "rvvk/detail/kv_cache.h"
#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

using detail::at;
using detail::cache_row;

// Whether the products P apply an int8 cache's K scales (BlockRows::k_scales)
// to the scores themselves: P has a public scales_k() saying so. Otherwise the
// driver multiplies the scores by them.
template <class P, class = void>
struct ScalesK {
  static bool of(const P& /*isa*/) { return false; }
};
template <class P>
struct ScalesK<P, std::void_t<decltype(std::declval<const P&>().scales_k())>> {
  static bool of(const P& isa) { return isa.scales_k(); }
};

// s[0, n) *= f[0, n)
void mul_rows(float* s, const float* f, std::int64_t n) {
  for (std::int64_t j = 0; j < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - j));
    F::store(s + j, F::mul(F::load(s + j, vl), F::load(f + j, vl), vl), vl);
    j += static_cast<std::int64_t>(vl);
  }
}

void scale_row(float* x, std::int64_t n, float s) {
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    F::store(x + i, F::mul(F::load(x + i, vl), s, vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
}

// Online-softmax update of one head with the block's raw scores s[0, nb):
// s becomes the unnormalised probabilities (times v_scales[0, nb), an int8
// cache's V scales, when given: the sum l is of the probabilities alone);
// returns the factor by which the head's earlier accumulator must be scaled.
float softmax_block(float* s, std::int64_t nb, float cap, float& m, float& l,
                    const float* v_scales) {
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
    // (kBlock keys) exp retires fewer instructions in all on RVV.
    const F::V e = F::exp(F::add(F::load(s + j, vl), -m_new, vl), vl);
    F::store(s + j, v_scales ? F::mul(e, F::load(v_scales + j, vl), vl) : e, vl);
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
  IsaScratch isa;  // the products' own
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// One task: request b, split `split`, KV heads [kv0, kv0 + nkv) (nkv <=
// kDecodeKvHeadsPerTask). The KV heads take each key block in turn, so a cache
// row's pieces of these heads are fetched one block apart at most, not a whole
// split apart. Not inlined into the dtype dispatch: each (q, cache) dtype pair
// compiles on its own, so one cache type's code does not change another's.
template <class TQ, class TKV>
__attribute__((noinline)) void partial_task(const DecodeAttentionArgs& a, std::int64_t task) {
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

  Products<TQ, TKV> isa(a, heads, sc.q.data(), sc.isa);
  for (std::int64_t g = 0; g < heads; ++g) {
    const std::int64_t q_off = b * a.q_stride_b + (kv0 * group + g) * a.q_stride_h;
    isa.prepare_q(g, at<TQ>(a.q, q_off));
  }
  const KvCache& c = a.cache;
  // int8 caches carry a scale per token and KV head, applied to the scores (K:
  // by the products where they can, else here) and to the probabilities after
  // the softmax sums (V).
  constexpr bool kPerToken = std::is_same_v<TKV, std::int8_t>;
  const bool scale_scores = kPerToken && !ScalesK<Products<TQ, TKV>>::of(isa);
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
  // vectorise (with the heads innermost the RVV build retires more instructions).
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
      const float* const k_scales = kPerToken ? kscale[h] : nullptr;
      const BlockRows<TKV> rows{kb[h], vb[h], nb, next, t0 == lo, k_bytes, v_bytes, k_scales};
      float* const acc = sc.acc.data() + h * group * dim_v;
      float* const m = sc.m.data() + h * group;
      float* const l = sc.l.data() + h * group;
      isa.qk(h, rows, sc.scores.data());
      for (std::int64_t g = 0; g < group; ++g) {
        float* s = sc.scores.data() + g * kBlock;
        if (scale_scores) mul_rows(s, kscale[h], nb);
        const float alpha =
            softmax_block(s, nb, a.logit_cap, m[g], l[g], kPerToken ? vscale[h] : nullptr);
        if (alpha != 1.0f) scale_row(acc + g * dim_v, dim_v, alpha);
      }
      isa.pv(acc, rows, sc.scores.data());
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
      isa.to_natural(out);
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
