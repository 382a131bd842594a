// Run-time DType -> storage-type dispatch shared by the kernels.
#pragma once

#include <cstdint>

#include "rvvk/detail/scalar.h"
#include "rvvk/rvvk.h"

namespace rvvk::detail {

template <class T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) with T the storage type of an activation dtype (fp32,
// bf16, fp16); other dtypes are rejected by the callers' validation and do nothing.
template <class Fn>
void visit_activation(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      return fn(TypeTag<float>{});
    case DType::kBF16:
      return fn(TypeTag<bf16>{});
    case DType::kF16:
      return fn(TypeTag<f16>{});
    default:
      return;
  }
}

// Calls fn(TypeTag<T>{}) with T the storage type of a KV-cache dtype (any DType).
template <class Fn>
void visit_cache(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      return fn(TypeTag<float>{});
    case DType::kBF16:
      return fn(TypeTag<bf16>{});
    case DType::kF16:
      return fn(TypeTag<f16>{});
    case DType::kFP8E4M3:
      return fn(TypeTag<fp8e4m3>{});
    case DType::kFP8E5M2:
      return fn(TypeTag<fp8e5m2>{});
    case DType::kI8:
      return fn(TypeTag<std::int8_t>{});
  }
}

}  // namespace rvvk::detail
