"""Typed wrapper over ``rotary_embedding_cpu`` (csrc/rotary.cpp), as SGLang 0.5.23's CPU
code calls it (``srt/layers/rotary_embedding/base.py``).

A wrong dtype raises TypeError, any other bad argument ValueError, naming the op, the
argument, its value and what was expected.
"""

from __future__ import annotations

import torch
from torch import Tensor


def rotary_embedding(
    positions: Tensor,
    query: Tensor,
    key: Tensor,
    head_size: int,
    cos_sin_cache: Tensor,
    is_neox: bool = True,
) -> tuple[Tensor, Tensor]:
    """Rotary position embedding of ``query`` and ``key``; returns rotated copies.

    Calls ``torch.ops.sgl_kernel.rotary_embedding_cpu``. ``positions`` (int64 or int32,
    ``[tokens]``) index rows of ``cos_sin_cache [max_position, rotary_dim]`` (cos half, then
    sin half; fp32 or the query's dtype). ``query`` and ``key`` are ``[tokens, heads *
    head_size]`` or ``[tokens, heads, head_size]`` (each its own head count, the same
    dtype: fp32, bf16 or fp16, contiguous last dimension), or both ``[batch, seq, heads,
    head_size]`` with ``tokens = batch * seq`` positions in (batch, seq) order, as
    sgl-kernel's CPU op takes them (the same result as the 3-D call on the flattened
    tensors). In each head the first
    ``rotary_dim`` elements are rotated - neox pairs ``j`` with ``j + rotary_dim / 2``,
    GPT-J (``is_neox=False``) ``2j`` with ``2j + 1`` - and the rest are copied. A position
    outside ``[0, max_position)`` raises ValueError. The outputs are new contiguous tensors
    of the inputs' shapes; ``query`` and ``key`` are not modified.
    """
    q, k = torch.ops.sgl_kernel.rotary_embedding_cpu.default(
        positions, query, key, head_size, cos_sin_cache, is_neox
    )
    return q, k


def apply_rotary_pos_emb(
    query: Tensor, key: Tensor, cos: Tensor, sin: Tensor
) -> tuple[Tensor, Tensor]:
    """SGLang's ``apply_rotary_pos_emb`` with per-token cos/sin rows; returns new tensors.

    Calls ``torch.ops.sgl_kernel.apply_rotary_pos_emb_cpu``: ``x * cos + rotate_half(x) *
    sin`` (neox layout over the whole head, ``rotate_half(x) = cat(-x2, x1)``) for ``query
    [tokens, heads, head_size]`` and ``key [tokens, kv_heads, head_size]`` (the same dtype:
    fp32, bf16 or fp16; even ``head_size``) with ``cos`` and ``sin [tokens, head_size]``
    (fp32, bf16 or fp16, the same dtype as each other). Computes in fp32 and rounds once,
    as SGLang's ``apply_rotary_pos_emb_native_eager``.
    """
    q, k = torch.ops.sgl_kernel.apply_rotary_pos_emb_cpu.default(query, key, cos, sin)
    return q, k


def multimodal_rotary_embedding(
    positions: Tensor,
    query: Tensor,
    key: Tensor,
    head_size: int,
    cos_sin_cache: Tensor,
    mrope_section: list[int] | None,
    mrope_interleaved: bool = False,
    is_neox: bool = True,
) -> tuple[Tensor, Tensor]:
    """M-RoPE (Qwen2-VL, Qwen3-VL, Qwen3.5) of ``query`` and ``key`` in place; returns them.

    Calls ``torch.ops.sgl_kernel.multimodal_rotary_embedding_cpu``. ``query [tokens, heads *
    head_size]`` and ``key [tokens, kv_heads * head_size]`` (the same dtype: fp32, bf16 or
    fp16; contiguous last dimension) are rotated in place by the rows of ``cos_sin_cache
    [max_position, rotary_dim]`` (cos half, then sin half; fp32 or the query's dtype).
    ``positions [tokens]``: the ordinary rotary embedding. ``positions [3, tokens]``
    (temporal, height, width): element ``j`` of the cos/sin halves comes from the row of
    ``positions[s, t]``, ``s`` the section of ``mrope_section [t, h, w]`` it falls in
    (consecutive sections summing to ``rotary_dim / 2``) or, with ``mrope_interleaved``,
    1 for ``j % 3 == 1, j < 3h``, 2 for ``j % 3 == 2, j < 3w``, else 0. ``is_neox``: pairs
    ``(j, j + rotary_dim / 2)``, else ``(2j, 2j + 1)``; elements past ``rotary_dim`` are kept.
    """
    torch.ops.sgl_kernel.multimodal_rotary_embedding_cpu.default(
        positions, query, key, head_size, cos_sin_cache, mrope_section, mrope_interleaved, is_neox
    )
    return query, key
