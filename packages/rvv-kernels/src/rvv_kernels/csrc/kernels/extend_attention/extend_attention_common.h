// What extend attention's driver and its ISA implementations share: the
// register-group aliases, block sizes and masks, the padded row stride, the
// prefetch helper Lines, a task's span (TaskSpan, locate) and the output rows
// (store_rows). No ISA-specific code.
#pragma once

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
  // Key positions below req_lo are outside the window of every query of the
  // request: their table entries need not name valid rows (SGLang's
  // sliding-window pools free them), so they are never read.
  std::int64_t req_lo;
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
  t.req_lo = a.window > 0 ? std::max<std::int64_t>(0, t.prefix - a.window + 1) : 0;
  return true;
}
}  // namespace
}  // namespace rvvk::RVVK_NS
