// Autograd-side kernels of the ops that write some of their arguments and return nothing
// (fused_add_rmsnorm_cpu, the attention ops): torch's generic fallbacks only track writes to
// returned tensors. These kernels are boxed, so one pair serves every such op (register.cpp
// picks them for every schema with a `(a!)`): no derivative, and version-counter bumps for
// every argument the schema marks as written (so autograd notices a tensor it saved being
// overwritten, as with torch's in-place ops).
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <string>
#include <vector>

#include "ops.h"

namespace rvv_ops {
namespace {

// "sgl_kernel::decode_attention_cpu" -> "decode_attention_cpu"
std::string short_name(const c10::OperatorHandle& op) {
  const std::string& name = op.schema().name();
  const std::size_t colon = name.rfind("::");
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

}  // namespace

void no_grad_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                      torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const std::size_t first = stack->size() - args.size();
  if (c10::GradMode::is_enabled()) {
    for (std::size_t i = 0; i < args.size(); ++i) {
      const c10::IValue& v = (*stack)[first + i];
      TORCH_CHECK(!(v.isTensor() && v.toTensor().requires_grad()), short_name(op),
                  ": has no derivative, and ", args[i].name(),
                  " requires grad; call it under torch.no_grad() or torch.inference_mode()");
    }
  }
  at::AutoDispatchBelowAutograd guard;
  op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

void bump_written_versions(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                           torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const std::size_t first = stack->size() - args.size();
  std::vector<at::Tensor> written;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = (*stack)[first + i];
    if (args[i].alias_info() != nullptr && args[i].alias_info()->isWrite() && v.isTensor()) {
      written.push_back(v.toTensor());
    }
  }
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
  }
  for (const at::Tensor& t : written) t.unsafeGetTensorImpl()->bump_version();
}

}  // namespace rvv_ops
