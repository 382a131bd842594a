// Mixture-of-experts feed-forward: moe_plan's grouping, and the five moe_experts stages
// against a double-precision reference of the whole expert MLP (float and FP8 weights,
// with an error bound propagated through gate/up, activation, down and the weighted sum)
// and of the W8A8 / W4A8 arithmetic (exact integer sums per scale group; quantised
// activations, with a bound for quantisation steps that may flip). Shapes: experts
// {1, 3, 8, 60}, top-k {1, 2, 8}, tokens {0, 1, 3, 16, 37}, odd hidden and intermediate
// sizes, experts no token chose and experts every token chose, biases, a base term (the
// shared-expert form), every stage split into two task ranges as threads would; FP8 with
// block_k 128 and small ones that do not divide K, INT4 with group sizes dividing K
// (group == K included, odd when K is).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "harness.h"
#include "reference.h"

using rvvk::DType;

namespace {

struct Packed3 {
  std::vector<std::uint32_t> words;  // experts x stride bytes, 4-byte aligned
  std::int64_t stride = 0;           // bytes per expert
  rvvk::PackedWeightHeader header;
};

// Packs `experts` weights [n, k] (consecutive in w) one after another.
Packed3 pack3(DType dt, const ref::Buffer& w, std::int64_t experts, std::int64_t n,
              std::int64_t k) {
  Packed3 p;
  rvvk::pack_weight_layout(dt, n, k, &p.header);
  p.stride = (p.header.bytes + 3) / 4 * 4;
  p.words.assign(static_cast<std::size_t>(experts * p.stride / 4), 0xdeadbeefu);
  const std::int64_t elem = rvvk::packed_element_bytes(dt);
  for (std::int64_t e = 0; e < experts; ++e) {
    rvvk::pack_weight(p.header, w.bytes.data() + e * n * k * elem, k,
                      reinterpret_cast<unsigned char*>(p.words.data()) + e * p.stride);
  }
  return p;
}

// Packs `experts` int4 weights q [n, k] (one value per byte, consecutive in q).
Packed3 pack3_int4(const std::vector<std::uint8_t>& q, std::int64_t experts, std::int64_t n,
                   std::int64_t k, std::int64_t group) {
  Packed3 p;
  rvvk::PackedInt4Header h;
  rvvk::pack_int4_weight_layout(n, k, group, &h);
  p.stride = (h.bytes + 3) / 4 * 4;
  p.words.assign(static_cast<std::size_t>(experts * p.stride / 4), 0xdeadbeefu);
  for (std::int64_t e = 0; e < experts; ++e) {
    rvvk::pack_int4_weight(h, q.data() + e * n * k, k,
                           reinterpret_cast<unsigned char*>(p.words.data()) + e * p.stride);
  }
  return p;
}

double act_ref(rvvk::Activation act, double g) {
  switch (act) {
    case rvvk::Activation::kSilu:
      return g / (1 + std::exp(-g));
    case rvvk::Activation::kGelu:
      return 0.5 * g * (1 + std::erf(g / std::sqrt(2.0)));
    case rvvk::Activation::kGeluTanh:
      return 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
  }
  return 0;
}

// torch's per-row int8 quantisation as SGLang defines it (see test_linear.cpp).
void quantize_ref(const std::vector<double>& x, std::vector<int>& q, double& scale) {
  double amax = 0;
  for (double v : x) amax = std::max(amax, std::fabs(v));
  const float am = std::max(static_cast<float>(amax), 1e-10f);
  scale = am / 127.0f;
  const float inv = 127.0f * (1.0f / am);
  q.resize(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float y = static_cast<float>(x[i]) * inv;
    q[i] = static_cast<int>(std::max(-127.0, std::min(127.0, std::nearbyint(double{y}))));
  }
}

struct Case {
  std::int64_t experts, topk, tokens, hidden, inter;
  DType x_dt, w_dt;  // w_dt kI8: W8A8 (or W4A8 with groups); kFP8E4M3: FP8 W8A16
  rvvk::Activation act;
  bool bias, base, every_token_same;  // every_token_same: all tokens choose experts 0..topk-1
  // FP8: block_k of W13 (K = hidden) and W2 (K = inter); INT4 (w_dt kI8): group sizes.
  std::int64_t block13 = 0, block2 = 0;
  std::int64_t group13 = 0, group2 = 0;
};

// One quantised expert weight as the reference reads it: integer values (int8: q; int4:
// q - zero) and scale rows (int8: one per channel; int4: per group; FP8: per k block).
struct RefWeight {
  std::int64_t n = 0, k = 0, group = 0, rows = 1;  // rows = ceil(k / group) scale rows
  std::vector<int> wi;                              // [E, n, k] integer values
  std::vector<double> wd;                           // [E, n, k] float / FP8 values (scaled)
  std::vector<float> scales;                        // [E, rows, n]
  std::vector<std::uint8_t> zeros, q;               // int4: [E, rows, n], [E, n, k]
  double scale(std::int64_t e, std::int64_t j, std::int64_t kk) const {
    return scales[static_cast<std::size_t>((e * rows + kk / group) * n + j)];
  }
};

void run_case(rvvk_test::Context& ctx, ref::Rng& rng, const Case& c) {
  const std::int64_t E = c.experts, K = c.topk, T = c.tokens, H = c.hidden, I = c.inter;
  const std::int64_t A = T * K;
  const bool int4 = c.group13 > 0, fp8 = c.w_dt == DType::kFP8E4M3;
  const bool int8 = c.w_dt == DType::kI8;  // integer arithmetic: W8A8 or W4A8
  const std::int64_t xs = H + 3;  // strided rows
  ref::Buffer x(c.x_dt, std::max<std::int64_t>(1, T * xs)), base(c.x_dt, std::max<std::int64_t>(1, T * H));
  for (std::size_t i = 0; i < x.size(); ++i) x.set(i, rng.uniform(-1, 1));
  for (std::size_t i = 0; i < base.size(); ++i) base.set(i, rng.uniform(-1, 1));
  // Weights: float dtypes uniform; int8 integers in [-128, 127] with channel scales; int4
  // nibbles and zero points 0..16 with group scales; FP8 codes of magnitude <= 7.5 with
  // k-block scales.
  const DType wstore = int4 ? DType::kI8 : c.w_dt;
  ref::Buffer w13(wstore, E * 2 * I * H), w2(wstore, E * H * I);
  const auto make = [&](RefWeight& rw, ref::Buffer& buf, std::int64_t n, std::int64_t k,
                        std::int64_t group, std::int64_t block) {
    rw.n = n;
    rw.k = k;
    rw.group = int4 ? group : fp8 ? block : k;
    rw.rows = int8 || int4 || fp8 ? (k + rw.group - 1) / rw.group : 1;
    const std::size_t total = static_cast<std::size_t>(E * n * k);
    rw.scales.resize(static_cast<std::size_t>(E * rw.rows * n));
    rw.wi.assign(total, 0);
    rw.wd.assign(total, 0.0);
    const double inv_sqrt_k = 1 / std::sqrt(double(k));
    if (int4) {
      rw.q.resize(total);
      rw.zeros.resize(rw.scales.size());
      for (auto& v : rw.q) v = static_cast<std::uint8_t>(rng.next() % 16);
      for (auto& v : rw.zeros) v = static_cast<std::uint8_t>(rng.next() % 17);
      for (auto& v : rw.scales) v = static_cast<float>(rng.uniform(0.5, 1.5) / 8 * inv_sqrt_k);
      for (std::int64_t e = 0; e < E; ++e)
        for (std::int64_t j = 0; j < n; ++j)
          for (std::int64_t kk = 0; kk < k; ++kk) {
            const std::size_t i = static_cast<std::size_t>((e * n + j) * k + kk);
            rw.wi[i] = int{rw.q[i]} -
                       int{rw.zeros[static_cast<std::size_t>((e * rw.rows + kk / group) * n + j)]};
          }
    } else if (int8) {
      for (std::size_t i = 0; i < total; ++i) {
        rw.wi[i] = static_cast<int>(rng.next() % 256) - 128;
        buf.bytes[i] = static_cast<unsigned char>(static_cast<std::int8_t>(rw.wi[i]));
      }
      for (auto& v : rw.scales) v = static_cast<float>(rng.uniform(0.5, 1.5) / 127 * inv_sqrt_k);
    } else if (fp8) {
      // sign, exponent 0..9 (NaN codes excluded), any mantissa
      for (std::size_t i = 0; i < total; ++i) {
        buf.bytes[i] = static_cast<unsigned char>((rng.next() % 2) << 7 | (rng.next() % 10) << 3 |
                                                  rng.next() % 8);
      }
      for (auto& v : rw.scales) v = static_cast<float>(rng.uniform(0.5, 1.5) / 4 * inv_sqrt_k);
      for (std::int64_t e = 0; e < E; ++e)
        for (std::int64_t j = 0; j < n; ++j)
          for (std::int64_t kk = 0; kk < k; ++kk) {
            const std::size_t i = static_cast<std::size_t>((e * n + j) * k + kk);
            rw.wd[i] = buf.get(i) * rw.scale(e, j, kk);
          }
    } else {
      for (std::size_t i = 0; i < total; ++i) {
        buf.set(i, rng.uniform(-2, 2) * inv_sqrt_k);
        rw.wd[i] = buf.get(i);
      }
    }
  };
  RefWeight r13, r2;
  make(r13, w13, 2 * I, H, c.group13, c.block13);
  make(r2, w2, H, I, c.group2, c.block2);
  ref::Buffer b13(DType::kF32, E * 2 * I), b2(DType::kF32, E * H);
  for (std::size_t i = 0; i < b13.size(); ++i) b13.set(i, rng.uniform(-0.5, 0.5));
  for (std::size_t i = 0; i < b2.size(); ++i) b2.set(i, rng.uniform(-0.5, 0.5));
  // Routing: distinct experts per token (as top-k gives), random weights.
  std::vector<std::int32_t> ids(static_cast<std::size_t>(std::max<std::int64_t>(1, A)));
  std::vector<float> wts(ids.size());
  for (std::int64_t t = 0; t < T; ++t) {
    std::vector<std::int32_t> perm(static_cast<std::size_t>(E));
    for (std::int64_t e = 0; e < E; ++e) perm[e] = static_cast<std::int32_t>(e);
    if (!c.every_token_same) {
      for (std::int64_t e = E - 1; e > 0; --e) std::swap(perm[e], perm[rng.next() % (e + 1)]);
    }
    for (std::int64_t j = 0; j < K; ++j) {
      ids[t * K + j] = perm[j];
      wts[t * K + j] = static_cast<float>(rng.uniform(0, 1));
    }
  }
  // The plan and the workspaces.
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(E + 1), -5);
  std::vector<std::int32_t> sorted(ids.size(), -5), slot_of(ids.size(), -5), active(E, -5);
  rvvk::MoeExpertsArgs a;
  a.plan.offsets = offsets.data();
  a.plan.sorted_tokens = sorted.data();
  a.plan.slot_of = slot_of.data();
  a.plan.active = active.data();
  rvvk::moe_plan(ids.data(), T, K, E, &a.plan);
  // The plan: each expert's range holds exactly its pairs, in (token, choice) order.
  {
    std::int64_t n_active = 0;
    for (std::int64_t e = 0; e < E; ++e) {
      std::vector<std::int32_t> want;
      for (std::int64_t p = 0; p < A; ++p)
        if (ids[p] == e) want.push_back(static_cast<std::int32_t>(p));
      const bool ok_range = offsets[e + 1] - offsets[e] == static_cast<std::int64_t>(want.size());
      CHECK_MSG(ok_range, "plan: expert %lld has %lld slots, want %zu", (long long)e,
                (long long)(offsets[e + 1] - offsets[e]), want.size());
      if (!ok_range) return;
      for (std::size_t i = 0; i < want.size(); ++i) {
        const std::int64_t s = offsets[e] + static_cast<std::int64_t>(i);
        CHECK_MSG(slot_of[want[i]] == s && sorted[s] == want[i] / K,
                  "plan: pair %d of expert %lld at slot %d (token %d), want slot %lld",
                  want[i], (long long)e, slot_of[want[i]], sorted[s], (long long)s);
      }
      if (!want.empty()) {
        CHECK_MSG(n_active < a.plan.active_count && active[n_active] == e,
                  "plan: active list misses expert %lld", (long long)e);
        ++n_active;
      }
    }
    CHECK_MSG(offsets[0] == 0 && offsets[E] == A && n_active == a.plan.active_count,
              "plan: offsets[0]=%lld offsets[E]=%lld active %lld want %lld",
              (long long)offsets[0], (long long)offsets[E], (long long)a.plan.active_count,
              (long long)n_active);
  }
  Packed3 p13 = int4 ? pack3_int4(r13.q, E, 2 * I, H, c.group13) : pack3(wstore, w13, E, 2 * I, H);
  Packed3 p2 = int4 ? pack3_int4(r2.q, E, H, I, c.group2) : pack3(wstore, w2, E, H, I);
  const std::size_t rows = static_cast<std::size_t>(std::max<std::int64_t>(1, A));
  std::vector<std::uint32_t> xg(rows * static_cast<std::size_t>(H));  // room for any dtype
  std::vector<float> xg_s(rows), ic1(rows * 2 * I), ic2(rows * I), ic2_s(rows), y(rows * H);
  std::vector<std::int8_t> ic2_q(rows * I);
  const std::int64_t os = H + 2;
  ref::Buffer out(c.x_dt, std::max<std::int64_t>(1, T * os));
  for (std::size_t i = 0; i < out.size(); ++i) out.set(i, -77.0);
  a.tokens = T;
  a.topk = K;
  a.hidden = H;
  a.intermediate = I;
  a.act = c.act;
  a.x_dtype = c.x_dt;
  a.x = x.data();
  a.x_stride = xs;
  a.weights = wts.data();
  a.w13 = reinterpret_cast<const unsigned char*>(p13.words.data());
  a.w13_stride = p13.stride;
  a.w2 = reinterpret_cast<const unsigned char*>(p2.words.data());
  a.w2_stride = p2.stride;
  a.w13_scales = r13.scales.data();
  a.w2_scales = r2.scales.data();
  a.w13_block_k = c.block13;
  a.w2_block_k = c.block2;
  a.w13_zeros = int4 ? r13.zeros.data() : nullptr;
  a.w2_zeros = int4 ? r2.zeros.data() : nullptr;
  a.b13 = c.bias ? b13.data() : nullptr;
  a.b2 = c.bias ? b2.data() : nullptr;
  a.base = c.base ? base.data() : nullptr;
  a.base_stride = H;
  a.base_scale = 0.75f;
  a.out = out.data();
  a.out_stride = os;
  a.xg = xg.data();
  a.xg_scales = xg_s.data();
  a.ic1 = ic1.data();
  a.ic2 = ic2.data();
  a.ic2_q = ic2_q.data();
  a.ic2_scales = ic2_s.data();
  a.y = y.data();
  for (rvvk::MoeStage st : {rvvk::MoeStage::kGather, rvvk::MoeStage::kGateUp,
                            rvvk::MoeStage::kAct, rvvk::MoeStage::kDown,
                            rvvk::MoeStage::kCombine}) {
    const std::int64_t tasks = rvvk::moe_stage_tasks(a, st), cut = tasks / 3;
    rvvk::moe_experts(a, st, 0, cut);
    rvvk::moe_experts(a, st, cut, tasks);
  }
  // Reference, per token: the expert MLPs in double, with an error bound.
  const double u = 0x1p-24;
  int bad = 0;
  for (std::int64_t t = 0; t < T && bad < 3; ++t) {
    std::vector<double> want(static_cast<std::size_t>(H), 0.0), err(static_cast<std::size_t>(H), 0.0);
    if (c.base) {
      for (std::int64_t o = 0; o < H; ++o) {
        want[o] = 0.75 * base.get(t * H + o);
        err[o] = u * std::fabs(want[o]);
      }
    }
    std::vector<double> xr(static_cast<std::size_t>(H));
    for (std::int64_t k = 0; k < H; ++k) xr[k] = x.get(t * xs + k);
    std::vector<int> xq;
    double xscale = 1;
    if (int8) quantize_ref(xr, xq, xscale);
    for (std::int64_t j = 0; j < K; ++j) {
      const std::int64_t e = ids[t * K + j];
      const double wj = wts[t * K + j];
      // gate/up
      std::vector<double> gu(static_cast<std::size_t>(2 * I)), gu_err(gu.size());
      for (std::int64_t n = 0; n < 2 * I; ++n) {
        const std::int64_t row = (e * 2 * I + n) * H;
        const double bb = c.bias ? b13.get(e * 2 * I + n) : 0;
        if (int8) {
          // per scale group, in order: exact integer sum times row and group scales
          double v = bb, mag = std::fabs(bb);
          for (std::int64_t g0 = 0; g0 < H; g0 += r13.group) {
            double acc = 0;
            for (std::int64_t k = g0; k < std::min(H, g0 + r13.group); ++k)
              acc += double(xq[k]) * r13.wi[row + k];
            const double term = acc * xscale * r13.scale(e, n, g0);
            v += term;
            mag += std::fabs(term);
          }
          gu[n] = v;
          gu_err[n] = double(r13.rows + 3) * u * mag;
        } else {
          double acc = 0, mag = 0;
          for (std::int64_t k = 0; k < H; ++k) {
            const double p = xr[k] * r13.wd[row + k];
            acc += p;
            mag += std::fabs(p);
          }
          gu[n] = acc + bb;
          gu_err[n] = double(H + r13.rows + 2) * u * (mag + std::fabs(bb));
        }
      }
      // activation: act(g) * up; |act'| <= 1.13 for these three activations
      std::vector<double> h(static_cast<std::size_t>(I)), h_err(h.size());
      for (std::int64_t i = 0; i < I; ++i) {
        const double g = gu[i], up = gu[I + i], ag = act_ref(c.act, g);
        h[i] = ag * up;
        h_err[i] = 1.13 * std::fabs(up) * gu_err[i] + std::fabs(ag) * gu_err[I + i] +
                   gu_err[i] * gu_err[I + i] * 1.13 + 16 * u * std::fabs(h[i]) + 1e-30;
      }
      std::vector<int> hq;
      double hscale = 1;
      // int8: the steps by which the kernel's quantised h may differ from hq: one where
      // h / scale lies within its error (and the scale's, through the row's absmax) of a
      // rounding boundary, else none.
      std::vector<double> flip(static_cast<std::size_t>(I), 0.0);
      double rel = 0;
      if (int8) {
        quantize_ref(h, hq, hscale);
        double amax = 0, amax_err = 0;
        for (std::int64_t i = 0; i < I; ++i) {
          if (std::fabs(h[i]) > amax) {
            amax = std::fabs(h[i]);
            amax_err = h_err[i];
          }
        }
        rel = amax > 0 ? amax_err / amax + 4 * u : 0;
        for (std::int64_t i = 0; i < I; ++i) {
          const double v = h[i] / hscale, frac = v - std::floor(v);
          const double slack = h_err[i] / hscale + 127 * rel + 1e-6;
          flip[i] = std::fabs(frac - 0.5) <= slack ? 1.0 : 0.0;
        }
      }
      for (std::int64_t o = 0; o < H; ++o) {
        const std::int64_t row = (e * H + o) * I;
        const double bb = c.bias ? b2.get(e * H + o) : 0;
        double yv, ye;
        if (int8) {
          // prop: what the flippable steps of hq can change, through each group's scale
          double mag = 0, prop = 0;
          yv = bb;
          for (std::int64_t g0 = 0; g0 < I; g0 += r2.group) {
            double acc = 0, fl = 0;
            for (std::int64_t i = g0; i < std::min(I, g0 + r2.group); ++i) {
              acc += double(hq[i]) * r2.wi[row + i];
              fl += std::fabs(double(r2.wi[row + i])) * flip[i];
            }
            const double sc = hscale * r2.scale(e, o, g0);
            yv += acc * sc;
            mag += std::fabs(acc * sc);
            prop += fl * sc;
          }
          ye = prop + double(r2.rows + 3) * u * (mag + std::fabs(bb)) +
               mag * rel;  // the row scale, from the absmax of h
        } else {
          double acc = 0, mag = 0, prop = 0;
          for (std::int64_t i = 0; i < I; ++i) {
            const double wv = r2.wd[row + i];
            acc += h[i] * wv;
            mag += std::fabs(h[i] * wv);
            prop += std::fabs(wv) * h_err[i];
          }
          yv = acc + bb;
          ye = prop + double(I + r2.rows + 2) * u * (mag + std::fabs(bb));
        }
        want[o] += wj * yv;
        err[o] += std::fabs(wj) * ye + (K + 1) * u * std::fabs(wj * yv);
      }
    }
    for (std::int64_t o = 0; o < H; ++o) {
      const double got = out.get(t * os + o);
      const double tol = err[o] + ref::ulp(c.x_dt, want[o]) + 1e-6 * (int8 ? 1 : 0);
      if (!(std::fabs(got - want[o]) <= tol) && bad++ < 3) {
        CHECK_MSG(false,
                  "E=%lld topk=%lld T=%lld H=%lld I=%lld x=%s w=%s%s act=%d bias=%d base=%d "
                  "[%lld,%lld]: got %.9g want %.9g (tol %.3g)",
                  (long long)E, (long long)K, (long long)T, (long long)H, (long long)I,
                  ref::name(c.x_dt), ref::name(c.w_dt), int4 ? "(int4)" : "",
                  static_cast<int>(c.act), c.bias,
                  c.base, (long long)t, (long long)o, got, want[o], tol);
      }
    }
    for (std::int64_t o = H; o < os; ++o)
      CHECK_MSG(out.get(t * os + o) == -77.0, "wrote past hidden at token %lld", (long long)t);
  }
}

}  // namespace

RVVK_TEST(moe_experts_float_matches_reference) {
  ref::Rng rng(71);
  const rvvk::Activation acts[] = {rvvk::Activation::kSilu, rvvk::Activation::kGelu,
                                   rvvk::Activation::kGeluTanh};
  const DType dts[][2] = {{DType::kF32, DType::kF32},
                          {DType::kBF16, DType::kBF16},
                          {DType::kF16, DType::kF16},
                          {DType::kF32, DType::kBF16},
                          {DType::kBF16, DType::kF32}};
  int n = 0;
  for (std::int64_t E : {1, 3, 8, 60}) {
    for (std::int64_t K : {1, 2, 8}) {
      if (K > E) continue;
      for (std::int64_t T : {0, 1, 3, 16, 37}) {
        const std::int64_t H = n % 3 == 0 ? 33 : n % 3 == 1 ? 16 : 64;
        const std::int64_t I = n % 4 == 0 ? 17 : n % 4 == 1 ? 8 : n % 4 == 2 ? 48 : 1;
        const auto& dt = dts[n % 5];
        run_case(ctx, rng,
                 {E, K, T, H, I, dt[0], dt[1], acts[n % 3], n % 2 == 0, n % 4 == 3,
                  n % 7 == 5});
        ++n;
      }
    }
  }
}

RVVK_TEST(moe_experts_w8a8_matches_reference) {
  ref::Rng rng(73);
  int n = 0;
  for (std::int64_t E : {1, 3, 8, 60}) {
    for (std::int64_t K : {1, 2, 8}) {
      if (K > E) continue;
      for (std::int64_t T : {0, 1, 3, 16}) {
        const std::int64_t H = n % 2 == 0 ? 33 : 64, I = n % 3 == 0 ? 17 : 40;
        const DType xdt = n % 3 == 0 ? DType::kF32 : n % 3 == 1 ? DType::kBF16 : DType::kF16;
        run_case(ctx, rng,
                 {E, K, T, H, I, xdt, DType::kI8, rvvk::Activation::kSilu, n % 2 == 1,
                  n % 5 == 2, n % 4 == 1});
        ++n;
      }
    }
  }
}

RVVK_TEST(moe_experts_fp8_matches_reference) {
  ref::Rng rng(79);
  int n = 0;
  for (std::int64_t E : {1, 3, 8}) {
    for (std::int64_t K : {1, 2}) {
      if (K > E) continue;
      for (std::int64_t T : {0, 1, 3, 16}) {
        // odd sizes; block_k 128 (one block), 4 (K not a multiple when odd) and 5
        const std::int64_t H = n % 2 == 0 ? 33 : 20, I = n % 3 == 0 ? 17 : n % 3 == 1 ? 40 : 9;
        const std::int64_t blocks[] = {128, 4, 5};
        const DType xdt = n % 3 == 0 ? DType::kBF16 : n % 3 == 1 ? DType::kF32 : DType::kF16;
        Case c{E, K, T, H, I, xdt, DType::kFP8E4M3, rvvk::Activation::kSilu, n % 2 == 1,
               n % 5 == 2, n % 4 == 1};
        c.block13 = blocks[n % 3];
        c.block2 = blocks[(n + 1) % 3];
        run_case(ctx, rng, c);
        ++n;
      }
    }
  }
}

RVVK_TEST(moe_experts_int4_w4a8_matches_reference) {
  ref::Rng rng(83);
  // (K, group size) pairs: groups dividing K, group == K (odd K included)
  const std::int64_t hidden[][2] = {{32, 8}, {33, 33}, {48, 16}, {32, 32}};
  const std::int64_t inter[][2] = {{40, 8}, {17, 17}, {24, 6}, {40, 20}, {8, 8}};
  int n = 0;
  for (std::int64_t E : {1, 3, 8}) {
    for (std::int64_t K : {1, 2}) {
      if (K > E) continue;
      for (std::int64_t T : {0, 1, 3, 16}) {
        const auto& h = hidden[n % 4];
        const auto& i = inter[n % 5];
        const DType xdt = n % 3 == 0 ? DType::kBF16 : n % 3 == 1 ? DType::kF32 : DType::kF16;
        Case c{E, K, T, h[0], i[0], xdt, DType::kI8, rvvk::Activation::kSilu, n % 2 == 1,
               n % 5 == 2, n % 4 == 1};
        c.group13 = h[1];
        c.group2 = i[1];
        run_case(ctx, rng, c);
        ++n;
      }
    }
  }
}
