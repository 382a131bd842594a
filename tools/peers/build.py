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
``cache_dir() / "build" / "<target>-<libs_key>"`` (:func:`libs_key` hashes the sdist's
sha256, the CMake arguments and project and the assembler wrapper: a change of any of them
builds afresh); the binary is ``driver-<build_key>`` in it (:func:`build_key` adds
driver.cpp: a changed driver is recompiled and relinked in the same tree). A lock file per
tree serialises concurrent builds.

QEMU cannot run SpacemiT's IME matrix extension, so these builds are plain RVV (the
``GGML_CPU_RISCV64_SPACEMIT`` backend is off).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
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
    "build_dir",
    "build_flags",
    "build_info",
    "build_key",
    "check_sha256",
    "cmake_args",
    "ensure_source",
    "libs_key",
    "selftest",
    "source_label",
    "write_tiny_gguf",
]

Target = Literal["riscv64", "native"]
TARGETS: tuple[Target, ...] = ("riscv64", "native")

SDIST_NAME = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
SDIST_FILE = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
"""sha256 of the ``llama-cpp-python`` 0.3.36 sdist on PyPI."""

LLAMA_CPP_COMMIT = "0c1e57098"
"""The llama.cpp commit vendored in that sdist (its CHANGELOG.md)."""

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
    return f"{SDIST_NAME} {SDIST_VERSION} (llama.cpp {LLAMA_CPP_COMMIT})"


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
               "--no-deps", "--no-binary", ":all:", "--disable-pip-version-check",
               "-d", tmp]  # fmt: skip
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
    (once) and return its ``vendor/llama.cpp`` directory. Concurrent callers wait on a lock
    file."""
    root = source_root()
    done = root.parent.parent / ".unpacked"
    if done.is_file() and done.read_text().strip() == SDIST_SHA256:
        return root
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / "src.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
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
        # AVX2 + FMA + F16C (x86-64-v3), not GGML_NATIVE: on an AMX host (Sapphire Rapids VM)
        # ggml's native build died with SIGILL; the native driver only gives functional
        # checks and the prompt state, so any x86-64 CPU of the last decade will do.
        return [*args, "-DCMAKE_C_COMPILER=gcc", "-DCMAKE_CXX_COMPILER=g++",
                "-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON",
                "-DGGML_F16C=ON"]  # fmt: skip
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


def as_wrapper(gnu_as: str = GNU_AS) -> str:
    """The text of the assembler wrapper of the riscv64 build, running ``gnu_as``."""
    return _AS_WRAPPER.format(gnu_as=gnu_as)


def _hash(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def libs_key(target: Target) -> str:
    """The cache key of ``target``'s llama.cpp libraries: sdist, CMake arguments and
    project, assembler wrapper (not the driver: a changed driver relinks in the same tree)."""
    _check_target(target)
    return _hash(
        SDIST_SHA256,
        target,
        json.dumps(cmake_args(target, Path("SRC"), Path("BUILD"))),
        _CMAKELISTS,
        as_wrapper() if target == "riscv64" else "",
    )


def build_key(target: Target) -> str:
    """The cache key of ``target``'s driver binary: :func:`libs_key` and driver.cpp."""
    return _hash(libs_key(target), DRIVER_SRC.read_text())


def build_dir(target: Target) -> Path:
    """The build tree of ``target``'s libraries (at the current :func:`libs_key`); the
    driver binaries are ``driver-<build_key>`` in it."""
    return cache_dir() / "build" / f"{target}-{libs_key(target)}"


def _check_target(target: str) -> None:
    if target not in TARGETS:
        raise ValueError(f"target must be one of {list(TARGETS)}, not {target!r}")


def _tools_missing(target: Target) -> list[str]:
    need = ["cmake", "ninja"]
    if target == "riscv64":
        need += ["clang-19", "clang++-19", "ld.lld-19", GNU_AS, "riscv64-linux-gnu-ar"]
    else:
        need += ["gcc", "g++"]
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
    (``"riscv64"`` or ``"native"``). Concurrent callers (other sessions, other checkouts)
    wait on a lock file and reuse the finished build. Raises ``RuntimeError`` with the build
    log's tail."""
    _check_target(target)
    missing = _tools_missing(target)
    if missing:
        raise RuntimeError(f"missing build tools {missing}: run 'sudo tools/provision.sh peers'")
    bdir = build_dir(target)
    key = build_key(target)
    binary, stamp = bdir / f"driver-{key}", bdir / f"driver-{key}.json"
    if binary.is_file() and stamp.is_file():
        return binary
    src = ensure_source()
    bdir.parent.mkdir(parents=True, exist_ok=True)
    with open(bdir.parent / f"{bdir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (binary.is_file() and stamp.is_file()):
            _build_locked(target, src, bdir, key)
    return binary


def _build_locked(target: Target, src: Path, bdir: Path, key: str) -> None:
    project, cmake_build = bdir / "project", bdir / "cmake"
    configured = bdir / "configured"
    t0 = time.monotonic()
    log = bdir / "build.log"
    if not configured.is_file():
        shutil.rmtree(bdir, ignore_errors=True)
        project.mkdir(parents=True)
        (project / "CMakeLists.txt").write_text(
            _CMAKELISTS.format(src=src.as_posix(), driver=(project / "driver.cpp").as_posix())
        )
        if target == "riscv64":
            wrapper = bdir / "as-wrapper" / "as"
            wrapper.parent.mkdir()
            wrapper.write_text(as_wrapper())
            wrapper.chmod(0o755)
    # the driver's source is copied (the build does not depend on the checkout it came
    # from) with a fresh mtime, so that ninja recompiles it whatever the checkout's mtime
    shutil.copyfile(DRIVER_SRC, project / "driver.cpp")
    if not configured.is_file():
        _run(["cmake", "-S", str(project), "-B", str(cmake_build),
              *cmake_args(target, src, bdir)], log, bdir)  # fmt: skip
        configured.write_text(libs_key(target) + "\n")
    _run(["cmake", "--build", str(cmake_build), "--target", "driver", "-j", str(JOBS)], log, bdir)
    binary = bdir / f"driver-{key}"
    shutil.copy2(cmake_build / "driver", binary)
    (bdir / f"driver-{key}.json").write_text(json.dumps({
        "target": target, "key": key, "libs_key": libs_key(target), "source": source_label(),
        "llama_cpp_commit": LLAMA_CPP_COMMIT, "flags": _flags_summary(target),
        "cflags": build_flags(target, "c"), "cxxflags": build_flags(target, "cxx"),
        "march": RISCV_MARCH if target == "riscv64" else "x86-64 AVX2",
        "seconds": round(time.monotonic() - t0, 1),
    }, indent=1) + "\n")  # fmt: skip


def _flags_summary(target: Target) -> list[str]:
    if target == "native":
        return ["gcc", "-O3", "GGML_AVX2 + FMA + F16C (not GGML_NATIVE)"]
    return ["clang-19", "-O3", f"-march={RISCV_MARCH}", "-mabi=lp64d", "-static",
            "GNU as 2.40 for C (Zvfh dropped from its -march)"]  # fmt: skip


def build_info(target: Target) -> dict[str, Any]:
    """The stamp of ``target``'s build (after :func:`build`): target, key, source, flags,
    march, build seconds."""
    stamp = build_dir(target) / f"driver-{build_key(target)}.json"
    info: dict[str, Any] = json.loads(stamp.read_text())
    return info


def write_tiny_gguf(path: Path, qtype: str = "f16", *, seed: int = 0) -> None:
    """Write a tiny random Qwen2-architecture model (hidden 64, 2 layers, 4 q / 2 kv heads of
    16, ffn 128, vocab 256, context 256; matrices in ``qtype`` "f16" or "q8_0", the rest f32)
    with a minimal SentencePiece-style vocabulary, for checking the driver. Needs the
    ``gguf`` package."""
    import numpy as np

    # gguf is a dependency of the bench-peers session only (not of lint, which type-checks
    # this module): imported by name, it is untyped here.
    gguf: Any = importlib.import_module("gguf")

    if qtype not in ("f16", "q8_0"):
        raise ValueError(f"qtype must be 'f16' or 'q8_0', not {qtype!r}")
    hidden, layers, heads, kv_heads, ffn, vocab, ctx = 64, 2, 4, 2, 128, 256, 256
    head_dim = hidden // heads
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_context_length(ctx)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>".encode() for i in range(vocab)])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([1] * vocab)

    def matrix(name: str, rows: int, cols: int) -> None:
        a = rng.normal(0.0, 0.02, size=(rows, cols)).astype(np.float32)
        if qtype == "f16":
            w.add_tensor(name, a.astype(np.float16))
        else:
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def vector(name: str, n: int, value: float | None = None) -> None:
        v = np.full(n, value, np.float32) if value is not None else rng.normal(0.0, 0.02, n)
        w.add_tensor(name, v.astype(np.float32))

    w.add_tensor("token_embd.weight", rng.normal(0.0, 0.02, (vocab, hidden)).astype(np.float16))
    for i in range(layers):
        b = f"blk.{i}."
        vector(b + "attn_norm.weight", hidden, 1.0)
        matrix(b + "attn_q.weight", hidden, hidden)
        vector(b + "attn_q.bias", hidden)
        matrix(b + "attn_k.weight", kv_heads * head_dim, hidden)
        vector(b + "attn_k.bias", kv_heads * head_dim)
        matrix(b + "attn_v.weight", kv_heads * head_dim, hidden)
        vector(b + "attn_v.bias", kv_heads * head_dim)
        matrix(b + "attn_output.weight", hidden, hidden)
        vector(b + "ffn_norm.weight", hidden, 1.0)
        matrix(b + "ffn_gate.weight", ffn, hidden)
        matrix(b + "ffn_up.weight", ffn, hidden)
        matrix(b + "ffn_down.weight", hidden, ffn)
    vector("output_norm.weight", hidden, 1.0)
    matrix("output.weight", vocab, hidden)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _driver_json(cmd: list[str], what: str) -> dict[str, Any]:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def selftest(vlen: int = 256) -> dict[str, Any]:
    """Build both drivers and check them on a tiny model (:func:`write_tiny_gguf`): the
    native driver decodes; the riscv64 driver under QEMU 7.2 (Zvfh, ``vlen``) with the
    insncount plugin decodes the same prompt from the native driver's state file, with marks
    0..N in order and vector instructions counted between them; a q8_0 matvec under the
    plugin has its R+1 marks. Raises ``AssertionError`` on a failed check, ``RuntimeError``
    on a failed run; returns what it saw (per-token counts, the build stamps)."""
    import rvvtools

    native, riscv = build("native"), build("riscv64")
    work = cache_dir() / "selftest"
    work.mkdir(parents=True, exist_ok=True)
    model = work / "tiny-f16.gguf"
    write_tiny_gguf(model)
    state = work / "tiny-f16.c32.state"
    state.unlink(missing_ok=True)
    args = ["decode", str(model), "--context", "32", "--tokens", "4", "--seed", "1"]
    nat = _driver_json([str(native), *args, "--state", str(state)], "native decode")
    assert nat["state"] == "saved" and len(nat["tokens"]) == 4, nat
    assert nat["n_vocab"] == 256 and nat["n_layer"] == 2, nat
    plug = work / f"decode-v{vlen}.insncount"
    qemu = rvvtools.qemu_cmd(vlen, zvfh=True, qemu="7", plugin_out=plug)
    rv = _driver_json([*qemu, str(riscv), *args, "--state", str(state)], "riscv64 decode")
    assert rv["state"] == "loaded" and len(rv["tokens"]) == 4, rv
    marks = rvvtools.parse_insncount_marks(plug)
    assert [m[0] for m in marks] == [0, 1, 2, 3, 4], marks
    per_token = {k: (marks[4][1][k] - marks[1][1][k]) / 3 for k in marks[0][1]}
    assert per_token["vector"] > 0 and per_token["total"] > 0, per_token
    plug_mv = work / f"matvec-v{vlen}.insncount"
    qemu_mv = rvvtools.qemu_cmd(vlen, zvfh=True, qemu="7", plugin_out=plug_mv)
    mv = _driver_json([*qemu_mv, str(riscv), "matvec", "--type", "q8_0", "--k", "256", "--n",
                       "64", "--reps", "2"], "riscv64 matvec")  # fmt: skip
    mv_marks = rvvtools.parse_insncount_marks(plug_mv)
    assert [m[0] for m in mv_marks] == [0, 1, 2], mv_marks
    per_call = mv_marks[2][1]["total"] - mv_marks[1][1]["total"]
    assert per_call > 0, mv_marks
    return {
        "native_tokens": nat["tokens"], "riscv64_tokens": rv["tokens"],
        "decode_per_token": per_token, "matvec_q8_0_256x64_per_call": per_call,
        "matvec_weight_buffer": mv["weight_buffer"],
        "builds": {t: build_info(t) for t in TARGETS},
    }  # fmt: skip
