"""Property-based differential tests of rvv-attention's ``decode`` / ``extend`` on the
kernel path (``RVV_ATTENTION_IMPL=kernel``: the rvv-ops kernels; a silent fallback raises)
against the conformance suite's fp64 reference and tolerance model.

Hypothesis draws whole batches as conformance cases (:class:`conformance.cases.DecodeCase`
/ :class:`~conformance.cases.ExtendCase`): 1-6 decode requests of lengths 0-300 (0 where the
call allows it), 1-5 extend requests of prefixes 0-120 and 0-40 new tokens, GQA ratios 1, 2,
3, 5, 6, 7, head sizes 1-160 with D != Dv and MLA (V a view of K), fp32 / bf16 / fp16
queries, same-dtype, fp8 e4m3 / e5m2 and INT8 caches, int32 / int64 tables, sliding windows,
logit caps, sinks, split counts, causal or not, new K/V written / given / read from the
cache, rows of q of no request. The conformance builders put every request on shuffled
cache rows with strided cache views (and decode's q, k, v as views of one qkv row).

Expectations (each property below checks one):

- Every output matches :func:`conformance.reference.attention` within
  :func:`conformance.reference.allowed_error`; the caches afterwards hold exactly the
  expected writes (bit for bit); rows of q of no request are left alone.
- Cache rows no request's table names are filled with NaN (fp8 / fp16 / bf16 / fp32 caches)
  or get NaN scales (INT8 caches) before the call: an implementation that reads outside a
  request's rows turns some output into NaN and fails the comparison.
- A request of length 0 gets zeros, never NaN.
- A NaN in one request's q never reaches another request's output (which still matches
  the reference); what the poisoned request itself gets is not specified.
- +-Inf, the largest finite values and NaN in one request's cached K / V (same-dtype
  caches) never reach another request's output.
- Subnormal values in q (every other element) are no special case: outputs stay within the
  reference's tolerance (flushed to zero or not, they are far below atol).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch
from conformance.cases import (
    DTYPES,
    DecodeCase,
    DecodeRun,
    ExtendCase,
    ExtendRun,
    expected_decode_cache,
    expected_extend_cache,
    extend_slack,
    make_decode,
    make_extend,
    reference_decode,
    reference_extend,
)
from conformance.kvcache import KvPool, raw, spare_rows
from conformance.reference import assert_matches
from conformance.test_attention import (
    call_decode,
    call_extend,
    check_cache,
    kernel_rejects,
)
from hypothesis import assume, given
from hypothesis import strategies as st
from torch import Tensor

# --------------------------------------------------------------------------------------
# Generators

# (Hq / Hkv, Hkv): ratios 1..7 including 3, 5, 6, 7; at most 16 query heads
GQA_RATIOS = (1, 2, 3, 5, 6, 7)
HEAD_SIZES = (1, 2, 3, 8, 16, 17, 24, 31, 40, 64, 80, 96, 128, 160)
CACHES = ("same", "e4m3", "e5m2", "int8")


@st.composite
def heads(draw: st.DrawFn) -> tuple[int, int]:
    hkv = draw(st.integers(1, 3))
    ratio = draw(st.sampled_from(GQA_RATIOS))
    return hkv * ratio, hkv


@st.composite
def features(draw: st.DrawFn, mla_ok: bool) -> dict[str, Any]:
    """The fields DecodeCase and ExtendCase share."""
    cache = draw(st.sampled_from(CACHES))
    dim = draw(st.sampled_from(HEAD_SIZES))
    mla = mla_ok and cache != "int8" and draw(st.booleans()) and dim > 1
    if mla:
        # SGLang's MLA pool: one KV head, V a view of K's first Dv elements
        hq = draw(st.integers(1, 8))
        dims = (dim, draw(st.integers(1, dim)))
        head_counts = (hq, 1)
    else:
        dims = (dim, draw(st.sampled_from(HEAD_SIZES)) if draw(st.booleans()) else dim)
        head_counts = draw(heads())
    return {
        "heads": head_counts,
        "dims": dims,
        "dtype": draw(st.sampled_from(DTYPES)),
        "cache": cache,
        "table": draw(st.sampled_from((torch.int32, torch.int64))),
        "window": draw(st.one_of(st.just(0), st.integers(1, 40), st.integers(100, 400))),
        "logit_cap": draw(st.sampled_from((0.0, 0.0, 0.5, 2.0, 30.0))),
        "sinks": draw(st.sampled_from((None, None, torch.float32, torch.bfloat16))),
        "mla": mla,
    }


@st.composite
def decode_cases(draw: st.DrawFn) -> DecodeCase:
    fields = draw(features(mla_ok=True))
    write = draw(st.booleans())
    low = 1 if write else 0  # a request that writes its new token has one
    lens = draw(st.lists(st.integers(low, 300), min_size=1, max_size=6))
    return DecodeCase(lens=tuple(lens), write=write, splits=draw(st.integers(1, 16)), **fields)


@st.composite
def extend_cases(draw: st.DrawFn) -> ExtendCase:
    fields = draw(features(mla_ok=True))
    kv = draw(st.sampled_from(("write", "given", "shared")))
    if fields["mla"]:
        kv = "write"  # the MLA pool writes K (and so V) in one buffer
    reqs = draw(
        st.lists(st.tuples(st.integers(0, 120), st.integers(0, 40)), min_size=1, max_size=5)
    )
    case = ExtendCase(
        reqs=tuple(reqs),
        kv=kv,
        causal=draw(st.booleans()),
        gaps=draw(st.booleans()),
        **fields,
    )
    # documented: the kernel path rejects this (KernelUnavailableError): the conformance
    # matrix and test_regressions.py test that
    assume(not kernel_rejects(case))
    return case


# --------------------------------------------------------------------------------------
# Calls through rvv-attention's public API: conformance.test_attention's call_decode /
# call_extend (conftest.py sets RVV_ATTENTION_IMPL=kernel for every test)


def poison(pool: KvPool, rows: Tensor, value: float = math.nan) -> None:
    """Fills cache rows `rows` of K and V with `value` (INT8 caches: their scales)."""
    if rows.numel() == 0:
        return
    if pool.k_scales is not None and pool.v_scales is not None:
        pool.k_scales[rows] = value
        pool.v_scales[rows] = value
        return
    for cache in (pool.k, pool.v):
        # raw(): torch 2.6 (the riscv64 root's) cannot index fp8 tensors
        fill = torch.full(raw(cache)[rows].shape, value).to(cache.dtype)
        raw(cache)[rows] = raw(fill)


def decode_run(case: DecodeCase, seed: int) -> DecodeRun:
    """The case's batch with the spare cache rows poisoned (see the module docstring)."""
    run = make_decode(case, seed)
    poison(run.pool, spare_rows(run.pool))
    return run


def extend_run(case: ExtendCase, seed: int) -> ExtendRun:
    """The case's batch with the spare cache rows poisoned."""
    run = make_extend(case, seed, writes=case.kv == "write")
    poison(run.pool, spare_rows(run.pool))
    return run


def check_decode(run: DecodeRun, what: str) -> Tensor:
    """Calls decode; checks the caches and the outputs against the reference; returns the
    reference."""
    expected_cache = expected_decode_cache(run)
    call_decode(run)
    check_cache(run.pool, expected_cache)
    expected = reference_decode(run)
    assert_matches(run.args["output"], expected, what)
    return expected


def check_extend(run: ExtendRun, what: str) -> None:
    expected_cache = expected_extend_cache(run)
    call_extend(run)
    check_cache(run.pool, expected_cache)
    assert_matches(run.args["o_extend"], reference_extend(run), what, extend_slack(run))


SEEDS = st.integers(0, 2**31 - 1)


# --------------------------------------------------------------------------------------
# Properties


@given(case=decode_cases(), seed=SEEDS)
def test_decode_matches_reference(case: DecodeCase, seed: int) -> None:
    check_decode(decode_run(case, seed), f"{case} seed {seed}")


@given(case=extend_cases(), seed=SEEDS)
def test_extend_matches_reference(case: ExtendCase, seed: int) -> None:
    check_extend(extend_run(case, seed), f"{case} seed {seed}")


@given(case=decode_cases(), seed=SEEDS)
def test_decode_empty_requests_get_zeros(case: DecodeCase, seed: int) -> None:
    case = replace(case, write=False, lens=(0, *case.lens, 0))
    run = decode_run(case, seed)
    check_decode(run, f"{case} seed {seed}")
    out = run.args["output"]
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    assert torch.equal(out[-1], torch.zeros_like(out[-1]))


def _others(n: int, b: int) -> list[int]:
    return [i for i in range(n) if i != b]


@given(case=decode_cases(), seed=SEEDS, data=st.data())
def test_decode_nan_in_q_stays_in_its_request(case: DecodeCase, seed: int, data: Any) -> None:
    assume(len(case.lens) > 1)
    run = decode_run(case, seed)
    q = run.args["query"]
    b = data.draw(st.integers(0, q.shape[0] - 1), label="poisoned request")
    h = data.draw(st.integers(0, q.shape[1] - 1), label="head")
    d = data.draw(st.integers(0, q.shape[2] - 1), label="element")
    q[b, h, d] = math.nan
    expected_cache = expected_decode_cache(run)
    call_decode(run)
    check_cache(run.pool, expected_cache)
    rest = _others(q.shape[0], b)
    assert_matches(run.args["output"][rest], reference_decode(run)[rest], f"{case} seed {seed}")


@given(case=extend_cases(), seed=SEEDS, data=st.data())
def test_extend_nan_in_q_stays_in_its_request(case: ExtendCase, seed: int, data: Any) -> None:
    assume(sum(1 for _, e in case.reqs if e) > 1)
    run = extend_run(case, seed)
    q = run.args["q_extend"]
    b = data.draw(st.sampled_from([i for i, (_, e) in enumerate(case.reqs) if e]), label="req")
    row = run.starts[b] + data.draw(st.integers(0, case.reqs[b][1] - 1), label="row")
    q[row, data.draw(st.integers(0, q.shape[1] - 1), label="head"), 0] = math.nan
    expected_cache = expected_extend_cache(run)
    call_extend(run)
    check_cache(run.pool, expected_cache)
    mine = slice(run.starts[b], run.starts[b] + case.reqs[b][1])
    out, expected = run.args["o_extend"].clone(), reference_extend(run)
    out[mine], expected[mine] = 0, 0
    assert_matches(out, expected, f"{case} seed {seed}", extend_slack(run))


SPECIALS = st.sampled_from(("inf", "-inf", "max", "-max", "nan"))


def special(dtype: torch.dtype, kind: str) -> float:
    big = torch.finfo(dtype).max
    return {"inf": math.inf, "-inf": -math.inf, "max": big, "-max": -big, "nan": math.nan}[kind]


@given(case=decode_cases(), seed=SEEDS, kind=SPECIALS, data=st.data())
def test_decode_special_k_v_stay_in_their_request(
    case: DecodeCase, seed: int, kind: str, data: Any
) -> None:
    # same-dtype caches hold +-Inf and the largest finite values as they are
    case = replace(case, cache="same", write=False)
    assume(sum(1 for n in case.lens if n) > 1)
    run = decode_run(case, seed)
    b = data.draw(st.sampled_from([i for i, n in enumerate(case.lens) if n]), label="request")
    rows = run.pool.rows(b, 0, case.lens[b])
    pick = data.draw(st.lists(st.integers(0, len(rows) - 1), min_size=1, max_size=3))
    poison(run.pool, rows[pick], special(case.dtype, kind))
    call_decode(run)
    rest = _others(len(case.lens), b)
    assert_matches(run.args["output"][rest], reference_decode(run)[rest], f"{case} seed {seed}")


@given(case=decode_cases(), seed=SEEDS, exponent=st.integers(1, 24))
def test_decode_subnormal_inputs(case: DecodeCase, seed: int, exponent: int) -> None:
    run = decode_run(case, seed)
    # the smallest normal of the query's dtype times 2^-exponent: a subnormal (or zero, past
    # the dtype's mantissa bits)
    tiny = torch.finfo(case.dtype).tiny * 2.0**-exponent
    q = run.args["query"]
    q[..., ::2] = (q[..., ::2].float() * tiny).to(q.dtype)
    check_decode(run, f"{case} seed {seed} subnormal 2^-{exponent}")
