// layernorm and Gemma's RMSNorm (rmsnorm / fused_add_rmsnorm with weight offset 1) against
// double-precision references, over lengths with every vector tail, strided rows, fp32 or
// activation-dtype parameters, with and without bias, every dtype.
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

// got vs want = ref::round_to(dt, exact): one unit in the last place of the dtype (the
// kernel's fp32 result may round the other way), plus the fp32 error of the statistics,
// relative to `scale` (the magnitude of the terms the output is made of).
bool close(DType dt, double got, double want, double scale) {
  const double tol = (dt == DType::kF32 ? 4 : 1) * ref::ulp(dt, want) + 2e-6 * scale;
  return std::fabs(got - want) <= tol;
}

struct Layout {
  std::int64_t rows, cols, in_stride, out_stride;
};

std::vector<Layout> layouts(unsigned vlen_bits) {
  std::vector<Layout> out;
  for (std::int64_t c : rvvk_test::row_lengths(vlen_bits)) out.push_back({1, c, c, c});
  for (std::int64_t c : {1, 17, 129, 1000}) out.push_back({4, c, c + 3, c + 1});
  out.push_back({0, 64, 64, 64});
  return out;
}

}  // namespace

RVVK_TEST(layernorm_matches_reference) {
  ref::Rng rng(11);
  int n = 0;
  // (activations, parameters): SGLang's LayerNorm keeps fp32 parameters by default.
  const std::pair<DType, DType> types[] = {{DType::kF32, DType::kF32},
                                           {DType::kBF16, DType::kF32},
                                           {DType::kBF16, DType::kBF16},
                                           {DType::kF16, DType::kF32},
                                           {DType::kF16, DType::kF16}};
  for (const auto& [dt, pdt] : types) {
    for (const Layout& c : layouts(ctx.vlen_bits)) {
      const bool with_bias = (n++ % 2) == 0;
      const std::size_t rows = static_cast<std::size_t>(std::max<std::int64_t>(c.rows, 1));
      ref::Buffer in(dt, rows * c.in_stride), out(dt, rows * c.out_stride);
      const std::size_t cols = static_cast<std::size_t>(c.cols);
      ref::Buffer w(pdt, cols), b(pdt, cols);
      fill(in, rng, -2.5, 3.5);  // a non-zero mean
      fill(w, rng, 0.5, 1.5);
      fill(b, rng, -0.5, 0.5);
      rvvk_test::fill_sentinel(out);
      const float eps = c.cols % 2 ? 1e-5f : 0.5f;  // a large eps must show in the result
      rvvk::layernorm(dt, out.data(), c.out_stride, in.data(), c.in_stride, pdt, w.data(),
                      with_bias ? b.data() : nullptr, c.rows, c.cols, eps);
      for (std::int64_t r = 0; r < c.rows; ++r) {
        double mean = 0, var = 0;
        for (std::int64_t j = 0; j < c.cols; ++j) mean += in.get(r * c.in_stride + j);
        mean /= c.cols;
        for (std::int64_t j = 0; j < c.cols; ++j) {
          const double d = in.get(r * c.in_stride + j) - mean;
          var += d * d;
        }
        var /= c.cols;
        const double rstd = 1.0 / std::sqrt(var + eps);
        rvvk_test::check_gap(ctx, dt, r, c.cols, c.out_stride, {&out});
        for (std::int64_t j = 0; j < c.cols; ++j) {
          const std::size_t o = static_cast<std::size_t>(r * c.out_stride + j);
          const std::size_t jj = static_cast<std::size_t>(j);
          const double xj = in.get(r * c.in_stride + j);
          const double term = (xj - mean) * rstd * w.get(jj);
          const double bias = with_bias ? b.get(jj) : 0.0;
          const double want = ref::round_to(dt, term + bias);
          // x - mean cancels: the fp32 error of the mean counts relative to |x| + |mean|.
          const double scale = (std::fabs(xj) + std::fabs(mean)) * rstd * std::fabs(w.get(jj));
          CHECK_MSG(close(dt, out.get(o), want, scale + std::fabs(bias)),
                    "%s params %s bias=%d rows=%lld cols=%lld [%lld,%lld]: got %.9g want %.9g",
                    ref::name(dt), ref::name(pdt), with_bias, (long long)c.rows,
                    (long long)c.cols, (long long)r, (long long)j, out.get(o), want);
        }
      }
    }
  }
}

RVVK_TEST(layernorm_in_place_and_constant_rows) {
  // out == in is allowed. A constant row has variance 0: the result is the bias.
  for (DType dt : kTypes) {
    const std::int64_t cols = 300;
    ref::Buffer x(dt, 2 * cols), w(dt, cols), b(dt, cols);
    for (std::int64_t j = 0; j < cols; ++j) {
      x.set(j, (j % 3) - 1.0 + 0.25);
      x.set(cols + j, 1.5);
      w.set(j, 2.0);
      b.set(j, 0.125 * (j % 4));
    }
    const ref::Buffer orig = x;
    rvvk::layernorm(dt, x.data(), cols, x.data(), cols, dt, w.data(), b.data(), 2, cols, 1e-5f);
    double mean = 0, var = 0;
    for (std::int64_t j = 0; j < cols; ++j) mean += orig.get(j);
    mean /= cols;
    for (std::int64_t j = 0; j < cols; ++j) var += (orig.get(j) - mean) * (orig.get(j) - mean);
    const double rstd = 1.0 / std::sqrt(var / cols + 1e-5);
    for (std::int64_t j = 0; j < cols; ++j) {
      const double term = (orig.get(j) - mean) * rstd * 2.0;
      const double want = ref::round_to(dt, term + b.get(j));
      const double scale = (std::fabs(orig.get(j)) + std::fabs(mean)) * rstd * 2.0 + 1;
      CHECK_MSG(close(dt, x.get(j), want, scale), "%s [%lld]: got %.9g want %.9g",
                ref::name(dt), (long long)j, x.get(j), want);
      CHECK_MSG(x.get(cols + j) == b.get(j), "%s constant row [%lld]: got %.9g want the bias %.9g",
                ref::name(dt), (long long)j, x.get(cols + j), b.get(j));
    }
  }
}

RVVK_TEST(gemma_rmsnorm_weight_offset) {
  // Gemma scales by (1 + weight), weights near 0: rmsnorm and fused_add_rmsnorm with
  // weight_offset 1 (the offset path of the kernels the plain norms use).
  ref::Rng rng(12);
  for (DType dt : kTypes) {
    for (const Layout& c : layouts(ctx.vlen_bits)) {
      const std::size_t rows = static_cast<std::size_t>(std::max<std::int64_t>(c.rows, 1));
      ref::Buffer in(dt, rows * c.in_stride), out(dt, rows * c.out_stride);
      ref::Buffer res(dt, rows * c.in_stride), w(dt, static_cast<std::size_t>(c.cols));
      fill(in, rng, -3.0, 3.0);
      fill(res, rng, -3.0, 3.0);
      fill(w, rng, -0.5, 0.5);
      rvvk_test::fill_sentinel(out);
      const float eps = 1e-6f;
      rvvk::rmsnorm(dt, out.data(), c.out_stride, in.data(), c.in_stride, w.data(), c.rows,
                    c.cols, eps, 1.0f);
      ref::Buffer x = in, res_new = res;
      rvvk::fused_add_rmsnorm(dt, x.data(), c.in_stride, res_new.data(), c.in_stride, w.data(),
                              c.rows, c.cols, eps, 1.0f);
      for (std::int64_t r = 0; r < c.rows; ++r) {
        // rmsnorm of `in`; fused: of the residual sum (one fp32 addition rounded to dtype)
        double ss = 0, ss_sum = 0;
        std::vector<double> sum(static_cast<std::size_t>(c.cols));
        for (std::int64_t j = 0; j < c.cols; ++j) {
          const std::size_t i = static_cast<std::size_t>(r * c.in_stride + j);
          const double s = ref::round_to(dt, static_cast<float>(in.get(i)) +
                                                 static_cast<float>(res.get(i)));
          sum[static_cast<std::size_t>(j)] = s;
          ss += in.get(i) * in.get(i);
          ss_sum += s * s;
        }
        const double inv = 1.0 / std::sqrt(ss / c.cols + eps);
        const double inv_sum = 1.0 / std::sqrt(ss_sum / c.cols + eps);
        rvvk_test::check_gap(ctx, dt, r, c.cols, c.out_stride, {&out});
        for (std::int64_t j = 0; j < c.cols; ++j) {
          const std::size_t o = static_cast<std::size_t>(r * c.out_stride + j);
          const std::size_t i = static_cast<std::size_t>(r * c.in_stride + j);
          const double scale = 1.0 + w.get(static_cast<std::size_t>(j));
          const double term = in.get(i) * inv * scale;
          CHECK_MSG(close(dt, out.get(o), ref::round_to(dt, term), std::fabs(term)),
                    "%s rmsnorm rows=%lld cols=%lld [%lld,%lld]: got %.9g want %.9g",
                    ref::name(dt), (long long)c.rows, (long long)c.cols, (long long)r,
                    (long long)j, out.get(o), ref::round_to(dt, term));
          const double s = sum[static_cast<std::size_t>(j)];
          CHECK_MSG(res_new.get(i) == s, "%s fused cols=%lld [%lld,%lld]: residual %.9g want %.9g",
                    ref::name(dt), (long long)c.cols, (long long)r, (long long)j, res_new.get(i),
                    s);
          const double fterm = s * inv_sum * scale;
          CHECK_MSG(close(dt, x.get(i), ref::round_to(dt, fterm), std::fabs(fterm)),
                    "%s fused rows=%lld cols=%lld [%lld,%lld]: got %.9g want %.9g",
                    ref::name(dt), (long long)c.rows, (long long)c.cols, (long long)r,
                    (long long)j, x.get(i), ref::round_to(dt, fterm));
        }
      }
    }
  }
}
