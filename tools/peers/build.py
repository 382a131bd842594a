"""Builds llama.cpp's CPU backend and the peers driver (``driver.cpp``) from the llama.cpp
source inside the ``llama-cpp-python`` sdist on PyPI.

Nothing of llama.cpp is committed: :func:`ensure_source` downloads the pinned sdist with pip
(checked against :data:`SDIST_SHA256`) and unpacks it once into ``cache_dir() / "src"``.
:func:`build` configures a small CMake project of our own (``add_subdirectory`` of llama.cpp,
only the ``llama`` and ``ggml`` libraries, then ``driver``) and returns the driver binary:

* ``"riscv64"``: cross-compiled with clang-19 for ``-march`` :data:`RISCV_MARCH` (RVV 1.0
  with Zvfh, Zfh, Zicbop, Zihintpause: llama.cpp's own default ISA string for RVV), linked
  statically (runs under qemu-riscv64 without a sysroot). clang-19 is the first clang with
  all of ggml's RVV intrinsics; its integrated assembler rejects ggml's inline assembly
  (``vsetivli`` without ``ta``/``ma``), so the assembly goes to GNU as 2.40, which does not
  know Zvfh. :func:`as_wrapper` is the assembler clang calls: it drops ``zvfh``/``zvfhmin``
  from ``-march`` and from the ``.attribute arch`` line and runs GNU as. Zvfh adds no new
  mnemonics (the element width is in ``vsetvli``), so the object code is the Zvfh code.
* ``"native"``: the same driver for the build machine (x86-64), for fast functional checks of
  GGUF files.

No OpenMP (one thread), no curl, no GPU backend, static libraries. Builds are cached under
``cache_dir() / "build" / "<target>-<key>"``; the key hashes the sdist's sha256, the CMake
arguments, the compile flags, driver.cpp and the assembler wrapper, so a change of any of
them builds afresh.

QEMU cannot run SpacemiT's IME matrix extension, so these builds are plain RVV (the
``GGML_CPU_RISCV64_SPACEMIT`` backend is off).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from peers import cache_dir

__all__ = [
    "RISCV_MARCH",
    "SDIST_NAME",
    "SDIST_SHA256",
    "SDIST_VERSION",
    "Target",
    "as_wrapper",
    "build",
    "build_flags",
    "build_key",
    "check_sha256",
    "cmake_args",
    "ensure_source",
    "selftest",
    "source_label",
]

Target = Literal["riscv64", "native"]
TARGETS: tuple[Target, ...] = ("riscv64", "native")

SDIST_NAME = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
SDIST_FILE = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
"""sha256 of the ``llama-cpp-python`` 0.3.36 sdist on PyPI."""

RISCV_MARCH = "rv64gcv_zfh_zvfh_zicbop_zihintpause"
"""The ISA string of the riscv64 build: what llama.cpp's CMake makes from its defaults
(``GGML_RVV``, ``GGML_RV_ZFH``, ``GGML_RV_ZVFH``, ``GGML_RV_ZICBOP``,
``GGML_RV_ZIHINTPAUSE``); the K1 (X60 cores) has all of these."""

JOBS = 2
"""Parallel compile jobs (the build machine has 2 cores)."""

_HERE = Path(__file__).resolve().parent
DRIVER_SRC = _HERE / "driver.cpp"

_CMAKELISTS = """\
cmake_minimum_required(VERSION 3.14)
project(peers_driver C CXX)
add_subdirectory("{src}" llama EXCLUDE_FROM_ALL)
add_executable(driver "{driver}")
target_compile_features(driver PRIVATE cxx_std_17)
target_link_libraries(driver PRIVATE llama ggml)
"""

# The assembler clang runs for the riscv64 build (see the module docstring). POSIX sh: it
# rewrites the -march value and the input file's .attribute lines, then runs GNU as.
_AS_WRAPPER = """\
#!/bin/sh
# clang-19 -fno-integrated-as runs this as its assembler: GNU as 2.40 does not know Zvfh, so
# drop zvfh/zvfhmin from -march and from the .attribute arch line (no Zvfh mnemonic differs
# from a plain V one), then run GNU as.
set -e
strip() {{ printf '%s' "$1" | sed -E 's/_zvfh(min)?([0-9]+p[0-9]+)?//g'; }}
n=$#; i=0; prev=""; tmp=""
trap '[ -z "$tmp" ] || rm -f "$tmp"' EXIT
for a in "$@"; do
    i=$((i + 1))
    if [ "$prev" = "-march" ]; then a=$(strip "$a"); fi
    case "$a" in -march=*) a=$(strip "$a") ;; esac
    if [ "$i" -eq "$n" ] && [ -f "$a" ]; then
        tmp=$(mktemp --suffix=.s)
        sed -E '/^[[:space:]]*\\.attribute/s/_zvfh(min)?[0-9]+p[0-9]+//g' "$a" >"$tmp"
        a=$tmp
    fi
    set -- "$@" "$a"
    prev=$a
done
shift "$n"
"{gnu_as}" "$@"
"""
GNU_AS = "/usr/bin/riscv64-linux-gnu-as"


def sdist_dir() -> Path:
    """Where the downloaded sdist is kept."""
    return cache_dir() / "sdist"


def source_root() -> Path:
    """The unpacked sdist's llama.cpp tree (after :func:`ensure_source`)."""
    return cache_dir() / "src" / f"llama_cpp_python-{SDIST_VERSION}" / "vendor" / "llama.cpp"


def source_label() -> str:
    """Where the llama.cpp source comes from, for benchmark records."""
    return f"{SDIST_NAME} {SDIST_VERSION} (sdist sha256 {SDIST_SHA256[:12]})"


def check_sha256(path: Path, expected: str = SDIST_SHA256) -> None:
    """Raise ``RuntimeError`` naming ``path`` and both digests unless its sha256 is
    ``expected``."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    got = digest.hexdigest()
    if got != expected:
        raise RuntimeError(
            f"{path}: sha256 {got} does not match the pinned {expected} of "
            f"{SDIST_NAME}=={SDIST_VERSION}; delete the file to download it again"
        )


def _download_sdist(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", f"{SDIST_NAME}=={SDIST_VERSION}",
               "--no-deps", "--no-binary", ":all:", "--disable-pip-version-check", "-d", tmp]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        got = Path(tmp) / SDIST_FILE
        if proc.returncode != 0 or not got.is_file():
            raise RuntimeError(
                f"'{' '.join(cmd)}' failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}"
            )
        check_sha256(got)
        os.replace(got, dest / SDIST_FILE)
    return dest / SDIST_FILE


def ensure_source() -> Path:
    """Download (once) the pinned ``llama-cpp-python`` sdist, check its sha256, unpack it
    (once) and return its ``vendor/llama.cpp`` directory."""
    root = source_root()
    done = root.parent.parent / ".unpacked"
    if done.is_file() and done.read_text().strip() == SDIST_SHA256:
        return root
    tarball = sdist_dir() / SDIST_FILE
    if not tarball.is_file():
        _download_sdist(sdist_dir())
    check_sha256(tarball)
    unpack_to = cache_dir() / "src"
    shutil.rmtree(root.parent.parent, ignore_errors=True)
    unpack_to.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as tar:
        tar.extractall(unpack_to, filter="data")
    if not (root / "ggml" / "src" / "ggml-cpu" / "arch" / "riscv").is_dir():
        raise RuntimeError(f"{tarball} has no vendor/llama.cpp with ggml's RISC-V code")
    done.write_text(SDIST_SHA256 + "\n")
    return root


def build_flags(target: Target, lang: Literal["c", "cxx"] = "c") -> list[str]:
    """The compiler flags our CMake project passes for ``lang``, besides llama.cpp's own
    (``-march`` comes from llama.cpp's CMake). riscv64 C goes through GNU as (ggml's inline
    assembly is in C, see the module docstring); C++ keeps clang's integrated assembler,
    which knows Zvfh and, unlike GNU as 2.40, the label differences of C++ exception
    tables."""
    _check_target(target)
    if target == "native":
        return []
    if lang == "c":
        return ["--target=riscv64-linux-gnu", "-fno-integrated-as"]
    return ["--target=riscv64-linux-gnu"]


def cmake_args(target: Target, src: Path, build_dir: Path) -> list[str]:
    """The CMake configure arguments for ``target`` (``src``: llama.cpp's tree)."""
    _check_target(target)
    cflags = " ".join(build_flags(target, "c"))
    if target == "riscv64":
        cflags += f" -B{build_dir / 'as-wrapper'}/"
    args = [
        "-G", "Ninja",
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DCMAKE_C_FLAGS={cflags}",
        f"-DCMAKE_CXX_FLAGS={' '.join(build_flags(target, 'cxx'))}",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DGGML_OPENMP=OFF",
        "-DGGML_BACKEND_DL=OFF",
        "-DGGML_CPU_ALL_VARIANTS=OFF",
        "-DLLAMA_BUILD_COMMON=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_TOOLS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_SERVER=OFF",
        "-DLLAMA_BUILD_APP=OFF",
        "-DLLAMA_CURL=OFF",
    ]  # fmt: skip
    if target == "native":
        return [*args, "-DCMAKE_C_COMPILER=gcc", "-DCMAKE_CXX_COMPILER=g++", "-DGGML_NATIVE=ON"]
    return [
        *args,
        "-DCMAKE_SYSTEM_NAME=Linux",
        "-DCMAKE_SYSTEM_PROCESSOR=riscv64",
        "-DCMAKE_C_COMPILER=clang-19",
        "-DCMAKE_CXX_COMPILER=clang++-19",
        "-DCMAKE_AR=/usr/bin/riscv64-linux-gnu-ar",
        "-DCMAKE_RANLIB=/usr/bin/riscv64-linux-gnu-ranlib",
        "-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld -static",
        "-DCMAKE_FIND_ROOT_PATH=/usr/riscv64-linux-gnu",
        "-DCMAKE_FIND_ROOT_PATH_MODE_PROGRAM=NEVER",
        "-DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY",
        "-DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY",
        "-DGGML_NATIVE=OFF",
        "-DGGML_RVV=ON",
        "-DGGML_RV_ZFH=ON",
        "-DGGML_RV_ZVFH=ON",
        "-DGGML_RV_ZICBOP=ON",
        "-DGGML_RV_ZIHINTPAUSE=ON",
        "-DGGML_RV_ZVFBFWMA=OFF",
        "-DGGML_CPU_RISCV64_SPACEMIT=OFF",
    ]


def as_wrapper() -> str:
    """The text of the assembler wrapper of the riscv64 build."""
    return _AS_WRAPPER.format(gnu_as=GNU_AS)


def build_key(target: Target) -> str:
    """The cache key of ``target``'s build: sdist, CMake arguments, flags, driver, wrapper."""
    _check_target(target)
    h = hashlib.sha256()
    for part in (
        SDIST_SHA256,
        target,
        json.dumps(cmake_args(target, Path("SRC"), Path("BUILD"))),
        _CMAKELISTS,
        as_wrapper() if target == "riscv64" else "",
        DRIVER_SRC.read_text(),
    ):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def build_dir(target: Target) -> Path:
    """The build directory of ``target`` at the current :func:`build_key`."""
    return cache_dir() / "build" / f"{target}-{build_key(target)}"


def _check_target(target: str) -> None:
    if target not in TARGETS:
        raise ValueError(f"target must be one of {list(TARGETS)}, not {target!r}")


def _tools_missing(target: Target) -> list[str]:
    need = ["cmake", "ninja"]
    need += ["clang-19", "clang++-19", "ld.lld-19", GNU_AS, "riscv64-linux-gnu-ar"] if target == "riscv64" else ["gcc", "g++"]  # fmt: skip
    return [t for t in need if shutil.which(t) is None]


def _run(cmd: list[str], log: Path, cwd: Path) -> None:
    with log.open("a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise RuntimeError(f"'{' '.join(cmd[:3])} ...' failed (exit {proc.returncode}); "
                           f"log {log}:\n{tail}")  # fmt: skip


def build(target: Target) -> Path:
    """Build (once per :func:`build_key`) and return the driver binary for ``target``
    (``"riscv64"`` or ``"native"``). Raises ``RuntimeError`` with the build log's tail."""
    _check_target(target)
    missing = _tools_missing(target)
    if missing:
        raise RuntimeError(f"missing build tools {missing}: run 'sudo tools/provision.sh peers'")
    bdir = build_dir(target)
    binary = bdir / "driver"
    stamp = bdir / "build.json"
    if binary.is_file() and stamp.is_file():
        return binary
    src = ensure_source()
    shutil.rmtree(bdir, ignore_errors=True)
    (bdir / "project").mkdir(parents=True)
    (bdir / "project" / "CMakeLists.txt").write_text(
        _CMAKELISTS.format(src=src.as_posix(), driver=DRIVER_SRC.as_posix())
    )
    if target == "riscv64":
        wrapper = bdir / "as-wrapper" / "as"
        wrapper.parent.mkdir()
        wrapper.write_text(as_wrapper())
        wrapper.chmod(0o755)
    log = bdir / "build.log"
    t0 = time.monotonic()
    cmake_build = bdir / "cmake"
    _run(["cmake", "-S", str(bdir / "project"), "-B", str(cmake_build),
          *cmake_args(target, src, bdir)], log, bdir)  # fmt: skip
    _run(["cmake", "--build", str(cmake_build), "--target", "driver", "-j", str(JOBS)], log, bdir)
    shutil.copy2(cmake_build / "driver", binary)
    stamp.write_text(json.dumps({
        "target": target, "key": build_key(target), "source": source_label(),
        "cflags": build_flags(target, "c"), "cxxflags": build_flags(target, "cxx"), "march": RISCV_MARCH if target == "riscv64" else "native",
        "seconds": round(time.monotonic() - t0, 1),
    }, indent=1) + "\n")  # fmt: skip
    return binary


def build_info(target: Target) -> dict[str, Any]:
    """The stamp of ``target``'s build (after :func:`build`): target, key, source, flags,
    march, build seconds."""
    info: dict[str, Any] = json.loads((build_dir(target) / "build.json").read_text())
    return info


def selftest() -> dict[str, Any]:
    """Build both drivers and check them: decoding a tiny GGUF model natively and (riscv64)
    under QEMU 7.2 at VLEN 256 with Zvfh and the insncount plugin, and a q4_0 matvec under
    the plugin. Raises ``AssertionError``/``RuntimeError`` on any failure; returns what it saw."""
    raise NotImplementedError
