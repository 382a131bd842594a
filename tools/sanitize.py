"""Runs rvv-kernels' C++ tests and rvv-ops' extension built with sanitizers: ASan and UBSan
natively, UBSan on riscv64.

``nox -s sanitize`` runs this script; every finding aborts the run that found it
(``-fno-sanitize-recover=all``, ``halt_on_error=1``), so a run passes only with zero findings.

Steps (``--steps``, default all):

``kernels``
    rvv-kernels' test driver built natively with GCC and
    ``-fsanitize=address,undefined,float-cast-overflow`` (``RVVK_SANITIZE``) at ``-O1``, run
    on every variant this CPU runs: portable and each x86 one (``x86_amx`` only on a CPU with
    AMX), with leak detection.
``kernels-riscv``
    the same driver cross-built for riscv64 with clang-16 and
    ``-fsanitize=undefined -fsanitize-trap=undefined`` and run under QEMU 10 user mode
    (:data:`QEMU_RUNS`): UBSan in trap mode needs no runtime (clang-16 ships no riscv64
    sanitizer runtime); a finding is an illegal instruction (SIGILL) without a report. No
    ASan there: linked against GCC 12's riscv64 ``libasan.so.8`` (Debian's
    ``libasan8-riscv64-cross``), clang-16's ASan build does not run under QEMU 10 user mode.
    With QEMU's default 47-bit guest address space GCC 12's riscv64 ASan (laid out for Sv39)
    aborts at start-up (``CHECK failed: sanitizer_allocator_primary32.h:292``); confined to
    256 GiB (``-R 0x4000000000``) a small program runs and reports a heap overflow, but the
    test driver aborts in its first allocations of a larger size class (``CHECK failed:
    asan_poisoning.cpp:36 "((AddrIsInMem(addr))) != (0)"``, from the allocator mapping a
    region outside ASan's application memory); the other sizes tried (128 to 512 GiB) fail
    the same way or earlier (shadow not mappable, or overlapping the binary and stack).
    Even where it ran, clang-16's ASan does not instrument RVV intrinsic loads and stores
    (``__riscv_vle*`` / ``__riscv_vse*``: a ``vle32`` of 8 lanes from a 4-float heap buffer
    was not reported). The op drivers (task structure, row and block indexing) are the same
    source in every variant, and the native portable and x86 runs check them with ASan.

``ops``
    rvv-ops' torch extension (its bindings and the rvv-kernels sources it compiles in) built
    natively with GCC (torch's compiler and C++ ABI) and the same flags as ``kernels``, through
    hatch_build.py (``RVV_OPS_CMAKE_ARGS``, its own CMake tree ``BUILD_DIR/ops-build``) into a
    wheel that is unpacked into ``BUILD_DIR/ops-site``, never into an environment. Then
    ``packages/rvv-ops/tests`` and ``tests/conformance/test_ops.py`` (what ``nox -s
    ops-tests`` runs) in this Python with ``ops-site`` first on ``PYTHONPATH`` and GCC's
    ``libasan.so`` in ``LD_PRELOAD`` (ASan's runtime must be the first library of the process;
    UBSan's comes in as a dependency of ``_C.so``; libstdc++ is preloaded with it, see
    :func:`ops_native`). Leak detection is off there
    (:data:`OPS_ASAN_OPTIONS`): CPython and torch keep memory reachable until exit by design,
    which LeakSanitizer would report; leaks of the kernels themselves are checked by the
    ``kernels`` step. rvv-ops' tests with a ``variant`` parameter run on every variant the CPU
    supports; the others run on the best one.

``--quick``: the riscv64 runs at VLEN 128 only.

Usage: python tools/sanitize.py [--steps kernels,kernels-riscv,ops] [--quick] [--build-dir DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kernels_tests
import ops_riscv
import rvvtools

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "packages" / "rvv-kernels"
OPS = ROOT / "packages" / "rvv-ops"
CONFORMANCE = ROOT / "tests" / "conformance"
STEPS = ("kernels", "kernels-riscv", "ops")

# The native checks. float-cast-overflow (a float -> integer conversion out of range, NaN
# included, is undefined behaviour) is not part of GCC's -fsanitize=undefined.
NATIVE_SANITIZE = "address,undefined,float-cast-overflow"
# The riscv64 checks: UBSan in trap mode (no runtime).
RISCV_SANITIZE = "undefined"
# (VLEN, Zvfh, variants tested) of the riscv64 runs; --quick keeps the first.
QEMU_RUNS: list[tuple[int, bool, str]] = [
    (128, False, "portable,rvv"),
    (512, False, "rvv"),
    (256, True, "rvv_zvfh"),
]

# The sanitizer builds' optimisation: -O1 (ASan's advice), with assertions on. -O3 with ASan and
# UBSan takes GCC many times longer on the kernels' inlined templates.
OPT_FLAGS = "-O1"
# Every finding ends the process with a report and a failing exit status.
ASAN_OPTIONS = "halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1"
UBSAN_OPTIONS = "halt_on_error=1:print_stacktrace=1"
# The ops step's extra ASan options: no leak check (CPython and torch keep memory reachable
# until exit by design - interned objects, op registries, thread pools - and LeakSanitizer
# reports those, not anything of ours); no use-after-return detection (it moves every
# instrumented frame to a heap-allocated fake stack, which the interpreter's deep call stacks
# make slow, and the kernels step already runs it on the same sources).
OPS_ASAN_OPTIONS = "detect_leaks=0:detect_stack_use_after_return=0"


def sanitizer_env(extra_asan: str = "") -> dict[str, str]:
    """The environment of a sanitized run (ASan and UBSan options, appended to any given)."""
    env = dict(os.environ)
    asan = ASAN_OPTIONS + (f":{extra_asan}" if extra_asan else "")
    env["ASAN_OPTIONS"] = ":".join(filter(None, [asan, env.get("ASAN_OPTIONS", "")]))
    env["UBSAN_OPTIONS"] = ":".join(filter(None, [UBSAN_OPTIONS, env.get("UBSAN_OPTIONS", "")]))
    return env


def build_kernels(build_dir: Path, cmake_args: list[str]) -> Path:
    """Configures and builds rvv-kernels' test driver with `cmake_args`; returns its path."""
    subprocess.run(
        ["cmake", "-S", str(KERNELS), "-B", str(build_dir), "-G", "Ninja",
         "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_CXX_FLAGS_RELEASE={OPT_FLAGS}", *cmake_args],
        check=True,
    )  # fmt: skip
    subprocess.run(["cmake", "--build", str(build_dir), "--target", "rvvk_tests"], check=True)
    return build_dir / "rvvk_tests"


def run_logged(label: str, cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> bool:
    """Runs `cmd`, echoes its output (sanitizer reports included); True when it passed."""
    start = time.monotonic()
    result = subprocess.run(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd
    )
    print(
        f"--- {label}: {' '.join(cmd)}\n{result.stdout}"
        f"--- {label}: exit {result.returncode} in {time.monotonic() - start:.1f} s",
        flush=True,
    )
    return result.returncode == 0


def kernels_native(build_dir: Path, cases: Path) -> bool:
    """The native driver, every variant this CPU runs."""
    rvvtools.provision(["sanitizers"])
    driver = build_kernels(build_dir / "native", [f"-DRVVK_SANITIZE={NATIVE_SANITIZE}"])
    env = sanitizer_env()
    env["RVVK_CASES_DIR"] = str(cases)
    env["RVVK_TEST_VARIANTS"] = ""  # every compiled variant the CPU runs
    return run_logged("kernels native (ASan+UBSan)", [str(driver)], env)


def kernels_riscv(build_dir: Path, cases: Path, quick: bool) -> list[tuple[str, bool]]:
    """The riscv64 driver (UBSan, trap mode) under QEMU 10, one run per entry of QEMU_RUNS."""
    rvvtools.provision(["toolchain", "qemu10"])
    driver = build_kernels(
        build_dir / "riscv64",
        [
            f"-DCMAKE_TOOLCHAIN_FILE={rvvtools.toolchain_file()}",
            f"-DRVVK_SANITIZE={RISCV_SANITIZE}",
            f"-DRVVK_SANITIZE_TRAP={RISCV_SANITIZE}",
        ],
    )
    # One emulator per core: the runs are single-threaded and independent.
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        futures = []
        for vlen, zvfh, variants in QEMU_RUNS[:1] if quick else QEMU_RUNS:
            zvfh_on = "on" if zvfh else "off"
            label = f"kernels qemu10 vlen={vlen} zvfh={zvfh_on} ({variants}, UBSan-trap)"
            cmd = [*rvvtools.qemu_cmd(vlen, zvfh), str(driver)]
            env = sanitizer_env()
            env["RVVK_CASES_DIR"] = str(cases)
            env["RVVK_TEST_VARIANTS"] = variants
            futures.append((label, pool.submit(run_logged, label, cmd, env)))
        results = [(label, f.result()) for label, f in futures]
    return results


def build_ops(build_dir: Path) -> Path:
    """Builds rvv-ops' wheel with ASan and UBSan into build_dir/ops-wheel and unpacks it into
    build_dir/ops-site (a directory to put first on PYTHONPATH; never a venv's
    site-packages); returns ops-site.

    The flags reach CMakeLists.txt through hatch_build.py's RVV_OPS_CMAKE_ARGS
    (CMAKE_CXX_FLAGS: rvv-ops' bindings and the rvv-kernels sources it compiles in), with
    GCC, the compiler of torch's wheels, and its own CMake tree (RVV_OPS_BUILD_DIR).
    """
    flags = f"-fsanitize={NATIVE_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
    env = dict(os.environ)
    env["CXX"] = "g++"
    env["RVV_OPS_BUILD_DIR"] = str((build_dir / "ops-build").resolve())
    env["RVV_KERNELS_CMAKE_DIR"] = str(KERNELS / "src" / "rvv_kernels" / "cmake")
    env["RVV_OPS_CMAKE_ARGS"] = shlex.join(
        [
            f"-DCMAKE_CXX_FLAGS={flags}",
            f"-DCMAKE_CXX_FLAGS_RELEASE={OPT_FLAGS}",
            f"-DCMAKE_SHARED_LINKER_FLAGS=-fsanitize={NATIVE_SANITIZE}",
        ]
    )
    for key in ("RVV_OPS_CMAKE_TOOLCHAIN_FILE", "RVV_OPS_SYSROOT", "RVV_OPS_WHEEL_TAG"):
        env.pop(key, None)
    wheel_dir = build_dir / "ops-wheel"
    shutil.rmtree(wheel_dir, ignore_errors=True)
    wheel = ops_riscv.pip_wheel(OPS, wheel_dir, env, "rvv_ops-*.whl")
    site = build_dir / "ops-site"
    shutil.rmtree(site, ignore_errors=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--no-compile", "--target", str(site), str(wheel)],
        check=True,
    )  # fmt: skip
    return site.resolve()


def gcc_runtime(name: str) -> str:
    """The path of GCC's sanitizer runtime `name` (e.g. libasan.so)."""
    path = subprocess.run(
        ["g++", f"-print-file-name={name}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not Path(path).is_file():
        raise RuntimeError(f"g++ has no {name} (tools/provision.sh sanitizers installs it)")
    return str(Path(path).resolve())


def ops_native(build_dir: Path) -> bool:
    """rvv-ops' tests and the ops' conformance file against the sanitized extension, in a
    Python started with GCC's ASan runtime preloaded (it must come first in the process;
    the UBSan runtime is a dependency of _C.so)."""
    rvvtools.provision(["sanitizers"])
    site = build_ops(build_dir)
    env = sanitizer_env(OPS_ASAN_OPTIONS)
    # libstdc++ too: ASan resolves the real __cxa_throw when it starts, and the interpreter
    # does not link libstdc++ (torch loads it later), so without it the first C++ exception
    # (torch throws and catches some while importing) aborts in ASan's interceptor.
    env["LD_PRELOAD"] = f"{gcc_runtime('libasan.so')} {gcc_runtime('libstdc++.so')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "pytest", str(OPS / "tests"), str(CONFORMANCE / "test_ops.py")]
    # From the repository root, so that the root pyproject.toml's pytest settings apply.
    # --capture=sys: pytest's default capture points file descriptor 2 at a temporary file
    # during each test, and a sanitizer report written there is lost when the sanitizer
    # ends the process; capturing only Python's sys.stderr leaves the report on the log.
    return run_logged("rvv-ops (ASan+UBSan)", [*cmd, "-q", "--capture=sys"], env, cwd=ROOT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps",
        default=",".join(STEPS),
        help=f"comma-separated subset of {','.join(STEPS)} (default: all)",
    )
    parser.add_argument("--quick", action="store_true", help="riscv64: VLEN 128 only")
    parser.add_argument(
        "--build-dir",
        type=Path,
        default=ROOT / "build" / "sanitize",
        help="where to build (default: build/sanitize)",
    )
    args = parser.parse_args(argv)
    steps = args.steps.split(",")
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        parser.error(f"--steps: unknown {unknown}; known: {list(STEPS)}")

    results: list[tuple[str, bool]] = []
    if "kernels" in steps or "kernels-riscv" in steps:
        cases = args.build_dir / "attention-cases"
        kernels_tests.write_cases(cases)
        if "kernels" in steps:
            results.append(("kernels native", kernels_native(args.build_dir, cases)))
        if "kernels-riscv" in steps:
            results += kernels_riscv(args.build_dir, cases, args.quick)
    if "ops" in steps:
        results.append(("rvv-ops native", ops_native(args.build_dir)))

    return kernels_tests.summarise("sanitize", results)


if __name__ == "__main__":
    sys.exit(main())
