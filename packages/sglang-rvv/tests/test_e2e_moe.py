"""End to end: the mixture-of-experts demo models (:data:`sglang_rvv.demo.MOE_ARCHS`).

Each model is served by SGLang with ``--attention-backend rvv`` and layer routing on (expert
selection in ``topk_softmax_cpu``, the experts in ``fused_experts_cpu`` on weights packed once
at load, the rest in the dense hooks' ops), and by ``torch_native`` without routing (SGLang's
own torch code: ``fused_topk_torch_native`` and ``moe_forward_native``), both in fp32, with
``test_e2e``'s workload (10 greedy prompts sharing prefixes, the same as 16 concurrent
requests, an aborted stream). In fp32 every completion must be token-identical, and
identical to transformers' greedy generation on the same weights (fp32).

Qwen2-MoE does not start on a CPU with SGLang alone (its shared-expert gate is a triton
kernel); sglang-rvv's torch version of the gate (:mod:`sglang_rvv.moe`) is what the
``torch_native`` server runs, which is why that server is also checked against transformers.

CI budget: ``sglang-tests`` starts two servers (Qwen2-MoE routed and on torch_native: the
routing ops, the fused experts and the shared expert); ``nox -s sglang-moe`` (``-m
moe_full``) adds Qwen3-MoE (routed, on torch_native), the bf16 comparison and the quantised
checkpoints.

bf16 (``-m moe_full``, ``nox -s sglang-moe``): the same comparison with both servers in
bf16. Different arithmetic in bf16 (SGLang's torch path rounds every expert's GEMM output to
bf16, the fused op accumulates in fp32) can flip a near-tie, after which the texts diverge:
the bound is on the first ``BF16_AGREE`` tokens of every prompt and their logprobs
(``BF16_LOGPROB``), measured values are printed.
"""

from __future__ import annotations

from typing import Any

import pytest
from sglang_rvv import demo, moe
from test_e2e import Completion, Results, _prompts, run_server

MOE_OPS_PRESENT = not moe.missing_ops()
needs_ops = pytest.mark.skipif(
    not MOE_OPS_PRESENT,
    reason=f"the installed rvv-ops lacks the MoE ops {moe.missing_ops()}",
)
full = pytest.mark.moe_full

BF16_AGREE = 4
"""Leading tokens of every greedy completion that must agree in bf16."""
BF16_LOGPROB = 0.15
"""Largest difference (nats) of those tokens' logprobs in bf16."""

LAYERS = 2
"""MoE layers of each demo model (one w13 and one w2 packed per layer)."""

_CACHE: dict[tuple[str, str, str], Results] = {}


@pytest.fixture(scope="module")
def moe_served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("e2e-moe")

    def get(arch: str, which: str, dtype: str = "float32") -> Results:
        key = (arch, which, dtype)
        if key not in _CACHE:
            model = demo.ensure(arch)
            if which == "rvv":
                _CACHE[key] = run_server(
                    model, "rvv", routed=True, tmp=tmp, dtype=dtype, score=False
                )
            else:
                _CACHE[key] = run_server(
                    model, "torch_native", routed=False, tmp=tmp, dtype=dtype, score=False
                )
        return _CACHE[key]

    return get


def _identical(a: list[Completion], b: list[Completion]) -> list[int]:
    """Indices of the completions whose tokens differ."""
    return [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x.tokens != y.tokens]


def _moe_stats(stats: dict[str, int]) -> None:
    """The MoE ops ran, the weights were packed once per layer, nothing fell back."""
    assert stats.get(moe.PACK_COUNT) == 2 * LAYERS, stats
    assert stats.get("fused_experts_cpu", 0) > 0, stats
    assert stats.get("topk_softmax_cpu", 0) > 0, stats
    assert stats.get("fused_experts_cpu") == stats.get("topk_softmax_cpu"), stats
    assert not [k for k in stats if k.startswith("fallback")], stats
    assert not [k for k in stats if k.endswith(":fallback")], stats


def _consistent(res: Results) -> None:
    """Shared prefixes hit the radix cache; concurrent requests and the request after an
    abort give what the sequential ones gave."""
    prompts = _prompts()
    assert len(res.sequential) == len(prompts)
    assert res.sequential[2].cached_tokens > 0 and res.sequential[3].cached_tokens > 0
    bad = _identical(res.concurrent, [res.sequential[i % len(prompts)] for i in range(16)])
    assert not bad, f"concurrent requests {bad} differ from the sequential ones"
    assert res.abort_chunks == 3 and res.after_abort is not None
    assert res.after_abort.tokens == res.sequential[5].tokens
    assert "Traceback" not in res.log, res.log[-4000:]


_HF: dict[str, list[str]] = {}


def _transformers_greedy(arch: str) -> list[str]:
    """transformers' greedy completions of the workload's prompts (fp32, ``MAX_TOKENS``)."""
    import torch
    from test_e2e import MAX_TOKENS
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if arch not in _HF:
        path = str(demo.ensure(arch))
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        texts = []
        with torch.inference_mode():
            for p in _prompts():
                ids = tok(p, return_tensors="pt").input_ids
                out = model.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False)
                texts.append(tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
        _HF[arch] = texts
    return _HF[arch]


def _same_as_transformers(res: Results, arch: str, what: str) -> None:
    ref = _transformers_greedy(arch)
    differ = [
        (i, c.text, r)
        for i, (c, r) in enumerate(zip(res.sequential, ref, strict=True))
        if c.text != r
    ]
    print(
        f"[e2e-moe] {arch} {what} vs transformers (fp32): {len(ref) - len(differ)}/{len(ref)} same"
    )
    assert not differ, differ


def test_qwen2_moe_starts_on_torch_native_and_matches_transformers(moe_served: Any) -> None:
    """SGLang alone stops at Qwen2-MoE's first forward on a CPU (the shared-expert gate is a
    triton kernel); with sglang-rvv's torch gate its own torch path serves the model, and
    computes what transformers computes: the same greedy text for every prompt, in fp32."""
    res = moe_served("qwen2-moe", "torch_native")
    _consistent(res)
    assert "Qwen2-MoE's shared-expert gate (SGLang: a triton kernel) runs in torch" in res.log
    _same_as_transformers(res, "qwen2-moe", "torch_native")


@full
def test_qwen3_moe_on_torch_native_matches_transformers(moe_served: Any) -> None:
    res = moe_served("qwen3-moe", "torch_native")
    _consistent(res)
    _same_as_transformers(res, "qwen3-moe", "torch_native")


@needs_ops
@pytest.mark.parametrize("arch", [pytest.param("qwen3-moe", marks=full), pytest.param("qwen2-moe")])
def test_routed_moe_matches_transformers_and_ran_the_moe_ops(moe_served: Any, arch: str) -> None:
    """rvv + layer routing in fp32: every greedy completion is transformers' (which the
    torch_native server's are too), the workload is consistent, the MoE ops ran and nothing
    fell back."""
    ours = moe_served(arch, "rvv")
    _consistent(ours)
    stats = ours.stats
    print(
        f"[e2e-moe] {arch} rvv + routing op calls: "
        + ", ".join(
            f"{op} {stats.get(op, 0)}"
            for op in (*moe.MOE_OPS, moe.PACK_COUNT, "weight_packed_linear")
        )
    )
    _same_as_transformers(ours, arch, "rvv + routing")
    _moe_stats(stats)
    assert stats.get("weight_packed_linear", 0) > 0, stats  # attention (and shared expert)
    assert stats.get("attention decode:kernel", 0) > 0, stats


@needs_ops
@pytest.mark.parametrize("arch", [pytest.param("qwen3-moe", marks=full), pytest.param("qwen2-moe")])
def test_routed_moe_is_token_identical_to_torch_native_in_fp32(moe_served: Any, arch: str) -> None:
    ours, ref = moe_served(arch, "rvv"), moe_served(arch, "torch_native")
    seq = _identical(ours.sequential, ref.sequential)
    conc = _identical(ours.concurrent, ref.concurrent)
    print(
        f"[e2e-moe] {arch} rvv + routing vs torch_native (fp32): sequential "
        f"{len(ours.sequential) - len(seq)}/{len(ours.sequential)}, concurrent "
        f"{len(ours.concurrent) - len(conc)}/{len(ours.concurrent)} token-identical"
    )
    assert not seq and not conc, f"differ: sequential {seq}, concurrent {conc}"


@full
@needs_ops
@pytest.mark.parametrize("arch", demo.MOE_ARCHS)
def test_routed_moe_agrees_in_bf16(moe_served: Any, arch: str) -> None:
    ours, ref = moe_served(arch, "rvv", "bfloat16"), moe_served(arch, "torch_native", "bfloat16")
    first = 0
    worst = 0.0
    problems = []
    for i, (a, b) in enumerate(zip(ours.sequential, ref.sequential, strict=True)):
        n = min(BF16_AGREE, max(len(a.tokens), len(b.tokens)))
        if a.tokens[:n] != b.tokens[:n]:
            problems.append(f"prompt {i}: {a.tokens[:n]} vs {b.tokens[:n]}")
            continue
        first += 1
        diffs = [abs(x - y) for x, y in zip(a.logprobs[:n], b.logprobs[:n], strict=True)]
        worst = max([worst, *diffs])
    identical = len(ours.sequential) - len(_identical(ours.sequential, ref.sequential))
    print(
        f"[e2e-moe] {arch} rvv + routing vs torch_native (bf16): first {BF16_AGREE} tokens "
        f"agree {first}/{len(ours.sequential)}, max |logprob diff| {worst:.4f}, completions "
        f"identical {identical}/{len(ours.sequential)}"
    )
    assert not problems, "; ".join(problems)
    assert worst <= BF16_LOGPROB
    _moe_stats(ours.stats)


W8A8_TOP1 = 0.98
"""Share of teacher-forced positions whose top-1 token agrees with the dequantised model
(test_e2e_quant's W8A8 / W4A8 criterion)."""
EXACT_LOGPROB = 1e-3
"""test_e2e_quant's bound for formats whose activations stay unquantised (FP8 W8A16 in fp32
computes the dequantised model, fp32 rounding in another order)."""

_QUANT_OPS = {
    "w8a8": ("int8_scaled_mm_with_quant", "convert_weight_packed"),
    "awq": ("int4_scaled_mm_cpu", "convert_weight_packed_scale_zp"),
    "gptq": ("int4_scaled_mm_cpu", "convert_weight_packed_scale_zp"),
    "fp8": ("fp8_scaled_mm_cpu", "convert_weight_packed"),
}
"""Each format's linear-layer op and its load-time packing (counted by the dense hooks)."""


@full
@needs_ops
@pytest.mark.parametrize(
    ("arch", "fmt"),
    [("qwen3-moe", "w8a8"), ("qwen2-moe", "awq"), ("qwen2-moe", "gptq"), ("qwen2-moe", "fp8")],
)
def test_quantised_moe_agrees_with_its_dequantised_twin(
    tmp_path_factory: pytest.TempPathFactory, arch: str, fmt: str
) -> None:
    """A MoE demo model quantised (experts, shared expert and attention linears) served in fp32
    through the RVV ops against its dequantised fp32 twin on torch_native. The experts run in
    ``fused_experts_cpu``: ``INT8_W8A8`` and ``INT4_W4A8`` (AWQ / GPTQ) quantise the
    activations per token, so they get test_e2e_quant's W8A8 bound (teacher-forced top-1
    agreement); ``FP8_W8A16`` computes the dequantised model, so every top-1 and greedy
    completion must be the twin's and logprobs agree to ``EXACT_LOGPROB``. SGLang alone runs
    none of these experts on a CPU without AMX (triton, or an AMX assertion)."""
    from test_e2e_quant import _teacher_forced

    tmp = tmp_path_factory.mktemp(f"e2e-moe-{fmt}")
    ours = run_server(
        demo.ensure_quantized(arch, fmt),
        "rvv",
        routed=True,
        tmp=tmp,
        dtype="float32",
        score=True,
    )
    ref = run_server(
        demo.ensure_quantized(arch, fmt, dequantized=True),
        "torch_native",
        routed=False,
        tmp=tmp,
        dtype="float32",
        score=True,
    )
    positions, same, worst = _teacher_forced(ours, ref)
    greedy = len(ours.sequential) - len(_identical(ours.sequential, ref.sequential))
    stats = ours.stats
    op, pack = _QUANT_OPS[fmt]
    print(
        f"[e2e-moe] {arch} {fmt} (rvv, fp32) vs dequantised fp32 (torch_native): top-1 "
        f"{same}/{positions} ({same / positions:.4f}), max |logprob diff| {worst:.2e}, greedy "
        f"{greedy}/{len(ours.sequential)} identical; fused_experts_cpu "
        f"{stats.get('fused_experts_cpu')}, {op} {stats.get(op)}, {pack} {stats.get(pack)}"
    )
    assert positions >= 500
    if fmt == "fp8":
        assert same == positions and worst <= EXACT_LOGPROB
        assert greedy == len(ours.sequential)
    else:
        assert same / positions >= W8A8_TOP1
    _moe_stats(stats)
    # the attention (and shared expert) linears, packed once at load; the router stays
    # unquantised (weight_packed_linear)
    assert stats.get(op, 0) > 0 and stats.get(pack, 0) > 0, stats
