"""Shared fixtures of rvv-attention's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import rvv_attention as ra
import torch
from rvv_attention import _kernel


def pytest_report_header(config: pytest.Config) -> list[str]:
    caps = ra.capabilities()
    k = caps.kernels
    build = (
        f"rvv-ops {k['version']} ({k['target_arch']}), active variant {k['active_variant']}"
        if k
        else f"rvv-ops not importable: {caps.kernels_error}"
    )
    return [
        f"rvv-attention {ra.__version__}: {build}; machine {caps.machine}, has_v={caps.has_v}, "
        f"vlen={caps.vlen} ({caps.vlen_source}), zvfh={caps.zvfh}, threads={caps.threads}"
    ]


@pytest.fixture(autouse=True)
def _clean_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts in auto mode with no cached selection and the real rvv_ops."""
    monkeypatch.delenv(ra.ENV_IMPL, raising=False)
    ra.clear_cache()
    yield
    ra.clear_cache()
    _kernel.reset()


@pytest.fixture(params=["kernel", "fallback"])
def impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test once with RVV_ATTENTION_IMPL=kernel and once with fallback."""
    mode = str(request.param)
    monkeypatch.setenv(ra.ENV_IMPL, mode)
    ra.clear_cache()
    return mode


@pytest.fixture
def seeded() -> None:
    torch.manual_seed(1234)
