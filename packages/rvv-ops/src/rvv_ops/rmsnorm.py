"""Typed wrappers over the RMSNorm ops (csrc/rmsnorm.cpp): ``rmsnorm_cpu``,
``fused_add_rmsnorm_cpu`` and Gemma's versions (``gemma_rmsnorm_cpu``,
``gemma_fused_add_rmsnorm_cpu``: RMSNorm scaled by ``1 + weight``), with the names and
arguments SGLang 0.5.23's CPU code calls (``srt/layers/layernorm.py``).

A wrong dtype raises TypeError, any other bad argument ValueError, naming the op, the
argument, its value and what was expected.
"""

from __future__ import annotations

import torch
from torch import Tensor


def rmsnorm(input: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """RMSNorm over the last dimension: ``input / sqrt(mean(input**2, -1) + eps) * weight``.

    Calls ``torch.ops.sgl_kernel.rmsnorm_cpu`` (SGLang's CPU op). ``input`` is a CPU
    tensor of at least one dimension, fp32, bf16 or fp16, whose last dimension is
    contiguous; ``weight`` is 1-D, contiguous, of the same dtype, with
    ``input.shape[-1]`` elements; ``eps`` is finite and >= 0. Accumulates in fp32 and
    returns a new contiguous tensor of ``input``'s shape and dtype.

    Raises TypeError for a wrong dtype and ValueError for any other bad argument.
    """
    out: Tensor = torch.ops.sgl_kernel.rmsnorm_cpu.default(input, weight, eps)
    return out


def fused_add_rmsnorm(input: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6) -> None:
    """Residual add then RMSNorm, both in place.

    With ``s = input + residual`` in fp32: ``residual = dtype(s)`` and ``input =
    dtype(rmsnorm(s, weight, eps))``, the norm of the unrounded sum (as sgl-kernel's CPU op;
    for bf16/fp16 it can differ by an ulp from normalising the rounded residual). Calls
    ``torch.ops.sgl_kernel.fused_add_rmsnorm_cpu`` (SGLang's CPU op). Arguments as
    for :func:`rmsnorm`; ``residual`` has ``input``'s shape and dtype. Since both are
    written where they are, each must be walkable as rows with one stride (e.g. a
    contiguous tensor or a column slice of one), with rows that do not overlap, and the
    two (and ``weight``) must not share memory.

    Raises TypeError for a wrong dtype and ValueError for any other bad argument.
    """
    torch.ops.sgl_kernel.fused_add_rmsnorm_cpu.default(input, residual, weight, eps)


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

    ``residual = dtype(input + residual)`` and ``input`` Gemma's RMSNorm of the fp32 sum
    (as :func:`rvv_ops.fused_add_rmsnorm`). Calls
    ``torch.ops.sgl_kernel.gemma_fused_add_rmsnorm_cpu``; the same layout rules as
    :func:`rvv_ops.fused_add_rmsnorm` (walkable rows, no shared memory).
    """
    torch.ops.sgl_kernel.gemma_fused_add_rmsnorm_cpu.default(input, residual, weight, eps)
