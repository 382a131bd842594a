"""Quantised demo checkpoints: round-to-nearest quantisers that write the layout SGLang reads.

``python -m sglang_rvv.demo --quant w8a8`` (see :mod:`sglang_rvv.demo`) writes the demo model
with its decoder-layer linear weights (attention q/k/v/o and MLP gate/up/down projections)
quantised; embeddings, norms and the LM head stay as they are, as the published checkpoints of
these formats keep them. Each format also has a *dequantised twin*: the same model with every
quantised weight replaced by its exact dequantised value in fp32 and no
``quantization_config``, so that any difference between serving the two is the arithmetic of
the quantised path, not the rounding of the weights.

Formats (the ``quantization_config`` written into ``config.json``):

``w8a8``
    SGLang's ``w8a8_int8``: per-output-channel symmetric int8 weights (``weight`` int8 [N, K],
    ``weight_scale`` fp32 [N, 1]; scale = max |w| / 127, q = round-half-even(w / scale)),
    activations quantised per token at run time.
``awq``
    AWQ's GEMM layout (``quant_method: awq``, 4 bits, zero points): per group of
    ``INT4_GROUP`` input channels and output channel, asymmetric min/max round-to-nearest
    (``scale = (max - min) / 15``, ``zero = round(-min / scale)`` in 0..15, ``q = clamp(round(w
    / scale) + zero, 0, 15)``), written as ``qweight`` int32 [K, N / 8] and ``qzeros`` int32
    [G, N / 8] (eight nibbles per word in AWQ's order 0, 4, 1, 5, 2, 6, 3, 7) and ``scales``
    fp16 [G, N].
``gptq``
    GPTQ's layout (``quant_method: gptq``, ``desc_act: false``) of the same round-to-nearest
    quantisation: ``qweight`` int32 [K / 8, N] (nibble ``i`` of a word is input channel
    ``8 r + i``), ``qzeros`` int32 [G, N / 8] holding zero - 1 (GPTQ's stored form, so the
    written zero points are 1..15 and SGLang reads them back exactly), ``scales`` fp16 [G, N],
    ``g_idx`` int32 [K] = k // group.
``wna16``
    compressed-tensors' W4A16 int4 (``quant_method: compressed-tensors``, ``format:
    pack-quantized``, one config group targeting ``Linear`` with 4-bit symmetric int weights,
    ``strategy: group``, ``group_size: INT4_GROUP``, no activation quantisation; ``ignore:
    [lm_head]``): per group and output channel ``scale = max |w| / 7.5`` (compressed-tensors'
    own symmetric range: 15 steps over [-8, 7]), ``q = clamp(round(w / scale), -8, 7)``,
    written as ``weight_packed`` int32 [N, K / 8] (nibble ``i`` of word ``j`` holds input
    channel ``8 j + i`` as ``q + 8``), ``weight_scale`` fp16 [N, G] and ``weight_shape``
    int64 [2] = [N, K]. :func:`pack_wna16` also writes the asymmetric form's
    ``weight_zero_point`` int32 [N / 8, G] (zero point + 8 packed along N), which the routing
    tests use.
``fp8``
    Block-scaled FP8 (``quant_method: fp8``, ``weight_block_size: FP8_BLOCK``, dynamic
    activations: SGLang's W8A16 on CPU): per block, ``scale = max |w| / 448`` (e4m3's largest
    value), ``weight = float8_e4m3fn(w / scale)`` (torch's round-to-nearest-even cast),
    ``weight_scale_inv`` fp32 [ceil(N / bn), ceil(K / bk)].

The demo model's sizes (hidden 64, intermediate 176) set ``INT4_GROUP`` = 16: it must divide
every K (64 and 176), where published checkpoints use 32, 64 or 128 on larger models; and
``FP8_BLOCK`` = [16, 16]: block_n must divide every merged projection's part (32 and 176),
and SGLang's fp8 linear method takes square blocks only.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

VERSION = 2
"""Bumped whenever a quantiser or the written layout changes, so cached checkpoints are
rewritten."""
FORMATS = ("w8a8", "awq", "gptq", "fp8", "wna16")
FP8_BLOCK = (16, 16)
"""[block_n, block_k] of the fp8 format's scales."""
INT4_GROUP = 16
"""Input channels per scale / zero-point group of the int4 formats."""
_AWQ_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)
"""The formats :func:`write` knows."""

_LINEAR = re.compile(
    r"^model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj"
    r"|mlp\.(experts\.\d+\.|shared_expert\.)?(gate|up|down)_proj)\.weight$"
)
"""Decoder linear weights: attention projections, the MLP's, and a MoE model's experts' and
shared expert's (not its router ``mlp.gate`` or ``shared_expert_gate``)."""


def quantised_names(names: list[str]) -> list[str]:
    """The tensor names of a decoder checkpoint that the formats quantise (2-D linear weights
    of the decoder layers, MoE experts included), in the given order."""
    return [n for n in names if _LINEAR.match(n)]


def quantize_w8a8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel symmetric int8: (q int8 [N, K], scale fp32 [N, 1]), computed in fp32.
    An all-zero row gets scale 1 (q = 0), so the dequantised row is exactly zero."""
    if w.dim() != 2:
        raise ValueError(f"quantize_w8a8: w has shape {tuple(w.shape)}; expected [N, K]")
    w32 = w.detach().to(torch.float32)
    amax = w32.abs().amax(dim=1, keepdim=True)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    q = torch.round(w32 / scale).clamp_(-127, 127).to(torch.int8)
    return q, scale


def dequantize_w8a8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The fp32 weight SGLang's W8A8 arithmetic stands for: q * scale (exact in fp32 up to one
    rounding of the product)."""
    return q.to(torch.float32) * scale.to(torch.float32)


def quantize_int4(w: torch.Tensor, group: int, zero_min: int = 0) -> tuple[torch.Tensor, ...]:
    """Asymmetric round-to-nearest int4 per (output channel, group of ``group`` input
    channels): (q uint8 [N, K] in 0..15, zeros uint8 [G, N] in ``zero_min``..15, scales fp16
    [G, N]), computed in fp32 with the scale rounded to fp16 first (as stored)."""
    if w.dim() != 2 or w.shape[1] % group:
        raise ValueError(
            f"quantize_int4: w has shape {tuple(w.shape)}; expected [N, K] with K a multiple "
            f"of group={group}"
        )
    n, k = w.shape
    wg = w.detach().to(torch.float32).reshape(n, k // group, group)
    lo = wg.amin(dim=2).clamp(max=0.0)
    hi = wg.amax(dim=2).clamp(min=0.0)
    scale = ((hi - lo) / (15 - zero_min)).clamp(min=1e-8).to(torch.float16).to(torch.float32)
    zero = torch.round(-lo / scale).clamp(zero_min, 15)
    q = (torch.round(wg / scale[..., None]) + zero[..., None]).clamp(0, 15)
    return (
        q.reshape(n, k).to(torch.uint8),
        zero.T.contiguous().to(torch.uint8),
        scale.T.contiguous().to(torch.float16),
    )


def dequantize_int4(q: torch.Tensor, zeros: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(q - zero) * scale per group, in fp32 (exact: small integers times an fp16 scale)."""
    k = q.shape[1]
    group = k // zeros.shape[0]
    z = zeros.to(torch.float32).T.repeat_interleave(group, dim=1)
    s = scales.to(torch.float32).T.repeat_interleave(group, dim=1)
    return (q.to(torch.float32) - z) * s


def _int32(words: torch.Tensor) -> torch.Tensor:
    """int64 words holding 32-bit patterns, as int32 (two's complement)."""
    return (words - ((words >> 31) << 32)).to(torch.int32)


def pack_awq(q: torch.Tensor, zeros: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q [N, K], zeros [G, N] -> AWQ's qweight int32 [K, N / 8], qzeros int32 [G, N / 8]."""

    def words(v: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(v.shape[0], v.shape[1] // 8, dtype=torch.int64)
        for j, slot in enumerate(_AWQ_ORDER):
            out |= (v[:, j::8].to(torch.int64) & 0xF) << (4 * slot)
        return _int32(out)

    return words(q.T.contiguous()), words(zeros)


def pack_gptq(q: torch.Tensor, zeros: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q [N, K], zeros [G, N] (1..15) -> GPTQ's qweight int32 [K / 8, N], qzeros int32
    [G, N / 8] (zero - 1 stored)."""
    qt = q.T.to(torch.int64)
    w = torch.zeros(qt.shape[0] // 8, qt.shape[1], dtype=torch.int64)
    for i in range(8):
        w |= qt[i::8] << (4 * i)
    zm1 = (zeros.to(torch.int64) - 1) & 0xF
    z = torch.zeros(zeros.shape[0], zeros.shape[1] // 8, dtype=torch.int64)
    for i in range(8):
        z |= zm1[:, i::8] << (4 * i)
    return _int32(w), _int32(z)


def quantize_int4_symmetric(w: torch.Tensor, group: int) -> tuple[torch.Tensor, ...]:
    """Symmetric round-to-nearest int4 per (output channel, group of ``group`` input channels)
    in compressed-tensors' range: ``scale = max |w| / 7.5`` rounded to fp16 (as stored), ``q =
    clamp(round(w / scale), -8, 7)``. Returned in :func:`quantize_int4`'s offset form (q + 8
    uint8 [N, K] in 0..15, zeros uint8 [G, N] all 8, scales fp16 [G, N]), so
    :func:`dequantize_int4` applies. An all-zero group gets scale 1 (q = 0)."""
    if w.dim() != 2 or w.shape[1] % group:
        raise ValueError(
            f"quantize_int4_symmetric: w has shape {tuple(w.shape)}; expected [N, K] with K a "
            f"multiple of group={group}"
        )
    n, k = w.shape
    wg = w.detach().to(torch.float32).reshape(n, k // group, group)
    amax = wg.abs().amax(dim=2)
    scale = torch.where(amax > 0, amax / 7.5, torch.ones_like(amax))
    scale = scale.to(torch.float16).to(torch.float32)
    q = torch.round(wg / scale[..., None]).clamp(-8, 7) + 8
    return (
        q.reshape(n, k).to(torch.uint8),
        torch.full((k // group, n), 8, dtype=torch.uint8),
        scale.T.contiguous().to(torch.float16),
    )


def pack_wna16(
    q: torch.Tensor, zeros: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """q [N, K] (0..15: the signed value + 8), zeros [G, N] (0..15) or None (symmetric) ->
    compressed-tensors' pack-quantized ``weight_packed`` int32 [N, K / 8] (nibble ``i`` of
    word ``j`` is input channel ``8 j + i``, low bits first) and ``weight_zero_point`` int32
    [N / 8, G] (nibble ``i`` of word ``r`` is output channel ``8 r + i``) or None."""
    n, k = q.shape
    if k % 8 or (zeros is not None and n % 8):
        raise ValueError(
            f"pack_wna16: q has shape {tuple(q.shape)}; expected K (and N with zero points) "
            "a multiple of 8"
        )
    qv = q.to(torch.int64).reshape(n, k // 8, 8)
    packed = torch.zeros(n, k // 8, dtype=torch.int64)
    for i in range(8):
        packed |= (qv[..., i] & 0xF) << (4 * i)
    if zeros is None:
        return _int32(packed), None
    zv = zeros.to(torch.int64).T.reshape(n // 8, 8, -1)
    zp = torch.zeros(n // 8, zv.shape[2], dtype=torch.int64)
    for i in range(8):
        zp |= (zv[:, i] & 0xF) << (4 * i)
    return _int32(packed), _int32(zp)


def quantize_fp8(w: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-scaled e4m3: (weight float8_e4m3fn [N, K], scales fp32 [ceil(N / bn),
    ceil(K / bk)]); an all-zero block gets scale 1."""
    if w.dim() != 2:
        raise ValueError(f"quantize_fp8: w has shape {tuple(w.shape)}; expected [N, K]")
    bn, bk = block
    n, k = w.shape
    w32 = w.detach().to(torch.float32)
    nb, kb = -(-n // bn), -(-k // bk)
    padded = torch.zeros(nb * bn, kb * bk)
    padded[:n, :k] = w32
    amax = padded.reshape(nb, bn, kb, bk).abs().amax(dim=(1, 3))
    scales = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    full = scales.repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]
    q = (w32 / full).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q, scales


def dequantize_fp8(q: torch.Tensor, scales: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """fp8 value times its block's scale, in fp32."""
    n, k = q.shape
    full = scales.repeat_interleave(block[0], 0)[:n].repeat_interleave(block[1], 1)[:, :k]
    return q.to(torch.float32) * full


_Quantizer = Callable[[str, torch.Tensor], tuple[dict[str, torch.Tensor], torch.Tensor]]


def _w8a8(name: str, w: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    q, scale = quantize_w8a8(w)
    base = name[: -len(".weight")]
    return {f"{base}.weight": q, f"{base}.weight_scale": scale}, dequantize_w8a8(q, scale)


def _awq(name: str, w: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    q, zeros, scales = quantize_int4(w, INT4_GROUP)
    qweight, qzeros = pack_awq(q, zeros)
    base = name[: -len(".weight")]
    stored = {f"{base}.qweight": qweight, f"{base}.qzeros": qzeros, f"{base}.scales": scales}
    return stored, dequantize_int4(q, zeros, scales)


def _gptq(name: str, w: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    q, zeros, scales = quantize_int4(w, INT4_GROUP, zero_min=1)
    qweight, qzeros = pack_gptq(q, zeros)
    base = name[: -len(".weight")]
    g_idx = torch.arange(w.shape[1], dtype=torch.int32) // INT4_GROUP
    stored = {
        f"{base}.qweight": qweight,
        f"{base}.qzeros": qzeros,
        f"{base}.scales": scales,
        f"{base}.g_idx": g_idx,
    }
    return stored, dequantize_int4(q, zeros, scales)


def _fp8(name: str, w: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    q, scales = quantize_fp8(w, FP8_BLOCK)
    base = name[: -len(".weight")]
    stored = {f"{base}.weight": q, f"{base}.weight_scale_inv": scales}
    return stored, dequantize_fp8(q, scales, FP8_BLOCK)


def _wna16(name: str, w: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    q, zeros, scales = quantize_int4_symmetric(w, INT4_GROUP)
    packed, _ = pack_wna16(q)
    base = name[: -len(".weight")]
    stored = {
        f"{base}.weight_packed": packed,
        f"{base}.weight_scale": scales.T.contiguous(),
        f"{base}.weight_shape": torch.tensor(list(w.shape), dtype=torch.int64),
    }
    return stored, dequantize_int4(q, zeros, scales)


_QUANTIZERS: dict[str, tuple[_Quantizer, dict[str, Any]]] = {
    "fp8": (
        _fp8,
        {
            "quant_method": "fp8",
            "activation_scheme": "dynamic",
            "weight_block_size": list(FP8_BLOCK),
        },
    ),
    "w8a8": (_w8a8, {"quant_method": "w8a8_int8"}),
    "awq": (
        _awq,
        {
            "quant_method": "awq",
            "bits": 4,
            "group_size": INT4_GROUP,
            "zero_point": True,
            "version": "gemm",
        },
    ),
    "wna16": (
        _wna16,
        {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "quantization_status": "compressed",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {
                        "num_bits": 4,
                        "type": "int",
                        "symmetric": True,
                        "strategy": "group",
                        "group_size": INT4_GROUP,
                        "dynamic": False,
                        "actorder": None,
                        "observer": "minmax",
                    },
                    "input_activations": None,
                    "output_activations": None,
                    "format": "pack-quantized",
                }
            },
            "ignore": ["lm_head"],
            "kv_cache_scheme": None,
        },
    ),
    "gptq": (
        _gptq,
        {
            "quant_method": "gptq",
            "bits": 4,
            "group_size": INT4_GROUP,
            "desc_act": False,
            "sym": False,
            "lm_head": False,
            "checkpoint_format": "gptq",
        },
    ),
}


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"fmt={fmt!r}: expected one of {FORMATS}")


def write(src: Path, out: Path, fmt: str, *, dequantized: bool = False) -> Path:
    """Writes ``src`` (a Hugging Face checkpoint directory with ``model.safetensors``) quantised
    in format ``fmt`` to ``out`` (or, with ``dequantized``, its fp32 dequantised twin); returns
    ``out``. Tokenizer and other files are copied unchanged."""
    from safetensors.torch import load_file, save_file

    _check_format(fmt)
    weights_file = src / "model.safetensors"
    if not weights_file.is_file():
        raise FileNotFoundError(f"src={src}: no model.safetensors in it")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and f.name not in ("model.safetensors", "config.json"):
            shutil.copy2(f, out / f.name)
    tensors = load_file(str(weights_file))
    names = quantised_names(list(tensors))
    if not names:
        raise ValueError(f"src={src}: no decoder linear weights to quantise")
    quantize, qconfig = _QUANTIZERS[fmt]
    result: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        if name not in names:
            result[name] = t.to(torch.float32) if dequantized else t
            continue
        stored, deq = quantize(name, t)
        if dequantized:
            result[name] = deq.contiguous()
        else:
            result.update({k: v.contiguous() for k, v in stored.items()})
    save_file(result, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    if dequantized:
        config.pop("quantization_config", None)
        for key in ("torch_dtype", "dtype"):
            if key in config:
                config[key] = "float32"
    else:
        config["quantization_config"] = dict(qconfig)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    return out
