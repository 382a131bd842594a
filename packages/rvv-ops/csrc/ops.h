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

// For each sgl_kernel op: `<name>_fn` (its C++ function type), the CPU kernel `<name>` and
// the Meta kernel `<name>_meta` (the checks that need only shapes and dtypes, then empty
// outputs; fake tensors and torch.compile tracing run it).
#define SGL_KERNEL_OP(name, schema, ...) \
  using name##_fn = __VA_ARGS__;         \
  name##_fn name;                        \
  name##_fn name##_meta;
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
