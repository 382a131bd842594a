// sgl_kernel::silu_and_mul_cpu, gelu_and_mul_cpu and gelu_tanh_and_mul_cpu on rvv-kernels:
// input [..., 2d] -> out [..., d] = act(input[..., :d]) * input[..., d:].
#include <ATen/ops/empty.h>

#include <vector>

#include "common.h"
#include "ops.h"

namespace rvv_ops {
namespace {

at::Tensor act_and_mul(const char* op, rvvk::Activation act, const at::Tensor& input) {
  check_cpu(op, "input", input);
  const rvvk::DType dtype = kernel_dtype(op, "input", input);
  TORCH_CHECK_VALUE(input.dim() >= 1, op, ": input is a 0-d tensor; expected at least 1 "
                    "dimension (the gate and up halves last)");
  check_rows_layout(op, "input", input);
  TORCH_CHECK_VALUE(input.size(-1) % 2 == 0, op, ": input (", describe(input),
                    ") has an odd last dimension ", input.size(-1),
                    "; expected an even size: the gate half, then the up half");

  at::Tensor in = input;
  std::optional<std::int64_t> in_stride = row_stride(in);
  if (!in_stride) {
    in = input.contiguous();
    in_stride = in.size(-1);
  }
  const std::int64_t d = in.size(-1) / 2;
  std::vector<std::int64_t> sizes(input.sizes().begin(), input.sizes().end());
  sizes.back() = d;
  at::Tensor out = at::empty(sizes, input.options());
  const std::int64_t rows = num_rows(in);
  if (out.numel() == 0) return out;
  parallel_rows(rows, 2 * d, [&](std::int64_t begin, std::int64_t end) {
    rvvk::act_and_mul(act, dtype, row_ptr(out, d, begin), d, row_ptr(in, *in_stride, begin),
                      *in_stride, end - begin, d);
  });
  return out;
}

}  // namespace

at::Tensor silu_and_mul_cpu(const at::Tensor& input) {
  return act_and_mul("silu_and_mul_cpu", rvvk::Activation::kSilu, input);
}

at::Tensor gelu_and_mul_cpu(const at::Tensor& input) {
  return act_and_mul("gelu_and_mul_cpu", rvvk::Activation::kGelu, input);
}

at::Tensor gelu_tanh_and_mul_cpu(const at::Tensor& input) {
  return act_and_mul("gelu_tanh_and_mul_cpu", rvvk::Activation::kGeluTanh, input);
}

}  // namespace rvv_ops
