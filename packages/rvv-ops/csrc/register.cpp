// Every schema and kernel registration of rvv-ops.
//
// TORCH_LIBRARY_FRAGMENT, never TORCH_LIBRARY: the sgl_kernel namespace may already be
// owned by another library (a CUDA build of sgl-kernel). Defining an op name twice aborts
// the process inside this library's static initializers, so rvv_ops/__init__.py checks
// for existing definitions before it loads the library.
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include "ops.h"

// SGLang's names and arguments (sgl-kernel's CPU ops); `(a!)` marks what is written.
TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  m.def("rmsnorm_cpu(Tensor input, Tensor weight, float eps) -> Tensor");
  m.def(
      "fused_add_rmsnorm_cpu(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float eps) "
      "-> ()");
  // Model-layer ops, as SGLang 0.5.23's layers call them (layernorm.py, activation.py,
  // rotary_embedding/base.py).
  m.def("gemma_rmsnorm_cpu(Tensor input, Tensor weight, float eps) -> Tensor");
  m.def(
      "gemma_fused_add_rmsnorm_cpu(Tensor(a!) input, Tensor(b!) residual, Tensor weight, "
      "float eps) -> ()");
  m.def("layernorm_cpu(Tensor input, Tensor weight, Tensor? bias, float eps) -> Tensor");
  m.def("silu_and_mul_cpu(Tensor input) -> Tensor");
  m.def("gelu_and_mul_cpu(Tensor input) -> Tensor");
  m.def("gelu_tanh_and_mul_cpu(Tensor input) -> Tensor");
  m.def(
      "rotary_embedding_cpu(Tensor positions, Tensor query, Tensor key, int head_size, "
      "Tensor cos_sin_cache, bool is_neox) -> (Tensor, Tensor)");
  // SGLang 0.5.23's argument lists (intel_amx_backend.py: 19 and 22 arguments).
  m.def(
      "decode_attention_cpu(Tensor query, Tensor(a!) k_cache, Tensor(b!) v_cache, "
      "float k_scale, float v_scale, Tensor(c!) output, Tensor? key, Tensor? value, "
      "Tensor loc, Tensor(d!) attn_logits, Tensor req_to_token, Tensor req_pool_indices, "
      "Tensor seq_lens, float sm_scale, float logit_cap, bool is_cross_attention, "
      "int sliding_window_size, Tensor? encoder_lens, Tensor? sinks) -> ()");
  m.def(
      "extend_attention_cpu(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, "
      "Tensor(a!) o_extend, Tensor k_buffer, Tensor v_buffer, float k_scale, float v_scale, "
      "Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, Tensor extend_seq_lens, "
      "Tensor extend_start_loc, int max_len_extend, float sm_scale, float logit_cap, "
      "bool is_cross_attention, int sliding_window_size, Tensor? encoder_lens, "
      "Tensor? sinks, Tensor? tree_mask, bool is_causal) -> ()");
  // rvv-ops' own INT8-cache versions: per-token, per-KV-head fp32 scale buffers in place of
  // the per-tensor scales; the extend op also writes the new tokens at out_cache_loc.
  m.def(
      "decode_attention_int8_cpu(Tensor query, Tensor(a!) k_cache, Tensor(b!) v_cache, "
      "Tensor(x!) k_scale_buf, Tensor(y!) v_scale_buf, Tensor(c!) output, Tensor? key, "
      "Tensor? value, Tensor loc, Tensor(d!) attn_logits, Tensor req_to_token, "
      "Tensor req_pool_indices, Tensor seq_lens, float sm_scale, float logit_cap, "
      "bool is_cross_attention, int sliding_window_size, Tensor? encoder_lens, "
      "Tensor? sinks) -> ()");
  m.def(
      "extend_attention_int8_cpu(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, "
      "Tensor(a!) o_extend, Tensor(b!) k_buffer, Tensor(c!) v_buffer, Tensor(x!) k_scale_buf, "
      "Tensor(y!) v_scale_buf, Tensor out_cache_loc, Tensor req_to_token, "
      "Tensor req_pool_indices, Tensor seq_lens, Tensor extend_seq_lens, "
      "Tensor extend_start_loc, int max_len_extend, float sm_scale, float logit_cap, "
      "bool is_cross_attention, int sliding_window_size, Tensor? encoder_lens, "
      "Tensor? sinks, Tensor? tree_mask, bool is_causal) -> ()");
  // Linear layers and W8A8, as SGLang 0.5.23 calls them (layers/amx_utils.py,
  // quantization/unquant.py, quantization/w8a8_int8.py, logits_processor.py).
  m.def("convert_weight_packed(Tensor weight) -> Tensor");
  m.def("weight_packed_linear(Tensor mat1, Tensor mat2, Tensor? bias, bool is_vnni) -> Tensor");
  m.def("per_token_quant_int8_cpu(Tensor A) -> (Tensor, Tensor)");
  m.def(
      "int8_scaled_mm_cpu(Tensor mat1, Tensor mat2, Tensor scales1, Tensor scales2, "
      "Tensor? bias, ScalarType out_dtype, bool is_vnni) -> Tensor");
  m.def(
      "int8_scaled_mm_with_quant(Tensor mat1, Tensor mat2, Tensor scales2, Tensor? bias, "
      "ScalarType out_dtype, bool is_vnni) -> Tensor");
}

TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) {
  m.impl("rmsnorm_cpu", &rvv_ops::rmsnorm_cpu);
  m.impl("fused_add_rmsnorm_cpu", &rvv_ops::fused_add_rmsnorm_cpu);
  m.impl("gemma_rmsnorm_cpu", &rvv_ops::gemma_rmsnorm_cpu);
  m.impl("gemma_fused_add_rmsnorm_cpu", &rvv_ops::gemma_fused_add_rmsnorm_cpu);
  m.impl("layernorm_cpu", &rvv_ops::layernorm_cpu);
  m.impl("silu_and_mul_cpu", &rvv_ops::silu_and_mul_cpu);
  m.impl("gelu_and_mul_cpu", &rvv_ops::gelu_and_mul_cpu);
  m.impl("gelu_tanh_and_mul_cpu", &rvv_ops::gelu_tanh_and_mul_cpu);
  m.impl("rotary_embedding_cpu", &rvv_ops::rotary_embedding_cpu);
  m.impl("decode_attention_cpu", &rvv_ops::decode_attention_cpu);
  m.impl("extend_attention_cpu", &rvv_ops::extend_attention_cpu);
  m.impl("decode_attention_int8_cpu", &rvv_ops::decode_attention_int8_cpu);
  m.impl("extend_attention_int8_cpu", &rvv_ops::extend_attention_int8_cpu);
  m.impl("convert_weight_packed", &rvv_ops::convert_weight_packed);
  m.impl("weight_packed_linear", &rvv_ops::weight_packed_linear);
  m.impl("per_token_quant_int8_cpu", &rvv_ops::per_token_quant_int8_cpu);
  m.impl("int8_scaled_mm_cpu", &rvv_ops::int8_scaled_mm_cpu);
  m.impl("int8_scaled_mm_with_quant", &rvv_ops::int8_scaled_mm_with_quant);
}

// The attention ops (none has a derivative): see attention_autograd.cpp.
constexpr const char* kAttentionOps[] = {"decode_attention_cpu", "extend_attention_cpu",
                                         "decode_attention_int8_cpu",
                                         "extend_attention_int8_cpu"};

// No derivatives. rmsnorm_cpu and the other ops returning new tensors: torch's fallback
// makes backward() through the result raise "not implemented". fused_add_rmsnorm_cpu and
// gemma_fused_add_rmsnorm_cpu: see autograd.cpp.
TORCH_LIBRARY_IMPL(sgl_kernel, Autograd, m) {
  m.impl("rmsnorm_cpu", torch::autograd::autogradNotImplementedFallback());
  m.impl("fused_add_rmsnorm_cpu", &rvv_ops::fused_add_rmsnorm_autograd);
  for (const char* name : {"gemma_rmsnorm_cpu", "layernorm_cpu", "silu_and_mul_cpu",
                           "gelu_and_mul_cpu", "gelu_tanh_and_mul_cpu", "rotary_embedding_cpu",
                           "convert_weight_packed", "weight_packed_linear",
                           "per_token_quant_int8_cpu", "int8_scaled_mm_cpu",
                           "int8_scaled_mm_with_quant"}) {
    m.impl(name, torch::autograd::autogradNotImplementedFallback());
  }
  m.impl("gemma_fused_add_rmsnorm_cpu", &rvv_ops::gemma_fused_add_rmsnorm_autograd);
  for (const char* name : kAttentionOps) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&rvv_ops::attention_autograd>());
  }
}

TORCH_LIBRARY_IMPL(sgl_kernel, ADInplaceOrView, m) {
  m.impl("fused_add_rmsnorm_cpu", &rvv_ops::fused_add_rmsnorm_inplace_or_view);
  m.impl("gemma_fused_add_rmsnorm_cpu", &rvv_ops::gemma_fused_add_rmsnorm_inplace_or_view);
  for (const char* name : kAttentionOps) {
    m.impl(name,
           torch::CppFunction::makeFromBoxedFunction<&rvv_ops::attention_inplace_or_view>());
  }
}

// rvv-ops' own introspection; no tensor arguments, so one kernel for every backend.
TORCH_LIBRARY_FRAGMENT(rvv_ops, m) {
  m.def("build_info() -> str", &rvv_ops::build_info);
  m.def("set_variant(str name) -> ()", &rvv_ops::set_variant);
  m.def("packed_weight_cols(int n, int k, ScalarType dtype) -> int",
        &rvv_ops::packed_weight_cols);
}
