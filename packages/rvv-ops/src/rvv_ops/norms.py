"""Typed wrappers over sgl-kernel's RMSNorm variants (csrc/norms.cpp), with the names and
arguments SGLang 0.5.23's CPU code calls: ``gemma3_rmsnorm_cpu`` (``Gemma3RMSNorm``),
``gemma4_rmsnorm_cpu`` (``Gemma4RMSNorm``), ``l2norm_cpu`` (MuseSpark's weightless norm),
``fused_rmsnorm_gated_cpu`` (the gated norms of the linear-attention layers),
``fused_qk_rmsnorm_cpu`` (MiniMax-M2's QK norm), ``fused_qk_gemma_rmsnorm_cpu``
(Qwen3.5's per-head QK norm), ``fused_add_layernorm_cpu``,
``fused_dual_residual_rmsnorm_cpu`` (Grok) and ``fused_qk_norm_rope_cpu`` (Qwen3-MoE, in
place).

All compute in fp32 and return new contiguous tensors in the input's dtype (except the
in-place ``fused_qk_norm_rope_cpu``); weights have
the input's dtype (LayerNorm's may also be fp32). A wrong dtype raises TypeError, any other
bad argument ValueError, naming the op, the argument, its value and what was expected.
"""

from __future__ import annotations

import torch
from torch import Tensor


def gemma3_rmsnorm(input: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """Gemma 3's RMSNorm: ``input / sqrt(mean(input**2, -1) + eps) * (1 + weight)``.

    Calls ``torch.ops.sgl_kernel.gemma3_rmsnorm_cpu``. ``input``: fp32, bf16 or fp16, at
    least 1-D (sgl-kernel: 2-D or 4-D), last dimension contiguous; ``weight``: 1-D,
    contiguous, ``input``'s dtype, ``input.shape[-1]`` elements; ``eps`` finite and >= 0.
    """
    out: Tensor = torch.ops.sgl_kernel.gemma3_rmsnorm_cpu.default(input, weight, eps)
    return out


def gemma4_rmsnorm(
    input: Tensor,
    weight: Tensor,
    eps: float = 1e-6,
    scale_shift: float = 0.0,
    with_scale: bool = True,
) -> Tensor:
    """Gemma 4's RMSNorm: ``rms(input) * (weight + scale_shift)`` with ``with_scale``, else
    ``rms(input)`` alone, where ``rms(x) = x / sqrt(mean(x**2, -1) + eps)``.

    Calls ``torch.ops.sgl_kernel.gemma4_rmsnorm_cpu``. Arguments as for
    :func:`gemma3_rmsnorm`; ``weight`` is checked even when unused; ``scale_shift`` is
    finite; ``weight + scale_shift`` is formed in fp32.
    """
    out: Tensor = torch.ops.sgl_kernel.gemma4_rmsnorm_cpu.default(
        input, weight, eps, scale_shift, with_scale
    )
    return out


def l2norm(input: Tensor, eps: float = 1e-6) -> Tensor:
    """sgl-kernel's ``l2norm_cpu``: ``input / sqrt(mean(input**2, -1) + eps)``, the RMS norm
    with no weight (``F.rms_norm(x, (n,), None, eps)``; the mean, not the sum, of squares).

    ``input``: fp32, bf16 or fp16, at least 1-D (sgl-kernel: 2-D), last dimension
    contiguous; ``eps`` finite and >= 0.
    """
    out: Tensor = torch.ops.sgl_kernel.l2norm_cpu.default(input, eps)
    return out


def fused_rmsnorm_gated(input: Tensor, weight: Tensor, gate: Tensor, eps: float = 1e-6) -> Tensor:
    """Gated RMSNorm, norm before gate: ``rms(input) * weight * silu(gate)`` with
    ``silu(g) = g / (1 + exp(-g))``.

    Calls ``torch.ops.sgl_kernel.fused_rmsnorm_gated_cpu``. ``input`` as for
    :func:`gemma3_rmsnorm` (sgl-kernel: 2-D); ``gate`` has ``input``'s shape and dtype and a
    contiguous last dimension; ``weight`` 1-D, ``input.shape[-1]`` elements.
    """
    out: Tensor = torch.ops.sgl_kernel.fused_rmsnorm_gated_cpu.default(input, weight, gate, eps)
    return out


def fused_qk_rmsnorm(
    q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, eps: float = 1e-6
) -> tuple[Tensor, Tensor]:
    """``(rmsnorm(q, q_weight), rmsnorm(k, k_weight))``, each over its whole last dimension
    (all heads together, as MiniMax-M2's QK norm; for a per-head norm see
    :func:`fused_qk_gemma_rmsnorm`).

    Calls ``torch.ops.sgl_kernel.fused_qk_rmsnorm_cpu``. ``q`` ``[tokens, q_width]`` and
    ``k`` ``[tokens, k_width]`` (sgl-kernel: 2-D; here any leading dimensions with the same
    number of rows), one dtype, last dimensions contiguous; ``q_weight`` ``[q_width]`` and
    ``k_weight`` ``[k_width]`` in that dtype.
    """
    q_out, k_out = torch.ops.sgl_kernel.fused_qk_rmsnorm_cpu.default(q, k, q_weight, k_weight, eps)
    return q_out, k_out


def fused_qk_gemma_rmsnorm(
    q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, eps: float, head_dim: int
) -> tuple[Tensor, Tensor]:
    """Gemma's RMSNorm (``* (1 + weight)``) of every ``head_dim``-wide head of ``q``
    ``[tokens, num_heads * head_dim]`` and ``k`` ``[tokens, num_kv_heads * head_dim]``.

    Calls ``torch.ops.sgl_kernel.fused_qk_gemma_rmsnorm_cpu``. ``q`` and ``k`` share one
    dtype and their number of rows; their last sizes are multiples of ``head_dim`` > 0;
    ``q_weight`` and ``k_weight`` have ``head_dim`` elements. Returns new contiguous
    tensors of ``q``'s and ``k``'s shapes.
    """
    q_out, k_out = torch.ops.sgl_kernel.fused_qk_gemma_rmsnorm_cpu.default(
        q, k, q_weight, k_weight, eps, head_dim
    )
    return q_out, k_out


def fused_qk_gemma_rmsnorm_with_gate(
    q_gate: Tensor,
    k: Tensor,
    q_weight: Tensor,
    k_weight: Tensor,
    eps: float,
    head_dim: int,
    num_head: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """Qwen3.5's gated-attention QK norm: ``q_gate [tokens, num_head * 2 * head_dim]`` holds
    each head's query then its gate. Returns ``(q [tokens * num_head, head_dim], k [tokens *
    kv_heads, head_dim], gate [tokens * num_head, head_dim])``: Gemma's RMSNorm (``* (1 +
    weight)``) of each query and key head, the gates copied.

    Calls ``torch.ops.sgl_kernel.fused_qk_gemma_rmsnorm_with_gate_cpu``.
    """
    q, k_out, gate = torch.ops.sgl_kernel.fused_qk_gemma_rmsnorm_with_gate_cpu.default(
        q_gate, k, q_weight, k_weight, eps, head_dim, num_head
    )
    return q, k_out, gate


def fused_add_layernorm(
    input: Tensor, residual: Tensor, weight: Tensor, bias: Tensor | None, eps: float = 1e-5
) -> Tensor:
    """Residual add then LayerNorm: with ``s = input + residual`` in fp32, ``residual =
    dtype(s)`` (in place) and returns ``dtype((s - mean) / sqrt(var + eps) * weight + bias)``,
    the statistics of the unrounded sum (as sgl-kernel's fp32 row buffer).

    Calls ``torch.ops.sgl_kernel.fused_add_layernorm_cpu``. ``input``: fp32, bf16 or fp16,
    last dimension contiguous; ``residual``: ``input``'s shape and dtype, walkable as rows
    with one stride, sharing no memory with the other arguments; ``weight`` and ``bias``
    (optional) 1-D, ``input.shape[-1]`` elements, in ``input``'s dtype or fp32 (both the
    same).
    """
    out: Tensor = torch.ops.sgl_kernel.fused_add_layernorm_cpu.default(
        input, residual, weight, bias, eps
    )
    return out


def fused_dual_residual_rmsnorm(
    x: Tensor, residual: Tensor, weight1: Tensor, weight2: Tensor, eps: float = 1e-6
) -> tuple[Tensor, Tensor]:
    """Grok's dual-residual RMSNorm: ``h = dtype(rms(x) * weight1)``; with ``s = residual +
    h`` in fp32, ``mid = dtype(s)`` and ``output = dtype(rms(s) * weight2)``; returns
    ``(output, mid)`` as new tensors (``residual`` is not written).

    Calls ``torch.ops.sgl_kernel.fused_dual_residual_rmsnorm_cpu``. ``x`` and ``residual``:
    one shape and dtype (fp32, bf16, fp16), ``x``'s last dimension contiguous; the weights
    1-D with ``x.shape[-1]`` elements in that dtype.
    """
    out, mid = torch.ops.sgl_kernel.fused_dual_residual_rmsnorm_cpu.default(
        x, residual, weight1, weight2, eps
    )
    return out, mid


def fused_qk_norm_rope(
    q: Tensor,
    k: Tensor,
    q_weight: Tensor,
    k_weight: Tensor,
    eps: float,
    is_neox: bool,
    positions: Tensor,
    cos_sin_cache: Tensor,
    rotary_dim: int,
) -> None:
    """Qwen3-style QK norm then RoPE, in place: every ``head_dim``-wide head of ``q``
    ``[tokens, num_heads * head_dim]`` and ``k`` ``[tokens, num_kv_heads * head_dim]``
    (``head_dim = q_weight.shape[0]``) becomes ``rms(head) * weight`` (``q_weight`` /
    ``k_weight``, fp32 arithmetic, rounded to the dtype), then its first ``rotary_dim``
    elements are rotated at ``positions[t]`` by ``cos_sin_cache`` ``[max_position,
    rotary_dim]`` (cos then sin; fp32 or ``q``'s dtype), neox or GPT-J pairs.

    Calls ``torch.ops.sgl_kernel.fused_qk_norm_rope_cpu`` with SGLang 0.5.23's arguments
    (``models/qwen3_moe.py``). ``q`` and ``k`` (e.g. column slices of one qkv tensor) are
    written where they are: each must be walkable as rows with one stride, and they must not
    share memory with each other or with the other arguments. ``positions`` int64 or int32,
    one per row; ``rotary_dim`` even, at most ``head_dim``.
    """
    torch.ops.sgl_kernel.fused_qk_norm_rope_cpu.default(
        q, k, q_weight, k_weight, eps, is_neox, positions, cos_sin_cache, rotary_dim
    )
