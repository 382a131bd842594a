"""Hatchling build hook of rvv-ops: builds ``rvv_ops/_C.so`` with CMake and puts it in the wheel.

CMakeLists.txt is the build description; this hook only chooses its inputs, runs
``cmake`` (configure + build) and adds the outputs ``_C.so`` and the generated
``_build_info.py`` to the wheel, tagged ``py3-none-linux_<target arch>`` (the library
uses torch's C++ API, not CPython's, so one wheel serves every Python version).

Native build (against the torch installed in the running Python)::

    pip install --no-build-isolation packages/rvv-ops

Cross build for riscv64 (against the torch of a Debian riscv64 root; see
tools/ops_riscv.py)::

    RVV_OPS_CMAKE_TOOLCHAIN_FILE=tools/cmake/riscv64-linux-clang.cmake \\
    RVV_OPS_SYSROOT=~/.cache/rvv-sglang/riscv64-root \\
    pip wheel --no-deps --no-build-isolation packages/rvv-ops -w dist

Environment variables (all optional):

``RVV_OPS_CMAKE_TOOLCHAIN_FILE``
    cross-compile with this CMake toolchain file.
``RVV_OPS_SYSROOT``
    the target's root file system, passed to the toolchain file as ``RVV_SYSROOT``;
    ``find_package(Torch)`` finds its libtorch-dev.
``RVV_OPS_TORCH_CMAKE_DIR``
    directory of ``TorchConfig.cmake``. Default: natively, ``torch.utils.cmake_prefix_path``
    of the torch installed in the running Python; cross, whatever the sysroot holds.
``RVV_KERNELS_CMAKE_DIR``
    rvv-kernels' CMake package. Default: ``rvv_kernels.get_cmake_dir()`` of an installed
    rvv-kernels, else the sibling folder ``../rvv-kernels/src/rvv_kernels/cmake``.
``RVV_OPS_BUILD_DIR``
    the CMake build tree, kept between builds (wiped when the configuration changes).
    Default: ``build/native-<key>`` or ``build/cross-<key>`` in this folder, the key a
    hash of the configure arguments (torch location, toolchain, sysroot, extra
    arguments), so that builds for different Pythons / torches keep a tree each and
    neither rebuilds the other's from scratch nor writes into it.
``RVV_OPS_CMAKE_ARGS``
    extra configure arguments, in shell syntax.
``RVV_OPS_WHEEL_TAG``
    the wheel tag. Default: ``py3-none-linux_<target arch>``.

``CMAKE_GENERATOR`` and ``CMAKE_BUILD_PARALLEL_LEVEL`` are read by CMake itself; without
``CMAKE_GENERATOR`` Ninja is used when it is on the PATH.
"""

from __future__ import annotations

import hashlib
import json
import os
import runpy
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hatchling.builders.config import BuilderConfig
from hatchling.builders.hooks.plugin.interface import BuildHookInterface

HERE = Path(__file__).resolve().parent
# Files CMake writes into the build tree, and where they go in the package.
OUTPUTS = {"_C.so": "rvv_ops/_C.so", "_build_info.py": "rvv_ops/_build_info.py"}


class CMakeBuildHook(BuildHookInterface[BuilderConfig]):
    """Configures and builds CMakeLists.txt, then adds its outputs to the wheel."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        build_dir = self._configure()
        self._run(["cmake", "--build", str(build_dir)])
        outputs = {build_dir / name: dest for name, dest in OUTPUTS.items()}
        for path in outputs:
            if not path.is_file():
                raise RuntimeError(f"rvv-ops: the CMake build did not produce {path}")
        if version == "editable":
            # Editable installs import rvv_ops from src/: the library must sit beside it.
            for path, dest in outputs.items():
                shutil.copy2(path, HERE / "src" / dest)
        else:
            build_data["force_include"].update({str(p): d for p, d in outputs.items()})
        build_data["pure_python"] = False
        build_data["tag"] = os.environ.get("RVV_OPS_WHEEL_TAG") or self._default_tag(build_dir)

    def _configure(self) -> Path:
        toolchain = _env_path("RVV_OPS_CMAKE_TOOLCHAIN_FILE")
        sysroot = _env_path("RVV_OPS_SYSROOT")
        args = [
            f"-DRVV_KERNELS_CMAKE_DIR={_rvv_kernels_cmake_dir()}",
            "-DCMAKE_BUILD_TYPE=Release",
        ]
        if toolchain:
            args.append(f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
            if sysroot:
                args.append(f"-DRVV_SYSROOT={sysroot}")
        elif sysroot:
            raise RuntimeError(
                "rvv-ops: RVV_OPS_SYSROOT is set without RVV_OPS_CMAKE_TOOLCHAIN_FILE; a sysroot "
                "only makes sense for a cross build"
            )
        torch_dir = _env_path("RVV_OPS_TORCH_CMAKE_DIR")
        if torch_dir:
            args.append(f"-DTorch_DIR={torch_dir}")
        elif not toolchain:
            args.append(f"-DCMAKE_PREFIX_PATH={_native_torch_prefix()}")
            cpu_only = _cuda_torch_without_toolkit()
            if cpu_only:
                args.append(f"-DRVV_OPS_TORCH_CPU_ONLY={cpu_only}")
        args += shlex.split(os.environ.get("RVV_OPS_CMAKE_ARGS", ""))
        if not os.environ.get("CMAKE_GENERATOR") and shutil.which("ninja"):
            args += ["-G", "Ninja"]

        key = hashlib.sha256(json.dumps(args).encode()).hexdigest()[:10]
        default_dir = HERE / "build" / f"{'cross' if toolchain else 'native'}-{key}"
        build_dir = Path(os.environ.get("RVV_OPS_BUILD_DIR") or default_dir).resolve()
        # A build tree configured differently (other torch, other toolchain) is rebuilt
        # from scratch: CMake keeps stale cache entries otherwise.
        stamp = build_dir / "rvv-ops-configure.json"
        if stamp.is_file() and json.loads(stamp.read_text()) != args:
            shutil.rmtree(build_dir)
        build_dir.mkdir(parents=True, exist_ok=True)
        self._run(["cmake", "-S", str(HERE), "-B", str(build_dir), *args])
        stamp.write_text(json.dumps(args))
        return build_dir

    def _run(self, cmd: list[str]) -> None:
        self.app.display_info("rvv-ops: " + shlex.join(cmd))
        try:
            subprocess.run(cmd, check=True)
        except FileNotFoundError as e:
            raise RuntimeError(f"rvv-ops: {cmd[0]} not found; the build needs CMake >= 3.20") from e

    @staticmethod
    def _default_tag(build_dir: Path) -> str:
        arch = runpy.run_path(str(build_dir / "_build_info.py"))["TARGET_ARCH"]
        if not sys.platform.startswith("linux"):
            raise RuntimeError(f"rvv-ops: building on {sys.platform}; only Linux is supported")
        return f"py3-none-linux_{arch}"


def _env_path(name: str) -> Path | None:
    """The existing path an environment variable names, or None when it is unset or empty."""
    value = os.environ.get(name)
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.exists():
        raise RuntimeError(
            f"rvv-ops: {name}={value} does not exist (relative paths are taken from "
            f"{Path.cwd()}, where the build runs: use an absolute path)"
        )
    return path.resolve()


def _rvv_kernels_cmake_dir() -> Path:
    """RVV_KERNELS_CMAKE_DIR, else the installed rvv-kernels, else the sibling package."""
    env = _env_path("RVV_KERNELS_CMAKE_DIR")
    if env:
        return env
    try:
        import rvv_kernels
    except ImportError:
        sibling = HERE.parent / "rvv-kernels" / "src" / "rvv_kernels" / "cmake"
        if sibling.is_dir():
            return sibling
        raise RuntimeError(
            "rvv-ops: rvv-kernels not found: install it (pip install packages/rvv-kernels), "
            "or set RVV_KERNELS_CMAKE_DIR to its src/rvv_kernels/cmake folder"
        ) from None
    return Path(rvv_kernels.get_cmake_dir())


def _native_torch_prefix() -> str:
    """torch.utils.cmake_prefix_path of the torch installed in this Python."""
    try:
        import torch.utils
    except ImportError:
        raise RuntimeError(
            f"rvv-ops: torch is not importable from {sys.executable}. The native build "
            "compiles against the installed torch: install torch (>= 2.6) and build with "
            "`pip install --no-build-isolation`, or set RVV_OPS_TORCH_CMAKE_DIR"
        ) from None
    return str(torch.utils.cmake_prefix_path)


def _cuda_torch_without_toolkit() -> str | None:
    """torch's package directory if it is a CUDA (or ROCm) build of torch, else None.

    TorchConfig.cmake of such a build insists on a complete CUDA toolkit (headers, cudart)
    although the ops use only torch's CPU part, so its CPU libraries are then linked directly
    (CMakeLists.txt, RVV_OPS_TORCH_CPU_ONLY).
    """
    import torch

    if torch.version.cuda is None and torch.version.hip is None:
        return None
    return str(Path(torch.__file__).resolve().parent)
