// Scratch vectors whose storage starts on a cache line (64 bytes).
//
// std::vector's storage comes from malloc, 16-byte aligned; large blocks sit 16
// bytes past a page boundary. Then every 64-byte row of a buffer - an AMX tile
// row, a zmm, a padded_stride row - spans two cache lines, and every load or
// store of it touches both (measured cost: docs/performance-log.md).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace rvvk::detail {

inline constexpr std::size_t kLine = 64;

template <class T>
struct LineAllocator {
  using value_type = T;
  LineAllocator() = default;
  template <class U>
  LineAllocator(const LineAllocator<U>&) {}  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kLine}));
  }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t{kLine}); }
  template <class U>
  bool operator==(const LineAllocator<U>&) const {
    return true;
  }
  template <class U>
  bool operator!=(const LineAllocator<U>&) const {
    return false;
  }
};

template <class T>
using LineVector = std::vector<T, LineAllocator<T>>;

}  // namespace rvvk::detail
