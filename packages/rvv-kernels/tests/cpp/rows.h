// Test helpers for the row-wise kernels (the norms) over strided rows: random
// fills, and the gap between a row's values and the next row, which the kernel
// must leave as the test set it (kSentinel).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "harness.h"
#include "reference.h"

namespace rvvk_test {

constexpr double kSentinel = -77.0;

// b's elements uniform in [lo, hi).
inline void fill(ref::Buffer& b, ref::Rng& rng, double lo, double hi) {
  for (std::size_t i = 0; i < b.size(); ++i) b.set(i, rng.uniform(lo, hi));
}

// Every element of b: kSentinel.
inline void fill_sentinel(ref::Buffer& b) {
  for (std::size_t i = 0; i < b.size(); ++i) b.set(i, kSentinel);
}

// Elements [cols, stride) of row r (rows `stride` apart) of each buffer still
// hold kSentinel.
inline void check_gap(Context& ctx, rvvk::DType dt, std::int64_t r, std::int64_t cols,
                      std::int64_t stride, std::initializer_list<const ref::Buffer*> bufs) {
  for (const ref::Buffer* b : bufs)
    for (std::int64_t j = cols; j < stride; ++j) {
      const std::size_t i = static_cast<std::size_t>(r * stride + j);
      CHECK_MSG(b->get(i) == kSentinel, "%s cols=%lld stride=%lld: wrote the gap at %zu",
                ref::name(dt), (long long)cols, (long long)stride, i);
    }
}

}  // namespace rvvk_test
