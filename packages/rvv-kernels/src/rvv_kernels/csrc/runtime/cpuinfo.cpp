// Run-time detection of the CPU's vector features. Compiled without V so that
// it runs (and answers "no") on any riscv64 CPU, and without AVX-512 on x86-64.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "rvvk/rvvk.h"

#if defined(__riscv) && defined(__linux__)
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace rvvk {
namespace {

#if defined(__riscv) && defined(__linux__)

constexpr unsigned long kHwcapV = 1ul << ('V' - 'A');
constexpr long kSysRiscvHwprobe = 258;
constexpr std::int64_t kHwprobeKeyImaExt0 = 4;
constexpr std::uint64_t kHwprobeExtZvfh = 1ull << 30;
constexpr std::uint64_t kHwprobeExtZvfhmin = 1ull << 31;

struct HwprobePair {
  std::int64_t key;
  std::uint64_t value;
};

unsigned read_vlen_bits() {
  unsigned long vlenb;
  // csrr vlenb, by CSR number, so that this file needs no V in -march.
  asm volatile("csrr %0, 0xc22" : "=r"(vlenb));
  return static_cast<unsigned>(vlenb * 8);
}

// The isa line of /proc/cpuinfo, e.g. "rv64imafdcv_zicbom_..._zvfh_zvfhmin".
std::string cpuinfo_isa() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return {};
  char line[4096];
  std::string isa;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "isa", 3) == 0) {
      const char* colon = std::strchr(line, ':');
      if (colon) {
        isa = colon + 1;
        break;
      }
    }
  }
  std::fclose(f);
  return isa;
}

bool isa_has(const std::string& isa, const char* ext) {
  const std::string needle = std::string("_") + ext;
  std::size_t pos = 0;
  while ((pos = isa.find(needle, pos)) != std::string::npos) {
    const std::size_t end = pos + needle.size();
    if (end >= isa.size() || isa[end] == '_' || isa[end] == '\n' || isa[end] == ' ') return true;
    pos = end;
  }
  return false;
}

CpuInfo detect() {
  CpuInfo info;
  info.source = "none";
  info.has_v = (getauxval(AT_HWCAP) & kHwcapV) != 0;
  if (info.has_v) info.vlen_bits = read_vlen_bits();
  HwprobePair pair{kHwprobeKeyImaExt0, 0};
  const std::string isa = cpuinfo_isa();
  if (syscall(kSysRiscvHwprobe, &pair, 1, 0, nullptr, 0) == 0 && pair.key == kHwprobeKeyImaExt0) {
    info.zvfh = (pair.value & kHwprobeExtZvfh) != 0;
    info.zvfhmin = info.zvfh || (pair.value & kHwprobeExtZvfhmin) != 0;
    info.source = "hwprobe";
  } else if (!isa.empty()) {
    info.zvfh = isa_has(isa, "zvfh");
    info.zvfhmin = info.zvfh || isa_has(isa, "zvfhmin");
    info.source = "cpuinfo";
  }
  info.zvfbfmin = isa_has(isa, "zvfbfmin");
  // RVVK_ASSUME_EXTENSIONS=zvfh[,zvfhmin]: a measurement aid for emulators whose user
  // mode offers neither hwprobe nor /proc/cpuinfo's isa line (QEMU 7.2, which the
  // instruction counts use): the listed extensions are taken as present, with V only.
  // On a CPU without them the process dies of SIGILL in the first such kernel.
  if (const char* assume = std::getenv("RVVK_ASSUME_EXTENSIONS"); assume && info.has_v) {
    const std::string list = std::string("_") + assume;
    std::string names;
    for (char ch : list) names += ch == ',' ? '_' : ch;
    if (isa_has(names, "zvfh")) info.zvfh = info.zvfhmin = true;
    if (isa_has(names, "zvfhmin")) info.zvfhmin = true;
    if (info.zvfh || info.zvfhmin) info.source = "assumed";
  }
  if (!info.has_v) info.zvfh = info.zvfhmin = info.zvfbfmin = false;
  return info;
}

#elif defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

// AVX512-BF16 (cpuid leaf 7, subleaf 1, EAX bit 5); the OS's consent to the
// AVX-512 state is part of `avx512`.
bool detect_avx512_bf16() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || a < 1) return false;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1);
}

// AMX-BF16 and AVX512-BF16 in the CPU, the tile state enabled by the OS
// (XCR0 bits 17 and 18), and - on Linux, where a process must ask before its
// first tile instruction or it gets SIGILL - the tile data permission granted
// to this process (arch_prctl ARCH_REQ_XCOMP_PERM; process-wide, idempotent).
bool detect_amx_bf16() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_tile = (d >> 24) & 1, amx_bf16 = (d >> 22) & 1;
  if (!amx_tile || !amx_bf16 || a < 1) return false;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !((a >> 5) & 1)) return false;  // AVX512-BF16
  if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return false;           // OSXSAVE
  unsigned lo, hi;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  constexpr unsigned kXtileCfg = 1u << 17, kXtileData = 1u << 18;
  if ((lo & (kXtileCfg | kXtileData)) != (kXtileCfg | kXtileData)) return false;
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtileData = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
#else
  return false;
#endif
}

CpuInfo detect() {
  CpuInfo info;
  info.source = "cpuid";
  __builtin_cpu_init();
  // The compiler's runtime also checks (XGETBV) that the OS saves the AVX and
  // AVX-512 state.
  info.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
              __builtin_cpu_supports("f16c");
  info.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  info.avx512_bf16 = info.avx512 && detect_avx512_bf16();
  info.amx_bf16 = info.avx512 && detect_amx_bf16();
  return info;
}

#else

CpuInfo detect() {
  CpuInfo info;
  info.source = "none";
  return info;
}

#endif

}  // namespace

CpuInfo cpu_info() {
  static const CpuInfo info = detect();
  return info;
}

}  // namespace rvvk
