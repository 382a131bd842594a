// act_and_mul (SiLU, erf-GELU, tanh-GELU times "up") against double-precision references
// (std::erf / std::tanh / std::exp in double): lengths with every vector tail, strided
// rows, every dtype, and a dense fp32 sweep that bounds the vector exp / erf errors.
#include <cmath>
#include <cstdint>
#include <vector>

#include "harness.h"
#include "lengths.h"
#include "reference.h"

using rvvk::Activation;
using rvvk::DType;

namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kBF16, DType::kF16};
constexpr Activation kActs[] = {Activation::kSilu, Activation::kGelu, Activation::kGeluTanh};
constexpr double kSentinel = -77.0;

const char* name(Activation a) {
  return a == Activation::kSilu ? "silu" : a == Activation::kGelu ? "gelu" : "gelu_tanh";
}

double act_ref(Activation a, double x) {
  switch (a) {
    case Activation::kSilu:
      return x / (1.0 + std::exp(-x));
    case Activation::kGelu:
      return 0.5 * x * std::erfc(-x / std::sqrt(2.0));  // 1 + erf(z) = erfc(-z), no cancellation
    case Activation::kGeluTanh: {
      const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
      return x / (1.0 + std::exp(-2.0 * u));  // = x / 2 * (1 + tanh(u))
    }
  }
  return 0;
}

// Tolerance of an fp32 result. SiLU and tanh-GELU are computed without cancellation: a few
// fp32 ulps (exp is within 2e-7, then an add, a division and the product with `up`).
// erf-GELU is x / 2 * (1 + erf(x / sqrt 2)) like torch's, whose 1 + erf cancels for x < 0:
// an absolute error of erf's (< 2e-7) times |x| / 2. tanh-GELU's exp argument grows like
// x^3, so its relative error grows with it: bounded by 3e-7 * |argument|.
double f32_tol(Activation a, double x, double up, double want) {
  double tol = 6 * ref::ulp(DType::kF32, want);
  if (a == Activation::kGelu) tol += 0.5 * std::fabs(x * up) * 2e-7;
  if (a == Activation::kGeluTanh) {
    const double arg = 2 * std::sqrt(2.0 / M_PI) * (std::fabs(x) + 0.044715 * std::fabs(x * x * x));
    tol += 3e-7 * arg * std::fabs(want);
  }
  return tol;
}

bool close(Activation a, DType dt, double x, double up, double got, double exact) {
  const double want = ref::round_to(dt, exact);
  // The fp32 result may sit on the other side of a bf16/fp16 rounding boundary: 1 ulp.
  const double tol = dt == DType::kF32 ? f32_tol(a, x, up, want)
                                       : ref::ulp(dt, want) + f32_tol(a, x, up, exact);
  return std::fabs(got - want) <= tol;
}

struct Layout {
  std::int64_t rows, cols, in_stride, out_stride;
};

}  // namespace

RVVK_TEST(act_and_mul_matches_reference) {
  ref::Rng rng(21);
  std::vector<Layout> layouts;
  for (std::int64_t c : rvvk_test::row_lengths(ctx.vlen_bits, 3)) {
    layouts.push_back({1, c, 2 * c, c});
  }
  for (std::int64_t c : {1, 17, 129}) layouts.push_back({3, c, 2 * c + 5, c + 2});
  layouts.push_back({0, 64, 128, 64});
  for (Activation act : kActs) {
    for (DType dt : kTypes) {
      for (const Layout& c : layouts) {
        const std::size_t rows = static_cast<std::size_t>(c.rows > 0 ? c.rows : 1);
        ref::Buffer in(dt, rows * c.in_stride), out(dt, rows * c.out_stride);
        for (std::size_t i = 0; i < in.size(); ++i) {
          // gate in [-8, 8] (both tails of the activations), up in [-2, 2]
          in.set(i, (i % c.in_stride) < static_cast<std::size_t>(c.cols) ? rng.uniform(-8, 8)
                                                                         : rng.uniform(-2, 2));
        }
        for (std::size_t i = 0; i < out.size(); ++i) out.set(i, kSentinel);
        rvvk::act_and_mul(act, dt, out.data(), c.out_stride, in.data(), c.in_stride, c.rows,
                          c.cols);
        for (std::int64_t r = 0; r < c.rows; ++r) {
          for (std::int64_t j = 0; j < c.out_stride; ++j) {
            const std::size_t o = static_cast<std::size_t>(r * c.out_stride + j);
            if (j >= c.cols) {
              CHECK_MSG(out.get(o) == kSentinel, "%s %s cols=%lld: wrote the gap at %zu",
                        name(act), ref::name(dt), (long long)c.cols, o);
              continue;
            }
            const double x = in.get(static_cast<std::size_t>(r * c.in_stride + j));
            const double up = in.get(static_cast<std::size_t>(r * c.in_stride + c.cols + j));
            const double exact = act_ref(act, x) * up;
            CHECK_MSG(close(act, dt, x, up, out.get(o), exact),
                      "%s %s rows=%lld cols=%lld [%lld,%lld] x=%.9g up=%.9g: got %.9g want %.9g",
                      name(act), ref::name(dt), (long long)c.rows, (long long)c.cols,
                      (long long)r, (long long)j, x, up, out.get(o), ref::round_to(dt, exact));
          }
        }
      }
    }
  }
}

RVVK_TEST(activation_fp32_sweep) {
  // x from -12 to 12 in steps of 2^-9 plus tiny and huge magnitudes, up = 1: the output is
  // the activation itself, so this bounds the vector exp and erf over their whole range.
  std::vector<double> xs;
  for (int i = -12 * 512; i <= 12 * 512; ++i) xs.push_back(i / 512.0 + 1.0 / 4096);
  for (double m : {1e-30, 1e-8, 1e-3, 30.0, 100.0, 1e4, 1e10}) {
    xs.push_back(m);
    xs.push_back(-m);
  }
  const std::int64_t n = static_cast<std::int64_t>(xs.size());
  ref::Buffer in(DType::kF32, 2 * xs.size()), out(DType::kF32, xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    in.set(i, xs[i]);
    in.set(xs.size() + i, 1.0);
  }
  for (Activation act : kActs) {
    rvvk::act_and_mul(act, DType::kF32, out.data(), n, in.data(), 2 * n, 1, n);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double x = in.get(i), exact = act_ref(act, x), got = out.get(i);
      const double want = ref::round_to(DType::kF32, exact);
      // Where the result underflows, x / (1 + exp(-x)) with fp32 exp saturated near 2^128
      // gives a tiny value of x's sign instead: zero for every practical purpose.
      if (std::fabs(want) < 1e-30) {
        CHECK_MSG(std::fabs(got) <= 1e-30 + std::fabs(x) * 1e-37 && !(got * x < 0),
                  "%s x=%.9g: got %.9g want %.9g", name(act), x, got, want);
        continue;
      }
      const double err = std::fabs(got - want) / ref::ulp(DType::kF32, want);
      CHECK_MSG(std::fabs(got - want) <= f32_tol(act, x, 1.0, want),
                "%s x=%.9g: got %.9g want %.9g (%.1f ulp)", name(act), x, got, want, err);
    }
  }
  // NaN propagates through every activation.
  ref::Buffer nan_in(DType::kF32, 2), nan_out(DType::kF32, 1);
  nan_in.set(0, std::nan(""));
  nan_in.set(1, 1.0);
  for (Activation act : kActs) {
    rvvk::act_and_mul(act, DType::kF32, nan_out.data(), 1, nan_in.data(), 2, 1, 1);
    CHECK_MSG(std::isnan(nan_out.get(0)), "%s(NaN) = %.9g", name(act), nan_out.get(0));
  }
}
