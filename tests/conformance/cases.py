"""The case matrix and the batch builders every implementation's conformance test uses.

A :class:`DecodeCase` / :class:`ExtendCase` describes one batch (shapes, dtypes, cache kind,
features); :func:`make_decode` / :func:`make_extend` build it over a
:func:`conformance.kvcache.make_pool` cache, with the arguments named as the rvv-ops ops'
schemas name them (the other implementations map from those), and
:func:`reference_decode` / :func:`reference_extend` give the fp64 reference of what the
implementation must produce from the cache as it leaves it.

The matrix: every head size (64, 80, 128, 256, and odd ones down to 1) x GQA shape (ratios
6, 7, 1 and 3, 2 ...) x query dtype, context lengths around the kernels' blocks (1, 2, 17,
255-257, 1000, 4097) and length 0, each cache kind (same dtype, fp8 e4m3 / e5m2 with
scales, int8 with per-token scales), windows, logit caps, sinks, MLA (V a view of K),
D != Dv, split counts, int32 / int64 tables, extend with and without prefix, empty
requests, rows of no request, non-causal, new K/V given, written by the implementation or
read from the cache.

Sampling: cases marked ``quick`` form the subset run on riscv64 (emulated: every case
there costs minutes) and with ``CONFORMANCE=quick``; :func:`skip_unless_selected` skips
the others with the reason, ``CONFORMANCE=full`` runs them anyway. The rvv-ops ops run
the whole matrix natively; implementations layered on them (rvv-attention, whose kernel
path calls the same ops) run every case but the non-quick ones of the shape x dtype x
cache grid (``*_GRID``), see :func:`layered_sample`.
"""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Generic, NamedTuple, Protocol, TypeVar

import torch
from torch import Tensor

from conformance.kvcache import (
    KvPool,
    gen,
    make_pool,
    quantize_int8,
    randn,
    raw,
    spare_rows,
    store,
)
from conformance.reference import attention, p_rounding_slack, rounds_p, window_of_ops

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
DTYPES = (BF16, F16, F32)


def quick_reason() -> str:
    """Why only the quick cases run ("" when all do)."""
    choice = os.environ.get("CONFORMANCE", "")
    if choice == "full":
        return ""
    if choice == "quick":
        return "CONFORMANCE=quick: quick conformance subset"
    if platform.machine() == "riscv64":
        return "riscv64 (usually emulated): quick conformance subset"
    return ""


def skip_unless_selected(quick_case: bool) -> None:
    """Skips a case outside the quick subset when only that runs, saying why."""
    import pytest

    why = quick_reason()
    if why and not quick_case:
        pytest.skip(f"{why} (CONFORMANCE=full runs this case)")


def layered_sample(names: dict[str, Any], grid: frozenset[str]) -> list[str]:
    """The cases an implementation layered on the rvv-ops ops runs: every feature and small
    case, and of the grid (which the ops' own file covers whole) the quick ones."""
    return [n for n, c in names.items() if n not in grid or c.quick]


class Case(Protocol):
    """What a batch's case tells :class:`OpRun`: its op and its cache kind."""

    OP: ClassVar[str]  # torch.ops.sgl_kernel.<OP>_cpu, or <OP>_int8_cpu for an int8 cache

    @property
    def cache(self) -> str: ...


CaseT = TypeVar("CaseT", bound=Case)


@dataclass
class OpRun(Generic[CaseT]):
    """A batch for one rvv-ops attention op: its arguments keyed by the op schema's names."""

    case: CaseT
    pool: KvPool
    args: dict[str, Any]

    @property
    def op(self) -> Any:
        base = self.case.OP
        name = f"{base}_int8_cpu" if self.case.cache == "int8" else f"{base}_cpu"
        return getattr(torch.ops.sgl_kernel, name).default

    def call(self) -> None:
        """Calls the rvv-ops op on the arguments (positionally, as SGLang does)."""
        op = self.op
        op(*[self.args[a.name] for a in op._schema.arguments])


def _pool(g: torch.Generator, lens: tuple[int, ...], case: Any, spare: int = 5) -> KvPool:
    """make_pool for requests of `lens` tokens in a case's KV heads, dims, dtype, table,
    cache kind and MLA layout, with `spare` cache rows of no request."""
    return make_pool(
        g, lens, kv_heads=case.heads[1], dims=case.dims, dtype=case.dtype, cache=case.cache,
        table=case.table, mla=case.mla, spare=spare,
    )  # fmt: skip


def _shared_args(
    g: torch.Generator, pool: KvPool, case: Any, lens: tuple[int, ...]
) -> dict[str, Any]:
    """The arguments decode and extend share (the ops' schema names), for requests of
    `lens` tokens; the sinks drawn from `g`."""
    sinks = None if case.sinks is None else randn(g, case.heads[0], dtype=case.sinks, scale=2.0)
    return {
        "k_scale": pool.k_scale,
        "v_scale": pool.v_scale,
        "k_scale_buf": pool.k_scales,
        "v_scale_buf": pool.v_scales,
        "req_to_token": pool.req_to_token,
        "req_pool_indices": pool.req_pool_indices,
        "seq_lens": torch.tensor(lens, dtype=torch.int64),
        "sm_scale": 1.0 / math.sqrt(case.dims[0]),
        "logit_cap": case.logit_cap,
        "is_cross_attention": False,
        "sliding_window_size": case.window,
        "encoder_lens": None,
        "sinks": sinks,
    }


C = TypeVar("C")


def _matrix(
    grid: dict[str, C], features: dict[str, C], small: dict[str, C]
) -> tuple[dict[str, C], frozenset[str], frozenset[str]]:
    """All cases (the grid's, the feature cases, the small ones, in that order), the names
    of the grid and of the small cases."""
    names = [*grid, *features, *small]
    assert len(set(names)) == len(names), "a case name stands twice"
    return {**grid, **features, **small}, frozenset(grid), frozenset(small)


# --------------------------------------------------------------------------------------
# Decode


@dataclass(frozen=True)
class DecodeCase:
    OP: ClassVar[str] = "decode_attention"
    lens: tuple[int, ...]  # seq_lens (counting the new token); 0: an empty request
    heads: tuple[int, int] = (4, 2)  # (Hq, Hkv)
    dims: tuple[int, int] = (64, 64)  # (D, Dv)
    dtype: torch.dtype = BF16
    cache: str = "same"  # same, e4m3, e5m2, int8
    table: torch.dtype = torch.int32  # req_to_token's dtype
    write: bool = True  # key/value given (written at loc by the implementation)
    window: int = 0  # the ops' sliding_window_size: SGLang's W + 1, 0: none
    logit_cap: float = 0.0
    sinks: torch.dtype | None = None
    splits: int = 8  # KV splits of the ops' attn_logits
    mla: bool = False  # V a view of K's first Dv elements
    quick: bool = False


LENS = (1, 2, 17, 255, 256, 257, 1000)
QUICK_LENS = (1, 17, 257)
GQA = ((12, 2), (7, 1), (4, 4))
HEAD_SIZES = (64, 80, 128, 256)


def _name(dtype: torch.dtype) -> str:
    return str(dtype)[6:]


def _grid() -> Iterator[tuple[str, int, dict[str, Any]]]:
    """The shape x dtype x cache grid decode and extend share: each point's case name, its
    index ``n`` and the fields both case kinds take from it. Head size x GQA shape x dtype
    (``n`` rotates the lengths and the table dtype; quick: two shapes, one dtype each), then
    each fp8 / int8 cache kind x dtype (``n``: the dtype's index; quick: the first)."""
    for i, d in enumerate(HEAD_SIZES):
        for j, heads in enumerate(GQA):
            for k, dtype in enumerate(DTYPES):
                n = i * 9 + j * 3 + k
                fields = {
                    "heads": heads,
                    "dims": (d, d),
                    "dtype": dtype,
                    "table": (torch.int32, torch.int64)[n % 2],
                    "quick": (i, j) in ((2, 0), (1, 1)) and k == i % 3,
                }
                yield f"D{d}-{heads[0]}/{heads[1]}-{_name(dtype)}", n, fields
    for cache in ("e4m3", "e5m2", "int8"):
        for k, dtype in enumerate(DTYPES):
            fields = {
                "heads": (12, 2),
                "dims": (128, 128),
                "dtype": dtype,
                "cache": cache,
                "table": (torch.int64, torch.int32)[k % 2],
                "quick": k == 0,
            }
            yield f"{cache}-{_name(dtype)}", k, fields


def decode_cases() -> tuple[dict[str, DecodeCase], frozenset[str], frozenset[str]]:
    """The decode cases, the names of the shape x dtype x cache grid, and of the small
    cases (tiny and odd shapes, every feature on small batches)."""
    grid: dict[str, DecodeCase] = {}
    # every head size x GQA shape x dtype, the context lengths mixed in one batch; every
    # fp8 / int8 cache kind x dtype
    for name, n, fields in _grid():
        lens: tuple[int, ...]
        if "cache" in fields:
            lens = QUICK_LENS if n == 0 else LENS
            write = n != 1
        else:
            lens = QUICK_LENS if fields["quick"] else LENS[n % 3 :] + LENS[: n % 3]
            write = n % 4 != 3
        grid[name] = DecodeCase(lens=lens, write=write, **fields)
    base = DecodeCase(lens=(1, 2, 17, 256, 257, 300), heads=(8, 2), dims=(80, 80))
    features: dict[str, DecodeCase] = {
        "window 1": replace(base, window=1, quick=True),
        "window 2": replace(base, window=2),
        "window 17": replace(base, window=17, dtype=F16),
        "window 300": replace(base, window=300),
        "window fp8": replace(base, window=40, cache="e4m3"),
        "window int8": replace(base, window=40, cache="int8", quick=True),
        "cap 30": replace(base, logit_cap=30.0),
        "cap 2": replace(base, logit_cap=2.0, dtype=F32, quick=True),
        "sinks fp32": replace(base, sinks=F32, quick=True),
        "sinks bf16": replace(base, sinks=BF16, dtype=F16),
        "cap window sinks int8": replace(base, logit_cap=5.0, window=100, sinks=F32, cache="int8"),
        "splits 1": replace(base, splits=1, quick=True),
        "splits 3": replace(base, splits=3),
        "splits 64": replace(base, splits=64),
        "batch 8 of length 1": replace(base, lens=(1,) * 8, quick=True),
        "batch 1": replace(base, lens=(1000,)),
        "4097": replace(base, lens=(4097, 3), heads=(12, 2), dims=(128, 128)),
        "MLA 576/512": DecodeCase(
            lens=(1, 17, 257), heads=(8, 1), dims=(576, 512), mla=True, quick=True
        ),
        "MLA fp8": DecodeCase(lens=(2, 100), heads=(4, 1), dims=(576, 512), mla=True, cache="e5m2"),
        "D != Dv": DecodeCase(lens=(5, 70), heads=(6, 3), dims=(96, 64), cache="int8"),
    }
    # small and odd shapes, empty requests, every feature on fp32 (all quick: cheap)
    small = DecodeCase(lens=(5, 1, 13), dims=(16, 16), dtype=F32, table=torch.int64, quick=True)
    small_cases: dict[str, DecodeCase] = {
        "small": small,
        "small no write": replace(small, write=False, lens=(4, 0, 9)),
        "empty and one": replace(small, write=False, lens=(0, 1, 0)),
        "odd dims 17/9 hq7-hkv1": replace(small, heads=(7, 1), dims=(17, 9), lens=(3, 30)),
        "hq6-hkv2 D24": replace(small, heads=(6, 2), dims=(24, 24), lens=(2, 65, 1)),
        "hq6-hkv3 D40 bf16": replace(small, dtype=BF16, heads=(6, 3), dims=(40, 40), lens=(7, 70)),
        "mha D8 fp16": replace(small, dtype=F16, heads=(3, 3), dims=(8, 8), lens=(1, 2, 3, 4)),
        "D1": replace(small, heads=(2, 1), dims=(1, 1), lens=(6,)),
        "small window 1": replace(small, window=1, lens=(5, 1, 20)),
        "small window 4 bf16": replace(small, dtype=BF16, window=4, lens=(2, 9, 33)),
        "window longer than seq": replace(small, window=101, lens=(5, 12)),
        "small cap 0.8": replace(small, logit_cap=0.8, lens=(9, 31)),
        "small sinks": replace(small, sinks=F32, heads=(6, 2), lens=(1, 18)),
        "sinks empty": replace(small, sinks=F32, write=False, lens=(0, 5)),
        "window cap sinks fp16": replace(
            small, dtype=F16, window=5, logit_cap=2.0, sinks=F32, lens=(3, 11)
        ),
        "int32 table": replace(small, table=torch.int32, lens=(4, 8)),
        "small e4m3": replace(small, cache="e4m3", lens=(6, 17)),
        "small e5m2 bf16": replace(small, dtype=BF16, cache="e5m2", lens=(3, 25)),
        "e4m3 no write window": replace(small, cache="e4m3", write=False, window=3, lens=(8,)),
        "small int8": replace(small, cache="int8", lens=(5, 1, 40)),
        "int8 bf16 hq7 33/20": replace(
            small, dtype=BF16, cache="int8", heads=(7, 1), dims=(33, 20), lens=(2, 19)
        ),
        "int8 no write sinks": replace(small, cache="int8", write=False, sinks=F32, lens=(4,)),
        "MLA 24/16 no write": replace(
            small, heads=(4, 1), dims=(24, 16), mla=True, write=False, lens=(7, 3)
        ),
        "long context D32": replace(
            small, heads=(4, 1), dims=(32, 32), lens=(300, 129), quick=False
        ),
    }
    return _matrix(grid, features, small_cases)


DECODE_CASES, DECODE_GRID, DECODE_SMALL = decode_cases()


@dataclass
class DecodeRun(OpRun[DecodeCase]):
    """A decode batch: the ops' arguments (schema names) and what the reference needs."""

    key: Tensor | None = None
    value: Tensor | None = None


def make_decode(case: DecodeCase, seed: int = 0) -> DecodeRun:
    g = gen(seed)
    hq, hkv = case.heads
    dim, dim_v = case.dims
    batch = len(case.lens)
    pool = _pool(g, case.lens, case)
    q_scale = 3.0 if case.logit_cap else 1.0
    key = value = None
    if case.mla:
        query = randn(g, batch, hq, dim, dtype=case.dtype, scale=q_scale)
        if case.write:
            key = randn(g, batch, hkv, dim, dtype=case.dtype)
            value = key[..., :dim_v]  # SGLang's MLA decode passes v = k[..., :kv_lora_rank]
    elif dim == dim_v:
        # q, k, v as views of one qkv projection, as SGLang's layers produce them
        qkv = randn(g, batch, (hq + 2 * hkv) * dim, dtype=case.dtype)
        qkv[:, : hq * dim] *= q_scale
        query = qkv[:, : hq * dim].view(batch, hq, dim)
        if case.write:
            key = qkv[:, hq * dim : (hq + hkv) * dim].view(batch, hkv, dim)
            value = qkv[:, (hq + hkv) * dim :].view(batch, hkv, dim)
    else:
        query = randn(g, batch, hq, dim, dtype=case.dtype, scale=q_scale)
        if case.write:
            key = randn(g, batch, hkv, dim, dtype=case.dtype)
            value = randn(g, batch, hkv, dim_v, dtype=case.dtype)
    assert not case.write or all(case.lens), "a request that writes its new token has one"
    spare = spare_rows(pool)
    loc = torch.stack(
        [pool.rows(b, n - 1, n)[0] if n else spare[0] for b, n in enumerate(case.lens)]
    )
    args: dict[str, Any] = {
        "query": query,
        "k_cache": pool.k,
        "v_cache": pool.v,
        # NaN: every element the implementation should write must be written
        "output": torch.full((batch, hq, dim_v), math.nan, dtype=case.dtype),
        "key": key,
        "value": value,
        "loc": loc,
        "attn_logits": torch.full((batch, hq, case.splits, dim_v + 1), math.nan),
        **_shared_args(g, pool, case, case.lens),
    }
    return DecodeRun(case, pool, args, key, value)


def expected_decode_cache(run: DecodeRun) -> dict[str, Tensor]:
    """The caches (and int8 scales) after the write of key / value at loc."""
    if run.key is None or run.value is None:
        return run.pool.snapshot()
    return _written(run, run.args["loc"], run.key, run.value)


def _written(run: OpRun[Any], loc: Tensor, k: Tensor, v: Tensor) -> dict[str, Tensor]:
    """The pool's caches (and int8 scales) with k / v written at rows loc, as the cache
    kind stores them."""
    pool, case = run.pool, run.case
    out = pool.snapshot()
    if case.cache == "int8":
        qk, sk = quantize_int8(k)
        qv, sv = quantize_int8(v)
        out["k_cache"][loc], out["v_cache"][loc] = qk, qv
        out["k_scale_buf"][loc], out["v_scale_buf"][loc] = sk, sv
    else:
        raw(out["k_cache"])[loc] = raw(store(k, pool.k.dtype, pool.k_scale))
        raw(out["v_cache"])[loc] = raw(store(v, pool.v.dtype, pool.v_scale))
        if case.mla:  # V is K's prefix: the later V write wins, with the same values
            raw(out["k_cache"])[loc, :, : case.dims[1]] = raw(out["v_cache"])[loc]
    return out


def reference_decode(run: DecodeRun, fn: Any = attention) -> Tensor:
    """fp64 output of every request (`fn`: attention, or p_rounding_slack), from the pool
    as the implementation leaves it."""
    case, args = run.case, run.args
    outs = []
    for b, n in enumerate(case.lens):
        k, v = run.pool.keys(b, 0, n)
        outs.append(
            fn(
                args["query"][b : b + 1],
                k,
                v,
                torch.tensor([n - 1]),
                sm_scale=args["sm_scale"],
                window=window_of_ops(case.window),
                logit_cap=case.logit_cap,
                sinks=args["sinks"],
            )[0]
        )
    return torch.stack(outs)


# --------------------------------------------------------------------------------------
# Extend


@dataclass(frozen=True)
class ExtendCase:
    OP: ClassVar[str] = "extend_attention"
    reqs: tuple[tuple[int, int], ...]  # (prefix, extend) per request
    heads: tuple[int, int] = (4, 2)
    dims: tuple[int, int] = (64, 64)
    dtype: torch.dtype = BF16
    cache: str = "same"
    table: torch.dtype = torch.int32
    # "write": the new tokens' K/V given with out_cache_loc; the implementation writes them
    # when it can (rvv-attention; rvv-ops' INT8 op), else SGLang wrote them before the call.
    # "given": given, the caller wrote them (rvv-ops' INT8 op writes them anyway).
    # "shared": not given (KV-shared layers): read from the cache in the query's dtype.
    kv: str = "write"
    causal: bool = True
    window: int = 0  # the ops' convention (SGLang's W + 1, 0: none)
    logit_cap: float = 0.0
    sinks: torch.dtype | None = None
    gaps: bool = False  # rows of q_extend between requests that belong to none
    mla: bool = False
    quick: bool = False


REQS = ((0, 1), (1, 1), (17, 2), (0, 17), (100, 33), (255, 1), (256, 64), (0, 257), (1000, 40))
QUICK_REQS = ((0, 1), (3, 2), (17, 33), (40, 5))


def extend_cases() -> tuple[dict[str, ExtendCase], frozenset[str], frozenset[str]]:
    """The extend cases, the names of the grid and of the small cases (as decode_cases)."""
    grid: dict[str, ExtendCase] = {}
    for name, n, fields in _grid():
        reqs: tuple[tuple[int, int], ...]
        if "cache" in fields:
            reqs = QUICK_REQS if n == 0 else REQS
        else:
            reqs = QUICK_REQS if fields["quick"] else REQS[n % 4 :] + REQS[: n % 4]
        grid[name] = ExtendCase(reqs=reqs, **fields)
    base = ExtendCase(reqs=((0, 5), (30, 40), (64, 1), (7, 100)), heads=(8, 2), dims=(80, 80))
    # still several query blocks (kExtendBlockM = 32) and key blocks
    mid = replace(base, reqs=((0, 5), (30, 17), (7, 40)), heads=(6, 2), quick=True)
    features: dict[str, ExtendCase] = {
        "window 1": replace(base, window=1),
        "window 2": replace(mid, window=2),
        "window 33": replace(base, window=33, dtype=F16),
        "window 200": replace(base, window=200),
        "window int8": replace(base, window=20, cache="int8"),
        "cap 30": replace(base, logit_cap=30.0),
        "cap 2": replace(mid, logit_cap=2.0, dtype=F32),
        "sinks fp32": replace(mid, sinks=F32),
        "sinks bf16": replace(base, sinks=BF16, dtype=F16),
        "cap window sinks fp8": replace(base, logit_cap=5.0, window=50, sinks=F32, cache="e4m3"),
        "not causal": replace(mid, causal=False),
        "not causal fp32": replace(base, causal=False, dtype=F32, cache="e5m2"),
        "not causal window": replace(base, causal=False, window=10),
        "k_extend None": replace(mid, kv="shared"),
        "k_extend None fp8": replace(base, kv="shared", cache="e4m3", dtype=F32),
        "k_extend None int8": replace(mid, kv="shared", cache="int8"),
        "k_extend None window": replace(base, kv="shared", window=9, table=torch.int64),
        "gaps and empty requests": replace(
            base, reqs=((5, 0), (0, 3), (20, 0), (9, 9)), gaps=True, quick=True
        ),
        "int8 gaps": replace(base, reqs=((0, 3), (4, 0), (9, 9)), gaps=True, cache="int8"),
        "4097": ExtendCase(reqs=((4000, 97), (2, 3)), heads=(12, 2), dims=(128, 128)),
        "MLA 576/512": ExtendCase(
            reqs=((0, 9), (40, 33)), heads=(8, 1), dims=(576, 512), mla=True, quick=True
        ),
        "D != Dv int8": ExtendCase(
            reqs=((3, 40), (50, 7)), heads=(6, 3), dims=(96, 64), cache="int8"
        ),
    }
    small = ExtendCase(
        reqs=((4, 2), (0, 3), (5, 4)), dims=(16, 16), dtype=F32, table=torch.int64, quick=True
    )
    small_cases: dict[str, ExtendCase] = {
        "small": small,
        "no prefix": replace(small, reqs=((0, 4), (0, 7))),
        "prefix hit, one new": replace(small, reqs=((9, 1), (32, 1))),
        "empty request": replace(small, reqs=((5, 0), (0, 4), (8, 0))),
        "given": replace(small, kv="given"),
        "shared": replace(small, kv="shared", reqs=((6, 3), (0, 4))),
        "shared bf16": replace(small, dtype=BF16, kv="shared", reqs=((4, 5), (23, 17))),
        "small not causal": replace(small, causal=False, reqs=((4, 3), (0, 12))),
        "odd dims 13/5 hq7-hkv1": replace(
            small, heads=(7, 1), dims=(13, 5), reqs=((0, 3), (15, 6))
        ),
        "hq6-hkv2 D32 bf16": replace(
            small, dtype=BF16, heads=(6, 2), dims=(32, 32), reqs=((8, 9), (0, 70))
        ),
        "small window 3 fp16": replace(small, dtype=F16, window=3, reqs=((3, 5), (9, 11))),
        "window 1 not causal": replace(small, window=1, causal=False, reqs=((4, 2), (5, 4))),
        "small cap sinks": replace(small, logit_cap=1.5, sinks=F32, reqs=((5, 6), (3, 2))),
        "small gaps": replace(small, gaps=True, reqs=((3, 3), (3, 2))),
        "small e4m3": replace(small, cache="e4m3", reqs=((5, 4), (0, 4))),
        "small e5m2 shared": replace(small, cache="e5m2", kv="shared", reqs=((3, 2), (5, 3))),
        "small int8": replace(small, cache="int8", reqs=((7, 5), (0, 4))),
        "int8 given": replace(small, cache="int8", kv="given", reqs=((5, 2), (0, 9))),
        "int8 shared bf16": replace(
            small, dtype=BF16, cache="int8", kv="shared", reqs=((5, 4), (0, 3))
        ),
        "int8 given gaps": replace(
            small, cache="int8", kv="given", gaps=True, reqs=((3, 2), (3, 2))
        ),
        "int8 shared gaps": replace(
            small, cache="int8", kv="shared", gaps=True, reqs=((3, 2), (0, 4))
        ),
        "long prefill D32": replace(
            small, heads=(2, 1), dims=(32, 32), reqs=((20, 130), (70, 20)), quick=False
        ),
    }
    return _matrix(grid, features, small_cases)


EXTEND_CASES, EXTEND_GRID, EXTEND_SMALL = extend_cases()


@dataclass
class ExtendRun(OpRun[ExtendCase]):
    """An extend batch: the ops' arguments (schema names) and what the reference needs."""

    starts: list[int]
    writes: bool  # the implementation writes the new tokens at out_cache_loc
    new_k: Tensor  # [N, Hkv, D] new tokens' K (given, or gathered), query dtype
    new_v: Tensor


def ops_write(case: ExtendCase) -> bool:
    """Whether the rvv-ops op writes the new tokens itself (the INT8 op, when given)."""
    return case.cache == "int8" and case.kv != "shared"


def make_extend(case: ExtendCase, seed: int = 0, writes: bool | None = None) -> ExtendRun:
    """The batch; `writes`: whether the implementation under test writes the new tokens at
    out_cache_loc (default: what the rvv-ops op does); if not, they are in the cache
    before the call, as SGLang's set_kv_buffer leaves them."""
    if writes is None:
        writes = ops_write(case)
    assert not writes or case.kv != "shared"
    g = gen(seed)
    hq, hkv = case.heads
    dim, dim_v = case.dims
    lens = tuple(p + e for p, e in case.reqs)
    starts, row = [], 0
    for _, e in case.reqs:
        row += 1 if case.gaps else 0
        starts.append(row)
        row += e
    tokens = row + (2 if case.gaps else 0)
    in_request = torch.zeros(tokens, dtype=torch.bool)
    for b, (_, e) in enumerate(case.reqs):
        in_request[starts[b] : starts[b] + e] = True
    gap_rows = torch.nonzero(~in_request)[:, 0]
    # a spare cache row for every row of q of no request (at least 5, the pool's default)
    pool = _pool(g, lens, case, spare=max(5, len(gap_rows)))
    q_scale = 3.0 if case.logit_cap else 1.0
    q = randn(g, tokens, hq, dim, dtype=case.dtype, scale=q_scale)
    k = randn(g, tokens, hkv, dim, dtype=case.dtype)
    v = k[..., :dim_v] if case.mla else randn(g, tokens, hkv, dim_v, dtype=case.dtype)
    # rows of no request get a spare cache row each (a writing implementation writes every
    # row): out_cache_loc names every cache row at most once, as SGLang's allocator does
    out_cache_loc = torch.empty(tokens, dtype=torch.int64)
    out_cache_loc[gap_rows] = spare_rows(pool)[: len(gap_rows)]
    for b, (p, e) in enumerate(case.reqs):
        out_cache_loc[starts[b] : starts[b] + e] = pool.rows(b, p, p + e)
    assert len(set(out_cache_loc.tolist())) == tokens, "out_cache_loc names a cache row twice"
    if not writes:
        # SGLang wrote the new tokens before the call (or the layer they share K/V with)
        if case.cache == "int8":
            nk, sk = quantize_int8(k)
            nv, sv = quantize_int8(v)
            assert pool.k_scales is not None and pool.v_scales is not None
            pool.k_scales[out_cache_loc], pool.v_scales[out_cache_loc] = sk, sv
        else:
            nk, nv = store(k, pool.k.dtype, pool.k_scale), store(v, pool.v.dtype, pool.v_scale)
        raw(pool.k)[out_cache_loc] = raw(nk)
        if not case.mla:
            raw(pool.v)[out_cache_loc] = raw(nv)
    if case.kv != "shared":
        new_k, new_v = k, v
    else:
        # the implementation gathers them from the cache, dequantised to the query's dtype
        new_k, new_v = torch.zeros_like(k), torch.zeros_like(v)
        for b, (p, e) in enumerate(case.reqs):
            kk, vv = pool.keys(b, p, p + e)
            new_k[starts[b] : starts[b] + e] = kk.to(case.dtype)
            new_v[starts[b] : starts[b] + e] = vv.to(case.dtype)
    ext = [e for _, e in case.reqs]
    given = case.kv != "shared"
    args: dict[str, Any] = {
        "q_extend": q,
        "k_extend": k if given else None,
        "v_extend": v if given else None,
        "o_extend": torch.full((tokens, hq, dim_v), math.nan, dtype=case.dtype),
        "k_buffer": pool.k,
        "v_buffer": pool.v,
        "out_cache_loc": out_cache_loc,
        "extend_seq_lens": torch.tensor(ext, dtype=case.table),
        "extend_start_loc": torch.tensor(starts, dtype=case.table),
        "max_len_extend": max(ext, default=0),
        "tree_mask": None,
        "is_causal": case.causal,
        **_shared_args(g, pool, case, lens),
    }
    return ExtendRun(case, pool, args, starts, writes, new_k, new_v)


def expected_extend_cache(run: ExtendRun) -> dict[str, Tensor]:
    """The caches (and int8 scales) after the call: the new tokens written at every row of
    out_cache_loc if the implementation writes them, else unchanged."""
    if not run.writes:
        return run.pool.snapshot()
    args = run.args
    return _written(run, args["out_cache_loc"], args["k_extend"], args["v_extend"])


def per_request(run: ExtendRun, fn: Any, fill: float) -> Tensor:
    """fn (attention or p_rounding_slack) over each request's rows of o_extend: its new
    tokens' q over its prefix and new K / V; rows of no request hold `fill`."""
    case, args = run.case, run.args
    out = torch.full(args["o_extend"].shape, fill, dtype=torch.float64)
    for b, (p, e) in enumerate(case.reqs):
        if e == 0:
            continue
        rows = slice(run.starts[b], run.starts[b] + e)
        k_pre, v_pre = run.pool.keys(b, 0, p)
        k = torch.cat([k_pre, run.new_k[rows].double()])
        v = torch.cat([v_pre, run.new_v[rows].double()])
        out[rows] = fn(
            args["q_extend"][rows],
            k,
            v,
            p + torch.arange(e),
            sm_scale=args["sm_scale"],
            causal=case.causal,
            window=window_of_ops(case.window),
            logit_cap=case.logit_cap,
            sinks=args["sinks"],
        ).double()
    return out


def reference_extend(run: ExtendRun) -> Tensor:
    """fp64 o_extend after the call: each request's rows; rows of no request stay NaN."""
    return per_request(run, attention, math.nan)


def extend_slack(run: ExtendRun) -> Tensor | None:
    """p_rounding_slack for the rows of o_extend where a kernel may round p to bf16 (bf16 q
    over a bf16 cache), else None."""
    if not rounds_p(run.case.dtype, run.case.cache):
        return None
    return per_request(run, p_rounding_slack, 0.0)


def decode_slack(run: DecodeRun) -> Tensor | None:
    """p_rounding_slack for decode outputs (bf16 q over a bf16 cache), else None. The
    rvv-ops decode kernels keep p in fp32; implementations built on others may not."""
    if not rounds_p(run.case.dtype, run.case.cache):
        return None
    return reference_decode(run, p_rounding_slack).float()


class Op(NamedTuple):
    """One attention op's part of the matrix, for tests that treat decode and extend alike."""

    cases: dict[str, Any]
    make: Callable[..., Any]  # (case, seed) -> the run
    expected_cache: Callable[[Any], dict[str, Tensor]]
    reference: Callable[[Any], Tensor]  # fp64, from the pool as the call leaves it
    slack: Callable[[Any], Tensor | None]  # where an implementation may round p to bf16
    output: str  # the argument the call writes its output to


OPS = {
    "decode": Op(DECODE_CASES, make_decode, expected_decode_cache, reference_decode,
                 decode_slack, "output"),
    "extend": Op(EXTEND_CASES, make_extend, expected_extend_cache, reference_extend,
                 extend_slack, "o_extend"),
}  # fmt: skip


# --------------------------------------------------------------------------------------
# Perf mode: the batches tools/bench_x86.py times, as cases of this matrix

PERF_HEADS = (12, 2)  # Qwen2.5-1.5B's attention: 12 query heads, 2 KV heads, head dim 128
PERF_DIMS = (128, 128)
PERF_DTYPE = BF16  # queries and KV cache
PERF_EXTEND_NEW = 512  # new tokens per request of an extend (a prefill chunk)
PERF_BATCHES = (1, 4, 16)
PERF_CONTEXTS = (512, 2048, 8192)
PERF_QUICK = ((1, 4), (512,))  # (batches, contexts) of the benchmark's --quick smoke run


def perf_case(op: str, batch: int, context: int) -> DecodeCase | ExtendCase:
    """The benchmark's batch of `op`: `batch` requests of `context` tokens each, counting
    the new ones (decode: one; extend: min(PERF_EXTEND_NEW, context) after a cached
    prefix), in PERF_HEADS / PERF_DIMS / PERF_DTYPE over a same-dtype cache."""
    if op == "decode":
        return DecodeCase(lens=(context,) * batch, heads=PERF_HEADS, dims=PERF_DIMS,
                          dtype=PERF_DTYPE, table=torch.int32)  # fmt: skip
    if op != "extend":
        raise ValueError(f"perf_case: op is {op!r}; expected 'decode' or 'extend'")
    new = min(PERF_EXTEND_NEW, context)
    return ExtendCase(reqs=((context - new, new),) * batch, heads=PERF_HEADS, dims=PERF_DIMS,
                      dtype=PERF_DTYPE, table=torch.int32)  # fmt: skip
