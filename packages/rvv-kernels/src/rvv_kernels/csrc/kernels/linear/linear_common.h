// Pieces shared by the linear kernels (linear.cpp, linear_int4.cpp, linear_fp8.cpp):
// activation conversion, the register-block row split and the L2-sized panel groups.
// Included inside namespace rvvk::RVVK_NS (one copy per variant).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "rvvk/detail/dispatch.h"
#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

// Weight bytes per panel group: a group is swept once per row block, so it should
// stay in the L2 (the K1 has 512 KB per 4-core cluster).
constexpr std::int64_t kGroupBytes = 192 * 1024;

// Panels per group for panels of `panel_bytes` bytes (at least 1).
inline std::int64_t panels_per_group(std::int64_t panel_bytes) {
  return std::max<std::int64_t>(1, kGroupBytes / std::max<std::int64_t>(1, panel_bytes));
}

// Converts `n` elements of dtype `dt` (kF32, kBF16, kF16) to fp32.
inline void to_f32(DType dt, const void* src, float* dst, std::int64_t n) {
  using F = vec::F32<4>;
  detail::visit_activation(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* s = static_cast<const T*>(src);
    for (std::int64_t i = 0; i < n;) {
      const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
      F::store(dst + i, F::load(s + i, vl), vl);
      i += static_cast<std::int64_t>(vl);
    }
  });
}

// Up to 8 named accumulators (RVV vectors cannot live in arrays).
#define RVVK_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

// Splits m rows into register blocks: all at once up to 8 (decode: the weights are
// read once), else blocks of `block` rows.
template <class Fn>
void row_blocks(std::int64_t m, int block, Fn&& fn) {
  if (m <= 8) {
    if (m > 0) fn(0, static_cast<int>(m));
    return;
  }
  for (std::int64_t r = 0; r < m; r += block) {
    fn(r, static_cast<int>(std::min<std::int64_t>(block, m - r)));
  }
}

// Runs fn(r, mr, p) for every register block of rows [r, r + mr) (row_blocks) and panel p
// of [pb, pe): panels in groups of `group`, each swept by all row blocks in turn.
template <class Fn>
void for_each_block(std::int64_t group, std::int64_t m, int block, std::int64_t pb,
                    std::int64_t pe, Fn&& fn) {
  for (std::int64_t g = pb; g < pe; g += group) {
    const std::int64_t ge = std::min(pe, g + group);
    row_blocks(m, block, [&](std::int64_t r, int mr) {
      for (std::int64_t p = g; p < ge; ++p) fn(r, mr, p);
    });
  }
}

// The bias ([n], of dtype `dt`) in fp32; empty without one.
inline std::vector<float> bias_f32(const void* bias, DType dt, std::int64_t n) {
  std::vector<float> out;
  if (bias) {
    out.resize(static_cast<std::size_t>(n));
    to_f32(dt, bias, out.data(), n);
  }
  return out;
}

}  // namespace
}  // namespace rvvk::RVVK_NS
