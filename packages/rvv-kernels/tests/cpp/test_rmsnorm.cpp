// rmsnorm and fused_add_rmsnorm against a double-precision reference, over sizes
// that hit every tail around multiples of the vector length, strided rows, and
// every dtype.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "harness.h"
#include "lengths.h"
#include "reference.h"
#include "rows.h"

using rvvk::DType;
using rvvk_test::fill;
using rvvk_test::kSentinel;

namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// Output tolerance: the kernel accumulates in fp32 in another order than the
// reference, then rounds to the dtype; allow one unit in the last place of the
// dtype plus fp32 accumulation error.
bool close(DType dt, double got, double want) {
  const double tol = (dt == DType::kF32 ? 4 : 1) * ref::ulp(dt, want) + 1e-6 * std::fabs(want);
  return std::fabs(got - want) <= tol;
}

struct Case {
  std::int64_t rows, cols, stride;
};

// Row lengths: small ones, tails around 1..4 x the LMUL-4 vector length of
// every VLEN (lengths.h), model-sized rows; then strided rows and no rows.
std::vector<Case> cases(unsigned vlen_bits) {
  std::vector<Case> out;
  for (std::int64_t c :
       rvvk_test::row_lengths(vlen_bits, 4, {1, 2, 3, 5, 7, 16, 31, 100, 1536, 4095, 8192}))
    out.push_back({1, c, c});
  for (std::int64_t c : {1, 17, 129, 1000}) out.push_back({5, c, c + 3});  // strided rows
  out.push_back({3, 64, 64});
  out.push_back({0, 64, 64});  // no rows
  return out;
}

// fn(dt, c, total) for every dtype and case; total: elements of c's buffers.
template <class Fn>
void each_case(unsigned vlen_bits, Fn fn) {
  for (DType dt : kTypes)
    for (const Case& c : cases(vlen_bits))
      fn(dt, c, static_cast<std::size_t>(std::max<std::int64_t>(c.rows, 1) * c.stride));
}

}  // namespace

RVVK_TEST(rmsnorm_matches_reference) {
  ref::Rng rng(1);
  each_case(ctx.vlen_bits, [&](DType dt, const Case& c, std::size_t total) {
    ref::Buffer in(dt, total), out(dt, total), w(dt, static_cast<std::size_t>(c.cols));
    fill(in, rng, -3.0, 3.0);
    fill(w, rng, 0.5, 1.5);
    rvvk_test::fill_sentinel(out);
    const float eps = c.cols % 2 ? 1e-6f : 0.25f;  // a large eps must show in the result
    rvvk::rmsnorm(dt, out.data(), c.stride, in.data(), c.stride, w.data(), c.rows, c.cols, eps,
                  0.0f);
    for (std::int64_t r = 0; r < c.rows; ++r) {
      double ss = 0;
      for (std::int64_t j = 0; j < c.cols; ++j) ss += in.get(r * c.stride + j) * in.get(r * c.stride + j);
      const double inv = 1.0 / std::sqrt(ss / c.cols + eps);
      rvvk_test::check_gap(ctx, dt, r, c.cols, c.stride, {&out});
      for (std::int64_t j = 0; j < c.cols; ++j) {
        const std::size_t i = static_cast<std::size_t>(r * c.stride + j);
        const double want = ref::round_to(dt, in.get(i) * inv * w.get(static_cast<std::size_t>(j)));
        CHECK_MSG(close(dt, out.get(i), want), "%s rows=%lld cols=%lld [%lld,%lld]: got %.9g want %.9g",
                  ref::name(dt), (long long)c.rows, (long long)c.cols, (long long)r, (long long)j,
                  out.get(i), want);
      }
    }
  });
}

RVVK_TEST(rmsnorm_in_place_and_large_values) {
  // out == in is allowed; values near the fp16 range must not overflow the
  // fp32 accumulator's result.
  for (DType dt : kTypes) {
    const std::int64_t cols = 300;
    ref::Buffer x(dt, cols), w(dt, cols), orig(dt, cols);
    for (std::int64_t j = 0; j < cols; ++j) {
      x.set(j, (j % 2 ? -1 : 1) * (1000.0 + j));
      w.set(j, 1.0);
    }
    orig = x;
    rvvk::rmsnorm(dt, x.data(), cols, x.data(), cols, w.data(), 1, cols, 1e-5f, 0.0f);
    double ss = 0;
    for (std::int64_t j = 0; j < cols; ++j) ss += orig.get(j) * orig.get(j);
    const double inv = 1.0 / std::sqrt(ss / cols + 1e-5);
    for (std::int64_t j = 0; j < cols; ++j) {
      const double want = ref::round_to(dt, orig.get(j) * inv);
      CHECK_MSG(close(dt, x.get(j), want), "%s [%lld]: got %.9g want %.9g", ref::name(dt),
                (long long)j, x.get(j), want);
    }
  }
}

// As sgl-kernel's CPU op (csrc/cpu/norm.cpp): residual is the fp32 sum of the inputs rounded
// once to the dtype, and input the rmsnorm of the unrounded fp32 sum, also with Gemma's
// weight offset of 1.
RVVK_TEST(fused_add_rmsnorm_matches_reference) {
  ref::Rng rng(2);
  for (const float w_offset : {0.0f, 1.0f}) {
    each_case(ctx.vlen_bits, [&](DType dt, const Case& c, std::size_t total) {
      ref::Buffer x(dt, total), res(dt, total), w(dt, static_cast<std::size_t>(c.cols));
      fill(x, rng, -2.0, 2.0);
      fill(res, rng, -2.0, 2.0);
      fill(w, rng, w_offset == 0.0f ? 0.5 : -0.5, w_offset == 0.0f ? 1.5 : 0.5);
      for (std::int64_t r = 0; r < c.rows; ++r)
        for (std::int64_t j = c.cols; j < c.stride; ++j) {
          x.set(static_cast<std::size_t>(r * c.stride + j), kSentinel);
          res.set(static_cast<std::size_t>(r * c.stride + j), kSentinel);
        }
      const ref::Buffer x0 = x, res0 = res;
      const float eps = 1e-5f;
      rvvk::fused_add_rmsnorm(dt, x.data(), c.stride, res.data(), c.stride, w.data(), c.rows,
                              c.cols, eps, w_offset);
      for (std::int64_t r = 0; r < c.rows; ++r) {
        double ss = 0;
        std::vector<double> sum(static_cast<std::size_t>(c.cols));
        for (std::int64_t j = 0; j < c.cols; ++j) {
          const std::size_t i = static_cast<std::size_t>(r * c.stride + j);
          // fp32 addition of the two inputs (exact in double for 16-bit inputs), not rounded.
          const float s = static_cast<float>(x0.get(i)) + static_cast<float>(res0.get(i));
          sum[static_cast<std::size_t>(j)] = s;
          ss += static_cast<double>(s) * s;
        }
        const double inv = 1.0 / std::sqrt(ss / c.cols + eps);
        rvvk_test::check_gap(ctx, dt, r, c.cols, c.stride, {&x, &res});
        for (std::int64_t j = 0; j < c.cols; ++j) {
          const std::size_t i = static_cast<std::size_t>(r * c.stride + j);
          const double s = sum[static_cast<std::size_t>(j)];
          CHECK_MSG(res.get(i) == ref::round_to(dt, s),
                    "%s rows=%lld cols=%lld [%lld,%lld]: residual %.9g want %.9g",
                    ref::name(dt), (long long)c.rows, (long long)c.cols, (long long)r,
                    (long long)j, res.get(i), ref::round_to(dt, s));
          const double wj = w.get(static_cast<std::size_t>(j)) + w_offset;
          const double want = ref::round_to(dt, s * inv * wj);
          CHECK_MSG(close(dt, x.get(i), want),
                    "%s offset=%g rows=%lld cols=%lld [%lld,%lld]: got %.9g want %.9g",
                    ref::name(dt), w_offset, (long long)c.rows, (long long)c.cols,
                    (long long)r, (long long)j, x.get(i), want);
        }
      }
    });
  }
}

RVVK_TEST(variant_api) {
  CHECK_MSG(!rvvk::set_variant("no-such-variant"), "set_variant accepted an unknown name");
  CHECK_MSG(std::string(rvvk::active_variant()) == ctx.variant, "active variant %s, want %s",
            rvvk::active_variant(), ctx.variant.c_str());
  CHECK_MSG(rvvk::variant_supported("portable"), "portable must always be supported");
  const rvvk::CpuInfo cpu = rvvk::cpu_info();
  CHECK_MSG(cpu.has_v == (cpu.vlen_bits > 0), "has_v=%d but vlen=%u", cpu.has_v, cpu.vlen_bits);
}
