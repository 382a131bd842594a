// Conversions between fp32, bf16 and fp16 through rvvk::convert, which runs the
// vector layer's load/store paths, checked bit-exactly against ref::.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "harness.h"
#include "reference.h"

using rvvk::DType;

namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// Values that stress rounding: every bf16 and fp16 value, the midpoints between
// neighbours (ties) and one fp32 ulp either side, specials, random values.
std::vector<float> interesting_floats() {
  std::vector<float> v;
  auto add_with_neighbours = [&](float x) {
    v.push_back(x);
    v.push_back(std::nextafter(x, INFINITY));
    v.push_back(std::nextafter(x, -INFINITY));
  };
  for (std::uint32_t c = 0; c < 0x7c00; ++c) {
    const double a = ref::decode_f16(static_cast<std::uint16_t>(c));
    const double b = c + 1 == 0x7c00 ? 65536.0 : ref::decode_f16(static_cast<std::uint16_t>(c + 1));
    v.push_back(static_cast<float>(a));
    add_with_neighbours(static_cast<float>((a + b) / 2));
  }
  for (std::uint32_t c = 0; c < 0x7f80; c += 7) {
    const double a = ref::decode_bf16(static_cast<std::uint16_t>(c));
    const double b = ref::decode_bf16(static_cast<std::uint16_t>(c + 1));
    v.push_back(static_cast<float>(a));
    add_with_neighbours(static_cast<float>((a + b) / 2));
  }
  ref::Rng rng(7);
  for (int i = 0; i < 20000; ++i) {
    const double m = rng.uniform(1.0, 2.0);
    const int e = static_cast<int>(rng.next() % 300) - 150;
    v.push_back(static_cast<float>(std::ldexp(m, e)));
  }
  for (float x : {0.0f, INFINITY, NAN, 3.4028235e38f, 1.1754944e-38f, 1e-45f, 65504.0f, 65519.996f,
                  65520.0f, 65536.0f, 5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f})
    v.push_back(x);
  const std::size_t n = v.size();
  for (std::size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  return v;
}

void check_conversion(rvvk_test::Context& ctx, const ref::Buffer& src, DType dst_dtype) {
  const std::size_t n = src.size();
  ref::Buffer dst(dst_dtype, n);
  rvvk::convert(src.dtype, src.bytes.data(), dst_dtype, dst.data(), static_cast<std::int64_t>(n));
  ref::Buffer want(dst_dtype, n);
  for (std::size_t i = 0; i < n; ++i) want.set(i, src.get(i));
  for (std::size_t i = 0; i < n; ++i) {
    const bool ok = std::isnan(want.get(i)) ? std::isnan(dst.get(i)) : dst.raw(i) == want.raw(i);
    CHECK_MSG(ok, "%s -> %s: element %zu (%a): got 0x%x, want 0x%x", ref::name(src.dtype),
              ref::name(dst_dtype), i, src.get(i), dst.raw(i), want.raw(i));
  }
}

}  // namespace

RVVK_TEST(convert_every_16bit_value) {
  for (DType src_dtype : {DType::kBF16, DType::kF16}) {
    ref::Buffer src(src_dtype, 65536);
    for (std::uint32_t c = 0; c < 65536; ++c) {
      const std::uint16_t h = static_cast<std::uint16_t>(c);
      std::memcpy(&src.bytes[c * 2], &h, 2);
    }
    for (DType dst : kTypes) check_conversion(ctx, src, dst);
  }
}

RVVK_TEST(convert_every_8bit_value) {
  for (DType src_dtype : {DType::kFP8E4M3, DType::kFP8E5M2, DType::kI8}) {
    ref::Buffer src(src_dtype, 256 * 3);
    for (std::uint32_t c = 0; c < 256 * 3; ++c) src.bytes[c] = static_cast<std::uint8_t>(c);
    for (DType dst : kTypes) check_conversion(ctx, src, dst);
  }
}

RVVK_TEST(convert_fp32_rounding) {
  const std::vector<float> values = interesting_floats();
  ref::Buffer src(DType::kF32, values.size());
  std::memcpy(src.data(), values.data(), values.size() * 4);
  for (DType dst : kTypes) check_conversion(ctx, src, dst);
}

// Every length up to a few vector lengths, at odd offsets: the tail of each
// strip-mined loop must neither drop nor overrun elements.
RVVK_TEST(convert_lengths_and_bounds) {
  const std::size_t vlmax = ctx.vlen_bits / 32 * 8;
  for (DType s : kTypes) {
    for (DType d : kTypes) {
      for (std::size_t n = 0; n <= 3 * vlmax + 2; ++n) {
        ref::Buffer src(s, n + 3), dst(d, n + 3);
        for (std::size_t i = 0; i < n + 3; ++i) src.set(i, 0.25 * static_cast<double>(i) - 3.0);
        for (std::size_t i = 0; i < n + 3; ++i) dst.set(i, -77.0);
        const std::size_t es = ref::Buffer::elem_size(s), ed = ref::Buffer::elem_size(d);
        rvvk::convert(s, src.bytes.data() + es, d, dst.bytes.data() + ed,
                      static_cast<std::int64_t>(n));
        CHECK_MSG(dst.get(0) == -77.0, "%s->%s n=%zu: wrote before the start", ref::name(s),
                  ref::name(d), n);
        for (std::size_t i = 0; i < n; ++i)
          CHECK_MSG(dst.get(i + 1) == ref::round_to(d, src.get(i + 1)), "%s->%s n=%zu: element %zu",
                    ref::name(s), ref::name(d), n, i);
        CHECK_MSG(dst.get(n + 1) == -77.0 && dst.get(n + 2) == -77.0,
                  "%s->%s n=%zu: wrote past the end", ref::name(s), ref::name(d), n);
      }
    }
  }
}
