// causal_conv1d and gated_delta_rule (Gated DeltaNet's short convolution and linear
// attention) against double-precision references, over channel counts and head sizes that
// hit the tails around the vector length, length-1 and empty sequences.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "harness.h"
#include "lengths.h"
#include "reference.h"

namespace {

std::vector<float> random(ref::Rng& rng, std::size_t n, double lo, double hi) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.uniform(lo, hi));
  return v;
}

bool close(double got, double want, double scale) {
  return std::fabs(got - want) <= 2e-5 * scale + 1e-6;
}

}  // namespace

RVVK_TEST(causal_conv1d_matches_reference) {
  ref::Rng rng(3);
  std::vector<std::int64_t> channel_counts =
      rvvk_test::row_lengths(ctx.vlen_bits, 2, {1, 3, 16, 33, 100});
  for (std::int64_t channels : channel_counts)
    for (std::int64_t width : {1, 2, 4})
      for (std::int64_t tokens : {0, 1, 2, 5, 9})
        for (int flags = 0; flags < 4; ++flags) {
          const bool silu = flags & 1, has_bias = flags & 2;
          const std::int64_t x_stride = channels + 3;  // padded rows
          const auto x = random(rng, static_cast<std::size_t>(std::max<std::int64_t>(tokens, 1) * x_stride), -2, 2);
          const auto hist = random(rng, static_cast<std::size_t>((width - 1) * channels + 1), -2, 2);
          const auto wt = random(rng, static_cast<std::size_t>(width * channels), -1, 1);
          const auto bias = random(rng, static_cast<std::size_t>(channels), -1, 1);
          const std::int64_t out_stride = channels + 1;
          std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(tokens, 1) * out_stride), 1234.5f);
          // the channels in two blocks, as rvv-ops splits them over threads
          const std::int64_t half = channels / 2;
          for (auto [c0, n] : {std::pair<std::int64_t, std::int64_t>{0, half}, {half, channels - half}})
            rvvk::causal_conv1d(x.data() + c0, x_stride, hist.data() + c0, wt.data() + c0, channels,
                                has_bias ? bias.data() + c0 : nullptr, out.data() + c0, out_stride,
                                tokens, n, width, silu);
          for (std::int64_t t = 0; t < tokens; ++t)
            for (std::int64_t c = 0; c < out_stride; ++c) {
              const double got = out[static_cast<std::size_t>(t * out_stride + c)];
              if (c >= channels) {
                CHECK_MSG(got == 1234.5, "causal_conv1d wrote the row gap at t=%lld c=%lld",
                          (long long)t, (long long)c);
                continue;
              }
              double acc = has_bias ? bias[static_cast<std::size_t>(c)] : 0.0, mag = std::fabs(acc);
              for (std::int64_t w = 0; w < width; ++w) {
                const std::int64_t r = t + w - (width - 1);  // < 0: history row width - 1 + r
                const double xv = r < 0 ? hist[static_cast<std::size_t>((width - 1 + r) * channels + c)]
                                        : x[static_cast<std::size_t>(r * x_stride + c)];
                acc += wt[static_cast<std::size_t>(w * channels + c)] * xv;
                mag += std::fabs(wt[static_cast<std::size_t>(w * channels + c)] * xv);
              }
              const double want = silu ? acc / (1.0 + std::exp(-acc)) : acc;
              CHECK_MSG(close(got, want, mag), "causal_conv1d C=%lld W=%lld T=%lld silu=%d bias=%d [%lld,%lld]: got %.9g want %.9g",
                        (long long)channels, (long long)width, (long long)tokens, (int)silu,
                        (int)has_bias, (long long)t, (long long)c, got, want);
            }
          // rows past `tokens` untouched
          if (tokens == 0)
            CHECK_MSG(out[0] == 1234.5f, "causal_conv1d wrote with no tokens");
        }
}

RVVK_TEST(gated_delta_rule_matches_reference) {
  ref::Rng rng(5);
  std::vector<std::int64_t> k_dims = rvvk_test::row_lengths(ctx.vlen_bits, 2, {1, 5, 16, 31, 64});
  for (std::int64_t k_dim : k_dims)
    for (std::int64_t v_dim : {1, 3, 8})
      for (std::int64_t tokens : {0, 1, 2, 7}) {
        const std::int64_t qk_stride = k_dim + 2, v_stride = v_dim + 1, out_stride = v_dim + 2;
        const std::int64_t state_stride = k_dim + 1;
        const std::size_t nt = static_cast<std::size_t>(std::max<std::int64_t>(tokens, 1));
        // unit-norm-ish keys, as Gated DeltaNet l2-normalises them
        auto q = random(rng, nt * qk_stride, -1, 1), k = random(rng, nt * qk_stride, -1, 1);
        for (std::size_t t = 0; t < nt; ++t) {
          double n = 0;
          for (std::int64_t j = 0; j < k_dim; ++j) n += double(k[t * qk_stride + j]) * k[t * qk_stride + j];
          for (std::int64_t j = 0; j < k_dim; ++j) k[t * qk_stride + j] = float(k[t * qk_stride + j] / std::sqrt(n + 1e-6));
        }
        const auto v = random(rng, nt * v_stride, -2, 2);
        const auto g = random(rng, nt, -2, 0);
        const auto beta = random(rng, nt, 0, 1);
        auto state = random(rng, static_cast<std::size_t>(v_dim * state_stride), -1, 1);
        std::vector<double> S(state.begin(), state.end());
        std::vector<float> out(nt * out_stride, 1234.5f);
        const float scale = static_cast<float>(1.0 / std::sqrt(double(k_dim)));
        rvvk::gated_delta_rule(state.data(), state_stride, q.data(), qk_stride, k.data(),
                               qk_stride, v.data(), v_stride, g.data(), beta.data(), out.data(),
                               out_stride, tokens, k_dim, v_dim, scale);
        // reference: S = exp(g) S; u = S k; S += beta (v - u) k^T; o = scale S q
        for (std::int64_t t = 0; t < tokens; ++t) {
          const double decay = std::exp(double(g[t]));
          for (std::int64_t i = 0; i < v_dim; ++i) {
            double u = 0;
            for (std::int64_t j = 0; j < k_dim; ++j) {
              S[i * state_stride + j] *= decay;
              u += S[i * state_stride + j] * k[t * qk_stride + j];
            }
            const double d = beta[t] * (v[t * v_stride + i] - u);
            double o = 0, mag = 0;
            for (std::int64_t j = 0; j < k_dim; ++j) {
              S[i * state_stride + j] += d * k[t * qk_stride + j];
              o += S[i * state_stride + j] * q[t * qk_stride + j];
              mag += std::fabs(S[i * state_stride + j] * q[t * qk_stride + j]);
            }
            const double want = scale * o;
            const double got = out[t * out_stride + i];
            CHECK_MSG(close(got, want, scale * mag + 1),
                      "gated_delta_rule K=%lld V=%lld T=%lld out[%lld,%lld]: got %.9g want %.9g",
                      (long long)k_dim, (long long)v_dim, (long long)tokens, (long long)t,
                      (long long)i, got, want);
          }
          for (std::int64_t i = v_dim; i < out_stride; ++i)
            CHECK_MSG(out[t * out_stride + i] == 1234.5f, "gated_delta_rule wrote the out gap");
        }
        for (std::int64_t i = 0; i < v_dim; ++i)
          for (std::int64_t j = 0; j < state_stride; ++j) {
            const double got = state[i * state_stride + j], want = S[i * state_stride + j];
            CHECK_MSG(std::fabs(got - want) <= 2e-5 * (1 + std::fabs(want)) * (1 + tokens),
                      "gated_delta_rule K=%lld V=%lld T=%lld state[%lld,%lld]: got %.9g want %.9g",
                      (long long)k_dim, (long long)v_dim, (long long)tokens, (long long)i,
                      (long long)j, got, want);
          }
      }
}
