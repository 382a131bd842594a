"""The doctor: ``python -m rvv_attention`` (text and --json) and the console script."""

from __future__ import annotations

import json
import os
import subprocess
from importlib.metadata import entry_points

import pytest
import rvv_attention as ra
from ra_testing import python_cmd
from rvv_attention import doctor


def _run(*args: str) -> str:
    env = dict(os.environ)
    env.pop(ra.ENV_IMPL, None)
    res = subprocess.run(
        [*python_cmd(), "-m", "rvv_attention", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_doctor_json_fields() -> None:
    data = json.loads(_run("--json"))
    for key in (
        "rvv_attention",
        "torch",
        "mode",
        "capabilities",
        "threads",
        "implementations",
        "cases",
    ):
        assert key in data
    caps = data["capabilities"]
    for key in ("machine", "has_v", "vlen", "zvfh", "zvfhmin", "zvfbfmin", "cores", "kernels"):
        assert key in caps
    assert data["mode"] == "auto"
    models = {c["model"] for c in data["cases"]}
    assert {
        "Qwen2.5-1.5B",
        "Llama-3.2-1B",
        "Qwen2.5-1.5B, fp8 e4m3 KV",
        "Llama-3.2-1B, int8 KV",
    } <= models
    assert any("sliding window" in m for m in models) and any(
        "cross-attention" in m for m in models
    )
    by = {(c["model"], c["op"]): c for c in data["cases"]}
    cross = by[("Llama-3.2-11B-Vision cross-attention", "decode")]
    assert cross["impl"] == "fallback" and "cross_attention" in cross["reason"]
    qwen = by[("Qwen2.5-1.5B", "decode")]
    if caps["kernels"] is not None:
        assert qwen["impl"] == "kernel" and qwen["reason"] is None
    else:
        assert qwen["impl"] == "fallback" and "unavailable" in qwen["reason"]


def test_doctor_text() -> None:
    text = _run()
    assert text.startswith(f"rvv-attention {ra.__version__}")
    for heading in (
        "CPU",
        "Kernels (rvv-ops)",
        "Selection (RVV_ATTENTION_IMPL=<unset>: mode auto)",
    ):
        assert heading in text.splitlines()
    assert "threads" in text and "VLEN" in text
    line = next(x for x in text.splitlines() if "cross-attention" in x and "decode" in x)
    assert "fallback" in line and "does not support cross_attention" in line


def test_doctor_in_fallback_and_kernel_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ra.ENV_IMPL, "fallback")
    data = doctor.report()
    assert data["mode"] == "fallback" and data["env"] == {ra.ENV_IMPL: "fallback"}
    assert {c["impl"] for c in data["cases"]} == {"fallback"}
    monkeypatch.setenv(ra.ENV_IMPL, "kernel")
    data = doctor.report()
    by = {(c["model"], c["op"]): c for c in data["cases"]}
    cross = by[("Llama-3.2-11B-Vision cross-attention", "extend")]
    assert cross["impl"] == "error" and "RVV_ATTENTION_IMPL=kernel" in cross["reason"]
    assert "Selection (RVV_ATTENTION_IMPL=kernel: mode kernel)" in doctor.format_text(data)


def test_doctor_invalid_mode_is_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(ra.ENV_IMPL, "bogus")
    assert doctor.main(["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["mode"] == "invalid"
    assert all(c["impl"] == "error" and "bogus" in c["reason"] for c in data["cases"])


def test_console_script_entry_point() -> None:
    eps = [ep for ep in entry_points(group="console_scripts") if ep.name == "rvv-attention"]
    assert len(eps) == 1, "rvv-attention is not installed with its console script"
    assert eps[0].value == "rvv_attention.doctor:main"
    assert eps[0].load() is doctor.main
