"""Typed wrapper over ``layernorm_cpu`` (csrc/layernorm.cpp), as SGLang 0.5.23's CPU code
calls it (``srt/layers/layernorm.py``).

A wrong dtype raises TypeError, any other bad argument ValueError, naming the op, the
argument, its value and what was expected.
"""

from __future__ import annotations

import torch
from torch import Tensor


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
