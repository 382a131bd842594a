// moe_topk (mixture-of-experts routing) against an independent double-precision reference:
// softmax / sigmoid scores, soft cap, correction bias (for the choice, or on the logits as
// the fused router adds it), grouped selection (max and top-2-sum group values), top-k with
// ties to the lowest id, renormalisation and scaling; logits in every dtype, the fused
// router's dot products, token ranges, output strides, the heap scratch path.
//
// The kernel computes in fp32, so two candidates a few ulps apart in the reference may come
// out in either order: each slot's chosen expert must have a reference selection value
// within kSelTol of the reference's value for that slot (the ids must match exactly where
// the values are exact ties, which the tie tests check), and the weights are compared with
// the reference scores of the experts the kernel chose.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "harness.h"
#include "reference.h"

using rvvk::DType;
using rvvk::MoeGroupScore;
using rvvk::MoeScoring;

namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kBF16, DType::kF16};
constexpr double kSelTol = 2e-5;
constexpr float kWeightSentinel = -77.0f;
constexpr std::int32_t kIdSentinel = -7;

struct Case {
  std::int64_t experts = 8, topk = 2, tokens = 3;
  DType dtype = DType::kF32;
  MoeScoring scoring = MoeScoring::kSoftmax;
  float softcap = 0.0f;
  bool bias = false, bias_on_logits = false;
  std::int64_t groups = 1, topk_group = 1;
  MoeGroupScore group_score = MoeGroupScore::kMax;
  bool renormalize = false;
  float scaling = 1.0f;
  // fused router: hidden_size > 0
  std::int64_t hidden_size = 0;
  DType router_dtype = DType::kF32;
  double lo = -4.0, hi = 4.0;  // logit (or hidden / weight) range
  int distinct = 0;            // > 0: logits drawn from this many values (ties)
};

// The reference: selection values and scores per expert, then the chosen ids in order.
struct Ref {
  std::vector<double> score, sel;  // sel: NaN for experts of groups not kept
  std::vector<std::int64_t> ids;
};

Ref reference(const Case& c, const std::vector<double>& logits, const std::vector<float>& bias) {
  const std::int64_t n = c.experts;
  Ref r;
  std::vector<double> x(logits);
  for (std::int64_t e = 0; e < n; ++e) {
    if (c.softcap > 0) x[e] = c.softcap * std::tanh(x[e] / c.softcap);
    if (c.bias && c.bias_on_logits) x[e] += bias[e];
  }
  r.score.resize(n);
  if (c.scoring == MoeScoring::kSoftmax) {
    const double m = *std::max_element(x.begin(), x.end());
    double sum = 0;
    for (std::int64_t e = 0; e < n; ++e) sum += std::exp(x[e] - m);
    for (std::int64_t e = 0; e < n; ++e) r.score[e] = std::exp(x[e] - m) / sum;
  } else {
    for (std::int64_t e = 0; e < n; ++e) r.score[e] = 1.0 / (1.0 + std::exp(-x[e]));
  }
  r.sel = r.score;
  if (c.bias && !c.bias_on_logits) {
    for (std::int64_t e = 0; e < n; ++e) r.sel[e] += bias[e];
  }
  // Highest value first, ties to the lowest index.
  const auto order = [](const std::vector<double>& v) {
    std::vector<std::int64_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](std::int64_t a, std::int64_t b) {
      if (std::isnan(v[b])) return !std::isnan(v[a]);
      return !std::isnan(v[a]) && v[a] > v[b];
    });
    return idx;
  };
  if (c.groups > 1) {
    const std::int64_t per = n / c.groups;
    std::vector<double> gval(c.groups);
    for (std::int64_t g = 0; g < c.groups; ++g) {
      std::vector<double> s(r.sel.begin() + g * per, r.sel.begin() + (g + 1) * per);
      std::sort(s.begin(), s.end(), std::greater<double>());
      gval[g] = c.group_score == MoeGroupScore::kMax || per == 1 ? s[0] : s[0] + s[1];
    }
    const std::vector<std::int64_t> go = order(gval);
    std::vector<bool> keep(c.groups, false);
    for (std::int64_t j = 0; j < c.topk_group; ++j) keep[go[j]] = true;
    for (std::int64_t e = 0; e < n; ++e) {
      if (!keep[e / per]) r.sel[e] = std::nan("");
    }
  }
  const std::vector<std::int64_t> eo = order(r.sel);
  r.ids.assign(eo.begin(), eo.begin() + c.topk);
  return r;
}

const char* describe(const Case& c) {
  static char buf[320];
  std::snprintf(buf, sizeof buf,
                "E=%lld topk=%lld T=%lld %s %s cap=%g bias=%d%s G=%lld/%lld %s renorm=%d "
                "scale=%g H=%lld w=%s distinct=%d",
                (long long)c.experts, (long long)c.topk, (long long)c.tokens, ref::name(c.dtype),
                c.scoring == MoeScoring::kSoftmax ? "softmax" : "sigmoid", c.softcap, c.bias,
                c.bias_on_logits ? "(logits)" : "", (long long)c.groups, (long long)c.topk_group,
                c.group_score == MoeGroupScore::kMax ? "max" : "top2", c.renormalize, c.scaling,
                (long long)c.hidden_size, ref::name(c.router_dtype), c.distinct);
  return buf;
}

// Runs one case (tokens split into two calls to check the token range) and compares every
// token with the reference. exact_ids: the ids must equal the reference's.
void run_case(rvvk_test::Context& ctx, const Case& c, std::uint64_t seed, bool exact_ids) {
  ref::Rng rng(seed);
  const std::int64_t n = c.experts, T = c.tokens, H = c.hidden_size;
  const std::int64_t rows = std::max<std::int64_t>(T, 1);
  const std::int64_t lstride = n + 3, wstride = c.topk + 2, istride = c.topk + 1;
  std::vector<double> distinct_vals;
  for (int i = 0; i < c.distinct; ++i) distinct_vals.push_back(rng.uniform(c.lo, c.hi));
  const auto draw = [&]() {
    return c.distinct > 0 ? distinct_vals[rng.next() % distinct_vals.size()]
                          : rng.uniform(c.lo, c.hi);
  };
  ref::Buffer logits(c.dtype, static_cast<std::size_t>(rows * lstride));
  ref::Buffer hidden(c.dtype, static_cast<std::size_t>(rows * (H + 1)));
  ref::Buffer router(c.router_dtype, static_cast<std::size_t>(n * (H + 2)));
  for (std::size_t i = 0; i < logits.size(); ++i) logits.set(i, draw());
  for (std::size_t i = 0; i < hidden.size(); ++i) hidden.set(i, rng.uniform(c.lo, c.hi));
  for (std::size_t i = 0; i < router.size(); ++i) router.set(i, rng.uniform(-0.5, 0.5));
  std::vector<float> bias(static_cast<std::size_t>(n));
  for (float& b : bias) {
    b = c.distinct > 0 ? 0.25f : static_cast<float>(rng.uniform(-0.5, 0.5));
  }
  std::vector<float> weights(static_cast<std::size_t>(rows * wstride), kWeightSentinel);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(rows * istride), kIdSentinel);

  rvvk::MoeTopkArgs a;
  a.experts = n;
  a.topk = c.topk;
  a.logits_dtype = c.dtype;
  a.logits = logits.data();
  a.logits_stride = lstride;
  if (H > 0) {
    a.hidden_dtype = c.dtype;
    a.hidden = hidden.data();
    a.hidden_stride = H + 1;
    a.hidden_size = H;
    a.router_dtype = c.router_dtype;
    a.router_weight = router.data();
    a.router_stride = H + 2;
  }
  a.scoring = c.scoring;
  a.softcap = c.softcap;
  a.bias = c.bias ? bias.data() : nullptr;
  a.bias_on_logits = c.bias_on_logits;
  a.num_groups = c.groups;
  a.topk_group = c.topk_group;
  a.group_score = c.group_score;
  a.renormalize = c.renormalize;
  a.scaling = c.scaling;
  a.topk_weights = weights.data();
  a.weights_stride = wstride;
  a.topk_ids = ids.data();
  a.ids_stride = istride;
  const std::int64_t split = T / 3;
  rvvk::moe_topk(a, 0, split);
  rvvk::moe_topk(a, split, T);
  rvvk::moe_topk(a, T, T);  // empty range: no effect

  int bad = 0;
  for (std::int64_t t = 0; t < rows && bad < 3; ++t) {
    const float* w = weights.data() + t * wstride;
    const std::int32_t* id = ids.data() + t * istride;
    if (t >= T) {  // tokens == 0: nothing written
      for (std::int64_t j = 0; j < wstride; ++j) {
        CHECK_MSG(w[j] == kWeightSentinel, "%s: wrote weights without tokens", describe(c));
      }
      for (std::int64_t j = 0; j < istride; ++j) {
        CHECK_MSG(id[j] == kIdSentinel, "%s: wrote ids without tokens", describe(c));
      }
      continue;
    }
    std::vector<double> lg(static_cast<std::size_t>(n));
    for (std::int64_t e = 0; e < n; ++e) {
      if (H == 0) {
        lg[e] = logits.get(static_cast<std::size_t>(t * lstride + e));
      } else {
        double s = 0;
        for (std::int64_t k = 0; k < H; ++k) {
          s += hidden.get(static_cast<std::size_t>(t * (H + 1) + k)) *
               router.get(static_cast<std::size_t>(e * (H + 2) + k));
        }
        lg[e] = s;
      }
    }
    const Ref r = reference(c, lg, bias);
    bool ok = true;
    std::vector<bool> seen(static_cast<std::size_t>(n), false);
    for (std::int64_t j = 0; j < c.topk; ++j) {
      const std::int32_t e = id[j];
      if (e < 0 || e >= n || seen[e]) {
        ok = false;
        CHECK_MSG(false, "%s token %lld slot %lld: id %d out of range or repeated", describe(c),
                  (long long)t, (long long)j, e);
        break;
      }
      seen[e] = true;
      if (exact_ids) {
        ok = ok && e == r.ids[j];
        CHECK_MSG(e == r.ids[j], "%s token %lld slot %lld: id %d, want %lld", describe(c),
                  (long long)t, (long long)j, e, (long long)r.ids[j]);
      } else {
        const double want = r.sel[r.ids[j]], got = r.sel[e];
        const bool close = !std::isnan(got) && std::fabs(got - want) <= kSelTol;
        ok = ok && close;
        CHECK_MSG(close, "%s token %lld slot %lld: id %d (value %.9g), want id %lld (%.9g)",
                  describe(c), (long long)t, (long long)j, e, got, (long long)r.ids[j], want);
      }
    }
    if (!ok) {
      ++bad;
      continue;
    }
    double sum = 0;
    for (std::int64_t j = 0; j < c.topk; ++j) sum += r.score[id[j]];
    for (std::int64_t j = 0; j < c.topk; ++j) {
      double want = r.score[id[j]];
      if (c.renormalize) want /= sum;
      want *= c.scaling;
      const double tol = 3e-5 * std::fabs(want) + 1e-12;
      if (std::fabs(w[j] - want) > tol) ++bad;
      CHECK_MSG(std::fabs(w[j] - want) <= tol, "%s token %lld slot %lld (id %d): weight %.9g, "
                "want %.9g", describe(c), (long long)t, (long long)j, id[j], w[j], want);
    }
    for (std::int64_t j = c.topk; j < wstride; ++j) {
      CHECK_MSG(w[j] == kWeightSentinel, "%s: wrote weight gap", describe(c));
    }
    for (std::int64_t j = c.topk; j < istride; ++j) {
      CHECK_MSG(id[j] == kIdSentinel, "%s: wrote id gap", describe(c));
    }
  }
}

}  // namespace

RVVK_TEST(moe_topk_matches_reference) {
  const std::int64_t kExperts[] = {1, 2, 8, 60, 64, 128, 256};
  const std::int64_t kTopk[] = {1, 2, 8};
  const std::int64_t kTokens[] = {0, 1, 3, 16, 300};
  std::uint64_t seed = 1;
  int k = 0;
  for (std::int64_t n : kExperts) {
    for (std::int64_t topk : kTopk) {
      if (topk > n) continue;
      for (DType dt : kTypes) {
        for (int variant = 0; variant < 4; ++variant, ++k) {
          Case c;
          c.experts = n;
          c.topk = topk;
          c.dtype = dt;
          c.tokens = kTokens[k % 5];
          c.scoring = variant % 2 == 0 ? MoeScoring::kSoftmax : MoeScoring::kSigmoid;
          c.bias = variant >= 2;
          c.renormalize = (k / 5) % 2 == 0;
          c.softcap = variant == 1 ? 3.0f : 0.0f;
          c.scaling = variant == 3 ? 2.5f : 1.0f;
          run_case(ctx, c, ++seed, false);
        }
      }
    }
  }
}

RVVK_TEST(moe_topk_groups) {
  struct G {
    std::int64_t experts, groups, topk_group, topk;
    MoeGroupScore gs;
    MoeScoring sc;
    bool bias;
  };
  const G kGroups[] = {
      {256, 8, 4, 8, MoeGroupScore::kTop2Sum, MoeScoring::kSigmoid, true},   // DeepSeek-V3
      {256, 8, 4, 8, MoeGroupScore::kMax, MoeScoring::kSoftmax, false},
      {64, 8, 3, 8, MoeGroupScore::kMax, MoeScoring::kSoftmax, false},       // V2-Lite-like
      {64, 8, 3, 2, MoeGroupScore::kTop2Sum, MoeScoring::kSigmoid, true},
      {60, 6, 2, 8, MoeGroupScore::kMax, MoeScoring::kSoftmax, true},
      {8, 8, 2, 2, MoeGroupScore::kTop2Sum, MoeScoring::kSigmoid, true},     // groups of one
      {128, 4, 1, 1, MoeGroupScore::kTop2Sum, MoeScoring::kSoftmax, false},
      {8, 2, 1, 4, MoeGroupScore::kMax, MoeScoring::kSigmoid, false},        // topk = group
  };
  std::uint64_t seed = 1000;
  for (const G& g : kGroups) {
    for (DType dt : kTypes) {
      for (std::int64_t tokens : {1, 16, 300}) {
        for (bool renorm : {false, true}) {
          Case c;
          c.experts = g.experts;
          c.groups = g.groups;
          c.topk_group = g.topk_group;
          c.topk = g.topk;
          c.group_score = g.gs;
          c.scoring = g.sc;
          c.bias = g.bias;
          c.dtype = dt;
          c.tokens = tokens;
          c.renormalize = renorm;
          c.scaling = renorm ? 2.5f : 1.0f;
          run_case(ctx, c, ++seed, false);
        }
      }
    }
  }
}

RVVK_TEST(moe_topk_ties_lowest_id) {
  // Logits from a handful of values: many exact ties, which go to the lowest expert id (and
  // the lowest group id); in bf16 too. The chosen ids must equal the reference's exactly.
  std::uint64_t seed = 2000;
  for (DType dt : kTypes) {
    for (int distinct : {1, 2, 3}) {
      for (std::int64_t n : {2, 8, 60, 256}) {
        for (std::int64_t topk : {1, 2, 8}) {
          if (topk > n) continue;
          Case c;
          c.experts = n;
          c.topk = topk;
          c.dtype = dt;
          c.tokens = 16;
          c.distinct = distinct;
          c.renormalize = true;
          run_case(ctx, c, ++seed, true);
          c.scoring = MoeScoring::kSigmoid;
          c.bias = true;  // the same bias for every expert: ties stay ties
          run_case(ctx, c, ++seed, true);
          if (n % 4 == 0 && topk <= n / 2) {
            c.groups = 4;
            c.topk_group = 2;
            c.group_score = distinct == 2 ? MoeGroupScore::kMax : MoeGroupScore::kTop2Sum;
            run_case(ctx, c, ++seed, true);
          }
        }
      }
    }
  }
}

RVVK_TEST(moe_topk_fused_router) {
  // Grok's fused router: logits = hidden @ router_weight^T (fp32 weight or the hidden
  // states' dtype), soft cap 30, bias on the logits, softmax weights.
  std::uint64_t seed = 3000;
  for (DType dt : kTypes) {
    for (DType wdt : {DType::kF32, dt}) {
      for (std::int64_t h : {1, 17, 64, 257}) {
        for (std::int64_t n : {8, 60}) {
          Case c;
          c.experts = n;
          c.topk = n == 8 ? 2 : 8;
          c.dtype = dt;
          c.router_dtype = wdt;
          c.hidden_size = h;
          c.tokens = h == 17 ? 300 : 5;
          c.lo = -2.0;
          c.hi = 2.0;
          c.softcap = 30.0f;
          c.bias = h == 64;
          c.bias_on_logits = true;
          run_case(ctx, c, ++seed, false);
        }
      }
    }
  }
}

RVVK_TEST(moe_topk_options) {
  std::uint64_t seed = 4000;
  // Heap scratch (more than kMoeStackExperts experts), a wide logit range (softmax
  // underflow, sigmoid saturation), soft cap on sigmoid, bias on logits without a router.
  for (DType dt : kTypes) {
    Case c;
    c.experts = 600;
    c.topk = 8;
    c.tokens = 3;
    c.dtype = dt;
    c.bias = true;
    c.renormalize = true;
    run_case(ctx, c, ++seed, false);
    c.groups = 10;
    c.topk_group = 3;
    c.group_score = MoeGroupScore::kTop2Sum;
    run_case(ctx, c, ++seed, false);
    Case w;
    w.experts = 64;
    w.topk = 8;
    w.tokens = 16;
    w.dtype = dt;
    w.lo = -60;
    w.hi = 60;
    run_case(ctx, w, ++seed, false);
    w.scoring = MoeScoring::kSigmoid;
    w.softcap = 20.0f;
    run_case(ctx, w, ++seed, false);
    w.bias = true;
    w.bias_on_logits = true;
    w.scoring = MoeScoring::kSoftmax;
    w.renormalize = true;
    run_case(ctx, w, ++seed, false);
  }
}
