"""rvv-attention's ``decode`` / ``extend`` against the fp64 reference over the layered
sample of the case matrix (conformance.cases.layered_sample), once on its
kernel path (``RVV_ATTENTION_IMPL=kernel``: the rvv-ops kernels; a silent
fallback would raise instead) and once on its fallback path (``=fallback``: the
torch-native implementation in ``_fallback.py``): outputs, cache contents after the call
(bit for bit), rows of no request left alone; the two paths against each other to one
output rounding; cross-attention (fallback only) and the auto mode's fallback (how the
file is run: see the package docstring).
"""

from __future__ import annotations

import pytest
import rvv_attention as ra
import torch
from torch import Tensor

from conformance.cases import (
    DECODE_CASES,
    DECODE_GRID,
    DECODE_SMALL,
    EXTEND_CASES,
    EXTEND_GRID,
    EXTEND_SMALL,
    OPS,
    DecodeCase,
    DecodeRun,
    ExtendCase,
    ExtendRun,
    expected_decode_cache,
    expected_extend_cache,
    extend_slack,
    layered_sample,
    make_decode,
    make_extend,
    reference_decode,
    reference_extend,
    skip_unless_selected,
)

# The autouse _clean_state fixture and the impl fixture (pytest finds them by these names).
from conformance.fixtures import clean_state_fixture, impl_fixture, use_impl  # noqa: F401
from conformance.kvcache import KvPool, gen, make_pool, randn, same_bits
from conformance.reference import SAME_IMPL_TOLERANCES, assert_matches, attention, window_of_ops


def cache_of(pool: KvPool) -> ra.KVCache:
    return ra.KVCache(
        pool.k,
        pool.v,
        k_scale=pool.k_scale,
        v_scale=pool.v_scale,
        k_scales=pool.k_scales,
        v_scales=pool.v_scales,
    )


def check_cache(pool: KvPool, expected: dict[str, Tensor]) -> None:
    got = {"k_cache": pool.k, "v_cache": pool.v}
    if pool.k_scales is not None and pool.v_scales is not None:
        got["k_scale_buf"], got["v_scale_buf"] = pool.k_scales, pool.v_scales
    for name, want in expected.items():
        assert same_bits(got[name], want), f"cache {name} differs from the expected writes"


def call_decode(run: DecodeRun) -> None:
    """``run`` through ra.decode (table indices in the case's table dtype, as SGLang may
    pass them); writes its output."""
    case, a = run.case, run.args
    ra.decode(
        a["query"],
        cache_of(run.pool),
        a["output"],
        a["req_to_token"],
        a["req_pool_indices"].to(case.table),
        a["seq_lens"].to(case.table),
        sm_scale=a["sm_scale"],
        loc=a["loc"] if case.write else None,
        key=a["key"],
        value=a["value"],
        logit_cap=case.logit_cap,
        sliding_window=window_of_ops(case.window),
        sinks=a["sinks"],
    )


def run_decode(case: DecodeCase, seed: int) -> tuple[DecodeRun, dict[str, Tensor]]:
    """The case through :func:`call_decode`; returns the run (its output written) and the
    expected caches."""
    run = make_decode(case, seed)
    expected = expected_decode_cache(run)
    call_decode(run)
    return run, expected


def kernel_rejects(case: ExtendCase) -> bool:
    """out_cache_loc not given (kv "given" or "shared") over an INT8 cache with rows of q
    outside every request: the INT8 kernel writes one cache row per row of q and would have
    to write those somewhere, so rvv-attention's kernel path raises KernelUnavailableError
    and only the fallback runs it."""
    return case.cache == "int8" and case.kv != "write" and case.gaps


def call_extend(run: ExtendRun) -> None:
    """``run`` through ra.extend: kv "write" passes out_cache_loc (rvv-attention writes the
    new tokens), "given" not (the caller wrote them), "shared" passes no k / v;
    extend_start_loc only where rows of no request make it differ from the default."""
    case, a = run.case, run.args
    ra.extend(
        a["q_extend"],
        a["k_extend"],
        a["v_extend"],
        cache_of(run.pool),
        a["o_extend"],
        a["req_to_token"],
        a["req_pool_indices"],
        a["seq_lens"],
        a["extend_seq_lens"],
        sm_scale=a["sm_scale"],
        extend_start_loc=a["extend_start_loc"] if case.gaps else None,
        out_cache_loc=a["out_cache_loc"] if case.kv == "write" else None,
        causal=case.causal,
        logit_cap=case.logit_cap,
        sliding_window=window_of_ops(case.window),
        sinks=a["sinks"],
    )


def run_extend(case: ExtendCase, seed: int) -> tuple[ExtendRun, dict[str, Tensor]]:
    """The case through :func:`call_extend`; returns the run and the expected caches."""
    run = make_extend(case, seed, writes=case.kv == "write")
    expected = expected_extend_cache(run)
    call_extend(run)
    return run, expected


@pytest.mark.parametrize("name", layered_sample(DECODE_CASES, DECODE_GRID))
def test_decode_matches_reference(name: str, impl: str) -> None:
    case = DECODE_CASES[name]
    skip_unless_selected(case.quick)
    run, expected_cache = run_decode(case, seed=len(name))
    check_cache(run.pool, expected_cache)
    assert_matches(run.args["output"], reference_decode(run), f"{impl} {name}")


@pytest.mark.parametrize("name", layered_sample(EXTEND_CASES, EXTEND_GRID))
def test_extend_matches_reference(name: str, impl: str) -> None:
    case = EXTEND_CASES[name]
    skip_unless_selected(case.quick)
    if impl == "kernel" and kernel_rejects(case):
        with pytest.raises(ra.KernelUnavailableError, match="belong to no request"):
            run_extend(case, seed=len(name))
        return
    run, expected_cache = run_extend(case, seed=len(name))
    check_cache(run.pool, expected_cache)
    # rows of no request: the reference has NaN there, and so must o_extend (left alone)
    assert_matches(run.args["o_extend"], reference_extend(run), f"{impl} {name}", extend_slack(run))


# The two paths against each other on the small cases (both are within the reference's
# tolerance everywhere; this bounds fp32 disagreement tighter).
RUNS = {"decode": run_decode, "extend": run_extend}
SMALL = [("decode", n) for n in sorted(DECODE_SMALL)] + [
    ("extend", n) for n in sorted(EXTEND_SMALL) if not kernel_rejects(EXTEND_CASES[n])
]


@pytest.mark.parametrize(("kind", "name"), SMALL)
def test_kernel_and_fallback_agree(kind: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    op = OPS[kind]
    case = op.cases[name]
    skip_unless_selected(case.quick)
    outs = {}
    for mode in ("kernel", "fallback"):
        use_impl(mode, monkeypatch)
        run = RUNS[kind](case, seed=len(name))[0]
        outs[mode] = run.args[op.output]
    assert_matches(outs["kernel"], outs["fallback"], name, op.slack(run), SAME_IMPL_TOLERANCES)


def test_extend_chunks_queries_in_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny score budget forces one query per chunk: the numbers of one chunk.

    Not bit for bit: torch's fp32 matmul may sum in another order for another number of
    query rows (its CPU GEMM picks kernels by shape; on a Sapphire Rapids host one row and
    many rows differ in the last fp32 bits), so the bf16 outputs may differ by one rounding.
    A query attending to the wrong keys, or written to the wrong row, differs by far more.
    """
    from rvv_attention import _fallback

    use_impl("fallback", monkeypatch)
    case = EXTEND_CASES["hq6-hkv2 D32 bf16"]
    whole = run_extend(case, seed=1)[0].args["o_extend"]
    monkeypatch.setattr(_fallback, "_SCORE_BUDGET", 1)
    ra.clear_cache()
    chunked = run_extend(case, seed=1)[0].args["o_extend"]
    assert whole.shape == chunked.shape and whole.dtype == chunked.dtype
    # One bf16 step apart at most (2^-7 of the larger value: bf16 keeps 8 significant bits),
    # plus fp32 ordering noise of outputs that are sums of terms around 1 cancelling to ~0.
    a, b = whole.float(), chunked.float()
    diff = (a - b).abs()
    assert bool((diff <= 2.0**-7 * torch.maximum(a.abs(), b.abs()) + 1e-6).all()), float(diff.max())


def test_call_the_kernel_cannot_run_falls_back_in_auto_mode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    case = EXTEND_CASES["int8 given gaps"]
    with caplog.at_level("INFO", logger="rvv_attention"):
        run, expected_cache = run_extend(case, seed=2)
        run_extend(case, seed=2)
    check_cache(run.pool, expected_cache)
    assert_matches(run.args["o_extend"], reference_extend(run), "auto")
    msgs = [r.getMessage() for r in caplog.records if "belong to no request" in r.getMessage()]
    assert len(msgs) == 1, msgs


# Cross-attention runs only in the fallback: checked against the reference directly.


def over(q: Tensor, pool: KvPool, b: int, lo: int, hi: int, sm_scale: float) -> Tensor:
    """The reference for queries q [M, Hq, D] seeing request b's positions lo..hi-1, no mask."""
    k, v = pool.keys(b, lo, hi)
    return attention(q, k, v, torch.zeros(q.shape[0], dtype=torch.long), sm_scale=sm_scale,
                     causal=False)  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_attention_decode_and_extend(dtype: torch.dtype) -> None:
    enc = [4, 0, 7]
    g = gen(5)
    pool = make_pool(
        g, tuple(e + 6 for e in enc), kv_heads=2, dims=(8, 8), dtype=dtype, cache="same",
        table=torch.int64,
    )  # fmt: skip
    cache = cache_of(pool)
    r2t, rpi = pool.req_to_token, pool.req_pool_indices
    q = randn(g, 3, 4, 8, dtype=dtype)
    out = torch.zeros(3, 4, 8, dtype=dtype)
    # Cross-attention: the encoder tokens, positions [0, encoder_lens), no mask.
    ra.decode(q, cache, out, r2t, rpi, torch.tensor([3, 2, 6]), sm_scale=0.3,
              cross_attention=True, encoder_lens=torch.tensor(enc))  # fmt: skip
    for b in range(3):
        assert_matches(out[b : b + 1], over(q[b : b + 1], pool, b, 0, enc[b], 0.3), "cross")

    # Self-attention of the decoder after the encoder: positions [enc, enc + seq_lens).
    dec = [2, 6, 1]
    out2 = torch.zeros(3, 4, 8, dtype=dtype)
    ra.decode(q, cache, out2, r2t, rpi, torch.tensor(dec), sm_scale=0.3,
              encoder_lens=torch.tensor(enc))  # fmt: skip
    for b in range(3):
        expected = over(q[b : b + 1], pool, b, enc[b], enc[b] + dec[b], 0.3)
        assert_matches(out2[b : b + 1], expected, "decoder self-attention")

    # Extend with cross-attention: every new token sees all encoder tokens.
    ext = [2, 1, 3]
    qx = randn(g, sum(ext), 4, 8, dtype=dtype)
    outx = torch.zeros(sum(ext), 4, 8, dtype=dtype)
    ra.extend(qx, None, None, cache, outx, r2t, rpi, torch.tensor([e + 1 for e in ext]),
              torch.tensor(ext), sm_scale=0.3, cross_attention=True,
              encoder_lens=torch.tensor(enc))  # fmt: skip
    starts = [0, 2, 3]
    for b in range(3):
        rows = slice(starts[b], starts[b] + ext[b])
        assert_matches(outx[rows], over(qx[rows], pool, b, 0, enc[b], 0.3), "cross extend")


def test_cross_attention_in_kernel_mode_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    use_impl("kernel", monkeypatch)
    pool = make_pool(gen(0), (3,), kv_heads=1, dims=(4, 4), dtype=torch.float32, cache="same",
                     table=torch.int64)  # fmt: skip
    with pytest.raises(ra.KernelUnavailableError, match="cross_attention"):
        ra.decode(
            torch.randn(1, 2, 4),
            cache_of(pool),
            torch.zeros(1, 2, 4),
            pool.req_to_token,
            pool.req_pool_indices,
            torch.tensor([1]),
            sm_scale=1.0,
            cross_attention=True,
            encoder_lens=torch.tensor([3]),
        )
