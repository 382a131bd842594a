"""Cross-build rvv-ops' riscv64 wheel and run its tests in the emulated Debian 13 Python.

    python tools/ops_riscv.py build [--out dist]
    python tools/ops_riscv.py test  [--out dist] [--config 256:zvfh --config 128] \\
                                    [--lengths quick|full] [-- PYTEST-ARGS...]

``build`` writes rvv-ops' ``py3-none-linux_riscv64`` wheel, compiled by clang-16 against the
libtorch-dev (torch 2.6) of the Debian 13 riscv64 root, and rvv-kernels' pure-Python wheel
into ``--out``. ``test`` builds both, then for each ``--config VLEN[:zvfh]`` (default
``256:zvfh`` and ``128``: the SpacemiT K1's VLEN with its Zvfh, and the minimum VLEN
without) installs them into a throw-away venv of the root's Python 3.13 and runs
``packages/rvv-ops/tests`` there under QEMU 10, streaming pytest's output. Both provision
what they need first (tools/provision.sh: clang-16, QEMU 10, the root).

Emulated wall time is not performance: ``import torch`` alone takes ~20-40 s.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import rvvtools

REPO = Path(__file__).resolve().parent.parent
OPS = REPO / "packages" / "rvv-ops"
KERNELS = REPO / "packages" / "rvv-kernels"
WHEEL_TAG = "py3-none-linux_riscv64"


def _pip_wheel(package: Path, out_dir: Path, env: dict[str, str], pattern: str) -> Path:
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
    libtorch-dev); the CMake build tree is kept in packages/rvv-ops/build/cross.
    """
    env = dict(os.environ)
    env["RVV_OPS_CMAKE_TOOLCHAIN_FILE"] = str(rvvtools.toolchain_file())
    env["RVV_OPS_SYSROOT"] = str(rvvtools.riscv_root())
    env["RVV_KERNELS_CMAKE_DIR"] = str(KERNELS / "src" / "rvv_kernels" / "cmake")
    for key in ("RVV_OPS_TORCH_CMAKE_DIR", "RVV_OPS_BUILD_DIR", "RVV_OPS_WHEEL_TAG"):
        env.pop(key, None)
    return _pip_wheel(OPS, out_dir.resolve(), env, f"rvv_ops-*-{WHEEL_TAG}.whl")


def build_kernels_wheel(out_dir: Path) -> Path:
    """Builds rvv-kernels' wheel (pure Python: sources and CMake files) into out_dir."""
    return _pip_wheel(KERNELS, out_dir.resolve(), dict(os.environ), "rvv_kernels-*.whl")


def run_tests(
    wheel: Path,
    vlen: int,
    *,
    zvfh: bool = True,
    extra_wheels: Sequence[Path] = (),
    lengths: str = "full",
    pytest_args: Sequence[str] = (),
) -> int:
    """Runs packages/rvv-ops/tests against `wheel` in the root's Python under QEMU 10.

    The emulated CPU has RVV 1.0 with VLEN `vlen` bits, and Zvfh if `zvfh`. The wheel and
    `extra_wheels` are installed with the root's own pip into a fresh venv
    (``--system-site-packages``: torch, numpy and pytest come from the root), which is
    deleted afterwards. `lengths` picks the tests' row-length set (``quick`` or ``full``).
    Returns pytest's exit code.
    """
    root = rvvtools.riscv_root()
    qemu = rvvtools.qemu_cmd(vlen, zvfh, sysroot=root)
    env = rvvtools.guest_env()
    with tempfile.TemporaryDirectory(prefix="rvv-ops-venv-") as tmp:
        venv = Path(tmp) / "venv"
        python = [*qemu, str(venv / "bin" / "python3")]
        # --without-pip: ensurepip would exec the venv's python, which qemu-user cannot.
        subprocess.run(
            [*qemu, str(root / "usr/bin/python3"), "-m", "venv", "--system-site-packages",
             "--without-pip", str(venv)],
            env=env, check=True,
        )  # fmt: skip
        subprocess.run(
            [*python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
             "--no-cache-dir", str(wheel), *map(str, extra_wheels)],
            env=env, check=True,
        )  # fmt: skip
        test_env = {
            **env,
            # The tests start fresh Pythons; the emulated one cannot exec itself.
            "RVV_OPS_TEST_PYTHON": shlex.join(python),
            "RVV_OPS_EXPECT_VLEN": str(vlen),
            "RVV_OPS_EXPECT_ZVFH": "1" if zvfh else "0",
        }
        cmd = [*python, "-m", "pytest", str(OPS / "tests"), f"--rvv-ops-lengths={lengths}"]
        print(f"+ {shlex.join(cmd + list(pytest_args))}", flush=True)
        # From the repository root, so that the root pyproject.toml's pytest settings apply.
        return subprocess.run([*cmd, *pytest_args], env=test_env, cwd=REPO, check=False).returncode


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="cross-build the riscv64 wheels into --out")
    test = sub.add_parser("test", help="build, then run rvv-ops' tests under QEMU")
    for p in (build, test):
        p.add_argument("--out", type=Path, default=REPO / "dist", help="wheel directory (dist/)")
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
    test.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)

    rvvtools.provision(["toolchain", "root"])
    wheel = build_wheel(args.out)
    kernels = build_kernels_wheel(args.out)
    print(f"built {wheel}\nbuilt {kernels}", flush=True)
    if args.command == "build":
        return 0

    configs: list[Config] = args.config or [Config(256, True), Config(128, False)]
    results: list[tuple[Config, int, float]] = []
    for config in configs:
        print(f"=== rvv-ops tests, {config} ===", flush=True)
        start = time.monotonic()
        code = run_tests(
            wheel,
            config.vlen,
            zvfh=config.zvfh,
            extra_wheels=[kernels],
            lengths=args.lengths,
            pytest_args=args.pytest_args,
        )
        results.append((config, code, time.monotonic() - start))
    for config, code, seconds in results:
        status = "passed" if code == 0 else f"FAILED (pytest exit {code})"
        print(f"rvv-ops under QEMU, {config}: {status} in {seconds:.0f} s")
    return max((code for _, code, _ in results), default=0)


if __name__ == "__main__":
    sys.exit(main())
