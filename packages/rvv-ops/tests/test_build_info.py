"""build_info(), set_variant(), and the import-time refusals (in fresh processes)."""

from __future__ import annotations

import importlib
import os
import platform
import subprocess
import textwrap

import pytest
import rvv_ops
import torch

KNOWN_VARIANTS = (
    "portable", "rvv", "rvv_zvfh", "x86_avx2", "x86_avx512", "x86_avx512_bf16", "x86_amx"
)  # fmt: skip


def test_build_info_fields() -> None:
    info = rvv_ops.build_info()
    assert info["version"] == rvv_ops.__version__
    assert info["target_arch"] == platform.machine()
    generated = importlib.import_module("rvv_ops._build_info")
    assert info["torch_version"] == generated.TORCH_VERSION
    assert info["torch_version"].split(".")[:2] == torch.__version__.split(".")[:2]
    compiled, supported = info["compiled_variants"], info["supported_variants"]
    assert set(compiled) <= set(KNOWN_VARIANTS) and compiled[0] == "portable"
    assert "portable" in supported and set(supported) <= set(compiled)
    assert info["active_variant"] == supported[-1]  # the most capable one runs by default
    assert info["variant_error"] == ""
    # rvv-kernels' kDecodeKvHeadsPerTask (rvvk.h); rvv-attention's num_splits reads it
    assert info["decode_kv_heads_per_task"] == 2
    cpu = info["cpu"]
    keys = "has_v vlen zvfh zvfhmin zvfbfmin avx2 avx512 avx512_bf16 amx_bf16 source"
    assert set(cpu) == set(keys.split())
    if info["target_arch"] == "riscv64":
        assert compiled == ["portable", "rvv", "rvv_zvfh"]
        assert cpu["source"] in ("hwprobe", "cpuinfo")
        assert ("rvv" in supported) == cpu["has_v"]
        assert ("rvv_zvfh" in supported) == (cpu["has_v"] and cpu["zvfh"])
    elif info["target_arch"] == "x86_64":
        assert compiled == ["portable", "x86_avx2", "x86_avx512", "x86_avx512_bf16", "x86_amx"]
        assert cpu["source"] == "cpuid" and not cpu["has_v"] and cpu["vlen"] == 0
        assert ("x86_avx2" in supported) == cpu["avx2"]
        assert ("x86_avx512" in supported) == cpu["avx512"]
        assert ("x86_avx512_bf16" in supported) == cpu["avx512_bf16"]
        assert ("x86_amx" in supported) == (cpu["avx512_bf16"] and cpu["amx_bf16"])
        with open("/proc/cpuinfo") as f:  # an independent look at the CPU
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
        assert cpu["avx2"] == {"avx2", "fma", "f16c"}.issubset(flags)
        want = {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
        assert cpu["avx512"] == want.issubset(flags), sorted(want - set(flags))
        assert cpu["avx512_bf16"] == (cpu["avx512"] and "avx512_bf16" in flags)
        # The kernel also grants this process the tile data (Linux >= 5.16), which
        # /proc/cpuinfo cannot say; where the CPU has the flags, expect it to work.
        amx = {"amx_tile", "amx_bf16", "avx512_bf16"}
        assert cpu["amx_bf16"] == (cpu["avx512"] and amx.issubset(flags)), sorted(amx - set(flags))
    else:
        assert compiled == ["portable"]
        assert not cpu["has_v"] and cpu["vlen"] == 0
    if cpu["has_v"]:
        assert cpu["vlen"] >= 128 and cpu["vlen"] & (cpu["vlen"] - 1) == 0
    # tools/ops_riscv.py says what the emulated CPU is; the detection must agree.
    if "RVV_OPS_EXPECT_VLEN" in os.environ:
        assert cpu["vlen"] == int(os.environ["RVV_OPS_EXPECT_VLEN"])
    if "RVV_OPS_EXPECT_ZVFH" in os.environ:
        assert cpu["zvfh"] == (os.environ["RVV_OPS_EXPECT_ZVFH"] == "1")


def test_defined_ops_list_is_complete() -> None:
    # import rvv_ops checks exactly these names for earlier definitions before loading.
    from rvv_ops import _library

    ours = {
        name
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith(("sgl_kernel::", "rvv_ops::"))
        and "register.cpp" in torch._C._dispatch_find_schema_or_throw(name, "").debug()
    }
    assert ours == set(_library.defined_ops())


def test_set_variant() -> None:
    info = rvv_ops.build_info()
    try:
        for name in info["supported_variants"]:
            rvv_ops.set_variant(name)
            assert rvv_ops.build_info()["active_variant"] == name
        for name in set(KNOWN_VARIANTS) - set(info["supported_variants"]):
            with pytest.raises(ValueError, match=f"variant '{name}' cannot be used"):
                rvv_ops.set_variant(name)
        with pytest.raises(ValueError, match="variant 'avx512' cannot be used"):
            rvv_ops.set_variant("avx512")
    finally:
        rvv_ops.set_variant(info["active_variant"])
    assert rvv_ops.build_info()["active_variant"] == info["active_variant"]


def test_build_mismatch_is_an_import_error() -> None:
    from rvv_ops import _library

    built = rvv_ops.build_info()
    _library.check_build_matches(built["torch_version"], built["target_arch"])
    with pytest.raises(ImportError, match="built for sparc64, but this machine is"):
        _library.check_build_matches(built["torch_version"], "sparc64")
    major, minor = (int(p) for p in built["torch_version"].split(".")[:2])
    other = f"{major}.{minor + 1}.0"
    with pytest.raises(ImportError, match=f"built against torch {other}, but torch"):
        _library.check_build_matches(other, built["target_arch"])


def _run(python_cmd: list[str], code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*python_cmd, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_existing_definition_is_a_clean_import_error(python_cmd: list[str]) -> None:
    # As if a CUDA build of sgl-kernel had been imported first. Loading the library now
    # would abort the process in its static initializers; rvv_ops must refuse instead.
    proc = _run(
        python_cmd,
        """
        import torch
        lib = torch.library.Library("sgl_kernel", "FRAGMENT")
        lib.define("rmsnorm_cpu(Tensor input, Tensor weight, float eps) -> Tensor")
        try:
            import rvv_ops
        except ImportError as e:
            print("IMPORT-ERROR:", e)
        else:
            print("IMPORTED")
        # Nothing of rvv_ops got registered.
        for name in ("sgl_kernel::fused_add_rmsnorm_cpu", "rvv_ops::build_info"):
            try:
                torch._C._dispatch_find_schema_or_throw(name, "")
                print("REGISTERED:", name)
            except RuntimeError:
                pass
        """,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "IMPORT-ERROR:" in out and "IMPORTED" not in out and "REGISTERED" not in out, out
    assert "sgl_kernel::rmsnorm_cpu is already defined" in out, out


def test_unusable_rvvk_variant_is_an_import_error(python_cmd: list[str]) -> None:
    proc = _run(
        python_cmd,
        """
        try:
            import rvv_ops
        except ImportError as e:
            print("IMPORT-ERROR:", e)
        else:
            print("IMPORTED")
        """,
        RVVK_VARIANT="no_such_variant",
    )
    assert proc.returncode == 0, proc.stderr
    assert "IMPORT-ERROR: rvv_ops: RVVK_VARIANT=no_such_variant cannot be used" in proc.stdout, (
        proc.stdout
    )
    assert "supported variants: portable" in proc.stdout, proc.stdout
