// rotary_embedding against a double-precision reference: neox and GPT-J layouts, rotary
// halves with every vector tail, partial rotary dimensions (the rest copied bit for bit),
// padded head and token strides, in place or into another buffer, cos/sin tables in fp32
// or the activations' dtype, every dtype.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <set>
#include <utility>
#include <vector>

#include "harness.h"
#include "lengths.h"
#include "reference.h"

using rvvk::DType;

namespace {

constexpr double kSentinel = -77.0;

// (activations, cos/sin table)
const std::pair<DType, DType> kTypes[] = {{DType::kF32, DType::kF32},
                                          {DType::kBF16, DType::kBF16},
                                          {DType::kF16, DType::kF16},
                                          {DType::kBF16, DType::kF32},
                                          {DType::kF16, DType::kF32}};

struct Case {
  std::int64_t heads, head_size, rotary_dim;
  bool neox;
  DType dt, cdt;
  std::int64_t tokens = 3, pad_h = 0, pad_t = 0;
  bool in_place = false;
};

void run_case(rvvk_test::Context& ctx, const Case& c, std::uint64_t seed) {
  ref::Rng rng(seed);
  const std::int64_t half = c.rotary_dim / 2, max_pos = 37, cs = c.rotary_dim + 3;
  ref::Buffer cache(c.cdt, static_cast<std::size_t>(max_pos * cs));
  for (std::int64_t p = 0; p < max_pos; ++p) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = p * std::pow(10000.0, -2.0 * i / c.rotary_dim);
      cache.set(static_cast<std::size_t>(p * cs + i), std::cos(angle));
      cache.set(static_cast<std::size_t>(p * cs + half + i), std::sin(angle));
    }
  }
  std::vector<std::int64_t> pos(static_cast<std::size_t>(c.tokens));
  for (std::size_t t = 0; t < pos.size(); ++t) {
    pos[t] = t == 0 ? max_pos - 1 : t == 1 ? 0 : static_cast<std::int64_t>(rng.next() % max_pos);
  }
  const std::int64_t xs_h = c.head_size + c.pad_h, xs_t = c.heads * xs_h + c.pad_t;
  ref::Buffer x(c.dt, static_cast<std::size_t>(c.tokens * xs_t));
  for (std::size_t i = 0; i < x.size(); ++i) x.set(i, rng.uniform(-3, 3));
  const ref::Buffer x0 = x;
  const std::int64_t os_h = c.in_place ? xs_h : c.head_size + 1;
  const std::int64_t os_t = c.in_place ? xs_t : c.heads * os_h + 2;
  ref::Buffer out_buf(c.dt, c.in_place ? 0 : static_cast<std::size_t>(c.tokens * os_t));
  for (std::size_t i = 0; i < out_buf.size(); ++i) out_buf.set(i, kSentinel);
  ref::Buffer& out = c.in_place ? x : out_buf;

  rvvk::RotaryArgs a;
  a.heads = c.heads;
  a.head_size = c.head_size;
  a.rotary_dim = c.rotary_dim;
  a.neox = c.neox;
  a.dtype = c.dt;
  a.x = x.data();
  a.x_stride_t = xs_t;
  a.x_stride_h = xs_h;
  a.out = out.data();
  a.out_stride_t = os_t;
  a.out_stride_h = os_h;
  a.cache_dtype = c.cdt;
  a.cos_sin_cache = cache.data();
  a.cache_stride = cs;
  a.positions = pos.data();
  // Two task ranges, as threads would split them.
  rvvk::rotary_embedding(a, 0, c.tokens / 2);
  rvvk::rotary_embedding(a, c.tokens / 2, c.tokens);

  for (std::int64_t t = 0; t < c.tokens; ++t) {
    for (std::int64_t h = 0; h < c.heads; ++h) {
      const std::int64_t xb = t * xs_t + h * xs_h, ob = t * os_t + h * os_h;
      auto xin = [&](std::int64_t i) { return x0.get(static_cast<std::size_t>(xb + i)); };
      auto got = [&](std::int64_t i) { return out.get(static_cast<std::size_t>(ob + i)); };
      for (std::int64_t i = 0; i < half; ++i) {
        const std::int64_t i1 = c.neox ? i : 2 * i, i2 = c.neox ? i + half : 2 * i + 1;
        const double co = cache.get(static_cast<std::size_t>(pos[t] * cs + i));
        const double si = cache.get(static_cast<std::size_t>(pos[t] * cs + half + i));
        const double x1 = xin(i1), x2 = xin(i2);
        // fp32 products and sum: error relative to the terms, then the rounding to dt.
        const double scale = 4 * 0x1p-24 * (std::fabs(x1 * co) + std::fabs(x2 * si) +
                                             std::fabs(x2 * co) + std::fabs(x1 * si));
        const double want[2] = {x1 * co - x2 * si, x2 * co + x1 * si};
        const std::int64_t idx[2] = {i1, i2};
        for (int k = 0; k < 2; ++k) {
          const double w = ref::round_to(c.dt, want[k]);
          const double tol = (c.dt == DType::kF32 ? 0 : ref::ulp(c.dt, w)) + scale;
          CHECK_MSG(std::fabs(got(idx[k]) - w) <= tol,
                    "%s/%s %s heads=%lld head=%lld rot=%lld t=%lld h=%lld [%lld]: got %.9g want "
                    "%.9g", ref::name(c.dt), ref::name(c.cdt), c.neox ? "neox" : "gptj",
                    (long long)c.heads, (long long)c.head_size, (long long)c.rotary_dim,
                    (long long)t, (long long)h, (long long)idx[k], got(idx[k]), w);
        }
      }
      for (std::int64_t i = c.rotary_dim; i < c.head_size; ++i) {
        const std::size_t o = static_cast<std::size_t>(ob + i);
        CHECK_MSG(out.raw(o) == x0.raw(static_cast<std::size_t>(xb + i)),
                  "%s head=%lld rot=%lld t=%lld h=%lld [%lld]: pass-through got %.9g want %.9g",
                  ref::name(c.dt), (long long)c.head_size, (long long)c.rotary_dim, (long long)t,
                  (long long)h, (long long)i, got(i), xin(i));
      }
    }
  }
  // Padding between heads and tokens: untouched.
  const std::int64_t hs = c.head_size;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int64_t in_token = static_cast<std::int64_t>(i) % os_t;
    const bool written = in_token < c.heads * os_h && in_token % os_h < hs;
    if (written) continue;
    const double want = c.in_place ? x0.get(i) : kSentinel;
    CHECK_MSG(out.get(i) == want, "%s head=%lld: wrote the gap at %zu", ref::name(c.dt),
              (long long)c.head_size, i);
  }
}

}  // namespace

RVVK_TEST(rope_rotary_lengths) {
  // Rotary halves around every multiple of the vector length (up to 2x) and odd ones,
  // full rotary, both layouts; the dtype pairs take turns.
  std::set<std::int64_t> halves;
  for (std::int64_t h : rvvk_test::row_lengths(ctx.vlen_bits, 2, {1, 7, 16, 17, 64, 255}))
    halves.insert(h);
  std::uint64_t seed = 1;
  std::size_t turn = 0;
  for (std::int64_t half : halves) {
    for (bool neox : {true, false}) {
      const auto& [dt, cdt] = kTypes[turn++ % std::size(kTypes)];
      run_case(ctx, Case{2, 2 * half, 2 * half, neox, dt, cdt}, seed++);
    }
  }
}

RVVK_TEST(rope_features) {
  // Every dtype pair, both layouts: partial rotary (Qwen-style 128/64, an odd half),
  // many heads, one head, padded strides, in place, one token.
  std::uint64_t seed = 100;
  for (const auto& [dt, cdt] : kTypes) {
    for (bool neox : {true, false}) {
      run_case(ctx, Case{12, 128, 128, neox, dt, cdt, 2}, seed++);
      run_case(ctx, Case{2, 128, 64, neox, dt, cdt, 4, 3, 5}, seed++);
      run_case(ctx, Case{3, 80, 34, neox, dt, cdt, 3, 0, 1}, seed++);
      run_case(ctx, Case{1, 64, 64, neox, dt, cdt, 5, 0, 0, true}, seed++);
      run_case(ctx, Case{4, 96, 32, neox, dt, cdt, 2, 2, 3, true}, seed++);
      run_case(ctx, Case{5, 16, 16, neox, dt, cdt, 1}, seed++);
    }
  }
}
