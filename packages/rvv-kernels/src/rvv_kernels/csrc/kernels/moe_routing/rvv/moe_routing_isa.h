// Top-k selection step for moe_routing.cpp on RVV 1.0 (rvv, rvv_zvfh). Defines
// rvvk::RVVK_NS::moe_argmax.
#pragma once

#include <riscv_vector.h>

#include <cstddef>
#include <cstdint>

#include "rvvk/detail/vec.h"

namespace rvvk::RVVK_NS {
namespace {

// The index of the first maximum of v[0, n), NaN elements ignored (they mark experts that
// are taken or not candidates); -1 if every element is NaN (or n == 0). Two strip-mined
// passes at LMUL 4: the maximum by vfredmax (IEEE maximumNumber: NaN lanes and the NaN
// start value drop out unless everything is NaN), then the first lane equal to it
// (vmfeq + vfirst; NaN never compares equal).
inline std::int64_t moe_argmax(const float* v, std::int64_t n) {
  const std::size_t total = static_cast<std::size_t>(n);
  vfloat32m1_t red = __riscv_vfmv_v_f_f32m1(__builtin_nanf(""), 1);
  for (std::size_t i = 0; i < total;) {
    const std::size_t vl = __riscv_vsetvl_e32m4(total - i);
    red = __riscv_vfredmax_vs_f32m4_f32m1(__riscv_vle32_v_f32m4(v + i, vl), red, vl);
    i += vl;
  }
  const float m = __riscv_vfmv_f_s_f32m1_f32(red);
  if (m != m) return -1;
  for (std::size_t i = 0; i < total;) {
    const std::size_t vl = __riscv_vsetvl_e32m4(total - i);
    const vbool8_t eq = __riscv_vmfeq_vf_f32m4_b8(__riscv_vle32_v_f32m4(v + i, vl), m, vl);
    const long first = __riscv_vfirst_m_b8(eq, vl);
    if (first >= 0) return static_cast<std::int64_t>(i) + first;
    i += vl;
  }
  return -1;  // not reached: the maximum is an element
}

}  // namespace
}  // namespace rvvk::RVVK_NS
