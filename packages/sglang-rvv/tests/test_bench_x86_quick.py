"""Smoke test of the x86 benchmark harness: ``tools/bench_x86.py --quick`` runs SGLang's
``torch_native`` backend, rvv-attention's fallback and the rvv-ops kernels on the same
batches and writes well-formed JSON. No timing is asserted (the machine may be busy)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tools" / "bench_x86.py"
IMPLS = ("torch_native", "rvv_fallback", "rvv_kernel")
FIELDS = {
    "op",
    "batch",
    "context",
    "layout",
    "impl",
    "median_s",
    "ratio_vs_torch_native",
    "bandwidth_fraction",
}


def _positive(x: object) -> bool:
    return isinstance(x, float) and math.isfinite(x) and x > 0


def test_bench_x86_quick(tmp_path: Path) -> None:
    out = tmp_path / "x86.json"
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "x torch_native" in proc.stdout  # the table
    data = json.loads(out.read_text())

    # every case on randomly placed rows; decode also on consecutive rows
    expected = {
        (op, b, 512, layout, impl)
        for op in ("decode", "extend")
        for b in (1, 4)
        for layout in ("random", "contiguous")
        for impl in IMPLS
        if layout == "random" or op == "decode"
    }
    records = data["records"]
    assert len(records) == len(expected)
    assert {(r["op"], r["batch"], r["context"], r["layout"], r["impl"]) for r in records} == (
        expected
    )
    for r in records:
        assert set(r) == FIELDS, r
        assert _positive(r["median_s"]), r
        assert _positive(r["ratio_vs_torch_native"]), r
        if r["impl"] == "torch_native":
            assert r["ratio_vs_torch_native"] == 1.0
        if r["op"] == "decode":
            assert _positive(r["bandwidth_fraction"]), r
        else:
            assert r["bandwidth_fraction"] is None, r

    assert set(data["method"]["layouts"]) == {"random", "contiguous"}
    machine = data["machine"]
    for key in ("cpu_model", "cores", "torch", "date_utc", "uptime_start", "uptime_end"):
        assert machine[key], key
    assert _positive(data["copy_bandwidth"]["median_bytes_per_s"])
    # the bounds on the decode's bandwidth fraction, measured in the same run
    in_cache, floor = data["ceilings"]["in_cache"], data["ceilings"]["call_floor"]
    assert in_cache["batch"] == 4 and in_cache["context"] >= 64, in_cache
    assert _positive(in_cache["median_s"]) and _positive(in_cache["bandwidth_fraction"])
    assert in_cache["kv_bytes"] == 4 * in_cache["context"] * 2 * 2 * 128 * 2, in_cache
    assert _positive(floor["warm_s"]) and _positive(floor["after_flush_s"]), floor
    for t in data["targets"]:
        if "bandwidth" in t["target"]:
            assert t["ceiling"] == in_cache["bandwidth_fraction"], t
        else:
            assert t["ceiling"] is None, t
    # every rvv implementation was checked against torch_native in every case, and agreed
    checked = {
        (n["op"], n["batch"], n["context"], n["layout"], n["impl"]) for n in data["numerics"]
    }
    assert checked == {k for k in expected if k[4] != "torch_native"}
    assert all(n["ok"] for n in data["numerics"]), data["numerics"]
    for s in data["samples"]:
        assert len(s["times_s"]) == 2 and all(_positive(t) for t in s["times_s"]), s
