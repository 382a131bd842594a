// The bf16 matrix path's two tile products on AVX512-BF16 (x86_avx512_bf16).
#pragma once

#include "extend_attention_bf16mm_layout.h"

namespace rvvk::RVVK_NS {
namespace {

namespace bf16mm {
struct Tiles {};  // no tile state without AMX

// The tile products by vdpbf16ps: row i of a B tile is one zmm of 16 bf16
// pairs, multiplied by the A operand's pair i broadcast; kRows query rows x
// 32 columns (two tiles) of fp32 accumulators in registers.
constexpr std::int64_t kRows = 8;
static_assert(kR % kRows == 0, "row blocks of whole register blocks");

// The 32-bit pair at p (two bf16), broadcast.
RVVK_ALWAYS_INLINE inline __m512bh pair_at(const std::uint16_t* p) {
  std::int32_t x;
  std::memcpy(&x, p, sizeof x);
  return (__m512bh)_mm512_set1_epi32(x);
}

// s[qr][0, nk) = q[qr] . k for all nqr_pad rows.
void qk_tiles(const std::uint16_t* q, std::int64_t nqr_pad, std::int64_t dim,
              const std::uint32_t* kb, std::int64_t nk, float* s) {
  for (std::int64_t r0 = 0; r0 < nqr_pad; r0 += kRows)
    for (std::int64_t g = 0; g < nk / 16; g += 2) {
      __m512 acc[kRows][2];
      for (auto& a : acc) a[0] = a[1] = _mm512_setzero_ps();
      for (std::int64_t c = 0; c < dim / 32; ++c) {
        const std::uint32_t* t0 = kb + (c * (kN / 16) + g) * 256;  // tiles (c, g), (c, g + 1)
        const std::uint16_t* qc = q + r0 * dim + c * 32;
        for (int i = 0; i < 16; ++i) {
          const __m512bh k0 = (__m512bh)_mm512_loadu_si512(t0 + i * 16);
          const __m512bh k1 = (__m512bh)_mm512_loadu_si512(t0 + 256 + i * 16);
          for (int r = 0; r < kRows; ++r) {
            const __m512bh qp = pair_at(qc + r * dim + 2 * i);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], qp, k0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], qp, k1);
          }
        }
      }
      for (int r = 0; r < kRows; ++r) {
        _mm512_storeu_ps(s + (r0 + r) * kN + g * 16, acc[r][0]);
        _mm512_storeu_ps(s + (r0 + r) * kN + g * 16 + 16, acc[r][1]);
      }
    }
}

// o[qr][:] += p[qr][0, nk) . V[0, nk) for all nqr_pad rows.
void pv_tiles(const std::uint16_t* p, std::int64_t nqr_pad, const std::uint32_t* vb,
              std::int64_t nk, std::int64_t dim_v, float* o) {
  const std::int64_t ndv = dim_v / 16;
  for (std::int64_t r0 = 0; r0 < nqr_pad; r0 += kRows)
    for (std::int64_t d = 0; d < ndv; d += 2) {
      __m512 acc[kRows][2];
      for (int r = 0; r < kRows; ++r) {
        acc[r][0] = _mm512_loadu_ps(o + (r0 + r) * dim_v + d * 16);
        acc[r][1] = _mm512_loadu_ps(o + (r0 + r) * dim_v + d * 16 + 16);
      }
      for (std::int64_t kc = 0; kc < nk / 32; ++kc) {
        const std::uint32_t* t0 = vb + (kc * ndv + d) * 256;  // tiles (kc, d), (kc, d + 1)
        const std::uint16_t* pr = p + r0 * kN + kc * 32;
        for (int i = 0; i < 16; ++i) {
          const __m512bh v0 = (__m512bh)_mm512_loadu_si512(t0 + i * 16);
          const __m512bh v1 = (__m512bh)_mm512_loadu_si512(t0 + 256 + i * 16);
          for (int r = 0; r < kRows; ++r) {
            const __m512bh pp = pair_at(pr + r * kN + 2 * i);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], pp, v0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], pp, v1);
          }
        }
      }
      for (int r = 0; r < kRows; ++r) {
        _mm512_storeu_ps(o + (r0 + r) * dim_v + d * 16, acc[r][0]);
        _mm512_storeu_ps(o + (r0 + r) * dim_v + d * 16 + 16, acc[r][1]);
      }
    }
}
}  // namespace bf16mm
}  // namespace
}  // namespace rvvk::RVVK_NS
