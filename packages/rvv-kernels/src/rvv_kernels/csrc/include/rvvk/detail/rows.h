// Row loops written once over the vector layer, shared by the kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rvvk/detail/vec.h"

namespace rvvk::RVVK_NS {
namespace {

// dst[0, n) = src[0, n) * scale in fp32: a row of storage type T into fp32 with
// a scale folded in (attention's q, K and V rows), strip-mined with the vector
// traits FV (a vec::F32<L>).
template <class FV, class T>
void scale_row(float* dst, const T* src, std::int64_t n, float scale) {
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = FV::setvl(static_cast<std::size_t>(n - i));
    FV::store(dst + i, FV::mul(FV::load(src + i, vl), scale, vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
}

}  // namespace
}  // namespace rvvk::RVVK_NS
