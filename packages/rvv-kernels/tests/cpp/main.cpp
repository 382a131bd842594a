#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "harness.h"
#include "rvvk/rvvk.h"
#include "rvvk/variants.def"

namespace rvvk_test {

std::vector<std::pair<std::string, TestFn>>& registry() {
  static std::vector<std::pair<std::string, TestFn>> tests;
  return tests;
}

std::string fmt(const char* format, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, format);
  std::vsnprintf(buf, sizeof buf, format, ap);
  va_end(ap);
  return buf;
}

// The vector length a variant works with (the variants table's vlen column): the
// CPU's for RVV, fixed otherwise; 0 for a name the table does not know.
unsigned variant_vlen(const std::string& variant, const rvvk::CpuInfo& cpu) {
#define RVVK_VLEN(a, name, arch, parent, kind, vlen, flags, test) \
  if (variant == #name) return vlen;
  RVVK_VARIANT_TABLE(RVVK_VLEN, ~)
#undef RVVK_VLEN
  return 0;
}

}  // namespace rvvk_test

// Usage: [RVVK_TEST_TIMES=1] [RVVK_TEST_VARIANTS=v1,v2] rvvk_tests [[-]substring ...]
// (a test runs if its name contains any of the plain filters, all tests without one, and
// none of the "-" ones)
int main(int argc, char** argv) {
  using namespace rvvk_test;
  auto selected = [&](const std::string& name) {
    bool any_plain = false, matched = false;
    for (int i = 1; i < argc; ++i) {
      if (argv[i][0] == '-') {
        if (std::strstr(name.c_str(), argv[i] + 1)) return false;
      } else {
        any_plain = true;
        matched = matched || std::strstr(name.c_str(), argv[i]) != nullptr;
      }
    }
    return !any_plain || matched;
  };
  // RVVK_TEST_TIMES=1: one "time [variant] test: seconds" line per test run.
  const char* times_env = std::getenv("RVVK_TEST_TIMES");
  const bool times = times_env != nullptr && std::strcmp(times_env, "1") == 0;
  const rvvk::CpuInfo cpu = rvvk::cpu_info();
  std::printf(
      "compiled variants: %s; default: %s; cpu: v=%d vlen=%u zvfh=%d zvfhmin=%d avx2=%d "
      "avx512=%d avx512_bf16=%d amx_bf16=%d (%s)\n",
      rvvk::compiled_variants(), rvvk::active_variant(), cpu.has_v, cpu.vlen_bits, cpu.zvfh,
      cpu.zvfhmin, cpu.avx2, cpu.avx512, cpu.avx512_bf16, cpu.amx_bf16, cpu.source);
  if (*rvvk::variant_error()) {
    std::printf("FAIL: %s\n", rvvk::variant_error());
    return 1;
  }
  int passed = 0, failed = 0;
  // RVVK_TEST_VARIANTS=a,b: test only these variants, each of which must be compiled and
  // runnable here (a run whose list names one that is not fails instead of skipping it).
  const char* only_env = std::getenv("RVVK_TEST_VARIANTS");
  const std::string only = only_env != nullptr ? only_env : "";
  const std::string compiled = rvvk::compiled_variants();
  auto listed = [](const std::string& list, const std::string& v) {
    return ("," + list + ",").find("," + v + ",") != std::string::npos;
  };
  if (!only.empty()) {
    std::stringstream wanted(only);
    std::string v;
    while (std::getline(wanted, v, ',')) {
      if (!listed(compiled, v) || !rvvk::variant_supported(v.c_str())) {
        std::printf("FAIL: RVVK_TEST_VARIANTS names %s, which is not %s here\n", v.c_str(),
                    listed(compiled, v) ? "runnable" : "compiled");
        ++failed;
      }
    }
    std::printf("variants tested (RVVK_TEST_VARIANTS): %s\n", only.c_str());
  }
  std::stringstream variants(compiled);
  std::string variant;
  while (std::getline(variants, variant, ',')) {
    if (!only.empty() && !listed(only, variant)) continue;
    if (!rvvk::variant_supported(variant.c_str())) {
      std::printf("variant %s: not runnable on this CPU\n", variant.c_str());
      continue;
    }
    if (!rvvk::set_variant(variant.c_str())) {
      std::printf("FAIL: set_variant(%s) refused a runnable variant\n", variant.c_str());
      ++failed;
      continue;
    }
    for (auto& [name, fn] : registry()) {
      if (!selected(name)) continue;
      const unsigned vlen = variant_vlen(variant, cpu);
      Context ctx{variant, vlen};
      const auto start = std::chrono::steady_clock::now();
      fn(ctx);
      if (times) {
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        std::printf("time [%s] %s: %.2f s\n", variant.c_str(), name.c_str(), took.count());
      }
      if (ctx.failures == 0) {
        ++passed;
      } else {
        ++failed;
        std::printf("FAIL [%s] %s (%d failed checks)\n", variant.c_str(), name.c_str(),
                    ctx.failures);
      }
    }
  }
#if defined(__riscv)
  if (cpu.has_v) {
    std::printf("RVV vlen=%u zvfh=%s: %d passed, %d failed\n", cpu.vlen_bits,
                cpu.zvfh ? "on" : "off", passed, failed);
  } else {
    std::printf("riscv64 no-V: %d passed, %d failed\n", passed, failed);
  }
#elif defined(__x86_64__)
  std::printf("native x86-64 (avx2=%s avx512=%s avx512_bf16=%s amx_bf16=%s): %d passed, %d failed\n",
              cpu.avx2 ? "on" : "off", cpu.avx512 ? "on" : "off",
              cpu.avx512_bf16 ? "on" : "off", cpu.amx_bf16 ? "on" : "off", passed, failed);
#else
  std::printf("native: %d passed, %d failed\n", passed, failed);
#endif
  return failed == 0 && passed > 0 ? 0 : 1;
}
