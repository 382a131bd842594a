"""sglang_rvv.compat's riscv64 rows and the riscv64 platform plugin.

On this x86-64 host: the shims stay off (nothing of them activates where it is not needed),
each shim does what it says on fakes, and SGLang's offline Engine runs in a *simulated*
riscv64 environment (tests/riscv64_sim_path: triton, tvm_ffi and xgrammar hidden, torch 2.6's
API gaps, SGLang seeing a riscv64 CPU) with the rvv backend, token-identical to
torch_native. The real thing - the emulated Debian 13 riscv64 root with torch 2.6 - is
``nox -s riscv-sglang`` (tools/sglang_riscv64.py), which applies the same checks.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
from sglang_rvv import compat, demo, platform
from sglang_rvv.compat import sglang_checks

REPO = Path(__file__).resolve().parents[3]
SIM_PATH = Path(__file__).resolve().parent / "riscv64_sim_path"


def _python(code: str, env: dict[str, str], timeout: float = 300) -> str:
    res = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout.strip().splitlines()[-1]


def _sim_env(**extra: str) -> dict[str, str]:
    # SGLANG_USE_CPU_ENGINE unset: on riscv64 sglang-rvv sets it
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "SGLANG_USE_CPU_ENGINE", "USE_LIBUV")
    }
    env.update({compat.ENV_RISCV64: "1", "PYTHONPATH": str(SIM_PATH), **extra})
    return env


def test_nothing_of_riscv64_activates_on_x86() -> None:
    env = {k: v for k, v in os.environ.items() if k != compat.ENV_RISCV64}
    out = _python(
        """
        import json, sys
        import torch
        import sgl_kernel
        import sglang.srt.utils.common as common
        from sglang_rvv import compat, platform
        print(json.dumps({
            "riscv64": compat.riscv64(),
            "active": sorted(compat.ACTIVE),
            "stand_ins": [n for n in ("triton", "tvm_ffi", "xgrammar")
                          if compat.FINDER.stand_in_spec(n) is not None],
            "dtype": str(torch.float8_e8m0fnu),
            "accelerator_patched": hasattr(torch.accelerator.current_accelerator, "_sglang_rvv"),
            "is_cpu_patched": hasattr(common.is_cpu, "_sglang_rvv"),
            "platform": platform.activate(),
        }))
        """,
        env,
    )
    everywhere = sorted(g.patched for g in compat.GAPS if not g.riscv64_only)
    assert json.loads(out) == {
        "riscv64": False,
        "active": everywhere,
        "stand_ins": [],
        "dtype": "torch.float8_e8m0fnu",
        "accelerator_patched": False,
        "is_cpu_patched": False,
        "platform": None,
    }


@pytest.mark.parametrize(
    ("value", "expected"), [("1", True), ("on", True), ("0", False), ("off", False)]
)
def test_needed_follows_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: bool
) -> None:
    monkeypatch.setenv(compat.ENV_RISCV64, value)
    assert compat.riscv64() is expected
    assert platform.activate() == (platform.PLATFORM if expected else None)


def test_stand_ins_in_the_simulation() -> None:
    out = _python(
        """
        import json
        import pydantic
        import triton
        import triton.language as tl
        from triton.runtime.jit import JITFunction
        import tvm_ffi
        from tvm_ffi.module import Module
        import xgrammar
        from sglang_rvv import compat
        from sglang_rvv.compat import stand_ins

        @triton.autotune(configs=[triton.Config({"BLOCK": 16})], key=["n"])
        @triton.jit
        def kernel(x, BLOCK: tl.constexpr):
            pass

        class Sub(JITFunction):
            pass

        try:
            kernel[(1,)](1)
            launched = "no error"
        except stand_ins.StandInError as e:
            launched = str(e)

        class M(pydantic.BaseModel):
            tag: xgrammar.StructuralTag | None = None

        print(json.dumps({
            "cdiv": triton.cdiv(7, 2), "p2": triton.next_power_of_2(5),
            "bool": bool(triton), "launched": launched, "sub": Sub.__mro__[1].__name__,
            "module": repr(Module), "tvm": tvm_ffi.__version__,
            "model": M(tag={"any": 1}).tag,
            "active": sorted(compat.ACTIVE),
        }))
        """,
        _sim_env(),
    )
    got = json.loads(out)
    assert got["cdiv"] == 4 and got["p2"] == 8 and got["bool"] is False
    assert "kernel 'kernel' was launched" in got["launched"] and "stand-in" in got["launched"]
    assert got["sub"] == "JITFunction" and got["model"] == {"any": 1}
    assert got["tvm"].endswith("sglang-rvv-stand-in")
    assert {"triton", "tvm_ffi", "xgrammar"} <= set(got["active"])


def _apply_rows(target: str, module: Any) -> list[str]:
    """Runs the riscv64 rows that patch ``target`` on ``module``; what they changed."""
    done = []
    for gap in compat.GAPS:
        riscv64_row = gap.riscv64_only and gap.target == target and gap.patch is not None
        if riscv64_row and gap.patch(module):  # type: ignore[misc]
            done.append(gap.patched)
    return done


def test_torch_gaps_are_filled_only_where_missing() -> None:
    calls: list[str] = []

    def current_accelerator() -> Any:  # torch 2.6: no argument, raises without one
        calls.append("called")
        raise RuntimeError("no accelerator")

    fake = types.SimpleNamespace(
        __version__="2.6.0+debian",
        float4_e2m1fn_x2="real",
        accelerator=types.SimpleNamespace(current_accelerator=current_accelerator),
    )
    assert _apply_rows("torch", fake) == [
        "torch.float8_e8m0fnu",
        "torch.accelerator.current_accelerator",
    ]
    assert fake.float4_e2m1fn_x2 == "real"
    placeholder = fake.float8_e8m0fnu  # type: ignore[attr-defined]
    assert placeholder.itemsize == 1 and placeholder != "float8_e8m0fnu"
    assert "missing from torch 2.6.0+debian" in repr(placeholder)
    assert fake.accelerator.current_accelerator(check_available=True) is None
    assert fake.accelerator.current_accelerator() is None and calls == ["called", "called"]
    assert _apply_rows("torch", fake) == []

    import torch

    before = torch.accelerator.current_accelerator
    assert _apply_rows("torch", torch) == []  # torch 2.14 has everything
    assert torch.accelerator.current_accelerator is before


def test_symbolic_shapes_guards() -> None:
    class DataDependent(Exception):
        pass

    class Unknown:
        def __bool__(self) -> bool:
            raise DataDependent("depends on data")

    module = types.ModuleType("fake_symbolic_shapes")
    module.GuardOnDataDependentSymNode = DataDependent  # type: ignore[attr-defined]
    assert _apply_rows(compat.SYMBOLIC_SHAPES, module) == [
        f"{compat.SYMBOLIC_SHAPES}.guard_or_false",
        f"{compat.SYMBOLIC_SHAPES}.guard_or_true",
    ]
    g_false, g_true = module.guard_or_false, module.guard_or_true  # type: ignore[attr-defined]
    assert (g_false(True), g_false(0), g_true(False), g_true(1)) == (True, False, False, True)
    assert (g_false(Unknown()), g_true(Unknown())) == (False, True)
    with pytest.raises(ZeroDivisionError):
        g_false(_Raises())
    assert _apply_rows(compat.SYMBOLIC_SHAPES, module) == []


class _Raises:
    def __bool__(self) -> bool:
        raise ZeroDivisionError("not a data-dependent guard: propagates")


def test_is_cpu_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("fake_common")
    module.is_cpu = lambda: False  # type: ignore[attr-defined]
    assert sglang_checks.wrap_is_cpu(module)
    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "1")
    assert module.is_cpu() is True  # type: ignore[attr-defined]
    wrapped = module.is_cpu  # type: ignore[attr-defined]
    assert sglang_checks.wrap_is_cpu(module) is None  # once
    assert module.is_cpu is wrapped  # type: ignore[attr-defined]
    assert sglang_checks.wrap_is_cpu(types.ModuleType("no_is_cpu")) is None


def test_platform_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    args = types.SimpleNamespace(attention_backend="intel_amx", grammar_backend=None)
    monkeypatch.setattr(platform, "_xgrammar_is_stand_in", lambda: True)
    platform.apply_defaults(args)
    assert (args.attention_backend, args.grammar_backend) == ("rvv", "none")
    args = types.SimpleNamespace(attention_backend="torch_native", grammar_backend="llguidance")
    platform.apply_defaults(args)
    assert (args.attention_backend, args.grammar_backend) == ("torch_native", "llguidance")
    monkeypatch.setattr(platform, "_xgrammar_is_stand_in", lambda: False)
    args = types.SimpleNamespace(attention_backend=None, grammar_backend=None)
    platform.apply_defaults(args)
    assert (args.attention_backend, args.grammar_backend) == ("rvv", None)


def _harness() -> Any:
    spec = importlib.util.spec_from_file_location(
        "sglang_riscv64", REPO / "tools/sglang_riscv64.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_engine_in_the_riscv64_simulation(tmp_path: Path) -> None:
    """tools/guest/sglang_engine.py, as `nox -s riscv-sglang` runs it, checked the same way."""
    out = tmp_path / "report.json"
    cmd = [
        sys.executable, str(REPO / "tools/guest/sglang_engine.py"),
        "--model", str(demo.ensure("qwen2")), "--backend", "rvv", "--backend", "torch_native",
        "--backend", "rvv:int8", "--score", "--max-new-tokens", "16", "--out", str(out),
    ]  # fmt: skip
    res = subprocess.run(
        cmd, env=_sim_env(), capture_output=True, text=True, timeout=900, check=False
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    report = json.loads(out.read_text())
    harness = _harness()
    assert harness.check(report, 16) == []
    engines = {e["backend"]: e for e in report["engines"]}
    agreement = harness.int8_agreement(engines["rvv"], engines["rvv:int8"])
    print("riscv64 simulation, int8 KV:", agreement)
    # every riscv64 row of the table was needed in the simulation, and applied
    riscv64_rows = {g.patched for g in compat.GAPS if g.riscv64_only}
    assert riscv64_rows <= set(report["compat"]), riscv64_rows - set(report["compat"])
    rvv = report["engines"][0]
    print("riscv64 simulation:", [r["text"] for r in rvv["results"]], rvv["ops"])
