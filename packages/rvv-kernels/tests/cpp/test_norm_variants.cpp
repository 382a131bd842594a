// The norm variants behind rvv-ops' Gemma 3 / Gemma 4 / l2 / gated / per-head QK norms and
// fused add + LayerNorm: rmsnorm without a weight (weight == nullptr), with a non-unit weight
// offset, rmsnorm_gated and fused_add_layernorm, against double-precision references over every vector tail, strided rows,
// length-1 and empty rows, every dtype.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "harness.h"
#include "lengths.h"
#include "reference.h"
#include "rows.h"

using rvvk::DType;
using rvvk_test::fill;

namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// One ulp of the dtype (four for fp32: the kernel sums in another order) plus `rel` of
// `scale`, the magnitude of the terms the result is made of.
bool close(DType dt, double got, double want, double scale, double rel) {
  const double tol = (dt == DType::kF32 ? 4 : 1) * ref::ulp(dt, want) + rel * scale;
  return std::fabs(got - want) <= tol;
}

struct Layout {
  std::int64_t rows, cols, in_stride, out_stride, gate_stride;
};

std::vector<Layout> layouts(unsigned vlen_bits) {
  std::vector<Layout> out;
  for (std::int64_t c : rvvk_test::row_lengths(vlen_bits, 2, {1, 2, 3, 7, 17, 255, 1000}))
    out.push_back({1, c, c, c, c});
  for (std::int64_t c : {1, 17, 129, 1000}) out.push_back({4, c, c + 3, c + 1, c + 5});
  out.push_back({3, 64, 64, 64, 64});
  out.push_back({0, 64, 64, 64, 64});  // no rows
  out.push_back({3, 0, 0, 0, 0});      // empty rows
  return out;
}

std::size_t rows_of(const Layout& c) {
  return static_cast<std::size_t>(std::max<std::int64_t>(c.rows, 1));
}

double inv_rms(const ref::Buffer& in, std::int64_t base, std::int64_t cols, double eps) {
  double ss = 0;
  for (std::int64_t j = 0; j < cols; ++j) ss += in.get(base + j) * in.get(base + j);
  return 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
}

}  // namespace

RVVK_TEST(rmsnorm_without_weight) {
  // weight == nullptr: out = x / sqrt(mean(x^2) + eps) (sgl-kernel's l2norm_cpu and
  // Gemma 4's with_scale=False).
  ref::Rng rng(41);
  for (DType dt : kTypes) {
    for (const Layout& c : layouts(ctx.vlen_bits)) {
      ref::Buffer in(dt, rows_of(c) * std::max<std::int64_t>(c.in_stride, 1));
      ref::Buffer out(dt, rows_of(c) * std::max<std::int64_t>(c.out_stride, 1));
      fill(in, rng, -3.0, 3.0);
      rvvk_test::fill_sentinel(out);
      const float eps = c.cols % 2 ? 1e-6f : 0.25f;  // a large eps must show
      rvvk::rmsnorm(dt, out.data(), c.out_stride, in.data(), c.in_stride, nullptr, c.rows, c.cols,
                    eps, 0.0f);
      if (c.cols == 0) {
        CHECK_MSG(out.get(0) == rvvk_test::kSentinel, "%s: empty rows wrote", ref::name(dt));
        continue;
      }
      for (std::int64_t r = 0; r < c.rows; ++r) {
        const double inv = inv_rms(in, r * c.in_stride, c.cols, eps);
        rvvk_test::check_gap(ctx, dt, r, c.cols, c.out_stride, {&out});
        for (std::int64_t j = 0; j < c.cols; ++j) {
          const double x = in.get(r * c.in_stride + j);
          const double want = ref::round_to(dt, x * inv);
          const double got = out.get(r * c.out_stride + j);
          CHECK_MSG(close(dt, got, want, std::fabs(x * inv), 2e-6),
                    "%s rows=%lld cols=%lld [%lld,%lld]: got %.9g want %.9g", ref::name(dt),
                    (long long)c.rows, (long long)c.cols, (long long)r, (long long)j, got, want);
        }
      }
    }
  }
}

RVVK_TEST(rmsnorm_weight_offset_any) {
  // Gemma 4's scale_shift: any offset, e.g. 0.5 or -1 (weight + offset may cross zero).
  ref::Rng rng(42);
  for (const float offset : {0.5f, -1.0f, 2.0f}) {
    for (DType dt : kTypes) {
      for (const Layout& c : layouts(ctx.vlen_bits)) {
        if (c.cols == 0) continue;
        ref::Buffer in(dt, rows_of(c) * c.in_stride), out(dt, rows_of(c) * c.out_stride);
        ref::Buffer w(dt, static_cast<std::size_t>(c.cols));
        fill(in, rng, -3.0, 3.0);
        fill(w, rng, -1.0, 1.0);
        rvvk_test::fill_sentinel(out);
        rvvk::rmsnorm(dt, out.data(), c.out_stride, in.data(), c.in_stride, w.data(), c.rows,
                      c.cols, 1e-6f, offset);
        for (std::int64_t r = 0; r < c.rows; ++r) {
          const double inv = inv_rms(in, r * c.in_stride, c.cols, 1e-6);
          rvvk_test::check_gap(ctx, dt, r, c.cols, c.out_stride, {&out});
          for (std::int64_t j = 0; j < c.cols; ++j) {
            const double x = in.get(r * c.in_stride + j);
            const double wj = w.get(static_cast<std::size_t>(j)) + offset;
            const double want = ref::round_to(dt, x * inv * wj);
            const double got = out.get(r * c.out_stride + j);
            // w + offset is formed in fp32: its rounding counts relative to |w| + |offset|.
            const double scale = std::fabs(x * inv) * (std::fabs(wj) + std::fabs(offset) + 1);
            CHECK_MSG(close(dt, got, want, scale, 2e-6),
                      "%s offset=%g rows=%lld cols=%lld [%lld,%lld]: got %.9g want %.9g",
                      ref::name(dt), offset, (long long)c.rows, (long long)c.cols, (long long)r,
                      (long long)j, got, want);
          }
        }
      }
    }
  }
}

RVVK_TEST(rmsnorm_gated_matches_reference) {
  // out = rmsnorm(x) * w * silu(g), silu(g) = g / (1 + exp(-g)); exp is an fp32
  // approximation (a few ulp), hence the 1e-5 relative slack.
  ref::Rng rng(43);
  for (DType dt : kTypes) {
    for (const Layout& c : layouts(ctx.vlen_bits)) {
      const std::size_t n = rows_of(c);
      ref::Buffer in(dt, n * std::max<std::int64_t>(c.in_stride, 1));
      ref::Buffer gate(dt, n * std::max<std::int64_t>(c.gate_stride, 1));
      ref::Buffer out(dt, n * std::max<std::int64_t>(c.out_stride, 1));
      ref::Buffer w(dt, static_cast<std::size_t>(std::max<std::int64_t>(c.cols, 1)));
      fill(in, rng, -3.0, 3.0);
      fill(gate, rng, -12.0, 12.0);  // both saturations of the sigmoid
      fill(w, rng, 0.5, 1.5);
      rvvk_test::fill_sentinel(out);
      const float eps = c.cols % 2 ? 1e-6f : 0.25f;
      rvvk::rmsnorm_gated(dt, out.data(), c.out_stride, in.data(), c.in_stride, w.data(),
                          gate.data(), c.gate_stride, c.rows, c.cols, eps);
      if (c.cols == 0) {
        CHECK_MSG(out.get(0) == rvvk_test::kSentinel, "%s: empty rows wrote", ref::name(dt));
        continue;
      }
      for (std::int64_t r = 0; r < c.rows; ++r) {
        const double inv = inv_rms(in, r * c.in_stride, c.cols, eps);
        rvvk_test::check_gap(ctx, dt, r, c.cols, c.out_stride, {&out});
        for (std::int64_t j = 0; j < c.cols; ++j) {
          const double x = in.get(r * c.in_stride + j);
          const double g = gate.get(r * c.gate_stride + j);
          const double silu = g / (1.0 + std::exp(-g));
          const double term = x * inv * w.get(static_cast<std::size_t>(j));
          const double want = ref::round_to(dt, term * silu);
          const double got = out.get(r * c.out_stride + j);
          CHECK_MSG(close(dt, got, want, std::fabs(term) * (std::fabs(silu) + 1e-3), 1e-5),
                    "%s rows=%lld cols=%lld [%lld,%lld]: got %.9g want %.9g (g %.6g)",
                    ref::name(dt), (long long)c.rows, (long long)c.cols, (long long)r,
                    (long long)j, got, want, g);
        }
      }
    }
  }
}

RVVK_TEST(rmsnorm_gated_in_place) {
  // out == input is allowed (each strip is read before it is written).
  for (DType dt : kTypes) {
    const std::int64_t cols = 37;
    ref::Buffer x(dt, cols), g(dt, cols), w(dt, cols);
    for (std::int64_t j = 0; j < cols; ++j) {
      x.set(j, 0.25 * (j % 7) - 0.5);
      g.set(j, 0.5 * (j % 5) - 1.0);
      w.set(j, 1.0 + 0.125 * (j % 3));
    }
    const ref::Buffer orig = x;
    rvvk::rmsnorm_gated(dt, x.data(), cols, x.data(), cols, w.data(), g.data(), cols, 1, cols,
                        1e-6f);
    const double inv = inv_rms(orig, 0, cols, 1e-6);
    for (std::int64_t j = 0; j < cols; ++j) {
      const double gj = g.get(j);
      const double term = orig.get(j) * inv * w.get(j);
      const double want = ref::round_to(dt, term * gj / (1.0 + std::exp(-gj)));
      CHECK_MSG(close(dt, x.get(j), want, std::fabs(term) + 1e-3, 1e-5),
                "%s [%lld]: got %.9g want %.9g", ref::name(dt), (long long)j, x.get(j), want);
    }
  }
}

RVVK_TEST(fused_add_layernorm_matches_reference) {
  // s = x + r in fp32: r = dtype(s) exactly; out = layernorm of the unrounded sum.
  ref::Rng rng(44);
  const std::pair<DType, DType> types[] = {{DType::kF32, DType::kF32},
                                           {DType::kBF16, DType::kF32},
                                           {DType::kBF16, DType::kBF16},
                                           {DType::kF16, DType::kF32},
                                           {DType::kF16, DType::kF16}};
  int n = 0;
  for (const auto& [dt, pdt] : types) {
    for (const Layout& c : layouts(ctx.vlen_bits)) {
      const bool with_bias = (n++ % 2) == 0;
      const std::size_t rows = rows_of(c);
      const std::int64_t in_stride = std::max<std::int64_t>(c.in_stride, 1);
      const std::int64_t res_stride = std::max<std::int64_t>(c.gate_stride, 1);
      const std::int64_t out_stride = std::max<std::int64_t>(c.out_stride, 1);
      ref::Buffer in(dt, rows * in_stride), res(dt, rows * res_stride);
      ref::Buffer out(dt, rows * out_stride);
      const std::size_t cols = static_cast<std::size_t>(std::max<std::int64_t>(c.cols, 1));
      ref::Buffer w(pdt, cols), b(pdt, cols);
      fill(in, rng, -2.5, 3.5);  // a non-zero mean
      fill(res, rng, -1.0, 2.0);
      fill(w, rng, 0.5, 1.5);
      fill(b, rng, -0.5, 0.5);
      rvvk_test::fill_sentinel(out);
      for (std::int64_t r = 0; r < c.rows; ++r)
        for (std::int64_t j = c.cols; j < res_stride; ++j)
          res.set(static_cast<std::size_t>(r * res_stride + j), rvvk_test::kSentinel);
      const ref::Buffer res0 = res;
      const float eps = c.cols % 2 ? 1e-5f : 0.5f;
      rvvk::fused_add_layernorm(dt, out.data(), c.out_stride, in.data(), c.in_stride, res.data(),
                                c.gate_stride, pdt, w.data(), with_bias ? b.data() : nullptr,
                                c.rows, c.cols, eps);
      if (c.cols == 0) {
        CHECK_MSG(out.get(0) == rvvk_test::kSentinel && res.get(0) == res0.get(0),
                  "%s: empty rows wrote", ref::name(dt));
        continue;
      }
      for (std::int64_t r = 0; r < c.rows; ++r) {
        std::vector<double> s(static_cast<std::size_t>(c.cols));
        double mean = 0, var = 0;
        for (std::int64_t j = 0; j < c.cols; ++j) {
          const float sj = static_cast<float>(in.get(r * c.in_stride + j)) +
                           static_cast<float>(res0.get(r * res_stride + j));
          s[static_cast<std::size_t>(j)] = sj;
          mean += sj;
        }
        mean /= c.cols;
        for (const double v : s) var += (v - mean) * (v - mean);
        var /= c.cols;
        const double rstd = 1.0 / std::sqrt(var + eps);
        rvvk_test::check_gap(ctx, dt, r, c.cols, out_stride, {&out});
        rvvk_test::check_gap(ctx, dt, r, c.cols, res_stride, {&res});
        for (std::int64_t j = 0; j < c.cols; ++j) {
          const std::size_t jj = static_cast<std::size_t>(j);
          const double got_r = res.get(r * res_stride + j);
          CHECK_MSG(got_r == ref::round_to(dt, s[jj]),
                    "%s cols=%lld [%lld,%lld]: residual %.9g want %.9g", ref::name(dt),
                    (long long)c.cols, (long long)r, (long long)j, got_r,
                    ref::round_to(dt, s[jj]));
          const double term = (s[jj] - mean) * rstd * w.get(jj);
          const double bias = with_bias ? b.get(jj) : 0.0;
          const double want = ref::round_to(dt, term + bias);
          const double scale = (std::fabs(s[jj]) + std::fabs(mean)) * rstd * std::fabs(w.get(jj));
          const double got = out.get(r * c.out_stride + j);
          CHECK_MSG(close(dt, got, want, scale + std::fabs(bias), 2e-6),
                    "%s params %s bias=%d rows=%lld cols=%lld [%lld,%lld]: got %.9g want %.9g",
                    ref::name(dt), ref::name(pdt), with_bias, (long long)c.rows,
                    (long long)c.cols, (long long)r, (long long)j, got, want);
        }
      }
    }
  }
}
