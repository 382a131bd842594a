"""The rvv-ops ops (torch.ops.sgl_kernel.decode_attention_cpu / extend_attention_cpu and
their _int8_ variants) against the fp64 reference over the case matrix: outputs, and what
the ops leave in the caches (bit for bit), plus SGLang's calling conventions and the typed
wrappers of the public ``rvv_ops`` API (how the file is run: see the package docstring).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import rvv_ops
import torch

from conformance.cases import (
    OPS,
    PERF_QUICK,
    DecodeCase,
    ExtendCase,
    expected_decode_cache,
    extend_slack,
    make_decode,
    make_extend,
    perf_case,
    reference_decode,
    reference_extend,
    skip_unless_selected,
)
from conformance.fixtures import active_variant
from conformance.kvcache import same_bits
from conformance.reference import assert_matches

# the op arguments that hold each cache of expected_decode_cache / expected_extend_cache
CACHE_NAMES = {"decode": {}, "extend": {"k_cache": "k_buffer", "v_cache": "v_buffer"}}


def check_cache(args: dict[str, object], expected: dict[str, torch.Tensor], names: dict[str, str]):  # type: ignore[no-untyped-def]
    for name, want in expected.items():
        got = args[names.get(name, name)]
        assert isinstance(got, torch.Tensor) and same_bits(got, want), name


def check_call(kind: str, case: DecodeCase | ExtendCase, what: str, seed: int = 0) -> None:
    """Calls the op on the case's batch: the caches must hold exactly the expected writes
    and the output match the fp64 reference (the rvv-ops decode kernels keep p in fp32:
    no p-rounding slack for decode)."""
    op = OPS[kind]
    run = op.make(case, seed=seed)
    expected_cache = op.expected_cache(run)
    run.call()
    check_cache(run.args, expected_cache, CACHE_NAMES[kind])
    slack = op.slack(run) if kind == "extend" else None
    assert_matches(run.args[op.output], op.reference(run), what, slack)


@pytest.mark.parametrize(("kind", "name"), [(k, n) for k, op in OPS.items() for n in op.cases])
def test_matches_reference(kind: str, name: str) -> None:
    case = OPS[kind].cases[name]
    skip_unless_selected(case.quick)
    check_call(kind, case, name, seed=len(name))


@pytest.fixture(params=rvv_ops.build_info()["supported_variants"])
def variant(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs the test with every kernel on one variant, then restores the previous one."""
    with active_variant(str(request.param)) as name:
        yield name


@pytest.mark.parametrize("kind", ["decode", "extend"])
def test_every_variant(variant: str, kind: str) -> None:
    # The matrix above runs on the default (best) variant; here every variant the CPU
    # supports gets a decode and an extend batch with each cache kind.
    for cache in ("same", "e4m3", "int8"):
        case = (
            DecodeCase(lens=(1, 17, 70), heads=(6, 2), cache=cache, window=40)
            if kind == "decode"
            else ExtendCase(reqs=((0, 3), (20, 35)), heads=(6, 2), cache=cache)
        )
        check_call(kind, case, f"{variant} {cache}")


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
    # SGLang's layer holds W (keys at positions >= q_pos - W); its CPU backend passes W + 1
    # to the ops. The cases hold the ops' value: W + 1 here.
    d = make_decode(
        DecodeCase(lens=(1, 6, 60), heads=(4, 4), dtype=torch.float32, write=False,
                   window=sliding_window_size + 1)
    )  # fmt: skip
    e = make_extend(
        ExtendCase(reqs=((3, 9), (50, 20)), heads=(4, 4), dtype=torch.float32,
                   window=sliding_window_size + 1)
    )  # fmt: skip
    expected_e = reference_extend(e)
    d.call()
    e.call()
    assert_matches(d.args["output"], reference_decode(d))
    assert_matches(e.args["o_extend"], expected_e)


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


def _behind_a_nan_row(t: torch.Tensor) -> torch.Tensor:
    """``t`` copied into rows [1, n] of a buffer whose row 0 is NaN: a read of row -1 (a
    table entry of -1 taken for a row) then turns an output into NaN."""
    buf = torch.full((t.shape[0] + 1, *t.shape[1:]), float("nan"), dtype=t.dtype)
    buf[1:] = t
    return buf[1:]


@pytest.mark.parametrize("prefix", [40, 70, 200])
def test_extend_never_reads_rows_before_every_window(prefix: int) -> None:
    # Keys before the first new token's window are seen by no query of the request; their
    # table entries (-1 here) must not be read even where the kernel's key blocks, aligned
    # to its block size, start before the window (found by the sanitized ops build).
    e = make_extend(ExtendCase(reqs=((prefix, 6), (2, 2)), heads=(4, 2), window=8))
    expected, slack = reference_extend(e), extend_slack(e)
    e.pool.req_to_token[int(e.pool.req_pool_indices[0]), : prefix - 8 + 1] = -1
    for name in ("k_buffer", "v_buffer"):
        e.args[name] = _behind_a_nan_row(e.args[name])
    e.call()
    assert not e.args["o_extend"].isnan().any()
    assert_matches(e.args["o_extend"], expected, slack=slack)


def test_typed_wrappers() -> None:
    # rvv_ops' public API over the same ops, keyword arguments with defaults.
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


@pytest.mark.parametrize("op", ["decode", "extend"])
def test_perf_cases(op: str) -> None:
    # The batches tools/bench_x86.py --quick times (the perf mode of the matrix) compute
    # what the reference does; the benchmark itself compares implementations with each
    # other, not with the reference.
    skip_unless_selected(False)
    batches, contexts = PERF_QUICK
    for b in batches:
        for c in contexts:
            check_call(op, perf_case(op, b, c), f"{op} {b}x{c}")
