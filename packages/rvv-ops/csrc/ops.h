// The ops' C++ entry points, declared from the op table (ops.def); register.cpp binds them to
// their schemas.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

namespace c10 {
class OperatorHandle;
}  // namespace c10

namespace rvv_ops {

// Each sgl_kernel op has one C++ entry point, `name(bool meta, <the op's arguments>)`:
// with meta = false it is the CPU kernel; with meta = true the Meta kernel (fake tensors,
// torch.compile tracing), which runs the checks that need only shapes and dtypes and
// returns empty outputs. Kernel<name_fn> adapts it to the op's own signature for
// register.cpp: Kernel<F>::cpu<&name> and Kernel<F>::meta<&name>.
template <class Fn>
struct Kernel;
template <class R, class... Args>
struct Kernel<R(Args...)> {
  using Entry = R(bool meta, Args...);
  template <Entry* entry>
  static R cpu(Args... args) {
    return entry(false, args...);
  }
  template <Entry* entry>
  static R meta(Args... args) {
    return entry(true, args...);
  }
};

#define SGL_KERNEL_OP(name, schema, ...) \
  using name##_fn = __VA_ARGS__;         \
  Kernel<name##_fn>::Entry name;
#define RVV_OPS_OP(name, schema, ...) \
  using name##_fn = __VA_ARGS__;      \
  name##_fn name;
#include "ops.def"

// Autograd and ADInplaceOrView kernels of the ops that write arguments (autograd.cpp):
// boxed, so one pair serves every such op.
void no_grad_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                      torch::jit::Stack* stack);
void bump_written_versions(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                           torch::jit::Stack* stack);

}  // namespace rvv_ops
