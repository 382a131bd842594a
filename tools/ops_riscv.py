"""Cross-build rvv-ops' riscv64 wheel and run its tests in the emulated Debian 13 Python.

    python tools/ops_riscv.py build [--out dist]
    python tools/ops_riscv.py test  [--out dist] [--config 256:zvfh --config 128] \\
                                    [--lengths quick|full] [-- PYTEST-ARGS...]
    python tools/ops_riscv.py fuzz  --hypothesis hypothesis==X [--out dist] [--config 256:zvfh] \\
                                    [--profile smoke|long] [-- PYTEST-ARGS...]

``build`` writes rvv-ops' ``py3-none-linux_riscv64`` wheel, compiled by clang-16 against the
libtorch-dev (torch 2.6) of the Debian 13 riscv64 root, and rvv-kernels' pure-Python wheel
into ``--out``. ``test`` builds both, then for each ``--config VLEN[:zvfh]`` (default
``256:zvfh`` and ``128``: the SpacemiT K1's VLEN with its Zvfh, and the minimum VLEN
without; the second runs ``--lengths quick`` without the MoE test files, the first each MoE
reference shape in one activation dtype, rotating) installs them into a throw-away venv of
the root's Python 3.13 and runs ``packages/rvv-ops/tests`` and the conformance suite's
``tests/conformance/test_ops.py`` there under QEMU 10. Then rvv-attention (pure Python) is
installed the same way with transformers and its dependencies (riscv64 wheels from PyPI,
downloaded on the host: tokenizers, safetensors, regex and pydantic-core publish them; numpy
and PyYAML come from the root) and ``packages/rvv-attention/tests`` with
``tests/conformance/test_attention.py`` run in the first configuration, plus its capability
test at VLEN 128 and 512 (``--no-attention`` skips all
of this). These emulated runs go two at a time (``--jobs``, one per core), each printed
whole when it ends; ``--jobs 1`` streams them one after the other. ``fuzz`` (``nox -s fuzz
-- --riscv``) builds the three wheels, installs them with the pinned hypothesis (a
pure-Python wheel, downloaded once into ``--out``/riscv64-wheels) into such a venv and runs
``tests/fuzz`` there with ``FUZZ_PROFILE=--profile`` at one ``--config``. Every command
provisions what it needs first (tools/provision.sh: clang-16, QEMU 10, the root).

On riscv64 the conformance files run their quick subset of the case matrix (the cases
marked ``quick`` in tests/conformance/cases.py; the others are reported as skipped).

Emulated wall time is not performance: ``import torch`` alone takes ~20-40 s.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import rvvtools

REPO = Path(__file__).resolve().parent.parent
OPS = REPO / "packages" / "rvv-ops"
KERNELS = REPO / "packages" / "rvv-kernels"
ATTENTION = REPO / "packages" / "rvv-attention"
# rvv-ops' test files the second default configuration leaves out: the MoE ops and the
# model-coverage ops (norm variants, gates, RoPE variants, MLA, Gated DeltaNet), whose
# VLEN-dependent code is the kernels' (kernels-tests runs those at every VLEN).
MOE_TEST_FILES = ("test_moe.py", "test_moe_routing.py")
SECOND_RUN_SKIPPED = (
    *MOE_TEST_FILES,
    "test_norms2.py",
    "test_sigmoid_mul.py",
    "test_rotary2.py",
    "test_mrope.py",
    "test_gdn_gating.py",
    "test_gdn.py",
    "test_mla.py",
    "test_attention_mla.py",
    "test_qwen3_5_ops.py",
)
CONFORMANCE = REPO / "tests" / "conformance"
WHEEL_TAG = "py3-none-linux_riscv64"

# transformers and what it needs beyond the root's packages (numpy, PyYAML), pinned to
# the versions that resolved with transformers 5.24.0 (noxfile.py's TRANSFORMERS). pip
# downloads them on the host for the emulated Python 3.13 / riscv64 (binary wheels only).
TRANSFORMERS_WHEELS = (
    "transformers==5.24.0",
    "huggingface_hub==2.4.0",
    "tokenizers==0.23.3",
    "safetensors==0.8.0",
    "regex==2026.11.19",
    "tqdm==4.70.1",
    "typer==0.29.2",
    "click==8.5.1",
    "rich==15.0.0",
    "Pygments==2.21.0",
    "markdown-it-py==4.3.0",
    "mdurl==0.1.2",
    "shellingham==1.5.4",
    "annotated-doc==0.0.7",
    "httpx2==2.16.2",
    "httpcore2==2.16.2",
    "h11==0.16.0",
    "anyio==4.16.0",
    "idna==3.20",
    "truststore==0.10.5",
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "typing_extensions==4.16.0",
    "filelock==4.3.1",
    "fsspec==2026.9.0",
    "packaging==26.4",
)
_RISCV64_PLATFORMS = ("manylinux_2_39_riscv64", "manylinux_2_31_riscv64", "linux_riscv64")


def pip_wheel(package: Path, out_dir: Path, env: dict[str, str], pattern: str) -> Path:
    """Builds `package` into out_dir with the running Python's pip; returns the new wheel."""
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    subprocess.run([*cmd, str(package), "-w", str(out_dir)], env=env, check=True)
    wheels = [p for p in out_dir.glob(pattern) if p.stat().st_mtime >= start - 1]
    if len(wheels) != 1:
        raise RuntimeError(f"expected one new {pattern} in {out_dir}, found {wheels}")
    return wheels[0]


def build_wheel(out_dir: Path) -> Path:
    """Cross-builds rvv-ops' riscv64 wheel into out_dir and returns its path.

    Uses tools/cmake/riscv64-linux-clang.cmake against the provisioned riscv64 root (its
    libtorch-dev); the CMake build tree is kept in packages/rvv-ops/build/cross-<key>.
    """
    env = dict(os.environ)
    env["RVV_OPS_CMAKE_TOOLCHAIN_FILE"] = str(rvvtools.toolchain_file())
    env["RVV_OPS_SYSROOT"] = str(rvvtools.riscv_root())
    env["RVV_KERNELS_CMAKE_DIR"] = str(KERNELS / "src" / "rvv_kernels" / "cmake")
    for key in ("RVV_OPS_TORCH_CMAKE_DIR", "RVV_OPS_BUILD_DIR", "RVV_OPS_WHEEL_TAG"):
        env.pop(key, None)
    return pip_wheel(OPS, out_dir.resolve(), env, f"rvv_ops-*-{WHEEL_TAG}.whl")


def build_kernels_wheel(out_dir: Path) -> Path:
    """Builds rvv-kernels' wheel (pure Python: sources and CMake files) into out_dir."""
    return pip_wheel(KERNELS, out_dir.resolve(), dict(os.environ), "rvv_kernels-*.whl")


def run_tests(
    wheel: Path,
    vlen: int,
    *,
    zvfh: bool = True,
    extra_wheels: Sequence[Path] = (),
    lengths: str = "full",
    pytest_args: Sequence[str] = (),
    out: TextIO | None = None,
) -> int:
    """Runs packages/rvv-ops/tests and tests/conformance/test_ops.py against `wheel` in the
    root's Python under QEMU 10.

    The emulated CPU has RVV 1.0 with VLEN `vlen` bits, and Zvfh if `zvfh`. The wheel and
    `extra_wheels` are installed with the root's own pip into a fresh venv
    (``--system-site-packages``: torch, numpy and pytest come from the root), which is
    deleted afterwards. `lengths` picks the tests' row-length set (``quick`` or ``full``).
    Everything is printed to `out` (default: this process's stdout). Returns pytest's exit
    code.
    """
    root = rvvtools.riscv_root()
    qemu = rvvtools.qemu_cmd(vlen, zvfh, sysroot=root)
    env = rvvtools.guest_env()
    with tempfile.TemporaryDirectory(prefix="rvv-ops-venv-") as tmp:
        python = rvvtools.make_guest_venv(Path(tmp) / "venv", qemu, root)
        subprocess.run(
            [*python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
             "--no-cache-dir", str(wheel), *map(str, extra_wheels)],
            env=env, check=True, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        test_env = {
            **env,
            # The tests start fresh Pythons; the emulated one cannot exec itself.
            "RVV_OPS_TEST_PYTHON": shlex.join(python),
            "RVV_OPS_EXPECT_VLEN": str(vlen),
            "RVV_OPS_EXPECT_ZVFH": "1" if zvfh else "0",
        }
        cmd = [
            *python, "-m", "pytest", str(OPS / "tests"), str(CONFORMANCE / "test_ops.py"),
            f"--rvv-ops-lengths={lengths}",
            # Each MoE reference shape in one activation dtype (rotating): the dtypes of the
            # FP8 / INT4 experts change the op's conversions, not the RVV GEMMs, which the
            # kernels' tests cover at every VLEN; ops-tests runs every pair natively.
            "--rvv-ops-moe-dtypes=rotate",
        ]  # fmt: skip
        print(f"+ {shlex.join(cmd + list(pytest_args))}", file=out or sys.stdout, flush=True)
        # From the repository root, so that the root pyproject.toml's pytest settings apply.
        return subprocess.run(
            [*cmd, *pytest_args], env=test_env, cwd=REPO, check=False,
            stdout=out, stderr=subprocess.STDOUT,
        ).returncode  # fmt: skip


def build_attention_wheel(out_dir: Path) -> Path:
    """Builds rvv-attention's pure-Python wheel into out_dir."""
    return pip_wheel(ATTENTION, out_dir.resolve(), dict(os.environ), "rvv_attention-*.whl")


def download_transformers(out_dir: Path) -> tuple[Path | None, str]:
    """Downloads TRANSFORMERS_WHEELS for riscv64 / CPython 3.13 into out_dir/riscv64-wheels.

    Returns (the directory, "") or (None, why not) - e.g. when PyPI is unreachable.
    """
    return download_wheels(out_dir, TRANSFORMERS_WHEELS)


def download_wheels(out_dir: Path, requirements: Sequence[str]) -> tuple[Path | None, str]:
    """Downloads the wheels of `requirements` (pinned, no dependencies) for riscv64 / CPython
    3.13 into out_dir/riscv64-wheels, where they stay (pip skips the wheels it has).

    Returns (the directory, "") or (None, why not) - e.g. when PyPI is unreachable.
    """
    target = out_dir.resolve() / "riscv64-wheels"
    target.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in _RISCV64_PLATFORMS for arg in ("--platform", p)]
    cmd = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
        "--only-binary=:all:", *platforms, "--python-version", "3.13",
        "--implementation", "cp", "-d", str(target), *requirements,
    ]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        return None, f"pip download for riscv64 failed: {res.stderr.strip()[-500:]}"
    return target, ""


def run_attention_tests(
    wheels: Sequence[Path],
    vlen: int,
    *,
    zvfh: bool,
    transformers_dir: Path | None,
    tests: Sequence[str] = (),
    pytest_args: Sequence[str] = (),
    doctor: bool = False,
    out: TextIO | None = None,
) -> int:
    """Runs packages/rvv-attention/tests and tests/conformance/test_attention.py (or the
    given test files of packages/rvv-attention/tests) in the root's Python.

    ``wheels`` (rvv-ops, rvv-kernels, rvv-attention) go into a fresh venv like
    :func:`run_tests`; with ``transformers_dir`` transformers is installed from there
    (no index: the root supplies numpy and PyYAML). With ``doctor`` the doctor's report
    follows the tests. Everything is printed to `out` (default: stdout). Returns pytest's
    exit code.
    """
    paths = [ATTENTION / "tests" / t for t in tests] or [
        ATTENTION / "tests",
        CONFORMANCE / "test_attention.py",
    ]
    return run_guest_pytest(
        wheels,
        vlen,
        zvfh=zvfh,
        paths=paths,
        find_links=transformers_dir,
        requirements=(TRANSFORMERS_WHEELS[0],) if transformers_dir is not None else (),
        test_env={
            "RVV_ATTENTION_EXPECT_VLEN": str(vlen),
            "RVV_ATTENTION_EXPECT_ZVFH": "1" if zvfh else "0",
        },
        pytest_args=pytest_args,
        after=[("the doctor, on the emulated CPU", ["-m", "rvv_attention"])] if doctor else [],
        out=out,
    )


def run_guest_pytest(
    wheels: Sequence[Path],
    vlen: int,
    *,
    zvfh: bool,
    paths: Sequence[Path],
    find_links: Path | None = None,
    requirements: Sequence[str] = (),
    test_env: Mapping[str, str] | None = None,
    pytest_args: Sequence[str] = (),
    after: Sequence[tuple[str, list[str]]] = (),
    out: TextIO | None = None,
) -> int:
    """Runs pytest on `paths` in a fresh venv of the root's Python under QEMU 10 (VLEN
    `vlen`, Zvfh if `zvfh`), from the repository root.

    ``wheels`` are installed without dependencies, then ``requirements`` from
    ``find_links`` only (no index; what the root has satisfies the rest). ``test_env`` is
    added to pytest's environment (with RVV_ATTENTION_TEST_PYTHON: the tests start fresh
    Pythons, and the emulated one cannot exec itself). ``after``: (what, python arguments)
    run in the venv after the tests, their exit codes ignored. Everything is printed to
    `out` (default: stdout). Returns pytest's exit code.
    """
    root = rvvtools.riscv_root()
    qemu = rvvtools.qemu_cmd(vlen, zvfh, sysroot=root)
    env = rvvtools.guest_env()
    with tempfile.TemporaryDirectory(prefix="rvv-guest-venv-") as tmp:
        python = rvvtools.make_guest_venv(Path(tmp) / "venv", qemu, root)
        pip = [*python, "-m", "pip", "install", "--quiet", "--no-index", "--no-cache-dir"]
        to: dict[str, Any] = {"stdout": out, "stderr": subprocess.STDOUT}
        subprocess.run([*pip, "--no-deps", *map(str, wheels)], env=env, check=True, **to)
        if requirements and find_links is not None:
            start = time.monotonic()
            # --no-compile: byte-compiling all of transformers under emulation takes minutes;
            # the modules the tests import are compiled on first import instead.
            subprocess.run(
                [*pip, "--no-compile", "--find-links", str(find_links), *requirements],
                env=env, check=True, **to,
            )  # fmt: skip
            took = time.monotonic() - start
            print(f"installed {' '.join(requirements)} in {took:.0f} s", file=out or sys.stdout)
        full_env = {**env, "RVV_ATTENTION_TEST_PYTHON": shlex.join(python), **(test_env or {})}
        cmd = [*python, "-m", "pytest", *map(str, paths)]
        print(f"+ {shlex.join(cmd + list(pytest_args))}", file=out or sys.stdout, flush=True)
        code = subprocess.run(
            [*cmd, *pytest_args], env=full_env, cwd=REPO, check=False, **to
        ).returncode
        for what, args in after:
            print(f"+ python {shlex.join(args)} ({what})", file=out or sys.stdout, flush=True)
            subprocess.run([*python, *args], env=env, check=False, **to)
        return code


@dataclass(frozen=True)
class Config:
    """One emulated CPU: VLEN and whether it has Zvfh."""

    vlen: int
    zvfh: bool

    @classmethod
    def parse(cls, text: str) -> Config:
        vlen, _, ext = text.partition(":")
        if ext not in ("", "zvfh") or not vlen.isdigit():
            raise argparse.ArgumentTypeError(f"expected VLEN or VLEN:zvfh, not {text!r}")
        return cls(int(vlen), ext == "zvfh")

    def __str__(self) -> str:
        return f"VLEN {self.vlen}" + (" + Zvfh" if self.zvfh else "")


Job = tuple[str, Callable[[TextIO | None], int]]
"""What a job tests, and a function that runs it, printing to the file it is given (None:
stdout), and returns pytest's exit code."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="cross-build the riscv64 wheels into --out")
    test = sub.add_parser("test", help="build, then run rvv-ops' tests under QEMU")
    fuzz = sub.add_parser("fuzz", help="build, then run tests/fuzz under QEMU")
    for p in (build, test, fuzz):
        p.add_argument("--out", type=Path, default=REPO / "dist", help="wheel directory (dist/)")
    fuzz.add_argument(
        "--config",
        type=Config.parse,
        default=Config(256, True),
        help="emulated CPU as VLEN[:zvfh] (default: 256:zvfh)",
    )
    fuzz.add_argument(
        "--profile", default="smoke", help="tests/fuzz's FUZZ_PROFILE (default: smoke)"
    )
    fuzz.add_argument(
        "--hypothesis",
        required=True,
        metavar="REQUIREMENT",
        help="the pinned hypothesis to install (noxfile.py's HYPOTHESIS)",
    )
    fuzz.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    test.add_argument(
        "--config",
        type=Config.parse,
        action="append",
        help="emulated CPU as VLEN[:zvfh]; repeatable (default: 256:zvfh and 128)",
    )
    test.add_argument(
        "--lengths",
        choices=("quick", "full"),
        default="full",
        help="row lengths of the reference comparisons (default: full)",
    )
    test.add_argument(
        "--no-ops",
        action="store_true",
        help="skip rvv-ops' own tests (run rvv-attention's only)",
    )
    test.add_argument(
        "--no-attention",
        action="store_true",
        help="skip rvv-attention's tests (and the transformers download)",
    )
    test.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="emulated test runs at once (default: 2, or 1 on one core); 1 streams output",
    )
    test.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)

    rvvtools.provision(["toolchain", "root"])
    wheel = build_wheel(args.out)
    kernels = build_kernels_wheel(args.out)
    print(f"built {wheel}\nbuilt {kernels}", flush=True)
    if args.command == "build":
        return 0
    if args.command == "fuzz":
        return run_fuzz(args, [wheel, kernels, build_attention_wheel(args.out)])

    configs: list[Config] = args.config or [Config(256, True), Config(128, False)]

    def ops_job(c: Config) -> Job:
        # Without --config, the second default configuration (VLEN 128) runs the quick set
        # (the C++ kernel tests run every VLEN in full; this bounds CI's emulated time).
        second = not args.config and c is not configs[0]
        lengths = "quick" if second else args.lengths
        # ... and leaves the MoE and model-coverage ops to the first configuration: their
        # VLEN-dependent code is the kernels', which kernels-tests runs at every VLEN.
        skip = [f"--ignore={OPS / 'tests' / f}" for f in SECOND_RUN_SKIPPED] if second else []

        def job(out: TextIO | None) -> int:
            return run_tests(
                wheel,
                c.vlen,
                zvfh=c.zvfh,
                extra_wheels=[kernels],
                lengths=lengths,
                pytest_args=[*skip, *args.pytest_args],
                out=out,
            )

        return f"rvv-ops tests, {c}", job

    jobs = [ops_job(c) for c in ([] if args.no_ops else configs)]
    if not args.no_attention:
        jobs += _attention(args, wheel, kernels, configs[0])
    results = run_jobs(jobs, args.jobs)
    for what, code, seconds in results:
        status = "passed" if code == 0 else f"FAILED (pytest exit {code})"
        print(f"under QEMU, {what}: {status} in {seconds:.0f} s")
    return max((code for _, code, _ in results), default=0)


def run_fuzz(args: argparse.Namespace, wheels: Sequence[Path]) -> int:
    """tests/fuzz against `wheels` (rvv-ops, rvv-kernels, rvv-attention) with the pinned
    hypothesis (a pure-Python wheel, downloaded once into ``--out``/riscv64-wheels; the
    root supplies its one dependency, sortedcontainers) at ``args.config``, profile
    ``args.profile``."""
    wheel_dir, why = download_wheels(args.out, [args.hypothesis])
    if wheel_dir is None:
        print(f"ERROR: {args.hypothesis} not downloadable for the emulated Python: {why}")
        return 1
    start = time.monotonic()
    code = run_guest_pytest(
        wheels,
        args.config.vlen,
        zvfh=args.config.zvfh,
        paths=[REPO / "tests" / "fuzz"],
        find_links=wheel_dir,
        requirements=[args.hypothesis],
        test_env={"FUZZ_PROFILE": args.profile},
        pytest_args=args.pytest_args,
    )
    status = "passed" if code == 0 else f"FAILED (pytest exit {code})"
    took = time.monotonic() - start
    print(f"under QEMU, tests/fuzz ({args.profile}), {args.config}: {status} in {took:.0f} s")
    return code


def run_jobs(jobs: Sequence[Job], workers: int) -> list[tuple[str, int, float]]:
    """Runs `jobs` (each an emulated Python: single-threaded, so one per core pays) with
    `workers` at a time; returns (what, exit code, seconds) in the jobs' order.

    One worker streams each job's output as it comes. With more, each job writes to a
    file of its own, printed whole when the job ends (so the logs do not interleave).
    """

    def timed(job: Job, out: TextIO | None) -> tuple[str, int, float]:
        start = time.monotonic()
        code = job[1](out)
        return job[0], code, time.monotonic() - start

    if workers <= 1 or len(jobs) <= 1:
        results = []
        for job in jobs:
            print(f"=== {job[0]} ===", flush=True)
            results.append(timed(job, None))
        return results

    def logged(job: Job, log: Path) -> tuple[str, int, float]:
        with log.open("w") as out:
            try:
                return timed(job, out)
            except Exception as e:  # reported like a failed run, with why
                print(f"{type(e).__name__}: {e}", file=out)
                return job[0], 1, 0.0

    with tempfile.TemporaryDirectory(prefix="ops-riscv-logs-") as tmp:
        logs = [Path(tmp) / f"job{i}.log" for i in range(len(jobs))]
        print(f"{len(jobs)} jobs, {workers} at a time; each one's output follows its end")
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(logged, job, log) for job, log in zip(jobs, logs, strict=True)]
            index = {future: i for i, future in enumerate(futures)}
            for future in concurrent.futures.as_completed(futures):
                what, code, seconds = future.result()
                print(f"=== {what} (exit {code}, {seconds:.0f} s) ===", flush=True)
                print(logs[index[future]].read_text(), end="", flush=True)
        return [future.result() for future in futures]


def _attention(
    args: argparse.Namespace, ops_wheel: Path, kernels_wheel: Path, full: Config
) -> list[Job]:
    """rvv-attention's tests at `full`, then its capability test at VLEN 128 and 512."""
    wheels = [ops_wheel, kernels_wheel, build_attention_wheel(args.out)]
    transformers_dir, why = download_transformers(args.out)
    if transformers_dir is None:
        # The transformers tests then skip with this reason (and say so in pytest's summary).
        print(f"WARNING: transformers not installable under emulation: {why}", flush=True)
    caps_only = ("test_ra_capabilities.py",)
    runs: list[tuple[Config, Path | None, tuple[str, ...]]] = [(full, transformers_dir, ())]
    runs += [(Config(v, z), None, caps_only) for v, z in ((128, False), (512, True))]

    def attention_job(c: Config, tdir: Path | None, tests: tuple[str, ...]) -> Job:
        def job(out: TextIO | None) -> int:
            return run_attention_tests(
                wheels,
                c.vlen,
                zvfh=c.zvfh,
                transformers_dir=tdir,
                tests=tests,
                pytest_args=args.pytest_args,
                doctor=not tests,
                out=out,
            )

        return f"rvv-attention{'' if not tests else ' capabilities'}, {c}", job

    return [attention_job(*run) for run in runs]


if __name__ == "__main__":
    sys.exit(main())
