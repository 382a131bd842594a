"""The 1-minute soak of the default run: tools/soak.py (``nox -s soak`` runs it for 10 minutes
or 3,000 requests) with a budget of one minute or 1,500 requests, in this session's SGLang.

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
    result = soak.soak(minutes=1.0, requests=1500, out=ROOT / "build" / "soak_quick.json")
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


def _answer(tokens: list[str], top: list[dict[str, float]]) -> Any:
    return soak.Outcome(0, "valid", ok=True, latency=0.0, tokens=tokens, top=top)


def test_compare_accepts_a_difference_only_at_a_near_tie_of_both_servers() -> None:
    tie = {"a": -0.6931, "b": -0.6935}  # 4e-4 nats apart: within NEAR_TIE
    wide = {"a": -0.1, "b": -2.4}
    first = {"x": -0.01, "y": -5.0}
    same = soak.compare(_answer(["x", "a"], [first, tie]), _answer(["x", "a"], [first, tie]))
    assert same == ("same", "")
    verdict, _ = soak.compare(
        _answer(["x", "a", "q"], [first, tie, wide]), _answer(["x", "b", "r"], [first, tie, wide])
    )
    assert verdict == "near-tie"
    # A tie on one server only, a wide gap, a token outside the top 2, or a shorter answer.
    for a, b in [
        (_answer(["x", "a"], [first, tie]), _answer(["x", "b"], [first, wide])),
        (_answer(["x", "a"], [first, wide]), _answer(["x", "b"], [first, wide])),
        (_answer(["x", "a"], [first, tie]), _answer(["x", "z"], [first, tie])),
        (_answer(["x", "a"], [first, tie]), _answer(["x"], [first])),
    ]:
        assert soak.compare(a, b)[0] == "differ"
