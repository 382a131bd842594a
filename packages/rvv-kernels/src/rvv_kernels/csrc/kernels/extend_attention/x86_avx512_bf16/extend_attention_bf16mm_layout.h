// The bf16 matrix path of extend attention (x86_avx512_bf16 and x86_amx), part
// 1: block sizes, scratch and the packed tile layouts of K and V. The tile
// products come next (extend_attention_tiles_dpbf16.h here,
// x86_amx/extend_attention_tiles_amx.h), then the task
// (extend_attention_bf16mm_task.h).
//
// x86_amx and x86_avx512_bf16: the same tasks, for bf16 q with a bf16 KV
// cache, with both matrix products on bf16 pairs with fp32 accumulators - AMX
// tiles (tdpbf16ps) in x86_amx, AVX512-BF16 dot products (vdpbf16ps, one B
// tile row per zmm) on the same packed tiles in x86_avx512_bf16 - and the
// online softmax in AVX-512, per query row:
//  - q rows, raw bf16, packed once per task as the A tiles (16 rows x 32
//    dims), padded with zero rows to a multiple of 32 rows; sm_scale applies
//    to the fp32 scores, so q is not rounded again.
//  - per block of 128 keys: K re-laid as B tiles in bf16 pairs (tile row i =
//    dims 2i, 2i+1 of 16 keys: a 16 x 16 transpose of 32-bit pairs; whole
//    blocks once per call and thread for all the request's query blocks, see
//    Packed), then s[qr][key] = q . k in fp32 tiles of 16 rows x 16 keys;
//  - per row, in base 2 (softmax_row): the max of the visible scores (the
//    visible keys of a row are contiguous), then p = 2^(s * sm_scale * log2(e)
//    - m) by one fmsub, a rounding, a degree-4 polynomial and a scalef; p is
//    rounded to bf16 and l sums the rounded p, so P.V weighs the values by
//    exactly the p it divides by. Rounding p to bf16 is what torch's CPU flash
//    attention and SGLang's CPU extend kernel do too; the tests allow for it
//    (test_extend_attention.cpp). Rows whose max moved scale their o row by
//    alpha;
//  - V re-laid as B tiles in key pairs (tile row i = keys 2i, 2i+1 of 16 value
//    columns: interleaved bf16), o[qr][:] += p . V in fp32 tiles.
// Keys past the block's end are zero rows with masked scores.
#pragma once

#include <immintrin.h>

#include "../extend_attention_common.h"

namespace rvvk::RVVK_NS {
namespace {

namespace bf16mm {

constexpr std::int64_t kN = 128;  // keys per block: 8 tiles of 16
constexpr std::int64_t kR = 32;   // query rows per pass: 2 tiles of 16
constexpr float kLog2e = 1.44269504f, kLn2 = 0.693147181f;
static_assert(kN % 32 == 0, "key pairs of whole tiles, rows of P in pairs of vectors");

struct Scratch {
  detail::LineVector<std::uint16_t> q;   // nqr_pad x dim, bf16
  detail::LineVector<std::uint32_t> kb;  // (dim / 32) x 4 B tiles of 16 x 16 pairs
  detail::LineVector<std::uint32_t> vb;  // (kN / 32) x (dim_v / 16) B tiles of 16 x 16 pairs
  detail::LineVector<float> s;           // nqr_pad x kN scores
  detail::LineVector<std::uint16_t> p;   // nqr_pad x kN, bf16
  detail::LineVector<float> o;           // nqr_pad x dim_v
  std::vector<float> m, l;               // nqr, nqr
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Whole key blocks of one (request, KV head), packed as B tiles once per call
// and thread: the tasks of a request's query blocks follow each other on a
// thread (a thread runs a contiguous range of tasks) and all read the same
// key blocks, so packing them again from the scattered cache rows for every
// query block would be wasted work. The last, partial block of a task (its
// visible keys end inside it) is packed per task, with zero rows past the end.
// Reset by run_bf16mm on entry: the cache changes between calls.
struct Packed {
  std::int64_t b = -1, kvh = -1;
  detail::LineVector<std::uint32_t> kb, vb;  // block j at j * kb_size / j * vb_size
  std::vector<std::uint8_t> have;     // block j packed
};
Packed& packed() {
  thread_local Packed p;
  return p;
}
// Packed blocks kept per thread at most (32-bit words; 16 MiB): longer requests
// pack per task.
constexpr std::int64_t kMaxPackedWords = std::int64_t{4} << 20;

// r[i] <- column i of the 16 x 16 matrix of 32-bit elements whose rows are r.
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  __m512i u[16];  // u[4i + j], 128-bit lane L: column 4L + j of rows 4i .. 4i + 3
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {  // 4 x 4 transpose of 128-bit lanes
    const __m512i a = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);
    const __m512i b = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
    const __m512i c = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i d = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
    r[j] = _mm512_shuffle_i32x4(a, c, 0x88);
    r[4 + j] = _mm512_shuffle_i32x4(a, c, 0xDD);
    r[8 + j] = _mm512_shuffle_i32x4(b, d, 0x88);
    r[12 + j] = _mm512_shuffle_i32x4(b, d, 0xDD);
  }
}

// K rows (null: a zero row past the block's end) -> B tiles: tile (c, g) holds
// dims [32c, 32c + 32) of keys [16g, 16g + 16); its row i the pair (2i, 2i + 1).
void pack_k(const std::uint16_t* const* rows, std::int64_t dim, std::uint32_t* kb) {
  for (std::int64_t g = 0; g < kN / 16; ++g)
    for (std::int64_t c = 0; c < dim / 32; ++c) {
      __m512i r[16];
      for (int n = 0; n < 16; ++n) {
        const std::uint16_t* p = rows[g * 16 + n];
        r[n] = p ? _mm512_loadu_si512(p + c * 32) : _mm512_setzero_si512();
      }
      transpose16(r);
      std::uint32_t* tile = kb + (c * (kN / 16) + g) * 256;
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(tile + i * 16, r[i]);
    }
}

// V rows -> B tiles: tile (kc, d) holds keys [32kc, 32kc + 32) of value
// columns [16d, 16d + 16); its row i the keys 2i, 2i + 1 interleaved.
void pack_v(const std::uint16_t* const* rows, std::int64_t dim_v, std::uint32_t* vb) {
  alignas(64) std::uint16_t lo_idx[32], hi_idx[32];
  for (int n = 0; n < 16; ++n) {
    lo_idx[2 * n] = static_cast<std::uint16_t>(n);
    lo_idx[2 * n + 1] = static_cast<std::uint16_t>(32 + n);
    hi_idx[2 * n] = static_cast<std::uint16_t>(16 + n);
    hi_idx[2 * n + 1] = static_cast<std::uint16_t>(48 + n);
  }
  const __m512i il = _mm512_load_si512(lo_idx), ih = _mm512_load_si512(hi_idx);
  const std::int64_t ndv = dim_v / 16;
  for (std::int64_t kc = 0; kc < kN / 32; ++kc)
    for (int i = 0; i < 16; ++i) {
      const std::uint16_t* p0 = rows[kc * 32 + 2 * i];
      const std::uint16_t* p1 = rows[kc * 32 + 2 * i + 1];
      for (std::int64_t dd = 0; dd < dim_v / 32; ++dd) {
        const __m512i x = p0 ? _mm512_loadu_si512(p0 + dd * 32) : _mm512_setzero_si512();
        const __m512i y = p1 ? _mm512_loadu_si512(p1 + dd * 32) : _mm512_setzero_si512();
        std::uint32_t* t0 = vb + (kc * ndv + 2 * dd) * 256 + i * 16;
        _mm512_storeu_si512(t0, _mm512_permutex2var_epi16(x, il, y));
        _mm512_storeu_si512(t0 + 256, _mm512_permutex2var_epi16(x, ih, y));
      }
    }
}
}  // namespace bf16mm
}  // namespace
}  // namespace rvvk::RVVK_NS
