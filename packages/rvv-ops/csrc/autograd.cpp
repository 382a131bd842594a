// Autograd-side kernels of fused_add_rmsnorm_cpu, which writes `input` and `residual` and
// returns nothing. torch's generic fallbacks only track writes to returned tensors, so
// this op gets its own: no derivative, and version-counter bumps for what it writes (so
// autograd notices a tensor it saved being overwritten, as with torch's in-place ops).
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include "ops.h"

namespace rvv_ops {
namespace {

using FusedFn = void(at::Tensor&, at::Tensor&, const at::Tensor&, double);

const c10::TypedOperatorHandle<FusedFn>& fused_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("sgl_kernel::fused_add_rmsnorm_cpu", "")
                             .typed<FusedFn>();
  return op;
}

}  // namespace

void fused_add_rmsnorm_autograd(c10::DispatchKeySet keys, at::Tensor& input,
                                at::Tensor& residual, const at::Tensor& weight, double eps) {
  TORCH_CHECK(!c10::GradMode::is_enabled() ||
                  !(input.requires_grad() || residual.requires_grad() || weight.requires_grad()),
              "fused_add_rmsnorm_cpu: has no derivative, and input, residual or weight "
              "requires grad; call it under torch.no_grad() or torch.inference_mode()");
  at::AutoDispatchBelowAutograd guard;
  fused_op().redispatch(keys & c10::after_autograd_keyset, input, residual, weight, eps);
}

void fused_add_rmsnorm_inplace_or_view(c10::DispatchKeySet keys, at::Tensor& input,
                                       at::Tensor& residual, const at::Tensor& weight,
                                       double eps) {
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    fused_op().redispatch(keys & c10::after_ADInplaceOrView_keyset, input, residual, weight,
                          eps);
  }
  input.unsafeGetTensorImpl()->bump_version();
  residual.unsafeGetTensorImpl()->bump_version();
}

}  // namespace rvv_ops
