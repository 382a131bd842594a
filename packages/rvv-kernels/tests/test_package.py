"""The Python side of rvv-kernels: the paths it hands to consumers exist and hold the build."""

from __future__ import annotations

import rvv_kernels


def test_paths_point_at_the_shipped_sources() -> None:
    assert (rvv_kernels.get_include() / "rvvk" / "rvvk.h").is_file()
    assert (rvv_kernels.get_include() / "rvvk" / "kernels.def").is_file()
    assert (rvv_kernels.get_cmake_dir() / "rvv_kernelsConfig.cmake").is_file()
    assert (rvv_kernels.get_cmake_dir() / "RvvKernels.cmake").is_file()
    kernels = sorted(p.name for p in (rvv_kernels.get_source_dir() / "kernels").glob("*/*.cpp"))
    assert "rmsnorm.cpp" in kernels


def test_every_manifest_kernel_has_a_source() -> None:
    manifest = (rvv_kernels.get_include() / "rvvk" / "kernels.def").read_text()
    names = [
        line.split("(", 1)[1].split(",", 1)[0]
        for line in manifest.splitlines()
        if line.startswith("RVVK_KERNEL(")
    ]
    assert names, "kernels.def declares no kernel"
    sources = "".join(
        p.read_text() for p in (rvv_kernels.get_source_dir() / "kernels").glob("*/*.cpp")
    )
    for name in names:
        assert f"void {name}(" in sources, f"kernel {name} has no definition"


def test_drivers_have_no_isa_conditionals() -> None:
    # One folder per op: its top-level sources (the driver, compiled for every variant) hold
    # no ISA-specific code; that lives in the op's ISA subfolders and the vector layer.
    isa_macros = ("RVVK_VEC_", "RVVK_AMX", "__AVX", "__riscv", "__x86_64__")
    drivers = sorted((rvv_kernels.get_source_dir() / "kernels").glob("*/*.cpp"))
    assert len(drivers) >= 8, drivers
    for path in drivers:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("#if") or line.lstrip().startswith("#elif"):
                assert not any(m in line for m in isa_macros), f"{path}:{number}: {line}"
