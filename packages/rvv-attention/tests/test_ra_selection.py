"""The selection matrix: kernels present, rvv_ops absent, the kernel rejecting a case.

Each situation must give the expected implementation and reason, log the reason once,
and produce the same numbers.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
import rvv_attention as ra
import torch
from conformance.reference import SAME_IMPL_TOLERANCES, assert_matches
from ra_testing import make_paged, python_cmd, ref_decode
from rvv_attention import _kernel

BASIC = {"q_dtype": torch.bfloat16, "kv_dtype": torch.bfloat16, "head_dim": 128}


def _decode_once(cache_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A small decode (no write) and its fp64 reference."""
    p = make_paged(
        [5, 9], kv_heads=2, head_dim=16, v_head_dim=16, dtype=torch.float32, seed=3,
        cache_dtype=cache_dtype,
    )  # fmt: skip
    q = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(1))
    out = torch.zeros(2, 6, 16)
    ra.decode(
        q, p.cache, out, p.req_to_token, p.req_pool_indices, torch.tensor([5, 9]), sm_scale=0.25
    )
    return out, ref_decode(q, p, [5, 9], sm_scale=0.25)


# -- kernels present ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("features", "impl", "reason"),
    [
        (set(), "kernel", None),
        ({"sliding_window", "sinks", "logit_cap"}, "kernel", None),
        ({"fp8_kv", "kv_write"}, "kernel", None),
        ({"int8_kv", "kv_shared", "non_causal", "mla"}, "kernel", None),
        ({"cross_attention", "encoder_lens"}, "fallback", "cross_attention, encoder_lens"),
        ({"encoder_lens"}, "fallback", "the kernel does not support encoder_lens"),
    ],
)
def test_select_with_kernels(features: set[str], impl: str, reason: str | None) -> None:
    for op in ("decode", "extend"):
        sel = ra.select(op, features=features, **BASIC)  # type: ignore[arg-type]
        assert sel.impl.name == impl
        if reason is None:
            assert sel.reason is None
        else:
            assert sel.reason is not None and reason in sel.reason


def test_select_non_cpu_device_falls_back() -> None:
    sel = ra.select("decode", device="cuda", **BASIC)  # type: ignore[arg-type]
    assert sel.impl.name == "fallback"
    assert sel.reason == "the kernel runs on cpu, not on device cuda"


def test_select_is_cached_per_case() -> None:
    a = ra.select("decode", features={"sinks"}, **BASIC)  # type: ignore[arg-type]
    b = ra.select("decode", features=frozenset({"sinks"}), **BASIC)  # type: ignore[arg-type]
    assert a is b
    assert ra.select("extend", features={"sinks"}, **BASIC) is not a  # type: ignore[arg-type]


def test_select_rejects_unknown_op_and_feature() -> None:
    with pytest.raises(ValueError, match="op is 'prefill'"):
        ra.select("prefill", **BASIC)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown feature"):
        ra.select("decode", features={"tree_mask"}, **BASIC)  # type: ignore[arg-type]


def test_implementations_declare_support_as_data() -> None:
    impls = {i.name: i for i in ra.implementations()}
    assert set(impls) == {"kernel", "fallback"}
    assert impls["fallback"].features == ra.FEATURES
    assert "cross_attention" not in impls["kernel"].features
    for impl in impls.values():
        assert {"decode", "extend"} <= impl.ops
        assert torch.int8 in impl.kv_dtypes and torch.float8_e4m3fn in impl.kv_dtypes


def test_env_fallback_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ra.ENV_IMPL, "fallback")
    sel = ra.select("decode", **BASIC)  # type: ignore[arg-type]
    assert sel.impl.name == "fallback" and sel.reason == "RVV_ATTENTION_IMPL=fallback"


def test_env_kernel_mode_raises_for_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ra.ENV_IMPL, "kernel")
    assert ra.select("decode", **BASIC).impl.name == "kernel"  # type: ignore[arg-type]
    with pytest.raises(ra.KernelUnavailableError, match="cross_attention"):
        ra.select("decode", features={"cross_attention"}, **BASIC)  # type: ignore[arg-type]


def test_env_invalid_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ra.ENV_IMPL, "fast")
    with pytest.raises(ValueError, match="RVV_ATTENTION_IMPL='fast'; expected one of"):
        ra.select("decode", **BASIC)  # type: ignore[arg-type]


def test_kernel_and_fallback_give_the_same_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel_out, ref = _decode_once()
    monkeypatch.setenv(ra.ENV_IMPL, "fallback")
    ra.clear_cache()
    fallback_out, _ = _decode_once()
    assert_matches(kernel_out, fallback_out, tolerances=SAME_IMPL_TOLERANCES)
    assert_matches(fallback_out, ref)


def test_call_counts_name_the_implementation_that_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    before = ra.call_counts()
    _decode_once()
    _decode_once()
    monkeypatch.setenv(ra.ENV_IMPL, "fallback")
    ra.clear_cache()
    _decode_once()
    after = ra.call_counts()
    grew = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert grew == {"decode:kernel": 2, "decode:fallback": 1}


def test_call_counts_name_the_cache_kind_too() -> None:
    before = ra.call_counts()
    _decode_once(torch.int8)
    _decode_once()
    after = ra.call_counts()
    grew = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert grew == {"decode:kernel": 2, "decode int8_kv:kernel": 1}


def test_fallback_reason_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    p = make_paged([3, 4], kv_heads=1, head_dim=8, v_head_dim=8, dtype=torch.float32)
    with caplog.at_level("INFO", logger="rvv_attention"):
        for _ in range(3):
            ra.decode(
                torch.randn(2, 2, 8),
                p.cache,
                torch.zeros(2, 2, 8),
                p.req_to_token,
                p.req_pool_indices,
                torch.tensor([1, 1]),
                sm_scale=1.0,
                cross_attention=True,
                encoder_lens=torch.tensor([3, 4]),
            )
    msgs = [r.getMessage() for r in caplog.records if r.name == "rvv_attention"]
    assert len(msgs) == 1
    assert msgs[0] == (
        "decode: using the torch-native fallback: "
        "the kernel does not support cross_attention, encoder_lens"
    )


# -- rvv_ops absent -----------------------------------------------------------------------


def test_rvv_ops_absent_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader's result replaced by an import failure: every case falls back."""
    kernel_out, _ = _decode_once()
    monkeypatch.setattr(_kernel, "_loaded", (None, "rvv_ops cannot be imported (simulated)"))
    ra.clear_cache()
    sel = ra.select("decode", **BASIC)  # type: ignore[arg-type]
    assert sel.impl.name == "fallback"
    assert sel.reason == "the kernel is unavailable: rvv_ops cannot be imported (simulated)"
    out, _ = _decode_once()
    assert_matches(out, kernel_out, tolerances=SAME_IMPL_TOLERANCES)
    monkeypatch.setenv(ra.ENV_IMPL, "kernel")
    with pytest.raises(ra.KernelUnavailableError, match="simulated"):
        ra.select("decode", **BASIC)  # type: ignore[arg-type]


_BLOCKED = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "rvv_ops" or name.startswith("rvv_ops."):
                raise ImportError("blocked by the test: rvv_ops is absent")
            return None

    sys.meta_path.insert(0, Block())
    sys.path.insert(0, sys.argv[1])
    import torch
    import rvv_attention as ra
    from ra_testing import make_paged, ref_decode

    p = make_paged([5, 9], kv_heads=2, head_dim=16, v_head_dim=16, dtype=torch.float32, seed=3)
    q = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(1))
    out = torch.zeros(2, 6, 16)
    ra.decode(q, p.cache, out, p.req_to_token, p.req_pool_indices, torch.tensor([5, 9]),
              sm_scale=0.25)
    ref = ref_decode(q, p, [5, 9], sm_scale=0.25)
    sel = ra.select("decode", q_dtype=torch.float32, kv_dtype=torch.float32, head_dim=16)
    caps = ra.capabilities()
    print(json.dumps({
        "impl": sel.impl.name, "reason": sel.reason,
        "max_err": float((out.double() - ref).abs().max()),
        "out": out.flatten().tolist(),
        "kernels": caps.kernels, "kernels_error": caps.kernels_error,
        "rvv_ops_loaded": "rvv_ops" in sys.modules,
    }))
    """
)


def test_rvv_ops_absent_in_a_fresh_process() -> None:
    """A subprocess whose import system refuses rvv_ops: the fallback, with the reason."""
    res = subprocess.run(
        [*python_cmd(), "-c", _BLOCKED, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout.strip().splitlines()[-1])
    assert data["impl"] == "fallback"
    assert "rvv_ops cannot be imported" in data["reason"]
    assert "blocked by the test" in data["reason"]
    assert data["kernels"] is None and "blocked by the test" in data["kernels_error"]
    assert not data["rvv_ops_loaded"]
    assert data["max_err"] < 2e-5
    kernel_out, _ = _decode_once()
    assert_matches(
        torch.tensor(data["out"]).view_as(kernel_out), kernel_out, tolerances=SAME_IMPL_TOLERANCES
    )


# -- the kernel rejecting a case at run time ---------------------------------------------


def _reject(*args: object, **kwargs: object) -> None:
    raise NotImplementedError("rvv_ops: unsupported: something new (test)")


def test_kernel_rejection_demotes_the_case(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    kernel_out, _ = _decode_once()
    mod, _ = _kernel.load()
    assert mod is not None
    calls: list[int] = []

    def reject_counting(*args: object, **kwargs: object) -> None:
        calls.append(1)
        _reject()

    monkeypatch.setattr(mod, "decode_attention", reject_counting)
    with caplog.at_level("INFO", logger="rvv_attention"):
        out1, _ = _decode_once()
        out2, _ = _decode_once()
    assert len(calls) == 1, "after the first rejection the case goes straight to the fallback"
    sel = ra.select("decode", q_dtype=torch.float32, kv_dtype=torch.float32, head_dim=16)
    assert sel.impl.name == "fallback"
    assert sel.reason is not None and "something new (test)" in sel.reason
    assert_matches(out1, kernel_out, tolerances=SAME_IMPL_TOLERANCES)
    assert torch.equal(out1, out2)
    msgs = [r.getMessage() for r in caplog.records if "something new" in r.getMessage()]
    assert len(msgs) == 1


def test_kernel_rejection_in_kernel_mode_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    mod, _ = _kernel.load()
    monkeypatch.setattr(mod, "decode_attention", _reject)
    monkeypatch.setenv(ra.ENV_IMPL, "kernel")
    with pytest.raises(ra.KernelUnavailableError, match="something new"):
        _decode_once()


def test_other_not_implemented_errors_propagate(monkeypatch: pytest.MonkeyPatch) -> None:
    mod, _ = _kernel.load()

    def broken(*args: object, **kwargs: object) -> None:
        raise NotImplementedError("a bug, not a missing feature")

    monkeypatch.setattr(mod, "decode_attention", broken)
    with pytest.raises(NotImplementedError, match="a bug"):
        _decode_once()
