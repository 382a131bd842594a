// sgl_kernel::silu_and_mul_cpu, gelu_and_mul_cpu and gelu_tanh_and_mul_cpu on rvv-kernels:
// input [..., 2d] -> out [..., d] = act(input[..., :d]) * input[..., d:].
// fused_sigmoid_mul_cpu: input [T, D] *= sigmoid(gate) in place, gate [T, D] or
// [T, H, D / H] (Qwen3.5's attention output gate).
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

namespace {

constexpr const char* kSigmoidMul = "fused_sigmoid_mul_cpu";

// The checks shared with the Meta kernel: input [T, D]; gate [T, D] or [T, H, D / H] of
// input's dtype.
rvvk::DType check_sigmoid_mul_args(const at::Tensor& input, const at::Tensor& gate) {
  const char* op = kSigmoidMul;
  check_same_device(op, "gate", gate, "input", input);
  const rvvk::DType dtype = kernel_dtype(op, "input", input);
  check_same_dtype(op, "gate", gate, "input", input);
  TORCH_CHECK_VALUE(input.dim() == 2, op, ": input (", describe(input), ") is ", input.dim(),
                    "-d; expected [tokens, hidden] (2-D)");
  TORCH_CHECK_VALUE(gate.dim() == 2 || gate.dim() == 3, op, ": gate (", describe(gate), ") is ",
                    gate.dim(), "-d; expected [tokens, hidden] or [tokens, heads, head_dim]");
  TORCH_CHECK_VALUE(gate.sym_size(0) == input.sym_size(0), op, ": gate (", describe(gate),
                    ") has ", gate.sym_size(0), " tokens; expected input.size(0) = ",
                    input.sym_size(0));
  const c10::SymInt gate_d =
      gate.dim() == 3 ? gate.sym_size(1) * gate.sym_size(2) : gate.sym_size(1);
  TORCH_CHECK_VALUE(gate_d == input.sym_size(1), op, ": gate (", describe(gate), ") has ",
                    gate_d, " elements per token; expected input.size(1) = ",
                    input.sym_size(1));
  return dtype;
}

}  // namespace

void fused_sigmoid_mul_cpu(bool meta, at::Tensor& input, const at::Tensor& gate) {
  const char* op = kSigmoidMul;
  if (!meta) {
    check_cpu(op, "input", input);
    check_cpu(op, "gate", gate);
  }
  const rvvk::DType dtype = check_sigmoid_mul_args(input, gate);
  if (meta || input.numel() == 0) return;
  // input is written in place: walked as is, so its rows must be addressable and disjoint.
  check_last_dim_contiguous(op, "input", input);
  const std::int64_t in_stride = require_row_stride(op, "input", input);
  check_rows_disjoint(op, "input", input, in_stride);
  // gate is only read: a layout the kernel cannot walk (last dimension not contiguous), or
  // memory shared with input, is read from a copy.
  at::Tensor g = gate;
  if ((g.size(-1) > 1 && g.stride(-1) != 1) || g.storage().is_alias_of(input.storage())) {
    g = g.clone(at::MemoryFormat::Contiguous);
  }
  const std::int64_t rows = input.size(0), d = input.size(1);
  const std::int64_t heads = g.dim() == 3 ? g.size(1) : 1;
  const std::int64_t head_dim = g.size(-1);
  const std::int64_t g_stride_t = g.stride(0);
  const std::int64_t g_stride_h = g.dim() == 3 ? g.stride(1) : 0;
  const std::size_t esize = input.element_size();
  parallel_rows(rows, d, [&](std::int64_t begin, std::int64_t end) {
    const void* gate_rows = static_cast<const char*>(g.data_ptr()) +
                            begin * g_stride_t * static_cast<std::int64_t>(esize);
    void* rows_ptr = row_ptr(input, in_stride, begin);
    rvvk::sigmoid_mul(dtype, rows_ptr, in_stride, rows_ptr, in_stride, gate_rows, g_stride_t,
                      g_stride_h, end - begin, heads, head_dim);
  });
}

}  // namespace rvv_ops
