// Linear layers: weight packing + float GEMM against a double-precision reference, the
// per-row int8 quantisation against SGLang's definition, and the W8A8 GEMM against an
// exact int64 reference. Shapes: K and N in {1, 7, 16, 17, 255, 1536, 8960} (the
// largest products subsampled to bound emulation time), M in {1, 2, 5, 64, 300} plus
// every register-block size 1..9, strided rows, odd K, foreign panel widths, and the
// M = 1 bf16 K loop's word counts left after its 4-word steps.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "harness.h"
#include "reference.h"

using rvvk::DType;

namespace {

constexpr std::int64_t kSizes[] = {1, 7, 16, 17, 255, 1536, 8960};
constexpr std::int64_t kRows[] = {1, 2, 5, 64, 300};

struct Shape {
  std::int64_t m, k, n;
};

// The shape matrix, with M x K x N capped (`budget` multiply-adds per case) except for
// the decode shapes of Qwen2.5-1.5B's MLP (M = 1).
std::vector<Shape> shapes(double budget) {
  std::vector<Shape> out;
  for (std::int64_t k : kSizes)
    for (std::int64_t n : kSizes)
      for (std::int64_t m : kRows)
        if (static_cast<double>(m) * k * n <= budget) out.push_back({m, k, n});
  for (std::int64_t m : {3, 4, 6, 7, 8, 9, 13}) out.push_back({m, 33, 70});  // every block
  // M = 1's bf16 K loop takes 4 words (8 k's) per step: 1, 2 and 3 words left over.
  for (std::int64_t k : {5, 12, 13}) out.push_back({1, k, 70});
  out.push_back({1, 1536, 8960});
  out.push_back({1, 8960, 1536});
  return out;
}

// Aligned storage for a packed weight (the header and bf16 word loads need 4 bytes).
struct Packed {
  std::vector<std::uint32_t> words;
  rvvk::PackedWeightHeader header;
  void* data() { return words.data(); }
};

Packed pack(DType dt, const ref::Buffer& w, std::int64_t n, std::int64_t k, std::int64_t panel) {
  Packed p;
  rvvk::pack_weight_layout(dt, n, k, &p.header);
  if (panel > 0) {  // a weight packed for another CPU: the kernels must still be right
    p.header.panel = panel;
    p.header.bytes = rvvk::kPackedWeightHeaderBytes +
                     rvvk::linear_tasks(p.header) * panel * p.header.k_padded *
                         rvvk::packed_element_bytes(dt);
  }
  p.words.assign(static_cast<std::size_t>(p.header.bytes + 3) / 4, 0xdeadbeefu);
  rvvk::pack_weight(p.header, w.bytes.data(), k, p.data());
  return p;
}

void fill(ref::Buffer& b, ref::Rng& rng) {
  for (std::size_t i = 0; i < b.size(); ++i) b.set(i, rng.uniform(-1, 1));
}

struct FloatCombo {
  DType x, w, out, bias;
};

}  // namespace

RVVK_TEST(pack_weight_layout_follows_vlen) {
  rvvk::PackedWeightHeader h;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kI8}) {
    rvvk::pack_weight_layout(dt, 17, 7, &h);
    const std::int64_t want_panel = dt == DType::kI8 ? ctx.vlen_bits / 4 : ctx.vlen_bits / 8;
    CHECK_MSG(h.magic == rvvk::kPackedWeightMagic && h.version == rvvk::kPackedWeightVersion,
              "%s: bad magic/version", ref::name(dt));
    CHECK_MSG(h.panel == want_panel, "%s: panel %lld, want %lld at VLEN %u", ref::name(dt),
              (long long)h.panel, (long long)want_panel, ctx.vlen_bits);
    CHECK_MSG(h.n == 17 && h.k == 7 && h.k_padded == 8 && h.dtype == dt, "%s: dims",
              ref::name(dt));
    const std::int64_t panels = (17 + want_panel - 1) / want_panel;
    CHECK_MSG(h.bytes == 64 + panels * want_panel * 8 * rvvk::packed_element_bytes(dt),
              "%s: bytes %lld", ref::name(dt), (long long)h.bytes);
    CHECK_MSG((h.layout == rvvk::PackedLayout::kPairs) == (dt == DType::kBF16), "%s: layout",
              ref::name(dt));
  }
}

RVVK_TEST(linear_matches_reference) {
  ref::Rng rng(41);
  const FloatCombo same[] = {{DType::kF32, DType::kF32, DType::kF32, DType::kF32},
                             {DType::kBF16, DType::kBF16, DType::kBF16, DType::kBF16},
                             {DType::kF16, DType::kF16, DType::kF16, DType::kF32}};
  const FloatCombo mixed[] = {{DType::kF32, DType::kBF16, DType::kF32, DType::kBF16},
                              {DType::kBF16, DType::kF32, DType::kBF16, DType::kF32},
                              {DType::kF16, DType::kBF16, DType::kF32, DType::kF16}};
  // Small shapes run every same-dtype combination, larger ones one of six in turn, the
  // big decode shapes bf16 only.
  std::vector<std::pair<Shape, FloatCombo>> work;
  int i = 0;
  for (const Shape& s : shapes(4e5)) {
    const double macs = static_cast<double>(s.m) * s.k * s.n;
    if (macs > 4e5) {
      work.push_back({s, same[1]});
    } else if (macs <= 5e4) {
      for (const FloatCombo& c : same) work.push_back({s, c});
      work.push_back({s, mixed[i++ % 3]});
    } else {
      work.push_back({s, i % 2 ? same[i / 2 % 3] : mixed[i / 2 % 3]});
      ++i;
    }
  }
  int case_no = 0;
  for (const auto& [s, c] : work) {
    const bool strided = case_no % 3 == 1, with_bias = case_no % 2 == 0;
    // Every 5th case: a panel width this CPU would not choose (odd, or 3 vectors).
    const std::int64_t panel = case_no % 5 == 4 ? (case_no % 10 == 4 ? 5 : 3 * ctx.vlen_bits / 8)
                                                : 0;
    ++case_no;
    const std::int64_t xs = s.k + (strided ? 3 : 0), os = s.n + (strided ? 2 : 0);
    ref::Buffer x(c.x, s.m * xs), w(c.w, s.n * s.k), b(c.bias, s.n), o(c.out, s.m * os);
    fill(x, rng);
    fill(w, rng);
    fill(b, rng);
    for (std::size_t j = 0; j < o.size(); ++j) o.set(j, -77.0);
    Packed p = pack(c.w, w, s.n, s.k, panel);
    rvvk::LinearArgs a;
    a.m = s.m;
    a.x_dtype = c.x;
    a.x = x.data();
    a.x_stride = xs;
    a.packed = p.data();
    a.bias_dtype = c.bias;
    a.bias = with_bias ? b.data() : nullptr;
    a.out_dtype = c.out;
    a.out = o.data();
    a.out_stride = os;
    // Two task ranges, as a caller splitting N over threads would.
    const std::int64_t tasks = rvvk::linear_tasks(p.header), half = tasks / 2;
    rvvk::linear(a, 0, half);
    rvvk::linear(a, half, tasks);
    int bad = 0;
    std::vector<double> wd(static_cast<std::size_t>(s.n * s.k));
    for (std::size_t j = 0; j < wd.size(); ++j) wd[j] = w.get(j);
    for (std::int64_t r = 0; r < s.m && bad < 3; ++r) {
      std::vector<double> xr(static_cast<std::size_t>(s.k));
      for (std::int64_t k = 0; k < s.k; ++k) xr[k] = x.get(r * xs + k);
      for (std::int64_t j = 0; j < s.n; ++j) {
        double acc = 0, mag = 0;
        const double* wr = &wd[static_cast<std::size_t>(j * s.k)];
        for (std::int64_t k = 0; k < s.k; ++k) {
          acc += xr[k] * wr[k];
          mag += std::fabs(xr[k] * wr[k]);
        }
        if (with_bias) {
          acc += b.get(j);
          mag += std::fabs(b.get(j));
        }
        // fp32 accumulation: each of the k + 1 steps rounds once (error <= (k + 1) u of the
        // running magnitude), then one rounding to the output dtype.
        const double tol = (s.k + 1) * 0x1p-24 * mag + ref::ulp(c.out, acc);
        const double got = o.get(r * os + j);
        if (!(std::fabs(got - acc) <= tol) && bad++ < 3) {
          CHECK_MSG(false, "x=%s w=%s out=%s m=%lld k=%lld n=%lld panel=%lld [%lld,%lld]: got %.9g want %.9g",
                    ref::name(c.x), ref::name(c.w), ref::name(c.out), (long long)s.m,
                    (long long)s.k, (long long)s.n, (long long)p.header.panel, (long long)r,
                    (long long)j, got, acc);
        }
      }
      for (std::int64_t j = s.n; j < os; ++j) {  // padding columns untouched
        CHECK_MSG(o.get(r * os + j) == -77.0, "wrote past n at row %lld col %lld",
                  (long long)r, (long long)j);
      }
    }
  }
}

RVVK_TEST(quantize_int8_rows_matches_sglang) {
  ref::Rng rng(43);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (std::int64_t cols : {1, 7, 16, 17, 255, 1536, 8960}) {
      const std::int64_t rows = 4, stride = cols + 5;
      ref::Buffer x(dt, rows * stride);
      for (std::size_t i = 0; i < x.size(); ++i) x.set(i, rng.uniform(-3, 3));
      for (std::int64_t k = 0; k < cols; ++k) x.set(2 * stride + k, 0.0);  // an all-zero row
      // Row 3: exact .5 ties after scaling (absmax 127 gives scale 1).
      for (std::int64_t k = 0; k < cols; ++k) x.set(3 * stride + k, k % 2 ? 2.5 : -0.5);
      x.set(3 * stride, 127.0);
      std::vector<std::int8_t> q(static_cast<std::size_t>(rows * cols), 99);
      std::vector<float> scales(rows, -1.0f);
      rvvk::quantize_int8_rows(dt, x.data(), stride, rows, cols, q.data(), cols, scales.data());
      for (std::int64_t r = 0; r < rows; ++r) {
        double amax = 0;
        for (std::int64_t k = 0; k < cols; ++k) amax = std::max(amax, std::fabs(x.get(r * stride + k)));
        const float am = std::max(static_cast<float>(amax), 1e-10f);
        CHECK_MSG(scales[r] == am / 127.0f, "%s cols=%lld row %lld: scale %.9g want %.9g",
                  ref::name(dt), (long long)cols, (long long)r, scales[r], am / 127.0f);
        const float inv = 127.0f * (1.0f / am);  // torch's `127 / amax`: a reciprocal, then x 127
        for (std::int64_t k = 0; k < cols; ++k) {
          const float y = static_cast<float>(x.get(r * stride + k)) * inv;
          const double want = std::max(-127.0, std::min(127.0, std::nearbyint(static_cast<double>(y))));
          // round half to even, independent of the library: y - floor(y) == 0.5 picks even
          const int got = q[r * cols + k];
          if (got != want) {
            CHECK_MSG(false, "%s cols=%lld [%lld,%lld]: q=%d want %g (x*inv=%.9g)", ref::name(dt),
                      (long long)cols, (long long)r, (long long)k, got, want, y);
            break;
          }
        }
      }
      // The tie row: -0.5 -> 0 (even), 2.5 -> 2 (even).
      if (cols > 2) {
        CHECK_MSG(q[3 * cols + 1] == 2 && q[3 * cols + 2] == 0, "ties: %d %d", q[3 * cols + 1],
                  q[3 * cols + 2]);
      }
    }
  }
}

namespace {

// Checks int8_linear for one shape; `extreme` fills with +-127 / -128 to reach the
// largest sums (exactness where an int16 or fp32 accumulator would fail).
void check_int8(rvvk_test::Context& ctx, ref::Rng& rng, const Shape& s, DType out_dt,
                bool allow_minus128, bool extreme, bool unit_scales, int case_no) {
  const bool strided = case_no % 3 == 1, with_bias = !unit_scales && case_no % 2 == 0;
  const std::int64_t as = s.k + (strided ? 5 : 0), os = s.n + (strided ? 1 : 0);
  std::vector<std::int8_t> a(static_cast<std::size_t>(s.m * as)), w(static_cast<std::size_t>(s.n * s.k));
  const int lo = allow_minus128 ? -128 : -127;
  for (auto& v : a) v = static_cast<std::int8_t>(extreme ? (allow_minus128 ? -128 : 127) : lo + static_cast<int>(rng.next() % (128 - lo)));
  for (auto& v : w) v = static_cast<std::int8_t>(extreme ? -128 : -128 + static_cast<int>(rng.next() % 256));
  if (extreme && s.k > 2) w[1] = 127;  // not all equal
  std::vector<float> sa(s.m), sw(s.n);
  for (auto& v : sa) v = unit_scales ? 1.0f : static_cast<float>(rng.uniform(1e-3, 2e-2));
  for (auto& v : sw) v = unit_scales ? 1.0f : static_cast<float>(rng.uniform(1e-3, 2e-2));
  ref::Buffer b(DType::kF32, s.n), o(out_dt, s.m * os);
  for (std::size_t j = 0; j < b.size(); ++j) b.set(j, rng.uniform(-1, 1));
  for (std::size_t j = 0; j < o.size(); ++j) o.set(j, -77.0);
  Packed p;
  rvvk::pack_weight_layout(DType::kI8, s.n, s.k, &p.header);
  if (case_no % 4 == 3) {
    p.header.panel = case_no % 8 == 3 ? 3 : p.header.panel / 2 + 1;
    p.header.bytes = 64 + rvvk::linear_tasks(p.header) * p.header.panel * p.header.k_padded;
  }
  p.words.assign(static_cast<std::size_t>(p.header.bytes + 3) / 4, 0x5a5a5a5au);
  rvvk::pack_weight(p.header, w.data(), s.k, p.data());
  rvvk::Int8LinearArgs args;
  args.m = s.m;
  args.a = a.data();
  args.a_stride = as;
  args.a_scales = sa.data();
  args.packed = p.data();
  args.w_scales = sw.data();
  args.bias = with_bias ? b.data() : nullptr;
  args.out_dtype = out_dt;
  args.out = o.data();
  args.out_stride = os;
  const std::int64_t tasks = rvvk::linear_tasks(p.header);
  rvvk::int8_linear(args, 0, tasks / 3);
  rvvk::int8_linear(args, tasks / 3, tasks);
  int bad = 0;
  for (std::int64_t r = 0; r < s.m; ++r) {
    for (std::int64_t j = 0; j < s.n; ++j) {
      std::int64_t acc = 0;
      for (std::int64_t k = 0; k < s.k; ++k) acc += std::int64_t{a[r * as + k]} * w[j * s.k + k];
      const double got = o.get(r * os + j);
      double want, tol;
      if (unit_scales) {  // the exact sum, rounded once to fp32 (and to the out dtype)
        want = ref::round_to(out_dt, static_cast<double>(static_cast<float>(acc)));
        tol = out_dt == DType::kF32 ? 0 : 0;
      } else {
        const double exact = static_cast<double>(acc) * sa[r] * sw[j] + (with_bias ? b.get(j) : 0);
        want = exact;
        // fp32 epilogue: int->float, two products and an add (4 roundings), then out.
        tol = 4 * 0x1p-24 * (std::fabs(static_cast<double>(acc) * sa[r] * sw[j]) + std::fabs(b.get(j))) +
              ref::ulp(out_dt, exact);
      }
      if (!(std::fabs(got - want) <= tol) && bad++ < 3) {
        CHECK_MSG(false, "int8 out=%s m=%lld k=%lld n=%lld panel=%lld -128=%d extreme=%d [%lld,%lld]: got %.9g want %.9g (acc %lld)",
                  ref::name(out_dt), (long long)s.m, (long long)s.k, (long long)s.n,
                  (long long)p.header.panel, allow_minus128, extreme, (long long)r, (long long)j,
                  got, want, (long long)acc);
      }
    }
    for (std::int64_t j = s.n; j < os; ++j)
      CHECK_MSG(o.get(r * os + j) == -77.0, "int8: wrote past n");
  }
}

}  // namespace

RVVK_TEST(int8_linear_exact) {
  ref::Rng rng(47);
  int case_no = 0;
  const DType outs[] = {DType::kF32, DType::kBF16, DType::kF16};
  for (const Shape& s : shapes(1e6)) {
    if (s.m * s.k * s.n > 1e6) {  // the big decode shapes: exact sums, fp32 out
      check_int8(ctx, rng, s, DType::kF32, false, false, true, case_no++);
      continue;
    }
    check_int8(ctx, rng, s, DType::kF32, case_no % 2 == 0, false, true, case_no);
    check_int8(ctx, rng, s, outs[case_no % 3], case_no % 3 == 0, false, false, case_no);
    ++case_no;
  }
  // Largest magnitudes: K = 8960 products of 127 * -128 (and -128 * -128, the one pair
  // that overflows int16 when summed) reach 1.5e8, past int16, fp16 and fp32 exactness.
  for (std::int64_t m : {1, 3, 7, 13}) {
    for (bool m128 : {false, true}) {
      check_int8(ctx, rng, {m, 8960, 37}, DType::kF32, m128, true, true, case_no++);
    }
  }
}
