// Every schema and kernel registration of rvv-ops.
//
// TORCH_LIBRARY_FRAGMENT, never TORCH_LIBRARY: the sgl_kernel namespace may already be
// owned by another library (a CUDA build of sgl-kernel). Defining an op name twice aborts
// the process inside this library's static initializers, so rvv_ops/__init__.py checks
// for existing definitions before it loads the library.
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include "ops.h"

// SGLang's names and arguments (sgl-kernel's CPU ops); `(a!)` marks what is written.
TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  m.def("rmsnorm_cpu(Tensor input, Tensor weight, float eps) -> Tensor");
  m.def(
      "fused_add_rmsnorm_cpu(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float eps) "
      "-> ()");
}

TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) {
  m.impl("rmsnorm_cpu", &rvv_ops::rmsnorm_cpu);
  m.impl("fused_add_rmsnorm_cpu", &rvv_ops::fused_add_rmsnorm_cpu);
}

// No derivatives. rmsnorm_cpu: torch's fallback makes backward() through the result raise
// "not implemented". fused_add_rmsnorm_cpu: see autograd.cpp.
TORCH_LIBRARY_IMPL(sgl_kernel, Autograd, m) {
  m.impl("rmsnorm_cpu", torch::autograd::autogradNotImplementedFallback());
  m.impl("fused_add_rmsnorm_cpu", &rvv_ops::fused_add_rmsnorm_autograd);
}

TORCH_LIBRARY_IMPL(sgl_kernel, ADInplaceOrView, m) {
  m.impl("fused_add_rmsnorm_cpu", &rvv_ops::fused_add_rmsnorm_inplace_or_view);
}

// rvv-ops' own introspection; no tensor arguments, so one kernel for every backend.
TORCH_LIBRARY_FRAGMENT(rvv_ops, m) {
  m.def("build_info() -> str", &rvv_ops::build_info);
  m.def("set_variant(str name) -> ()", &rvv_ops::set_variant);
}
