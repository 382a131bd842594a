"""Typed wrappers over the ``torch.ops.sgl_kernel`` ops, and their fake kernels."""

from __future__ import annotations

import math

import torch
from torch import Tensor

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_FP32_MAX = torch.finfo(torch.float32).max  # the kernels take eps as fp32


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

    ``residual = dtype(input + residual)``, then ``input = rmsnorm(residual, weight, eps)``.
    Calls ``torch.ops.sgl_kernel.fused_add_rmsnorm_cpu`` (SGLang's CPU op). Arguments as
    for :func:`rmsnorm`; ``residual`` has ``input``'s shape and dtype. Since both are
    written where they are, each must be walkable as rows with one stride (e.g. a
    contiguous tensor or a column slice of one), with rows that do not overlap, and the
    two (and ``weight``) must not share memory.

    Raises TypeError for a wrong dtype and ValueError for any other bad argument.
    """
    torch.ops.sgl_kernel.fused_add_rmsnorm_cpu.default(input, residual, weight, eps)


# Fake kernels: shapes and dtypes for FakeTensor / torch.compile tracing and for meta
# tensors. They repeat the C++ checks that do not depend on memory layout, with the same
# exception types, so a bad call fails while tracing rather than when the graph runs.


def _check(op: str, input: Tensor, weight: Tensor, eps: float) -> None:
    if weight.device != input.device:
        raise ValueError(
            f"{op}: weight is on device {weight.device}; expected input's device {input.device}"
        )
    if input.dtype not in _DTYPES:
        raise TypeError(
            f"{op}: input has dtype {input.dtype}; "
            "expected torch.float32, torch.bfloat16 or torch.float16"
        )
    if weight.dtype != input.dtype:
        raise TypeError(
            f"{op}: weight has dtype {weight.dtype}; expected input's dtype {input.dtype}"
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
    if not (math.isfinite(eps) and 0 <= eps <= _FP32_MAX):
        raise ValueError(f"{op}: eps is {eps}; expected a finite number >= 0 (as fp32)")


def _rmsnorm_fake(input: Tensor, weight: Tensor, eps: float) -> Tensor:
    _check("rmsnorm_cpu", input, weight, eps)
    return input.new_empty(input.shape)


def _fused_add_rmsnorm_fake(input: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    _check_fused("fused_add_rmsnorm_cpu", input, residual, weight, eps)


def _check_fused(op: str, input: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    if residual.device != input.device:
        raise ValueError(
            f"{op}: residual is on device {residual.device}; expected input's device {input.device}"
        )
    if residual.dtype != input.dtype:
        raise TypeError(
            f"{op}: residual has dtype {residual.dtype}; expected input's dtype {input.dtype}"
        )
    if residual.shape != input.shape:
        raise ValueError(
            f"{op}: residual has shape {list(residual.shape)}; "
            f"expected input's shape {list(input.shape)}"
        )
    _check(op, input, weight, eps)


_fakes_registered = False


def register_fakes() -> None:
    """Registers the fake kernels (once per process; torch 2.6 refuses a second time)."""
    global _fakes_registered
    if _fakes_registered:
        return
    torch.library.register_fake("sgl_kernel::rmsnorm_cpu", _rmsnorm_fake)
    torch.library.register_fake("sgl_kernel::fused_add_rmsnorm_cpu", _fused_add_rmsnorm_fake)
    _fakes_registered = True
