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

// Calls fn(TypeTag<T>{}) with T the storage type of `dtype`: any DType when
// kAnyDtype, else only the activation dtypes (fp32, bf16, fp16); the others are
// rejected by the callers' validation, do nothing and do not instantiate fn.
template <bool kAnyDtype, class Fn>
void visit_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      return fn(TypeTag<float>{});
    case DType::kBF16:
      return fn(TypeTag<bf16>{});
    case DType::kF16:
      return fn(TypeTag<f16>{});
    case DType::kFP8E4M3:
      if constexpr (kAnyDtype) fn(TypeTag<fp8e4m3>{});
      return;
    case DType::kFP8E5M2:
      if constexpr (kAnyDtype) fn(TypeTag<fp8e5m2>{});
      return;
    case DType::kI8:
      if constexpr (kAnyDtype) fn(TypeTag<std::int8_t>{});
      return;
  }
}

// An activation's dtype (fp32, bf16, fp16).
template <class Fn>
void visit_activation(DType dtype, Fn&& fn) {
  visit_dtype<false>(dtype, fn);
}

// A KV cache's dtype (any DType).
template <class Fn>
void visit_cache(DType dtype, Fn&& fn) {
  visit_dtype<true>(dtype, fn);
}

}  // namespace rvvk::detail
