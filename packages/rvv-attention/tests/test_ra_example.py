"""docs/examples/paged_decode.py runs, as a script and per KV dtype (it checks itself
against dense attention over the same cache and raises if they disagree)."""

from __future__ import annotations

import runpy
import subprocess
from pathlib import Path

import pytest
from ra_testing import python_cmd

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "paged_decode.py"


def test_example_runs_as_a_script() -> None:
    res = subprocess.run(
        [*python_cmd(), str(EXAMPLE), "--steps", "6"],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert [x.split(":")[0] for x in lines[:3]] == ["request 0", "request 1", "request 2"]
    assert lines[-1] == "matches dense attention over the same cache: yes"


@pytest.mark.parametrize("kv_dtype", ["fp32", "fp8", "int8"])
def test_example_generates(kv_dtype: str) -> None:
    ns = runpy.run_path(str(EXAMPLE))
    tokens = ns["run"](steps=5, kv_dtype=kv_dtype)
    assert [len(t) for t in tokens] == [6 + 5, 2 + 5, 17 + 5]
