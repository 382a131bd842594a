"""Typed wrappers over the gated activations (csrc/activation.cpp): ``silu_and_mul_cpu``,
``gelu_and_mul_cpu`` and ``gelu_tanh_and_mul_cpu``, as SGLang 0.5.23's CPU code calls them
(``srt/layers/activation.py``): ``input [..., 2d]`` -> ``act(input[..., :d]) *
input[..., d:]``, ``[..., d]``, a new contiguous tensor computed in fp32.

A wrong dtype raises TypeError, any other bad argument ValueError, naming the op, the
argument, its value and what was expected.
"""

from __future__ import annotations

import torch
from torch import Tensor


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


def fused_sigmoid_mul(input: Tensor, gate: Tensor) -> Tensor:
    """Output gate, in place: ``input *= sigmoid(gate)``; returns ``input``.

    Calls ``torch.ops.sgl_kernel.fused_sigmoid_mul_cpu`` (Qwen3.5's attention output gate).
    ``input [T, D]`` (fp32, bf16 or fp16, contiguous last dimension, rows that do not share
    memory) is overwritten; ``gate`` has ``input``'s dtype and is ``[T, D]`` or
    ``[T, H, D / H]`` (any strides: e.g. a slice of a fused projection). Computes in fp32
    and rounds once.
    """
    torch.ops.sgl_kernel.fused_sigmoid_mul_cpu.default(input, gate)
    return input
