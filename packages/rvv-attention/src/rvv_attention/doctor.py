"""``python -m rvv_attention`` / ``rvv-attention``: what this machine and build would do.

Prints the detected CPU features, the rvv-ops kernel build, the thread count and, for
common model shapes and cache dtypes, which implementation :func:`rvv_attention.select`
chooses and why. ``--json`` prints the same as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

import rvv_attention as ra
from rvv_attention._select import ENV_IMPL, KernelUnavailableError, mode


@dataclass(frozen=True)
class Case:
    """One model layer shape the doctor asks :func:`rvv_attention.select` about."""

    model: str
    q_heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    q_dtype: torch.dtype
    kv_dtype: torch.dtype
    features: frozenset[str] = frozenset()


_BF16, _FP8, _I8 = torch.bfloat16, torch.float8_e4m3fn, torch.int8
CASES = (
    Case("Qwen2.5-1.5B", 12, 2, 128, 128, _BF16, _BF16),
    Case("Qwen2.5-1.5B, fp32", 12, 2, 128, 128, torch.float32, torch.float32),
    Case("Llama-3.2-1B", 32, 8, 64, 64, _BF16, _BF16),
    Case("Llama-3.2-1B, fp16", 32, 8, 64, 64, torch.float16, torch.float16),
    Case("Qwen2.5-1.5B, fp8 e4m3 KV", 12, 2, 128, 128, _BF16, _FP8, frozenset({"fp8_kv"})),
    Case("Llama-3.2-1B, int8 KV", 32, 8, 64, 64, _BF16, _I8, frozenset({"int8_kv"})),
    Case(
        "Gemma-2-2B (sliding window 4096, logit cap)",
        8,
        4,
        256,
        256,
        _BF16,
        _BF16,
        frozenset({"sliding_window", "logit_cap"}),
    ),
    Case(
        "gpt-oss-20b (sinks, sliding window 128)",
        64,
        8,
        64,
        64,
        _BF16,
        _BF16,
        frozenset({"sinks", "sliding_window"}),
    ),
    Case("DeepSeek-V2-Lite (MLA 576/512)", 16, 1, 576, 512, _BF16, _BF16, frozenset({"mla"})),
    Case(
        "Llama-3.2-11B-Vision cross-attention",
        32,
        8,
        128,
        128,
        _BF16,
        _BF16,
        frozenset({"cross_attention", "encoder_lens"}),
    ),
)
"""Shapes of common models (per tensor-parallel rank 1)."""


def _dtype(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


def report() -> dict[str, Any]:
    """Everything the doctor prints, as a JSON-serialisable dict."""
    caps = ra.capabilities(refresh=True)
    try:
        current_mode = mode()
        mode_error = None
    except ValueError as e:
        current_mode, mode_error = "invalid", str(e)
    cases: list[dict[str, Any]] = []
    for case in CASES:
        for op in ("decode", "extend"):
            row: dict[str, Any] = {
                "model": case.model,
                "op": op,
                "q_heads": case.q_heads,
                "kv_heads": case.kv_heads,
                "head_dim": case.head_dim,
                "v_head_dim": case.v_head_dim,
                "q_dtype": _dtype(case.q_dtype),
                "kv_dtype": _dtype(case.kv_dtype),
                "features": sorted(case.features),
            }
            if mode_error is not None:
                row.update(impl="error", reason=mode_error)
            else:
                try:
                    sel = ra.select(
                        op,
                        q_dtype=case.q_dtype,
                        kv_dtype=case.kv_dtype,
                        head_dim=case.head_dim,
                        v_head_dim=case.v_head_dim,
                        features=case.features,
                    )
                    row.update(impl=sel.impl.name, reason=sel.reason)
                except KernelUnavailableError as e:
                    row.update(impl="error", reason=str(e))
            cases.append(row)
    return {
        "rvv_attention": ra.__version__,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "mode": current_mode,
        "env": {ENV_IMPL: _env_value()},
        "capabilities": caps.as_dict(),
        "threads": caps.threads,
        "implementations": [
            {
                "name": impl.name,
                "description": impl.description,
                "ops": sorted(impl.ops),
                "q_dtypes": sorted(_dtype(d) for d in impl.q_dtypes),
                "kv_dtypes": sorted(_dtype(d) for d in impl.kv_dtypes),
                "head_dims": list(impl.head_dims),
                "features": sorted(impl.features),
                "devices": sorted(impl.devices),
                "available": impl.available() is None,
                "unavailable_reason": impl.available(),
            }
            for impl in ra.implementations()
        ],
        "cases": cases,
    }


def _env_value() -> str | None:
    import os

    return os.environ.get(ENV_IMPL)


def _yes(b: bool) -> str:
    return "yes" if b else "no"


def format_text(rep: dict[str, Any]) -> str:
    """The human-readable form of :func:`report`."""
    caps = rep["capabilities"]
    lines = [
        f"rvv-attention {rep['rvv_attention']} (torch {rep['torch']}, Python {rep['python']})",
        "",
        "CPU",
        f"  machine      {caps['machine']}" + (f" ({caps['uarch']})" if caps["uarch"] else ""),
    ]
    if caps["isa"]:
        lines.append(f"  isa          {caps['isa']}")
    vlen = f"{caps['vlen']} bits (from {caps['vlen_source']})" if caps["has_v"] else "-"
    lines += [
        f"  RVV 1.0      {_yes(caps['has_v'])}",
        f"  VLEN         {vlen}",
        f"  Zvfh         {_yes(caps['zvfh'])}   Zvfhmin {_yes(caps['zvfhmin'])}   "
        f"Zvfbfmin {_yes(caps['zvfbfmin'])}   (from {caps['source']})",
        f"  cores        {caps['cores']}",
        f"  threads      {rep['threads']} (torch.get_num_threads())",
    ]
    for note in caps["notes"]:
        lines.append(f"  note         {note}")
    lines += ["", "Kernels (rvv-ops)"]
    k = caps["kernels"]
    if k is None:
        lines.append(f"  not available: {caps['kernels_error']}")
    else:
        lines += [
            f"  rvv-ops      {k['version']}, built for {k['target_arch']} against torch "
            f"{k['torch_version']}",
            f"  variants     compiled {', '.join(k['compiled_variants'])}; supported here "
            f"{', '.join(k['supported_variants'])}; active {k['active_variant']}",
        ]
        if k.get("variant_error"):
            lines.append(f"  variant      {k['variant_error']}")
    env = rep["env"][ENV_IMPL]
    lines += [
        "",
        f"Selection ({ENV_IMPL}={env if env is not None else '<unset>'}: mode {rep['mode']})",
    ]
    width = max(len(c["model"]) for c in rep["cases"])
    for c in rep["cases"]:
        why = f"  ({c['reason']})" if c["reason"] else ""
        lines.append(f"  {c['model']:<{width}}  {c['op']:<6}  {c['impl']:<8}{why}".rstrip())
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m rvv_attention`` and the ``rvv-attention`` script."""
    parser = argparse.ArgumentParser(
        prog="rvv-attention",
        description="Show the CPU's vector features, the rvv-ops kernel build, the thread "
        "count and which attention implementation would run for common models, and why.",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)
    rep = report()
    if args.json:
        print(json.dumps(rep, indent=2, sort_keys=True))
    else:
        print(format_text(rep))
    return 0
