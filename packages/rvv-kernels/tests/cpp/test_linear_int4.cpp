// INT4 linear layers (pack_int4_weight_layout, pack_int4_weight, int4_linear): the packed
// layout byte for byte, W4A8 bit-exactly against a reference with int64 group sums and
// Int4LinearArgs' fp32 order (bias, then per group (float(acc) * a_scale) * scale), W4A16
// against a double-precision reference. Shapes: K, N in {1, 7, 16, 17, 255, 1536} with
// group sizes 32, 64, 128 and K (and a few odd boundaries: groups of 2 and 34, partial
// last groups), M in {1, 2, 5, 64, 300} plus every register-block size 1..9 (products
// capped to bound emulation time), strided rows, foreign panel widths, nibbles, zero
// points (0..16) and activations at their extremes, bf16 / fp16 activations from 1e-30 to
// 1e5 and rows of zeros (W4A16's fp16 kernel with Zvfh).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "harness.h"
#include "reference.h"

using rvvk::DType;

namespace {

struct Shape {
  std::int64_t m, k, n, group;
};

// The shape matrix with M x K x N capped (`budget` multiply-adds per case); each (K, N, M)
// takes the next of K's group sizes in turn (32, 64, 128 below K, and K itself).
std::vector<Shape> shapes(double budget) {
  constexpr std::int64_t kSizes[] = {1, 7, 16, 17, 255, 1536};
  constexpr std::int64_t kRows[] = {1, 2, 5, 64, 300};
  std::vector<Shape> out;
  int turn = 0;
  for (std::int64_t k : kSizes) {
    std::vector<std::int64_t> groups;
    for (std::int64_t g : {32, 64, 128})
      if (g < k) groups.push_back(g);
    groups.push_back(k);
    for (std::int64_t n : kSizes)
      for (std::int64_t m : kRows)
        if (static_cast<double>(m) * k * n <= budget)
          out.push_back({m, k, n, groups[static_cast<std::size_t>(turn++) % groups.size()]});
  }
  for (std::int64_t m : {3, 4, 6, 7, 8, 9, 13}) out.push_back({m, 70, 33, 34});  // every block
  out.push_back({2, 7, 9, 2});      // groups of one byte row, a padded last nibble
  out.push_back({5, 255, 40, 34});  // groups past the int16 strip, a partial odd last group
  out.push_back({1, 1536, 8960, 128});  // Qwen2.5-1.5B's MLP up projection at decode
  return out;
}

// Aligned storage for a packed int4 weight.
struct Packed {
  std::vector<std::uint32_t> words;
  rvvk::PackedInt4Header header;
  void* data() { return words.data(); }
};

Packed pack(const std::vector<std::uint8_t>& q, std::int64_t n, std::int64_t k, std::int64_t group,
            std::int64_t panel) {
  Packed p;
  rvvk::pack_int4_weight_layout(n, k, group, &p.header);
  if (panel > 0) {  // a weight packed for another CPU: the kernels must still be right
    p.header.panel = panel;
    p.header.bytes = 64 + rvvk::int4_linear_tasks(p.header) * panel * (p.header.k_padded / 2);
  }
  p.words.assign(static_cast<std::size_t>(p.header.bytes + 3) / 4, 0xdeadbeefu);
  rvvk::pack_int4_weight(p.header, q.data(), k, p.data());
  return p;
}

// The quantised weight, its groups' scales and zero points, random or at the extremes.
struct Weight {
  std::vector<std::uint8_t> q, zeros;
  std::vector<float> scales;
};

Weight make_weight(ref::Rng& rng, const Shape& s, bool extreme, bool unit_scales) {
  const std::int64_t groups = (s.k + s.group - 1) / s.group;
  Weight w;
  w.q.resize(static_cast<std::size_t>(s.n * s.k));
  w.zeros.resize(static_cast<std::size_t>(groups * s.n));
  w.scales.resize(w.zeros.size());
  for (std::size_t i = 0; i < w.q.size(); ++i) {
    w.q[i] = static_cast<std::uint8_t>(extreme ? (i % 5 == 3 ? 0 : 15) : rng.next() % 16);
  }
  for (std::size_t i = 0; i < w.zeros.size(); ++i) {
    w.zeros[i] = static_cast<std::uint8_t>(extreme ? (i % 2 ? 15 : 0) : rng.next() % 16);
    w.scales[i] = unit_scales ? 1.0f : static_cast<float>(rng.uniform(1e-3, 2e-2));
  }
  return w;
}

rvvk::Int4LinearArgs base_args(const Shape& s, Packed& p, const Weight& w, ref::Buffer& b,
                               bool with_bias, ref::Buffer& o, std::int64_t os) {
  rvvk::Int4LinearArgs a;
  a.m = s.m;
  a.packed = p.data();
  a.scales = w.scales.data();
  a.zeros = w.zeros.data();
  a.bias_dtype = b.dtype;
  a.bias = with_bias ? b.data() : nullptr;
  a.out_dtype = o.dtype;
  a.out = o.data();
  a.out_stride = os;
  return a;
}

// Runs int4_linear over two task ranges, as a caller splitting N over threads would.
void run(const rvvk::Int4LinearArgs& a, const Packed& p) {
  const std::int64_t tasks = rvvk::int4_linear_tasks(p.header);
  rvvk::int4_linear(a, 0, tasks / 3);
  rvvk::int4_linear(a, tasks / 3, tasks);
}

// Foreign panel widths on every 4th case: 3 channels, or half a vector plus one.
std::int64_t foreign_panel(int case_no, unsigned vlen_bits) {
  return case_no % 4 != 3 ? 0 : case_no % 8 == 3 ? 3 : vlen_bits / 16 + 1;
}

void check_w4a8(rvvk_test::Context& ctx, ref::Rng& rng, const Shape& s, DType out_dt,
                bool allow_minus128, bool extreme, bool unit_scales, int case_no) {
  const bool strided = case_no % 3 == 1, with_bias = case_no % 2 == 0;
  const std::int64_t as = s.k + (strided ? 5 : 0), os = s.n + (strided ? 1 : 0);
  const std::int64_t groups = (s.k + s.group - 1) / s.group;
  std::vector<std::int8_t> a(static_cast<std::size_t>(s.m * as), 99);  // 99: stride padding
  const int lo = allow_minus128 ? -128 : -127;
  for (std::int64_t r = 0; r < s.m; ++r) {
    for (std::int64_t k = 0; k < s.k; ++k) {
      a[r * as + k] = static_cast<std::int8_t>(
          extreme ? (k % 7 == 6 ? 127 : lo) : lo + static_cast<int>(rng.next() % (128 - lo)));
    }
  }
  const Weight w = make_weight(rng, s, extreme, unit_scales);
  std::vector<float> sa(static_cast<std::size_t>(s.m));
  for (auto& v : sa) v = unit_scales ? 1.0f : static_cast<float>(rng.uniform(1e-3, 2e-2));
  ref::Buffer b(DType::kF32, s.n), o(out_dt, s.m * os);
  for (std::size_t j = 0; j < b.size(); ++j) b.set(j, rng.uniform(-1, 1));
  for (std::size_t j = 0; j < o.size(); ++j) o.set(j, -77.0);
  Packed p = pack(w.q, s.n, s.k, s.group, foreign_panel(case_no, ctx.vlen_bits));
  rvvk::Int4LinearArgs args = base_args(s, p, w, b, with_bias, o, os);
  args.a = a.data();
  args.a_stride = as;
  args.a_scales = sa.data();
  run(args, p);
  int bad = 0;
  for (std::int64_t r = 0; r < s.m; ++r) {
    for (std::int64_t j = 0; j < s.n; ++j) {
      // Int4LinearArgs' order in fp32: the bias, then per group the exact sum rounded to
      // fp32, times the row's scale, times the group's scale, added (separate statements:
      // no FMA contraction).
      float y = with_bias ? static_cast<float>(b.get(j)) : 0.0f;
      std::int64_t acc_last = 0;
      for (std::int64_t g = 0; g < groups; ++g) {
        std::int64_t acc = 0;
        const std::int64_t z = w.zeros[g * s.n + j];
        for (std::int64_t k = g * s.group; k < std::min(s.k, (g + 1) * s.group); ++k) {
          acc += std::int64_t{a[r * as + k]} * (std::int64_t{w.q[j * s.k + k]} - z);
        }
        float t = static_cast<float>(acc);
        t = t * sa[r];
        t = t * w.scales[g * s.n + j];
        y = y + t;
        acc_last = acc;
      }
      const double want = ref::round_to(out_dt, y), got = o.get(r * os + j);
      if (!(got == want) && bad++ < 3) {
        CHECK_MSG(false, "w4a8 out=%s m=%lld k=%lld n=%lld g=%lld panel=%lld -128=%d extreme=%d [%lld,%lld]: got %.9g want %.9g (last group acc %lld)",
                  ref::name(out_dt), (long long)s.m, (long long)s.k, (long long)s.n,
                  (long long)s.group, (long long)p.header.panel, allow_minus128, extreme,
                  (long long)r, (long long)j, got, want, (long long)acc_last);
      }
    }
    for (std::int64_t j = s.n; j < os; ++j)
      CHECK_MSG(o.get(r * os + j) == -77.0, "w4a8: wrote past n at row %lld", (long long)r);
  }
}

// Activations of check_w4a16: uniform in [-1, 1]; magnitudes spread over 10^-30..10^5
// (bf16) or 10^-8..6 10^4 (fp16) in every row; rows alternately tiny (~1e-30, bf16; fp16:
// its subnormals) and large (~1e5, bf16; fp16: 6e4) with every third row all zero; +-1.
enum class XMode { kUniform, kWide, kRowScales, kExtreme };

double activation(ref::Rng& rng, XMode mode, DType x_dt, std::int64_t row, std::int64_t i) {
  const bool f16 = x_dt == DType::kF16;
  switch (mode) {
    case XMode::kUniform:
      return rng.uniform(-1, 1);
    case XMode::kWide: {
      const double mag = std::pow(10.0, f16 ? rng.uniform(-8, 4.7) : rng.uniform(-30, 5));
      return rng.next() % 2 ? mag : -mag;
    }
    case XMode::kRowScales:
      if (row % 3 == 1) return 0.0;
      return rng.uniform(-1, 1) * (row % 2 ? (f16 ? 6e4 : 1e5) : (f16 ? 3e-5 : 1e-30));
    case XMode::kExtreme:
      return i % 3 ? 1.0 : -1.0;
  }
  return 0.0;
}

// W4A16 against a double-precision reference. zero16: zero points 16 and 0 on every fifth
// group (GPTQ's stored zero + 1 reaches 16).
void check_w4a16(rvvk_test::Context& ctx, ref::Rng& rng, const Shape& s, DType x_dt, DType out_dt,
                 DType bias_dt, XMode mode, int case_no, bool zero16 = false) {
  const bool strided = case_no % 3 == 1, with_bias = case_no % 2 == 0;
  const std::int64_t xs = s.k + (strided ? 3 : 0), os = s.n + (strided ? 2 : 0);
  const std::int64_t groups = (s.k + s.group - 1) / s.group;
  ref::Buffer x(x_dt, s.m * xs), b(bias_dt, s.n), o(out_dt, s.m * os);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x.set(i, activation(rng, mode, x_dt, static_cast<std::int64_t>(i) / xs, static_cast<std::int64_t>(i)));
  }
  for (std::size_t j = 0; j < b.size(); ++j) b.set(j, rng.uniform(-1, 1));
  for (std::size_t j = 0; j < o.size(); ++j) o.set(j, -77.0);
  Weight w = make_weight(rng, s, mode == XMode::kExtreme, false);
  if (zero16) {
    for (std::size_t i = 0; i < w.zeros.size(); i += 5) w.zeros[i] = 16;
    for (std::size_t i = 1; i < w.zeros.size(); i += 5) w.zeros[i] = 0;
  }
  Packed p = pack(w.q, s.n, s.k, s.group, foreign_panel(case_no, ctx.vlen_bits));
  rvvk::Int4LinearArgs args = base_args(s, p, w, b, with_bias, o, os);
  args.x_dtype = x_dt;
  args.x = x.data();
  args.x_stride = xs;
  run(args, p);
  int bad = 0;
  for (std::int64_t r = 0; r < s.m; ++r) {
    double amax = 0;
    for (std::int64_t k = 0; k < s.k; ++k) amax = std::max(amax, std::fabs(x.get(r * xs + k)));
    for (std::int64_t j = 0; j < s.n; ++j) {
      double want = with_bias ? b.get(j) : 0.0, mag = std::fabs(want), hmag = mag, dmag = 0;
      for (std::int64_t g = 0; g < groups; ++g) {
        double sum = 0, gmag = 0, ghmag = 0, gdmag = 0;
        const double z = w.zeros[g * s.n + j], sc = w.scales[g * s.n + j];
        for (std::int64_t k = g * s.group; k < std::min(s.k, (g + 1) * s.group); ++k) {
          const double xv = x.get(r * xs + k), q = w.q[j * s.k + k];
          sum += xv * (q - z);
          gmag += std::fabs(xv * (q - z));
          ghmag += std::fabs(xv) * (q + z);
          gdmag += std::fabs(q - z);
        }
        want += sc * sum;
        mag += sc * gmag;
        hmag += sc * ghmag;
        dmag += sc * gdmag;
      }
      const double steps = static_cast<double>(std::min(s.group, s.k) + groups);
      double tol;
      if (x_dt == DType::kF32) {
        // fp32 activations (the fp32 kernel on every variant): a group's sum rounds at each
        // of its <= group_size steps, then one scale product and one add per group (errors
        // <= (group_size + groups + 2) u of the running magnitudes, u = 2^-24), then one
        // rounding to the output dtype.
        tol = (steps + 2) * 0x1p-24 * mag;
      } else {
        // bf16 / fp16 activations: with Zvfh (linear_int4.cpp's w4a16_half) each row is
        // x' = fp16(x 2^e) with max|x'| in [2^14, 2^15) (2^e <= 2^126), so each x' is off
        // by <= 2^-25 (in x' units; 0 for bf16 down to max|x| 2^-31): in x units
        // 2^-25 2^-e <= 2^-25 max(max|x| 2^-14, 2^-126), times sum_g scale |q - z|. The
        // products x' q are exact; S_g = sum x' q rounds at each of its <= group_size
        // steps (<= group_size u sum |x'| q), X_g once (z u sum |x'|), S_g - z X_g once,
        // scale * that added once per group, y' 2^-e + bias once: <= (group_size +
        // groups + 3) u (|bias| + sum_g scale sum_k |x_k| (q_k + z_g)), plus 2^-149 for
        // an fp32 subnormal result, then the output rounding. The fp32 kernel (the other
        // variants) stays within this bound, as |q - z| <= q + z.
        const double step = std::max(amax * 0x1p-14, 0x1p-126);
        tol = (steps + 3) * 0x1p-24 * hmag + 0x1p-25 * step * dmag + 0x1p-149;
      }
      tol += ref::ulp(out_dt, want);
      const double got = o.get(r * os + j);
      if (!(std::fabs(got - want) <= tol) && bad++ < 3) {
        CHECK_MSG(false, "w4a16 x=%s out=%s bias=%s mode=%d z16=%d m=%lld k=%lld n=%lld g=%lld panel=%lld [%lld,%lld]: got %.9g want %.9g tol %.3g",
                  ref::name(x_dt), ref::name(out_dt), ref::name(bias_dt), static_cast<int>(mode),
                  zero16, (long long)s.m, (long long)s.k, (long long)s.n, (long long)s.group,
                  (long long)p.header.panel, (long long)r, (long long)j, got, want, tol);
      }
    }
    for (std::int64_t j = s.n; j < os; ++j)
      CHECK_MSG(o.get(r * os + j) == -77.0, "w4a16: wrote past n at row %lld", (long long)r);
  }
}

}  // namespace

RVVK_TEST(pack_int4_weight_layout_and_bytes) {
  for (std::int64_t k : {1, 7, 16, 17, 255}) {
    for (std::int64_t n : {1, 7, 40}) {
      const std::int64_t group = k % 2 ? k : 2;
      rvvk::PackedInt4Header h;
      rvvk::pack_int4_weight_layout(n, k, group, &h);
      const std::int64_t panel = ctx.vlen_bits / 8, kp = k + (k & 1);
      CHECK_MSG(h.magic == rvvk::kPackedInt4Magic && h.version == rvvk::kPackedInt4Version,
                "bad magic/version");
      CHECK_MSG(h.panel == panel, "panel %lld, want %lld at VLEN %u", (long long)h.panel,
                (long long)panel, ctx.vlen_bits);
      CHECK_MSG(h.n == n && h.k == k && h.k_padded == kp && h.group_size == group, "dims");
      const std::int64_t panels = (n + panel - 1) / panel;
      CHECK_MSG(h.bytes == 64 + panels * panel * kp / 2 && rvvk::int4_linear_tasks(h) == panels,
                "bytes %lld", (long long)h.bytes);
      // Every nibble where PackedInt4Header says, zero padding elsewhere.
      std::vector<std::uint8_t> q(static_cast<std::size_t>(n * k));
      for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<std::uint8_t>((i * 7 + 3) % 16);
      std::vector<std::uint32_t> words(static_cast<std::size_t>(h.bytes + 3) / 4, 0xffffffffu);
      rvvk::pack_int4_weight(h, q.data(), k, words.data());
      const auto* bytes = reinterpret_cast<const std::uint8_t*>(words.data());
      CHECK_MSG(std::memcmp(bytes, &h, sizeof h) == 0, "header not copied");
      int bad = 0;
      for (std::int64_t p = 0; p < panels; ++p) {
        for (std::int64_t kk = 0; kk < kp; ++kk) {
          for (std::int64_t jj = 0; jj < panel; ++jj) {
            const std::int64_t j = p * panel + jj;
            const std::uint8_t byte = bytes[64 + p * panel * kp / 2 + (kk / 2) * panel + jj];
            const int got = kk % 2 ? byte >> 4 : byte & 15;
            const int want = j < n && kk < k ? q[j * k + kk] : 0;
            if (got != want && bad++ < 3) {
              CHECK_MSG(false, "n=%lld k=%lld: q[%lld, %lld] packed as %d, want %d",
                        (long long)n, (long long)k, (long long)j, (long long)kk, got, want);
            }
          }
        }
      }
    }
  }
}

RVVK_TEST(int4_w4a8_exact) {
  ref::Rng rng(53);
  int case_no = 0;
  const DType outs[] = {DType::kF32, DType::kBF16, DType::kF16};
  for (const Shape& s : shapes(6e5)) {
    if (static_cast<double>(s.m) * s.k * s.n > 6e5) {  // the big decode shape: fp32 out
      check_w4a8(ctx, rng, s, DType::kF32, false, false, false, case_no++);
      continue;
    }
    check_w4a8(ctx, rng, s, DType::kF32, case_no % 2 == 0, false, true, case_no);
    check_w4a8(ctx, rng, s, outs[case_no % 3], case_no % 3 == 0, false, false, case_no);
    ++case_no;
  }
  // Extremes: nibbles 0 / 15, zero points 0 / 15, activations -128 (or -127) and 127;
  // K = 8960 in one group passes 2^24, where float(acc) starts to round.
  for (const Shape& s : {Shape{1, 1536, 37, 1536}, Shape{3, 1536, 37, 128}, Shape{7, 8960, 19, 8960},
                         Shape{13, 255, 21, 255}, Shape{2, 8960, 9, 32}}) {
    for (bool m128 : {false, true}) {
      check_w4a8(ctx, rng, s, DType::kF32, m128, true, true, case_no++);
      check_w4a8(ctx, rng, s, DType::kF32, m128, true, false, case_no++);
    }
  }
}

RVVK_TEST(int4_w4a16_matches_reference) {
  ref::Rng rng(59);
  int case_no = 0;
  const DType dts[] = {DType::kF32, DType::kBF16, DType::kF16};
  for (const Shape& s : shapes(3e5)) {
    const DType x = dts[case_no % 3], out = dts[(case_no / 3) % 3], bias = dts[(case_no / 9) % 3];
    check_w4a16(ctx, rng, s, x, out, bias, XMode::kUniform, case_no++);
  }
  for (const Shape& s : {Shape{1, 1536, 37, 128}, Shape{6, 255, 21, 255}, Shape{2, 8960, 9, 8960}}) {
    check_w4a16(ctx, rng, s, DType::kF32, DType::kF32, DType::kF32, XMode::kExtreme, case_no++);
  }
}

// bf16 / fp16 activations (the fp16-multiply kernel with Zvfh, the fp32 one elsewhere):
// the shape matrix with activations over wide ranges and zero rows, zero points 0 and 16.
RVVK_TEST(int4_w4a16_half_activations) {
  ref::Rng rng(67);
  int case_no = 0;
  const XMode modes[] = {XMode::kWide, XMode::kRowScales, XMode::kUniform};
  for (const Shape& s : shapes(2e5)) {
    const DType x = case_no % 2 ? DType::kF16 : DType::kBF16;
    const XMode mode = modes[case_no % 3];
    // Large activations overflow an fp16 output: fp32 or bf16 there.
    const DType out = mode == XMode::kUniform && case_no % 4 == 1 ? DType::kF16
                      : case_no % 4 == 2                           ? DType::kBF16
                                                                   : DType::kF32;
    check_w4a16(ctx, rng, s, x, out, DType::kF32, mode, case_no, case_no % 2 == 0);
    ++case_no;
  }
  for (const Shape& s : {Shape{1, 1536, 37, 128}, Shape{6, 255, 21, 255}, Shape{2, 8960, 9, 8960}}) {
    for (DType x : {DType::kBF16, DType::kF16}) {
      check_w4a16(ctx, rng, s, x, DType::kF32, DType::kF32, XMode::kExtreme, case_no++, true);
    }
  }
}

RVVK_TEST(int4_linear_m0_is_noop) {
  const Shape s{0, 16, 7, 16};
  ref::Rng rng(61);
  const Weight w = make_weight(rng, s, false, false);
  Packed p = pack(w.q, s.n, s.k, s.group, 0);
  ref::Buffer b(DType::kF32, s.n), o(DType::kF32, 4);
  for (std::size_t j = 0; j < o.size(); ++j) o.set(j, -77.0);
  rvvk::Int4LinearArgs a = base_args(s, p, w, b, true, o, s.n);
  std::vector<std::int8_t> act(16, 1);
  std::vector<float> sa(1, 1.0f);
  a.a = act.data();
  a.a_stride = 16;
  a.a_scales = sa.data();
  run(a, p);
  a.a = nullptr;
  a.x = sa.data();
  run(a, p);
  const std::uint16_t bf16_one = 0x3f80;
  std::vector<std::uint16_t> xh(16, bf16_one);
  a.x_dtype = DType::kBF16;
  a.x = xh.data();
  run(a, p);
  for (std::size_t j = 0; j < o.size(); ++j) CHECK_MSG(o.get(j) == -77.0, "m = 0 wrote output");
}
