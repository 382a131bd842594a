// Top-k selection step for moe_routing.cpp, plain C++ (the portable and x86 variants).
// Defines rvvk::RVVK_NS::moe_argmax.
#pragma once

#include <cstdint>

#include "rvvk/detail/vec.h"

namespace rvvk::RVVK_NS {
namespace {

// The index of the first maximum of v[0, n), NaN elements ignored (they mark experts that
// are taken or not candidates); -1 if every element is NaN (or n == 0).
inline std::int64_t moe_argmax(const float* v, std::int64_t n) {
  std::int64_t best = -1;
  float best_v = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = v[i];
    if (x == x && (best < 0 || x > best_v)) {
      best = i;
      best_v = x;
    }
  }
  return best;
}

}  // namespace
}  // namespace rvvk::RVVK_NS
