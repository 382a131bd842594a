"""Test, lint and build sessions for the rvv-sglang monorepo.

One session per layer (``kernels-tests``, ``ops-tests``, ...); ``nox`` with no
arguments runs every test session and lint. Sessions that need the RISC-V
toolchain, QEMU or the emulated Debian 13 riscv64 root provision them first
through tools/provision.sh (idempotent, cached under ~/.cache/rvv-sglang).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tools"))

nox.options.sessions = ["kernels-tests", "ops-tests", "attention-tests", "riscv-tests", "lint"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

# torch 2.13.0 (CPU build) is served from this machine's local disk; any other
# version would download gigabytes.
TORCH = "torch==2.13.0"
KERNELS = "packages/rvv-kernels"
OPS = "packages/rvv-ops"
ATTENTION = "packages/rvv-attention"
# Newest transformers at the time; its AttentionInterface works with torch 2.13.
TRANSFORMERS = "transformers==5.24.0"


def install_ops(session: nox.Session) -> None:
    """Installs torch, rvv-kernels and rvv-ops (built against that torch)."""
    session.install(TORCH, "numpy", "pytest", "hatchling")
    session.install(KERNELS)
    # No build isolation: rvv-ops must compile against the torch installed here.
    session.install("--no-build-isolation", "--force-reinstall", "--no-deps", OPS)


@nox.session(name="kernels-tests")
def kernels_tests(session: nox.Session) -> None:
    """rvv-kernels: C++ tests natively, then cross-built under QEMU at every VLEN and Zvfh."""
    session.install("pytest", KERNELS)
    session.run("pytest", f"{KERNELS}/tests", "-q")
    session.run("python", "tools/kernels_tests.py", *session.posargs)


@nox.session(name="ops-tests")
def ops_tests(session: nox.Session) -> None:
    """rvv-ops natively: opcheck, references, bad inputs."""
    install_ops(session)
    session.run("pytest", f"{OPS}/tests", "-q", *session.posargs)


@nox.session(name="attention-tests")
def attention_tests(session: nox.Session) -> None:
    """rvv-attention natively: selection, numerics vs fp64, fallback, doctor, transformers."""
    install_ops(session)
    session.install(TRANSFORMERS)
    session.install("--no-deps", "--force-reinstall", ATTENTION)
    session.run("pytest", f"{ATTENTION}/tests", "-q", *session.posargs)


@nox.session(name="wheels-riscv64")
def wheels_riscv64(session: nox.Session) -> None:
    """Cross-builds the riscv64 wheel of rvv-ops (and rvv-kernels') into dist/."""
    session.install("hatchling", "build")
    session.run("python", "tools/ops_riscv.py", "build", "--out", "dist")


@nox.session(name="riscv-tests")
def riscv_tests(session: nox.Session) -> None:
    """rvv-ops' tests inside the emulated Debian 13 riscv64 Python (QEMU, VLEN 256 and 128)."""
    session.install("hatchling", "build")
    session.run("python", "tools/ops_riscv.py", "test", "--out", "dist", *session.posargs)


@nox.session(name="bench-kernels")
def bench_kernels(session: nox.Session) -> None:
    """Instruction counts under QEMU, RVV vs scalar build, per kernel case and VLEN.

    Writes build/bench/kernels.json. ``nox -s bench-kernels -- --quick`` runs VLEN 256 only.
    """
    session.run("python", "tools/bench_kernels.py", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint + format check) and mypy --strict on the Python packages and tools."""
    # transformers: rvv-attention's integration is type-checked against it.
    session.install(TORCH, "numpy", "pytest", "ruff", "mypy", "nox", "hatchling", TRANSFORMERS)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run(
        "mypy",
        f"{KERNELS}/src/rvv_kernels",
        f"{OPS}/src/rvv_ops",
        f"{ATTENTION}/src/rvv_attention",
        "tools/rvvtools",
        "tools/kernels_tests.py",
        "tools/ops_riscv.py",
        "tools/bench_kernels.py",
        "noxfile.py",
    )
