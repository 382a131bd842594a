"""End to end: quantised demo checkpoints served through the RVV ops.

Each demo checkpoint of :mod:`sglang_rvv.quant` is served by SGLang with ``--attention-backend
rvv`` and layer routing on (its linear layers in rvv-ops' quantised ops: without routing
SGLang refuses W8A8 and FP8 on a CPU without AMX, and picks GPU-only AWQ / GPTQ configs), and
its dequantised fp32 twin (the same weights, exactly dequantised, no quantisation) by
``torch_native`` without routing in fp32. Both score the same corpus passages teacher-forced
(1,363 positions, see ``test_e2e._passages``) and run the greedy workload of ``test_e2e``.

- W4A16 (AWQ with ``SGLANG_RVV_INT4_ACT=none``; compressed-tensors WNA16, whose default it
  is) and FP8 W8A16, served in fp32, compute the dequantised model in fp32: every
  teacher-forced top-1 and every greedy completion must be the twin's, and log-probabilities
  agree to ``EXACT_LOGPROB`` (fp32 rounding).
- W8A8 (served in bf16, SGLang's W8A8 dtype) and W4A8 (AWQ, GPTQ; WNA16 with
  ``SGLANG_RVV_INT4_ACT=int8``; fp32) quantise every linear layer's input per token to int8;
  their bound follows.

Bound. The W8A8 server differs from the reference by (a) bf16 activations and KV cache
against fp32 and (b) the per-token int8 quantisation of every linear layer's input. (a) alone
is measured by a third server: the dequantised twin served through the RVV ops in bf16. For
(b): an int8 element's rounding error is uniform with step amax / 127 (amax: the row's largest
magnitude) whatever the element's size, rms amax / (127 sqrt 12); bf16's is relative, rms
about |x| 2^-9 / sqrt 3. In a dot product the errors add up in quadrature, so (b) over (a) is
about 2 amax / rms(x) of the row, which for these activations (no outlier channels in a tiny
model trained briefly) is taken as at most 3: the W8A8 server's largest text-token logprob
difference may be ``W8A8_ERROR_FACTOR`` times the bf16 server's, and its teacher-forced top-1
agreement at least ``W8A8_TOP1``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sglang_rvv import demo
from test_e2e import Results, _prompts, run_server

full = pytest.mark.quant_full
"""Tests of the full quantised suite (``nox -s sglang-quant``); the default run
(``sglang-tests``) keeps the AWQ W4A16 comparison, the quantiser checks and SGLang's refusal."""

EXACT_LOGPROB = 1e-3
"""Largest text-token logprob difference of the fp32 W4A16 / FP8 servers from the twin (fp32
rounding in a different order through two layers: ~1e-5 expected)."""
W8A8_TOP1 = 0.98
"""Share of teacher-forced positions whose top-1 token agrees with the dequantised fp32 model."""
W8A8_ERROR_FACTOR = 6.0
"""Bound on the W8A8 server's largest text-token logprob difference from the dequantised fp32
model, in units of the same difference of the bf16 server (see the module docstring)."""

_CACHE: dict[tuple[str, str], Results] = {}


@pytest.fixture(scope="module")
def quant_served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("e2e-quant")

    def get(fmt: str, which: str) -> Results:
        key = (fmt, which)
        if key not in _CACHE:
            if which == "rvv":
                model = demo.ensure_quantized("qwen2", fmt)
                dtype = "bfloat16" if fmt == "w8a8" else "float32"
                _CACHE[key] = run_server(
                    model, "rvv", routed=True, tmp=tmp, score=True, dtype=dtype
                )
            elif which in ("w4a16", "w4a8"):  # the int4 formats with the other activations
                model = demo.ensure_quantized("qwen2", fmt)
                _CACHE[key] = run_server(
                    model,
                    "rvv",
                    routed=True,
                    tmp=tmp,
                    score=True,
                    dtype="float32",
                    env_extra={"SGLANG_RVV_INT4_ACT": "none" if which == "w4a16" else "int8"},
                )
            elif which == "bf16":
                model = demo.ensure_quantized("qwen2", fmt, dequantized=True)
                _CACHE[key] = run_server(model, "rvv", routed=True, tmp=tmp, score=True)
            else:
                model = demo.ensure_quantized("qwen2", fmt, dequantized=True)
                _CACHE[key] = run_server(
                    model, "torch_native", routed=False, tmp=tmp, dtype="float32", score=True
                )
        return _CACHE[key]

    return get


def test_w8a8_checkpoint_is_quantised_as_sglang_reads_it() -> None:
    import json

    from safetensors.torch import load_file

    path = demo.ensure_quantized("qwen2", "w8a8")
    config = json.loads((path / "config.json").read_text())
    assert config["quantization_config"] == {"quant_method": "w8a8_int8"}
    tensors = load_file(str(path / "model.safetensors"))
    q = tensors["model.layers.0.mlp.gate_proj.weight"]
    s = tensors["model.layers.0.mlp.gate_proj.weight_scale"]
    assert str(q.dtype) == "torch.int8" and tuple(s.shape) == (q.shape[0], 1)
    assert int(q.abs().amax(dim=1).min()) == 127  # every row uses the full range
    twin = load_file(
        str(demo.ensure_quantized("qwen2", "w8a8", dequantized=True) / "model.safetensors")
    )
    w = twin["model.layers.0.mlp.gate_proj.weight"]
    assert str(w.dtype) == "torch.float32"
    assert bool((w == q.float() * s).all())
    assert str(tensors["lm_head.weight"].dtype) == "torch.float32"  # not quantised


def _teacher_forced(ours: Results, ref: Results) -> tuple[int, int, float]:
    """(positions, same top-1, largest |logprob difference| of the text tokens)."""
    positions = same = 0
    worst = 0.0
    for a, b in zip(ours.scored, ref.scored, strict=True):
        assert a.tokens == b.tokens
        positions += len(a.tokens)
        same += sum(x == y for x, y in zip(a.top1, b.top1, strict=True))
        worst = max([worst, *(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True))])
    return positions, same, worst


@full
def test_w8a8_teacher_forced_agrees_with_the_dequantised_model(quant_served: Any) -> None:
    ref = quant_served("w8a8", "ref")
    positions, same, worst = _teacher_forced(quant_served("w8a8", "rvv"), ref)
    _, same_bf16, worst_bf16 = _teacher_forced(quant_served("w8a8", "bf16"), ref)
    print(
        f"[e2e-quant] w8a8 (rvv, bf16) vs dequantised fp32 (torch_native): {positions} "
        f"positions, top-1 {same}/{positions} ({same / positions:.4f}), max |logprob diff| "
        f"{worst:.4f}; the same weights unquantised in bf16 (rvv): top-1 {same_bf16}/"
        f"{positions}, max |logprob diff| {worst_bf16:.4f}"
    )
    assert positions >= 500
    assert same / positions >= W8A8_TOP1
    assert worst <= W8A8_ERROR_FACTOR * worst_bf16


@full
def test_w8a8_generates_the_corpus_and_ran_the_int8_ops(quant_served: Any) -> None:
    ours, ref = quant_served("w8a8", "rvv"), quant_served("w8a8", "ref")
    assert "memory at about ten gigabytes" in ours.sequential[0].text
    same = sum(a.tokens == b.tokens for a, b in zip(ours.sequential, ref.sequential, strict=True))
    print(f"[e2e-quant] w8a8 greedy: {same}/{len(_prompts())} completions token-identical")
    stats = ours.stats
    # 2 layers x (qkv, o, gate_up, down) packed once; every linear call through the W8A8 op
    assert stats.get("convert_weight_packed") == 8, stats
    assert stats.get("int8_scaled_mm_with_quant", 0) >= 8, stats
    assert "weight_packed_linear" not in stats, stats  # no linear layer stayed unquantised
    assert not [k for k in stats if k.startswith("attention") and not k.endswith(":kernel")], stats
    assert "W8A8Int8LinearMethod on CPU only works" not in ours.log


def test_w8a8_without_routing_is_refused_by_sglang_on_this_cpu(tmp_path: Path) -> None:
    """What routing fixes: SGLang alone cannot load a W8A8 checkpoint on a CPU without AMX or
    arm64 (an x86 CPU with AMX would load it with sgl-kernel's own CPU build)."""
    from sglang.srt.utils import cpu_has_amx_support

    if cpu_has_amx_support():  # pragma: no cover - not this machine
        pytest.fail("this host has AMX: the refusal cannot be shown here")
    with pytest.raises(AssertionError, match="only works on AMX or Arm64"):
        run_server(
            demo.ensure_quantized("qwen2", "w8a8"), "rvv", routed=False, tmp=tmp_path, score=False
        )


def _greedy_same(ours: Results, ref: Results) -> int:
    return sum(a.tokens == b.tokens for a, b in zip(ours.sequential, ref.sequential, strict=True))


def _only_quantised_linears(stats: dict[str, int], op: str, packs: tuple[str, int]) -> None:
    """2 layers x (qkv, o, gate_up, down) packed once, every linear call through ``op``,
    attention in the kernels."""
    assert stats.get(packs[0]) == packs[1], stats
    assert stats.get(op, 0) >= 8, stats
    assert "weight_packed_linear" not in stats, stats
    assert not [k for k in stats if k.startswith("attention") and not k.endswith(":kernel")], stats


@pytest.mark.parametrize(
    ("fmt", "which", "op", "packs"),
    [
        ("awq", "w4a16", "int4_w4a16_mm_cpu", ("convert_weight_packed_scale_zp", 8)),
        pytest.param("fp8", "rvv", "fp8_scaled_mm_cpu", ("convert_weight_packed", 8), marks=full),
        pytest.param(
            "wna16",
            "rvv",
            "int4_w4a16_mm_cpu",
            ("convert_weight_packed_scale_zp", 8),
            marks=full,
        ),
    ],
)
def test_unquantised_activation_formats_compute_the_dequantised_model(
    quant_served: Any, fmt: str, which: str, op: str, packs: tuple[str, int]
) -> None:
    ours, ref = quant_served(fmt, which), quant_served(fmt, "ref")
    positions, same, worst = _teacher_forced(ours, ref)
    greedy = _greedy_same(ours, ref)
    print(
        f"[e2e-quant] {fmt} {which} (rvv, fp32) vs dequantised fp32 (torch_native): top-1 "
        f"{same}/{positions}, max |logprob diff| {worst:.2e}, greedy {greedy}/"
        f"{len(_prompts())} identical; {packs[0]} {ours.stats.get(packs[0])}, {op} "
        f"{ours.stats.get(op)}"
    )
    assert positions >= 500 and same == positions and worst <= EXACT_LOGPROB
    assert greedy == len(_prompts())
    _only_quantised_linears(ours.stats, op, packs)


@full
@pytest.mark.parametrize("fmt", ["awq", "gptq", "wna16"])
def test_w4a8_teacher_forced_agrees_with_the_dequantised_model(quant_served: Any, fmt: str) -> None:
    """W4A8's only difference from the twin is W8A8's per-token int8 activation rounding (fp32
    otherwise), so W8A8's bound holds: at most W8A8_ERROR_FACTOR times the bf16 server's
    error on the W8A8 twin (this model's bf16 noise level). compressed-tensors WNA16 runs
    W4A8 only with SGLANG_RVV_INT4_ACT=int8 (its default is W4A16)."""
    ours = quant_served(fmt, "w4a8" if fmt == "wna16" else "rvv")
    ref = quant_served(fmt, "ref")
    positions, same, worst = _teacher_forced(ours, ref)
    _, _, worst_bf16 = _teacher_forced(quant_served("w8a8", "bf16"), quant_served("w8a8", "ref"))
    greedy = _greedy_same(ours, ref)
    print(
        f"[e2e-quant] {fmt} W4A8 (rvv, fp32) vs dequantised fp32 (torch_native): top-1 "
        f"{same}/{positions} ({same / positions:.4f}), max |logprob diff| {worst:.4f} "
        f"(bound {W8A8_ERROR_FACTOR} x {worst_bf16:.4f}), greedy {greedy}/{len(_prompts())}; "
        f"int4_scaled_mm_cpu {ours.stats.get('int4_scaled_mm_cpu')}"
    )
    assert positions >= 500 and same / positions >= W8A8_TOP1
    assert worst <= W8A8_ERROR_FACTOR * worst_bf16
    # the corpus sentence (the symmetric WNA16 weights' model ends the completion one token
    # earlier, in "gigaby", as its dequantised twin does)
    assert "memory at about ten giga" in ours.sequential[0].text
    _only_quantised_linears(ours.stats, "int4_scaled_mm_cpu", ("convert_weight_packed_scale_zp", 8))
