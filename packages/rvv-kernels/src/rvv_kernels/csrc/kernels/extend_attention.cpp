// Extend (prefill) attention over SGLang's indexed KV cache plus the new
// tokens' own K/V (see ExtendAttentionArgs).
//
// One task = (request, KV head, block of up to kExtendBlockM query tokens). All
// query heads of the KV head's group are handled together: the task's query
// rows are the (token, head) pairs qr = token * group + head, up to 32 x group,
// so each K and V row is read and converted once per task and key block.
// Tiled online softmax (flash-attention style), no full score matrix; per
// block of kBlockN key positions (the prefix from the cache through
// req_to_token, then the new tokens; positions no query row of the task sees
// under causality / the window are skipped):
//  - K and V rows -> fp32 with their scales folded in (fp8 per tensor, int8 per
//    token and KV head), cached rows prefetched a few positions ahead (where
//    the target can: detail::kCanPrefetch). Each
//    position is converted once per call and thread for all the request's query
//    blocks the thread runs (Converted; per task when the request is too long
//    for it). Key blocks start at multiples of kBlockN.
//  - scores s[j][qr] into a kBlockN x rows tile. Normally q is converted once
//    per task, scaled by sm_scale and stored transposed, qt[d][qr], and the
//    scores of three keys are vectors over the query rows accumulated along d
//    with the key elements as scalars (LMUL 8; when the rows span several
//    vectors, the key elements of 8 dimensions stay in scalar registers for all
//    of them). Tasks with few query rows (short extends) use dot products
//    along the head dimension instead (use_transposed_q).
//  - logit cap, then masks: kMasked into the rows that must not see a key
//    (causal, window); the visible rows of a key are contiguous.
//  - online softmax with the running max / sum as vectors over the query rows
//    (two passes per strip of rows: the max, then exp_nonpositive with the sum;
//    masked scores give exactly 0, a row that saw no key yet keeps m = kMinit,
//    l = 0, never NaN).
//  - P.V: o[qr][:] = o[qr][:] * alpha[qr] + sum_j p[j][qr] * v_j[:], vectors
//    along the head dimension, three query rows sharing each V load.
//  - x86_avx2 runs both products on whole 16-lane chunks with 12 accumulators
//    in registers (6 keys x 16 query rows, 6 query rows x 16 value columns),
//    the generic forms on the rest. The rows of qt, s and V are padded to an
//    odd number of cache lines (padded_stride). Its q.k asks for the block's
//    converted V rows and its P.V for the next block's K rows (where they are
//    converted already), a few lines per tile (Lines): a request's converted
//    rows (2 MiB at context 2048) live in L3, and without this each product's
//    first pass over a block waited for them. On a 2-core Zen 3 (scratch
//    program, Qwen2.5-1.5B shapes, 512 new tokens after a cached prefix,
//    calls with and without alternating, medians of 6-9): B4 / context 2048
//    235 -> 211 and 250 -> 228 ms on two threads, 450 -> 398 and 460 -> 411
//    on one; B1 / context 2048 67 -> 55 and 75.5 -> 73.2 ms; B4 / context 512
//    (a full prefill: each block is converted just before its products)
//    37.0 -> 36.7. Asking with prefetcht1 instead of prefetcht0: the same.
// Finally o / l (the sink, if any, joins the denominator) in the output dtype.
// Tasks share no mutable state (thread_local scratch), so results do not depend
// on how tasks are spread over calls or threads.
// The x86_amx and x86_avx512_bf16 variants run bf16 q over a bf16 cache (head
// sizes multiples of 32) through their own task with the matrix products on
// bf16 pairs - AMX tiles, or AVX512-BF16 dot products on the same packed
// layouts: see bf16mm:: at the end of this file.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "rvvk/detail/aligned.h"
#include "rvvk/detail/dispatch.h"
#include "rvvk/detail/kv_cache.h"
#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

// The two matrix products: 3 accumulators of the longest vectors the ISA's
// registers hold with the operand (LMUL 8 on RVV).
using FM = vec::F32<vec::kMatrixLmul>;
using FS = vec::F32<4>;  // tanh (more live registers)
// The softmax: LMUL 4 on RVV (exp's constants are scalar operands there), two
// registers on x86 (the rows' max and sum and exp's constants stay in the 16
// ymm; with four, AVX2 spilled).
using FE = vec::F32<vec::kIsRvv ? 4 : 2>;
using FD = vec::F32<4>;  // dot products along the head dimension (few query rows)

constexpr std::int64_t kBlockM = kExtendBlockM;  // query tokens per task
constexpr std::int64_t kBlockN = 64;             // keys per block
// Masked scores; the running max starts at kMinit > kMasked, so a masked
// score minus any max is < -87.3 and exp gives exactly 0.
constexpr float kMasked = -1e30f;
constexpr float kMinit = -1e29f;
constexpr int kKeys = 3;  // keys per pass of qk_keys
constexpr int kRows = 3;  // query rows per pass of pv_rows

struct Scratch {
  detail::LineVector<float> qt, s, o, kc, vc, m, l, alpha, tmp;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// K / V of one request and KV head in fp32 (scales folded in), shared by the
// tasks of that request a thread runs within one call; have[i]: how many
// positions of block i (kBlockN from i * kBlockN) are converted. Requests
// longer than kMaxConvertedWords / (dim + dim_v) positions convert per task.
struct Converted {
  std::int64_t b = -1, kvh = -1;
  detail::LineVector<float> k, v;
  std::vector<std::int32_t> have;
};
Converted& converted() {
  thread_local Converted c;
  return c;
}
constexpr std::int64_t kMaxConvertedWords = std::int64_t{4} << 20;  // 16 MiB

// Row stride (in floats) for n-float rows of the block's matrices whose
// columns the products walk (qt, s, V): an odd number of 64-byte lines, so a
// column's lines spread over all the L1's sets. Rows of 128 floats (8 lines)
// would put a 16-float column strip of 64 rows into 8 of 64 sets and evict each
// other in the products' inner loops.
inline std::int64_t padded_stride(std::int64_t n) {
  const std::int64_t lines = (n + 15) / 16;
  return lines % 2 == 1 ? n : (lines + 1) * 16;
}

using detail::at;
using detail::cache_row;

// A compiler barrier between the unrolled steps of the matrix products. With
// three LMUL-8 accumulators and the step's operand all 32 vector registers are
// in use, yet the scheduler likes to start the next step's load early, which
// spills. The compiler re-issues vsetvli after the (empty) asm, and that
// vsetvli orders the steps: one instruction per step, far cheaper than a spill.
inline void step_barrier() { asm volatile("" ::: "memory"); }

// dst[0, n) = src[0, n) * scale in fp32.
template <class T>
void convert_row(float* dst, const T* src, std::int64_t n, float scale) {
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = FM::setvl(static_cast<std::size_t>(n - i));
    FM::store(dst + i, FM::mul(FM::load(src + i, vl), scale, vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
}

void fill_row(float* dst, std::int64_t n, float x) {
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = FM::setvl(static_cast<std::size_t>(n - i));
    FM::store(dst + i, FM::splat(x, vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
}

// s[k][c] = sum_d kc[k][d] * qt[d][c] for the NK keys at kc (rows of `dim`)
// and the query rows c in [c0, c0 + vl); qt and s have rows of `ld`. Each qt
// load feeds NK multiply-adds; the key elements are scalars.
template <int NK>
inline void qk_keys(const float* qt, std::int64_t ld, std::int64_t dim, const float* kc,
                    float* s, std::int64_t c0, std::size_t vl) {
  const float* k0 = kc;
  const float* k1 = kc + dim;
  const float* k2 = kc + 2 * dim;
  const float* q = qt + c0;
  FM::V x = FM::load(q, vl);
  FM::V a0 = FM::mul(x, k0[0], vl), a1 = a0, a2 = a0;
  if constexpr (NK > 1) a1 = FM::mul(x, k1[0], vl);
  if constexpr (NK > 2) a2 = FM::mul(x, k2[0], vl);
  auto step = [&](const float* qp, std::int64_t i) RVVK_ALWAYS_INLINE {
    const FM::V y = FM::load(qp, vl);
    a0 = FM::fmacc(a0, k0[i], y, vl);
    if constexpr (NK > 1) a1 = FM::fmacc(a1, k1[i], y, vl);
    if constexpr (NK > 2) a2 = FM::fmacc(a2, k2[i], y, vl);
    step_barrier();
  };
  std::int64_t d = 1;
  q += ld;
  for (; d + 4 <= dim; d += 4) {
    const float* qa = q;
    const float* qb = qa + ld;
    const float* qc = qb + ld;
    const float* qd = qc + ld;
    step(qa, d);
    step(qb, d + 1);
    step(qc, d + 2);
    step(qd, d + 3);
    q = qd + ld;
  }
  for (; d < dim; ++d, q += ld) step(q, d);
  FM::store(s + c0, a0, vl);
  if constexpr (NK > 1) FM::store(s + ld + c0, a1, vl);
  if constexpr (NK > 2) FM::store(s + 2 * ld + c0, a2, vl);
}

// The same for all query rows when they span several vectors: the keys'
// elements of a tile of kTileD dimensions are loaded once into scalar
// registers and reused for every vector of query rows; partial sums go
// through s.
constexpr std::int64_t kTileD = 8;
template <int NK>
inline void qk_keys_tiled(const float* qt, std::int64_t nqr, std::int64_t ld, std::int64_t dim,
                          const float* kc, float* s) {
  const float* k0 = kc;
  const float* k1 = kc + dim;
  const float* k2 = kc + 2 * dim;
  float* s0 = s;
  float* s1 = s + ld;
  float* s2 = s + 2 * ld;
  std::int64_t d0 = 0;
  for (; d0 + kTileD <= dim; d0 += kTileD) {
    float x0[kTileD], x1[kTileD], x2[kTileD];
    for (int i = 0; i < kTileD; ++i) {
      x0[i] = k0[d0 + i];
      x1[i] = NK > 1 ? k1[d0 + i] : 0.0f;
      x2[i] = NK > 2 ? k2[d0 + i] : 0.0f;
    }
    for (std::int64_t c = 0; c < nqr;) {
      const std::size_t vl = FM::setvl(static_cast<std::size_t>(nqr - c));
      FM::V a0, a1, a2;
      if (d0 == 0) {
        a0 = a1 = a2 = FM::splat(0.0f, vl);
      } else {
        a0 = a1 = a2 = FM::load(s0 + c, vl);
        if constexpr (NK > 1) a1 = FM::load(s1 + c, vl);
        if constexpr (NK > 2) a2 = FM::load(s2 + c, vl);
      }
      const float* q = qt + d0 * ld + c;
      auto step = [&](int i) RVVK_ALWAYS_INLINE {
        const FM::V y = FM::load(q, vl);
        a0 = FM::fmacc(a0, x0[i], y, vl);
        if constexpr (NK > 1) a1 = FM::fmacc(a1, x1[i], y, vl);
        if constexpr (NK > 2) a2 = FM::fmacc(a2, x2[i], y, vl);
        q += ld;
        step_barrier();
      };
      static_assert(kTileD == 8, "the steps below");
      step(0);
      step(1);
      step(2);
      step(3);
      step(4);
      step(5);
      step(6);
      step(7);
      FM::store(s0 + c, a0, vl);
      if constexpr (NK > 1) FM::store(s1 + c, a1, vl);
      if constexpr (NK > 2) FM::store(s2 + c, a2, vl);
      c += static_cast<std::int64_t>(vl);
    }
  }
  if (d0 == dim) return;
  for (std::int64_t c = 0; c < nqr;) {  // the remaining dimensions, scalars from memory
    const std::size_t vl = FM::setvl(static_cast<std::size_t>(nqr - c));
    FM::V a0, a1, a2;
    if (d0 == 0) {
      a0 = a1 = a2 = FM::splat(0.0f, vl);
    } else {
      a0 = a1 = a2 = FM::load(s0 + c, vl);
      if constexpr (NK > 1) a1 = FM::load(s1 + c, vl);
      if constexpr (NK > 2) a2 = FM::load(s2 + c, vl);
    }
    const float* q = qt + d0 * ld + c;
    for (std::int64_t d = d0; d < dim; ++d, q += ld) {
      const FM::V y = FM::load(q, vl);
      a0 = FM::fmacc(a0, k0[d], y, vl);
      if constexpr (NK > 1) a1 = FM::fmacc(a1, k1[d], y, vl);
      if constexpr (NK > 2) a2 = FM::fmacc(a2, k2[d], y, vl);
      step_barrier();
    }
    FM::store(s0 + c, a0, vl);
    if constexpr (NK > 1) FM::store(s1 + c, a1, vl);
    if constexpr (NK > 2) FM::store(s2 + c, a2, vl);
    c += static_cast<std::int64_t>(vl);
  }
}

// The 64-byte lines of fp32 rows (a block's converted K or V rows), asked for
// (prefetch into L1) a few at a time between the tiles of a matrix product so
// that the next product finds them in cache: spread(tiles) shares the lines
// still to ask for over that many tiles, ask() asks for one tile's share.
// Used by x86_avx2's products (the others ignore it).
struct Lines {
  const char* base = nullptr;  // the first row's first line
  std::int64_t stride = 0;     // bytes from a row to the next
  std::int64_t per_row = 0;    // lines a row spans
  std::int64_t total = 0, next = 0, per_tile = 0;
  Lines() = default;
  Lines(const float* rows, std::int64_t n, std::int64_t row_floats, std::int64_t stride_floats) {
    const auto addr = reinterpret_cast<std::uintptr_t>(rows);
    base = reinterpret_cast<const char*>(addr & ~std::uintptr_t{63});
    stride = stride_floats * static_cast<std::int64_t>(sizeof(float));
    per_row = (static_cast<std::int64_t>(addr & 63) +
               row_floats * static_cast<std::int64_t>(sizeof(float)) + 63) / 64;
    total = n * per_row;
  }
  void spread(std::int64_t tiles) { per_tile = tiles > 0 ? (total - next + tiles - 1) / tiles : 0; }
  RVVK_ALWAYS_INLINE void ask() {
    for (std::int64_t k = 0; k < per_tile && next < total; ++k, ++next)
      __builtin_prefetch(base + next / per_row * stride + next % per_row * 64, 0, 3);
  }
};

#if defined(RVVK_VEC_AVX2)
// x86_avx2: register-blocked products over whole 16-lane chunks (two ymm),
// 12 accumulators. The LMUL-2 forms above keep only 6 (3 keys or rows x 2
// ymm), fewer than the FMA latency x throughput (4 x 2) needs, and re-load
// their partial sums per 8 dimensions.
namespace avx2 {
constexpr std::int64_t kLanes = 16;  // query rows (qk) / value columns (pv) per chunk
constexpr int kTile = 6;             // keys (qk) / query rows (pv) per chunk

// Up to kTile pairs of accumulators as named variables (GCC keeps an array of
// __m256 indexed in an unrolled loop on the stack, storing it every step).
template <int N>
struct Acc {
  __m256 a0, b0, a1, b1, a2, b2, a3, b3, a4, b4, a5, b5;
  // acc_i += s_i * (u, w) for the N scalars s at p (s_i = p[i * stride]).
  // f(a_i, b_i, i) for each pair i < N (load, scale, multiply-add or store them).
  template <class F>
  RVVK_ALWAYS_INLINE void each(F f) {
    f(a0, b0, 0);
    if constexpr (N > 1) f(a1, b1, 1);
    if constexpr (N > 2) f(a2, b2, 2);
    if constexpr (N > 3) f(a3, b3, 3);
    if constexpr (N > 4) f(a4, b4, 4);
    if constexpr (N > 5) f(a5, b5, 5);
  }
  // acc_i += s_i * (u, w) for the N scalars s at p (s_i = p[i * stride]).
  RVVK_ALWAYS_INLINE void fma(const float* p, std::int64_t stride, __m256 u, __m256 w) {
    each([&](__m256& a, __m256& b, int i) RVVK_ALWAYS_INLINE {
      const __m256 x = _mm256_broadcast_ss(p + i * stride);
      a = _mm256_fmadd_ps(x, u, a);
      b = _mm256_fmadd_ps(x, w, b);
    });
  }
};

// s[j][c0 + 0..16) = sum_d k_j[d] * qt[d][c0 + ..] for the NK keys at kc.
template <int NK>
RVVK_ALWAYS_INLINE inline void qk_tile(const float* qt, std::int64_t ld, std::int64_t dim,
                                        const float* kc, float* s) {
  Acc<NK> acc;
  acc.each([](__m256& a, __m256& b, int) RVVK_ALWAYS_INLINE {
    a = b = _mm256_setzero_ps();
  });
  const float* q = qt;
  for (std::int64_t d = 0; d < dim; ++d, q += ld)
    acc.fma(kc + d, dim, _mm256_loadu_ps(q), _mm256_loadu_ps(q + 8));
  acc.each([&](__m256& a, __m256& b, int i) RVVK_ALWAYS_INLINE {
    _mm256_storeu_ps(s + i * ld, a);
    _mm256_storeu_ps(s + i * ld + 8, b);
  });
}

// o[r + i][c0 + 0..16) = o[..] * alpha[r + i] + sum_j p[j][r + i] * vc[j][c0 + ..]
// for the NR query rows at o.
template <int NR>
RVVK_ALWAYS_INLINE inline void pv_tile(float* o, std::int64_t dim_v, const float* alpha,
                                        const float* p, std::int64_t ld, const float* vc,
                                        std::int64_t lv, std::int64_t nb) {
  Acc<NR> acc;
  acc.each([&](__m256& a, __m256& b, int i) RVVK_ALWAYS_INLINE {
    const __m256 al = _mm256_broadcast_ss(alpha + i);
    a = _mm256_mul_ps(_mm256_loadu_ps(o + i * dim_v), al);
    b = _mm256_mul_ps(_mm256_loadu_ps(o + i * dim_v + 8), al);
  });
  const float* v = vc;
  for (std::int64_t j = 0; j < nb; ++j, p += ld, v += lv)
    acc.fma(p, 1, _mm256_loadu_ps(v), _mm256_loadu_ps(v + 8));
  acc.each([&](__m256& a, __m256& b, int i) RVVK_ALWAYS_INLINE {
    _mm256_storeu_ps(o + i * dim_v, a);
    _mm256_storeu_ps(o + i * dim_v + 8, b);
  });
}

template <template <int> class F, class... A>
RVVK_ALWAYS_INLINE inline void by_count(int n, A... args) {
  switch (n) {
    case 6: F<6>::run(args...); break;
    case 5: F<5>::run(args...); break;
    case 4: F<4>::run(args...); break;
    case 3: F<3>::run(args...); break;
    case 2: F<2>::run(args...); break;
    case 1: F<1>::run(args...); break;
    default: break;
  }
}
template <int N>
struct QkTile {
  static void run(const float* qt, std::int64_t ld, std::int64_t dim, const float* kc,
                  float* s) {
    qk_tile<N>(qt, ld, dim, kc, s);
  }
};
template <int N>
struct PvTile {
  static void run(float* o, std::int64_t dim_v, const float* alpha, const float* p,
                  std::int64_t ld, const float* vc, std::int64_t lv, std::int64_t nb) {
    pv_tile<N>(o, dim_v, alpha, p, ld, vc, lv, nb);
  }
};

// The whole chunks of query rows; returns where the rest starts.
std::int64_t qk_block(const float* qt, std::int64_t nqr, std::int64_t ld, std::int64_t dim,
                      const float* kc, std::int64_t nb, float* s, Lines& pf) {
  const std::int64_t whole = nqr / kLanes * kLanes;
  pf.spread(whole / kLanes * ((nb + kTile - 1) / kTile));
  for (std::int64_t c = 0; c < whole; c += kLanes)
    for (std::int64_t j = 0; j < nb; j += kTile) {
      pf.ask();
      const int n = static_cast<int>(std::min<std::int64_t>(kTile, nb - j));
      by_count<QkTile>(n, qt + c, ld, dim, kc + j * dim, s + j * ld + c);
    }
  return whole;
}

// The whole chunks of value columns for all query rows; returns where the
// rest starts.
std::int64_t pv_block(float* o, std::int64_t dim_v, const float* alpha, const float* p,
                      std::int64_t nqr, std::int64_t ld, const float* vc, std::int64_t lv,
                      std::int64_t nb, Lines& pf) {
  const std::int64_t whole = dim_v / kLanes * kLanes;
  pf.spread(whole / kLanes * ((nqr + kTile - 1) / kTile));
  for (std::int64_t c = 0; c < whole; c += kLanes)
    for (std::int64_t r = 0; r < nqr; r += kTile) {
      pf.ask();
      const int n = static_cast<int>(std::min<std::int64_t>(kTile, nqr - r));
      by_count<PvTile>(n, o + r * dim_v + c, dim_v, alpha + r, p + r, ld, vc + c, lv, nb);
    }
  return whole;
}
}  // namespace avx2
#endif

// Scores of the block's nb keys for the query rows [c0, nqr), which fit one
// vector (qt and s have rows of ld).
void qk_keys_block(const float* qt, std::int64_t nqr, std::int64_t ld, std::int64_t dim,
                   const float* kc, std::int64_t nb, float* s, std::int64_t c0) {
  const std::size_t vl = FM::setvl(static_cast<std::size_t>(nqr - c0));
  std::int64_t j = 0;
  for (; j + kKeys <= nb; j += kKeys)
    qk_keys<kKeys>(qt, ld, dim, kc + j * dim, s + j * ld, c0, vl);
  if (nb - j == 2) qk_keys<2>(qt, ld, dim, kc + j * dim, s + j * ld, c0, vl);
  if (nb - j == 1) qk_keys<1>(qt, ld, dim, kc + j * dim, s + j * ld, c0, vl);
}

// Scores of the block's nb keys (fp32 rows kc) for all nqr query rows
// (qt and s have rows of ld).
void qk_block(const float* qt, std::int64_t nqr, std::int64_t ld, std::int64_t dim,
              const float* kc, std::int64_t nb, float* s, [[maybe_unused]] Lines& pf) {
#if defined(RVVK_VEC_AVX2)
  const std::int64_t c0 = avx2::qk_block(qt, nqr, ld, dim, kc, nb, s, pf);
  if (c0 < nqr) qk_keys_block(qt, nqr, ld, dim, kc, nb, s, c0);  // fewer than 16 rows
#else
  if (nqr > static_cast<std::int64_t>(FM::vlmax())) {
    std::int64_t j = 0;
    for (; j + kKeys <= nb; j += kKeys)
      qk_keys_tiled<kKeys>(qt, nqr, ld, dim, kc + j * dim, s + j * ld);
    if (nb - j == 2) qk_keys_tiled<2>(qt, nqr, ld, dim, kc + j * dim, s + j * ld);
    if (nb - j == 1) qk_keys_tiled<1>(qt, nqr, ld, dim, kc + j * dim, s + j * ld);
    return;
  }
  qk_keys_block(qt, nqr, ld, dim, kc, nb, s, 0);
#endif
}

// Scores by dot products along the head dimension, for tasks with few query
// rows (short extends, where a vector over the query rows would be short):
// s[r] = qn[r] . k for the NR rows at qn (rows of `dim`), one K load per
// vector shared by the rows, then one reduction per row. (Three rows: the K
// vector, three q vectors and three accumulators fit the LMUL-4 registers
// even when the scheduler starts all loads first.)
template <int NR>
inline void qk_dot_rows(const float* qn, std::int64_t dim, const float* k, float* s) {
  const std::size_t vlmax = FD::vlmax();
  FD::V a0 = FD::splat(0.0f, vlmax), a1 = a0, a2 = a0;
  // Whole vectors tail-agnostic, a last partial one tail-undisturbed (its
  // lanes past vl keep earlier sums for the reduction over vlmax lanes).
  std::int64_t i = 0;
  for (; i + static_cast<std::int64_t>(vlmax) <= dim; i += static_cast<std::int64_t>(vlmax)) {
    const FD::V kv = FD::load(k + i, vlmax);
    a0 = FD::fmacc(a0, kv, FD::load(qn + i, vlmax), vlmax);
    if constexpr (NR > 1) a1 = FD::fmacc(a1, kv, FD::load(qn + dim + i, vlmax), vlmax);
    if constexpr (NR > 2) a2 = FD::fmacc(a2, kv, FD::load(qn + 2 * dim + i, vlmax), vlmax);
  }
  if (i < dim) {
    const std::size_t vl = FD::setvl(static_cast<std::size_t>(dim - i));
    const FD::V kv = FD::load(k + i, vl);
    a0 = FD::fmacc_tu(a0, kv, FD::load(qn + i, vl), vl);
    if constexpr (NR > 1) a1 = FD::fmacc_tu(a1, kv, FD::load(qn + dim + i, vl), vl);
    if constexpr (NR > 2) a2 = FD::fmacc_tu(a2, kv, FD::load(qn + 2 * dim + i, vl), vl);
  }
  s[0] = FD::reduce_sum(a0, vlmax);
  if constexpr (NR > 1) s[1] = FD::reduce_sum(a1, vlmax);
  if constexpr (NR > 2) s[2] = FD::reduce_sum(a2, vlmax);
}

void qk_dot_block(const float* qn, std::int64_t nqr, std::int64_t ld, std::int64_t dim,
                  const float* kc, std::int64_t nb, float* s) {
  for (std::int64_t j = 0; j < nb; ++j) {
    const float* k = kc + j * dim;
    float* row = s + j * ld;
    std::int64_t r = 0;
    for (; r + 3 <= nqr; r += 3) qk_dot_rows<3>(qn + r * dim, dim, k, row + r);
    if (nqr - r == 2) qk_dot_rows<2>(qn + r * dim, dim, k, row + r);
    if (nqr - r == 1) qk_dot_rows<1>(qn + r * dim, dim, k, row + r);
  }
}

// o[r][c0, c0 + vl) = o[r][...] * alpha[r] + sum_j p[j][r] * vc[j][...] for
// the NR query rows r at o (rows of dim_v); p has rows of `ld`, vc of `lv`. Each V load
// feeds NR multiply-adds; the probabilities are scalars.
template <int NR>
inline void pv_rows(float* o, std::int64_t dim_v, const float* alpha, const float* p,
                    std::int64_t ld, const float* vc, std::int64_t lv, std::int64_t nb,
                    std::int64_t c0, std::size_t vl) {
  float* o0 = o + c0;
  float* o1 = o0 + dim_v;
  float* o2 = o1 + dim_v;
  FM::V a0 = FM::mul(FM::load(o0, vl), alpha[0], vl), a1 = a0, a2 = a0;
  if constexpr (NR > 1) a1 = FM::mul(FM::load(o1, vl), alpha[1], vl);
  if constexpr (NR > 2) a2 = FM::mul(FM::load(o2, vl), alpha[2], vl);
  auto step = [&](const float* pp, const float* vp) RVVK_ALWAYS_INLINE {
    const FM::V x = FM::load(vp, vl);
    a0 = FM::fmacc(a0, pp[0], x, vl);
    if constexpr (NR > 1) a1 = FM::fmacc(a1, pp[1], x, vl);
    if constexpr (NR > 2) a2 = FM::fmacc(a2, pp[2], x, vl);
    step_barrier();
  };
  const float* pp = p;
  const float* vp = vc + c0;
  std::int64_t j = 0;
  for (; j + 4 <= nb; j += 4) {
    const float* pb = pp + ld;
    const float* pc = pb + ld;
    const float* pd = pc + ld;
    const float* vb = vp + lv;
    const float* vc2 = vb + lv;
    const float* vd = vc2 + lv;
    step(pp, vp);
    step(pb, vb);
    step(pc, vc2);
    step(pd, vd);
    pp = pd + ld;
    vp = vd + lv;
  }
  for (; j < nb; ++j, pp += ld, vp += lv) step(pp, vp);
  FM::store(o0, a0, vl);
  if constexpr (NR > 1) FM::store(o1, a1, vl);
  if constexpr (NR > 2) FM::store(o2, a2, vl);
}

void pv_block(float* o, std::int64_t dim_v, const float* alpha, const float* p,
              std::int64_t nqr, std::int64_t ld, const float* vc, std::int64_t lv,
              std::int64_t nb, [[maybe_unused]] Lines& pf) {
#if defined(RVVK_VEC_AVX2)
  for (std::int64_t c = avx2::pv_block(o, dim_v, alpha, p, nqr, ld, vc, lv, nb, pf); c < dim_v;) {
#else
  for (std::int64_t c = 0; c < dim_v;) {
#endif
    const std::size_t vl = FM::setvl(static_cast<std::size_t>(dim_v - c));
    std::int64_t r = 0;
    for (; r + kRows <= nqr; r += kRows)
      pv_rows<kRows>(o + r * dim_v, dim_v, alpha + r, p + r, ld, vc, lv, nb, c, vl);
    if (nqr - r == 2) pv_rows<2>(o + r * dim_v, dim_v, alpha + r, p + r, ld, vc, lv, nb, c, vl);
    if (nqr - r == 1) pv_rows<1>(o + r * dim_v, dim_v, alpha + r, p + r, ld, vc, lv, nb, c, vl);
    c += static_cast<std::int64_t>(vl);
  }
}

// s[0, n) = cap * tanh(s[0, n) / cap) (one row of the block's scores).
void cap_row(float* s, std::int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = FS::setvl(static_cast<std::size_t>(n - i));
    FS::store(s + i, FS::mul(FS::tanh(FS::mul(FS::load(s + i, vl), inv, vl), vl), cap, vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
}

// Online softmax over the block, vectorised over query rows: s becomes the
// unnormalised probabilities, m / l the running max / sum, alpha the factor
// for the rows' earlier accumulators. Per strip of rows two passes over the
// strip's columns of s (a few KiB: the second finds them in L1): the max,
// then exp with the sum. Every exp argument is a score or an old max minus
// its row's new max (<= 0; masked scores far below), so exp_nonpositive.
void softmax_block(float* s, std::int64_t nqr, std::int64_t ld, std::int64_t nb, float* m, float* l,
                   float* alpha) {
  for (std::int64_t c = 0; c < nqr;) {
    const std::size_t vl = FE::setvl(static_cast<std::size_t>(nqr - c));
    const FE::V m_old = FE::load(m + c, vl);
    FE::V mx = m_old;
    const float* col = s + c;
    for (std::int64_t j = 0; j < nb; ++j, col += ld) mx = FE::max(mx, FE::load(col, vl), vl);
    const FE::V a = FE::exp_nonpositive(FE::sub(m_old, mx, vl), vl);
    FE::store(m + c, mx, vl);
    FE::store(alpha + c, a, vl);
    FE::V sum = FE::mul(FE::load(l + c, vl), a, vl);
    float* p = s + c;
    for (std::int64_t j = 0; j < nb; ++j, p += ld) {
      const FE::V e = FE::exp_nonpositive(FE::sub(FE::load(p, vl), mx, vl), vl);
      FE::store(p, e, vl);
      sum = FE::add(sum, e, vl);
    }
    FE::store(l + c, sum, vl);
    c += static_cast<std::int64_t>(vl);
  }
}

// Whether the task computes its scores with q transposed (vectors over the
// query rows) rather than by dot products along the head dimension. Measured
// instruction counts (D = 128): the dot products cost about (13 + 6.5 c) per
// query row and key, c = vectors per head row at LMUL 4; the transposed form
// about 3.5 D per key for up to a vector of rows. Crossover at VLEN 256 about
// 13 rows, at VLEN 1024 about 29.
bool use_transposed_q(std::int64_t nqr, std::int64_t dim) {
  const std::int64_t c = (dim + static_cast<std::int64_t>(FD::vlmax()) - 1) /
                         static_cast<std::int64_t>(FD::vlmax());
  return nqr * (2 + c) * 8 >= 5 * dim;
}

// The task's output rows: o[qr] / l[qr] (the sink, if any, joins the
// denominator; m is the rows' running max) in the output dtype.
template <class T>
void store_rows(const ExtendAttentionArgs& a, std::int64_t kvh, std::int64_t tok0,
                std::int64_t nqr, const float* o, const float* m_run, const float* l_run) {
  const std::int64_t group = a.num_heads / a.num_kv_heads;
  const std::int64_t dim_v = a.head_dim_v;
  for (std::int64_t r = 0; r < nqr; ++r) {
    const std::int64_t h = kvh * group + r % group;
    const float m = m_run[r];
    const float l = l_run[r];
    float inv;
    if (a.sinks) {
      const float sink = a.sinks[h];
      const float mf = std::max(m, sink);
      const float scale = std::exp(m - mf);
      inv = scale / (l * scale + std::exp(sink - mf));
    } else {
      inv = l > 0.0f ? 1.0f / l : 0.0f;
    }
    T* out = static_cast<T*>(a.o) + (tok0 + r / group) * a.o_stride_t + h * a.o_stride_h;
    const float* acc = o + r * dim_v;
    for (std::int64_t i = 0; i < dim_v;) {
      const std::size_t vl = FM::setvl(static_cast<std::size_t>(dim_v - i));
      FM::store(out + i, FM::mul(FM::load(acc + i, vl), inv, vl), vl);
      i += static_cast<std::int64_t>(vl);
    }
  }
}

// What a task (request, KV head, block of query tokens) covers. A task past
// its request's extend is a no-op (locate returns false).
struct TaskSpan {
  std::int64_t b, kvh, m0, rows;  // request, KV head, first / number of its tokens
  std::int64_t len, prefix, start, group, nqr, req;
  std::int64_t pos_lo, pos_end;   // key positions seen by at least one query row
  // Element offset of query row qr = token * group + head in a.q.
  std::int64_t q_offset(const ExtendAttentionArgs& a, std::int64_t qr) const {
    return (start + m0 + qr / group) * a.q_stride_t + (kvh * group + qr % group) * a.q_stride_h;
  }
};

bool locate(const ExtendAttentionArgs& a, std::int64_t task, TaskSpan& t) {
  const std::int64_t hkv = a.num_kv_heads;
  const std::int64_t mblocks = (a.max_extend_len + kBlockM - 1) / kBlockM;
  t.b = task / (hkv * mblocks);
  t.kvh = (task / mblocks) % hkv;
  t.m0 = (task % mblocks) * kBlockM;
  const std::int64_t ext = a.extend_seq_lens[t.b];
  if (t.m0 >= ext) return false;
  t.rows = std::min(kBlockM, ext - t.m0);
  t.len = a.seq_lens[t.b];
  t.prefix = t.len - ext;
  t.start = a.extend_start_loc[t.b];
  t.group = a.num_heads / hkv;
  t.nqr = t.rows * t.group;
  t.req = a.req_pool_indices[t.b];
  t.pos_lo = a.window > 0 ? std::max<std::int64_t>(0, t.prefix + t.m0 - a.window + 1) : 0;
  t.pos_end = a.causal ? t.prefix + t.m0 + t.rows : t.len;
  return true;
}

template <class T, class TKV>
void extend_task(const ExtendAttentionArgs& a, std::int64_t task) {
  TaskSpan ts;
  if (!locate(a, task, ts)) return;
  const std::int64_t kvh = ts.kvh, m0 = ts.m0, rows = ts.rows, prefix = ts.prefix;
  const std::int64_t start = ts.start, group = ts.group, nqr = ts.nqr;
  const std::int64_t dim = a.head_dim, dim_v = a.head_dim_v;
  const std::int64_t window = a.window;
  // Row strides of qt / s and of the fp32 V rows (see padded_stride).
  const std::int64_t ld = padded_stride(nqr), lv = padded_stride(dim_v);

  Scratch& sc = scratch();
  sc.qt.resize(static_cast<std::size_t>(dim * ld));
  sc.s.resize(static_cast<std::size_t>(kBlockN * ld));
  sc.o.assign(static_cast<std::size_t>(nqr * dim_v), 0.0f);
  sc.kc.resize(static_cast<std::size_t>(kBlockN * dim));
  sc.vc.resize(static_cast<std::size_t>(kBlockN * lv));
  sc.m.assign(static_cast<std::size_t>(nqr), kMinit);
  sc.l.assign(static_cast<std::size_t>(nqr), 0.0f);
  sc.alpha.resize(static_cast<std::size_t>(nqr));
  sc.tmp.resize(static_cast<std::size_t>(4 * dim));

  // q rows -> fp32 * sm_scale: in rows qn[qr][d] for the dot-product path,
  // else transposed into qt[d][qr], four rows at a time.
  const bool transposed = use_transposed_q(nqr, dim);
  auto q_row = [&](std::int64_t r) { return at<T>(a.q, ts.q_offset(a, r)); };
  float* qt = sc.qt.data();
  if (!transposed) {
    for (std::int64_t r = 0; r < nqr; ++r) convert_row(qt + r * dim, q_row(r), dim, a.sm_scale);
  }
  float* tmp = sc.tmp.data();
  for (std::int64_t r0 = 0; transposed && r0 < nqr; r0 += 4) {
    const std::int64_t n = std::min<std::int64_t>(4, nqr - r0);
    for (std::int64_t k = 0; k < n; ++k) convert_row(tmp + k * dim, q_row(r0 + k), dim, a.sm_scale);
    if (n == 4) {
      const float* t0 = tmp;
      const float* t1 = tmp + dim;
      const float* t2 = tmp + 2 * dim;
      const float* t3 = tmp + 3 * dim;
      float* dst = qt + r0;
      std::int64_t d = 0;
      for (; d + 4 <= dim; d += 4) {  // 4 x 4 tiles
        float* e0 = dst;
        float* e1 = e0 + ld;
        float* e2 = e1 + ld;
        float* e3 = e2 + ld;
        const float x00 = t0[d], x01 = t0[d + 1], x02 = t0[d + 2], x03 = t0[d + 3];
        const float x10 = t1[d], x11 = t1[d + 1], x12 = t1[d + 2], x13 = t1[d + 3];
        const float x20 = t2[d], x21 = t2[d + 1], x22 = t2[d + 2], x23 = t2[d + 3];
        const float x30 = t3[d], x31 = t3[d + 1], x32 = t3[d + 2], x33 = t3[d + 3];
        e0[0] = x00, e0[1] = x10, e0[2] = x20, e0[3] = x30;
        e1[0] = x01, e1[1] = x11, e1[2] = x21, e1[3] = x31;
        e2[0] = x02, e2[1] = x12, e2[2] = x22, e2[3] = x32;
        e3[0] = x03, e3[1] = x13, e3[2] = x23, e3[3] = x33;
        dst = e3 + ld;
      }
      for (; d < dim; ++d, dst += ld) {
        dst[0] = t0[d];
        dst[1] = t1[d];
        dst[2] = t2[d];
        dst[3] = t3[d];
      }
    } else {
      for (std::int64_t k = 0; k < n; ++k)
        for (std::int64_t d = 0; d < dim; ++d) qt[d * ld + r0 + k] = tmp[k * dim + d];
    }
  }

  const KvCache& c = a.cache;
  constexpr bool kPerToken = std::is_same_v<TKV, std::int8_t>;
  const std::int64_t req = ts.req;
  float* s = sc.s.data();
  // K / V rows in fp32, scales folded in: for the whole request and KV head in
  // the thread's Converted store when it fits (each position converted once
  // for all the tasks of the request this thread runs), else per block into
  // the task's scratch. Blocks start at multiples of kBlockN either way.
  const std::int64_t len = ts.len;
  Converted& cv = converted();
  const bool reuse = len * (dim + dim_v) <= kMaxConvertedWords;
  if (reuse && (cv.b != ts.b || cv.kvh != kvh)) {
    cv.b = ts.b;
    cv.kvh = kvh;
    cv.k.resize(static_cast<std::size_t>(len * dim));
    cv.v.resize(static_cast<std::size_t>(len * lv));
    cv.have.assign(static_cast<std::size_t>((len + kBlockN - 1) / kBlockN), 0);
  }
  // Positions [lo, hi) -> rows [0, hi - lo) of kd / vd; cached rows are
  // prefetched kAhead positions ahead (they are scattered over the cache).
  auto convert = [&](std::int64_t lo, std::int64_t hi, float* kd, float* vd) {
    constexpr std::int64_t kAhead = 4;
    const std::int64_t cached_end = std::min(hi, prefix);
    auto k_row = [&](std::int64_t row) {
      return at<TKV>(c.k, row * c.k_stride_t + kvh * c.k_stride_h);
    };
    auto v_row = [&](std::int64_t row) {
      return at<TKV>(c.v, row * c.v_stride_t + kvh * c.v_stride_h);
    };
    // Always inlined: see detail::prefetch.
    auto prefetch_pos = [&](std::int64_t pos) RVVK_ALWAYS_INLINE {
      const std::int64_t row = cache_row(c, req, pos);
      detail::prefetch(k_row(row), dim * static_cast<std::int64_t>(sizeof(TKV)));
      detail::prefetch(v_row(row), dim_v * static_cast<std::int64_t>(sizeof(TKV)));
    };
    if constexpr (detail::kCanPrefetch) {
      for (std::int64_t pos = lo; pos < std::min(lo + kAhead, cached_end); ++pos)
        prefetch_pos(pos);
    }
    for (std::int64_t pos = lo; pos < cached_end; ++pos) {
      if constexpr (detail::kCanPrefetch) {
        if (pos + kAhead < cached_end) prefetch_pos(pos + kAhead);
      }
      const std::int64_t row = cache_row(c, req, pos);
      float ks = c.k_scale, vs = c.v_scale;
      if constexpr (kPerToken) {
        ks *= c.k_scales[row * c.scales_stride + kvh];
        vs *= c.v_scales[row * c.scales_stride + kvh];
      }
      const std::int64_t j = pos - lo;
      convert_row(kd + j * dim, k_row(row), dim, ks);
      convert_row(vd + j * lv, v_row(row), dim_v, vs);
    }
    for (std::int64_t pos = std::max(lo, prefix); pos < hi; ++pos) {
      const std::int64_t t = start + pos - prefix;
      const std::int64_t j = pos - lo;
      convert_row(kd + j * dim, at<T>(a.k, t * a.k_stride_t + kvh * a.k_stride_h), dim, 1.0f);
      convert_row(vd + j * lv, at<T>(a.v, t * a.v_stride_t + kvh * a.v_stride_h), dim_v,
                  1.0f);
    }
  };
  for (std::int64_t p0 = ts.pos_lo / kBlockN * kBlockN; p0 < ts.pos_end; p0 += kBlockN) {
    const std::int64_t nb = std::min(kBlockN, ts.pos_end - p0);
    const float* kc = sc.kc.data();
    const float* vc = sc.vc.data();
    if (reuse) {
      kc = cv.k.data() + p0 * dim;
      vc = cv.v.data() + p0 * lv;
      std::int32_t& have = cv.have[static_cast<std::size_t>(p0 / kBlockN)];
      if (have < nb) {
        convert(p0 + have, p0 + nb, cv.k.data() + (p0 + have) * dim,
                cv.v.data() + (p0 + have) * lv);
        have = static_cast<std::int32_t>(nb);
      }
    } else {
      convert(p0, p0 + nb, sc.kc.data(), sc.vc.data());
    }

    // While q.k runs, this block's V rows are asked for; while P.V runs, the
    // next block's K rows, when they are converted already (see Lines).
    Lines v_lines(vc, nb, dim_v, lv), k_lines;
    if (const std::int64_t p1 = p0 + kBlockN; reuse && p1 < ts.pos_end) {
      const std::int64_t ready = cv.have[static_cast<std::size_t>(p1 / kBlockN)];
      if (ready > 0) k_lines = Lines(cv.k.data() + p1 * dim, ready, dim, dim);
    }
    if (transposed) {
      qk_block(qt, nqr, ld, dim, kc, nb, s, v_lines);
    } else {
      qk_dot_block(qt, nqr, ld, dim, kc, nb, s);
    }
    if (a.logit_cap > 0.0f) {
      for (std::int64_t j = 0; j < nb; ++j) cap_row(s + j * ld, nqr, a.logit_cap);
    }

    // Mask the query rows that do not see key j: rows before it (causal) and
    // rows more than window - 1 after it. The visible rows are contiguous.
    for (std::int64_t j = 0; j < nb; ++j) {
      const std::int64_t rel = p0 + j - prefix - m0;  // key position - first query position
      const std::int64_t r_lo = a.causal ? std::max<std::int64_t>(0, rel) : 0;
      const std::int64_t r_end = window > 0 ? std::min(rows, rel + window) : rows;
      float* row = s + j * ld;
      if (r_lo > 0) fill_row(row, std::min(r_lo, rows) * group, kMasked);
      if (r_end < rows) {
        const std::int64_t from = std::max<std::int64_t>(r_end, 0) * group;
        fill_row(row + from, nqr - from, kMasked);
      }
    }

    softmax_block(s, nqr, ld, nb, sc.m.data(), sc.l.data(), sc.alpha.data());
    pv_block(sc.o.data(), dim_v, sc.alpha.data(), s, nqr, ld, vc, lv, nb, k_lines);
  }

  store_rows<T>(a, kvh, start + m0, nqr, sc.o.data(), sc.m.data(), sc.l.data());
}

#if defined(RVVK_AMX) || (defined(RVVK_VEC_AVX512) && defined(__AVX512BF16__))
#define RVVK_BF16MM 1
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
namespace bf16mm {

constexpr std::int64_t kN = 128;  // keys per block: 8 tiles of 16
constexpr std::int64_t kR = 32;   // query rows per pass: 2 tiles of 16
constexpr float kLog2e = 1.44269504f, kLn2 = 0.693147181f;
static_assert(kN % 32 == 0, "key pairs of whole tiles, rows of P in pairs of vectors");

#if defined(RVVK_AMX)
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};
#endif

#if defined(RVVK_AMX)
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
#else
struct Tiles {};  // no tile state without AMX
#endif

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
// key blocks (packing them again from the scattered cache rows for every query
// block cost ~5% of the time at batch 4 / context 2048, ~8% at batch 1 /
// context 8192, single thread). The last, partial block
// of a task (its visible keys end inside it) is packed per task, with zero
// rows past the end, as before. Reset by extend_attention on entry: the cache
// changes between calls.
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

#if defined(RVVK_AMX)
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
#else
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
#endif  // RVVK_AMX

// Lanes [lo, hi) of the 16 at 16 * i, as a mask.
inline __mmask16 lanes_in(std::int64_t lo, std::int64_t hi, int i) {
  auto bits = [](std::int64_t n) {
    n = std::clamp<std::int64_t>(n, 0, 16);
    return static_cast<std::uint32_t>((1u << n) - 1u);
  };
  return static_cast<__mmask16>(bits(hi - 16 * i) & ~bits(lo - 16 * i));
}

// 2^t for t = n + f, |f| <= 1/2 (n integral, as a float); 0 where keep is
// clear. The degree-4 polynomial is within 3e-6 of 2^f (relative; p is
// rounded to bf16 next, by up to 2^-8), with p(0) = 1 exactly.
RVVK_ALWAYS_INLINE inline __m512 exp2_split(__m512 n, __m512 f, __mmask16 keep) {
  __m512 p = _mm512_set1_ps(9.5827961341e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5906306952e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4024099112e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9312423468e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(keep, p, n);
}

// Online softmax of row s[0, kN) whose visible keys are [lo, hi), in base 2:
// the row's scores are x = s * k (k = sm_scale * log2(e) > 0; with a logit
// cap, x = cap * log2(e) * tanh(s * sm_scale / cap) and k = 1); m (the running
// max of x) and l updated; p = 2^(x - m) rounded to bf16 written to p16, and l
// sums the rounded p (so the weights P.V applies are exactly the ones it
// divides by). Returns alpha = 2^(m_old - m_new).
//
// p in bf16 is what P.V multiplies, as in torch's own CPU flash attention and
// SGLang's CPU extend kernel. Until 2026-12-04 p went to P.V as bf16 hi + lo
// (~16 bits), with a second P.V product and more softmax work; with this form
// one thread at batch 4 / context 2048 went from ~58 to ~43 ms (AMX Xeon).
template <bool kWhole>
RVVK_ALWAYS_INLINE inline float softmax_row(const float* s, std::int64_t lo, std::int64_t hi,
                                            float k, float scale, float cap, float* m, float* l,
                                            std::uint16_t* p16) {
  constexpr int kZ = static_cast<int>(kN / 16);
  __m512 x[kZ];
  __mmask16 vis[kZ];
  if (cap > 0.0f) {
    const __m512 in = _mm512_set1_ps(scale / cap), out = _mm512_set1_ps(cap * kLog2e);
    for (int i = 0; i < kZ; ++i)
      x[i] = _mm512_mul_ps(vec::avx512::tanh(_mm512_mul_ps(_mm512_loadu_ps(s + 16 * i), in)), out);
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < kZ; ++i) x[i] = _mm512_loadu_ps(s + 16 * i);
  }
  // The max of the visible x (in units of k); x is raw s without a cap, and
  // max(s) * k = max(s * k) for k > 0 (rounding is monotonic).
  __m512 mx = _mm512_set1_ps(-INFINITY);
  if constexpr (kWhole) {
#pragma GCC unroll 8
    for (int i = 0; i < kZ; i += 2) mx = _mm512_max_ps(mx, _mm512_max_ps(x[i], x[i + 1]));
  } else {
    for (int i = 0; i < kZ; ++i) {
      vis[i] = lanes_in(lo, hi, i);
      mx = _mm512_mask_max_ps(mx, vis[i], mx, x[i]);
    }
  }
  const float m_old = *m;
  const float m_new = std::max(m_old, _mm512_reduce_max_ps(mx) * k);
  const float alpha = m_new == m_old ? 1.0f : std::exp2(m_old - m_new);
  const __m512 kv = _mm512_set1_ps(k), mv = _mm512_set1_ps(m_new);
  const __m512 t_min = _mm512_set1_ps(-126.0f);  // 2^t below this is 0 (no denormals)
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  __m512 sum = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int i = 0; i < kZ; i += 2) {
    __m512 p[2];
    for (int j = 0; j < 2; ++j) {
      const __m512 t = _mm512_fmsub_ps(x[i + j], kv, mv);  // <= 0 up to rounding
      const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      // A whole block's t are finite: 2^t below 2^-126 comes out of vscalefps
      // as a denormal or 0, and bf16 conversion and vdpbf16ps flush denormals,
      // so p and l see 0 either way (t_min only matters with masked lanes,
      // whose t may be anything).
      __mmask16 keep = 0xffff;
      if constexpr (!kWhole) keep = vis[i + j] & _mm512_cmp_ps_mask(t, t_min, _CMP_GE_OQ);
      p[j] = exp2_split(n, _mm512_sub_ps(t, n), keep);
    }
    const __m512bh pb = _mm512_cvtne2ps_pbh(p[1], p[0]);
    _mm512_storeu_si512(p16 + 16 * i, reinterpret_cast<__m512i>(pb));
    sum = _mm512_dpbf16_ps(sum, pb, ones);  // the rounded p, in pairs
  }
  *m = m_new;
  *l = *l * alpha + _mm512_reduce_add_ps(sum);
  return alpha;
}

// Head sizes of whole tile rows, and no per-tensor cache scales (they apply to
// the cached keys only, not the new ones; the fp32 path folds them per row).
bool eligible(const ExtendAttentionArgs& a) {
  return a.head_dim % 32 == 0 && a.head_dim_v % 32 == 0 && a.cache.k_scale == 1.0f &&
         a.cache.v_scale == 1.0f && a.sm_scale > 0.0f;
}

void task(const ExtendAttentionArgs& a, std::int64_t task) {
  TaskSpan ts;
  if (!locate(a, task, ts)) return;
  const std::int64_t kvh = ts.kvh, m0 = ts.m0, len = ts.len, prefix = ts.prefix;
  const std::int64_t start = ts.start, group = ts.group, nqr = ts.nqr;
  const std::int64_t nqr_pad = (nqr + kR - 1) / kR * kR;
  const std::int64_t dim = a.head_dim, dim_v = a.head_dim_v;
  const std::int64_t window = a.window;
  // Scores to base-2 exponents: x = s * k (with a cap, softmax_row applies it
  // and x comes out in base 2).
  const float cap = a.logit_cap, scale = a.sm_scale;
  const float k = cap > 0.0f ? 1.0f : scale * kLog2e;

  Scratch& sc = scratch();
  sc.q.assign(static_cast<std::size_t>(nqr_pad * dim), 0);
  sc.kb.resize(static_cast<std::size_t>(dim / 32 * (kN / 16) * 256));
  sc.vb.resize(static_cast<std::size_t>(kN / 32 * (dim_v / 16) * 256));
  sc.s.resize(static_cast<std::size_t>(nqr_pad * kN));
  sc.p.assign(static_cast<std::size_t>(nqr_pad * kN), 0);  // pad rows stay 0
  sc.o.assign(static_cast<std::size_t>(nqr_pad * dim_v), 0.0f);
  sc.m.assign(static_cast<std::size_t>(nqr), kMinit);
  sc.l.assign(static_cast<std::size_t>(nqr), 0.0f);
  for (std::int64_t r = 0; r < nqr; ++r) {
    std::memcpy(sc.q.data() + r * dim, at<std::uint16_t>(a.q, ts.q_offset(a, r)),
                static_cast<std::size_t>(dim) * 2);
  }

  const KvCache& c = a.cache;
  const std::int64_t req = ts.req;
  const std::uint16_t* krows[kN];
  const std::uint16_t* vrows[kN];
  // Key blocks start at multiples of kN (a whole block is the same for every
  // task of the request); positions before a row's window are masked.
  const std::int64_t kb_size = dim / 32 * (kN / 16) * 256, vb_size = kN / 32 * (dim_v / 16) * 256;
  const std::int64_t whole = len / kN;
  const bool reuse = whole * (kb_size + vb_size) <= kMaxPackedWords;
  Packed& pk = packed();
  if (reuse && (pk.b != ts.b || pk.kvh != kvh)) {
    pk.b = ts.b;
    pk.kvh = kvh;
    pk.kb.resize(static_cast<std::size_t>(whole * kb_size));
    pk.vb.resize(static_cast<std::size_t>(whole * vb_size));
    pk.have.assign(static_cast<std::size_t>(whole), 0);
  }
  for (std::int64_t p0 = ts.pos_lo / kN * kN; p0 < ts.pos_end; p0 += kN) {
    const std::int64_t nb = std::min(kN, ts.pos_end - p0);
    const std::size_t blk = static_cast<std::size_t>(p0 / kN);
    const bool shared = reuse && nb == kN;
    std::uint32_t* kb = shared ? pk.kb.data() + blk * kb_size : sc.kb.data();
    std::uint32_t* vb = shared ? pk.vb.data() + blk * vb_size : sc.vb.data();
    if (!(shared && pk.have[blk])) {  // not packed by an earlier task of this call
      for (std::int64_t j = 0; j < kN; ++j) {
        const std::int64_t pos = p0 + j;
        if (j >= nb) {
          krows[j] = vrows[j] = nullptr;
        } else if (pos < prefix) {
          const std::int64_t row = cache_row(c, req, pos);
          krows[j] = at<std::uint16_t>(c.k, row * c.k_stride_t + kvh * c.k_stride_h);
          vrows[j] = at<std::uint16_t>(c.v, row * c.v_stride_t + kvh * c.v_stride_h);
        } else {
          const std::int64_t tok = start + pos - prefix;
          krows[j] = at<std::uint16_t>(a.k, tok * a.k_stride_t + kvh * a.k_stride_h);
          vrows[j] = at<std::uint16_t>(a.v, tok * a.v_stride_t + kvh * a.v_stride_h);
        }
      }
      pack_k(krows, dim, kb);
      pack_v(vrows, dim_v, vb);
      if (shared) pk.have[blk] = 1;
    }
    // Keys of the block in whole pairs of tiles: a task's last block is often
    // partial, and its scores and p past nk are neither computed nor read.
    const std::int64_t nk = (nb + 31) / 32 * 32;
    qk_tiles(sc.q.data(), nqr_pad, dim, kb, nk, sc.s.data());
    for (std::int64_t r = 0; r < nqr; ++r) {
      const std::int64_t qpos = prefix + m0 + r / group;  // the row's position
      const std::int64_t vis_lo = window > 0 ? qpos - window + 1 : 0;
      const std::int64_t vis_end = a.causal ? qpos + 1 : len;
      const std::int64_t lo = std::clamp<std::int64_t>(vis_lo - p0, 0, nb);
      const std::int64_t hi = std::clamp<std::int64_t>(vis_end - p0, lo, nb);
      float* const srow = sc.s.data() + r * kN;
      std::uint16_t* const prow = sc.p.data() + r * kN;
      float* const mr = &sc.m[r];
      float* const lr = &sc.l[r];
      const float alpha = lo == 0 && hi == kN
                              ? softmax_row<true>(srow, lo, hi, k, scale, cap, mr, lr, prow)
                              : softmax_row<false>(srow, lo, hi, k, scale, cap, mr, lr, prow);
      if (alpha != 1.0f) {
        float* orow = sc.o.data() + r * dim_v;
        const __m512 k = _mm512_set1_ps(alpha);
        for (std::int64_t i = 0; i < dim_v; i += 16)
          _mm512_storeu_ps(orow + i, _mm512_mul_ps(_mm512_loadu_ps(orow + i), k));
      }
    }
    pv_tiles(sc.p.data(), nqr_pad, vb, nk, dim_v, sc.o.data());
  }
  // m in natural units for store_rows (the sinks are).
  for (std::int64_t r = 0; r < nqr; ++r) sc.m[r] *= kLn2;
  store_rows<bf16>(a, kvh, start + m0, nqr, sc.o.data(), sc.m.data(), sc.l.data());
}

}  // namespace bf16mm
#endif  // RVVK_BF16MM

}  // namespace

void extend_attention(const ExtendAttentionArgs& a, std::int64_t task_begin,
                      std::int64_t task_end) {
#if defined(RVVK_BF16MM)
  if (a.dtype == DType::kBF16 && a.cache.dtype == DType::kBF16 && bf16mm::eligible(a)) {
    const bf16mm::Tiles tiles;
    bf16mm::packed().b = -1;  // nothing packed by an earlier call is valid
    for (std::int64_t t = task_begin; t < task_end; ++t) bf16mm::task(a, t);
    return;
  }
#endif
  converted().b = -1;  // nothing converted by an earlier call is valid
  detail::visit_activation(a.dtype, [&](auto act) {
    detail::visit_cache(a.cache.dtype, [&](auto kv) {
      for (std::int64_t t = task_begin; t < task_end; ++t)
        extend_task<typename decltype(act)::type, typename decltype(kv)::type>(a, t);
    });
  });
}

}  // namespace rvvk::RVVK_NS
