// sgl_kernel::fused_gdn_gating_cpu on rvv-kernels: the gates of Gated DeltaNet linear
// attention (Qwen3-Next, Qwen3.5; layers/attention/linear/gdn_backend.py):
// g = -exp(A_log) * softplus(a + dt_bias) (fp32 [1, B, H]), beta = sigmoid(b) ([1, B, H] in
// b's dtype), as SGLang 0.5.23's fake kernel and sgl-kernel's mamba/fused_gdn_gating.cpp.
#include <ATen/ops/empty.h>

#include <tuple>

#include "common.h"
#include "ops.h"

namespace rvv_ops {
namespace {

constexpr const char* kOp = "fused_gdn_gating_cpu";

// A_log or dt_bias: [H] of fp32 or a's dtype.
rvvk::DType check_param(const char* arg, const at::Tensor& t, const at::Tensor& a) {
  check_same_device(kOp, arg, t, "a", a);
  TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat || t.scalar_type() == a.scalar_type(), kOp,
                   ": ", arg, " has dtype ", dtype_name(t.scalar_type()),
                   "; expected torch.float32 or a's dtype ", dtype_name(a.scalar_type()));
  TORCH_CHECK_VALUE(t.dim() == 1 && t.sym_size(0) == a.sym_size(1), kOp, ": ", arg, " (",
                    describe(t), ") is not [num_heads] with num_heads = a.size(1) = ",
                    a.sym_size(1));
  return t.scalar_type() == at::kFloat ? rvvk::DType::kF32 : kernel_dtype(kOp, arg, t);
}

struct Checked {
  rvvk::DType dtype, a_log_dtype, bias_dtype;
};

Checked check_args(const at::Tensor& A_log, const at::Tensor& a, const at::Tensor& b,
                   const at::Tensor& dt_bias) {
  check_same_device(kOp, "b", b, "a", a);
  const rvvk::DType dtype = kernel_dtype(kOp, "a", a);
  check_same_dtype(kOp, "b", b, "a", a);
  TORCH_CHECK_VALUE(a.dim() == 2, kOp, ": a (", describe(a), ") is ", a.dim(),
                    "-d; expected [tokens, num_heads]");
  TORCH_CHECK_VALUE(b.dim() == 2 && b.sym_size(0) == a.sym_size(0) &&
                        b.sym_size(1) == a.sym_size(1),
                    kOp, ": b (", describe(b), ") does not have a's shape [", a.sym_size(0),
                    ", ", a.sym_size(1), "]");
  const rvvk::DType log_dt = check_param("A_log", A_log, a);
  const rvvk::DType bias_dt = check_param("dt_bias", dt_bias, a);
  return {dtype, log_dt, bias_dt};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> fused_gdn_gating_cpu(bool meta, const at::Tensor& A_log,
                                                        const at::Tensor& a,
                                                        const at::Tensor& b,
                                                        const at::Tensor& dt_bias) {
  if (!meta) {
    check_cpu(kOp, "A_log", A_log);
    check_cpu(kOp, "a", a);
    check_cpu(kOp, "b", b);
    check_cpu(kOp, "dt_bias", dt_bias);
  }
  const Checked c = check_args(A_log, a, b, dt_bias);
  if (meta) {
    return {at::empty_symint({1, a.sym_size(0), a.sym_size(1)}, a.options().dtype(at::kFloat)),
            at::empty_symint({1, a.sym_size(0), a.sym_size(1)}, b.options())};
  }
  const std::int64_t rows = a.size(0), heads = a.size(1);
  at::Tensor g = at::empty({1, rows, heads}, a.options().dtype(at::kFloat));
  at::Tensor beta = at::empty({1, rows, heads}, b.options());
  if (g.numel() == 0) return {g, beta};
  // Read-only inputs: rows with a contiguous last dimension as they are, else copies.
  const at::Tensor a_in = a.stride(1) == 1 || heads == 1 ? a : a.contiguous();
  const at::Tensor b_in = b.stride(1) == 1 || heads == 1 ? b : b.contiguous();
  const at::Tensor log_in = A_log.contiguous();
  const at::Tensor bias_in = dt_bias.contiguous();
  rvvk::GdnGatingArgs args;
  args.heads = heads;
  args.dtype = c.dtype;
  args.a = a_in.data_ptr();
  args.a_stride = a_in.stride(0);
  args.b = b_in.data_ptr();
  args.b_stride = b_in.stride(0);
  args.a_log_dtype = c.a_log_dtype;
  args.a_log = log_in.data_ptr();
  args.dt_bias_dtype = c.bias_dtype;
  args.dt_bias = bias_in.data_ptr();
  args.g = g.data_ptr<float>();
  args.g_stride = heads;
  args.beta = beta.data_ptr();
  args.beta_stride = heads;
  parallel_rows(rows, heads, [&](std::int64_t begin, std::int64_t end) {
    rvvk::gdn_gating(args, begin, end);
  });
  return {g, beta};
}

}  // namespace rvv_ops
