"""Fixtures several suites share, written once: the active rvv-ops kernel variant
(rvv-ops' tests and ``test_ops.py``) and rvv-attention's selection state (rvv-attention's
tests and ``test_attention.py``, which import the fixtures by their function names).
rvv_ops / rvv_attention are imported when used, so each suite needs only its own package."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def active_variant(name: str) -> Iterator[str]:
    """Makes ``name`` the kernels' active rvv-ops variant, then restores the previous one."""
    import rvv_ops

    previous = rvv_ops.build_info()["active_variant"]
    rvv_ops.set_variant(name)
    try:
        yield name
    finally:
        rvv_ops.set_variant(previous)


def use_impl(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sets ``RVV_ATTENTION_IMPL=mode`` and drops rvv-attention's cached selection."""
    import rvv_attention as ra

    monkeypatch.setenv(ra.ENV_IMPL, mode)
    ra.clear_cache()


@pytest.fixture(autouse=True, name="_clean_state")
def clean_state_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts in auto mode with no cached selection and the real rvv_ops."""
    import rvv_attention as ra
    from rvv_attention import _kernel

    monkeypatch.delenv(ra.ENV_IMPL, raising=False)
    ra.clear_cache()
    yield
    ra.clear_cache()
    _kernel.reset()


@pytest.fixture(name="impl", params=["kernel", "fallback"])
def impl_fixture(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test once with RVV_ATTENTION_IMPL=kernel and once with fallback."""
    use_impl(str(request.param), monkeypatch)
    return str(request.param)
