"""Typed wrappers over the model-layer ops (norms, gated activations, rotary embedding),
and their fake kernels.

The ops keep the names and arguments SGLang 0.5.23's CPU code calls
(``srt/layers/layernorm.py``, ``activation.py``, ``rotary_embedding/base.py``):

- ``gemma_rmsnorm_cpu(input, weight, eps) -> Tensor`` and
  ``gemma_fused_add_rmsnorm_cpu(input, residual, weight, eps) -> ()``: RMSNorm scaled by
  ``1 + weight`` (Gemma's convention), the fused one in place like ``fused_add_rmsnorm_cpu``.
- ``layernorm_cpu(input, weight, bias, eps) -> Tensor`` (``bias`` may be None).
- ``silu_and_mul_cpu(input)``, ``gelu_and_mul_cpu(input)``, ``gelu_tanh_and_mul_cpu(input)``
  ``-> Tensor``: ``input [..., 2d]`` -> ``act(input[..., :d]) * input[..., d:]``, ``[..., d]``.
- ``rotary_embedding_cpu(positions, query, key, head_size, cos_sin_cache, is_neox)
  -> (Tensor, Tensor)``: rotated copies of ``query`` and ``key``.

Every op takes fp32, bf16 or fp16 activations, computes in fp32 and returns new contiguous
tensors (except the in-place fused norm). A wrong dtype raises TypeError, any other bad
argument ValueError, naming the op, the argument, its value and what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from rvv_ops.ops import _check, _check_fused

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_FP32_MAX = torch.finfo(torch.float32).max


def gemma_rmsnorm(input: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """Gemma's RMSNorm: ``input / sqrt(mean(input**2, -1) + eps) * (1 + weight)``.

    Calls ``torch.ops.sgl_kernel.gemma_rmsnorm_cpu``. Arguments as for
    :func:`rvv_ops.rmsnorm`: ``input`` fp32, bf16 or fp16 with a contiguous last
    dimension; ``weight`` 1-D, contiguous, same dtype, ``input.shape[-1]`` elements; ``eps``
    finite and >= 0. ``1 + weight`` is formed in fp32. Returns a new contiguous tensor.
    """
    out: Tensor = torch.ops.sgl_kernel.gemma_rmsnorm_cpu.default(input, weight, eps)
    return out


def gemma_fused_add_rmsnorm(
    input: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6
) -> None:
    """Residual add then Gemma's RMSNorm, both in place.

    ``residual = dtype(input + residual)``, then ``input = gemma_rmsnorm(residual, weight,
    eps)``. Calls ``torch.ops.sgl_kernel.gemma_fused_add_rmsnorm_cpu``; the same layout
    rules as :func:`rvv_ops.fused_add_rmsnorm` (walkable rows, no shared memory).
    """
    torch.ops.sgl_kernel.gemma_fused_add_rmsnorm_cpu.default(input, residual, weight, eps)


def layernorm(
    input: Tensor, weight: Tensor, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """LayerNorm over the last dimension: ``(input - mean) / sqrt(var + eps) * weight + bias``.

    Calls ``torch.ops.sgl_kernel.layernorm_cpu``. ``var`` is the biased variance, both
    statistics in fp32 (two passes). ``weight`` and ``bias`` (optional) are 1-D, contiguous,
    ``input.shape[-1]`` elements, in ``input``'s dtype or fp32 (SGLang's ``LayerNorm``
    keeps fp32 parameters by default), both the same dtype. Returns a new contiguous tensor.
    """
    out: Tensor = torch.ops.sgl_kernel.layernorm_cpu.default(input, weight, bias, eps)
    return out


def silu_and_mul(input: Tensor) -> Tensor:
    """SwiGLU: ``silu(input[..., :d]) * input[..., d:]`` for ``input [..., 2d]``: ``[..., d]``.

    Calls ``torch.ops.sgl_kernel.silu_and_mul_cpu``. ``input`` is fp32, bf16 or fp16 with
    a contiguous, even last dimension. Computes in fp32.
    """
    out: Tensor = torch.ops.sgl_kernel.silu_and_mul_cpu.default(input)
    return out


def gelu_and_mul(input: Tensor) -> Tensor:
    """GeGLU with the exact (erf) GELU: ``gelu(input[..., :d]) * input[..., d:]``.

    Calls ``torch.ops.sgl_kernel.gelu_and_mul_cpu``; ``gelu(x) = x / 2 * (1 + erf(x /
    sqrt(2)))`` as in ``F.gelu(x, approximate="none")``. Arguments as for
    :func:`silu_and_mul`.
    """
    out: Tensor = torch.ops.sgl_kernel.gelu_and_mul_cpu.default(input)
    return out


def gelu_tanh_and_mul(input: Tensor) -> Tensor:
    """GeGLU with the tanh GELU: ``gelu_tanh(input[..., :d]) * input[..., d:]``.

    Calls ``torch.ops.sgl_kernel.gelu_tanh_and_mul_cpu``; ``gelu_tanh`` is
    ``F.gelu(x, approximate="tanh")``. Arguments as for :func:`silu_and_mul`.
    """
    out: Tensor = torch.ops.sgl_kernel.gelu_tanh_and_mul_cpu.default(input)
    return out


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
    dtype: fp32, bf16 or fp16, contiguous last dimension). In each head the first
    ``rotary_dim`` elements are rotated - neox pairs ``j`` with ``j + rotary_dim / 2``,
    GPT-J (``is_neox=False``) ``2j`` with ``2j + 1`` - and the rest are copied. A position
    outside ``[0, max_position)`` raises ValueError. The outputs are new contiguous tensors
    of the inputs' shapes; ``query`` and ``key`` are not modified.
    """
    q, k = torch.ops.sgl_kernel.rotary_embedding_cpu.default(
        positions, query, key, head_size, cos_sin_cache, is_neox
    )
    return q, k


# Fake kernels: shapes and dtypes for FakeTensor / torch.compile tracing and meta tensors.
# They repeat the C++ checks that depend on neither memory layout nor values, with the same
# exception types.


def _device(op: str, arg: str, t: Tensor, ref: Tensor, ref_arg: str) -> None:
    if t.device != ref.device:
        raise ValueError(
            f"{op}: {arg} is on device {t.device}; expected {ref_arg}'s device {ref.device}"
        )


def _activation_dtype(op: str, arg: str, t: Tensor) -> None:
    if t.dtype not in _DTYPES:
        raise TypeError(
            f"{op}: {arg} has dtype {t.dtype}; "
            "expected torch.float32, torch.bfloat16 or torch.float16"
        )


def _gemma_rmsnorm_fake(input: Tensor, weight: Tensor, eps: float) -> Tensor:
    _check("gemma_rmsnorm_cpu", input, weight, eps)
    return input.new_empty(input.shape)


def _gemma_fused_add_rmsnorm_fake(
    input: Tensor, residual: Tensor, weight: Tensor, eps: float
) -> None:
    _check_fused("gemma_fused_add_rmsnorm_cpu", input, residual, weight, eps)


def _layernorm_fake(input: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> Tensor:
    op = "layernorm_cpu"
    _device(op, "weight", weight, input, "input")
    if bias is not None:
        _device(op, "bias", bias, input, "input")
    _activation_dtype(op, "input", input)
    if weight.dtype not in (input.dtype, torch.float32):
        raise TypeError(
            f"{op}: weight has dtype {weight.dtype}; "
            f"expected input's dtype {input.dtype} or torch.float32"
        )
    if bias is not None and bias.dtype != weight.dtype:
        raise TypeError(
            f"{op}: bias has dtype {bias.dtype}; expected weight's dtype {weight.dtype}"
        )
    if input.dim() < 1:
        raise ValueError(f"{op}: input is a 0-d tensor; expected at least 1 dimension")
    if weight.dim() != 1:
        raise ValueError(f"{op}: weight is {weight.dim()}-d; expected a 1-D tensor")
    if weight.shape[0] != input.shape[-1]:
        raise ValueError(
            f"{op}: weight has {weight.shape[0]} elements; "
            f"expected input.size(-1) = {input.shape[-1]}"
        )
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != input.shape[-1]):
        raise ValueError(
            f"{op}: bias has the wrong shape {list(bias.shape)}; "
            f"expected [{input.shape[-1]}] (input.size(-1)) or None"
        )
    if not (math.isfinite(eps) and 0 <= eps <= _FP32_MAX):
        raise ValueError(f"{op}: eps is {eps}; expected a finite number >= 0 (as fp32)")
    return input.new_empty(input.shape)


def _act_fake(op: str, input: Tensor) -> Tensor:
    _activation_dtype(op, "input", input)
    if input.dim() < 1:
        raise ValueError(
            f"{op}: input is a 0-d tensor; expected at least 1 dimension "
            "(the gate and up halves last)"
        )
    if input.shape[-1] % 2 != 0:
        raise ValueError(
            f"{op}: input has an odd last dimension {input.shape[-1]}; "
            "expected an even size: the gate half, then the up half"
        )
    return input.new_empty((*input.shape[:-1], input.shape[-1] // 2))


def _silu_and_mul_fake(input: Tensor) -> Tensor:
    return _act_fake("silu_and_mul_cpu", input)


def _gelu_and_mul_fake(input: Tensor) -> Tensor:
    return _act_fake("gelu_and_mul_cpu", input)


def _gelu_tanh_and_mul_fake(input: Tensor) -> Tensor:
    return _act_fake("gelu_tanh_and_mul_cpu", input)


def _rotary_heads(op: str, arg: str, t: Tensor, tokens: int, head_size: int) -> None:
    if t.dim() not in (2, 3):
        raise ValueError(
            f"{op}: {arg} is {t.dim()}-d; "
            "expected [tokens, heads * head_size] or [tokens, heads, head_size]"
        )
    if t.shape[0] != tokens:
        raise ValueError(
            f"{op}: {arg} has {t.shape[0]} tokens; expected positions.numel() = {tokens}"
        )
    if t.dim() == 2 and t.shape[1] % head_size != 0:
        raise ValueError(
            f"{op}: {arg} has a last dimension of {t.shape[1]}, "
            f"not a multiple of head_size = {head_size}"
        )
    if t.dim() == 3 and t.shape[2] != head_size:
        raise ValueError(
            f"{op}: {arg} has heads of size {t.shape[2]}; expected head_size = {head_size}"
        )


def _rotary_embedding_fake(
    positions: Tensor,
    query: Tensor,
    key: Tensor,
    head_size: int,
    cos_sin_cache: Tensor,
    is_neox: bool,
) -> tuple[Tensor, Tensor]:
    op = "rotary_embedding_cpu"
    for arg, t in (("positions", positions), ("key", key), ("cos_sin_cache", cos_sin_cache)):
        _device(op, arg, t, query, "query")
    if positions.dtype not in (torch.int64, torch.int32):
        raise TypeError(
            f"{op}: positions has dtype {positions.dtype}; expected torch.int64 or torch.int32"
        )
    _activation_dtype(op, "query", query)
    if key.dtype != query.dtype:
        raise TypeError(f"{op}: key has dtype {key.dtype}; expected query's dtype {query.dtype}")
    if cos_sin_cache.dtype not in (query.dtype, torch.float32):
        raise TypeError(
            f"{op}: cos_sin_cache has dtype {cos_sin_cache.dtype}; "
            f"expected query's dtype {query.dtype} or torch.float32"
        )
    if positions.dim() != 1:
        raise ValueError(
            f"{op}: positions is {positions.dim()}-d; expected a 1-D tensor of token positions"
        )
    if head_size <= 0:
        raise ValueError(f"{op}: head_size is {head_size}; expected > 0")
    if cos_sin_cache.dim() != 2:
        raise ValueError(
            f"{op}: cos_sin_cache is {cos_sin_cache.dim()}-d; expected [max_position, rotary_dim]"
        )
    rotary_dim = cos_sin_cache.shape[1]
    if not (rotary_dim > 0 and rotary_dim % 2 == 0 and rotary_dim <= head_size):
        raise ValueError(
            f"{op}: cos_sin_cache has rotary_dim {rotary_dim}; expected an even number in "
            f"[2, head_size = {head_size}] (cos half, then sin half)"
        )
    tokens = positions.shape[0]
    _rotary_heads(op, "query", query, tokens, head_size)
    _rotary_heads(op, "key", key, tokens, head_size)
    return query.new_empty(query.shape), key.new_empty(key.shape)


_fakes_registered = False


def register_layer_fakes() -> None:
    """Registers the fake kernels (once per process; torch 2.6 refuses a second time)."""
    global _fakes_registered
    if _fakes_registered:
        return
    fakes: dict[str, Callable[..., Any]] = {
        "gemma_rmsnorm_cpu": _gemma_rmsnorm_fake,
        "gemma_fused_add_rmsnorm_cpu": _gemma_fused_add_rmsnorm_fake,
        "layernorm_cpu": _layernorm_fake,
        "silu_and_mul_cpu": _silu_and_mul_fake,
        "gelu_and_mul_cpu": _gelu_and_mul_fake,
        "gelu_tanh_and_mul_cpu": _gelu_tanh_and_mul_fake,
        "rotary_embedding_cpu": _rotary_embedding_fake,
    }
    for name, fake in fakes.items():
        torch.library.register_fake(f"sgl_kernel::{name}", fake)
    _fakes_registered = True
