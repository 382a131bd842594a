"""Typed wrapper over ``fused_gdn_gating_cpu`` (csrc/gdn_gating.cpp), as SGLang 0.5.23's
CPU code calls it (``srt/layers/attention/linear/gdn_backend.py``: the gates of Gated
DeltaNet linear attention in Qwen3-Next and Qwen3.5).

A wrong dtype raises TypeError, any other bad argument ValueError, naming the op, the
argument, its value and what was expected.
"""

from __future__ import annotations

import torch
from torch import Tensor


def fused_gdn_gating(A_log: Tensor, a: Tensor, b: Tensor, dt_bias: Tensor) -> tuple[Tensor, Tensor]:
    """Gated DeltaNet gates: ``(g, beta)``.

    Calls ``torch.ops.sgl_kernel.fused_gdn_gating_cpu``. ``a`` and ``b`` are ``[tokens,
    num_heads]`` (the same dtype: fp32, bf16 or fp16); ``A_log`` and ``dt_bias`` are
    ``[num_heads]``, each fp32 or ``a``'s dtype. Returns ``g = -exp(A_log) *
    softplus(a + dt_bias)`` as fp32 ``[1, tokens, num_heads]`` and ``beta = sigmoid(b)``
    as ``[1, tokens, num_heads]`` in ``b``'s dtype (softplus with torch's threshold 20),
    computed in fp32.
    """
    g, beta = torch.ops.sgl_kernel.fused_gdn_gating_cpu.default(A_log, a, b, dt_bias)
    return g, beta
