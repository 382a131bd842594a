// The bf16 matrix path's two tile products on AMX tiles (x86_amx).
#pragma once

#include "../x86_avx512_bf16/extend_attention_bf16mm_layout.h"

namespace rvvk::RVVK_NS {
namespace {

namespace bf16mm {
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

// Eight tiles of 16 rows x 64 bytes for the lifetime of the object (one call
// of extend_attention, on one thread); tile state released after.
struct Tiles {
  Tiles() {
    TileConfig c;
    for (int i = 0; i < 8; ++i) c.colsb[i] = 64, c.rows[i] = 16;
    _tile_loadconfig(&c);
  }
  ~Tiles() { _tile_release(); }
  Tiles(const Tiles&) = delete;
  Tiles& operator=(const Tiles&) = delete;
};

// s[qr][0, nk) = q[qr] . k for all nqr_pad rows (tiles 0-3 accumulate 32 rows
// x 32 keys, 4-5 hold q, 6-7 K).
void qk_tiles(const std::uint16_t* q, std::int64_t nqr_pad, std::int64_t dim,
              const std::uint32_t* kb, std::int64_t nk, float* s) {
  const std::int64_t qstride = dim * 2;
  constexpr std::int64_t sstride = kN * 4;
  for (std::int64_t r = 0; r < nqr_pad; r += kR)
    for (std::int64_t g = 0; g < nk / 16; g += 2) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (std::int64_t c = 0; c < dim / 32; ++c) {
        _tile_loadd(4, q + r * dim + c * 32, qstride);
        _tile_loadd(5, q + (r + 16) * dim + c * 32, qstride);
        _tile_loadd(6, kb + (c * (kN / 16) + g) * 256, 64);
        _tile_loadd(7, kb + (c * (kN / 16) + g + 1) * 256, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      float* s0 = s + r * kN + g * 16;
      _tile_stored(0, s0, sstride);
      _tile_stored(1, s0 + 16, sstride);
      _tile_stored(2, s0 + 16 * kN, sstride);
      _tile_stored(3, s0 + 16 * kN + 16, sstride);
    }
}

// o[qr][:] += p[qr][0, nk) . V[0, nk) for all nqr_pad rows (tiles 0-3: 32 rows x 32 value
// columns, 4-5 p, 6-7 V).
void pv_tiles(const std::uint16_t* p, std::int64_t nqr_pad, const std::uint32_t* vb,
              std::int64_t nk, std::int64_t dim_v, float* o) {
  constexpr std::int64_t pstride = kN * 2;
  const std::int64_t ostride = dim_v * 4;
  const std::int64_t ndv = dim_v / 16;
  for (std::int64_t r = 0; r < nqr_pad; r += kR)
    for (std::int64_t d = 0; d < ndv; d += 2) {
      float* o0 = o + r * dim_v + d * 16;
      _tile_loadd(0, o0, ostride);
      _tile_loadd(1, o0 + 16, ostride);
      _tile_loadd(2, o0 + 16 * dim_v, ostride);
      _tile_loadd(3, o0 + 16 * dim_v + 16, ostride);
      for (std::int64_t kc = 0; kc < nk / 32; ++kc) {
        _tile_loadd(6, vb + (kc * ndv + d) * 256, 64);
        _tile_loadd(7, vb + (kc * ndv + d + 1) * 256, 64);
        _tile_loadd(4, p + r * kN + kc * 32, pstride);
        _tile_loadd(5, p + (r + 16) * kN + kc * 32, pstride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, o0, ostride);
      _tile_stored(1, o0 + 16, ostride);
      _tile_stored(2, o0 + 16 * dim_v, ostride);
      _tile_stored(3, o0 + 16 * dim_v + 16, ostride);
    }
}
}  // namespace bf16mm
}  // namespace
}  // namespace rvvk::RVVK_NS
