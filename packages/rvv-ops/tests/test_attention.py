"""The attention ops beyond their numerics (those are the conformance suite's,
tests/conformance/test_ops.py, against the one fp64 reference): schemas as SGLang calls
them, thread-count independence, idempotent repeated calls, the INT8 quantisation bit for
bit, empty batches and lengths, autograd and version counters. The batches come from the
suite's builders (conformance.cases).
"""

from __future__ import annotations

import os
import platform
from dataclasses import replace
from typing import Any

import pytest
import torch
from conformance.cases import (
    DecodeCase,
    ExtendCase,
    make_decode,
    make_extend,
    reference_decode,
)
from conformance.kvcache import same_bits
from torch import Tensor

DECODE = torch.ops.sgl_kernel.decode_attention_cpu.default
EXTEND = torch.ops.sgl_kernel.extend_attention_cpu.default
DECODE_INT8 = torch.ops.sgl_kernel.decode_attention_int8_cpu.default
EXTEND_INT8 = torch.ops.sgl_kernel.extend_attention_int8_cpu.default


def skip_unless_quick(config: pytest.Config, quick_case: bool) -> None:
    """Skips a sample outside the quick subset on riscv64 (emulated) and with
    ``--rvv-ops-lengths=quick``; ``RVV_OPS_TEST_ATTENTION=full`` runs it anyway."""
    if quick_case or os.environ.get("RVV_OPS_TEST_ATTENTION") == "full":
        return
    if platform.machine() == "riscv64":
        pytest.skip("riscv64 (usually emulated): quick subset (RVV_OPS_TEST_ATTENTION=full)")
    if config.getoption("--rvv-ops-lengths") == "quick":
        pytest.skip("--rvv-ops-lengths=quick: quick subset (RVV_OPS_TEST_ATTENTION=full)")


# --------------------------------------------------------------------------------------
# Threads, repeated calls


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
    # intel_amx_backend.py (SGLang 0.5.23) passes these, positionally, in this order; both
    # ops take the same options after their tensors.
    options = [
        "sm_scale",
        "logit_cap",
        "is_cross_attention",
        "sliding_window_size",
        "encoder_lens",
        "sinks",
    ]
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
        *options,
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
        *options,
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
