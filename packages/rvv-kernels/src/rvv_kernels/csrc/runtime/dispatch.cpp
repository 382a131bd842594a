// Variant selection and the dispatch table driven by kernels.def.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "rvvk/rvvk.h"

namespace rvvk {

// Declarations of each compiled variant's kernels.
#define RVVK_KERNEL(name, params, args) void name params;
#if RVVK_HAVE_portable
namespace v_portable {
#include "rvvk/kernels.def"
}
#endif
#if RVVK_HAVE_rvv
namespace v_rvv {
#include "rvvk/kernels.def"
}
#endif
#if RVVK_HAVE_rvv_zvfh
namespace v_rvv_zvfh {
#include "rvvk/kernels.def"
}
#endif
#if RVVK_HAVE_x86_avx2
namespace v_x86_avx2 {
#include "rvvk/kernels.def"
}
#endif
#if RVVK_HAVE_x86_avx512
namespace v_x86_avx512 {
#include "rvvk/kernels.def"
}
#endif
#undef RVVK_KERNEL
// The partial variants compile only the ops with a folder of their own for them
// (kernels/<op>/<variant>/; RvvKernels.cmake), declared here; qualified
// lookup finds these first and the variant's below for every other entry of
// the table (x86_amx -> x86_avx512_bf16 -> x86_avx512).
#if RVVK_HAVE_x86_avx512_bf16
namespace v_x86_avx512_bf16 {
using namespace v_x86_avx512;
void decode_attention_partial(const DecodeAttentionArgs& args, std::int64_t task_begin,
                              std::int64_t task_end);
void decode_attention_merge(const DecodeAttentionArgs& args, std::int64_t task_begin,
                            std::int64_t task_end);
void extend_attention(const ExtendAttentionArgs& args, std::int64_t task_begin,
                      std::int64_t task_end);
}  // namespace v_x86_avx512_bf16
#endif
#if RVVK_HAVE_x86_amx
namespace v_x86_amx {
using namespace v_x86_avx512_bf16;
void extend_attention(const ExtendAttentionArgs& args, std::int64_t task_begin,
                      std::int64_t task_end);
}  // namespace v_x86_amx
#endif

namespace {

struct Table {
  const char* name;
#define RVVK_KERNEL(name, params, args) void(*name) params;
#include "rvvk/kernels.def"
#undef RVVK_KERNEL
};

#define RVVK_KERNEL(name, params, args) &RVVK_TABLE_NS::name,
const Table kTables[] = {
#if RVVK_HAVE_portable
#define RVVK_TABLE_NS v_portable
    Table{"portable",
#include "rvvk/kernels.def"
    },
#undef RVVK_TABLE_NS
#endif
#if RVVK_HAVE_rvv
#define RVVK_TABLE_NS v_rvv
    Table{"rvv",
#include "rvvk/kernels.def"
    },
#undef RVVK_TABLE_NS
#endif
#if RVVK_HAVE_rvv_zvfh
#define RVVK_TABLE_NS v_rvv_zvfh
    Table{"rvv_zvfh",
#include "rvvk/kernels.def"
    },
#undef RVVK_TABLE_NS
#endif
#if RVVK_HAVE_x86_avx2
#define RVVK_TABLE_NS v_x86_avx2
    Table{"x86_avx2",
#include "rvvk/kernels.def"
    },
#undef RVVK_TABLE_NS
#endif
#if RVVK_HAVE_x86_avx512
#define RVVK_TABLE_NS v_x86_avx512
    Table{"x86_avx512",
#include "rvvk/kernels.def"
    },
#undef RVVK_TABLE_NS
#endif
#if RVVK_HAVE_x86_avx512_bf16
#define RVVK_TABLE_NS v_x86_avx512_bf16
    Table{"x86_avx512_bf16",
#include "rvvk/kernels.def"
    },
#undef RVVK_TABLE_NS
#endif
#if RVVK_HAVE_x86_amx
#define RVVK_TABLE_NS v_x86_amx
    Table{"x86_amx",
#include "rvvk/kernels.def"
    },
#undef RVVK_TABLE_NS
#endif
};
#undef RVVK_KERNEL

constexpr std::size_t kNumTables = sizeof kTables / sizeof kTables[0];

bool runnable(const Table& t) {
  const CpuInfo cpu = cpu_info();
  if (std::strcmp(t.name, "portable") == 0) return true;
  if (std::strcmp(t.name, "rvv") == 0) return cpu.has_v;
  if (std::strcmp(t.name, "rvv_zvfh") == 0) return cpu.has_v && cpu.zvfh;
  if (std::strcmp(t.name, "x86_avx2") == 0) return cpu.avx2;
  if (std::strcmp(t.name, "x86_avx512") == 0) return cpu.avx512;
  if (std::strcmp(t.name, "x86_avx512_bf16") == 0) return cpu.avx512_bf16;
  if (std::strcmp(t.name, "x86_amx") == 0) return cpu.avx512_bf16 && cpu.amx_bf16;
  return false;
}

const Table* find(const char* name) {
  for (const Table& t : kTables)
    if (std::strcmp(t.name, name) == 0) return &t;
  return nullptr;
}

std::string g_error;
std::atomic<const Table*> g_active{nullptr};
std::once_flag g_init;

void init() {
  // Best runnable variant: tables are listed from least to most capable.
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

static_assert(kNumTables >= 1, "at least the portable variant must be compiled");

}  // namespace rvvk
