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

// acc[r] += a[r] . (B tiles t, t + 256 words) for the kRows rows of A at a
// (rows `lda` apart, 32 bf16 each): one 32-deep step of both products.
RVVK_ALWAYS_INLINE inline void tile_pair_step(__m512 (&acc)[kRows][2], const std::uint16_t* a,
                                              std::int64_t lda, const std::uint32_t* t) {
  for (int i = 0; i < 16; ++i) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(t + i * 16);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(t + 256 + i * 16);
    for (int r = 0; r < kRows; ++r) {
      const __m512bh ap = pair_at(a + r * lda + 2 * i);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ap, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ap, b1);
    }
  }
}

// The kRows x 32 fp32 accumulators from / to rows `ld` apart at p.
RVVK_ALWAYS_INLINE inline void load_acc(__m512 (&acc)[kRows][2], const float* p, std::int64_t ld) {
  for (int r = 0; r < kRows; ++r) {
    acc[r][0] = _mm512_loadu_ps(p + r * ld);
    acc[r][1] = _mm512_loadu_ps(p + r * ld + 16);
  }
}
RVVK_ALWAYS_INLINE inline void store_acc(const __m512 (&acc)[kRows][2], float* p, std::int64_t ld) {
  for (int r = 0; r < kRows; ++r) {
    _mm512_storeu_ps(p + r * ld, acc[r][0]);
    _mm512_storeu_ps(p + r * ld + 16, acc[r][1]);
  }
}

// s[qr][0, nk) = q[qr] . k for all nqr_pad rows.
void qk_tiles(const std::uint16_t* q, std::int64_t nqr_pad, std::int64_t dim,
              const std::uint32_t* kb, std::int64_t nk, float* s) {
  for (std::int64_t r0 = 0; r0 < nqr_pad; r0 += kRows)
    for (std::int64_t g = 0; g < nk / 16; g += 2) {
      __m512 acc[kRows][2];
      for (auto& a : acc) a[0] = a[1] = _mm512_setzero_ps();
      for (std::int64_t c = 0; c < dim / 32; ++c)  // tiles (c, g), (c, g + 1)
        tile_pair_step(acc, q + r0 * dim + c * 32, dim, kb + (c * (kN / 16) + g) * 256);
      store_acc(acc, s + r0 * kN + g * 16, kN);
    }
}

// o[qr][:] += p[qr][0, nk) . V[0, nk) for all nqr_pad rows.
void pv_tiles(const std::uint16_t* p, std::int64_t nqr_pad, const std::uint32_t* vb,
              std::int64_t nk, std::int64_t dim_v, float* o) {
  const std::int64_t ndv = dim_v / 16;
  for (std::int64_t r0 = 0; r0 < nqr_pad; r0 += kRows)
    for (std::int64_t d = 0; d < ndv; d += 2) {
      __m512 acc[kRows][2];
      load_acc(acc, o + r0 * dim_v + d * 16, dim_v);
      for (std::int64_t kc = 0; kc < nk / 32; ++kc)  // tiles (kc, d), (kc, d + 1)
        tile_pair_step(acc, p + r0 * kN + kc * 32, kN, vb + (kc * ndv + d) * 256);
      store_acc(acc, o + r0 * dim_v + d * 16, dim_v);
    }
}
}  // namespace bf16mm
}  // namespace
}  // namespace rvvk::RVVK_NS
