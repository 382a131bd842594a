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
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

VERSION = 1
"""Bumped whenever a quantiser or the written layout changes, so cached checkpoints are
rewritten."""
FORMATS = ("w8a8",)
"""The formats :func:`write` knows."""

_LINEAR = re.compile(
    r"^model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)\.weight$"
)


def quantised_names(names: list[str]) -> list[str]:
    """The tensor names of a decoder checkpoint that the formats quantise (2-D linear weights
    of the decoder layers), in the given order."""
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


_Quantizer = Callable[[str, torch.Tensor], tuple[dict[str, torch.Tensor], torch.Tensor]]


def _w8a8(name: str, w: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    q, scale = quantize_w8a8(w)
    base = name[: -len(".weight")]
    return {f"{base}.weight": q, f"{base}.weight_scale": scale}, dequantize_w8a8(q, scale)


_QUANTIZERS: dict[str, tuple[_Quantizer, dict[str, Any]]] = {
    "w8a8": (_w8a8, {"quant_method": "w8a8_int8"}),
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
