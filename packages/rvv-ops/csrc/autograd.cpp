// Autograd-side kernels of fused_add_rmsnorm_cpu and gemma_fused_add_rmsnorm_cpu, which
// write `input` and `residual` and return nothing. torch's generic fallbacks only track
// writes to returned tensors, so these ops get their own: no derivative, and version-counter
// bumps for what they write (so autograd notices a tensor it saved being overwritten, as
// with torch's in-place ops).
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include "ops.h"

namespace rvv_ops {
namespace {

using FusedFn = void(at::Tensor&, at::Tensor&, const at::Tensor&, double);
using FusedOp = c10::TypedOperatorHandle<FusedFn>;

const FusedOp& fused_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("sgl_kernel::fused_add_rmsnorm_cpu", "")
                             .typed<FusedFn>();
  return op;
}

const FusedOp& gemma_fused_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("sgl_kernel::gemma_fused_add_rmsnorm_cpu", "")
                             .typed<FusedFn>();
  return op;
}

void no_grad_redispatch(const FusedOp& op, const char* name, c10::DispatchKeySet keys,
                        at::Tensor& input, at::Tensor& residual, const at::Tensor& weight,
                        double eps) {
  TORCH_CHECK(!c10::GradMode::is_enabled() ||
                  !(input.requires_grad() || residual.requires_grad() || weight.requires_grad()),
              name, ": has no derivative, and input, residual or weight requires grad; call it "
              "under torch.no_grad() or torch.inference_mode()");
  at::AutoDispatchBelowAutograd guard;
  op.redispatch(keys & c10::after_autograd_keyset, input, residual, weight, eps);
}

void bump_versions_redispatch(const FusedOp& op, c10::DispatchKeySet keys, at::Tensor& input,
                              at::Tensor& residual, const at::Tensor& weight, double eps) {
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    op.redispatch(keys & c10::after_ADInplaceOrView_keyset, input, residual, weight, eps);
  }
  input.unsafeGetTensorImpl()->bump_version();
  residual.unsafeGetTensorImpl()->bump_version();
}

}  // namespace

void fused_add_rmsnorm_autograd(c10::DispatchKeySet keys, at::Tensor& input,
                                at::Tensor& residual, const at::Tensor& weight, double eps) {
  no_grad_redispatch(fused_op(), "fused_add_rmsnorm_cpu", keys, input, residual, weight, eps);
}

void fused_add_rmsnorm_inplace_or_view(c10::DispatchKeySet keys, at::Tensor& input,
                                       at::Tensor& residual, const at::Tensor& weight,
                                       double eps) {
  bump_versions_redispatch(fused_op(), keys, input, residual, weight, eps);
}

void gemma_fused_add_rmsnorm_autograd(c10::DispatchKeySet keys, at::Tensor& input,
                                      at::Tensor& residual, const at::Tensor& weight,
                                      double eps) {
  no_grad_redispatch(gemma_fused_op(), "gemma_fused_add_rmsnorm_cpu", keys, input, residual,
                     weight, eps);
}

void gemma_fused_add_rmsnorm_inplace_or_view(c10::DispatchKeySet keys, at::Tensor& input,
                                             at::Tensor& residual, const at::Tensor& weight,
                                             double eps) {
  bump_versions_redispatch(gemma_fused_op(), keys, input, residual, weight, eps);
}

}  // namespace rvv_ops
