// sigmoid_mul, sigmoid_scale_rows and rotary_pos_emb against double-precision references:
// row and head lengths with every vector tail, strided and padded rows and heads, in place
// or into another buffer, empty and length-1 shapes, every dtype (and every cos/sin dtype).
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "harness.h"
#include "lengths.h"
#include "reference.h"

using rvvk::DType;

namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kBF16, DType::kF16};
constexpr double kSentinel = -77.0;

double sigmoid_ref(double g) { return 1.0 / (1.0 + std::exp(-g)); }

// x * sigmoid(g) in fp32 (exp within a few ulps, an add, a division): 6 fp32 ulps of the
// exact value, plus one ulp of the storage dtype for the final rounding.
// Where the result underflows (gate < -87), x / (1 + exp(-g)) with fp32 exp saturated near
// 2^128 gives a tiny value of x's sign instead (|x| 2^-128 at most): zero for every
// practical purpose.
bool close_gate(DType dt, double got, double exact, double x) {
  const double want = ref::round_to(dt, exact);
  if (std::fabs(exact) < 1e-30) {
    return std::fabs(got) <= 1e-30 + std::fabs(x) * 0x1p-126 && !(got * x < 0);
  }
  const double tol = 6 * ref::ulp(DType::kF32, exact) + (dt == DType::kF32 ? 0 : ref::ulp(dt, want));
  return std::fabs(got - want) <= tol;
}

struct GateCase {
  std::int64_t rows, heads, head_dim;
  std::int64_t x_pad = 0, gate_pad_h = 0, gate_pad_t = 0;
  bool in_place = true;
};

void run_gate_case(rvvk_test::Context& ctx, const GateCase& c, DType dt, std::uint64_t seed) {
  ref::Rng rng(seed);
  const std::int64_t d = c.heads * c.head_dim;
  const std::int64_t xs = d + c.x_pad, os = c.in_place ? xs : d + 3;
  const std::int64_t gsh = c.head_dim + c.gate_pad_h, gst = c.heads * gsh + c.gate_pad_t;
  const std::size_t rows = static_cast<std::size_t>(c.rows > 0 ? c.rows : 1);
  ref::Buffer x(dt, rows * xs), gate(dt, rows * gst), out_buf(dt, c.in_place ? 0 : rows * os);
  for (std::size_t i = 0; i < x.size(); ++i) x.set(i, rng.uniform(-4, 4));
  // gates over both tails of the sigmoid, a few far out
  for (std::size_t i = 0; i < gate.size(); ++i) {
    gate.set(i, i % 97 == 5 ? rng.uniform(-120, 120) : rng.uniform(-10, 10));
  }
  for (std::size_t i = 0; i < out_buf.size(); ++i) out_buf.set(i, kSentinel);
  const ref::Buffer x0 = x;
  ref::Buffer& out = c.in_place ? x : out_buf;
  rvvk::sigmoid_mul(dt, out.data(), os, x.data(), xs, gate.data(), gst, gsh, c.rows, c.heads,
                    c.head_dim);
  for (std::int64_t r = 0; r < c.rows; ++r) {
    for (std::int64_t j = 0; j < os; ++j) {
      const std::size_t o = static_cast<std::size_t>(r * os + j);
      if (j >= d) {
        const double want = c.in_place ? x0.get(o) : kSentinel;
        CHECK_MSG(out.get(o) == want, "sigmoid_mul %s d=%lld: wrote the gap at %zu",
                  ref::name(dt), (long long)d, o);
        continue;
      }
      const std::int64_t h = j / c.head_dim, e = j % c.head_dim;
      const double xv = x0.get(static_cast<std::size_t>(r * xs + j));
      const double g = gate.get(static_cast<std::size_t>(r * gst + h * gsh + e));
      const double exact = xv * sigmoid_ref(g);
      CHECK_MSG(close_gate(dt, out.get(o), exact, xv),
                "sigmoid_mul %s rows=%lld heads=%lld head_dim=%lld [%lld,%lld] x=%.9g g=%.9g: "
                "got %.9g want %.9g", ref::name(dt), (long long)c.rows, (long long)c.heads,
                (long long)c.head_dim, (long long)r, (long long)j, xv, g, out.get(o),
                ref::round_to(dt, exact));
    }
  }
  (void)ctx;
}

}  // namespace

RVVK_TEST(sigmoid_mul_matches_reference) {
  std::vector<GateCase> cases;
  // One head of every length with every tail (2-D gate), contiguous and in place.
  for (std::int64_t n : rvvk_test::row_lengths(ctx.vlen_bits, 2)) cases.push_back({2, 1, n});
  // Heads with a padded gate (3-D gate from a wider tensor), out of place, padded rows.
  for (std::int64_t hd : {1, 7, 16, 33, 128}) {
    cases.push_back({3, 4, hd, 5, hd, 3, false});
    cases.push_back({1, 3, hd, 0, 1, 0, true});
  }
  cases.push_back({0, 2, 16});  // no rows
  cases.push_back({3, 0, 16});  // no heads
  cases.push_back({3, 2, 0});   // empty heads
  std::uint64_t seed = 3;
  for (DType dt : kTypes) {
    for (const GateCase& c : cases) run_gate_case(ctx, c, dt, seed++);
  }
}

RVVK_TEST(sigmoid_scale_rows_matches_reference) {
  ref::Rng rng(9);
  std::vector<std::int64_t> lengths = rvvk_test::row_lengths(ctx.vlen_bits, 2);
  lengths.push_back(0);
  for (DType dt : kTypes) {
    for (std::int64_t cols : lengths) {
      for (bool in_place : {true, false}) {
        const std::int64_t rows = cols > 1000 ? 2 : 5, xs = cols + 3, os = in_place ? xs : cols + 1;
        std::vector<float> gate(static_cast<std::size_t>(rows));
        for (std::int64_t r = 0; r < rows; ++r) {
          // both tails, zero, and a far negative gate (sigmoid underflows towards 0)
          gate[static_cast<std::size_t>(r)] =
              r == 0 ? 0.0f : r == 1 ? -100.0f : static_cast<float>(rng.uniform(-12, 12));
        }
        ref::Buffer x(dt, static_cast<std::size_t>(rows * xs));
        for (std::size_t i = 0; i < x.size(); ++i) x.set(i, rng.uniform(-4, 4));
        const ref::Buffer x0 = x;
        ref::Buffer out_buf(dt, in_place ? 0 : static_cast<std::size_t>(rows * os));
        for (std::size_t i = 0; i < out_buf.size(); ++i) out_buf.set(i, kSentinel);
        ref::Buffer& out = in_place ? x : out_buf;
        rvvk::sigmoid_scale_rows(dt, out.data(), os, x.data(), xs, gate.data(), rows, cols);
        for (std::int64_t r = 0; r < rows; ++r) {
          for (std::int64_t j = 0; j < os; ++j) {
            const std::size_t o = static_cast<std::size_t>(r * os + j);
            if (j >= cols) {
              const double want = in_place ? x0.get(o) : kSentinel;
              CHECK_MSG(out.get(o) == want, "sigmoid_scale_rows %s: wrote the gap at %zu",
                        ref::name(dt), o);
              continue;
            }
            const double xv = x0.get(static_cast<std::size_t>(r * xs + j));
            const double exact = xv * sigmoid_ref(gate[static_cast<std::size_t>(r)]);
            // sigmoid rounded to fp32 once, then the product: one more ulp than close_gate.
            const double want = ref::round_to(dt, exact);
            const double tol = 7 * ref::ulp(DType::kF32, exact) +
                               (dt == DType::kF32 ? 0 : ref::ulp(dt, want)) + 1e-37;
            const bool ok = std::fabs(exact) < 1e-30
                                ? std::fabs(out.get(o)) <= 1e-30 + std::fabs(xv) * 0x1p-126
                                : std::fabs(out.get(o) - want) <= tol;
            CHECK_MSG(ok,
                      "sigmoid_scale_rows %s cols=%lld [%lld,%lld] g=%.9g: got %.9g want %.9g",
                      ref::name(dt), (long long)cols, (long long)r, (long long)j,
                      (double)gate[static_cast<std::size_t>(r)], out.get(o), want);
          }
        }
      }
    }
  }
}

namespace {

struct RopeCase {
  std::int64_t tokens, heads, head_size;
  DType dt, cdt;
  std::int64_t pad_h = 0, pad_t = 0, cos_pad = 0;
  bool in_place = false;
};

void run_rope_case(rvvk_test::Context& ctx, const RopeCase& c, std::uint64_t seed) {
  ref::Rng rng(seed);
  const std::int64_t half = c.head_size / 2, cst = c.head_size + c.cos_pad;
  const std::size_t tokens = static_cast<std::size_t>(c.tokens > 0 ? c.tokens : 1);
  // cos and sin rows: arbitrary values (the kernel must not assume the halves repeat).
  ref::Buffer cos(c.cdt, tokens * cst), sin(c.cdt, tokens * cst);
  for (std::size_t i = 0; i < cos.size(); ++i) {
    cos.set(i, rng.uniform(-1, 1));
    sin.set(i, rng.uniform(-1, 1));
  }
  const std::int64_t xs_h = c.head_size + c.pad_h, xs_t = c.heads * xs_h + c.pad_t;
  ref::Buffer x(c.dt, tokens * xs_t);
  for (std::size_t i = 0; i < x.size(); ++i) x.set(i, rng.uniform(-3, 3));
  const ref::Buffer x0 = x;
  const std::int64_t os_h = c.in_place ? xs_h : c.head_size + 1;
  const std::int64_t os_t = c.in_place ? xs_t : c.heads * os_h + 2;
  ref::Buffer out_buf(c.dt, c.in_place ? 0 : tokens * os_t);
  for (std::size_t i = 0; i < out_buf.size(); ++i) out_buf.set(i, kSentinel);
  ref::Buffer& out = c.in_place ? x : out_buf;

  rvvk::RotaryPosEmbArgs a;
  a.heads = c.heads;
  a.head_size = c.head_size;
  a.dtype = c.dt;
  a.x = x.data();
  a.x_stride_t = xs_t;
  a.x_stride_h = xs_h;
  a.out = out.data();
  a.out_stride_t = os_t;
  a.out_stride_h = os_h;
  a.cos_dtype = c.cdt;
  a.cos = cos.data();
  a.sin = sin.data();
  a.cos_stride_t = cst;
  a.sin_stride_t = cst;
  // Two task ranges, as threads would split them.
  rvvk::rotary_pos_emb(a, 0, c.tokens / 2);
  rvvk::rotary_pos_emb(a, c.tokens / 2, c.tokens);

  for (std::int64_t t = 0; t < c.tokens; ++t) {
    for (std::int64_t h = 0; h < c.heads; ++h) {
      const std::int64_t xb = t * xs_t + h * xs_h, ob = t * os_t + h * os_h;
      for (std::int64_t i = 0; i < c.head_size; ++i) {
        const bool first = i < half;
        const std::int64_t partner = first ? i + half : i - half;
        const double xi = x0.get(static_cast<std::size_t>(xb + i));
        const double xp = x0.get(static_cast<std::size_t>(xb + partner));
        const double co = cos.get(static_cast<std::size_t>(t * cst + i));
        const double si = sin.get(static_cast<std::size_t>(t * cst + i));
        // rotate_half: the first half takes -x[i + half], the second x[i - half].
        const double want_exact = xi * co + (first ? -xp : xp) * si;
        const double w = ref::round_to(c.dt, want_exact);
        const double tol = (c.dt == DType::kF32 ? 0 : ref::ulp(c.dt, w)) +
                           4 * 0x1p-24 * (std::fabs(xi * co) + std::fabs(xp * si));
        const double got = out.get(static_cast<std::size_t>(ob + i));
        CHECK_MSG(std::fabs(got - w) <= tol,
                  "rotary_pos_emb %s/%s tokens=%lld heads=%lld head=%lld t=%lld h=%lld [%lld]: "
                  "got %.9g want %.9g", ref::name(c.dt), ref::name(c.cdt), (long long)c.tokens,
                  (long long)c.heads, (long long)c.head_size, (long long)t, (long long)h,
                  (long long)i, got, w);
      }
    }
  }
  // Padding between heads and tokens: untouched.
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int64_t in_token = static_cast<std::int64_t>(i) % os_t;
    const bool written = static_cast<std::int64_t>(i) / os_t < c.tokens &&
                         in_token < c.heads * os_h && in_token % os_h < c.head_size;
    if (written) continue;
    const double want = c.in_place ? x0.get(i) : kSentinel;
    CHECK_MSG(out.get(i) == want, "rotary_pos_emb %s head=%lld: wrote the gap at %zu",
              ref::name(c.dt), (long long)c.head_size, i);
  }
}

}  // namespace

RVVK_TEST(rotary_pos_emb_matches_reference) {
  const std::pair<DType, DType> types[] = {
      {DType::kF32, DType::kF32},  {DType::kBF16, DType::kBF16}, {DType::kF16, DType::kF16},
      {DType::kBF16, DType::kF32}, {DType::kF16, DType::kF32},   {DType::kF32, DType::kBF16},
      {DType::kBF16, DType::kF16}};
  std::set<std::int64_t> halves;
  for (std::int64_t h : rvvk_test::row_lengths(ctx.vlen_bits, 2, {1, 7, 16, 17, 64})) {
    halves.insert(h);
  }
  std::uint64_t seed = 11;
  std::size_t turn = 0;
  for (std::int64_t half : halves) {
    const auto [dt, cdt] = types[turn++ % std::size(types)];
    run_rope_case(ctx, {3, 2, 2 * half, dt, cdt}, seed++);
  }
  for (const auto& [dt, cdt] : types) {
    run_rope_case(ctx, {5, 3, 34, dt, cdt, 3, 5, 2, false}, seed++);  // padded heads and tokens
    run_rope_case(ctx, {4, 3, 34, dt, cdt, 3, 5, 2, true}, seed++);   // in place
    run_rope_case(ctx, {1, 1, 2, dt, cdt}, seed++);                   // one pair
    run_rope_case(ctx, {0, 2, 16, dt, cdt}, seed++);                  // no tokens
    run_rope_case(ctx, {2, 0, 16, dt, cdt}, seed++);                  // no heads
  }
}

RVVK_TEST(gdn_gating_matches_reference) {
  // (a/b dtype, A_log dtype, dt_bias dtype)
  struct Types {
    DType dt, log_dt, bias_dt;
  };
  const Types types[] = {{DType::kF32, DType::kF32, DType::kF32},
                         {DType::kBF16, DType::kF32, DType::kBF16},
                         {DType::kF16, DType::kF32, DType::kF16},
                         {DType::kBF16, DType::kBF16, DType::kF32}};
  std::vector<std::int64_t> heads_list = rvvk_test::row_lengths(ctx.vlen_bits, 2, {1, 4, 7, 32});
  heads_list.push_back(0);
  ref::Rng rng(17);
  std::size_t turn = 0;
  for (std::int64_t heads : heads_list) {
    for (std::size_t rep = 0; rep < 2; ++rep) {
      const Types ty = types[turn++ % std::size(types)];
      const std::int64_t rows = 3, as = heads + 2, bs = heads + 5, gs = heads + 1, os = heads + 3;
      ref::Buffer a(ty.dt, static_cast<std::size_t>(rows * as)), b(ty.dt, static_cast<std::size_t>(rows * bs));
      ref::Buffer a_log(ty.log_dt, static_cast<std::size_t>(heads)), bias(ty.bias_dt, static_cast<std::size_t>(heads));
      ref::Buffer g(DType::kF32, static_cast<std::size_t>(rows * gs)), beta(ty.dt, static_cast<std::size_t>(rows * os));
      for (std::size_t i = 0; i < a.size(); ++i) {
        // softplus over both tails and past the threshold (x > 20)
        a.set(i, i % 11 == 3 ? rng.uniform(-40, 40) : rng.uniform(-6, 6));
      }
      for (std::size_t i = 0; i < b.size(); ++i) b.set(i, i % 13 == 1 ? rng.uniform(-100, 100) : rng.uniform(-8, 8));
      for (std::size_t i = 0; i < a_log.size(); ++i) a_log.set(i, rng.uniform(-3, 2.5));
      for (std::size_t i = 0; i < bias.size(); ++i) bias.set(i, rng.uniform(-2, 2));
      for (std::size_t i = 0; i < g.size(); ++i) g.set(i, kSentinel);
      for (std::size_t i = 0; i < beta.size(); ++i) beta.set(i, kSentinel);
      rvvk::GdnGatingArgs args;
      args.heads = heads;
      args.dtype = ty.dt;
      args.a = a.data();
      args.a_stride = as;
      args.b = b.data();
      args.b_stride = bs;
      args.a_log_dtype = ty.log_dt;
      args.a_log = a_log.data();
      args.dt_bias_dtype = ty.bias_dt;
      args.dt_bias = bias.data();
      args.g = static_cast<float*>(g.data());
      args.g_stride = gs;
      args.beta = beta.data();
      args.beta_stride = os;
      rvvk::gdn_gating(args, 0, 1);
      rvvk::gdn_gating(args, 1, rows);
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t h = 0; h < gs; ++h) {
          const std::size_t o = static_cast<std::size_t>(r * gs + h);
          if (h >= heads) {
            CHECK_MSG(g.get(o) == kSentinel, "gdn_gating: wrote g's gap at %zu", o);
            continue;
          }
          // x = a + dt_bias rounded to fp32 (exact for 16-bit inputs up to the sum's rounding)
          const double x = static_cast<float>(a.get(static_cast<std::size_t>(r * as + h)) +
                                              bias.get(static_cast<std::size_t>(h)));
          const double sp = x > 20 ? x : std::log1p(std::exp(x));
          const double want = -std::exp(a_log.get(static_cast<std::size_t>(h))) * sp;
          const double tol = 8 * ref::ulp(DType::kF32, want) + 1e-37;
          CHECK_MSG(std::fabs(g.get(o) - want) <= tol,
                    "gdn_gating g %s heads=%lld [%lld,%lld] x=%.9g: got %.9g want %.9g",
                    ref::name(ty.dt), (long long)heads, (long long)r, (long long)h, x, g.get(o),
                    want);
        }
        for (std::int64_t h = 0; h < os; ++h) {
          const std::size_t o = static_cast<std::size_t>(r * os + h);
          if (h >= heads) {
            CHECK_MSG(beta.get(o) == kSentinel, "gdn_gating: wrote beta's gap at %zu", o);
            continue;
          }
          const double bv = b.get(static_cast<std::size_t>(r * bs + h));
          const double exact = sigmoid_ref(bv);
          const double want = ref::round_to(ty.dt, exact);
          const double tol = 6 * ref::ulp(DType::kF32, exact) +
                             (ty.dt == DType::kF32 ? 0 : ref::ulp(ty.dt, want)) + 1e-37;
          const bool ok = exact < 1e-30 ? std::fabs(beta.get(o)) <= 1e-30
                                        : std::fabs(beta.get(o) - want) <= tol;
          CHECK_MSG(ok, "gdn_gating beta %s heads=%lld [%lld,%lld] b=%.9g: got %.9g want %.9g",
                    ref::name(ty.dt), (long long)heads, (long long)r, (long long)h, bv,
                    beta.get(o), want);
        }
      }
    }
  }
}
