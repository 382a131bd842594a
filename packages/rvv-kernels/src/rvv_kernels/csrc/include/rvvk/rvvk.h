// rvv-kernels public API: raw-pointer kernels, no torch.
//
// Each kernel is compiled once per "variant" (portable C++, RVV 1.0, RVV 1.0 +
// Zvfh); the library picks the best variant the running CPU supports on first
// use. See docs/architecture.md.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rvvk {

// Element type of floating-point tensors handed to the kernels.
enum class DType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

#define RVVK_KERNEL(name, params, args) void name params;
#include "rvvk/kernels.def"
#undef RVVK_KERNEL

// What the running CPU offers, detected at run time (never at build time).
struct CpuInfo {
  bool has_v = false;        // RVV 1.0 ('V' in AT_HWCAP)
  unsigned vlen_bits = 0;    // VLEN, 0 without V
  bool zvfh = false;         // fp16 vector arithmetic
  bool zvfhmin = false;      // fp16 vector conversions
  bool zvfbfmin = false;     // bf16 vector conversions
  const char* source = "";   // where the extension bits came from: "hwprobe", "cpuinfo", "none"
};
CpuInfo cpu_info();

// Comma-separated variants compiled into this library, best last
// (e.g. "portable,rvv,rvv_zvfh").
const char* compiled_variants();
// The variant the kernels currently dispatch to.
const char* active_variant();
// Whether `name` is compiled in and runnable on this CPU.
bool variant_supported(const char* name);
// Switches every kernel to variant `name`; returns false (and changes nothing)
// if it is not compiled in or not runnable on this CPU.
bool set_variant(const char* name);
// Non-empty when the environment variable RVVK_VARIANT named a variant that
// cannot be used; the library then runs the default variant.
const char* variant_error();

}  // namespace rvvk
