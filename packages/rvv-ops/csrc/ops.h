// The ops' C++ entry points; register.cpp binds them to their schemas.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <ATen/core/stack.h>
#include <c10/core/DispatchKeySet.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

namespace c10 {
class OperatorHandle;
}  // namespace c10

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

// Model-layer ops (rmsnorm.cpp, layernorm.cpp, activation.cpp, rotary.cpp).
// sgl_kernel::gemma_rmsnorm_cpu / gemma_fused_add_rmsnorm_cpu: as the plain versions but
// scaling by (1 + weight).
at::Tensor gemma_rmsnorm_cpu(const at::Tensor& input, const at::Tensor& weight, double eps);
void gemma_fused_add_rmsnorm_cpu(at::Tensor& input, at::Tensor& residual,
                                 const at::Tensor& weight, double eps);
void gemma_fused_add_rmsnorm_autograd(c10::DispatchKeySet keys, at::Tensor& input,
                                      at::Tensor& residual, const at::Tensor& weight,
                                      double eps);
void gemma_fused_add_rmsnorm_inplace_or_view(c10::DispatchKeySet keys, at::Tensor& input,
                                             at::Tensor& residual, const at::Tensor& weight,
                                             double eps);
// sgl_kernel::layernorm_cpu: (input - mean) / sqrt(var + eps) * weight + bias, new tensor;
// weight and bias in input's dtype or fp32.
at::Tensor layernorm_cpu(const at::Tensor& input, const at::Tensor& weight,
                         const std::optional<at::Tensor>& bias, double eps);
// sgl_kernel::{silu,gelu,gelu_tanh}_and_mul_cpu: input [..., 2d] -> act(gate) * up, [..., d].
at::Tensor silu_and_mul_cpu(const at::Tensor& input);
at::Tensor gelu_and_mul_cpu(const at::Tensor& input);
at::Tensor gelu_tanh_and_mul_cpu(const at::Tensor& input);
// sgl_kernel::rotary_embedding_cpu: rotated copies of query and key (neox or GPT-J layout,
// partial rotary dimension = cos_sin_cache.size(1)).
std::tuple<at::Tensor, at::Tensor> rotary_embedding_cpu(const at::Tensor& positions,
                                                        const at::Tensor& query,
                                                        const at::Tensor& key,
                                                        std::int64_t head_size,
                                                        const at::Tensor& cos_sin_cache,
                                                        bool is_neox);

// sgl_kernel::decode_attention_cpu: writes key/value (if given) into the caches at `loc`,
// then one query token per request attends to its cached keys (split-KV; attn_logits is
// the scratch). extend_attention_cpu: the new tokens of each request attend to its cached
// prefix and (causally) to each other. The *_int8_cpu versions read INT8 caches with
// per-token, per-head scales and quantise what they write. attention.cpp documents the
// rest; the schemas are in register.cpp.
void decode_attention_cpu(const at::Tensor& query, at::Tensor& k_cache, at::Tensor& v_cache,
                          double k_scale, double v_scale, at::Tensor& output,
                          const std::optional<at::Tensor>& key,
                          const std::optional<at::Tensor>& value, const at::Tensor& loc,
                          at::Tensor& attn_logits, const at::Tensor& req_to_token,
                          const at::Tensor& req_pool_indices, const at::Tensor& seq_lens,
                          double sm_scale, double logit_cap, bool is_cross_attention,
                          std::int64_t sliding_window_size,
                          const std::optional<at::Tensor>& encoder_lens,
                          const std::optional<at::Tensor>& sinks);
void decode_attention_int8_cpu(const at::Tensor& query, at::Tensor& k_cache,
                               at::Tensor& v_cache, at::Tensor& k_scale_buf,
                               at::Tensor& v_scale_buf, at::Tensor& output,
                               const std::optional<at::Tensor>& key,
                               const std::optional<at::Tensor>& value, const at::Tensor& loc,
                               at::Tensor& attn_logits, const at::Tensor& req_to_token,
                               const at::Tensor& req_pool_indices, const at::Tensor& seq_lens,
                               double sm_scale, double logit_cap, bool is_cross_attention,
                               std::int64_t sliding_window_size,
                               const std::optional<at::Tensor>& encoder_lens,
                               const std::optional<at::Tensor>& sinks);
void extend_attention_cpu(const at::Tensor& q_extend, const std::optional<at::Tensor>& k_extend,
                          const std::optional<at::Tensor>& v_extend, at::Tensor& o_extend,
                          const at::Tensor& k_buffer, const at::Tensor& v_buffer,
                          double k_scale, double v_scale, const at::Tensor& req_to_token,
                          const at::Tensor& req_pool_indices, const at::Tensor& seq_lens,
                          const at::Tensor& extend_seq_lens,
                          const at::Tensor& extend_start_loc, std::int64_t max_len_extend,
                          double sm_scale, double logit_cap, bool is_cross_attention,
                          std::int64_t sliding_window_size,
                          const std::optional<at::Tensor>& encoder_lens,
                          const std::optional<at::Tensor>& sinks,
                          const std::optional<at::Tensor>& tree_mask, bool is_causal);
void extend_attention_int8_cpu(
    const at::Tensor& q_extend, const std::optional<at::Tensor>& k_extend,
    const std::optional<at::Tensor>& v_extend, at::Tensor& o_extend, at::Tensor& k_buffer,
    at::Tensor& v_buffer, at::Tensor& k_scale_buf, at::Tensor& v_scale_buf,
    const at::Tensor& out_cache_loc, const at::Tensor& req_to_token,
    const at::Tensor& req_pool_indices, const at::Tensor& seq_lens,
    const at::Tensor& extend_seq_lens, const at::Tensor& extend_start_loc,
    std::int64_t max_len_extend, double sm_scale, double logit_cap, bool is_cross_attention,
    std::int64_t sliding_window_size, const std::optional<at::Tensor>& encoder_lens,
    const std::optional<at::Tensor>& sinks, const std::optional<at::Tensor>& tree_mask,
    bool is_causal);

// The attention ops' Autograd and ADInplaceOrView kernels (attention_autograd.cpp), boxed:
// no derivative; version-counter bumps for the arguments their schemas mark as written.
void attention_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                        torch::jit::Stack* stack);
void attention_inplace_or_view(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                               torch::jit::Stack* stack);

// Linear layers (linear.cpp). convert_weight_packed: [N, K] weight (fp32/bf16/fp16/int8)
// -> packed tensor [N, X] of the same dtype (header + VLEN-sized panels).
// weight_packed_linear: mat1 [M, K] @ W^T + bias, W packed (is_vnni) or plain [N, K].
// per_token_quant_int8_cpu: (int8 [M, K], fp32 scales [M]). int8_scaled_mm_cpu: int8 GEMM
// with per-row and per-channel scales; int8_scaled_mm_with_quant quantises mat1 first.
at::Tensor convert_weight_packed(const at::Tensor& weight);
at::Tensor weight_packed_linear(const at::Tensor& mat1, const at::Tensor& mat2,
                                const std::optional<at::Tensor>& bias, bool is_vnni);
std::tuple<at::Tensor, at::Tensor> per_token_quant_int8_cpu(const at::Tensor& A);
at::Tensor int8_scaled_mm_cpu(const at::Tensor& mat1, const at::Tensor& mat2,
                              const at::Tensor& scales1, const at::Tensor& scales2,
                              const std::optional<at::Tensor>& bias, at::ScalarType out_dtype,
                              bool is_vnni);
at::Tensor int8_scaled_mm_with_quant(const at::Tensor& mat1, const at::Tensor& mat2,
                                     const at::Tensor& scales2,
                                     const std::optional<at::Tensor>& bias,
                                     at::ScalarType out_dtype, bool is_vnni);
// rvv_ops::packed_weight_cols: size(1) of convert_weight_packed's result for an [n, k]
// weight of `dtype` on this CPU (the fake kernel's shape).
std::int64_t packed_weight_cols(std::int64_t n, std::int64_t k, at::ScalarType dtype);

// rvv_ops::build_info: a JSON object describing the build and the running CPU.
std::string build_info();
// rvv_ops::set_variant: switches every kernel to rvv-kernels variant `name`.
void set_variant(const std::string& name);

}  // namespace rvv_ops
