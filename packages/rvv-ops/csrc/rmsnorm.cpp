// sgl_kernel::rmsnorm_cpu, fused_add_rmsnorm_cpu and Gemma's versions (gemma_rmsnorm_cpu,
// gemma_fused_add_rmsnorm_cpu: weight offset by 1) on rvv-kernels.
#include <ATen/ops/empty.h>

#include "common.h"
#include "ops.h"

namespace rvv_ops {
namespace {

// The checks shared with the Meta kernels (common.h).
rvvk::DType check_rmsnorm_args(const char* op, const at::Tensor& input, const at::Tensor& weight,
                               double eps) {
  check_same_device(op, "weight", weight, "input", input);
  const rvvk::DType dtype = kernel_dtype(op, "input", input);
  check_same_dtype(op, "weight", weight, "input", input);
  check_has_rows(op, "input", input);
  check_weight_shape(op, weight, "input", input);
  check_eps(op, eps);
  return dtype;
}

rvvk::DType check_fused_args(const char* op, const at::Tensor& input, const at::Tensor& residual,
                             const at::Tensor& weight, double eps) {
  check_same_device(op, "residual", residual, "input", input);
  check_same_dtype(op, "residual", residual, "input", input);
  TORCH_CHECK_VALUE(residual.sym_sizes() == input.sym_sizes(), op, ": residual has shape ",
                    residual.sym_sizes(), "; expected input's shape ", input.sym_sizes());
  return check_rmsnorm_args(op, input, weight, eps);
}

// `weight_offset`: the kernels scale by (weight + weight_offset); 1 for Gemma.
at::Tensor rmsnorm_impl(bool meta, const char* op, const at::Tensor& input,
                        const at::Tensor& weight, double eps, float weight_offset) {
  if (!meta) {
    check_cpu(op, "input", input);
    check_cpu(op, "weight", weight);
  }
  const rvvk::DType dtype = check_rmsnorm_args(op, input, weight, eps);
  if (meta) return at::empty_symint(input.sym_sizes(), input.options());
  check_last_dim_contiguous(op, "input", input);
  check_contiguous(op, "weight", weight);

  const Rows in = readable_rows(input);
  at::Tensor out = at::empty(input.sizes(), input.options());
  const std::int64_t rows = num_rows(in.t), cols = in.t.size(-1);
  if (out.numel() == 0) return out;
  parallel_rows(rows, cols, [&](std::int64_t begin, std::int64_t end) {
    rvvk::rmsnorm(dtype, row_ptr(out, cols, begin), cols, row_ptr(in.t, in.stride, begin),
                  in.stride, weight.data_ptr(), end - begin, cols, static_cast<float>(eps),
                  weight_offset);
  });
  return out;
}

void fused_add_rmsnorm_impl(bool meta, const char* op, at::Tensor& input, at::Tensor& residual,
                            const at::Tensor& weight, double eps, float weight_offset) {
  if (!meta) {
    check_cpu(op, "input", input);
    check_cpu(op, "residual", residual);
    check_cpu(op, "weight", weight);
  }
  const rvvk::DType dtype = check_fused_args(op, input, residual, weight, eps);
  if (meta) return;
  check_last_dim_contiguous(op, "input", input);
  check_last_dim_contiguous(op, "residual", residual);
  check_contiguous(op, "weight", weight);

  // Both are written in place: no copies, so their layout must be walkable as is.
  const std::int64_t in_stride = require_row_stride(op, "input", input);
  const std::int64_t res_stride = require_row_stride(op, "residual", residual);
  check_rows_disjoint(op, "input", input, in_stride);
  check_rows_disjoint(op, "residual", residual, res_stride);
  check_no_overlap(op, "input", input, in_stride, "residual", residual, res_stride);
  check_no_overlap(op, "input", input, in_stride, "weight", weight, weight.numel());
  check_no_overlap(op, "residual", residual, res_stride, "weight", weight, weight.numel());

  const std::int64_t rows = num_rows(input), cols = input.size(-1);
  if (input.numel() == 0) return;
  parallel_rows(rows, cols, [&](std::int64_t begin, std::int64_t end) {
    rvvk::fused_add_rmsnorm(dtype, row_ptr(input, in_stride, begin), in_stride,
                            row_ptr(residual, res_stride, begin), res_stride, weight.data_ptr(),
                            end - begin, cols, static_cast<float>(eps), weight_offset);
  });
}

}  // namespace

at::Tensor rmsnorm_cpu(bool meta, const at::Tensor& input, const at::Tensor& weight,
                       double eps) {
  return rmsnorm_impl(meta, "rmsnorm_cpu", input, weight, eps, 0.0f);
}

void fused_add_rmsnorm_cpu(bool meta, at::Tensor& input, at::Tensor& residual,
                           const at::Tensor& weight, double eps) {
  fused_add_rmsnorm_impl(meta, "fused_add_rmsnorm_cpu", input, residual, weight, eps, 0.0f);
}

at::Tensor gemma_rmsnorm_cpu(bool meta, const at::Tensor& input, const at::Tensor& weight,
                             double eps) {
  return rmsnorm_impl(meta, "gemma_rmsnorm_cpu", input, weight, eps, 1.0f);
}

void gemma_fused_add_rmsnorm_cpu(bool meta, at::Tensor& input, at::Tensor& residual,
                                 const at::Tensor& weight, double eps) {
  fused_add_rmsnorm_impl(meta, "gemma_fused_add_rmsnorm_cpu", input, residual, weight, eps,
                         1.0f);
}

}  // namespace rvv_ops
