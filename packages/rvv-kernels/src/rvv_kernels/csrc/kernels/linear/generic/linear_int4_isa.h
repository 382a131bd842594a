// INT4 linear micro-kernels in plain C++ (every variant without an ISA folder of its own:
// portable, x86): the same arithmetic as the RVV kernels (rvv/linear_int4_isa.h) over
// strips of kStrip channels held in arrays. W4A8 gives the RVV kernels' results bit for
// bit (exact integer sums, then the same fp32 operations in the same order).
// Included by linear_int4.cpp after Int4Ctx.
#pragma once

#include <algorithm>
#include <cstdint>

#include "rvvk/detail/scalar.h"

namespace rvvk::RVVK_NS {
namespace int4isa {

constexpr std::int64_t kStrip = 64;

// y[r][0, cw) = bias[n0, n0 + cw) or 0.
inline void init_rows(const Int4Ctx& cx, int mr, std::int64_t n0, std::int64_t cw,
                      float (*y)[kStrip]) {
  for (int r = 0; r < mr; ++r) {
    for (std::int64_t j = 0; j < cw; ++j) y[r][j] = cx.bias ? cx.bias[n0 + j] : 0.0f;
  }
}

template <class OutT>
void store_rows(int mr, std::int64_t cw, float (*y)[kStrip], OutT* out, std::int64_t out_stride) {
  for (int r = 0; r < mr; ++r) {
    for (std::int64_t j = 0; j < cw; ++j) out[r * out_stride + j] = scalar::from_f32<OutT>(y[r][j]);
  }
}

// W4A8 for a block of mr rows (ai: their activations, element (k, i) at ai[k * mr + i],
// k < k_padded) and one panel, written to out columns [n0, min(n0 + panel, n)). sums: the
// rows' group sums (row stride cx.groups); a_scales: the rows' scales.
template <class OutT>
void w4a8_rows(int mr, const Int4Ctx& cx, const std::uint8_t* panel, const std::int8_t* ai,
               const std::int32_t* sums, const float* a_scales, std::int64_t n0, OutT* out,
               std::int64_t out_stride) {
  const std::int64_t nr = cx.panel, cols_left = std::min(nr, cx.n - n0);
  for (std::int64_t c = 0; c < cols_left; c += kStrip) {
    const std::int64_t cw = std::min(kStrip, cols_left - c);
    float y[8][kStrip];
    init_rows(cx, mr, n0 + c, cw, y);
    for (std::int64_t g = 0; g < cx.groups; ++g) {
      std::int32_t acc[8][kStrip] = {};
      for (std::int64_t kb = cx.group_begin(g); kb < cx.group_end(g); ++kb) {
        const std::uint8_t* w = panel + kb * nr + c;
        for (int r = 0; r < mr; ++r) {
          const std::int32_t a0 = ai[2 * kb * mr + r];
          const std::int32_t a1 = ai[(2 * kb + 1) * mr + r];
          for (std::int64_t j = 0; j < cw; ++j) acc[r][j] += a0 * (w[j] & 15) + a1 * (w[j] >> 4);
        }
      }
      const std::uint8_t* z = cx.zeros + g * cx.n + n0 + c;
      const float* s = cx.scales + g * cx.n + n0 + c;
      for (int r = 0; r < mr; ++r) {
        const std::int32_t sg = sums[r * cx.groups + g];
        for (std::int64_t j = 0; j < cw; ++j) {
          // separate statements: no contraction into an FMA (Int4LinearArgs' roundings)
          float t = static_cast<float>(acc[r][j] - static_cast<std::int32_t>(z[j]) * sg);
          t = t * a_scales[r];
          t = t * s[j];
          y[r][j] = y[r][j] + t;
        }
      }
    }
    store_rows(mr, cw, y, out + n0 + c, out_stride);
  }
}

// W4A16 for a block of mr rows (xs: fp32, element (k, i) at xs[k * mr + i]).
template <class OutT>
void w4a16_rows(int mr, const Int4Ctx& cx, const std::uint8_t* panel, const float* xs,
                std::int64_t n0, OutT* out, std::int64_t out_stride) {
  const std::int64_t nr = cx.panel, cols_left = std::min(nr, cx.n - n0);
  for (std::int64_t c = 0; c < cols_left; c += kStrip) {
    const std::int64_t cw = std::min(kStrip, cols_left - c);
    float y[8][kStrip];
    init_rows(cx, mr, n0 + c, cw, y);
    for (std::int64_t g = 0; g < cx.groups; ++g) {
      const std::uint8_t* z = cx.zeros + g * cx.n + n0 + c;
      float sg[8][kStrip] = {};
      for (std::int64_t kb = cx.group_begin(g); kb < cx.group_end(g); ++kb) {
        const std::uint8_t* w = panel + kb * nr + c;
        for (int r = 0; r < mr; ++r) {
          const float x0 = xs[2 * kb * mr + r], x1 = xs[(2 * kb + 1) * mr + r];
          for (std::int64_t j = 0; j < cw; ++j) {
            const float lo = static_cast<float>((w[j] & 15) - z[j]);
            const float hi = static_cast<float>((w[j] >> 4) - z[j]);
            sg[r][j] += x0 * lo;
            sg[r][j] += x1 * hi;
          }
        }
      }
      const float* s = cx.scales + g * cx.n + n0 + c;
      for (int r = 0; r < mr; ++r) {
        for (std::int64_t j = 0; j < cw; ++j) y[r][j] += s[j] * sg[r][j];
      }
    }
    store_rows(mr, cw, y, out + n0 + c, out_stride);
  }
}

}  // namespace int4isa
}  // namespace rvvk::RVVK_NS
