// A minimal test harness: every registered test runs once per kernel variant
// that this CPU can run; failures print what differed, and the run ends with
// one summary line "<target>: N passed, M failed".
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace rvvk_test {

struct Context {
  std::string variant;  // variant under test
  unsigned vlen_bits;   // VLEN the vector layer runs at (256 for portable)
  int failures = 0;
  void fail(const char* file, int line, const std::string& what) {
    if (failures < 10) std::printf("    %s:%d: %s\n", file, line, what.c_str());
    ++failures;
  }
};

using TestFn = std::function<void(Context&)>;
std::vector<std::pair<std::string, TestFn>>& registry();

struct Register {
  Register(const char* name, TestFn fn) { registry().emplace_back(name, std::move(fn)); }
};

std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace rvvk_test

#define RVVK_TEST(name)                                                   \
  static void name(rvvk_test::Context& ctx);                              \
  static rvvk_test::Register name##_registration(#name, name);            \
  static void name(rvvk_test::Context& ctx)

#define CHECK_MSG(cond, ...)                                              \
  do {                                                                    \
    if (!(cond)) ctx.fail(__FILE__, __LINE__, rvvk_test::fmt(__VA_ARGS__)); \
  } while (0)
