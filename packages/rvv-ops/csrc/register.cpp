// Every schema and kernel registration of rvv-ops, from the op table (ops.def).
//
// TORCH_LIBRARY_FRAGMENT, never TORCH_LIBRARY: the sgl_kernel namespace may already be
// owned by another library (a CUDA build of sgl-kernel). Defining an op name twice aborts
// the process inside this library's static initializers, so rvv_ops/_library.py checks
// for existing definitions (the names CMake writes into _build_info.py from ops.def) before
// it loads the library.
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include "ops.h"

namespace {

// Whether a schema marks an argument as written (`Tensor(a!)`).
constexpr bool writes_arguments(const char* schema) {
  for (; *schema != '\0'; ++schema) {
    if (*schema == '!') return true;
  }
  return false;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
#define SGL_KERNEL_OP(name, schema, ...) m.def(#name schema);
#include "ops.def"
}

TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) {
#define SGL_KERNEL_OP(name, schema, ...) \
  m.impl(#name, &rvv_ops::Kernel<rvv_ops::name##_fn>::cpu<&rvv_ops::name>);
#include "ops.def"
}

TORCH_LIBRARY_IMPL(sgl_kernel, Meta, m) {
#define SGL_KERNEL_OP(name, schema, ...) \
  m.impl(#name, &rvv_ops::Kernel<rvv_ops::name##_fn>::meta<&rvv_ops::name>);
#include "ops.def"
}

// No op has a derivative. Ops returning new tensors: torch's fallback makes backward()
// through the result raise "not implemented". Ops writing arguments (and returning nothing,
// which that fallback does not track): autograd.cpp's kernels refuse inputs that require
// grad and bump the version counters of what they write.
TORCH_LIBRARY_IMPL(sgl_kernel, Autograd, m) {
#define SGL_KERNEL_OP(name, schema, ...)                                                       \
  if constexpr (writes_arguments(schema)) {                                                    \
    m.impl(#name, torch::CppFunction::makeFromBoxedFunction<&rvv_ops::no_grad_autograd>());    \
  } else {                                                                                     \
    m.impl(#name, torch::autograd::autogradNotImplementedFallback());                          \
  }
#include "ops.def"
}

TORCH_LIBRARY_IMPL(sgl_kernel, ADInplaceOrView, m) {
#define SGL_KERNEL_OP(name, schema, ...)                                                      \
  if constexpr (writes_arguments(schema)) {                                                   \
    m.impl(#name,                                                                             \
           torch::CppFunction::makeFromBoxedFunction<&rvv_ops::bump_written_versions>());     \
  }
#include "ops.def"
}

TORCH_LIBRARY_FRAGMENT(rvv_ops, m) {
#define RVV_OPS_OP(name, schema, ...) m.def(#name schema, &rvv_ops::name);
#include "ops.def"
}
