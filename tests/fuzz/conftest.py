"""Hypothesis profiles of the fuzz suite, chosen by ``FUZZ_PROFILE`` (default ``smoke``).

Both are derandomized (the examples are a function of the test's code, the same every
run) and keep no example database, so a run neither depends on nor changes local state.
``smoke`` is the default ``nox`` run's budget, ``long`` is ``nox -s fuzz``'s. No deadline:
one example's time depends on the machine's load, not on the code under test; the budget
is bounded by the example counts and the generators' size limits instead.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import rvv_attention as ra
from hypothesis import HealthCheck, settings

EXAMPLES = {"smoke": 20, "long": 300}
"""Examples per property in each profile (docs/architecture.md, Fuzz suite, counts the totals)."""

for _name, _count in EXAMPLES.items():
    settings.register_profile(
        _name,
        max_examples=_count,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )

_profile = os.environ.get("FUZZ_PROFILE", "smoke")
if _profile not in EXAMPLES:
    raise ValueError(f"FUZZ_PROFILE is {_profile!r}; expected one of {sorted(EXAMPLES)}")
settings.load_profile(_profile)

# rvv-ops' elementwise ops are compared with the references its own tests use (the
# conformance suite covers attention only): test_rmsnorm, test_activation and test_rotary
# from packages/rvv-ops/tests, importable by module name from that directory.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packages" / "rvv-ops" / "tests"))


@pytest.fixture(autouse=True)
def _kernel_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """RVV_ATTENTION_IMPL=kernel for every test: the rvv-ops kernels or an exception (a
    silent fallback to the torch-native path would raise KernelUnavailableError)."""
    monkeypatch.setenv(ra.ENV_IMPL, "kernel")
    ra.clear_cache()
