// The RMSNorm variants of sgl-kernel's CPU build on rvv-kernels' rmsnorm and rmsnorm_gated
// kernels: gemma3_rmsnorm_cpu, gemma4_rmsnorm_cpu, l2norm_cpu, fused_rmsnorm_gated_cpu,
// fused_qk_rmsnorm_cpu (q and k over their full widths) and fused_qk_gemma_rmsnorm_cpu (per
// head of head_dim), and the residual ones on fused_add_layernorm / rmsnorm +
// fused_add_rmsnorm: fused_add_layernorm_cpu (writes residual) and
// fused_dual_residual_rmsnorm_cpu; and fused_qk_norm_rope_cpu (per-head RMSNorm then RoPE of
// q and k, in place) on rmsnorm + rotary_embedding. Outputs are new contiguous tensors.
#include <ATen/ops/empty.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <algorithm>
#include <tuple>
#include <utility>

#include "common.h"
#include "ops.h"

namespace rvv_ops {
namespace {

// `weight` (named `arg`): 1-D with `cols` elements of `input`'s dtype, on its device.
void check_norm_weight(const char* op, const char* arg, const at::Tensor& weight,
                       const char* input_arg, const at::Tensor& input, const c10::SymInt& cols,
                       const char* cols_what) {
  check_same_device(op, arg, weight, input_arg, input);
  check_same_dtype(op, arg, weight, input_arg, input);
  TORCH_CHECK_VALUE(weight.dim() == 1, op, ": ", arg, " is ", weight.dim(), "-d (",
                    describe(weight), "); expected a 1-D tensor");
  TORCH_CHECK_VALUE(weight.sym_size(0) == cols, op, ": ", arg, " has ", weight.sym_size(0),
                    " elements; expected ", cols_what, " = ", cols);
}

// A new contiguous tensor of `input`'s shape, or nothing but its shape for Meta.
at::Tensor new_like(bool meta, const at::Tensor& input) {
  return meta ? at::empty_symint(input.sym_sizes(), input.options())
              : at::empty(input.sizes(), input.options());
}

// out[r] = rmsnorm(input[r]) * (weight + offset) over the rows of `input`'s last dimension;
// weight undefined: no weight.
void run_rmsnorm(rvvk::DType dtype, const at::Tensor& out, const Rows& in,
                 const at::Tensor& weight, double eps, float offset) {
  const std::int64_t rows = num_rows(in.t), cols = in.t.size(-1);
  if (out.numel() == 0) return;
  const void* w = weight.defined() ? weight.data_ptr() : nullptr;
  parallel_rows(rows, cols, [&](std::int64_t begin, std::int64_t end) {
    rvvk::rmsnorm(dtype, row_ptr(out, cols, begin), cols, row_ptr(in.t, in.stride, begin),
                  in.stride, w, end - begin, cols, static_cast<float>(eps), offset);
  });
}

// The single-input norms: rmsnorm over the last dimension with (weight + offset), or no
// weight when `use_weight` is false (the weight, if given, is still checked).
at::Tensor norm_impl(bool meta, const char* op, const at::Tensor& input,
                     const at::Tensor* weight, double eps, float offset, bool use_weight) {
  if (!meta) {
    check_cpu(op, "input", input);
    if (weight) check_cpu(op, "weight", *weight);
  }
  const rvvk::DType dtype = kernel_dtype(op, "input", input);
  check_has_rows(op, "input", input);
  if (weight) {
    check_norm_weight(op, "weight", *weight, "input", input, input.sym_size(-1),
                      "input.size(-1)");
  }
  check_eps(op, eps);
  at::Tensor out = new_like(meta, input);
  if (meta) return out;
  check_last_dim_contiguous(op, "input", input);
  if (weight) check_contiguous(op, "weight", *weight);
  run_rmsnorm(dtype, out, readable_rows(input), use_weight ? *weight : at::Tensor(), eps,
              offset);
  return out;
}

// The checks of the two QK ops shared with their Meta kernels: q and k CPU (unless meta),
// fp32/bf16/fp16 of one dtype, at least 1-D, with the same number of rows.
rvvk::DType check_qk(bool meta, const char* op, const at::Tensor& q, const at::Tensor& k,
                     const at::Tensor& q_weight, const at::Tensor& k_weight) {
  if (!meta) {
    check_cpu(op, "q", q);
    check_cpu(op, "k", k);
    check_cpu(op, "q_weight", q_weight);
    check_cpu(op, "k_weight", k_weight);
  }
  check_same_device(op, "k", k, "q", q);
  const rvvk::DType dtype = kernel_dtype(op, "q", q);
  check_same_dtype(op, "k", k, "q", q);
  check_has_rows(op, "q", q);
  check_has_rows(op, "k", k);
  c10::SymInt q_rows = 1, k_rows = 1;
  for (std::int64_t d = 0; d + 1 < q.dim(); ++d) q_rows *= q.sym_size(d);
  for (std::int64_t d = 0; d + 1 < k.dim(); ++d) k_rows *= k.sym_size(d);
  TORCH_CHECK_VALUE(q_rows == k_rows, op, ": q has ", q_rows, " rows (", describe(q),
                    ") and k ", k_rows, " (", describe(k),
                    "); expected the same number of tokens");
  return dtype;
}

}  // namespace

at::Tensor gemma3_rmsnorm_cpu(bool meta, const at::Tensor& input, const at::Tensor& weight,
                              double eps) {
  return norm_impl(meta, "gemma3_rmsnorm_cpu", input, &weight, eps, 1.0f, true);
}

at::Tensor gemma4_rmsnorm_cpu(bool meta, const at::Tensor& input, const at::Tensor& weight,
                              double eps, double scale_shift, bool with_scale) {
  constexpr const char* kOp = "gemma4_rmsnorm_cpu";
  const float shift = static_cast<float>(scale_shift);
  TORCH_CHECK_VALUE(std::isfinite(scale_shift) && std::isfinite(shift), kOp,
                    ": scale_shift is ", scale_shift, "; expected a finite number (as fp32)");
  return norm_impl(meta, kOp, input, &weight, eps, shift, with_scale);
}

at::Tensor l2norm_cpu(bool meta, const at::Tensor& input, double eps) {
  return norm_impl(meta, "l2norm_cpu", input, nullptr, eps, 0.0f, false);
}

at::Tensor fused_rmsnorm_gated_cpu(bool meta, const at::Tensor& input, const at::Tensor& weight,
                                   const at::Tensor& gate, double eps) {
  constexpr const char* kOp = "fused_rmsnorm_gated_cpu";
  if (!meta) {
    check_cpu(kOp, "input", input);
    check_cpu(kOp, "weight", weight);
    check_cpu(kOp, "gate", gate);
  }
  const rvvk::DType dtype = kernel_dtype(kOp, "input", input);
  check_has_rows(kOp, "input", input);
  check_norm_weight(kOp, "weight", weight, "input", input, input.sym_size(-1), "input.size(-1)");
  check_same_device(kOp, "gate", gate, "input", input);
  check_same_dtype(kOp, "gate", gate, "input", input);
  TORCH_CHECK_VALUE(gate.sym_sizes() == input.sym_sizes(), kOp, ": gate has shape ",
                    gate.sym_sizes(), "; expected input's shape ", input.sym_sizes());
  check_eps(kOp, eps);
  at::Tensor out = new_like(meta, input);
  if (meta) return out;
  check_last_dim_contiguous(kOp, "input", input);
  check_last_dim_contiguous(kOp, "gate", gate);
  check_contiguous(kOp, "weight", weight);

  const Rows in = readable_rows(input);
  const Rows g = readable_rows(gate);
  const std::int64_t rows = num_rows(in.t), cols = in.t.size(-1);
  if (out.numel() == 0) return out;
  parallel_rows(rows, cols, [&](std::int64_t begin, std::int64_t end) {
    rvvk::rmsnorm_gated(dtype, row_ptr(out, cols, begin), cols, row_ptr(in.t, in.stride, begin),
                        in.stride, weight.data_ptr(), row_ptr(g.t, g.stride, begin), g.stride,
                        end - begin, cols, static_cast<float>(eps));
  });
  return out;
}

namespace {

// The CPU-only layout checks of the QK ops: q (named `q_arg`) and k with a contiguous last
// dimension, contiguous weights.
void check_qk_layout(const char* op, const char* q_arg, const at::Tensor& q, const at::Tensor& k,
                     const at::Tensor& q_weight, const at::Tensor& k_weight) {
  check_last_dim_contiguous(op, q_arg, q);
  check_last_dim_contiguous(op, "k", k);
  check_contiguous(op, "q_weight", q_weight);
  check_contiguous(op, "k_weight", k_weight);
}

// `t` (named `arg`, laid out as `layout`) is rows of whole head_dim-wide heads.
void check_whole_heads(const char* op, const char* arg, const at::Tensor& t,
                       const c10::SymInt& head_dim, const char* layout) {
  TORCH_CHECK_VALUE(t.sym_size(-1) % head_dim == 0, op, ": ", arg, ".size(-1) = ",
                    t.sym_size(-1), " is not a multiple of head_dim = ", head_dim,
                    "; expected ", arg, " ", layout);
}

// Row t of `out` (rows out_stride apart) = the RMSNorm * (w + offset) of each head_dim-wide
// head of row t of `in` (rows in_stride apart): one kernel call per token over its heads.
// `out` may be `in` (in place).
void rmsnorm_heads(rvvk::DType dtype, const at::Tensor& out, std::int64_t out_stride,
                   const at::Tensor& in, std::int64_t in_stride, const at::Tensor& w,
                   std::int64_t head_dim, double eps, float offset) {
  if (in.numel() == 0) return;
  const std::int64_t tokens = num_rows(in), width = in.size(-1), heads = width / head_dim;
  parallel_rows(tokens, width, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      rvvk::rmsnorm(dtype, row_ptr(out, out_stride, t), head_dim, row_ptr(in, in_stride, t),
                    head_dim, w.data_ptr(), heads, head_dim, static_cast<float>(eps), offset);
    }
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> fused_qk_rmsnorm_cpu(bool meta, const at::Tensor& q,
                                                        const at::Tensor& k,
                                                        const at::Tensor& q_weight,
                                                        const at::Tensor& k_weight, double eps) {
  constexpr const char* kOp = "fused_qk_rmsnorm_cpu";
  const rvvk::DType dtype = check_qk(meta, kOp, q, k, q_weight, k_weight);
  check_norm_weight(kOp, "q_weight", q_weight, "q", q, q.sym_size(-1), "q.size(-1)");
  check_norm_weight(kOp, "k_weight", k_weight, "k", k, k.sym_size(-1), "k.size(-1)");
  check_eps(kOp, eps);
  at::Tensor q_out = new_like(meta, q), k_out = new_like(meta, k);
  if (meta) return {q_out, k_out};
  check_qk_layout(kOp, "q", q, k, q_weight, k_weight);
  run_rmsnorm(dtype, q_out, readable_rows(q), q_weight, eps, 0.0f);
  run_rmsnorm(dtype, k_out, readable_rows(k), k_weight, eps, 0.0f);
  return {q_out, k_out};
}

std::tuple<at::Tensor, at::Tensor> fused_qk_gemma_rmsnorm_cpu(
    bool meta, const at::Tensor& q, const at::Tensor& k, const at::Tensor& q_weight,
    const at::Tensor& k_weight, double eps, std::int64_t head_dim) {
  constexpr const char* kOp = "fused_qk_gemma_rmsnorm_cpu";
  const rvvk::DType dtype = check_qk(meta, kOp, q, k, q_weight, k_weight);
  TORCH_CHECK_VALUE(head_dim > 0, kOp, ": head_dim is ", head_dim, "; expected > 0");
  const c10::SymInt hd(head_dim);
  check_whole_heads(kOp, "q", q, hd, "[tokens, num_heads * head_dim]");
  check_whole_heads(kOp, "k", k, hd, "[tokens, num_kv_heads * head_dim]");
  check_norm_weight(kOp, "q_weight", q_weight, "q", q, hd, "head_dim");
  check_norm_weight(kOp, "k_weight", k_weight, "k", k, hd, "head_dim");
  check_eps(kOp, eps);
  at::Tensor q_out = new_like(meta, q), k_out = new_like(meta, k);
  if (meta) return {q_out, k_out};
  check_qk_layout(kOp, "q", q, k, q_weight, k_weight);
  // The output rows are contiguous.
  const Rows q_in = readable_rows(q), k_in = readable_rows(k);
  rmsnorm_heads(dtype, q_out, q.size(-1), q_in.t, q_in.stride, q_weight, head_dim, eps, 1.0f);
  rmsnorm_heads(dtype, k_out, k.size(-1), k_in.t, k_in.stride, k_weight, head_dim, eps, 1.0f);
  return {q_out, k_out};
}

// The per-head QK RMSNorm of Qwen3-style attention (SGLang's apply_qk_norm, bf16 / fp16): q
// [tokens, heads * head_dim] and k [tokens, kv_heads * head_dim], usually column slices of
// one qkv row, normalised in place per head_dim-wide head (head_dim = q_weight's size), fp32
// arithmetic, rounded once.
void fused_qk_norm_cpu(bool meta, at::Tensor& q, at::Tensor& k, const at::Tensor& q_weight,
                       const at::Tensor& k_weight, double eps) {
  constexpr const char* kOp = "fused_qk_norm_cpu";
  const rvvk::DType dtype = check_qk(meta, kOp, q, k, q_weight, k_weight);
  TORCH_CHECK_VALUE(q_weight.dim() == 1 && q_weight.sym_size(0) >= 1, kOp, ": q_weight (",
                    describe(q_weight), ") must be 1-D with head_dim >= 1 elements");
  const c10::SymInt hd = q_weight.sym_size(0);  // head_dim
  check_whole_heads(kOp, "q", q, hd,
                    "[tokens, num_heads * head_dim], head_dim = q_weight's size");
  check_whole_heads(kOp, "k", k, hd, "[tokens, num_kv_heads * head_dim]");
  check_norm_weight(kOp, "q_weight", q_weight, "q", q, hd, "head_dim");
  check_norm_weight(kOp, "k_weight", k_weight, "k", k, hd, "head_dim, from q_weight");
  check_eps(kOp, eps);
  if (meta) return;
  check_contiguous(kOp, "q_weight", q_weight);
  check_contiguous(kOp, "k_weight", k_weight);
  const std::int64_t head_dim = q_weight.size(0);
  const auto in_place = [&](const char* arg, at::Tensor& x, const at::Tensor& w) {
    if (x.numel() == 0) return;
    check_last_dim_contiguous(kOp, arg, x);
    const std::int64_t stride = require_row_stride(kOp, arg, x);
    check_rows_disjoint(kOp, arg, x, stride);
    rmsnorm_heads(dtype, x, stride, x, stride, w, head_dim, eps, 0.0f);
  };
  // q and k are usually interleaved column slices of one qkv row (their address ranges
  // overlap, their elements do not), so no range-overlap check between them.
  in_place("q", q, q_weight);
  in_place("k", k, k_weight);
}

// Qwen3.5's gated attention: q_gate [tokens, num_head * 2 * head_dim] holds, per head, the
// query's head_dim values then the output gate's. q_out [tokens * num_head, head_dim] =
// Gemma's RMSNorm of each query head (x / rms(x) * (1 + q_weight), fp32, rounded once),
// k_out [tokens * kv_heads, head_dim] the same of k's heads, gate_out [tokens * num_head,
// head_dim] the gate halves copied (SGLang's fake kernel's shapes).
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_qk_gemma_rmsnorm_with_gate_cpu(
    bool meta, const at::Tensor& q_gate, const at::Tensor& k, const at::Tensor& q_weight,
    const at::Tensor& k_weight, double eps, std::int64_t head_dim, std::int64_t num_head) {
  constexpr const char* kOp = "fused_qk_gemma_rmsnorm_with_gate_cpu";
  const rvvk::DType dtype = check_qk(meta, kOp, q_gate, k, q_weight, k_weight);
  TORCH_CHECK_VALUE(head_dim > 0, kOp, ": head_dim is ", head_dim, "; expected > 0");
  TORCH_CHECK_VALUE(num_head > 0, kOp, ": num_head is ", num_head, "; expected > 0");
  TORCH_CHECK_VALUE(q_gate.dim() == 2 && k.dim() == 2, kOp, ": q_gate (", describe(q_gate),
                    ") and k (", describe(k), ") must be 2-D [tokens, width]");
  TORCH_CHECK_VALUE(q_gate.sym_size(1) == 2 * num_head * head_dim, kOp, ": q_gate.size(1) = ",
                    q_gate.sym_size(1), "; expected 2 * num_head * head_dim = ",
                    2 * num_head * head_dim, " (each head's query then its gate)");
  TORCH_CHECK_VALUE(k.sym_size(1) % head_dim == 0, kOp, ": k.size(1) = ", k.sym_size(1),
                    " is not a multiple of head_dim = ", head_dim,
                    "; expected k [tokens, num_kv_heads * head_dim]");
  const c10::SymInt hd(head_dim);
  check_norm_weight(kOp, "q_weight", q_weight, "q_gate", q_gate, hd, "head_dim");
  check_norm_weight(kOp, "k_weight", k_weight, "k", k, hd, "head_dim");
  check_eps(kOp, eps);
  const c10::SymInt tokens = q_gate.sym_size(0);
  const c10::SymInt kv_rows = tokens * (k.sym_size(1) / head_dim);
  const auto opts = q_gate.options();
  if (meta) {
    return {at::empty_symint({tokens * num_head, hd}, opts),
            at::empty_symint({kv_rows, hd}, opts), at::empty_symint({tokens * num_head, hd}, opts)};
  }
  check_qk_layout(kOp, "q_gate", q_gate, k, q_weight, k_weight);
  const std::int64_t n = q_gate.size(0), kv_heads = k.size(1) / head_dim;
  at::Tensor q_out = at::empty({n * num_head, head_dim}, opts);
  at::Tensor k_out = at::empty({n * kv_heads, head_dim}, opts);
  at::Tensor gate_out = at::empty({n * num_head, head_dim}, opts);
  if (n == 0) return {q_out, k_out, gate_out};
  const std::int64_t qs = q_gate.stride(0), ks = k.stride(0);
  const std::int64_t es = static_cast<std::int64_t>(q_gate.element_size());
  const auto* qg = static_cast<const char*>(q_gate.data_ptr());
  const auto* kp = static_cast<const char*>(k.data_ptr());
  auto* qo = static_cast<char*>(q_out.data_ptr());
  auto* ko = static_cast<char*>(k_out.data_ptr());
  auto* go = static_cast<char*>(gate_out.data_ptr());
  const auto bytes = static_cast<std::size_t>(head_dim * es);
  parallel_rows(n, (2 * num_head + kv_heads) * head_dim, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      // The query heads are num_head rows of head_dim, 2 * head_dim apart.
      rvvk::rmsnorm(dtype, qo + t * num_head * head_dim * es, head_dim, qg + t * qs * es,
                    2 * head_dim, q_weight.data_ptr(), num_head, head_dim,
                    static_cast<float>(eps), 1.0f);
      rvvk::rmsnorm(dtype, ko + t * kv_heads * head_dim * es, head_dim, kp + t * ks * es,
                    head_dim, k_weight.data_ptr(), kv_heads, head_dim, static_cast<float>(eps),
                    1.0f);
      for (std::int64_t h = 0; h < num_head; ++h) {
        std::memcpy(go + (t * num_head + h) * head_dim * es,
                    qg + (t * qs + (2 * h + 1) * head_dim) * es, bytes);
      }
    }
  });
  return {q_out, k_out, gate_out};
}

at::Tensor fused_add_layernorm_cpu(bool meta, const at::Tensor& input, at::Tensor& residual,
                                   const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias, double eps) {
  constexpr const char* kOp = "fused_add_layernorm_cpu";
  if (!meta) {
    check_cpu(kOp, "input", input);
    check_cpu(kOp, "residual", residual);
    check_cpu(kOp, "weight", weight);
    if (bias) check_cpu(kOp, "bias", *bias);
  }
  const rvvk::DType dtype = kernel_dtype(kOp, "input", input);
  check_has_rows(kOp, "input", input);
  check_same_device(kOp, "residual", residual, "input", input);
  check_same_dtype(kOp, "residual", residual, "input", input);
  TORCH_CHECK_VALUE(residual.sym_sizes() == input.sym_sizes(), kOp, ": residual has shape ",
                    residual.sym_sizes(), "; expected input's shape ", input.sym_sizes());
  check_same_device(kOp, "weight", weight, "input", input);
  // As layernorm_cpu: parameters in the input's dtype or fp32 (SGLang's LayerNorm default).
  TORCH_CHECK_TYPE(weight.scalar_type() == input.scalar_type() ||
                       weight.scalar_type() == at::kFloat,
                   kOp, ": weight has dtype ", dtype_name(weight.scalar_type()),
                   "; expected input's dtype ", dtype_name(input.scalar_type()),
                   " or torch.float32");
  check_weight_shape(kOp, weight, "input", input);
  if (bias) {
    check_same_device(kOp, "bias", *bias, "input", input);
    check_same_dtype(kOp, "bias", *bias, "weight", weight);
    TORCH_CHECK_VALUE(bias->dim() == 1 && bias->sym_size(0) == input.sym_size(-1), kOp,
                      ": bias (", describe(*bias), ") has the wrong shape; expected [",
                      input.sym_size(-1), "] (input.size(-1)) or None");
  }
  check_eps(kOp, eps);
  at::Tensor out = new_like(meta, input);
  if (meta) return out;
  check_last_dim_contiguous(kOp, "input", input);
  check_last_dim_contiguous(kOp, "residual", residual);
  check_contiguous(kOp, "weight", weight);
  if (bias) check_contiguous(kOp, "bias", *bias);
  // residual is written where it is: it must be walkable as rows with one stride, rows
  // disjoint, sharing no memory with what is read.
  const std::int64_t res_stride = require_row_stride(kOp, "residual", residual);
  check_rows_disjoint(kOp, "residual", residual, res_stride);
  const Rows in = readable_rows(input);
  check_no_overlap(kOp, "input", in.t, in.stride, "residual", residual, res_stride);
  check_no_overlap(kOp, "residual", residual, res_stride, "weight", weight, weight.numel());
  if (bias) check_no_overlap(kOp, "residual", residual, res_stride, "bias", *bias, bias->numel());

  const std::int64_t rows = num_rows(in.t), cols = in.t.size(-1);
  if (out.numel() == 0) return out;
  const rvvk::DType param_dtype =
      weight.scalar_type() == at::kFloat ? rvvk::DType::kF32 : dtype;
  const void* bias_ptr = bias ? bias->data_ptr() : nullptr;
  parallel_rows(rows, cols, [&](std::int64_t begin, std::int64_t end) {
    rvvk::fused_add_layernorm(dtype, row_ptr(out, cols, begin), cols,
                              row_ptr(in.t, in.stride, begin), in.stride,
                              row_ptr(residual, res_stride, begin), res_stride, param_dtype,
                              weight.data_ptr(), bias_ptr, end - begin, cols,
                              static_cast<float>(eps));
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> fused_dual_residual_rmsnorm_cpu(
    bool meta, const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight1,
    const at::Tensor& weight2, double eps) {
  constexpr const char* kOp = "fused_dual_residual_rmsnorm_cpu";
  if (!meta) {
    check_cpu(kOp, "x", x);
    check_cpu(kOp, "residual", residual);
    check_cpu(kOp, "weight1", weight1);
    check_cpu(kOp, "weight2", weight2);
  }
  const rvvk::DType dtype = kernel_dtype(kOp, "x", x);
  check_has_rows(kOp, "x", x);
  check_same_device(kOp, "residual", residual, "x", x);
  check_same_dtype(kOp, "residual", residual, "x", x);
  TORCH_CHECK_VALUE(residual.sym_sizes() == x.sym_sizes(), kOp, ": residual has shape ",
                    residual.sym_sizes(), "; expected x's shape ", x.sym_sizes());
  check_norm_weight(kOp, "weight1", weight1, "x", x, x.sym_size(-1), "x.size(-1)");
  check_norm_weight(kOp, "weight2", weight2, "x", x, x.sym_size(-1), "x.size(-1)");
  check_eps(kOp, eps);
  at::Tensor out = new_like(meta, x);
  if (meta) return {out, new_like(true, x)};
  check_last_dim_contiguous(kOp, "x", x);
  check_contiguous(kOp, "weight1", weight1);
  check_contiguous(kOp, "weight2", weight2);
  // mid starts as a contiguous copy of residual; fused_add_rmsnorm then adds the first
  // norm (in out) to it and normalises the sum into out.
  at::Tensor mid = residual.contiguous();
  if (mid.is_same(residual)) mid = residual.clone(at::MemoryFormat::Contiguous);
  const Rows in = readable_rows(x);
  const std::int64_t rows = num_rows(in.t), cols = in.t.size(-1);
  if (out.numel() == 0) return {out, mid};
  const float e = static_cast<float>(eps);
  parallel_rows(rows, cols, [&](std::int64_t begin, std::int64_t end) {
    rvvk::rmsnorm(dtype, row_ptr(out, cols, begin), cols, row_ptr(in.t, in.stride, begin),
                  in.stride, weight1.data_ptr(), end - begin, cols, e, 0.0f);
    rvvk::fused_add_rmsnorm(dtype, row_ptr(out, cols, begin), cols, row_ptr(mid, cols, begin),
                            cols, weight2.data_ptr(), end - begin, cols, e, 0.0f);
  });
  return {out, mid};
}

void fused_qk_norm_rope_cpu(bool meta, at::Tensor& q, at::Tensor& k, const at::Tensor& q_weight,
                            const at::Tensor& k_weight, double eps, bool is_neox,
                            const at::Tensor& positions, const at::Tensor& cos_sin_cache,
                            std::int64_t rotary_dim) {
  constexpr const char* kOp = "fused_qk_norm_rope_cpu";
  const rvvk::DType dtype = check_qk(meta, kOp, q, k, q_weight, k_weight);
  if (!meta) {
    check_cpu(kOp, "positions", positions);
    check_cpu(kOp, "cos_sin_cache", cos_sin_cache);
  }
  TORCH_CHECK_VALUE(q_weight.dim() == 1, kOp, ": q_weight is ", q_weight.dim(), "-d (",
                    describe(q_weight), "); expected a 1-D tensor of head_dim elements");
  const c10::SymInt head_dim = q_weight.sym_size(0);
  TORCH_CHECK_VALUE(head_dim > 0, kOp, ": q_weight is empty; expected head_dim > 0 elements");
  check_norm_weight(kOp, "k_weight", k_weight, "k", k, head_dim, "q_weight.size(0) (head_dim)");
  check_same_device(kOp, "q_weight", q_weight, "q", q);
  check_same_dtype(kOp, "q_weight", q_weight, "q", q);
  TORCH_CHECK_VALUE(q.sym_size(-1) % head_dim == 0, kOp, ": q.size(-1) = ", q.sym_size(-1),
                    " is not a multiple of head_dim = ", head_dim,
                    " (q_weight.size(0)); expected q [tokens, num_heads * head_dim]");
  TORCH_CHECK_VALUE(k.sym_size(-1) % head_dim == 0, kOp, ": k.size(-1) = ", k.sym_size(-1),
                    " is not a multiple of head_dim = ", head_dim,
                    " (q_weight.size(0)); expected k [tokens, num_kv_heads * head_dim]");
  check_eps(kOp, eps);
  check_same_device(kOp, "positions", positions, "q", q);
  check_same_device(kOp, "cos_sin_cache", cos_sin_cache, "q", q);
  TORCH_CHECK_TYPE(positions.scalar_type() == at::kLong || positions.scalar_type() == at::kInt,
                   kOp, ": positions has dtype ", dtype_name(positions.scalar_type()),
                   "; expected torch.int64 or torch.int32");
  c10::SymInt tokens = 1;
  for (std::int64_t d = 0; d + 1 < q.dim(); ++d) tokens *= q.sym_size(d);
  TORCH_CHECK_VALUE(positions.dim() == 1 && positions.sym_size(0) == tokens, kOp,
                    ": positions (", describe(positions), ") has the wrong shape; expected [",
                    tokens, "] (one position per row of q)");
  TORCH_CHECK_TYPE(cos_sin_cache.scalar_type() == at::kFloat ||
                       cos_sin_cache.scalar_type() == q.scalar_type(),
                   kOp, ": cos_sin_cache has dtype ", dtype_name(cos_sin_cache.scalar_type()),
                   "; expected torch.float32 or q's dtype ", dtype_name(q.scalar_type()));
  TORCH_CHECK_VALUE(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= head_dim, kOp,
                    ": rotary_dim is ", rotary_dim, "; expected an even number in [2, head_dim = ",
                    head_dim, "]");
  TORCH_CHECK_VALUE(cos_sin_cache.dim() == 2 && cos_sin_cache.sym_size(1) == rotary_dim, kOp,
                    ": cos_sin_cache (", describe(cos_sin_cache),
                    ") has the wrong shape; expected [max_position, rotary_dim = ", rotary_dim,
                    "] (cos then sin)");
  if (meta) return;
  check_qk_layout(kOp, "q", q, k, q_weight, k_weight);
  TORCH_CHECK_VALUE(cos_sin_cache.stride(1) == 1, kOp, ": cos_sin_cache (",
                    describe(cos_sin_cache), ") has a last-dimension stride of ",
                    cos_sin_cache.stride(1), "; expected 1 (call .contiguous() first)");
  // q and k are written where they are (column slices of SGLang's qkv): one row stride each,
  // rows disjoint, no memory shared with each other or with what is read.
  const std::int64_t q_stride = require_row_stride(kOp, "q", q);
  const std::int64_t k_stride = require_row_stride(kOp, "k", k);
  check_rows_disjoint(kOp, "q", q, q_stride);
  check_rows_disjoint(kOp, "k", k, k_stride);
  check_no_overlap(kOp, "q", q, q_stride, "k", k, k_stride);
  for (const auto& [arg, t] : {std::pair<const char*, const at::Tensor*>{"q_weight", &q_weight},
                               {"k_weight", &k_weight},
                               {"cos_sin_cache", &cos_sin_cache},
                               {"positions", &positions}}) {
    if (!t->is_contiguous() || t->numel() == 0) continue;
    check_no_overlap(kOp, "q", q, q_stride, arg, *t, t->numel());
    check_no_overlap(kOp, "k", k, k_stride, arg, *t, t->numel());
  }
  const std::int64_t n = num_rows(q), hd = q_weight.size(0);
  const at::Tensor pos = positions.to(at::kLong).contiguous();
  const std::int64_t* p = pos.data_ptr<std::int64_t>();
  const std::int64_t max_pos = cos_sin_cache.size(0);
  for (std::int64_t t = 0; t < n; ++t) {
    TORCH_CHECK_VALUE(p[t] >= 0 && p[t] < max_pos, kOp, ": positions[", t, "] is ", p[t],
                      "; expected 0 <= position < cos_sin_cache.size(0) = ", max_pos);
  }
  if (q.numel() == 0 && k.numel() == 0) return;

  rvvk::RotaryArgs base;
  base.head_size = hd;
  base.rotary_dim = rotary_dim;
  base.neox = is_neox;
  base.dtype = dtype;
  base.cache_dtype = cos_sin_cache.scalar_type() == at::kFloat ? rvvk::DType::kF32 : dtype;
  base.cos_sin_cache = cos_sin_cache.data_ptr();
  base.cache_stride = cos_sin_cache.stride(0);
  base.positions = p;
  // In place: out == x with the same strides (the rotary kernel allows it).
  const auto args_for = [&](const at::Tensor& x, std::int64_t stride) {
    rvvk::RotaryArgs a = base;
    a.heads = x.size(-1) / hd;
    a.x = x.data_ptr();
    a.out = x.data_ptr();
    a.x_stride_t = a.out_stride_t = stride;
    a.x_stride_h = a.out_stride_h = hd;
    return a;
  };
  const rvvk::RotaryArgs qa = args_for(q, q_stride);
  const rvvk::RotaryArgs ka = args_for(k, k_stride);
  const float e = static_cast<float>(eps);
  // Per token: RMSNorm of each head in place (rows of head_dim, head_dim apart), then RoPE
  // of the normalised heads, while the token is in cache.
  const std::int64_t per_token = std::max<std::int64_t>(q.size(-1) + k.size(-1), 1);
  parallel_rows(n, per_token, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      void* qt = row_ptr(q, q_stride, t);
      void* kt = row_ptr(k, k_stride, t);
      rvvk::rmsnorm(dtype, qt, hd, qt, hd, q_weight.data_ptr(), qa.heads, hd, e, 0.0f);
      rvvk::rmsnorm(dtype, kt, hd, kt, hd, k_weight.data_ptr(), ka.heads, hd, e, 0.0f);
    }
    rvvk::rotary_embedding(qa, begin, end);
    rvvk::rotary_embedding(ka, begin, end);
  });
}

}  // namespace rvv_ops
