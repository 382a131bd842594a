"""decode / extend against the independent fp64 reference, for both implementations.

Each case runs with RVV_ATTENTION_IMPL=kernel and =fallback (the ``impl`` fixture) and
checks the output and the cache contents after the call; a third test checks that the two
implementations agree with each other to one output rounding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import rvv_attention as ra
import torch
from ra_testing import (
    FP8,
    clone_cache,
    make_paged,
    ref_decode,
    ref_extend,
    same_impl_tolerance,
    set_row,
    store,
    tolerance,
    with_cache,
)
from torch import Tensor

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16


@dataclass(frozen=True)
class DecodeCase:
    dtype: torch.dtype = F32
    cache_dtype: torch.dtype | None = None
    hq: int = 4
    hkv: int = 2
    d: int = 16
    dv: int = 16
    lens: tuple[int, ...] = (5, 1, 13)
    write: bool = True
    window: int | None = None
    cap: float = 0.0
    sinks: bool = False
    index_dtype: torch.dtype = torch.int64
    mla_view: bool = False


DECODE_CASES: dict[str, DecodeCase] = {
    "basic": DecodeCase(),
    "no-write": DecodeCase(write=False, lens=(4, 0, 9)),
    "empty-and-one": DecodeCase(write=False, lens=(0, 1, 0)),
    "hq7-hkv1-odd-dims": DecodeCase(hq=7, hkv=1, d=17, dv=9, lens=(3, 30)),
    "hq6-hkv2": DecodeCase(hq=6, hkv=2, d=24, dv=24, lens=(2, 65, 1)),
    "hq6-hkv3-bf16": DecodeCase(dtype=BF16, hq=6, hkv=3, d=40, dv=40, lens=(7, 70)),
    "mha-fp16": DecodeCase(dtype=F16, hq=3, hkv=3, d=8, dv=8, lens=(1, 2, 3, 4)),
    "d1": DecodeCase(hq=2, hkv=1, d=1, dv=1, lens=(6,)),
    "window0": DecodeCase(window=0, lens=(5, 1, 20)),
    "window3-bf16": DecodeCase(dtype=BF16, window=3, lens=(2, 9, 33)),
    "window-longer-than-seq": DecodeCase(window=100, lens=(5, 12)),
    "logit-cap": DecodeCase(cap=0.8, lens=(9, 31)),
    "sinks": DecodeCase(sinks=True, hq=6, hkv=2, lens=(1, 18)),
    "sinks-empty": DecodeCase(sinks=True, write=False, lens=(0, 5)),
    "all-options-fp16": DecodeCase(dtype=F16, window=4, cap=2.0, sinks=True, lens=(3, 11)),
    "int32-indices": DecodeCase(index_dtype=torch.int32, lens=(4, 8)),
    "fp8-e4m3": DecodeCase(cache_dtype=torch.float8_e4m3fn, lens=(6, 17)),
    "fp8-e5m2-bf16": DecodeCase(dtype=BF16, cache_dtype=torch.float8_e5m2, lens=(3, 25)),
    "fp8-no-write-window": DecodeCase(
        cache_dtype=torch.float8_e4m3fn, write=False, window=2, lens=(8,)
    ),
    "int8": DecodeCase(cache_dtype=torch.int8, lens=(5, 1, 40)),
    "int8-bf16-hq7": DecodeCase(
        dtype=BF16, cache_dtype=torch.int8, hq=7, hkv=1, d=33, dv=20, lens=(2, 19)
    ),
    "int8-no-write-sinks": DecodeCase(cache_dtype=torch.int8, write=False, sinks=True, lens=(4,)),
    "mla-view": DecodeCase(hq=4, hkv=1, d=24, dv=16, mla_view=True, write=False, lens=(7, 3)),
    "long-context": DecodeCase(hq=4, hkv=1, d=32, dv=32, lens=(300, 129)),
}


@dataclass
class DecodeRun:
    q: Tensor
    out: Tensor
    seq_lens: Tensor
    loc: Tensor | None
    key: Tensor | None
    value: Tensor | None
    sinks: Tensor | None
    paged: object = field(repr=False, default=None)


def _decode_inputs(case: DecodeCase, seed: int = 0):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed + 99)
    p = make_paged(
        list(case.lens),
        kv_heads=case.hkv,
        head_dim=case.d,
        v_head_dim=case.dv,
        dtype=case.dtype,
        cache_dtype=case.cache_dtype,
        seed=seed,
        index_dtype=case.index_dtype,
        mla_view=case.mla_view,
    )
    b = len(case.lens)
    q = torch.randn(b, case.hq, case.d, generator=g).to(case.dtype)
    seq_lens = torch.tensor(case.lens, dtype=case.index_dtype)
    loc = key = value = None
    if case.write:
        loc = torch.stack(
            [p.req_to_token[p.req_pool_indices[i], n - 1] for i, n in enumerate(case.lens)]
        )
        key = torch.randn(b, case.hkv, case.d, generator=g).to(case.dtype)
        value = torch.randn(b, case.hkv, case.dv, generator=g).to(case.dtype)
    sinks = torch.randn(case.hq, generator=g) if case.sinks else None
    return p, q, seq_lens, loc, key, value, sinks


def _run_decode(case: DecodeCase) -> tuple[Tensor, object, Tensor, object]:
    p, q, seq_lens, loc, key, value, sinks = _decode_inputs(case)
    expected_cache = clone_cache(p.cache)
    if loc is not None and key is not None and value is not None:
        for i in range(q.shape[0]):
            r = int(loc[i])
            kq, ks = store(key[i : i + 1], expected_cache, "k")
            vq, vs = store(value[i : i + 1], expected_cache, "v")
            set_row(expected_cache.v, r, vq[0])
            set_row(expected_cache.k, r, kq[0])
            if ks is not None and vs is not None:
                assert expected_cache.k_scales is not None and expected_cache.v_scales is not None
                expected_cache.k_scales[r] = ks[0]
                expected_cache.v_scales[r] = vs[0]
    out = torch.full((q.shape[0], case.hq, case.dv), float("nan"), dtype=case.dtype)
    ra.decode(
        q,
        p.cache,
        out,
        p.req_to_token,
        p.req_pool_indices,
        seq_lens,
        sm_scale=case.d**-0.5,
        loc=loc,
        key=key,
        value=value,
        logit_cap=case.cap,
        sliding_window=case.window,
        sinks=sinks,
    )
    ref = ref_decode(
        q,
        with_cache(p, expected_cache),
        list(case.lens),
        sm_scale=case.d**-0.5,
        logit_cap=case.cap,
        window=case.window,
        sinks=sinks,
    )
    return out, p.cache, ref, expected_cache


def _same_cache(actual: ra.KVCache, expected: ra.KVCache) -> None:
    for name in ("k", "v", "k_scales", "v_scales"):
        a, e = getattr(actual, name), getattr(expected, name)
        if a is None:
            assert e is None
            continue
        if a.dtype in FP8:
            a, e = a.view(torch.uint8), e.view(torch.uint8)
        assert torch.equal(a, e), f"cache {name} differs from the expected writes"


@pytest.mark.parametrize("name", sorted(DECODE_CASES))
def test_decode_matches_fp64_reference(name: str, impl: str) -> None:
    case = DECODE_CASES[name]
    out, cache, ref, expected_cache = _run_decode(case)
    assert isinstance(cache, ra.KVCache) and isinstance(expected_cache, ra.KVCache)
    _same_cache(cache, expected_cache)
    torch.testing.assert_close(out.to(torch.float64), ref, **tolerance(case.dtype))


@pytest.mark.parametrize("name", sorted(DECODE_CASES))
def test_decode_kernel_and_fallback_agree(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    outs = {}
    for mode in ("kernel", "fallback"):
        monkeypatch.setenv(ra.ENV_IMPL, mode)
        ra.clear_cache()
        outs[mode] = _run_decode(DECODE_CASES[name])[0]
    torch.testing.assert_close(
        outs["kernel"], outs["fallback"], **same_impl_tolerance(DECODE_CASES[name].dtype)
    )


@dataclass(frozen=True)
class ExtendCase:
    dtype: torch.dtype = F32
    cache_dtype: torch.dtype | None = None
    hq: int = 4
    hkv: int = 2
    d: int = 16
    dv: int = 16
    seq: tuple[int, ...] = (6, 3, 9)
    ext: tuple[int, ...] = (2, 3, 4)
    kv: str = "write"  # "write": k/v + out_cache_loc; "given": k/v, caller wrote; "shared": None
    causal: bool = True
    window: int | None = None
    cap: float = 0.0
    sinks: bool = False
    gap: int = 0  # unused q rows between requests
    default_starts: bool = True
    kernel_rejects: bool = False  # the kernel cannot run this call (RVV_ATTENTION_IMPL=kernel)


EXTEND_CASES: dict[str, ExtendCase] = {
    "basic": ExtendCase(),
    "no-prefix": ExtendCase(seq=(4, 7), ext=(4, 7)),
    "prefix-hit-one-new": ExtendCase(seq=(10, 33), ext=(1, 1)),
    "empty-request": ExtendCase(seq=(5, 4, 8), ext=(0, 4, 0)),
    "given-kv": ExtendCase(kv="given"),
    "kv-shared": ExtendCase(kv="shared", seq=(9, 4), ext=(3, 4)),
    "kv-shared-bf16": ExtendCase(dtype=BF16, kv="shared", seq=(9, 40), ext=(5, 17)),
    "non-causal": ExtendCase(causal=False, seq=(7, 12), ext=(3, 12)),
    "hq7-hkv1-odd": ExtendCase(hq=7, hkv=1, d=13, dv=5, seq=(3, 21), ext=(3, 6)),
    "hq6-hkv2-bf16": ExtendCase(dtype=BF16, hq=6, hkv=2, d=32, seq=(17, 70), ext=(9, 70)),
    "fp16-window": ExtendCase(dtype=F16, window=2, seq=(8, 20), ext=(5, 11)),
    "window0-noncausal": ExtendCase(window=0, causal=False, seq=(6, 9), ext=(2, 4)),
    "cap-sinks": ExtendCase(cap=1.5, sinks=True, seq=(11, 5), ext=(6, 2)),
    "gaps-explicit-starts": ExtendCase(gap=2, default_starts=False, seq=(6, 5), ext=(3, 2)),
    "fp8-e4m3": ExtendCase(cache_dtype=torch.float8_e4m3fn, seq=(9, 4), ext=(4, 4)),
    "fp8-e5m2-shared": ExtendCase(
        cache_dtype=torch.float8_e5m2, kv="shared", seq=(5, 8), ext=(2, 3)
    ),
    "int8-write": ExtendCase(cache_dtype=torch.int8, seq=(12, 4), ext=(5, 4)),
    "int8-given": ExtendCase(cache_dtype=torch.int8, kv="given", seq=(7, 9), ext=(2, 9)),
    "int8-shared-bf16": ExtendCase(
        dtype=BF16, cache_dtype=torch.int8, kv="shared", seq=(9, 3), ext=(4, 3)
    ),
    # out_cache_loc=None over an INT8 cache with rows of q outside every request: the INT8
    # kernel would have to write those rows somewhere, so this call runs the fallback.
    "int8-given-gaps": ExtendCase(
        cache_dtype=torch.int8,
        kv="given",
        gap=1,
        default_starts=False,
        seq=(5, 5),
        ext=(2, 2),
        kernel_rejects=True,
    ),
    "long-prefill": ExtendCase(hq=2, hkv=1, d=32, dv=32, seq=(150, 90), ext=(130, 20)),
}


def _extend_inputs(case: ExtendCase, seed: int = 0):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed + 7)
    p = make_paged(
        list(case.seq),
        kv_heads=case.hkv,
        head_dim=case.d,
        v_head_dim=case.dv,
        dtype=case.dtype,
        cache_dtype=case.cache_dtype,
        seed=seed,
    )
    starts, pos = [], 0
    for e in case.ext:
        starts.append(pos)
        pos += e + case.gap
    n = pos
    q = torch.randn(n, case.hq, case.d, generator=g).to(case.dtype)
    k = torch.randn(n, case.hkv, case.d, generator=g).to(case.dtype)
    v = torch.randn(n, case.hkv, case.dv, generator=g).to(case.dtype)
    ocl = torch.zeros(n, dtype=torch.int64)
    for b, (s_len, e_len) in enumerate(zip(case.seq, case.ext, strict=True)):
        ocl[starts[b] : starts[b] + e_len] = p.req_to_token[
            p.req_pool_indices[b], s_len - e_len : s_len
        ]
    # Rows of q that belong to no request are written too (out_cache_loc has one row per
    # row of q): point them at cache rows no table uses.
    used = set(p.req_to_token[p.req_to_token >= 0].tolist())
    spare = [r for r in range(p.cache.tokens) if r not in used]
    covered = {r for b, e in enumerate(case.ext) for r in range(starts[b], starts[b] + e)}
    for r in range(n):
        if r not in covered:
            ocl[r] = spare.pop()
    sinks = torch.randn(case.hq, generator=g) * 2 if case.sinks else None
    return p, q, k, v, ocl, starts, sinks


def _run_extend(case: ExtendCase) -> tuple[Tensor, ra.KVCache, Tensor, ra.KVCache, list[int]]:
    p, q, k, v, ocl, starts, sinks = _extend_inputs(case)
    covered = [r for b, e in enumerate(case.ext) for r in range(starts[b], starts[b] + e)]
    expected = clone_cache(p.cache)
    if case.kv in ("write", "given"):
        for r in range(q.shape[0]):
            row = int(ocl[r])
            kq, ks = store(k[r : r + 1], expected, "k")
            vq, vs = store(v[r : r + 1], expected, "v")
            set_row(expected.v, row, vq[0])
            set_row(expected.k, row, kq[0])
            if ks is not None and vs is not None:
                assert expected.k_scales is not None and expected.v_scales is not None
                expected.k_scales[row] = ks[0]
                expected.v_scales[row] = vs[0]
    if case.kv == "given":  # the caller wrote the new tokens itself
        p = with_cache(p, clone_cache(expected))
    n = q.shape[0]
    sentinel = -7.0
    out = torch.full((n, case.hq, case.dv), sentinel, dtype=case.dtype)
    ra.extend(
        q,
        None if case.kv == "shared" else k,
        None if case.kv == "shared" else v,
        p.cache,
        out,
        p.req_to_token,
        p.req_pool_indices,
        torch.tensor(case.seq),
        torch.tensor(case.ext),
        sm_scale=case.d**-0.5,
        extend_start_loc=None if case.default_starts else torch.tensor(starts),
        out_cache_loc=ocl if case.kv == "write" else None,
        causal=case.causal,
        logit_cap=case.cap,
        sliding_window=case.window,
        sinks=sinks,
    )
    ref = ref_extend(
        q,
        None if case.kv == "shared" else k,
        None if case.kv == "shared" else v,
        with_cache(p, expected),
        list(case.seq),
        list(case.ext),
        starts,
        sm_scale=case.d**-0.5,
        causal=case.causal,
        logit_cap=case.cap,
        window=case.window,
        sinks=sinks,
    )
    return out, p.cache, ref, expected, covered


@pytest.mark.parametrize("name", sorted(EXTEND_CASES))
def test_extend_matches_fp64_reference(name: str, impl: str) -> None:
    case = EXTEND_CASES[name]
    if impl == "kernel" and case.kernel_rejects:
        with pytest.raises(ra.KernelUnavailableError, match="belong to no request"):
            _run_extend(case)
        return
    out, cache, ref, expected, covered = _run_extend(case)
    _same_cache(cache, expected)
    rows = torch.tensor(covered, dtype=torch.int64)
    torch.testing.assert_close(out[rows].to(torch.float64), ref[rows], **tolerance(case.dtype))
    untouched = torch.ones(out.shape[0], dtype=torch.bool)
    untouched[rows] = False
    assert bool((out[untouched] == -7.0).all()), "rows of no request were written"


@pytest.mark.parametrize("name", sorted(n for n, c in EXTEND_CASES.items() if not c.kernel_rejects))
def test_extend_kernel_and_fallback_agree(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    outs = {}
    for mode in ("kernel", "fallback"):
        monkeypatch.setenv(ra.ENV_IMPL, mode)
        ra.clear_cache()
        outs[mode] = _run_extend(EXTEND_CASES[name])[0]
    torch.testing.assert_close(
        outs["kernel"], outs["fallback"], **same_impl_tolerance(EXTEND_CASES[name].dtype)
    )


def test_extend_chunks_queries_in_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny score budget forces one query per chunk: same numbers as one chunk."""
    from rvv_attention import _fallback

    monkeypatch.setenv(ra.ENV_IMPL, "fallback")
    case = EXTEND_CASES["hq6-hkv2-bf16"]
    whole = _run_extend(case)[0]
    monkeypatch.setattr(_fallback, "_SCORE_BUDGET", 1)
    ra.clear_cache()
    chunked = _run_extend(case)[0]
    assert torch.equal(whole, chunked)


# Cross-attention runs only in the fallback: checked against the reference directly.


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_cross_attention_decode_and_extend(dtype: torch.dtype) -> None:
    enc = [4, 0, 7]
    p = make_paged([e + 6 for e in enc], kv_heads=2, head_dim=8, v_head_dim=8, dtype=dtype)
    g = torch.Generator().manual_seed(5)
    q = torch.randn(3, 4, 8, generator=g).to(dtype)
    out = torch.zeros(3, 4, 8, dtype=dtype)
    ra.decode(
        q,
        p.cache,
        out,
        p.req_to_token,
        p.req_pool_indices,
        torch.tensor([3, 2, 6]),
        sm_scale=0.3,
        cross_attention=True,
        encoder_lens=torch.tensor(enc),
    )
    # Cross-attention: the encoder tokens, positions [0, encoder_lens), no mask.
    ref = ref_decode(q, p, enc, sm_scale=0.3)
    torch.testing.assert_close(out.to(torch.float64), ref, **tolerance(dtype))

    # Self-attention of the decoder after the encoder: positions [enc, enc + seq_lens).
    dec = [2, 6, 1]
    out2 = torch.zeros(3, 4, 8, dtype=dtype)
    ra.decode(
        q,
        p.cache,
        out2,
        p.req_to_token,
        p.req_pool_indices,
        torch.tensor(dec),
        sm_scale=0.3,
        encoder_lens=torch.tensor(enc),
    )
    for b in range(3):
        shifted = make_view(p, b, enc[b], enc[b] + dec[b])
        exp = ref_decode(q[b : b + 1], shifted, [dec[b]], sm_scale=0.3)
        torch.testing.assert_close(out2[b : b + 1].to(torch.float64), exp, **tolerance(dtype))

    # Extend with cross-attention: every new token sees all encoder tokens.
    ext = [2, 1, 3]
    qx = torch.randn(sum(ext), 4, 8, generator=g).to(dtype)
    outx = torch.zeros(sum(ext), 4, 8, dtype=dtype)
    ra.extend(
        qx,
        None,
        None,
        p.cache,
        outx,
        p.req_to_token,
        p.req_pool_indices,
        torch.tensor([e + 1 for e in ext]),
        torch.tensor(ext),
        sm_scale=0.3,
        cross_attention=True,
        encoder_lens=torch.tensor(enc),
    )
    starts = [0, 2, 3]
    for b in range(3):
        for i in range(ext[b]):
            exp = ref_decode(
                qx[starts[b] + i : starts[b] + i + 1],
                make_view(p, b, 0, enc[b]),
                [enc[b]],
                sm_scale=0.3,
            )
            torch.testing.assert_close(
                outx[starts[b] + i : starts[b] + i + 1].to(torch.float64), exp, **tolerance(dtype)
            )


def make_view(p, b: int, lo: int, hi: int):  # type: ignore[no-untyped-def]
    """A one-request Paged whose table row is positions [lo, hi) of request b's."""
    from ra_testing import Paged

    row = p.req_to_token[p.req_pool_indices[b], lo:hi].unsqueeze(0)
    return Paged(p.cache, row, torch.tensor([0]), [hi - lo])


def test_cross_attention_in_kernel_mode_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ra.ENV_IMPL, "kernel")
    p = make_paged([3], kv_heads=1, head_dim=4, v_head_dim=4, dtype=F32)
    with pytest.raises(ra.KernelUnavailableError, match="cross_attention"):
        ra.decode(
            torch.randn(1, 2, 4),
            p.cache,
            torch.zeros(1, 2, 4),
            p.req_to_token,
            p.req_pool_indices,
            torch.tensor([1]),
            sm_scale=1.0,
            cross_attention=True,
            encoder_lens=torch.tensor([3]),
        )


def test_call_the_kernel_cannot_run_falls_back_in_auto_mode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    case = EXTEND_CASES["int8-given-gaps"]
    with caplog.at_level("INFO", logger="rvv_attention"):
        out, cache, ref, expected, covered = _run_extend(case)
        _run_extend(case)
    _same_cache(cache, expected)
    rows = torch.tensor(covered)
    torch.testing.assert_close(out[rows].to(torch.float64), ref[rows], **tolerance(case.dtype))
    msgs = [r.getMessage() for r in caplog.records if "belong to no request" in r.getMessage()]
    assert len(msgs) == 1, msgs
