// Element-wise conversion between the floating-point storage types.
#include <cstddef>
#include <cstdint>

#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

using F = vec::F32<8>;

template <class S, class D>
void convert_impl(const S* src, D* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(n - i));
    F::store(dst + i, F::load(src + i, vl), vl);
    i += static_cast<std::int64_t>(vl);
  }
}

template <class S>
void convert_from(const S* src, DType dst_dtype, void* dst, std::int64_t n) {
  switch (dst_dtype) {
    case DType::kF32:
      return convert_impl(src, static_cast<float*>(dst), n);
    case DType::kBF16:
      return convert_impl(src, static_cast<bf16*>(dst), n);
    case DType::kF16:
      return convert_impl(src, static_cast<f16*>(dst), n);
    default:
      return;  // not a floating-point activation dtype: rejected by the caller
  }
}

}  // namespace

void convert(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n) {
  switch (src_dtype) {
    case DType::kF32:
      return convert_from(static_cast<const float*>(src), dst_dtype, dst, n);
    case DType::kBF16:
      return convert_from(static_cast<const bf16*>(src), dst_dtype, dst, n);
    case DType::kF16:
      return convert_from(static_cast<const f16*>(src), dst_dtype, dst, n);
    case DType::kFP8E4M3:
      return convert_from(static_cast<const fp8e4m3*>(src), dst_dtype, dst, n);
    case DType::kFP8E5M2:
      return convert_from(static_cast<const fp8e5m2*>(src), dst_dtype, dst, n);
    case DType::kI8:
      return convert_from(static_cast<const std::int8_t*>(src), dst_dtype, dst, n);
  }
}

}  // namespace rvvk::RVVK_NS
