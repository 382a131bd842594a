"""The mixture-of-experts routing ops against float64 torch references written here:
topk_softmax_cpu, topk_sigmoid_cpu, grouped_topk_cpu, biased_grouped_topk_cpu and
fused_moe_router_cpu over expert counts {1, 8, 60, 128}, top-k {1, 2, 8}, tokens {1, 3, 16,
300}, logits in float32 / bfloat16 / float16; ties (lowest expert id first); bad inputs on
CPU and meta tensors; opcheck.

The kernels compute in fp32: two experts whose float64 selection values differ by a few fp32
ulps may come out in either order, so each slot's expert must have a reference selection
value within SEL_TOL of the reference's value for that slot (exactly the reference's ids
where the values tie exactly), and the weights are compared with the reference scores of the
experts the op chose.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import rvv_ops
import torch
from torch import Tensor

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
EXPERTS = (1, 8, 60, 128)
TOPKS = (1, 2, 8)
TOKENS = (1, 3, 16, 300)
SEL_TOL = 2e-5

OPS = torch.ops.sgl_kernel
SOFTMAX = OPS.topk_softmax_cpu.default
SIGMOID = OPS.topk_sigmoid_cpu.default
GROUPED = OPS.grouped_topk_cpu.default
BIASED = OPS.biased_grouped_topk_cpu.default
ROUTER = OPS.fused_moe_router_cpu.default


@dataclass(frozen=True)
class Spec:
    """What the reference computes for one call."""

    scoring: str  # "softmax" or "sigmoid"
    topk: int
    renormalize: bool
    bias: Tensor | None = None  # float64 [experts]
    bias_on_logits: bool = False
    softcap: float = 0.0
    groups: int = 1
    topk_group: int = 1
    group_score: str = "max"  # or "top2"
    scaling: float = 1.0


def reference(logits: Tensor, s: Spec) -> tuple[Tensor, Tensor, Tensor]:
    """float64 (scores, selection values, ids in order) of logits [tokens, experts]."""
    x = logits.double()
    if s.softcap > 0:
        x = s.softcap * torch.tanh(x / s.softcap)
    if s.bias is not None and s.bias_on_logits:
        x = x + s.bias
    score = torch.softmax(x, dim=-1) if s.scoring == "softmax" else torch.sigmoid(x)
    sel = score + s.bias if s.bias is not None and not s.bias_on_logits else score.clone()
    if s.groups > 1:
        tokens, experts = sel.shape
        grouped = sel.view(tokens, s.groups, experts // s.groups)
        if s.group_score == "max" or grouped.shape[-1] == 1:
            gval = grouped.max(dim=-1).values
        else:
            gval = grouped.topk(2, dim=-1).values.sum(dim=-1)
        order = torch.sort(gval, dim=-1, descending=True, stable=True).indices
        keep = torch.zeros_like(gval, dtype=torch.bool)
        keep.scatter_(1, order[:, : s.topk_group], True)
        mask = keep.repeat_interleave(experts // s.groups, dim=1)
        sel = sel.masked_fill(~mask, float("-inf"))
    ids = torch.sort(sel, dim=-1, descending=True, stable=True).indices[:, : s.topk]
    return score, sel, ids


def check(got: tuple[Tensor, Tensor], logits: Tensor, s: Spec, *, exact_ids: bool = False) -> None:
    weights, ids = got
    tokens = logits.shape[0]
    assert weights.dtype == torch.float32 and ids.dtype == torch.int32
    assert weights.shape == (tokens, s.topk) and ids.shape == (tokens, s.topk)
    score, sel, ref_ids = reference(logits, s)
    experts = logits.shape[1]
    chosen = ids.long()
    assert bool(((chosen >= 0) & (chosen < experts)).all()), ids
    assert all(len(set(row)) == s.topk for row in chosen.tolist()), "repeated expert ids"
    if exact_ids:
        torch.testing.assert_close(chosen, ref_ids, rtol=0, atol=0)
    else:
        want_sel = sel.gather(1, ref_ids)
        got_sel = sel.gather(1, chosen)
        assert bool(torch.isfinite(got_sel).all()), "an expert of a group that was not kept"
        torch.testing.assert_close(got_sel, want_sel, rtol=0, atol=SEL_TOL)
    want = score.gather(1, chosen)
    if s.renormalize:
        want = want / want.sum(dim=-1, keepdim=True)
    want = want * s.scaling
    torch.testing.assert_close(weights.double(), want, rtol=3e-5, atol=1e-12)


def logits_for(tokens: int, experts: int, dtype: torch.dtype, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(tokens, experts, generator=g, dtype=torch.float64) * 8 - 4).to(dtype)


def bias_for(experts: int, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed + 7)
    return (torch.rand(experts, generator=g, dtype=torch.float64) - 0.5).float()


def cases() -> list[tuple[int, int, int]]:
    out = []
    k = 0
    for e in EXPERTS:
        for topk in TOPKS:
            if topk <= e:
                out.append((e, topk, TOKENS[k % len(TOKENS)]))
                k += 1
    # every token count with every expert count at top-1 as well
    out += [(e, 1, t) for e in EXPERTS for t in TOKENS if (e, 1, t) not in out]
    return out


CASES = cases()


def groups_for(experts: int, topk: int) -> tuple[int, int]:
    """(num_expert_group, topk_group) with topk <= topk_group * experts per group."""
    if experts == 1:
        return 1, 1
    groups = {8: 4, 60: 6, 128: 8}[experts]
    per = experts // groups
    return groups, max(2, -(-topk // per))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("experts", "topk", "tokens"), CASES)
@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
def test_topk_scores(
    scoring: str, experts: int, topk: int, tokens: int, dtype: torch.dtype
) -> None:
    op = SOFTMAX if scoring == "softmax" else SIGMOID
    seed = experts * 1000 + topk * 10 + tokens
    logits = logits_for(tokens, experts, dtype, seed)
    hidden = torch.randn(tokens, 24).to(dtype)
    for renormalize in (False, True):
        s = Spec(scoring, topk, renormalize)
        check(op(hidden, logits, topk, renormalize, None), logits, s)
        bias = bias_for(experts, seed)
        s = Spec(scoring, topk, renormalize, bias=bias.double())
        check(op(hidden, logits, topk, renormalize, bias), logits, s)
        # SGLang calls them by keyword
        got = op(
            hidden_states=hidden,
            gating_output=logits,
            topk=topk,
            renormalize=renormalize,
            correction_bias=bias.to(dtype),
        )
        check(got, logits, Spec(scoring, topk, renormalize, bias=bias.to(dtype).double()))
    w, i = (rvv_ops.topk_softmax if scoring == "softmax" else rvv_ops.topk_sigmoid)(
        hidden, logits, topk, True
    )
    check((w, i), logits, Spec(scoring, topk, True))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("experts", "topk", "tokens"), CASES)
def test_grouped_topk(experts: int, topk: int, tokens: int, dtype: torch.dtype) -> None:
    seed = experts * 1000 + topk * 10 + tokens + 1
    logits = logits_for(tokens, experts, dtype, seed)
    hidden = torch.randn(tokens, 24).to(dtype)
    groups, topk_group = groups_for(experts, topk)
    for renormalize in (False, True):
        # routed_scaling_factor does not scale the weights here (see csrc/moe_routing.cpp)
        got = GROUPED(hidden, logits, topk, renormalize, groups, topk_group, 0, 2.5, None)
        s = Spec("softmax", topk, renormalize, groups=groups, topk_group=topk_group)
        check(got, logits, s)
    got = rvv_ops.grouped_topk(hidden, logits, topk, False, groups, topk_group)
    check(got, logits, Spec("softmax", topk, False, groups=groups, topk_group=topk_group))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("experts", "topk", "tokens"), CASES)
def test_biased_grouped_topk(experts: int, topk: int, tokens: int, dtype: torch.dtype) -> None:
    seed = experts * 1000 + topk * 10 + tokens + 2
    logits = logits_for(tokens, experts, dtype, seed)
    hidden = torch.randn(tokens, 24).to(dtype)
    bias = bias_for(experts, seed)
    groups, topk_group = groups_for(experts, topk)
    for renormalize, scaling in ((False, None), (True, None), (True, 2.5)):
        got = BIASED(hidden, logits, bias, topk, renormalize, groups, topk_group, 0, scaling, None)
        s = Spec(
            "sigmoid",
            topk,
            renormalize,
            bias=bias.double(),
            groups=groups,
            topk_group=topk_group,
            group_score="top2",
            scaling=scaling or 1.0,
        )
        check(got, logits, s)
    got = rvv_ops.biased_grouped_topk(
        hidden, logits, bias, topk, True, groups, topk_group, routed_scaling_factor=1.5
    )
    s = Spec(
        "sigmoid",
        topk,
        True,
        bias=bias.double(),
        groups=groups,
        topk_group=topk_group,
        group_score="top2",
        scaling=1.5,
    )
    check(got, logits, s)


def test_deepseek_v3_shape() -> None:
    # 256 experts, 8 groups, 4 kept, top 8 (DeepSeek-V3's router), bias in bfloat16 too.
    logits = logits_for(16, 256, torch.float32, 5)
    hidden = torch.randn(16, 32)
    for bias in (bias_for(256, 5), bias_for(256, 6).bfloat16()):
        got = BIASED(hidden, logits, bias, 8, True, 8, 4, 0, 2.5, None)
        s = Spec(
            "sigmoid",
            8,
            True,
            bias=bias.double(),
            groups=8,
            topk_group=4,
            group_score="top2",
            scaling=2.5,
        )
        check(got, logits, s)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("experts", "topk", "tokens"), CASES)
def test_fused_moe_router(experts: int, topk: int, tokens: int, dtype: torch.dtype) -> None:
    seed = experts * 1000 + topk * 10 + tokens + 3
    g = torch.Generator().manual_seed(seed)
    hidden_size = 33
    hidden = (torch.rand(tokens, hidden_size, generator=g) * 4 - 2).to(dtype)
    for wdtype in {torch.float32, dtype}:
        weight = (torch.rand(experts, hidden_size, generator=g) - 0.5).to(wdtype)
        logits = hidden.double() @ weight.double().T
        for softcap, bias in ((30.0, None), (0.0, bias_for(experts, seed)), (5.0, None)):
            got = ROUTER(softcap, hidden, weight, topk, False, bias)
            s = Spec(
                "softmax",
                topk,
                False,
                bias=None if bias is None else bias.double(),
                bias_on_logits=True,
                softcap=softcap,
            )
            check(got, logits, s)
        # Grok's call: functools.partial(op, 30.0) with keywords
        got = ROUTER(30.0, hidden_states=hidden, gating_output=weight, topk=topk, renormalize=True)
        check(got, logits, Spec("softmax", topk, True, bias_on_logits=True, softcap=30.0))
        got = rvv_ops.fused_moe_router(30.0, hidden, weight, topk, False)
        check(got, logits, Spec("softmax", topk, False, bias_on_logits=True, softcap=30.0))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("distinct", [1, 2, 3])
def test_ties_go_to_lowest_id(dtype: torch.dtype, distinct: int) -> None:
    # Logits from a few values: many exact ties. torch.topk itself does not promise an order
    # among equal values; these ops take the lowest expert id (and group id) first.
    g = torch.Generator().manual_seed(distinct)
    values = torch.rand(distinct, generator=g, dtype=torch.float64) * 8 - 4
    for experts in (8, 60, 128):
        idx = torch.randint(0, distinct, (16, experts), generator=g)
        logits = values[idx].to(dtype)
        hidden = torch.randn(16, 8)
        for topk in (1, 2, 8):
            for op, scoring in ((SOFTMAX, "softmax"), (SIGMOID, "sigmoid")):
                got = op(hidden, logits, topk, True, None)
                check(got, logits, Spec(scoring, topk, True), exact_ids=True)
            groups, topk_group = groups_for(experts, topk)
            got = GROUPED(hidden, logits, topk, True, groups, topk_group, 0, None, None)
            s = Spec("softmax", topk, True, groups=groups, topk_group=topk_group)
            check(got, logits, s, exact_ids=True)
            bias = torch.full((experts,), 0.125)
            got = BIASED(hidden, logits, bias, topk, True, groups, topk_group, 0, None, None)
            s = Spec(
                "sigmoid",
                topk,
                True,
                bias=bias.double(),
                groups=groups,
                topk_group=topk_group,
                group_score="top2",
            )
            check(got, logits, s, exact_ids=True)


def test_every_token_same_expert_and_unchosen_experts() -> None:
    # One expert dominates every token (all choose it); most experts are never chosen.
    logits = torch.full((300, 60), -3.0)
    logits[:, 17] = 5.0
    logits[:, 42] = 4.0
    w, i = SOFTMAX(torch.randn(300, 8), logits, 2, True, None)
    assert bool((i[:, 0] == 17).all()) and bool((i[:, 1] == 42).all())
    check((w, i), logits, Spec("softmax", 2, True), exact_ids=True)


def test_strided_gating_output() -> None:
    base = logits_for(16, 130, torch.bfloat16, 9)
    logits = base[:, 1:129]  # row stride 130
    check(SOFTMAX(torch.randn(16, 4), logits, 8, True, None), logits, Spec("softmax", 8, True))
    logits_t = logits_for(128, 16, torch.float32, 10).t()  # last-dimension stride 16
    got = SIGMOID(torch.randn(16, 4), logits_t, 2, False, None)
    check(got, logits_t, Spec("sigmoid", 2, False))


def test_zero_tokens() -> None:
    for op in (SOFTMAX, SIGMOID):
        w, i = op(torch.randn(0, 8), torch.randn(0, 8), 2, True, None)
        assert w.shape == (0, 2) and i.shape == (0, 2)
    w, i = GROUPED(torch.randn(0, 8), torch.randn(0, 64), 8, True, 8, 3, 0, None, None)
    assert w.shape == (0, 8) and i.dtype == torch.int32
    w, i = ROUTER(30.0, torch.randn(0, 16), torch.randn(8, 16), 2, False, None)
    assert w.shape == (0, 2) and w.dtype == torch.float32


# ---- bad inputs ----


@dataclass(frozen=True)
class Bad:
    op: Any
    args: Callable[[str], tuple[Any, ...]]  # device -> arguments
    exc: type[Exception]
    words: tuple[str, ...]


def t(*shape: int, dtype: torch.dtype = torch.float32, device: str = "cpu") -> Tensor:
    return torch.randn(shape, device=device).to(dtype)


def sm(gating: Callable[[str], Tensor], topk: int = 2, bias: Any = None, tokens: int = 4) -> Any:
    return lambda d: (t(tokens, 16, device=d), gating(d), topk, True, bias and bias(d))


def grp(experts: int, topk: int, groups: int, topk_group: int, **kw: Any) -> Any:
    def args(d: str) -> tuple[Any, ...]:
        return (
            t(4, 16, device=d),
            t(4, experts, device=d),
            topk,
            True,
            groups,
            topk_group,
            kw.get("shared", 0),
            kw.get("scale"),
            kw.get("non_padded") and kw["non_padded"](d),
        )

    return args


def bgrp(experts: int, topk: int, groups: int, topk_group: int, **kw: Any) -> Any:
    def args(d: str) -> tuple[Any, ...]:
        a = grp(experts, topk, groups, topk_group, **kw)(d)
        bias = kw.get("bias", lambda dev: t(experts, device=dev))(d)
        return (a[0], a[1], bias, *a[2:])

    return args


def router(hidden: Any, weight: Any, topk: int = 2, cap: float = 30.0, bias: Any = None) -> Any:
    return lambda d: (cap, hidden(d), weight(d), topk, False, bias and bias(d))


def g48(d: str) -> Tensor:
    return t(4, 8, device=d)


BAD: dict[str, Bad] = {
    "softmax topk > experts": Bad(SOFTMAX, sm(g48, topk=9), ValueError, ("topk is 9", "8")),
    "softmax topk 0": Bad(SOFTMAX, sm(g48, topk=0), ValueError, ("topk is 0", ">= 1")),
    "sigmoid topk negative": Bad(SIGMOID, sm(g48, topk=-1), ValueError, ("topk is -1",)),
    "softmax no experts": Bad(
        SOFTMAX, sm(lambda d: t(4, 0, device=d), topk=1), ValueError, ("gating_output.size(1)",)
    ),
    "softmax gating 1-D": Bad(
        SOFTMAX, sm(lambda d: t(8, device=d)), ValueError, ("gating_output", "1-d")
    ),
    "softmax gating 3-D": Bad(
        SOFTMAX, sm(lambda d: t(4, 2, 8, device=d)), ValueError, ("gating_output", "3-d")
    ),
    "softmax token mismatch": Bad(
        SOFTMAX, sm(g48, tokens=5), ValueError, ("gating_output", "4 tokens", "5")
    ),
    "softmax gating float64": Bad(
        SOFTMAX,
        sm(lambda d: t(4, 8, dtype=torch.float64, device=d)),
        TypeError,
        ("gating_output", "torch.float64"),
    ),
    "sigmoid gating int32": Bad(
        SIGMOID,
        sm(lambda d: t(4, 8, dtype=torch.int32, device=d)),
        TypeError,
        ("gating_output", "torch.int32"),
    ),
    "softmax bias size": Bad(
        SOFTMAX, sm(g48, bias=lambda d: t(7, device=d)), ValueError, ("correction_bias", "[8]")
    ),
    "softmax bias 2-D": Bad(
        SOFTMAX,
        sm(g48, bias=lambda d: t(1, 8, device=d)),
        ValueError,
        ("correction_bias", "[1, 8]"),
    ),
    "sigmoid bias int": Bad(
        SIGMOID,
        sm(g48, bias=lambda d: t(8, dtype=torch.int64, device=d)),
        TypeError,
        ("correction_bias", "torch.int64"),
    ),
    "softmax hidden 1-D": Bad(
        SOFTMAX,
        lambda d: (t(4, device=d), t(4, 8, device=d), 2, True, None),
        ValueError,
        ("hidden_states", "1-d"),
    ),
    "grouped not divisible": Bad(
        GROUPED, grp(60, 2, 8, 2), ValueError, ("60", "num_expert_group = 8")
    ),
    "grouped num_expert_group 0": Bad(
        GROUPED, grp(64, 2, 0, 1), ValueError, ("num_expert_group is 0",)
    ),
    "grouped topk_group 0": Bad(GROUPED, grp(64, 2, 8, 0), ValueError, ("topk_group is 0",)),
    "grouped topk_group > groups": Bad(
        GROUPED, grp(64, 2, 8, 9), ValueError, ("topk_group is 9", "8")
    ),
    "grouped topk > candidates": Bad(
        GROUPED, grp(64, 8, 16, 1), ValueError, ("topk is 8", "1 * 4")
    ),
    "grouped topk > experts": Bad(GROUPED, grp(8, 9, 1, 1), ValueError, ("topk is 9",)),
    "grouped shared experts": Bad(
        GROUPED, grp(64, 2, 8, 2, shared=1), ValueError, ("num_fused_shared_experts is 1",)
    ),
    "grouped non padded": Bad(
        GROUPED,
        grp(64, 2, 8, 2, non_padded=lambda d: torch.tensor([3], device=d)),
        ValueError,
        ("num_token_non_padded",),
    ),
    "biased bias size": Bad(
        BIASED,
        bgrp(64, 2, 8, 2, bias=lambda d: t(63, device=d)),
        ValueError,
        ("correction_bias", "[64]"),
    ),
    "biased shared experts": Bad(
        BIASED, bgrp(64, 2, 8, 2, shared=2), ValueError, ("num_fused_shared_experts is 2",)
    ),
    "biased topk_group": Bad(BIASED, bgrp(64, 2, 8, 9), ValueError, ("topk_group is 9",)),
    "biased scaling inf": Bad(
        BIASED,
        bgrp(64, 2, 8, 2, scale=float("inf")),
        ValueError,
        ("routed_scaling_factor is inf",),
    ),
    "router hidden mismatch": Bad(
        ROUTER,
        router(lambda d: t(4, 16, device=d), lambda d: t(8, 17, device=d)),
        ValueError,
        ("gating_output", "17", "hidden_states.size(1) = 16"),
    ),
    "router topk": Bad(
        ROUTER,
        router(lambda d: t(4, 16, device=d), lambda d: t(8, 16, device=d), topk=9),
        ValueError,
        ("topk is 9", "gating_output.size(0) = 8"),
    ),
    "router cap negative": Bad(
        ROUTER,
        router(lambda d: t(4, 16, device=d), lambda d: t(8, 16, device=d), cap=-1.0),
        ValueError,
        ("moe_softcapping is -1",),
    ),
    "router hidden int": Bad(
        ROUTER,
        router(lambda d: t(4, 16, dtype=torch.int32, device=d), lambda d: t(8, 16, device=d)),
        TypeError,
        ("hidden_states", "torch.int32"),
    ),
    "router weight 1-D": Bad(
        ROUTER,
        router(lambda d: t(4, 16, device=d), lambda d: t(16, device=d)),
        ValueError,
        ("gating_output", "1-d"),
    ),
    "router bias size": Bad(
        ROUTER,
        router(
            lambda d: t(4, 16, device=d),
            lambda d: t(8, 16, device=d),
            bias=lambda d: t(9, device=d),
        ),
        ValueError,
        ("correction_bias", "[8]"),
    ),
}


def _check_raises(case: Bad, device: str) -> None:
    with pytest.raises(case.exc) as info:
        case.op(*case.args(device))
    message = str(info.value)
    for word in case.words:
        assert word in message, f"{word!r} not in {message!r}"


@pytest.mark.parametrize("name", BAD)
def test_bad_input_cpu(name: str) -> None:
    _check_raises(BAD[name], "cpu")


@pytest.mark.parametrize("name", BAD)
def test_bad_input_fake(name: str) -> None:
    _check_raises(BAD[name], "meta")


def test_mixed_devices() -> None:
    with pytest.raises(ValueError, match="gating_output is on device cpu; expected"):
        SOFTMAX(t(4, 16, device="meta"), t(4, 8), 2, True, None)
    with pytest.raises(ValueError, match="correction_bias is on device cpu; expected"):
        BIASED(t(4, 16, device="meta"), t(4, 8, device="meta"), t(8), 2, True, 1, 1, 0, None, None)
    cpu = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    with pytest.raises(ValueError, match="topk_softmax_cpu: gating_output is on device meta"):
        SOFTMAX.redispatch(cpu, t(4, 16), t(4, 8, device="meta"), 2, True, None)


# ---- opcheck ----

OPCHECK: dict[str, Callable[[torch.dtype], tuple[Any, tuple[Any, ...]]]] = {
    "softmax": lambda dt: (SOFTMAX, (t(5, 16, dtype=dt), t(5, 60, dtype=dt), 8, True, None)),
    "softmax bias": lambda dt: (SOFTMAX, (t(3, 16, dtype=dt), t(3, 8, dtype=dt), 2, False, t(8))),
    "sigmoid": lambda dt: (SIGMOID, (t(1, 16, dtype=dt), t(1, 128, dtype=dt), 1, True, t(128))),
    "grouped": lambda dt: (
        GROUPED,
        (t(4, 16, dtype=dt), t(4, 64, dtype=dt), 8, True, 8, 3, 0, None, None),
    ),
    "biased": lambda dt: (
        BIASED,
        (t(4, 16, dtype=dt), t(4, 64, dtype=dt), t(64), 8, True, 8, 4, 0, 2.5, None),
    ),
    "router": lambda dt: (ROUTER, (30.0, t(4, 32, dtype=dt), t(8, 32), 2, False, None)),
    "zero tokens": lambda dt: (SOFTMAX, (t(0, 16, dtype=dt), t(0, 8, dtype=dt), 2, True, None)),
}


@pytest.mark.parametrize("sample", OPCHECK)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck(dtype: torch.dtype, sample: str) -> None:
    op, args = OPCHECK[sample](dtype)
    torch.library.opcheck(op, args)
