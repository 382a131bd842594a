"""rvv-ops: SGLang's ``sgl_kernel`` CPU ops on rvv-kernels, as PyTorch custom ops.

Importing this package loads ``rvv_ops/_C.so``, which registers

- ``torch.ops.sgl_kernel.rmsnorm_cpu(input, weight, eps) -> Tensor``
- ``torch.ops.sgl_kernel.fused_add_rmsnorm_cpu(input, residual, weight, eps) -> ()``
  (``input`` and ``residual`` updated in place)
- ``torch.ops.sgl_kernel.decode_attention_cpu`` (19 arguments) and
  ``extend_attention_cpu`` (22 arguments): attention over SGLang's indexed KV cache
  (activations' dtype or fp8), plus ``decode_attention_int8_cpu`` and
  ``extend_attention_int8_cpu`` for INT8 caches with per-token scales
- model-layer ops: ``gemma_rmsnorm_cpu``, ``gemma_fused_add_rmsnorm_cpu`` (see
  ``rvv_ops.rmsnorm``), ``gemma3_rmsnorm_cpu``, ``gemma4_rmsnorm_cpu``, ``l2norm_cpu``,
  ``fused_rmsnorm_gated_cpu``, ``fused_qk_rmsnorm_cpu``, ``fused_qk_gemma_rmsnorm_cpu``,
  ``fused_add_layernorm_cpu``, ``fused_dual_residual_rmsnorm_cpu``,
  ``fused_qk_norm_rope_cpu`` (``rvv_ops.norms``),
  ``layernorm_cpu`` (``rvv_ops.layernorm``), ``silu_and_mul_cpu``,
  ``gelu_and_mul_cpu``, ``gelu_tanh_and_mul_cpu`` (``rvv_ops.activation``),
  ``rotary_embedding_cpu``, ``apply_rotary_pos_emb_cpu``,
  ``multimodal_rotary_embedding_cpu`` (``rvv_ops.rotary``),
  ``fused_sigmoid_mul_cpu`` (``rvv_ops.activation``), ``fused_linear_sigmoid_mul``
  (``rvv_ops.linear``), ``fused_gdn_gating_cpu`` (``rvv_ops.gdn_gating``)
- linear layers (see ``rvv_ops.linear``): ``convert_weight_packed``,
  ``weight_packed_linear``, ``per_token_quant_int8_cpu``, ``int8_scaled_mm_cpu``,
  ``int8_scaled_mm_with_quant``; quantised weights: ``convert_weight_packed_scale_zp``,
  ``int4_scaled_mm_cpu`` (AWQ / GPTQ int4, W4A8), ``int4_w4a16_mm_cpu`` (rvv-ops' own W4A16),
  ``fp8_scaled_mm_cpu`` (FP8 e4m3 block-scaled W8A16)
- mixture-of-experts layers (see ``rvv_ops.moe``): ``fused_experts_cpu`` (unquantised and
  W8A8 int8 experts, weights packed by ``convert_weight_packed`` from ``[E, N, K]``),
  ``shared_expert_cpu``
- Gated DeltaNet (Qwen3-Next / Qwen3.5 linear attention, see ``rvv_ops.gdn``):
  ``causal_conv1d_fwd_cpu``, ``causal_conv1d_update_cpu``,
  ``fused_sigmoid_gating_delta_rule_update_cpu``, ``chunk_gated_delta_rule_cpu``
- mixture-of-experts routing (see ``rvv_ops.moe_routing``): ``topk_softmax_cpu``,
  ``topk_sigmoid_cpu``, ``grouped_topk_cpu``, ``biased_grouped_topk_cpu``,
  ``fused_moe_router_cpu``
- multi-head latent attention (see ``rvv_ops.mla``): ``bmm_cpu``, ``qkv_proj_with_rope``,
  ``qkv_proj_with_rope_fused_weight``

with SGLang's names and arguments, so SGLang's CPU code paths find them, plus Meta
kernels (the checks that need no data, then empty outputs) for fake tensors and
torch.compile. Each ``rvv_ops.<module>`` holds the typed wrappers of ``csrc/<module>.cpp``;
``csrc/ops.def`` lists every op. The kernels are rvv-kernels': RVV 1.0 (with or without Zvfh)
on riscv64, chosen at run time for the CPU, portable C++ elsewhere.

Import fails with ImportError, before anything is registered, if the library was built
for another machine or torch minor version, or if another library (e.g. a CUDA build of
sgl-kernel) already defines one of these ops; and after loading if ``RVVK_VARIANT``
names a variant that cannot be used here.
"""

from __future__ import annotations

from rvv_ops._library import BuildInfo, CpuInfo, build_info, load_library, set_variant
from rvv_ops.activation import fused_sigmoid_mul, gelu_and_mul, gelu_tanh_and_mul, silu_and_mul
from rvv_ops.attention import (
    UNSUPPORTED,
    decode_attention,
    decode_attention_int8,
    extend_attention,
    extend_attention_int8,
)
from rvv_ops.gdn import (
    causal_conv1d_fwd,
    causal_conv1d_update,
    chunk_gated_delta_rule,
    fused_sigmoid_gating_delta_rule_update,
)
from rvv_ops.gdn_gating import fused_gdn_gating
from rvv_ops.layernorm import layernorm
from rvv_ops.linear import (
    AWQ,
    GPTQ,
    convert_int4_weight,
    convert_weight_packed,
    fp8_scaled_mm,
    fused_linear_sigmoid_mul,
    int4_scaled_mm,
    int4_w4a16_mm,
    int8_scaled_mm,
    int8_scaled_mm_with_quant,
    per_token_quant_int8,
    weight_packed_linear,
)
from rvv_ops.moe import fused_experts, shared_expert
from rvv_ops.moe_routing import (
    biased_grouped_topk,
    fused_moe_router,
    grouped_topk,
    topk_sigmoid,
    topk_softmax,
)
from rvv_ops.norms import (
    fused_add_layernorm,
    fused_dual_residual_rmsnorm,
    fused_qk_gemma_rmsnorm,
    fused_qk_norm_rope,
    fused_qk_rmsnorm,
    fused_rmsnorm_gated,
    gemma3_rmsnorm,
    gemma4_rmsnorm,
    l2norm,
)
from rvv_ops.rmsnorm import fused_add_rmsnorm, gemma_fused_add_rmsnorm, gemma_rmsnorm, rmsnorm
from rvv_ops.rotary import apply_rotary_pos_emb, multimodal_rotary_embedding, rotary_embedding

__all__ = [
    "AWQ",
    "GPTQ",
    "UNSUPPORTED",
    "BuildInfo",
    "CpuInfo",
    "__version__",
    "apply_rotary_pos_emb",
    "biased_grouped_topk",
    "build_info",
    "causal_conv1d_fwd",
    "causal_conv1d_update",
    "chunk_gated_delta_rule",
    "convert_int4_weight",
    "convert_weight_packed",
    "decode_attention",
    "decode_attention_int8",
    "extend_attention",
    "extend_attention_int8",
    "fp8_scaled_mm",
    "fused_add_layernorm",
    "fused_add_rmsnorm",
    "fused_dual_residual_rmsnorm",
    "fused_experts",
    "fused_gdn_gating",
    "fused_linear_sigmoid_mul",
    "fused_moe_router",
    "fused_qk_gemma_rmsnorm",
    "fused_qk_norm_rope",
    "fused_qk_rmsnorm",
    "fused_rmsnorm_gated",
    "fused_sigmoid_gating_delta_rule_update",
    "fused_sigmoid_mul",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "gemma3_rmsnorm",
    "gemma4_rmsnorm",
    "gemma_fused_add_rmsnorm",
    "gemma_rmsnorm",
    "grouped_topk",
    "int4_scaled_mm",
    "int4_w4a16_mm",
    "int8_scaled_mm",
    "int8_scaled_mm_with_quant",
    "l2norm",
    "layernorm",
    "multimodal_rotary_embedding",
    "per_token_quant_int8",
    "rmsnorm",
    "rotary_embedding",
    "set_variant",
    "shared_expert",
    "silu_and_mul",
    "topk_sigmoid",
    "topk_softmax",
    "weight_packed_linear",
]
__version__ = "0.1.0"

load_library()
