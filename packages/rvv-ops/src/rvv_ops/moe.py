"""Typed wrappers over the mixture-of-experts ops (csrc/moe.cpp).

The ops keep the names and arguments SGLang 0.5.23's CPU code calls
(``srt/layers/quantization/unquant.py`` and ``w8a8_int8.py`` ``forward_cpu``,
``srt/models/deepseek_v2.py``):

- ``fused_experts_cpu(hidden_states, w1, w2, topk_weights, topk_ids, inplace,
  moe_comp_method, w1_scale, w2_scale, w1_zero, w2_zero, block_size, w1_bias, w2_bias,
  alpha, limit, is_vnni, activation=None) -> Tensor``
- ``shared_expert_cpu(hidden_states, w1, w2, fused_experts_out, routed_scaling_factor,
  inplace, use_int8_w8a8, use_fp8_w8a16, w1_scale, w2_scale, block_size, is_vnni) -> Tensor``

Expert-stacked weights are packed once by ``convert_weight_packed`` (which takes
``[E, N, K]`` as well as ``[N, K]``; float, int8 and float8_e4m3fn) or, for AWQ / GPTQ
int4 checkpoints, ``convert_weight_packed_scale_zp`` (3-D ``[E, ...]`` tensors too). The
(token, choice) pairs are grouped by expert, so each expert's weights are read once per
call however many tokens chose it; all arithmetic is fp32 with one rounding to the
activations' dtype. ``moe_comp_method`` (SGLang's ``CPUQuantMethod``):

- ``UNQUANT`` (0): fp32 / bf16 / fp16 weights;
- ``INT8_W8A8`` (1): int8 weights, ``w1_scale [E, 2I]`` / ``w2_scale [E, H]`` (or
  ``[E, N, 1]``), activations quantised per row;
- ``FP8_W8A16`` (2): float8_e4m3fn weights (packed or plain), SGLang's block scales
  ``w1_scale [E, ceil(2I / block_n), ceil(H / block_k)]``, ``w2_scale [E, ceil(H /
  block_n), ceil(I / block_k)]`` (fp32 or bf16) and ``block_size = [block_n, block_k]``;
  activations not quantised;
- ``INT4_W4A8`` (3): w1 / w2 / zeros / scales as the 3-D ``convert_weight_packed_scale_zp``
  returns them (``is_vnni`` True), activations and gated activations quantised per row.

MXFP4 (4) experts and the clamped SwiGLU of gpt-oss (``alpha`` / ``limit``) raise
NotImplementedError. A wrong dtype
raises TypeError, any other bad argument ValueError, naming the op, the argument, its value
and what was expected.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: SGLang's ``CPUQuantMethod`` values this module runs.
UNQUANT = 0
INT8_W8A8 = 1
FP8_W8A16 = 2
INT4_W4A8 = 3
#: The ``moe_comp_method`` values ``fused_experts_cpu`` runs (sglang-rvv registers its FP8 /
#: INT4 MoE hooks by this).
METHODS = (UNQUANT, INT8_W8A8, FP8_W8A16, INT4_W4A8)


def fused_experts(
    hidden_states: Tensor,
    w13: Tensor,
    w2: Tensor,
    topk_weights: Tensor,
    topk_ids: Tensor,
    *,
    w13_scale: Tensor | None = None,
    w2_scale: Tensor | None = None,
    w13_bias: Tensor | None = None,
    w2_bias: Tensor | None = None,
    activation: str = "silu",
    is_packed: bool = True,
    inplace: bool = False,
) -> Tensor:
    """A mixture-of-experts feed-forward layer.

    Calls ``torch.ops.sgl_kernel.fused_experts_cpu``. ``hidden_states [T, H]`` is fp32,
    bf16 or fp16. ``w13 [E, 2I, H]`` holds each expert's gate rows then up rows, ``w2
    [E, H, I]`` its down projection: float weights, or int8 with ``w13_scale [E, 2I]`` and
    ``w2_scale [E, H]`` (fp32, one per output channel: W8A8, activations quantised per row);
    both packed by :func:`rvv_ops.convert_weight_packed` (``is_packed=True``) or plain.
    ``topk_ids [T, topk]`` (int32 or int64, each in ``[0, E)``) and ``topk_weights [T,
    topk]`` are the routing. Returns ``out [T, H]`` in ``hidden_states``' dtype::

        out[t] = sum_j topk_weights[t, j] * (act(x W13_g^T + b13_g) * (x W13_u^T + b13_u))
                 W2^T + b2,   expert e = topk_ids[t, j], x = hidden_states[t]

    with ``act`` SiLU (``"silu"``) or erf-GELU (``"gelu"``). ``inplace`` also writes the
    result into ``hidden_states``.
    """
    method = INT8_W8A8 if w13.dtype == torch.int8 else UNQUANT
    out: Tensor = torch.ops.sgl_kernel.fused_experts_cpu.default(
        hidden_states,
        w13,
        w2,
        topk_weights,
        topk_ids,
        inplace,
        method,
        w13_scale,
        w2_scale,
        None,
        None,
        None,
        w13_bias,
        w2_bias,
        None,
        None,
        is_packed,
        activation,
    )
    return out


def shared_expert(
    hidden_states: Tensor,
    w13: Tensor,
    w2: Tensor,
    fused_experts_out: Tensor | None = None,
    routed_scaling_factor: float = 1.0,
    *,
    w13_scale: Tensor | None = None,
    w2_scale: Tensor | None = None,
    is_packed: bool = True,
    inplace: bool = False,
) -> Tensor:
    """A shared expert (SiLU-gated MLP) added to the routed experts' output.

    Calls ``torch.ops.sgl_kernel.shared_expert_cpu``. ``w13 [2I, H]`` and ``w2 [H, I]`` as
    in :func:`fused_experts` for one expert (int8 with ``w13_scale [2I]``, ``w2_scale
    [H]``). Returns ``mlp(hidden_states) + fused_experts_out * routed_scaling_factor``
    (``fused_experts_out [T, H]`` in ``hidden_states``' dtype, optional).
    """
    int8 = w13.dtype == torch.int8
    out: Tensor = torch.ops.sgl_kernel.shared_expert_cpu.default(
        hidden_states,
        w13,
        w2,
        fused_experts_out,
        routed_scaling_factor,
        inplace,
        int8,
        False,
        w13_scale,
        w2_scale,
        None,
        is_packed,
    )
    return out
