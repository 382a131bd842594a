// Variant selection and the dispatch tables, from the variants table (variants.def)
// and the kernel manifest (kernels.def).
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "rvvk/rvvk.h"
#include "rvvk/variants.def"

namespace rvvk {

// RVVK_IS_1(x): 1 if x is a macro defined as 1 (CMake defines RVVK_HAVE_<variant>=1
// for each compiled variant), else 0; RVVK_IF(c)(...) keeps its arguments iff c is 1.
#define RVVK_ARG2_(a, b, ...) b
#define RVVK_ARG2(...) RVVK_ARG2_(__VA_ARGS__, 0, ~)
#define RVVK_PROBE_1 ~, 1
#define RVVK_CAT_(a, b) a##b
#define RVVK_CAT(a, b) RVVK_CAT_(a, b)
#define RVVK_IS_1(x) RVVK_ARG2(RVVK_CAT(RVVK_PROBE_, x), 0)
#define RVVK_IF_0(...)
#define RVVK_IF_1(...) __VA_ARGS__
#define RVVK_IF(c) RVVK_CAT(RVVK_IF_, c)
#define RVVK_HAVE(v) RVVK_IS_1(RVVK_HAVE_##v)

// Declarations of each compiled full variant's kernels (once per kernel and variant).
#define RVVK_DECLARE_full(kernel, v) \
  namespace v_##v {                  \
  decltype(rvvk::kernel) kernel;     \
  }
#define RVVK_DECLARE_partial(kernel, v)
#define RVVK_DECLARE(kernel, v, arch, parent, kind, vlen, flags, test) \
  RVVK_IF(RVVK_HAVE(v))(RVVK_DECLARE_##kind(kernel, v))
#define RVVK_KERNEL(name, params, args) RVVK_VARIANT_TABLE(RVVK_DECLARE, name)
#include "rvvk/kernels.def"
#undef RVVK_KERNEL
// A partial variant compiles only the ops with a folder of their own for it
// (kernels/<op>/<variant>/; RvvKernels.cmake), whose entry points the table's
// RVVK_PARTIAL_KERNELS lists and which are declared here; qualified lookup finds these first and its
// parent's (and so on down the chain) for every other entry of its table.
#define RVVK_USE_PARENT_partial(v, parent) \
  namespace v_##v {                        \
  using namespace v_##parent;              \
  }
#define RVVK_USE_PARENT_full(v, parent)
#define RVVK_USE_PARENT(a, v, arch, parent, kind, vlen, flags, test) \
  RVVK_IF(RVVK_HAVE(v))(RVVK_USE_PARENT_##kind(v, parent))
RVVK_VARIANT_TABLE(RVVK_USE_PARENT, ~)
#define RVVK_DECLARE_OWN(a, v, kernel) \
  RVVK_IF(RVVK_HAVE(v))(namespace v_##v { decltype(rvvk::kernel) kernel; })
RVVK_PARTIAL_KERNELS(RVVK_DECLARE_OWN, ~)

namespace {

// The compiled variants, in the order of the variants table.
struct Variant {
  const char* name;
  bool (*runnable)(const CpuInfo& cpu);
};
#define RVVK_VARIANT_ROW(a, v, arch, parent, kind, vlen, flags, test) \
  RVVK_IF(RVVK_HAVE(v))(Variant{#v, [](const CpuInfo& cpu) -> bool { return (void)cpu, test; }}, )
constexpr Variant kVariants[] = {RVVK_VARIANT_TABLE(RVVK_VARIANT_ROW, ~)};
#undef RVVK_VARIANT_ROW
constexpr int kNumVariants = static_cast<int>(sizeof kVariants / sizeof kVariants[0]);

// Per kernel: its implementation in each compiled variant, indexed like kVariants.
#define RVVK_ADDRESS(kernel, v, arch, parent, kind, vlen, flags, test) \
  RVVK_IF(RVVK_HAVE(v))(&v_##v::kernel, )
#define RVVK_KERNEL(name, params, args) \
  constexpr void (*const k_##name[]) params = {RVVK_VARIANT_TABLE(RVVK_ADDRESS, name)};
#include "rvvk/kernels.def"
#undef RVVK_KERNEL
#undef RVVK_ADDRESS

// Per variant: its kernels (the dispatch table; constant-initialised).
struct Table {
  const char* name;
  bool (*runnable)(const CpuInfo& cpu);
#define RVVK_KERNEL(name, params, args) void(*name) params = nullptr;
#include "rvvk/kernels.def"
#undef RVVK_KERNEL
};
constexpr Table make_table(int v) {
  Table t{kVariants[v].name, kVariants[v].runnable};
#define RVVK_KERNEL(name, params, args) t.name = k_##name[v];
#include "rvvk/kernels.def"
#undef RVVK_KERNEL
  return t;
}
template <std::size_t... v>
constexpr std::array<Table, sizeof...(v)> make_tables(std::index_sequence<v...>) {
  return {{make_table(static_cast<int>(v))...}};
}
constexpr std::array<Table, kNumVariants> kTables =
    make_tables(std::make_index_sequence<kNumVariants>());

bool runnable(const Table& t) { return t.runnable(cpu_info()); }

const Table* find(const char* name) {
  for (const Table& t : kTables)
    if (std::strcmp(t.name, name) == 0) return &t;
  return nullptr;
}

std::string g_error;
std::atomic<const Table*> g_active{nullptr};
std::once_flag g_init;

void init() {
  // Best runnable variant: the table lists them from least to most capable.
  const Table* best = &kTables[0];
  for (const Table& t : kTables)
    if (runnable(t)) best = &t;
  if (const char* want = std::getenv("RVVK_VARIANT"); want && *want) {
    const Table* t = find(want);
    if (t && runnable(*t)) {
      best = t;
    } else {
      g_error = std::string("RVVK_VARIANT=") + want + " cannot be used: " +
                (t ? "this CPU lacks the extensions it needs" : "it is not compiled in") +
                " (compiled: " + compiled_variants() + "); using " + best->name;
    }
  }
  g_active.store(best, std::memory_order_release);
}

const Table& active() {
  const Table* t = g_active.load(std::memory_order_acquire);
  if (t) return *t;
  std::call_once(g_init, init);
  return *g_active.load(std::memory_order_acquire);
}

}  // namespace

const char* compiled_variants() {
  static const std::string names = [] {
    std::string s;
    for (const Table& t : kTables) {
      if (!s.empty()) s += ',';
      s += t.name;
    }
    return s;
  }();
  return names.c_str();
}

const char* active_variant() { return active().name; }

bool variant_supported(const char* name) {
  const Table* t = find(name);
  return t && runnable(*t);
}

bool set_variant(const char* name) {
  active();  // settle the default (and RVVK_VARIANT) first
  const Table* t = find(name);
  if (!t || !runnable(*t)) return false;
  g_active.store(t, std::memory_order_release);
  return true;
}

const char* variant_error() {
  active();
  return g_error.c_str();
}

#define RVVK_KERNEL(name, params, args) \
  void name params { active().name args; }
#include "rvvk/kernels.def"
#undef RVVK_KERNEL

static_assert(RVVK_HAVE(portable), "the portable variant must always be compiled");

}  // namespace rvvk
