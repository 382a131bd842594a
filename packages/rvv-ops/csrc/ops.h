// The ops' C++ entry points; register.cpp binds them to their schemas.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>

#include <string>

namespace rvv_ops {

// sgl_kernel::rmsnorm_cpu: out[..., :] = input / sqrt(mean(input^2) + eps) * weight.
at::Tensor rmsnorm_cpu(const at::Tensor& input, const at::Tensor& weight, double eps);
// sgl_kernel::fused_add_rmsnorm_cpu: residual = dtype(input + residual);
// input = rmsnorm(residual, weight, eps). Both in place.
void fused_add_rmsnorm_cpu(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight,
                           double eps);

// fused_add_rmsnorm_cpu's Autograd and ADInplaceOrView kernels (autograd.cpp).
void fused_add_rmsnorm_autograd(c10::DispatchKeySet keys, at::Tensor& input,
                                at::Tensor& residual, const at::Tensor& weight, double eps);
void fused_add_rmsnorm_inplace_or_view(c10::DispatchKeySet keys, at::Tensor& input,
                                       at::Tensor& residual, const at::Tensor& weight,
                                       double eps);

// rvv_ops::build_info: a JSON object describing the build and the running CPU.
std::string build_info();
// rvv_ops::set_variant: switches every kernel to rvv-kernels variant `name`.
void set_variant(const std::string& name);

}  // namespace rvv_ops
