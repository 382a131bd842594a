"""SGLang's own attention test kit (``sglang.test.kits.attention_unittest``) on backend ``rvv``.

The kit builds real ``ForwardBatch``es (its ``MockModelRunner`` with real
``MHATokenToKVPool`` / ``ReqToTokenPool``, K/V placed on shuffled pages), runs a projected
attention module through the backend registered under the case's name in SGLang's
``ATTENTION_BACKENDS``, and computes its own float reference. We drive it the way its
``run_dense_attention_case`` does (build fixture, run eager, reference), with two changes:

- a backend that cannot be built fails the test instead of the kit's ``skipTest``;
- tolerances are ours and tighter than the kit's 3e-2: bf16 2e-2, fp32 1e-4 (abs and rel).

Every case of ``make_dense_cases`` runs in bf16 and fp32 with ``RVV_ATTENTION_IMPL=kernel``
(a case silently falling back to torch-native would raise) and again with ``=fallback``
(rvv-attention's torch-native path), plus the kit's other page layouts and its two
sliding-window cases; ``torch_native`` runs the same dense cases as a control.

SGLang runs in CPU mode here: ``conftest.py`` sets ``SGLANG_USE_CPU_ENGINE=1`` before any
sglang import.
"""

from __future__ import annotations

import pytest
import torch
from sglang.test.kits.attention_unittest.attention_methods import dense_attention as kit
from sglang_rvv import plugin
from sglang_rvv.backend import RVVAttnBackend

plugin.register()

TOL = {torch.bfloat16: (2e-2, 2e-2), torch.float32: (1e-4, 1e-4)}
DTYPES = [pytest.param(torch.bfloat16, id="bf16"), pytest.param(torch.float32, id="fp32")]


class _NoSkip:
    """The kit's ``testcase``: it only calls ``skipTest`` (backend not buildable)."""

    def skipTest(self, reason: str) -> None:
        pytest.fail(f"the kit could not build the backend: {reason}")


def _cases(backend: str) -> list:
    return [pytest.param(c, id=c.name) for c in kit.make_dense_cases(backend)]


def _run(case, dtype, layout="shuffled_pages"):
    with torch.inference_mode():
        fixture = kit.build_dense_attention_fixture(
            _NoSkip(), case, dtype=dtype, device="cpu", loc_layout=layout
        )
        actual = kit.run_dense_fixture_eager(fixture)
        expected = kit.expected_dense_fixture_output(fixture)
    atol, rtol = TOL[dtype]
    assert actual.dtype == dtype and actual.shape == expected.shape
    assert torch.isfinite(actual).all()
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)
    return fixture


def test_kit_has_the_expected_dense_cases():
    """The kit's dense case list is what this file claims to cover (12 in SGLang 0.5.23)."""
    names = [c.name for c in kit.make_dense_cases("rvv")]
    assert len(names) == 12 and len(set(names)) == 12, names


@pytest.mark.parametrize("impl", ["kernel", "fallback"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", _cases("rvv"))
def test_dense_case_rvv(case, dtype, impl, monkeypatch):
    monkeypatch.setenv("RVV_ATTENTION_IMPL", impl)
    fixture = _run(case, dtype)
    assert isinstance(fixture.backend, RVVAttnBackend)


def _layout_cases() -> list:
    out = []
    for c in kit.make_dense_cases("rvv"):
        for layout in ("interleaved_pages", "non_monotonic_extend"):
            # as in SGLang's own kit tests: decode has one new token, nothing to reorder
            if layout == "non_monotonic_extend" and c.forward_mode.is_decode():
                continue
            out.append(pytest.param(c, layout, id=f"{c.name}-{layout}"))
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("case", "layout"), _layout_cases())
def test_dense_case_rvv_layouts(case, layout, dtype, monkeypatch):
    """The kit's other KV layouts: requests' pages interleaved in the cache; extend tokens
    written at non-monotonic rows."""
    monkeypatch.setenv("RVV_ATTENTION_IMPL", "kernel")
    _run(case, dtype, layout)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, id=c.name)
        for c in kit.make_swa_no_prefix_input_config_cases("rvv")
        + kit.make_swa_prefix_input_config_cases("rvv")
    ],
)
def test_swa_case_rvv(case, dtype, monkeypatch):
    """The kit's sliding-window extend cases (window 4, lengths around the window)."""
    monkeypatch.setenv("RVV_ATTENTION_IMPL", "kernel")
    _run(case, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", _cases("torch_native"))
def test_dense_case_torch_native_control(case, dtype):
    """Control: SGLang's own torch_native backend on the same cases and tolerances."""
    _run(case, dtype)
