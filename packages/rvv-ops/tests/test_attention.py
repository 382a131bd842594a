"""Attention ops against a per-request SDPA reference computed the way SGLang's torch-native
backend does it, plus what the ops write into the caches and thread-count independence.

The reference (``reference_attention``) gathers each request's K/V through req_to_token,
dequantises them, and runs ``scaled_dot_product_attention`` in fp32 with ``enable_gqa``, a
causal mask offset by the prefix and SGLang's sliding-window mask
``(k_pos <= q_pos) & (k_pos >= q_pos - W)`` (the ops get ``W + 1``); with a logit cap or
sinks the same computation is written out by hand (SDPA has neither).

Emulated runs (riscv64) and ``--rvv-ops-lengths=quick`` compare a quick subset of the
cases; the others are reported as skipped with the reason. ``RVV_OPS_TEST_ATTENTION=full``
runs every case anyway.
"""

from __future__ import annotations

import math
import os
import platform
from dataclasses import dataclass, replace
from typing import Any

import pytest
import rvv_ops
import torch
from torch import Tensor
from torch.nn.functional import scaled_dot_product_attention

FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
DTYPES = (torch.bfloat16, torch.float16, torch.float32)

DECODE = torch.ops.sgl_kernel.decode_attention_cpu.default
EXTEND = torch.ops.sgl_kernel.extend_attention_cpu.default
DECODE_INT8 = torch.ops.sgl_kernel.decode_attention_int8_cpu.default
EXTEND_INT8 = torch.ops.sgl_kernel.extend_attention_int8_cpu.default

# (rtol, atol) of the outputs against the fp32 reference, per output dtype. Kernel and
# reference get the same input values and both compute in fp32, but in another order
# (online softmax over key blocks, split-KV merge, q scaled before the dot products, scales
# applied to scores rather than to K) and with the kernels' polynomial exp / tanh: a few
# fp32 ulps of outputs of order 1, which atol covers. The kernels then round once to the
# output dtype: up to half an ulp, i.e. 2^-8 (bf16) or 2^-11 (fp16) of the value: rtol.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (2e-5, 2e-5),
    torch.bfloat16: (2**-8, 2e-5),
    torch.float16: (2**-11, 2e-5),
}


def quick_mode(config: pytest.Config) -> tuple[bool, str]:
    """Whether to run only the quick cases, and why."""
    if os.environ.get("RVV_OPS_TEST_ATTENTION") == "full":
        return False, ""
    if platform.machine() == "riscv64":
        return True, "riscv64 (usually emulated): quick attention subset"
    if config.getoption("--rvv-ops-lengths") == "quick":
        return True, "--rvv-ops-lengths=quick: quick attention subset"
    return False, ""


def skip_unless_quick(config: pytest.Config, quick_case: bool) -> None:
    quick, why = quick_mode(config)
    if quick and not quick_case:
        pytest.skip(f"{why} (RVV_OPS_TEST_ATTENTION=full runs this case)")


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def same_bits(a: Tensor, b: Tensor) -> bool:
    """Bit-exact equality, NaNs and fp8 included (torch.equal takes neither)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    bits = _BITS[a.element_size()]
    return torch.equal(a.view(bits), b.view(bits))


def assert_matches(
    actual: Tensor, expected: Tensor, what: str = "", slack: Tensor | None = None
) -> None:
    """actual within TOLERANCES of expected; `slack` (per element, see p_rounding_slack) is
    allowed on top where given."""
    rtol, atol = TOLERANCES[actual.dtype]
    if slack is not None:
        a, e = actual.float(), expected.float()
        assert torch.equal(a.isnan(), e.isnan()), f"{what}: NaNs at other places"
        err = (a - e).abs().nan_to_num(0.0)
        allowed = atol + rtol * e.abs().nan_to_num(0.0) + slack.nan_to_num(0.0)
        bad = err > allowed
        if bad.any():
            i = tuple(int(x) for x in bad.nonzero()[0])
            raise AssertionError(
                f"{what}: {int(bad.sum())} of {bad.numel()} elements differ by more than "
                f"atol + rtol |expected| + slack; first at {i}: got {float(a[i])}, expected "
                f"{float(e[i])}, allowed {float(allowed[i])}"
            )
        return
    torch.testing.assert_close(
        actual.float(),
        expected.float(),
        rtol=rtol,
        atol=atol,
        equal_nan=True,
        msg=lambda m: f"{what}: {m}",
    )


# --------------------------------------------------------------------------------------
# Reference


def reference_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_pos: Tensor,
    *,
    sm_scale: float,
    causal: bool = True,
    window: int = 0,
    logit_cap: float = 0.0,
    sinks: Tensor | None = None,
) -> Tensor:
    """Attention of one request in fp32: q [M, Hq, D] at positions q_pos [M] over k [L, Hkv, D]
    and v [L, Hkv, Dv] at positions 0..L-1. `window` is the ops' argument (SGLang's W + 1)."""
    mask = attention_mask(q_pos, k.shape[0], causal, window)
    # [tokens, heads, dim] -> [heads, tokens, dim], as the torch-native backend does
    qh, kh, vh = (x.float().movedim(0, 1) for x in (q, k, v))
    if logit_cap == 0.0 and sinks is None:
        out = scaled_dot_product_attention(
            qh[None], kh[None], vh[None], attn_mask=mask, scale=sm_scale, enable_gqa=True
        )[0]
    else:
        probs, vh = attention_probs(qh, kh, vh, mask, sm_scale, logit_cap, sinks)
        out = probs @ vh
    return out.movedim(1, 0)


def attention_mask(q_pos: Tensor, keys: int, causal: bool, window: int) -> Tensor:
    """[M, keys]: which keys (positions 0..keys-1) each query row at q_pos sees."""
    k_pos = torch.arange(keys)
    mask = torch.ones(q_pos.shape[0], keys, dtype=torch.bool)
    if causal:
        mask &= k_pos[None, :] <= q_pos[:, None]
    if window > 0:
        mask &= k_pos[None, :] >= q_pos[:, None] - (window - 1)
    return mask


def attention_probs(
    qh: Tensor,
    kh: Tensor,
    vh: Tensor,
    mask: Tensor,
    sm_scale: float,
    logit_cap: float,
    sinks: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """Softmax weights [Hq, M, L] of qh [Hq, M, D] over kh [Hkv, L, D] (scaled, capped,
    masked, the sinks in the denominator) in qh's dtype, and vh [Hkv, L, Dv] repeated to
    [Hq, L, Dv]."""
    group = qh.shape[0] // kh.shape[0]
    kh, vh = kh.repeat_interleave(group, 0), vh.repeat_interleave(group, 0)
    scores = qh @ kh.transpose(1, 2) * sm_scale
    if logit_cap > 0.0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    scores = scores.masked_fill(~mask, -math.inf)
    if sinks is not None:
        sink = sinks.to(qh.dtype)[:, None, None].expand(-1, scores.shape[1], 1)
        probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    return probs, vh


def p_rounding_slack(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_pos: Tensor,
    *,
    sm_scale: float,
    causal: bool = True,
    window: int = 0,
    logit_cap: float = 0.0,
    sinks: Tensor | None = None,
) -> Tensor:
    """What rounding the softmax weights to bf16 before P.V may move each output of
    reference_attention by (same arguments), [M, Hq, Dv]. With bf16 q over a bf16 cache the
    x86_amx and x86_avx512_bf16 kernels do that, as torch's CPU flash attention does, and
    divide by the sum of the rounded weights: an output o moves by sum_j P_j d_j (v_j - o),
    P the normalised weights, |d_j| <= 2^-8 independent roundings. Allowed: 4 x 2^-8 x
    sqrt(sum_j P_j^2 (v_j - o)^2), over 7 standard deviations."""
    mask = attention_mask(q_pos, k.shape[0], causal, window)
    qh, kh, vh = (x.double().movedim(0, 1) for x in (q, k, v))
    probs, vh = attention_probs(qh, kh, vh, mask, sm_scale, logit_cap, sinks)
    probs = probs.nan_to_num(0.0)  # rows that see no key
    o = probs @ vh
    p2 = probs * probs
    # sum_j P_j^2 (v_j - o)^2, expanded
    spread = p2 @ (vh * vh) - 2 * o * (p2 @ vh) + o * o * p2.sum(-1, keepdim=True)
    return (2**-6 * spread.clamp_min(0.0).sqrt()).movedim(1, 0).float()


def raw(t: Tensor) -> Tensor:
    """fp8 tensors as uint8 (a view): torch 2.6 has no fp8 indexing kernels."""
    return t.view(torch.uint8) if t.dtype in FP8.values() else t


def dequantize(cache: Tensor, rows: Tensor, scale: float, scales: Tensor | None) -> Tensor:
    """fp32 values of cache rows `rows` (fp8: times the per-tensor scale; int8: times the
    per-token, per-head scales)."""
    x = raw(cache)[rows].view(cache.dtype).float()
    if cache.dtype in FP8.values():
        return x * scale
    if cache.dtype == torch.int8:
        assert scales is not None
        return x * scales[rows].unsqueeze(-1)
    return x


def quantize_int8(x: Tensor) -> tuple[Tensor, Tensor]:
    """The INT8 ops' quantisation of rows x [..., dim]: scale = absmax / 127, values
    round-half-even(x / scale) clamped to [-127, 127]; an all-zero row gets scale 0."""
    x = x.float()
    scale = x.abs().amax(dim=-1) / 127
    q = torch.where(
        scale[..., None] > 0,
        (x / scale[..., None]).round().clamp(-127, 127),
        torch.zeros_like(x),
    )
    return q.to(torch.int8), scale


def store(x: Tensor, cache_dtype: torch.dtype, scale: float) -> Tensor:
    """What SGLang's set_kv_buffer stores for x in a cache of `cache_dtype`."""
    return x if x.dtype == cache_dtype else (x / scale).to(cache_dtype)


# --------------------------------------------------------------------------------------
# Test data


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(g: torch.Generator, *shape: int, dtype: torch.dtype, scale: float = 1.0) -> Tensor:
    return (torch.randn(shape, generator=g) * scale).to(dtype)


def strided(t: Tensor, pad: int) -> Tensor:
    """t's values in a tensor whose last dimension is followed by `pad` unused elements, so
    every other stride differs from a contiguous tensor's."""
    if pad == 0:
        return t
    big = torch.zeros(*t.shape[:-1], t.shape[-1] + pad, dtype=t.dtype)
    big[..., : t.shape[-1]] = t
    return big[..., : t.shape[-1]]


@dataclass
class KvPool:
    """A layer's KV cache and request table in SGLang's layout."""

    k: Tensor
    v: Tensor
    k_scale: float
    v_scale: float
    k_scales: Tensor | None  # int8 only
    v_scales: Tensor | None
    req_to_token: Tensor
    req_pool_indices: Tensor

    def rows(self, b: int, lo: int, hi: int) -> Tensor:
        return self.req_to_token[int(self.req_pool_indices[b]), lo:hi].long()

    def keys(self, b: int, lo: int, hi: int) -> tuple[Tensor, Tensor]:
        rows = self.rows(b, lo, hi)
        return (
            dequantize(self.k, rows, self.k_scale, self.k_scales),
            dequantize(self.v, rows, self.v_scale, self.v_scales),
        )


def make_pool(
    g: torch.Generator,
    lens: tuple[int, ...],
    *,
    kv_heads: int,
    dims: tuple[int, int],
    dtype: torch.dtype,
    cache: str,
    table: torch.dtype,
    mla: bool = False,
    pad: int = 8,
) -> KvPool:
    """Caches with more rows than needed, each request's positions on shuffled rows, spare
    table rows and columns (holding -1: never read), strided cache views."""
    dim, dim_v = dims
    total = sum(lens)
    tokens = total + 5
    width = max(lens, default=0) + 3
    requests = len(lens) + 2

    def values(d: int, scale: float) -> Tensor:
        x = torch.randn(tokens, kv_heads, d, generator=g)
        if cache == "int8":
            return torch.randint(-127, 128, (tokens, kv_heads, d), generator=g, dtype=torch.int8)
        if cache in FP8:
            return (x / scale).to(FP8[cache])
        return x.to(dtype)

    k_scale, v_scale = (0.5, 0.25) if cache in FP8 else (1.0, 1.0)
    k = strided(values(dim, k_scale), pad)
    if mla:
        v = k[..., :dim_v]  # SGLang's MLA pool: V is a view of K's first dim_v elements
    else:
        layers = torch.stack([values(dim_v, v_scale), values(dim_v, v_scale)])
        v = layers[1]  # one layer of a [layers, tokens, heads, dim_v] buffer
    k_scales = v_scales = None
    if cache == "int8":
        k_scales = torch.rand(tokens, kv_heads, generator=g) * 0.02 + 0.005
        v_scales = torch.rand(tokens, kv_heads, generator=g) * 0.02 + 0.005
    req_to_token = torch.full((requests, width), -1, dtype=table)
    pool_indices = torch.randperm(requests, generator=g)[: len(lens)]
    rows = torch.randperm(tokens, generator=g)[:total]
    start = 0
    for b, n in enumerate(lens):
        req_to_token[pool_indices[b], :n] = rows[start : start + n].to(table)
        start += n
    return KvPool(k, v, k_scale, v_scale, k_scales, v_scales, req_to_token, pool_indices)


# --------------------------------------------------------------------------------------
# Decode


@dataclass(frozen=True)
class DecodeCase:
    lens: tuple[int, ...]
    heads: tuple[int, int] = (4, 2)  # (Hq, Hkv)
    dims: tuple[int, int] = (64, 64)  # (D, Dv)
    dtype: torch.dtype = torch.bfloat16
    cache: str = "same"  # same, e4m3, e5m2, int8
    table: torch.dtype = torch.int32
    write: bool = True  # key/value given (written at loc by the op)
    window: int = 0
    logit_cap: float = 0.0
    sinks: torch.dtype | None = None
    splits: int = 8
    mla: bool = False
    quick: bool = False


LENS = (1, 2, 17, 255, 256, 257, 1000)
QUICK_LENS = (1, 17, 257)
GQA = ((12, 2), (7, 1), (4, 4))
HEAD_SIZES = (64, 80, 128, 256)


def decode_cases() -> dict[str, DecodeCase]:
    cases: dict[str, DecodeCase] = {}
    # every head size x GQA shape x dtype, the context lengths mixed in one batch
    for i, d in enumerate(HEAD_SIZES):
        for j, heads in enumerate(GQA):
            for k, dtype in enumerate(DTYPES):
                n = i * 9 + j * 3 + k
                quick = (i, j) in ((2, 0), (1, 1)) and k == i % 3
                cases[f"D{d}-{heads[0]}/{heads[1]}-{str(dtype)[6:]}"] = DecodeCase(
                    lens=QUICK_LENS if quick else LENS[n % 3 :] + LENS[: n % 3],
                    heads=heads,
                    dims=(d, d),
                    dtype=dtype,
                    table=(torch.int32, torch.int64)[n % 2],
                    write=n % 4 != 3,
                    quick=quick,
                )
    for cache in ("e4m3", "e5m2", "int8"):
        for k, dtype in enumerate(DTYPES):
            cases[f"{cache}-{str(dtype)[6:]}"] = DecodeCase(
                lens=QUICK_LENS if k == 0 else LENS,
                heads=(12, 2),
                dims=(128, 128),
                dtype=dtype,
                cache=cache,
                table=(torch.int64, torch.int32)[k % 2],
                write=k != 1,
                quick=k == 0,
            )
    base = DecodeCase(lens=(1, 2, 17, 256, 257, 300), heads=(8, 2), dims=(80, 80))
    features = {
        "window 1": replace(base, window=1, quick=True),
        "window 2": replace(base, window=2),
        "window 17": replace(base, window=17, dtype=torch.float16),
        "window 300": replace(base, window=300),
        "window fp8": replace(base, window=40, cache="e4m3"),
        "window int8": replace(base, window=40, cache="int8", quick=True),
        "cap 30": replace(base, logit_cap=30.0),
        "cap 2": replace(base, logit_cap=2.0, dtype=torch.float32, quick=True),
        "sinks fp32": replace(base, sinks=torch.float32, quick=True),
        "sinks bf16": replace(base, sinks=torch.bfloat16, dtype=torch.float16),
        "cap window sinks int8": replace(
            base, logit_cap=5.0, window=100, sinks=torch.float32, cache="int8"
        ),
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
    cases.update(features)
    return cases


DECODE_CASES = decode_cases()


@dataclass
class DecodeRun:
    """A decode batch: the op's arguments (schema names) and what the reference needs."""

    case: DecodeCase
    pool: KvPool
    args: dict[str, Any]
    key: Tensor | None = None
    value: Tensor | None = None

    @property
    def op(self) -> Any:
        return DECODE_INT8 if self.case.cache == "int8" else DECODE

    def call(self) -> None:
        names = [a.name for a in self.op._schema.arguments]
        self.op(*[self.args[n] for n in names])


def make_decode(case: DecodeCase, seed: int = 0) -> DecodeRun:
    g = gen(seed)
    hq, hkv = case.heads
    dim, dim_v = case.dims
    batch = len(case.lens)
    pool = make_pool(
        g,
        case.lens,
        kv_heads=hkv,
        dims=case.dims,
        dtype=case.dtype,
        cache=case.cache,
        table=case.table,
        mla=case.mla,
    )
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
    lens = torch.tensor(case.lens, dtype=torch.int64)
    loc = torch.stack([pool.rows(b, n - 1, n)[0] for b, n in enumerate(case.lens)])
    sinks = None if case.sinks is None else randn(g, hq, dtype=case.sinks, scale=2.0)
    args: dict[str, Any] = {
        "query": query,
        "k_cache": pool.k,
        "v_cache": pool.v,
        "k_scale": pool.k_scale,
        "v_scale": pool.v_scale,
        "k_scale_buf": pool.k_scales,
        "v_scale_buf": pool.v_scales,
        # NaN: every element the op should write must be written
        "output": torch.full((batch, hq, dim_v), math.nan, dtype=case.dtype),
        "key": key,
        "value": value,
        "loc": loc,
        "attn_logits": torch.full((batch, hq, case.splits, dim_v + 1), math.nan),
        "req_to_token": pool.req_to_token,
        "req_pool_indices": pool.req_pool_indices,
        "seq_lens": lens,
        "sm_scale": 1.0 / math.sqrt(dim),
        "logit_cap": case.logit_cap,
        "is_cross_attention": False,
        "sliding_window_size": case.window,
        "encoder_lens": None,
        "sinks": sinks,
    }
    return DecodeRun(case, pool, args, key, value)


def expected_decode_cache(run: DecodeRun) -> dict[str, Tensor]:
    """The caches (and scales) after the op's write of key/value at loc."""
    pool, case = run.pool, run.case
    out = {"k_cache": pool.k.clone(), "v_cache": pool.v.clone()}
    if run.key is None or run.value is None:
        return out
    loc = run.args["loc"]
    if case.cache == "int8":
        assert pool.k_scales is not None and pool.v_scales is not None
        qk, sk = quantize_int8(run.key)
        qv, sv = quantize_int8(run.value)
        out["k_cache"][loc], out["v_cache"][loc] = qk, qv
        out["k_scale_buf"], out["v_scale_buf"] = pool.k_scales.clone(), pool.v_scales.clone()
        out["k_scale_buf"][loc], out["v_scale_buf"][loc] = sk, sv
    else:
        raw(out["k_cache"])[loc] = raw(store(run.key, pool.k.dtype, pool.k_scale))
        raw(out["v_cache"])[loc] = raw(store(run.value, pool.v.dtype, pool.v_scale))
        if case.mla:  # V is K's prefix: the later V write wins, with the same values
            raw(out["k_cache"])[loc, :, : case.dims[1]] = raw(out["v_cache"])[loc]
    return out


def reference_decode(run: DecodeRun) -> Tensor:
    """Output of every request, from the pool as the op leaves it."""
    case, args = run.case, run.args
    outs = []
    for b, n in enumerate(case.lens):
        k, v = run.pool.keys(b, 0, n)
        outs.append(
            reference_attention(
                args["query"][b : b + 1],
                k,
                v,
                torch.tensor([n - 1]),
                sm_scale=args["sm_scale"],
                window=case.window,
                logit_cap=case.logit_cap,
                sinks=args["sinks"],
            )[0]
        )
    return torch.stack(outs)


@pytest.mark.parametrize("name", DECODE_CASES)
def test_decode_matches_reference(request: pytest.FixtureRequest, name: str) -> None:
    case = DECODE_CASES[name]
    skip_unless_quick(request.config, case.quick)
    run = make_decode(case, seed=len(name))
    expected_cache = expected_decode_cache(run)
    run.call()
    for arg, expected in expected_cache.items():
        assert same_bits(run.args[arg], expected), arg
    assert_matches(run.args["output"], reference_decode(run), name)


# --------------------------------------------------------------------------------------
# Extend


@dataclass(frozen=True)
class ExtendCase:
    reqs: tuple[tuple[int, int], ...]  # (prefix, extend) per request
    heads: tuple[int, int] = (4, 2)
    dims: tuple[int, int] = (64, 64)
    dtype: torch.dtype = torch.bfloat16
    cache: str = "same"
    table: torch.dtype = torch.int32
    given: bool = True  # k_extend / v_extend given (else read from the cache)
    causal: bool = True
    window: int = 0
    logit_cap: float = 0.0
    sinks: torch.dtype | None = None
    gaps: bool = False  # rows of q_extend between requests that belong to none
    mla: bool = False
    quick: bool = False


REQS = ((0, 1), (1, 1), (17, 2), (0, 17), (100, 33), (255, 1), (256, 64), (0, 257), (1000, 40))
QUICK_REQS = ((0, 1), (3, 2), (17, 33), (40, 5))


def extend_cases() -> dict[str, ExtendCase]:
    cases: dict[str, ExtendCase] = {}
    for i, d in enumerate(HEAD_SIZES):
        for j, heads in enumerate(GQA):
            for k, dtype in enumerate(DTYPES):
                n = i * 9 + j * 3 + k
                quick = (i, j) in ((2, 0), (1, 1)) and k == i % 3
                cases[f"D{d}-{heads[0]}/{heads[1]}-{str(dtype)[6:]}"] = ExtendCase(
                    reqs=QUICK_REQS if quick else REQS[n % 4 :] + REQS[: n % 4],
                    heads=heads,
                    dims=(d, d),
                    dtype=dtype,
                    table=(torch.int32, torch.int64)[n % 2],
                    quick=quick,
                )
    for cache in ("e4m3", "e5m2", "int8"):
        for k, dtype in enumerate(DTYPES):
            cases[f"{cache}-{str(dtype)[6:]}"] = ExtendCase(
                reqs=QUICK_REQS if k == 0 else REQS,
                heads=(12, 2),
                dims=(128, 128),
                dtype=dtype,
                cache=cache,
                table=(torch.int64, torch.int32)[k % 2],
                quick=k == 0,
            )
    base = ExtendCase(reqs=((0, 5), (30, 40), (64, 1), (7, 100)), heads=(8, 2), dims=(80, 80))
    # the quick cases: still several query blocks (kExtendBlockM = 32) and key blocks
    small = replace(base, reqs=((0, 5), (30, 17), (7, 40)), heads=(6, 2), quick=True)
    cases.update(
        {
            "window 1": replace(base, window=1),
            "window 2": replace(small, window=2),
            "window 33": replace(base, window=33, dtype=torch.float16),
            "window 200": replace(base, window=200),
            "window int8": replace(base, window=20, cache="int8"),
            "cap 30": replace(base, logit_cap=30.0),
            "cap 2": replace(small, logit_cap=2.0, dtype=torch.float32),
            "sinks fp32": replace(small, sinks=torch.float32),
            "sinks bf16": replace(base, sinks=torch.bfloat16, dtype=torch.float16),
            "cap window sinks fp8": replace(
                base, logit_cap=5.0, window=50, sinks=torch.float32, cache="e4m3"
            ),
            "not causal": replace(small, causal=False),
            "not causal fp32": replace(base, causal=False, dtype=torch.float32, cache="e5m2"),
            "not causal window": replace(base, causal=False, window=10),
            "k_extend None": replace(small, given=False),
            "k_extend None fp8": replace(base, given=False, cache="e4m3", dtype=torch.float32),
            "k_extend None int8": replace(small, given=False, cache="int8"),
            "k_extend None window": replace(base, given=False, window=9, table=torch.int64),
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
    )
    return cases


EXTEND_CASES = extend_cases()


@dataclass
class ExtendRun:
    case: ExtendCase
    pool: KvPool
    args: dict[str, Any]
    starts: list[int]
    new_k: Tensor  # [N, Hkv, D] new tokens' K (given, or gathered), query dtype
    new_v: Tensor

    @property
    def op(self) -> Any:
        return EXTEND_INT8 if self.case.cache == "int8" else EXTEND

    def call(self) -> None:
        names = [a.name for a in self.op._schema.arguments]
        self.op(*[self.args[n] for n in names])


def make_extend(case: ExtendCase, seed: int = 0) -> ExtendRun:
    g = gen(seed)
    hq, hkv = case.heads
    dim, dim_v = case.dims
    lens = tuple(p + e for p, e in case.reqs)
    pool = make_pool(
        g,
        lens,
        kv_heads=hkv,
        dims=case.dims,
        dtype=case.dtype,
        cache=case.cache,
        table=case.table,
        mla=case.mla,
    )
    starts, row = [], 0
    for _, e in case.reqs:
        row += 1 if case.gaps else 0
        starts.append(row)
        row += e
    tokens = row + (2 if case.gaps else 0)
    q_scale = 3.0 if case.logit_cap else 1.0
    q = randn(g, tokens, hq, dim, dtype=case.dtype, scale=q_scale)
    k = randn(g, tokens, hkv, dim, dtype=case.dtype)
    v = k[..., :dim_v] if case.mla else randn(g, tokens, hkv, dim_v, dtype=case.dtype)
    # rows of no request get a spare cache row (the INT8 op writes every row it is given)
    used = torch.zeros(pool.k.shape[0], dtype=torch.bool)
    used[pool.req_to_token[pool.req_to_token >= 0].long()] = True
    spare = torch.nonzero(~used)[:, 0]
    out_cache_loc = spare[torch.arange(tokens) % len(spare)]
    for b, (p, e) in enumerate(case.reqs):
        out_cache_loc[starts[b] : starts[b] + e] = pool.rows(b, p, p + e)
    if case.cache != "int8" or not case.given:
        # SGLang has written the new tokens before calling the op (the INT8 op writes them
        # itself when given, else the layer they share K/V with did)
        nk, nv = k, v
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
    if case.given:
        new_k, new_v = k, v
    else:
        # the op gathers them from the cache, dequantised to the query's dtype
        new_k, new_v = torch.zeros_like(k), torch.zeros_like(v)
        for b, (p, e) in enumerate(case.reqs):
            kk, vv = pool.keys(b, p, p + e)
            new_k[starts[b] : starts[b] + e] = kk.to(case.dtype)
            new_v[starts[b] : starts[b] + e] = vv.to(case.dtype)
    sinks = None if case.sinks is None else randn(g, hq, dtype=case.sinks, scale=2.0)
    ext = [e for _, e in case.reqs]
    args: dict[str, Any] = {
        "q_extend": q,
        "k_extend": k if case.given else None,
        "v_extend": v if case.given else None,
        "o_extend": torch.full((tokens, hq, dim_v), math.nan, dtype=case.dtype),
        "k_buffer": pool.k,
        "v_buffer": pool.v,
        "k_scale": pool.k_scale,
        "v_scale": pool.v_scale,
        "k_scale_buf": pool.k_scales,
        "v_scale_buf": pool.v_scales,
        "out_cache_loc": out_cache_loc,
        "req_to_token": pool.req_to_token,
        "req_pool_indices": pool.req_pool_indices,
        "seq_lens": torch.tensor(lens, dtype=torch.int64),
        "extend_seq_lens": torch.tensor(ext, dtype=case.table),
        "extend_start_loc": torch.tensor(starts, dtype=case.table),
        "max_len_extend": max(ext, default=0),
        "sm_scale": 1.0 / math.sqrt(dim),
        "logit_cap": case.logit_cap,
        "is_cross_attention": False,
        "sliding_window_size": case.window,
        "encoder_lens": None,
        "sinks": sinks,
        "tree_mask": None,
        "is_causal": case.causal,
    }
    return ExtendRun(case, pool, args, starts, new_k, new_v)


def per_request(run: ExtendRun, fn: Any, fill: float) -> Tensor:
    """fn (reference_attention's arguments) over each request's rows of o_extend: its new
    tokens' q over its prefix and new K / V; rows of no request hold `fill`."""
    case, args = run.case, run.args
    out = torch.full(args["o_extend"].shape, fill)
    for b, (p, e) in enumerate(case.reqs):
        if e == 0:
            continue
        rows = slice(run.starts[b], run.starts[b] + e)
        k_pre, v_pre = run.pool.keys(b, 0, p)
        k = torch.cat([k_pre, run.new_k[rows].float()])
        v = torch.cat([v_pre, run.new_v[rows].float()])
        out[rows] = fn(
            args["q_extend"][rows],
            k,
            v,
            p + torch.arange(e),
            sm_scale=args["sm_scale"],
            causal=case.causal,
            window=case.window,
            logit_cap=case.logit_cap,
            sinks=args["sinks"],
        )
    return out


def reference_extend(run: ExtendRun) -> Tensor:
    """o_extend after the op: each request's rows; rows of no request stay NaN."""
    return per_request(run, reference_attention, math.nan)


def extend_slack(run: ExtendRun) -> Tensor | None:
    """p_rounding_slack for the rows of o_extend where the kernels may round p to bf16 (bf16
    q over a bf16 cache), else None."""
    if run.case.dtype != torch.bfloat16 or run.case.cache != "same":
        return None
    return per_request(run, p_rounding_slack, 0.0)


@pytest.mark.parametrize("name", EXTEND_CASES)
def test_extend_matches_reference(request: pytest.FixtureRequest, name: str) -> None:
    case = EXTEND_CASES[name]
    skip_unless_quick(request.config, case.quick)
    run = make_extend(case, seed=len(name))
    expected_o = reference_extend(run)
    expected_cache = {n: run.args[n].clone() for n in ("k_buffer", "v_buffer")}
    if case.cache == "int8":
        for n in ("k_scale_buf", "v_scale_buf"):
            expected_cache[n] = run.args[n].clone()
        if case.given:
            loc = run.args["out_cache_loc"]
            qk, sk = quantize_int8(run.args["k_extend"])
            qv, sv = quantize_int8(run.args["v_extend"])
            expected_cache["k_buffer"][loc], expected_cache["v_buffer"][loc] = qk, qv
            expected_cache["k_scale_buf"][loc], expected_cache["v_scale_buf"][loc] = sk, sv
    run.call()
    for n, expected in expected_cache.items():
        assert same_bits(run.args[n], expected), n
    assert_matches(run.args["o_extend"], expected_o, name, extend_slack(run))


# --------------------------------------------------------------------------------------
# Kernel variants, threads, repeated calls


@pytest.mark.parametrize("kind", ["decode", "extend"])
def test_every_variant(variant: str, kind: str) -> None:
    # The reference cases above run on the default (best) variant; here every variant the
    # CPU supports gets a decode and an extend batch with each cache kind.
    for cache in ("same", "e4m3", "int8"):
        if kind == "decode":
            d = make_decode(DecodeCase(lens=(1, 17, 70), heads=(6, 2), cache=cache, window=40))
            d.call()
            assert_matches(d.args["output"], reference_decode(d), f"{variant} {cache}")
        else:
            e = make_extend(ExtendCase(reqs=((0, 3), (20, 35)), heads=(6, 2), cache=cache))
            expected = reference_extend(e)
            e.call()
            assert_matches(e.args["o_extend"], expected, f"{variant} {cache}", extend_slack(e))


def with_threads(n: int, fn: Any) -> None:
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        fn()
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("cache", ["same", "int8"])
def test_results_do_not_depend_on_threads(cache: str) -> None:
    results = []
    # Extend's 18 tasks (3 query blocks per request and KV head) go out in chunks of 3 on
    # 1 and 3 threads and of 2 on 4 (chunks then straddle KV heads).
    for threads in (1, 3, 4):
        d = make_decode(DecodeCase(lens=(3, 200, 64, 1, 90), heads=(8, 2), cache=cache), seed=5)
        e = make_extend(ExtendCase(reqs=((0, 70), (33, 5), (9, 40)), heads=(4, 2), cache=cache))
        with_threads(threads, d.call)
        with_threads(threads, e.call)
        results.append((d.args["output"], d.args["attn_logits"], e.args["o_extend"]))
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            assert torch.equal(a, b)


@pytest.mark.parametrize("cache", ["same", "e5m2", "int8"])
def test_repeated_calls_are_idempotent(cache: str) -> None:
    # torch.library.opcheck (and CPU graph replays) run an op several times on the same
    # arguments: decode writes the same K/V again, the outputs do not change.
    d = make_decode(DecodeCase(lens=(5, 40), cache=cache))
    d.call()
    first = {n: t.clone() for n, t in d.args.items() if isinstance(t, Tensor)}
    d.call()
    for n, t in first.items():
        assert same_bits(d.args[n], t), n


# --------------------------------------------------------------------------------------
# SGLang's calls


def test_schemas_match_sglang_call_sites() -> None:
    # intel_amx_backend.py (SGLang 0.5.23) passes these, positionally, in this order.
    decode = [
        "query",
        "k_cache",
        "v_cache",
        "k_scale",
        "v_scale",
        "output",
        "key",
        "value",
        "loc",
        "attn_logits",
        "req_to_token",
        "req_pool_indices",
        "seq_lens",
        "sm_scale",
        "logit_cap",
        "is_cross_attention",
        "sliding_window_size",
        "encoder_lens",
        "sinks",
    ]
    extend = [
        "q_extend",
        "k_extend",
        "v_extend",
        "o_extend",
        "k_buffer",
        "v_buffer",
        "k_scale",
        "v_scale",
        "req_to_token",
        "req_pool_indices",
        "seq_lens",
        "extend_seq_lens",
        "extend_start_loc",
        "max_len_extend",
        "sm_scale",
        "logit_cap",
        "is_cross_attention",
        "sliding_window_size",
        "encoder_lens",
        "sinks",
        "tree_mask",
        "is_causal",
    ]
    decode_int8 = [*decode[:3], "k_scale_buf", "v_scale_buf", *decode[5:]]
    extend_int8 = [*extend[:6], "k_scale_buf", "v_scale_buf", "out_cache_loc", *extend[8:]]
    written = {
        DECODE: {"k_cache", "v_cache", "output", "attn_logits"},
        EXTEND: {"o_extend"},
        DECODE_INT8: {"k_cache", "v_cache", "k_scale_buf", "v_scale_buf", "output", "attn_logits"},
        EXTEND_INT8: {"o_extend", "k_buffer", "v_buffer", "k_scale_buf", "v_scale_buf"},
    }
    for op, names in (
        (DECODE, decode),
        (EXTEND, extend),
        (DECODE_INT8, decode_int8),
        (EXTEND_INT8, extend_int8),
    ):
        schema = op._schema
        assert [a.name for a in schema.arguments] == names
        assert not schema.returns
        marked = {a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write}
        assert marked == written[op]
    assert len(decode) == 19 and len(extend) == 22


def test_sglang_call_style() -> None:
    # The way IntelAMXAttnBackend calls the ops: flat q/o reshaped to heads, attn_logits
    # zeros [bs, heads, 8, v_head_dim + 1], sliding_window_size + 1 (-1 + 1 = 0: no window),
    # torch.ops.sgl_kernel.<op>(...) with every argument positional.
    d = make_decode(DecodeCase(lens=(4, 33), heads=(4, 2), dims=(64, 64)))
    bs, hq, dim = 2, 4, 64
    q = d.args["query"].reshape(bs, hq * dim)
    o = torch.empty_like(q)
    attn_logits = torch.zeros(bs, hq, 8, dim + 1)
    layer_sliding_window_size = -1
    torch.ops.sgl_kernel.decode_attention_cpu(
        q.view(-1, hq, dim), d.pool.k, d.pool.v, 1.0, 1.0, o.view(-1, hq, dim), d.key, d.value,
        d.args["loc"], attn_logits, d.pool.req_to_token, d.pool.req_pool_indices,
        d.args["seq_lens"], d.args["sm_scale"], 0.0, False, layer_sliding_window_size + 1,
        None, None,
    )  # fmt: skip
    assert_matches(o.view(bs, hq, dim), reference_decode(d))

    e = make_extend(ExtendCase(reqs=((5, 7), (0, 3)), heads=(4, 2)))
    n = e.args["q_extend"].shape[0]
    o = e.args["q_extend"].new_empty(n, hq * dim)
    torch.ops.sgl_kernel.extend_attention_cpu(
        e.args["q_extend"].view(-1, hq, dim), e.args["k_extend"], e.args["v_extend"],
        o.view(-1, hq, dim), e.pool.k, e.pool.v, 1.0, 1.0, e.pool.req_to_token,
        e.pool.req_pool_indices, e.args["seq_lens"], e.args["extend_seq_lens"],
        e.args["extend_start_loc"], 7, e.args["sm_scale"], 0.0, False,
        layer_sliding_window_size + 1, None, None, None, True,
    )  # fmt: skip
    assert_matches(o.view(n, hq, dim), reference_extend(e), slack=extend_slack(e))


@pytest.mark.parametrize("sliding_window_size", [0, 1, 5, 40])
def test_sglang_sliding_window_convention(sliding_window_size: int) -> None:
    # SGLang's torch-native mask (k_pos <= q_pos) & (k_pos >= q_pos - W), built here
    # directly; the CPU backend passes W + 1 to the ops.
    d = make_decode(DecodeCase(lens=(1, 6, 60), heads=(4, 4), dtype=torch.float32, write=False))
    e = make_extend(ExtendCase(reqs=((3, 9), (50, 20)), heads=(4, 4), dtype=torch.float32))
    d.args["sliding_window_size"] = e.args["sliding_window_size"] = sliding_window_size + 1
    d.call()
    e.call()
    for b, n in enumerate(d.case.lens):
        k, v = d.pool.keys(b, 0, n)
        q_pos, k_pos = torch.tensor([[n - 1]]), torch.arange(n)[None, :]
        mask = (k_pos <= q_pos) & (k_pos >= q_pos - sliding_window_size)
        expected = scaled_dot_product_attention(
            d.args["query"][b : b + 1].movedim(0, 1), k.movedim(0, 1), v.movedim(0, 1),
            attn_mask=mask, scale=d.args["sm_scale"],
        ).movedim(1, 0)  # fmt: skip
        assert_matches(d.args["output"][b : b + 1], expected)
    for b, (p, x) in enumerate(e.case.reqs):
        rows = slice(e.starts[b], e.starts[b] + x)
        k_pre, v_pre = e.pool.keys(b, 0, p)
        k = torch.cat([k_pre, e.new_k[rows]])
        v = torch.cat([v_pre, e.new_v[rows]])
        q_pos, k_pos = p + torch.arange(x)[:, None], torch.arange(p + x)[None, :]
        mask = (k_pos <= q_pos) & (k_pos >= q_pos - sliding_window_size)
        expected = scaled_dot_product_attention(
            e.args["q_extend"][rows].movedim(0, 1), k.movedim(0, 1), v.movedim(0, 1),
            attn_mask=mask, scale=e.args["sm_scale"],
        ).movedim(1, 0)  # fmt: skip
        assert_matches(e.args["o_extend"][rows], expected)


def test_window_reads_only_the_window() -> None:
    # Table entries before the window are never read, so they need not be valid rows
    # (SGLang's sliding-window pools may leave them unmapped).
    d = make_decode(DecodeCase(lens=(30, 3), heads=(4, 2), window=8, write=False))
    e = make_extend(ExtendCase(reqs=((40, 6), (2, 2)), heads=(4, 2), window=8))
    expected_d, expected_e, slack_e = reference_decode(d), reference_extend(e), extend_slack(e)
    d.pool.req_to_token[int(d.pool.req_pool_indices[0]), : 30 - 8] = -1
    e.pool.req_to_token[int(e.pool.req_pool_indices[0]), : 40 - 8 + 1] = -1
    d.call()
    e.call()
    assert_matches(d.args["output"], expected_d)
    assert_matches(e.args["o_extend"], expected_e, slack=slack_e)


# --------------------------------------------------------------------------------------
# Edge cases and the typed wrappers


def test_int8_quantisation_is_exact() -> None:
    # absmax 127 gives scale 1: ties round to even, a zero row gets scale 0 and zeros.
    d = make_decode(DecodeCase(lens=(4, 2), heads=(2, 2), dims=(8, 8), cache="int8"))
    key = torch.zeros(2, 2, 8)
    key[0, 0] = torch.tensor([127.0, 2.5, 3.5, -0.5, -2.5, 1.49, -126.5, 0.0])
    key[1, 1] = torch.tensor([-1e-3, 2e-3, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    d.args.update(key=key.to(torch.bfloat16), value=torch.zeros(2, 2, 8, dtype=torch.bfloat16))
    d.call()
    loc = d.args["loc"]
    assert d.pool.k[loc[0], 0].tolist() == [127, 2, 4, 0, -2, 1, -126, 0]
    assert d.pool.k_scales is not None and d.pool.v_scales is not None
    assert d.pool.k_scales[loc[0], 0] == 1.0
    assert d.pool.k_scales[loc[0], 1] == 0.0 and not d.pool.k[loc[0], 1].any()
    small = key[1, 1].to(torch.bfloat16).float()
    assert d.pool.k[loc[1], 1, :2].tolist() == [-64, 127]
    assert d.pool.k_scales[loc[1], 1] == small.abs().max() / 127
    assert not d.pool.v_scales[loc].any() and not d.pool.v[loc].any()


def test_empty_and_zero_lengths() -> None:
    # seq_len 0 (no key given): no key to attend to, so zeros (also with sinks); an empty
    # batch is a no-op; extend requests of length 0 leave their (zero) rows alone.
    d = make_decode(DecodeCase(lens=(3, 1), heads=(4, 2), write=False, sinks=torch.float32))
    d.args["seq_lens"] = torch.tensor([3, 0])
    d.call()
    assert not d.args["output"][1].any()
    expected = reference_decode(make_decode(replace(d.case, lens=(3,))))
    assert d.args["output"][:1].isfinite().all() and expected.isfinite().all()

    d = make_decode(DecodeCase(lens=(3,), heads=(4, 2), write=False))
    for name in ("query", "output", "loc", "req_pool_indices", "seq_lens", "attn_logits"):
        d.args[name] = d.args[name][:0]
    d.call()

    e = make_extend(ExtendCase(reqs=((3, 0), (0, 0)), heads=(4, 2)))
    e.call()
    e = make_extend(ExtendCase(reqs=((3, 2),), heads=(4, 2)))
    for name in ("seq_lens", "extend_seq_lens", "extend_start_loc", "req_pool_indices"):
        e.args[name] = e.args[name][:0]
    e.args["o_extend"].zero_()
    e.call()
    assert not e.args["o_extend"].any()


def test_typed_wrappers() -> None:
    d = make_decode(DecodeCase(lens=(9, 2), heads=(4, 2), window=4, sinks=torch.float32))
    a = d.args
    expected_cache = expected_decode_cache(d)
    rvv_ops.decode_attention(
        a["query"], a["k_cache"], a["v_cache"], a["output"], a["loc"], a["attn_logits"],
        a["req_to_token"], a["req_pool_indices"], a["seq_lens"], sm_scale=a["sm_scale"],
        key=a["key"], value=a["value"], window=4, sinks=a["sinks"],
    )  # fmt: skip
    assert same_bits(a["k_cache"], expected_cache["k_cache"])
    assert_matches(a["output"], reference_decode(d))

    d = make_decode(DecodeCase(lens=(9, 2), heads=(4, 2), cache="int8", logit_cap=3.0))
    a = d.args
    rvv_ops.decode_attention_int8(
        a["query"], a["k_cache"], a["v_cache"], a["k_scale_buf"], a["v_scale_buf"], a["output"],
        a["loc"], a["attn_logits"], a["req_to_token"], a["req_pool_indices"], a["seq_lens"],
        sm_scale=a["sm_scale"], key=a["key"], value=a["value"], logit_cap=3.0,
    )  # fmt: skip
    assert_matches(a["output"], reference_decode(d))

    e = make_extend(ExtendCase(reqs=((4, 9), (0, 2)), heads=(4, 2), cache="e4m3", causal=False))
    a = e.args
    rvv_ops.extend_attention(
        a["q_extend"], a["k_extend"], a["v_extend"], a["o_extend"], a["k_buffer"], a["v_buffer"],
        a["req_to_token"], a["req_pool_indices"], a["seq_lens"], a["extend_seq_lens"],
        a["extend_start_loc"], sm_scale=a["sm_scale"], k_scale=a["k_scale"],
        v_scale=a["v_scale"], causal=False,
    )  # fmt: skip
    assert_matches(a["o_extend"], reference_extend(e))

    e = make_extend(ExtendCase(reqs=((4, 9), (0, 2)), heads=(4, 2), cache="int8", window=3))
    a = e.args
    expected = reference_extend(e)
    rvv_ops.extend_attention_int8(
        a["q_extend"], a["k_extend"], a["v_extend"], a["o_extend"], a["k_buffer"], a["v_buffer"],
        a["k_scale_buf"], a["v_scale_buf"], a["out_cache_loc"], a["req_to_token"],
        a["req_pool_indices"], a["seq_lens"], a["extend_seq_lens"], a["extend_start_loc"],
        sm_scale=a["sm_scale"], max_len_extend=20, window=3,
    )  # fmt: skip
    assert_matches(a["o_extend"], expected)


def test_no_autograd_and_version_counters() -> None:
    d = make_decode(DecodeCase(lens=(3, 5), heads=(4, 2)))
    d.args["query"] = d.args["query"].detach().clone().requires_grad_()
    with pytest.raises(RuntimeError, match="decode_attention_cpu: has no derivative, and query"):
        d.call()
    versions = {n: d.args[n]._version for n in ("k_cache", "v_cache", "output", "attn_logits")}
    with torch.no_grad():
        d.call()
    for n, version in versions.items():
        assert d.args[n]._version > version, n
    with torch.inference_mode():
        make_extend(ExtendCase(reqs=((1, 2),), cache="int8")).call()
