// Addressing SGLang's indexed KV cache, shared by the attention kernels.
#pragma once

#include <cstdint>

#include "rvvk/rvvk.h"

namespace rvvk::detail {

// base + offset elements of type T.
template <class T>
inline const T* at(const void* base, std::int64_t offset) {
  return static_cast<const T*>(base) + offset;
}

// The cache row holding position `pos` of request slot `req` (req_to_token[req, pos]).
inline std::int64_t cache_row(const KvCache& c, std::int64_t req, std::int64_t pos) {
  const std::int64_t i = req * c.req_to_token_stride + pos;
  return c.req_to_token_int64 ? static_cast<const std::int64_t*>(c.req_to_token)[i]
                              : static_cast<const std::int32_t*>(c.req_to_token)[i];
}

}  // namespace rvvk::detail
