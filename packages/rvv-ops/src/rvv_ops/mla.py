"""Typed wrappers over the multi-head latent attention ops (csrc/mla.cpp), as SGLang 0.5.23's
CPU MLA path calls them (``srt/models/deepseek_common/attention_forward_methods/
forward_mla_fused_rope_cpu.py``):

- ``bmm_cpu(out, mat1, mat2, is_vnni, scale) -> ()``: ``out[b] = mat1[b] @ mat2[b]^T``.
- ``qkv_proj_with_rope(...) -> (q_input, k_input, v_input)``: the query and key inputs of
  MLA attention, k-up projection absorbed (separate ``q_a_proj`` and ``kv_a_proj``).
- ``qkv_proj_with_rope_fused_weight(...)``: the same with ``q_a_proj`` and ``kv_a_proj`` as
  one weight (SGLang's ``fused_qkv_a_proj_with_mqa``).

Weights are packed by ``convert_weight_packed`` (``is_vnni=True``, as SGLang passes) or
plain (``False``: packed for the call). A wrong dtype raises TypeError, any other bad
argument ValueError, naming the op, the argument, its value and what was expected.
"""

from __future__ import annotations

import torch
from torch import Tensor


def bmm(
    out: Tensor,
    mat1: Tensor,
    mat2: Tensor,
    is_vnni: bool = True,
    scale: Tensor | None = None,
) -> None:
    """Batched matrix product into ``out``: ``out[b] = mat1[b] @ mat2[b]^T``.

    Calls ``torch.ops.sgl_kernel.bmm_cpu``. ``mat1 [B, M, K]`` (fp32, bf16 or fp16) and
    ``out [B, M, N]`` (``mat1``'s dtype) may be strided views with a contiguous last
    dimension (an ``out`` sharing memory with ``mat1`` or ``mat2`` is computed into a new
    tensor, then copied). ``mat2`` is the 3-D result of
    ``convert_weight_packed`` on a ``[B, N, K]`` weight (``is_vnni=True``) or that weight
    itself (``is_vnni=False``), fp32, bf16 or fp16; with ``scale`` (a one-element fp32
    tensor) it is ``torch.float8_e4m3fn`` and the products are multiplied by ``scale``
    (per-tensor FP8 W8A16). fp32 accumulation, one rounding to ``out``'s dtype.
    """
    torch.ops.sgl_kernel.bmm_cpu.default(out, mat1, mat2, is_vnni, scale)


def qkv_proj_with_rope(
    hidden_states: Tensor,
    q_a_proj_weight: Tensor,
    q_b_proj_weight: Tensor,
    kv_a_proj_weight: Tensor,
    w_kc: Tensor,
    q_a_layernorm_weight: Tensor,
    kv_a_layernorm_weight: Tensor,
    positions: Tensor,
    cos_sin_cache: Tensor,
    eps: float,
    use_int8_w8a8: bool = False,
    q_a_proj_scale: Tensor | None = None,
    q_b_proj_scale: Tensor | None = None,
    kv_a_proj_scale: Tensor | None = None,
    is_vnni: bool = True,
    use_fp8_w8a16: bool = False,
    w_scale: Tensor | None = None,
    block_size: list[int] | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """MLA's query and key inputs for ``hidden_states [T, hidden]`` (fp32, bf16 or fp16).

    Calls ``torch.ops.sgl_kernel.qkv_proj_with_rope``. With
    ``qa = rmsnorm(hidden @ q_a_proj^T)``, ``kv = hidden @ kv_a_proj^T`` (``[T, kv_lora +
    rope]``) and ``qb = (qa @ q_b_proj^T)`` as ``[T, H, nope + rope]``, returns

    - ``q_input [T, H, kv_lora + rope]``: ``qb[:, h, :nope] @ w_kc[h]^T`` then
      ``rope(qb[:, h, nope:])``;
    - ``k_input [T, 1, kv_lora + rope]``: ``rmsnorm(kv[:, :kv_lora])`` then
      ``rope(kv[:, kv_lora:])``;
    - ``v_input``: ``k_input[..., :kv_lora]`` (a view).

    ``w_kc`` is ``[H, kv_lora, nope]`` (packed 3-D by ``convert_weight_packed`` when
    ``is_vnni``); RoPE pairs elements ``2j, 2j + 1`` with ``cos_sin_cache [max_position,
    rope]`` (cos half, then sin half; fp32 or the activations' dtype) at ``positions [T]``.
    Every intermediate is rounded to the activations' dtype, as in sgl-kernel.
    ``use_int8_w8a8``: the three projection weights are int8 with fp32 per-channel scales
    and their inputs are quantised per row (``w_kc`` stays float). ``use_fp8_w8a16``: they
    are ``torch.float8_e4m3fn`` with fp32 block scales ``[ceil(N / block_n), ceil(K /
    block_k)]`` (``block_size = [block_n, block_k]``), activations unquantised. ``w_kc``
    may be ``torch.float8_e4m3fn`` with its per-tensor fp32 ``w_scale`` (SGLang's FP8
    checkpoints).
    """
    q, k, v = torch.ops.sgl_kernel.qkv_proj_with_rope.default(
        hidden_states,
        q_a_proj_weight,
        q_b_proj_weight,
        kv_a_proj_weight,
        w_kc,
        q_a_layernorm_weight,
        kv_a_layernorm_weight,
        positions,
        cos_sin_cache,
        eps,
        use_int8_w8a8,
        use_fp8_w8a16,
        q_a_proj_scale,
        q_b_proj_scale,
        kv_a_proj_scale,
        w_scale,
        is_vnni,
        block_size,
    )
    return q, k, v


def qkv_proj_with_rope_fused_weight(
    hidden_states: Tensor,
    qkv_a_proj_weight: Tensor,
    q_b_proj_weight: Tensor,
    w_kc: Tensor,
    q_a_layernorm_weight: Tensor,
    kv_a_layernorm_weight: Tensor,
    positions: Tensor,
    cos_sin_cache: Tensor,
    eps: float,
    q_lora_rank: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    use_int8_w8a8: bool = False,
    qkv_a_proj_scale: Tensor | None = None,
    q_b_proj_scale: Tensor | None = None,
    is_vnni: bool = True,
    use_fp8_w8a16: bool = False,
    w_scale: Tensor | None = None,
    block_size: list[int] | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`qkv_proj_with_rope` with ``q_a_proj`` and ``kv_a_proj`` stacked into one
    weight ``[q_lora_rank + kv_lora_rank + qk_rope_head_dim, hidden]`` (and their scales:
    for ``use_int8_w8a8`` one vector, for ``use_fp8_w8a16`` the two parts' block scales
    stacked, ``[ceil(q_lora_rank / block_n) + ceil((kv_lora_rank + qk_rope_head_dim) /
    block_n), ceil(hidden / block_k)]``).

    Calls ``torch.ops.sgl_kernel.qkv_proj_with_rope_fused_weight``.
    """
    q, k, v = torch.ops.sgl_kernel.qkv_proj_with_rope_fused_weight.default(
        hidden_states,
        qkv_a_proj_weight,
        q_b_proj_weight,
        w_kc,
        q_a_layernorm_weight,
        kv_a_layernorm_weight,
        positions,
        cos_sin_cache,
        eps,
        use_int8_w8a8,
        use_fp8_w8a16,
        qkv_a_proj_scale,
        q_b_proj_scale,
        w_scale,
        is_vnni,
        block_size,
        q_lora_rank,
        kv_lora_rank,
        qk_rope_head_dim,
    )
    return q, k, v
