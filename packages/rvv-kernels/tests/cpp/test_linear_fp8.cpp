// FP8 e4m3 W8A16 block-scaled linear (fp8_linear) against a double-precision reference
// whose fp8 values come from this file's own scalar decoder (checked against e4m3fn's
// table). Shapes: K and N in {1, 7, 16, 17, 255, 1536}, M in {1, 2, 5, 64, 300} (the
// largest products left out to bound emulation time) plus every register-block size,
// block_k in {1, 7, 128}, strided rows, foreign panel widths, two task ranges.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "harness.h"
#include "reference.h"

using rvvk::DType;

namespace {

// e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal
// (m * 2^-9); 0x7f and 0xff are NaN, there are no infinities.
double fp8_value(std::uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  if (e == 15 && m == 7) return std::nan("");
  return sign * (e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10));
}
bool is_nan_code(std::uint8_t b) { return (b & 0x7f) == 0x7f; }

struct Fp8Shape {
  std::int64_t m, k, n, block_k;
};

// Aligned storage for a packed weight.
struct Packed {
  std::vector<std::uint32_t> words;
  rvvk::PackedWeightHeader header;
  const void* data() const { return words.data(); }
};

Packed pack_fp8(const std::vector<std::uint8_t>& w, std::int64_t n, std::int64_t k,
                std::int64_t panel) {
  Packed p;
  rvvk::pack_weight_layout(DType::kFP8E4M3, n, k, &p.header);
  if (panel > 0) {  // a weight packed for another CPU: the kernel must still be right
    p.header.panel = panel;
    p.header.bytes =
        rvvk::kPackedWeightHeaderBytes + rvvk::linear_tasks(p.header) * panel * p.header.k_padded;
  }
  p.words.assign(static_cast<std::size_t>(p.header.bytes + 3) / 4, 0xdeadbeefu);
  rvvk::pack_weight(p.header, w.data(), k, p.words.data());
  return p;
}

// Runs fp8_linear for one case and compares with the double reference
// out[i, j] = bias[j] + sum_b scales[b, j] * sum_{k in b} x[i, k] * fp8(w[j, k]).
// x_row_scale[i] multiplies row i's random values (to reach the edges of the exact range).
void check_fp8(rvvk_test::Context& ctx, ref::Rng& rng, const Fp8Shape& s, DType x_dt,
               DType out_dt, DType bias_dt, bool with_bias, bool strided, std::int64_t panel,
               const std::vector<std::uint8_t>* w_in = nullptr,
               const std::vector<double>* x_in = nullptr, double scale_lo = 1e-3,
               double scale_hi = 2e-2) {
  const std::int64_t xs = s.k + (strided ? 3 : 0), os = s.n + (strided ? 2 : 0);
  const std::int64_t blocks = (s.k + s.block_k - 1) / s.block_k;
  ref::Buffer x(x_dt, static_cast<std::size_t>(s.m * xs));
  ref::Buffer b(bias_dt, static_cast<std::size_t>(s.n));
  ref::Buffer o(out_dt, static_cast<std::size_t>(s.m * os));
  for (std::int64_t r = 0; r < s.m; ++r)
    for (std::int64_t k = 0; k < s.k; ++k)
      x.set(static_cast<std::size_t>(r * xs + k),
            x_in ? (*x_in)[static_cast<std::size_t>(r * s.k + k)] : rng.uniform(-1, 1));
  for (std::size_t j = 0; j < b.size(); ++j) b.set(j, rng.uniform(-1, 1));
  for (std::size_t j = 0; j < o.size(); ++j) o.set(j, -77.0);
  std::vector<std::uint8_t> w;
  if (w_in) {
    w = *w_in;
  } else {
    w.resize(static_cast<std::size_t>(s.n * s.k));
    for (auto& v : w) {
      do v = static_cast<std::uint8_t>(rng.next() >> 56);
      while (is_nan_code(v));
    }
  }
  std::vector<float> scales(static_cast<std::size_t>(blocks * s.n));
  for (auto& v : scales) v = static_cast<float>(rng.uniform(scale_lo, scale_hi));
  const Packed p = pack_fp8(w, s.n, s.k, panel);
  rvvk::Fp8LinearArgs a;
  a.m = s.m;
  a.x_dtype = x_dt;
  a.x = x.data();
  a.x_stride = xs;
  a.packed = p.data();
  a.scales = scales.data();
  a.block_k = s.block_k;
  a.bias_dtype = bias_dt;
  a.bias = with_bias ? b.data() : nullptr;
  a.out_dtype = out_dt;
  a.out = o.data();
  a.out_stride = os;
  // Two task ranges, as a caller splitting N over threads would.
  const std::int64_t tasks = rvvk::linear_tasks(p.header), part = tasks / 3;
  rvvk::fp8_linear(a, 0, part);
  rvvk::fp8_linear(a, part, tasks);
  std::vector<double> wd(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) wd[i] = fp8_value(w[i]);
  int bad = 0;
  std::vector<double> xr(static_cast<std::size_t>(s.k));
  for (std::int64_t r = 0; r < s.m && bad < 3; ++r) {
    for (std::int64_t k = 0; k < s.k; ++k) xr[k] = x.get(static_cast<std::size_t>(r * xs + k));
    for (std::int64_t j = 0; j < s.n; ++j) {
      double want = 0, mag = 0;
      for (std::int64_t bl = 0; bl < blocks; ++bl) {
        double sum = 0, sum_mag = 0;
        for (std::int64_t k = bl * s.block_k; k < std::min(s.k, (bl + 1) * s.block_k); ++k) {
          sum += xr[k] * wd[static_cast<std::size_t>(j * s.k + k)];
          sum_mag += std::fabs(xr[k] * wd[static_cast<std::size_t>(j * s.k + k)]);
        }
        const double sc = scales[static_cast<std::size_t>(bl * s.n + j)];
        want += sc * sum;
        mag += std::fabs(sc) * sum_mag;
      }
      if (with_bias) {
        want += b.get(static_cast<std::size_t>(j));
        mag += std::fabs(b.get(static_cast<std::size_t>(j)));
      }
      // fp32 arithmetic: a product enters its block sum through at most block_k fused
      // multiply-adds, the block sum enters the total through at most `blocks` more, then
      // the bias add: each rounds once (u = 2^-24 relative to the running magnitude), so
      // |error| <= (block_k + blocks + 1) u mag (first order, doubled for slack), plus the
      // rounding to the output dtype.
      const double tol =
          2.0 * static_cast<double>(std::min(s.block_k, s.k) + blocks + 1) * 0x1p-24 * mag +
          ref::ulp(out_dt, want);
      const double got = o.get(static_cast<std::size_t>(r * os + j));
      if (!(std::fabs(got - want) <= tol) && bad++ < 3) {
        CHECK_MSG(false,
                  "fp8 x=%s out=%s m=%lld k=%lld n=%lld block_k=%lld panel=%lld bias=%d "
                  "[%lld,%lld]: got %.9g want %.9g (tol %.3g)",
                  ref::name(x_dt), ref::name(out_dt), (long long)s.m, (long long)s.k,
                  (long long)s.n, (long long)s.block_k, (long long)p.header.panel, with_bias,
                  (long long)r, (long long)j, got, want, tol);
      }
    }
    for (std::int64_t j = s.n; j < os; ++j)
      CHECK_MSG(o.get(static_cast<std::size_t>(r * os + j)) == -77.0,
                "fp8: wrote past n at row %lld col %lld", (long long)r, (long long)j);
  }
}

}  // namespace

RVVK_TEST(fp8_decoder_matches_e4m3fn_table) {
  // The reference decoder against known e4m3fn values.
  CHECK_MSG(fp8_value(0x7e) == 448.0, "0x7e: %g", fp8_value(0x7e));
  CHECK_MSG(fp8_value(0xfe) == -448.0, "0xfe: %g", fp8_value(0xfe));
  CHECK_MSG(fp8_value(0x01) == 0x1p-9, "0x01: %g", fp8_value(0x01));
  CHECK_MSG(fp8_value(0x07) == 7 * 0x1p-9, "0x07: %g", fp8_value(0x07));
  CHECK_MSG(fp8_value(0x08) == 0x1p-6, "0x08: %g", fp8_value(0x08));
  CHECK_MSG(fp8_value(0x38) == 1.0, "0x38: %g", fp8_value(0x38));
  CHECK_MSG(fp8_value(0x40) == 2.0, "0x40: %g", fp8_value(0x40));
  CHECK_MSG(fp8_value(0x80) == 0.0 && std::signbit(fp8_value(0x80)), "0x80 is not -0");
  CHECK_MSG(std::isnan(fp8_value(0x7f)) && std::isnan(fp8_value(0xff)), "NaN codes");
  // ... and against the project's shared reference decoder, every code.
  for (int c = 0; c < 256; ++c) {
    if (is_nan_code(static_cast<std::uint8_t>(c))) continue;
    const auto code = static_cast<std::uint8_t>(c);
    const double a = fp8_value(code), r = ref::decode_e4m3(code);
    CHECK_MSG(a == r, "code 0x%02x: %g vs reference.h %g", c, a, r);
  }
}

RVVK_TEST(fp8_linear_decodes_every_code_exactly) {
  // W[j, k] = code (j + 3 k) % 256 skipping the NaN codes, x = one-hot rows with the value
  // 2^-61, 1 or 2^63 (the ends of the exact activation range), unit scales: each output
  // is one code's value times x, exactly (one product, no rounding).
  std::vector<std::uint8_t> codes;
  for (int c = 0; c < 256; ++c)
    if (!is_nan_code(static_cast<std::uint8_t>(c))) codes.push_back(static_cast<std::uint8_t>(c));
  const std::int64_t k = static_cast<std::int64_t>(codes.size()), n = 19;
  std::vector<std::uint8_t> w(static_cast<std::size_t>(n * k));
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t kk = 0; kk < k; ++kk)
      w[static_cast<std::size_t>(j * k + kk)] = codes[static_cast<std::size_t>((j + 3 * kk) % k)];
  for (double xv : {1.0, 0x1p-61, 0x1p63}) {
    std::vector<float> x(static_cast<std::size_t>(k * k), 0.0f);
    std::vector<float> scales(static_cast<std::size_t>(n), 1.0f);
    for (std::int64_t r = 0; r < k; ++r)
      x[static_cast<std::size_t>(r * k + r)] = static_cast<float>(xv);
    std::vector<float> o(static_cast<std::size_t>(k * n), -77.0f);
    const Packed p = pack_fp8(w, n, k, 0);
    rvvk::Fp8LinearArgs a;
    a.m = k;
    a.x = x.data();
    a.x_stride = k;
    a.packed = p.data();
    a.scales = scales.data();
    a.block_k = k;
    a.out = o.data();
    a.out_stride = n;
    rvvk::fp8_linear(a, 0, rvvk::linear_tasks(p.header));
    int bad = 0;
    for (std::int64_t r = 0; r < k; ++r)
      for (std::int64_t j = 0; j < n; ++j) {
        const std::uint8_t code = w[static_cast<std::size_t>(j * k + r)];
        const double want = fp8_value(code) * xv, got = o[static_cast<std::size_t>(r * n + j)];
        if (got != want && bad++ < 3)
          CHECK_MSG(false, "code 0x%02x times %g: got %.9g want %.9g", code, xv, got, want);
      }
  }
}

RVVK_TEST(fp8_linear_matches_reference) {
  ref::Rng rng(53);
  constexpr std::int64_t kSizes[] = {1, 7, 16, 17, 255, 1536};
  constexpr std::int64_t kRowsList[] = {1, 2, 5, 64, 300};
  constexpr std::int64_t kBlocks[] = {1, 7, 128};
  std::vector<Fp8Shape> work;
  int i = 0;
  for (std::int64_t k : kSizes)
    for (std::int64_t n : kSizes)
      for (std::int64_t m : kRowsList) {
        const double macs = static_cast<double>(m) * k * n;
        if (macs > 1.2e6) continue;
        if (macs <= 2e4) {
          for (std::int64_t bk : kBlocks) work.push_back({m, k, n, bk});
        } else {
          work.push_back({m, k, n, kBlocks[i++ % 3]});
        }
      }
  for (std::int64_t m : {3, 4, 6, 7, 8, 9, 13}) work.push_back({m, 33, 70, 7});  // every block
  work.push_back({1, 1536, 1536, 128});
  work.push_back({2, 1536, 1536, 128});
  work.push_back({1, 1536, 255, 1});
  work.push_back({300, 255, 17, 128});
  const DType xs[] = {DType::kBF16, DType::kF32, DType::kF16};
  const DType outs[] = {DType::kBF16, DType::kF32, DType::kF16, DType::kF32};
  int case_no = 0;
  for (const Fp8Shape& s : work) {
    // Every 5th case: a panel width this CPU would not choose (odd, or 3 vectors).
    const std::int64_t panel =
        case_no % 5 == 4 ? (case_no % 10 == 4 ? 5 : 3 * ctx.vlen_bits / 8) : 0;
    check_fp8(ctx, rng, s, xs[case_no % 3], outs[case_no % 4],
              case_no % 3 == 2 ? DType::kBF16 : DType::kF32, case_no % 2 == 0,
              case_no % 3 == 1, panel);
    ++case_no;
  }
}

RVVK_TEST(fp8_linear_edges) {
  ref::Rng rng(59);
  // m = 0 writes nothing.
  {
    std::vector<std::uint8_t> w(7 * 5, 0x38);
    const Packed p = pack_fp8(w, 7, 5, 0);
    std::vector<float> scales(7, 1.0f), o(7, -77.0f), x(5, 1.0f);
    rvvk::Fp8LinearArgs a;
    a.m = 0;
    a.x = x.data();
    a.x_stride = 5;
    a.packed = p.data();
    a.scales = scales.data();
    a.block_k = 128;
    a.out = o.data();
    a.out_stride = 7;
    rvvk::fp8_linear(a, 0, rvvk::linear_tasks(p.header));
    for (float v : o) CHECK_MSG(v == -77.0f, "m = 0 wrote %g", v);
  }
  // Large and small activations and scales (the exact range's interior), fp32 out.
  for (const double xv : {0x1p-40, 0x1p40}) {
    const Fp8Shape s{3, 17, 9, 7};
    std::vector<double> x(static_cast<std::size_t>(s.m * s.k));
    for (auto& v : x) v = rng.uniform(-1, 1) * xv;
    check_fp8(ctx, rng, s, DType::kF32, DType::kF32, DType::kF32, false, false, 0, nullptr, &x,
              1e-6, 1e3);
  }
}
