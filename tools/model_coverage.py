"""Renders ``docs/models.md``: the model matrix's results and the op coverage.

``nox -s model-coverage`` runs the matrix (``test_model_matrix.py`` with
``RVV_MODEL_COVERAGE=FILE``) and then this script on that file, in the session's venv (SGLang
0.5.23 and rvv-ops installed):

    python tools/model_coverage.py --results FILE [--out docs/models.md]

SGLang's CPU op set is read from the installed SGLang's source: every ``sgl_kernel`` op name
its Python code refers to (``torch.ops.sgl_kernel.<name>``, the fake kernels of its CPU graph
runner) that ends in ``_cpu``, plus the CPU ops sgl-kernel's CPU extension names without the
suffix (``CPU_OPS_WITHOUT_SUFFIX``). rvv-ops' ops come from the installed build
(``rvv_ops._library.defined_ops``), sglang-rvv's collectives from its stand-in.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

CPU_OPS_WITHOUT_SUFFIX = frozenset(
    {
        "convert_weight_packed", "convert_weight_packed_scale_zp", "weight_packed_linear",
        "int8_scaled_mm_with_quant", "qkv_proj_with_rope", "qkv_proj_with_rope_fused_weight",
        "fused_linear_sigmoid_mul", "fused_scale_residual_norm_scale_shift", "initialize",
        "init_cpu_threads_env", "shm_allreduce", "shm_allgather", "shm_alltoall",
        "shm_group_initialize", "causal_conv1d_weight_pack", "conv3d_embed_weight_pack",
        "convert_scale_packed",
    }
)  # fmt: skip
"""sgl-kernel CPU ops whose names do not end in ``_cpu`` (its CPU extension's schemas)."""

_GDN = "Gated DeltaNet / linear-attention layers (Qwen3-Next, Qwen3.5's linear layers, Kimi)"
_DIFFUSION = "SGLang's diffusion runtime (multimodal_gen), not the LLM server"
REASONS: dict[str, str] = {
    "chunk_gated_delta_rule_cpu": _GDN,
    "fused_sigmoid_gating_delta_rule_update_cpu": _GDN,
    "causal_conv1d_update_cpu": _GDN,
    "causal_conv1d_fwd_cpu": _GDN,
    "causal_conv1d_weight_pack": "packs the GDN conv weights for sgl-kernel's AMX build; SGLang "
    "calls it only where it sees AMX, and the RVV conv ops take plain weights",
    "fused_gdn_gating_cpu": _GDN,
    "fused_qkvzba_split_reshape_cat_contiguous_cpu": "Qwen3-Next's GDN input split; " + _GDN,
    "fused_input_proj_cpu": "Qwen3.5's fused GDN input projection, taken only with sgl-kernel's "
    "AMX build (the routed linear layers run the projections here)",
    "fused_norm_scale_shift_cpu": _DIFFUSION,
    "fused_scale_shift_cpu": _DIFFUSION,
    "fused_scale_residual_norm_scale_shift": _DIFFUSION,
    "fused_scale_residual_norm_scale_shift_cpu": _DIFFUSION,
    "shm_alltoall": _DIFFUSION + " (sequence parallelism)",
    "shm_group_initialize": _DIFFUSION,
    "fused_qkvzba_split_reshape_cat_cpu": "Qwen3-Next's interleaved GDN input split (not in the "
    "matrix; Qwen3.5's contiguous split is defined)",
    "conv3d_embed_cpu": "vision encoders' patch embedding (multimodal)",
    "conv3d_embed_weight_pack": "vision encoders' patch embedding (multimodal)",
    "image_preprocess_cpu": "vision preprocessing (multimodal)",
    "apply_multidimensional_rope_cpu": "Gemma 4's vision tower (multimodal)",
    "multimodal_rotary_embedding_cpu": "M-RoPE of the Qwen-VL family (multimodal)",
    "murmur_hash32_cpu": "sampling with per-request seeds (hash-based sampler)",
    "store_cache_cpu": "a KV pool layout the rvv backend does not use (its own cache writes)",
    "mxfp4_scaled_mm_cpu": "MXFP4 weights (gpt-oss): no MXFP4 kernel here",
    "convert_scale_packed": "MXFP4 weights (gpt-oss): no MXFP4 kernel here",
    "fp8_per_tensor_scaled_mm_cpu": "per-tensor FP8 checkpoints: only block-scaled FP8 is "
    "implemented (fp8_scaled_mm_cpu)",
    "fused_qk_rmsnorm_sumsq_cpu": "MiniMax-M2's tensor-parallel QK norm (sum of squares across "
    "ranks)",
    "fused_qk_rmsnorm_apply_from_stats_cpu": "MiniMax-M2's tensor-parallel QK norm",
    "gemma4_rmsnorm_cpu": "Gemma 4 (not in the matrix)",
}
"""Why an op of SGLang's CPU set that rvv-ops does not define is left out."""

_REF = re.compile(r"torch\.ops\.sgl_kernel\.([A-Za-z0-9_]+)")
_FAKE = re.compile(r"register_cpu_compile_fake\(\s*\"([a-z0-9_]+)\"")
_CPU_LITERAL = re.compile(r"\"([a-z0-9_]+_cpu)\"")


def sglang_cpu_ops(sglang_dir: Path) -> set[str]:
    names: set[str] = set()
    for path in sglang_dir.rglob("*.py"):
        text = path.read_text(errors="replace")
        names.update(_REF.findall(text))
        names.update(_FAKE.findall(text))
        if path.name == "cpu_graph_runner.py":
            names.update(_CPU_LITERAL.findall(text))
    return {n for n in names if n.endswith("_cpu") or n in CPU_OPS_WITHOUT_SUFFIX}


def defined() -> tuple[set[str], set[str]]:
    """(rvv-ops' sgl_kernel ops, sglang-rvv's collectives)."""
    import rvv_ops

    ops = {n.split("::", 1)[1] for n in rvv_ops._library.defined_ops() if n.startswith("sgl_")}
    from sglang_rvv.compat import collectives

    return ops, set(collectives.SCHEMAS)


def _ops_line(stats: dict[str, int], prefix: str) -> str:
    items = sorted((k[len(prefix) :], v) for k, v in stats.items() if k.startswith(prefix))
    return ", ".join(f"`{k}` {v}" for k, v in items) or "none"


def _hooks(stats: dict[str, int]) -> str:
    rows: dict[str, list[int]] = {}
    for k, v in stats.items():
        if not k.startswith("hook "):
            continue
        where, how = k[len("hook ") :].rsplit(" ", 1)
        rows.setdefault(where, [0, 0])[0 if how == "rvv" else 1] += v
    if not rows:
        return "none"
    return ", ".join(
        f"`{w}` {r} rvv" + (f" / **{t} torch**" if t else "") for w, (r, t) in sorted(rows.items())
    )


def _layers(stats: dict[str, int]) -> str:
    """SGLang's BaseFusedOp layer calls by class (a subclass counts under its own name)."""
    rows = sorted((k[len("layer ") :], v) for k, v in stats.items() if k.startswith("layer "))
    return ", ".join(f"`{k}` {v}" for k, v in rows) or "none"


STATUS = {
    "identical": "served through RVV; greedy tokens identical",
    "tokens-differ": "**served through RVV; tokens differ**",
    "rvv-failed": "**the rvv server fails**",
    "sglang-cannot-serve": "SGLang 0.5.23 cannot serve it on a CPU",
    "rvv-only": "SGLang's torch_native cannot serve it on a CPU; served through RVV, greedy "
    "text identical to transformers'",
}


def render(results: dict[str, Any], sglang_dir: Path) -> str:
    sys.path.insert(0, str(ROOT / "packages" / "sglang-rvv" / "tests"))
    model_matrix: Any = importlib.import_module("model_matrix")
    test_model_imports: Any = importlib.import_module("test_model_imports")

    cpu = sglang_cpu_ops(sglang_dir)
    ours, collectives = defined()
    covered = cpu & ours
    by_stand_in = (cpu - ours) & collectives
    rest = sorted(cpu - ours - collectives)
    out = [
        "# Model coverage",
        "",
        "Generated by `nox -s model-coverage` (`tools/model_coverage.py`); do not edit by hand.",
        "",
        "Each architecture below is a tiny random checkpoint with the family's layer structure",
        "(`packages/sglang-rvv/tests/model_matrix.py`), served by SGLang 0.5.23 in fp32 with",
        "`--attention-backend rvv` and layer routing on, and with `torch_native` without",
        f"routing; {len(model_matrix.prompts())} greedy prompts of {16} tokens (one past the",
        f"sliding window of {model_matrix.SLIDING_WINDOW} tokens, two crossing the",
        "chunked-prefill size of 64) must give identical tokens.",
        "",
        "## Architectures",
        "",
        "| architecture | stands for | structure | result |",
        "|---|---|---|---|",
    ]
    for arch in model_matrix.MATRIX:
        r = results.get(arch.name)
        if r is None:
            result = "not run"
        else:
            result = STATUS.get(r["status"], r["status"])
            if "identical" in r:
                result += f" ({r['identical']}/{r['prompts']})"
            if "identical_to_transformers" in r:
                result += f" ({r['identical_to_transformers']}/{r['prompts']})"
            if r["status"] in ("sglang-cannot-serve", "rvv-only"):
                result += f"; torch_native: `{r['torch_native']['error']}`"
            if r["status"] == "sglang-cannot-serve" and "rvv" in r:
                result += f"; rvv: `{r['rvv']['error']}`"
            elif r["status"] == "rvv-failed":
                result += f": `{r['rvv']['error']}`"
            elif r["status"] == "tokens-differ":
                result += ": " + "; ".join(r["differences"])
        out.append(f"| {arch.name} | {arch.family} | {arch.features} | {result} |")
    out += [
        "",
        "## What each architecture reached in the rvv server",
        "",
        "Counted by `sglang_rvv.op_stats` over the whole run (start-up, the 8 prompts). "
        "*sgl_kernel ops*: calls of each `torch.ops.sgl_kernel` op, whoever made them; "
        "*routed layers*: calls of each routing hook, by whether it ran the RVV ops or handed "
        "the call to SGLang's torch code (a case the ops do not cover exactly; the "
        "`process_weights_after_loading` hooks also run SGLang's own method as part of their "
        "work); *SGLang layer calls by class*: every call of a `BaseFusedOp` layer (a subclass, "
        "e.g. `Llama3RotaryEmbedding`, counts under its own name and reaches the hook of the "
        "method it inherits); a class with no routed calls above ran in torch.",
        "",
    ]
    for arch in model_matrix.MATRIX:
        r = results.get(arch.name)
        if r is None or "rvv" not in r or not r["rvv"]["ok"]:
            continue
        stats = r["rvv"]["stats"]
        native = r["torch_native"]["stats"]
        out += [
            f"### {arch.name}",
            "",
            f"- sgl_kernel ops: {_ops_line(stats, 'op ')}",
            f"- routed layers: {_hooks(stats)}",
            f"- SGLang layer calls by class: {_layers(stats)}",
            f"- attention: {_ops_line(stats, 'attention ')}",
            f"- sgl_kernel ops the torch_native server (no routing) reached: "
            f"{_ops_line(native, 'op ')}",
            "",
        ]
    out += [
        "## SGLang's CPU op set",
        "",
        f"SGLang 0.5.23's Python code names {len(cpu)} sgl-kernel CPU ops. rvv-ops defines "
        f"**{len(covered)}** of them; sglang-rvv's `sgl_kernel` stand-in defines "
        f"{len(by_stand_in)} more (the tensor-parallel collectives on torch.distributed: "
        f"{', '.join(f'`{n}`' for n in sorted(by_stand_in))}). rvv-ops also defines "
        f"{len(ours - cpu)} ops of its own "
        f"({', '.join(f'`{n}`' for n in sorted(ours - cpu))}).",
        "",
        "Defined by rvv-ops: " + ", ".join(f"`{n}`" for n in sorted(covered)) + ".",
        "",
        "Not defined, and why:",
        "",
        "| op | why it is left out |",
        "|---|---|",
    ]
    for name in rest:
        out.append(f"| `{name}` | {REASONS.get(name, 'not implemented yet')} |")
    out += [
        "",
        "## SGLang model modules that do not import",
        "",
        "SGLang imports every model module at start-up; these fail in CPU mode with the "
        "stand-in (checked by `test_model_imports.py` in the default run), none for want of an "
        "`sgl_kernel` op:",
        "",
        "| module | error | why it is out of scope |",
        "|---|---|---|",
    ]
    for module, (pattern, why) in sorted(test_model_imports.OUT_OF_SCOPE.items()):
        out.append(f"| `{module}` | `{pattern}` | {why} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, required=True, help="the matrix's JSON")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "models.md")
    args = parser.parse_args(argv)
    import sglang

    results = json.loads(args.results.read_text()) if args.results.is_file() else {}
    text = render(results, Path(sglang.__file__).parent)
    args.out.write_text(text)
    print(f"model-coverage: wrote {args.out} ({len(results)} architectures)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
