// sgl_kernel::layernorm_cpu on rvv-kernels.
#include <ATen/ops/empty.h>

#include "common.h"
#include "ops.h"

namespace rvv_ops {
namespace {

constexpr const char* kOp = "layernorm_cpu";

// The checks shared with the Meta kernel (common.h).
rvvk::DType check_args(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, double eps) {
  check_same_device(kOp, "weight", weight, "input", input);
  if (bias) check_same_device(kOp, "bias", *bias, "input", input);
  const rvvk::DType dtype = kernel_dtype(kOp, "input", input);
  // SGLang's LayerNorm keeps its parameters in fp32 unless told otherwise.
  TORCH_CHECK_TYPE(weight.scalar_type() == input.scalar_type() ||
                       weight.scalar_type() == at::kFloat,
                   kOp, ": weight has dtype ", dtype_name(weight.scalar_type()),
                   "; expected input's dtype ", dtype_name(input.scalar_type()),
                   " or torch.float32");
  if (bias) check_same_dtype(kOp, "bias", *bias, "weight", weight);
  check_has_rows(kOp, "input", input);
  check_weight_shape(kOp, weight, "input", input);
  if (bias) {
    TORCH_CHECK_VALUE(bias->dim() == 1 && bias->sym_size(0) == input.sym_size(-1), kOp,
                      ": bias (", describe(*bias), ") has the wrong shape; expected [",
                      input.sym_size(-1), "] (input.size(-1)) or None");
  }
  check_eps(kOp, eps);
  return dtype;
}

}  // namespace

at::Tensor layernorm_cpu(bool meta, const at::Tensor& input, const at::Tensor& weight,
                         const std::optional<at::Tensor>& bias, double eps) {
  if (!meta) {
    check_cpu(kOp, "input", input);
    check_cpu(kOp, "weight", weight);
    if (bias) check_cpu(kOp, "bias", *bias);
  }
  const rvvk::DType dtype = check_args(input, weight, bias, eps);
  if (meta) return at::empty_symint(input.sym_sizes(), input.options());
  check_last_dim_contiguous(kOp, "input", input);
  check_contiguous(kOp, "weight", weight);
  if (bias) check_contiguous(kOp, "bias", *bias);

  const Rows in = readable_rows(input);
  at::Tensor out = at::empty(input.sizes(), input.options());
  const std::int64_t rows = num_rows(in.t), cols = in.t.size(-1);
  if (out.numel() == 0) return out;
  const rvvk::DType param_dtype =
      weight.scalar_type() == at::kFloat ? rvvk::DType::kF32 : dtype;
  const void* bias_ptr = bias ? bias->data_ptr() : nullptr;
  parallel_rows(rows, cols, [&](std::int64_t begin, std::int64_t end) {
    rvvk::layernorm(dtype, row_ptr(out, cols, begin), cols, row_ptr(in.t, in.stride, begin),
                    in.stride, param_dtype, weight.data_ptr(), bias_ptr, end - begin, cols,
                    static_cast<float>(eps));
  });
  return out;
}

}  // namespace rvv_ops
