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

// Whether the target has a prefetch instruction (RISC-V: Zicbop). Without one
// the kernels skip the address arithmetic of prefetching altogether.
#if defined(__x86_64__) || defined(__aarch64__) || defined(__riscv_zicbop)
inline constexpr bool kCanPrefetch = true;
#else
inline constexpr bool kCanPrefetch = false;
#endif

// Asks for the `bytes` bytes at p to be brought into the cache (a hint). The KV
// rows of a request sit wherever the allocator put them, so the hardware
// prefetchers cannot guess the next row: the kernels prefetch the rows of the
// next block of keys while they compute on the current one.
// Always inlined: out of line, GCC (12) infers that the function has no side
// effects and drops the calls.
__attribute__((always_inline)) inline void prefetch(const void* p, std::int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (std::int64_t i = 0; i < bytes; i += 64) __builtin_prefetch(c + i, 0, 2);
}

}  // namespace rvvk::detail
