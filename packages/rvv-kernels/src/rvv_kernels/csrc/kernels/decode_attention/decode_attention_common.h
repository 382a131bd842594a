// What decode attention's driver and every ISA implementation of its products
// share: the task's rows of a key block (BlockRows), the prefetch helper, head
// groups as compile-time sizes, q scaled to fp32 and the pair orders of bf16
// rows. No ISA-specific code.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "rvvk/detail/aligned.h"
#include "rvvk/detail/dispatch.h"
#include "rvvk/detail/kv_cache.h"
#include "rvvk/detail/rows.h"
#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

using F = vec::F32<4>;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rows to prefetch: n K rows of k_bytes and V rows of v_bytes.
template <class TKV>
struct Prefetch {
  std::int64_t k_bytes, v_bytes;
  const TKV* const* k = nullptr;  // null: no K rows
  const TKV* const* v = nullptr;  // null: no V rows
  std::int64_t n = 0;        // rows [0, n)
  std::int64_t ahead = 0;    // on key j, the products prefetch row j + ahead
  // Prefetches key j's rows. Always inlined: GCC 12 infers that an out-of-line
  // function doing nothing but prefetch has no side effects and drops its calls.
  RVVK_ALWAYS_INLINE void row(std::int64_t j) const {
    if (k) detail::prefetch(k[j], k_bytes);
    if (v) detail::prefetch(v[j], v_bytes);
  }
  // Prefetches the rows j of [lo, hi) (and of [0, n)) with j % mod == rem: a
  // share of the rows, when mod passes over the same keys spread them.
  RVVK_ALWAYS_INLINE void share(std::int64_t lo, std::int64_t hi, std::int64_t mod,
                                std::int64_t rem) const {
    hi = std::min(hi, n);
    for (std::int64_t j = lo + (rem - lo % mod + mod) % mod; j < hi; j += mod) row(j);
  }
};

// One KV head's rows of a key block, as the driver hands them to the products:
// k[j] / v[j] for the block's keys j < nb, then (k[kBlock + j], v[kBlock + j],
// j < next) the next block's rows, to prefetch. first: the split's first block
// (nothing prefetched its rows). k_scales: an int8 cache's K scales of the
// block's keys (null for other caches).
template <class TKV>
struct BlockRows {
  const TKV* const* k;
  const TKV* const* v;
  std::int64_t nb, next;
  bool first;
  std::int64_t k_bytes, v_bytes;  // bytes of a K row and of a V row
  const float* k_scales = nullptr;
};

// dst[0, n) = src[0, n) * scale in fp32 (q scaled by sm_scale and k_scale).
template <class T>
void scale_q(float* dst, const T* src, std::int64_t n, float scale) {
  scale_row<F>(dst, src, n, scale);
}

// What every ISA's products keep of the call (see generic::Products): the head
// dimensions, the query heads per KV head, q's scale (sm_scale x k_scale) and
// the driver's fp32 q scratch (the task's heads x dim).
struct ProductsBase {
  ProductsBase(const DecodeAttentionArgs& a, float* q)
      : dim_(a.head_dim),
        dim_v_(a.head_dim_v),
        group_(a.num_heads / a.num_kv_heads),
        scale_(a.sm_scale * a.cache.k_scale),
        q_(q) {}
  std::int64_t dim_, dim_v_, group_;
  float scale_;
  float* q_;
};

// Prefetches the rows of a split's first block (where the target can), which no
// earlier block asked for.
template <class TKV>
RVVK_ALWAYS_INLINE inline void prefetch_first(const BlockRows<TKV>& r) {
  if (detail::kCanPrefetch && r.first) {
    for (std::int64_t j = 0; j < r.nb; ++j) {
      detail::prefetch(r.k[j], r.k_bytes);
      detail::prefetch(r.v[j], r.v_bytes);
    }
  }
}

// fn(integral_constant<int, N>{}, g0) for one group of the n (< N + 1) heads
// from g0, N the group size as a compile-time constant.
template <int N, class Fn>
void head_group_rest(std::int64_t n, std::int64_t g0, Fn& fn) {
  if constexpr (N > 0) {
    if (n == N) {
      fn(std::integral_constant<int, N>{}, g0);
    } else {
      head_group_rest<N - 1>(n, g0, fn);
    }
  }
}

// The heads in groups of Max, then one group of the rest: fn(integral_constant<
// int, N>{}, g0) for heads [g0, g0 + N).
template <int Max, class Fn>
void for_head_groups(std::int64_t heads, Fn&& fn) {
  std::int64_t g = 0;
  for (; g + Max <= heads; g += Max) fn(std::integral_constant<int, Max>{}, g);
  head_group_rest<Max - 1>(heads - g, g, fn);
}

// Pair order of bf16 rows read W elements at a time (W = 2 x the fp32 lanes of a
// register; see the x86 forms): per W elements the even ones, then the odd ones.
// x[0, n) (n a multiple of W) from natural order to pair order, in place.
template <int W>
void to_pairs(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; i += W) {
    float t[W];
    for (int e = 0; e < W / 2; ++e) {
      t[e] = x[i + 2 * e];
      t[W / 2 + e] = x[i + 2 * e + 1];
    }
    std::copy_n(t, W, x + i);
  }
}
// x[0, n) from pair order to natural order, in place.
template <int W>
void from_pairs(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; i += W) {
    float t[W];
    for (int e = 0; e < W / 2; ++e) {
      t[2 * e] = x[i + e];
      t[2 * e + 1] = x[i + W / 2 + e];
    }
    std::copy_n(t, W, x + i);
  }
}

}  // namespace
}  // namespace rvvk::RVVK_NS
