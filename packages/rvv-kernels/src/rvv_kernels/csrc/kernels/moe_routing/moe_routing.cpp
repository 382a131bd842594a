// Mixture-of-experts routing (MoeTopkArgs): per token, scores from the gating logits
// (softmax or sigmoid, optional soft cap and correction bias), optional grouped selection,
// then the top-k experts by repeated first-maximum search, highest first.
//
// Scores and the fused router's dot products go through the vector layer (F32<4>); the
// search step is moe_argmax (moe_routing_isa.h: vfredmax + vmfeq + vfirst on RVV, a scalar
// loop elsewhere). Experts already taken, and those of groups not kept, are marked NaN in
// the selection values, which the search skips: topk searches of `experts` elements, no
// sort. Scratch is 4 * experts floats per call (stack up to kMoeStackExperts experts).
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "moe_routing_isa.h"
#include "rvvk/detail/dispatch.h"
#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

using F = vec::F32<4>;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

template <class T>
void load_row(const T* row, float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    F::store(x + i, F::load(row + i, vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
}

// x[e] = sum_k h[k] * w[e * w_stride + k], fp32, for e < experts.
template <class TH, class TW>
void router_logits(const TH* h, const TW* w, std::int64_t w_stride, std::int64_t experts,
                   std::int64_t k, float* x) {
  const std::size_t vlmax = F::vlmax();
  for (std::int64_t e = 0; e < experts; ++e) {
    const TW* we = w + e * w_stride;
    typename F::V acc = F::splat(0.0f, vlmax);
    for (std::int64_t i = 0; i < k;) {
      const std::size_t vl = F::setvl(static_cast<std::size_t>(k - i));
      acc = F::fmacc_tu(acc, F::load(h + i, vl), F::load(we + i, vl), vl);
      i += static_cast<std::int64_t>(vl);
    }
    x[e] = F::reduce_sum(acc, vlmax);
  }
}

// The fp32 logits of token t into x[0, experts).
void token_logits(const MoeTopkArgs& a, std::int64_t t, float* x) {
  if (a.router_weight == nullptr) {
    detail::visit_activation(a.logits_dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      load_row(static_cast<const T*>(a.logits) + t * a.logits_stride, x, a.experts);
    });
    return;
  }
  detail::visit_activation(a.hidden_dtype, [&](auto htag) {
    using TH = typename decltype(htag)::type;
    detail::visit_activation(a.router_dtype, [&](auto wtag) {
      using TW = typename decltype(wtag)::type;
      router_logits(static_cast<const TH*>(a.hidden) + t * a.hidden_stride,
                    static_cast<const TW*>(a.router_weight), a.router_stride, a.experts,
                    a.hidden_size, x);
    });
  });
}

// Logits x[0, n) -> scores, in place: soft cap, bias on logits, softmax or sigmoid.
void scores_in_place(const MoeTopkArgs& a, float* x, std::int64_t n) {
  const bool cap = a.softcap > 0.0f;
  const float* bias = a.bias_on_logits ? a.bias : nullptr;
  const bool softmax = a.scoring == MoeScoring::kSoftmax;
  const std::size_t vlmax = F::vlmax();
  float m = -std::numeric_limits<float>::infinity();
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    typename F::V v = F::load(x + i, vl);
    if (cap) {
      v = F::mul(F::tanh(F::div(v, F::splat(a.softcap, vl), vl), vl), a.softcap, vl);
    }
    if (bias != nullptr) v = F::add(v, F::load(bias + i, vl), vl);
    if (softmax) {
      F::store(x + i, v, vl);
      const float r = F::reduce_max(v, vl);
      if (r > m) m = r;
    } else {
      // sigmoid(v) = 1 / (1 + exp(-v))
      const typename F::V e = F::exp(F::mul(v, -1.0f, vl), vl);
      F::store(x + i, F::div(F::splat(1.0f, vl), F::add(e, 1.0f, vl), vl), vl);
    }
    i += static_cast<std::int64_t>(vl);
  }
  if (!softmax) return;
  typename F::V vsum = F::splat(0.0f, vlmax);
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    const typename F::V e = F::exp(F::add(F::load(x + i, vl), -m, vl), vl);
    F::store(x + i, e, vl);
    vsum = F::fmacc_tu(vsum, e, F::splat(1.0f, vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
  const float sum = F::reduce_sum(vsum, vlmax);
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    F::store(x + i, F::div(F::load(x + i, vl), F::splat(sum, vl), vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
}

// The lowest index in [0, n) for which taken(i) is false (the fallback when every value
// left is NaN); 0 if there is none.
template <class Taken>
std::int64_t first_free(std::int64_t n, const Taken& taken) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (!taken(i)) return i;
  }
  return 0;
}

// Keeps the topk_group best groups of sel (num_groups groups of consecutive experts): the
// others' experts become NaN. gval and gkeep: num_groups floats each.
void select_groups(const MoeTopkArgs& a, float* sel, float* gval, float* gkeep) {
  const std::int64_t groups = a.num_groups, per = a.experts / a.num_groups;
  for (std::int64_t g = 0; g < groups; ++g) {
    float* s = sel + g * per;
    gkeep[g] = 0.0f;
    const std::int64_t i1 = moe_argmax(s, per);
    if (i1 < 0) {
      gval[g] = kNaN;
      continue;
    }
    float v = s[i1];
    if (a.group_score == MoeGroupScore::kTop2Sum && per > 1) {
      s[i1] = kNaN;
      const std::int64_t i2 = moe_argmax(s, per);
      s[i1] = v;
      if (i2 >= 0) v += s[i2];
    }
    gval[g] = v;
  }
  for (std::int64_t j = 0; j < a.topk_group && j < groups; ++j) {
    std::int64_t g = moe_argmax(gval, groups);
    if (g < 0) {
      g = first_free(groups, [&](std::int64_t i) { return gkeep[i] != 0.0f; });
    }
    gval[g] = kNaN;
    gkeep[g] = 1.0f;
  }
  for (std::int64_t g = 0; g < groups; ++g) {
    if (gkeep[g] != 0.0f) continue;
    for (std::int64_t e = 0; e < per; ++e) sel[g * per + e] = kNaN;
  }
}

void route_token(const MoeTopkArgs& a, std::int64_t t, float* score, float* sel, float* gval,
                 float* gkeep) {
  const std::int64_t n = a.experts;
  token_logits(a, t, score);
  scores_in_place(a, score, n);
  const float* bias = a.bias_on_logits ? nullptr : a.bias;
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    typename F::V v = F::load(score + i, vl);
    if (bias != nullptr) v = F::add(v, F::load(bias + i, vl), vl);
    F::store(sel + i, v, vl);
    i += static_cast<std::int64_t>(vl);
  }
  if (a.num_groups > 1) select_groups(a, sel, gval, gkeep);

  float* w = a.topk_weights + t * a.weights_stride;
  std::int32_t* ids = a.topk_ids + t * a.ids_stride;
  for (std::int64_t j = 0; j < a.topk; ++j) {
    std::int64_t e = moe_argmax(sel, n);
    if (e < 0) {
      e = first_free(n, [&](std::int64_t i) {
        for (std::int64_t q = 0; q < j; ++q) {
          if (ids[q] == i) return true;
        }
        return false;
      });
    }
    sel[e] = kNaN;
    ids[j] = static_cast<std::int32_t>(e);
    w[j] = score[e];
  }
  if (a.renormalize) {
    float sum = 0.0f;
    for (std::int64_t j = 0; j < a.topk; ++j) sum += w[j];
    if (sum != 0.0f) {
      for (std::int64_t j = 0; j < a.topk; ++j) w[j] /= sum;
    }
  }
  if (a.scaling != 1.0f) {
    for (std::int64_t j = 0; j < a.topk; ++j) w[j] *= a.scaling;
  }
}

}  // namespace

void moe_topk(const MoeTopkArgs& args, std::int64_t token_begin, std::int64_t token_end) {
  if (token_begin >= token_end || args.experts <= 0 || args.topk <= 0) return;
  const std::int64_t n = args.experts;
  float stack_buf[4 * kMoeStackExperts];
  std::vector<float> heap_buf;
  float* buf = stack_buf;
  if (n > kMoeStackExperts) {
    heap_buf.resize(static_cast<std::size_t>(4 * n));
    buf = heap_buf.data();
  }
  for (std::int64_t t = token_begin; t < token_end; ++t) {
    route_token(args, t, buf, buf + n, buf + 2 * n, buf + 3 * n);
  }
}

}  // namespace rvvk::RVVK_NS
