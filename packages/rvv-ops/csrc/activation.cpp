// sgl_kernel::silu_and_mul_cpu, gelu_and_mul_cpu and gelu_tanh_and_mul_cpu on rvv-kernels:
// input [..., 2d] -> out [..., d] = act(input[..., :d]) * input[..., d:].
#include <ATen/ops/empty.h>

#include <vector>

#include "common.h"
#include "ops.h"

namespace rvv_ops {
namespace {

// The checks shared with the Meta kernels (common.h).
rvvk::DType check_args(const char* op, const at::Tensor& input) {
  const rvvk::DType dtype = kernel_dtype(op, "input", input);
  TORCH_CHECK_VALUE(input.dim() >= 1, op, ": input is a 0-d tensor; expected at least 1 "
                    "dimension (the gate and up halves last)");
  TORCH_CHECK_VALUE(input.sym_size(-1) % 2 == 0, op, ": input (", describe(input),
                    ") has an odd last dimension ", input.sym_size(-1),
                    "; expected an even size: the gate half, then the up half");
  return dtype;
}

// input [..., 2d] -> [..., d]
std::vector<c10::SymInt> out_sizes(const at::Tensor& input) {
  std::vector<c10::SymInt> sizes(input.sym_sizes().begin(), input.sym_sizes().end());
  sizes.back() = sizes.back() / 2;
  return sizes;
}

at::Tensor act_and_mul(bool meta, const char* op, rvvk::Activation act,
                       const at::Tensor& input) {
  if (!meta) check_cpu(op, "input", input);
  const rvvk::DType dtype = check_args(op, input);
  if (meta) return at::empty_symint(out_sizes(input), input.options());
  check_last_dim_contiguous(op, "input", input);

  const Rows in = readable_rows(input);
  const std::int64_t d = in.t.size(-1) / 2;
  at::Tensor out = at::empty_symint(out_sizes(input), input.options());
  const std::int64_t rows = num_rows(in.t);
  if (out.numel() == 0) return out;
  parallel_rows(rows, 2 * d, [&](std::int64_t begin, std::int64_t end) {
    rvvk::act_and_mul(act, dtype, row_ptr(out, d, begin), d, row_ptr(in.t, in.stride, begin),
                      in.stride, end - begin, d);
  });
  return out;
}

}  // namespace

at::Tensor silu_and_mul_cpu(bool meta, const at::Tensor& input) {
  return act_and_mul(meta, "silu_and_mul_cpu", rvvk::Activation::kSilu, input);
}

at::Tensor gelu_and_mul_cpu(bool meta, const at::Tensor& input) {
  return act_and_mul(meta, "gelu_and_mul_cpu", rvvk::Activation::kGelu, input);
}

at::Tensor gelu_tanh_and_mul_cpu(bool meta, const at::Tensor& input) {
  return act_and_mul(meta, "gelu_tanh_and_mul_cpu", rvvk::Activation::kGeluTanh, input);
}

}  // namespace rvv_ops
