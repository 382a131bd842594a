"""Typed wrappers over the linear-layer ops (csrc/linear.cpp: GEMM, W8A8 int8, INT4, FP8).

The ops keep the names and arguments SGLang 0.5.23's CPU code calls
(``srt/layers/amx_utils.py``, ``quantization/unquant.py``, ``quantization/w8a8_int8.py``,
``logits_processor.py``):

- ``convert_weight_packed(weight) -> Tensor``: packs an ``[N, K]`` weight (fp32, bf16, fp16
  or int8) once, at load time, into panels whose width follows the running CPU's VLEN.
  The result has the weight's dtype and shape ``[N, X]``; its first bytes are a header
  (format version, dtype, N, K, panel width) the other ops check.
- ``weight_packed_linear(mat1, mat2, bias, is_vnni) -> Tensor``: ``mat1 @ W^T + bias``.
- ``fused_linear_sigmoid_mul(mat1, mat2, bias, is_vnni, post_mul_mat) -> Tensor``:
  ``sigmoid(mat1 @ W^T + bias) * post_mul_mat`` for a one-channel W (Qwen2-MoE's
  shared-expert gate).
- ``per_token_quant_int8_cpu(A) -> (Tensor, Tensor)``: symmetric per-row int8 and scales.
- ``int8_scaled_mm_cpu(mat1, mat2, scales1, scales2, bias, out_dtype, is_vnni) -> Tensor``
- ``int8_scaled_mm_with_quant(mat1, mat2, scales2, bias, out_dtype, is_vnni) -> Tensor``
- ``convert_weight_packed_scale_zp(qweight, qzeros, scales, quant_method)``: AWQ / GPTQ int4
  checkpoint tensors -> ``(packed, zeros, scales)`` for the INT4 ops.
- ``int4_scaled_mm_cpu(x, w, w_zeros, w_scales, bias) -> Tensor``: W4A8 (SGLang's).
- ``int4_w4a16_mm_cpu(x, w, w_zeros, w_scales, bias) -> Tensor``: rvv-ops' W4A16.
- ``fp8_scaled_mm_cpu(mat1, mat2, scales2, block_size, bias, out_dtype, is_vnni) -> Tensor``:
  FP8 e4m3 weights with block scales (W8A16).

``is_vnni=True`` (SGLang always passes it) means ``mat2`` came from
``convert_weight_packed``; ``False`` means a plain ``[N, K]`` weight, packed for the call.
A wrong dtype raises TypeError, any other bad argument ValueError, naming the op, the
argument, its value and what was expected.
"""

from __future__ import annotations

import torch
from torch import Tensor


def convert_weight_packed(weight: Tensor) -> Tensor:
    """Packs a linear layer's ``[N, K]`` weight for :func:`weight_packed_linear` (float
    weights) or :func:`int8_scaled_mm` / :func:`int8_scaled_mm_with_quant` (int8 weights).

    Calls ``torch.ops.sgl_kernel.convert_weight_packed``. ``weight`` is fp32, bf16, fp16 or
    int8, 2-D with ``N, K >= 1``. Returns a new tensor of the same dtype, shape ``[N, X]``
    (``X`` depends on K, the dtype and the VLEN of this CPU); treat it as opaque. A packed
    weight moved to a CPU with another VLEN still gives correct results.
    """
    out: Tensor = torch.ops.sgl_kernel.convert_weight_packed.default(weight)
    return out


def weight_packed_linear(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, is_packed: bool = True
) -> Tensor:
    """Linear layer: ``x @ weight^T + bias`` with fp32 accumulation, in ``x``'s dtype.

    Calls ``torch.ops.sgl_kernel.weight_packed_linear``. ``x [M, K]`` is fp32, bf16 or fp16
    (any M, contiguous last dimension); ``weight`` is the result of
    :func:`convert_weight_packed` (``is_packed=True``) or a plain ``[N, K]`` weight
    (``is_packed=False``: packed for this call), fp32, bf16 or fp16 - it may differ from
    ``x``'s dtype; ``bias`` ``[N]`` (optional) fp32, bf16 or fp16. Returns ``[M, N]``.
    """
    out: Tensor = torch.ops.sgl_kernel.weight_packed_linear.default(x, weight, bias, is_packed)
    return out


def fused_linear_sigmoid_mul(
    x: Tensor, weight: Tensor, bias: Tensor | None, post_mul_mat: Tensor, is_packed: bool = True
) -> Tensor:
    """Qwen2-MoE's shared-expert gate: ``sigmoid(x @ weight^T + bias) * post_mul_mat``.

    Calls ``torch.ops.sgl_kernel.fused_linear_sigmoid_mul``. ``weight`` has one output
    channel: ``[1, K]`` (``is_packed=False``) or its :func:`convert_weight_packed` form;
    ``x [M, K]`` and ``post_mul_mat [M, N]`` share a dtype (fp32, bf16 or fp16); ``bias``
    ``[1]`` (optional). The gate stays in fp32; returns ``[M, N]`` in ``x``'s dtype.
    """
    out: Tensor = torch.ops.sgl_kernel.fused_linear_sigmoid_mul.default(
        x, weight, bias, is_packed, post_mul_mat
    )
    return out


def per_token_quant_int8(x: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric per-row int8 quantisation, as SGLang's ``per_token_quant_int8``.

    Calls ``torch.ops.sgl_kernel.per_token_quant_int8_cpu``. For each row of ``x [M, K]``
    (fp32, bf16 or fp16): ``amax = max(max|x|, 1e-10)``, ``scale = amax / 127``,
    ``q = clamp(round_half_even(x * (127 / amax)), -127, 127)`` in fp32. Returns
    ``(q int8 [M, K], scale fp32 [M])``.
    """
    q, s = torch.ops.sgl_kernel.per_token_quant_int8_cpu.default(x)
    return q, s


def int8_scaled_mm(
    a: Tensor,
    weight: Tensor,
    scales_a: Tensor,
    scales_w: Tensor,
    bias: Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    is_packed: bool = True,
) -> Tensor:
    """W8A8 GEMM: ``(a @ weight^T) * scales_a[:, None] * scales_w[None, :] + bias``.

    Calls ``torch.ops.sgl_kernel.int8_scaled_mm_cpu``. ``a [M, K]`` int8 with fp32 row
    scales ``scales_a`` (``[M]`` or ``[M, 1]``); ``weight`` int8, packed by
    :func:`convert_weight_packed` or plain ``[N, K]`` (``is_packed=False``), with fp32
    channel scales ``scales_w`` (``[N]`` or ``[N, 1]``); ``bias`` ``[N]`` float (optional).
    The int8 products are summed exactly in int32, then scaled in fp32 and rounded to
    ``out_dtype`` (fp32, bf16 or fp16). Returns ``[M, N]``.
    """
    out: Tensor = torch.ops.sgl_kernel.int8_scaled_mm_cpu.default(
        a, weight, scales_a, scales_w, bias, out_dtype, is_packed
    )
    return out


def int8_scaled_mm_with_quant(
    x: Tensor,
    weight: Tensor,
    scales_w: Tensor,
    bias: Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    is_packed: bool = True,
) -> Tensor:
    """W8A8 linear layer on float activations: :func:`per_token_quant_int8` of ``x``, then
    :func:`int8_scaled_mm`. ``out_dtype`` defaults to ``x``'s dtype (what SGLang passes).

    Calls ``torch.ops.sgl_kernel.int8_scaled_mm_with_quant``.
    """
    out: Tensor = torch.ops.sgl_kernel.int8_scaled_mm_with_quant.default(
        x, weight, scales_w, bias, x.dtype if out_dtype is None else out_dtype, is_packed
    )
    return out


AWQ = 0
"""``quant_method`` of :func:`convert_int4_weight` for AWQ checkpoints (SGLang's
``CPUQuantAlgo.AWQ``)."""
GPTQ = 1
"""``quant_method`` for GPTQ checkpoints (``CPUQuantAlgo.GPTQ``)."""


def convert_int4_weight(
    qweight: Tensor, qzeros: Tensor, scales: Tensor, quant_method: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Packs an AWQ (``quant_method=AWQ``) or GPTQ (``GPTQ``) int4 linear weight once, at load
    time, for :func:`int4_scaled_mm` / :func:`int4_w4a16_mm`.

    Calls ``torch.ops.sgl_kernel.convert_weight_packed_scale_zp``. AWQ: ``qweight`` int32
    ``[K, N / 8]`` (eight nibbles per word in AWQ's order 0, 4, 1, 5, 2, 6, 3, 7), ``qzeros``
    int32 ``[G, N / 8]`` (same order); GPTQ: ``qweight`` int32 ``[K / 8, N]`` (nibble ``i``
    of a word is input channel ``8 r + i``), ``qzeros`` int32 ``[G, N / 8]`` holding zero
    point - 1 (GPTQ's stored form); ``scales`` ``[G, N]`` float. The weight is
    ``W[n, k] = (q[n, k] - zero[g, n]) * scale[g, n]`` with ``g = k // (K / G)``; the group
    size ``K / G`` must be even (or ``G = 1``). GPTQ's act-order ``g_idx`` is not an argument:
    checkpoints with a permuted ``g_idx`` must be refused by the caller. Returns ``(packed
    uint8 [N, X], zero points uint8 [1, G, N], scales fp32 [1, G, N])``. Expert-stacked MoE
    tensors (all three with the experts first, ``[E, ...]``) give ``(packed uint8 [E, N, X'],
    zero points uint8 [E, G, N], scales fp32 [E, G, N])``, one packed expert per slice, for
    ``fused_experts_cpu`` with ``moe_comp_method`` INT4_W4A8.
    """
    w, z, s = torch.ops.sgl_kernel.convert_weight_packed_scale_zp.default(
        qweight, qzeros, scales, quant_method
    )
    return w, z, s


def int4_scaled_mm(
    x: Tensor, w: Tensor, w_zeros: Tensor, w_scales: Tensor, bias: Tensor | None = None
) -> Tensor:
    """W4A8 linear layer, SGLang's ``int4_scaled_mm_cpu``: each row of ``x [..., K]`` (fp32,
    bf16 or fp16) quantised as :func:`per_token_quant_int8`, then per group ``g``
    ``float(sum_k a[k] * (q[n, k] - zero[g, n])) * a_scale * scale[g, n]`` (exact int32
    sums) accumulated in fp32 onto ``bias [N]`` (optional). ``w``, ``w_zeros``, ``w_scales``
    come from :func:`convert_int4_weight`. Returns ``[..., N]`` in ``x``'s dtype.
    """
    out: Tensor = torch.ops.sgl_kernel.int4_scaled_mm_cpu.default(x, w, w_zeros, w_scales, bias)
    return out


def int4_w4a16_mm(
    x: Tensor, w: Tensor, w_zeros: Tensor, w_scales: Tensor, bias: Tensor | None = None
) -> Tensor:
    """W4A16 linear layer: ``x @ W^T + bias`` with ``W`` the dequantised int4 weight, fp32
    arithmetic, ``x`` not quantised (calls ``torch.ops.sgl_kernel.int4_w4a16_mm_cpu``,
    rvv-ops' own op). Arguments as :func:`int4_scaled_mm`."""
    out: Tensor = torch.ops.sgl_kernel.int4_w4a16_mm_cpu.default(x, w, w_zeros, w_scales, bias)
    return out


def fp8_scaled_mm(
    x: Tensor,
    weight: Tensor,
    scales: Tensor,
    block_size: list[int],
    bias: Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    is_packed: bool = True,
) -> Tensor:
    """FP8 W8A16 linear layer, SGLang's ``fp8_scaled_mm_cpu``: ``x [M, K]`` (fp32, bf16 or
    fp16) times ``W^T`` with ``W[n, k] = fp8_e4m3(weight[n, k]) * scales[n // bn, k // bk]``
    (``block_size = [bn, bk]``, ``scales`` fp32 ``[ceil(N / bn), ceil(K / bk)]``), plus
    ``bias``; fp32 arithmetic, result in ``out_dtype`` (default ``x``'s). ``weight`` is
    ``torch.float8_e4m3fn``, packed by :func:`convert_weight_packed` or plain ``[N, K]``
    (``is_packed=False``)."""
    out: Tensor = torch.ops.sgl_kernel.fp8_scaled_mm_cpu.default(
        x,
        weight,
        scales,
        block_size,
        bias,
        x.dtype if out_dtype is None else out_dtype,
        is_packed,
    )
    return out
