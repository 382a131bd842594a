"""The 1-minute soak of the default run: tools/soak.py (``nox -s soak`` runs it for 10 minutes
or 3,000 requests) with a one-minute load budget, in this session's SGLang.

The demo model served with ``rvv`` and layer routing under 32 concurrent streams (prompts of
1..2,000 tokens, shared prefixes, streamed aborts, invalid requests), then a 5% sample
replayed on ``torch_native``; see tools/soak.py for what is asserted. Writes
build/soak_quick.json (``nox -s soak`` writes build/soak.json).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tools"))

import soak  # noqa: E402


@pytest.fixture(scope="module")
def report() -> Any:
    result = soak.soak(minutes=1.0, requests=3000, out=ROOT / "build" / "soak_quick.json")
    print(soak.summary(result))
    return result


def test_soak_one_minute(report: Any) -> None:
    assert not report["failures"], "\n".join(report["failures"][:30])
    r = report["requests"]
    # The load reached every kind of request, and the sample was compared.
    assert r["valid"] > 0 and r["streamed"] > 0 and r["aborted"] > 0 and r["invalid"] > 0, r
    assert r["with_cached_prefix"] > 0, r
    # The invalid kinds come in turn: all of them once the run has sent that many.
    assert len(r["invalid_by_kind"]) == min(r["invalid"], r["invalid_kinds"]), r
    assert report["sample"]["requests"] > 0, report["sample"]
