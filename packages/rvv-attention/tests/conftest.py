"""Shared fixtures of rvv-attention's tests."""

from __future__ import annotations

import pytest
import rvv_attention as ra
import torch

# The autouse _clean_state fixture and the impl fixture (pytest finds them by these names).
from conformance.fixtures import clean_state_fixture, impl_fixture  # noqa: F401


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


@pytest.fixture
def seeded() -> None:
    torch.manual_seed(1234)
