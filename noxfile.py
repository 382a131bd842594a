"""Test, lint and build sessions for the rvv-sglang monorepo.

One session per layer (``kernels-tests``, ``ops-tests``, ...); ``nox`` with no
arguments runs every test session and lint. Sessions that need the RISC-V
toolchain, QEMU or the emulated Debian 13 riscv64 root provision them first
through tools/provision.sh (idempotent, cached under ~/.cache/rvv-sglang).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tools"))

nox.options.sessions = [
    "kernels-tests",
    "ops-tests",
    "attention-tests",
    "sglang-tests",
    "riscv-tests",
    "bench-smoke",
    "fuzz-smoke",
    "lint",
]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

# torch 2.13.0 (CPU build) is served from this machine's local disk; any other
# version would download gigabytes.
TORCH = "torch==2.13.0"
# The GGUF writer of tools/peers (llama.cpp's own Python package for the format).
GGUF = "gguf==0.19.0"
KERNELS = "packages/rvv-kernels"
OPS = "packages/rvv-ops"
ATTENTION = "packages/rvv-attention"
# Newest transformers at the time; its AttentionInterface works with torch 2.13.
TRANSFORMERS = "transformers==5.24.0"
# The cross-layer attention conformance suite: one file per implementation, each run by
# that layer's session (its imports fail the session if the implementation is missing).
CONFORMANCE = "tests/conformance"


def ops_wheel_key(torch_spec: str) -> str | None:
    """A key for rvv-ops' wheel built against ``torch_spec``: a hash of the torch pin, this
    Python and the contents of rvv-kernels' and rvv-ops' tracked files (None outside a git
    checkout: no caching then)."""
    import hashlib
    import subprocess

    try:
        files = subprocess.run(
            ["git", "ls-files", "-z", "--", KERNELS, OPS],
            cwd=ROOT, check=True, capture_output=True,
        ).stdout.decode().split("\0")  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    digest = hashlib.sha256(f"{torch_spec}\n{sys.version}\n".encode())
    for name in sorted(f for f in files if f):
        path = ROOT / name
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"(deleted)")
    return digest.hexdigest()[:16]


def install_ops_wheel(session: nox.Session, torch_spec: str) -> None:
    """Installs rvv-ops built against the torch installed in the session (``torch_spec``),
    without build isolation. The wheel is kept under build/ops-wheels/<key> (ops_wheel_key):
    the sessions with the same torch pin build it once per source state instead of once
    each."""
    key = ops_wheel_key(torch_spec)
    if key is None:
        session.install("--no-build-isolation", "--force-reinstall", "--no-deps", OPS)
        return
    cache = ROOT / "build" / "ops-wheels" / key
    wheels = sorted(cache.glob("rvv_ops-*.whl"))
    if not wheels:
        tmp = cache.with_name(f"{key}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)  # a build that was interrupted
        session.run(
            "python", "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(tmp),
            OPS,
        )  # fmt: skip
        tmp.rename(cache)
        wheels = sorted(cache.glob("rvv_ops-*.whl"))
    else:
        session.log(f"rvv-ops: the wheel built for this source state, {wheels[0]}")
    session.install("--force-reinstall", "--no-deps", str(wheels[0]))


def install_ops(session: nox.Session) -> None:
    """Installs torch, rvv-kernels and rvv-ops (built against that torch)."""
    session.install(TORCH, "numpy", "pytest", "hatchling")
    session.install(KERNELS)
    # No build isolation: rvv-ops must compile against the torch installed here.
    install_ops_wheel(session, TORCH)


@nox.session(name="kernels-tests")
def kernels_tests(session: nox.Session) -> None:
    """rvv-kernels: C++ tests natively, then cross-built under QEMU at every VLEN and Zvfh. The
    attention tests run the conformance suite's kernel cases, which torch writes."""
    session.install(TORCH, "numpy", "pytest", KERNELS)
    session.run("pytest", f"{KERNELS}/tests", "-q")
    session.run("python", "tools/kernels_tests.py", *session.posargs)


@nox.session(name="ops-tests")
def ops_tests(session: nox.Session) -> None:
    """rvv-ops natively: opcheck, references, bad inputs; the attention ops against the
    conformance suite."""
    install_ops(session)
    session.run(
        "pytest", f"{OPS}/tests", f"{CONFORMANCE}/test_ops.py", "-q", *session.posargs
    )  # fmt: skip


@nox.session(name="attention-tests")
def attention_tests(session: nox.Session) -> None:
    """rvv-attention natively: selection, doctor, transformers; kernel and fallback paths
    against the conformance suite."""
    install_ops(session)
    session.install(TRANSFORMERS)
    session.install("--no-deps", "--force-reinstall", ATTENTION)
    session.run(
        "pytest", f"{ATTENTION}/tests", f"{CONFORMANCE}/test_attention.py", "-q",
        *session.posargs,
    )  # fmt: skip


# Property-based differential tests (tests/fuzz): hypothesis, pinned so that a seed means
# the same examples everywhere.
HYPOTHESIS = "hypothesis==6.170.27"
FUZZ = "tests/fuzz"


def install_fuzz(session: nox.Session) -> None:
    """rvv-ops (install_ops), rvv-attention without its extras, and hypothesis."""
    install_ops(session)
    session.install(HYPOTHESIS)
    session.install("--no-deps", "--force-reinstall", ATTENTION)


def fuzz_riscv(session: nox.Session, args: list[str]) -> None:
    """tests/fuzz inside the emulated Debian 13 riscv64 Python (QEMU 10, VLEN 256 + Zvfh) with
    the smoke budget, whichever session asked: under emulation the long one would take
    hours (docs/architecture.md, Fuzz suite)."""
    session.install("hatchling", "build")
    session.run(
        "python", "tools/ops_riscv.py", "fuzz", "--out", "dist", "--hypothesis", HYPOTHESIS,
        "--profile", "smoke", "--", "-q", *args,
    )  # fmt: skip


def split_riscv(posargs: list[str]) -> tuple[bool, list[str]]:
    """Whether ``--riscv`` is among the session's arguments, and the others (for pytest)."""
    return "--riscv" in posargs, [a for a in posargs if a != "--riscv"]


@nox.session(name="fuzz-smoke")
def fuzz_smoke(session: nox.Session) -> None:
    """tests/fuzz with the short budget of the default run (FUZZ_PROFILE=smoke): the
    regression cases and a few examples per property, derandomized. ``-- --riscv``: inside
    the emulated riscv64 Python instead."""
    riscv, args = split_riscv(session.posargs)
    if riscv:
        fuzz_riscv(session, args)
        return
    install_fuzz(session)
    session.run("pytest", FUZZ, "-q", *args, env={"FUZZ_PROFILE": "smoke"})


@nox.session
def fuzz(session: nox.Session) -> None:
    """tests/fuzz with the long budget (FUZZ_PROFILE=long; docs/architecture.md, Fuzz suite,
    counts its examples), derandomized (the same examples every run). ``-- --riscv``: inside
    the emulated riscv64 Python, with the smoke budget."""
    riscv, args = split_riscv(session.posargs)
    if riscv:
        fuzz_riscv(session, args)
        return
    install_fuzz(session)
    session.run(
        "pytest", FUZZ, "-q", "--hypothesis-show-statistics", *args,
        env={"FUZZ_PROFILE": "long"},
    )  # fmt: skip


# SGLang on x86-64 CPUs (see docs/sglang.md): torch 2.14.1 is SGLang 0.5.23's own pin (served
# from local disk, a CUDA build that runs on the CPU; torchvision must match it), SGLang
# itself without its CUDA dependencies, then the CPU-mode dependency list.
SGLANG = "sglang==0.5.23"
SGLANG_TORCH = ("torch==2.14.1", "torchvision==0.29.1")
SGLANG_RVV = "packages/sglang-rvv"
SGLANG_REQUIREMENTS = f"{SGLANG_RVV}/requirements"


def install_sglang(session: nox.Session) -> None:
    """SGLang 0.5.23 for CPU, then our four packages (rvv-ops built against its torch)."""
    session.install(*SGLANG_TORCH)
    session.install("--no-deps", SGLANG)
    session.install(
        "-r",
        f"{SGLANG_REQUIREMENTS}/sglang-cpu.txt",
        "-c",
        f"{SGLANG_REQUIREMENTS}/constraints.txt",
        "pytest",
        "hatchling",
    )
    session.install(KERNELS)
    install_ops_wheel(session, " ".join(SGLANG_TORCH))
    session.install("--no-deps", "--force-reinstall", ATTENTION, SGLANG_RVV)


@nox.session(name="sglang-tests")
def sglang_tests(session: nox.Session) -> None:
    """sglang-rvv in a real SGLang 0.5.23: shim, plugin, backend on SGLang's test kit and
    demo models served end to end (rvv vs torch_native; of the quantised checkpoints the AWQ
    W4A16 one, the rest is `sglang-quant`); the backend on hand-built batches against the
    conformance suite."""
    install_sglang(session)
    session.run(
        "pytest", f"{SGLANG_RVV}/tests", f"{CONFORMANCE}/test_sglang_backend.py", "-v", "-s",
        "-m", "not quant_full and not moe_full and not e2e_full and not model_matrix",
        *session.posargs,
        env={"SGLANG_USE_CPU_ENGINE": "1"},
    )  # fmt: skip


@nox.session(name="sglang-e2e")
def sglang_e2e(session: nox.Session) -> None:
    """The end-to-end tests sglang-tests leaves out for its budget: the second dense demo
    arch (Llama; the same attention shapes as Qwen2) with the INT8 KV cache and with tensor
    parallelism (tp1 vs tp2), about 3 minutes."""
    install_sglang(session)
    session.run(
        "pytest", f"{SGLANG_RVV}/tests/test_e2e.py", f"{SGLANG_RVV}/tests/test_tp.py", "-v",
        "-s", "-m", "e2e_full", *session.posargs, env={"SGLANG_USE_CPU_ENGINE": "1"},
    )  # fmt: skip


@nox.session(name="sglang-quant")
def sglang_quant(session: nox.Session) -> None:
    """Every quantised demo checkpoint (W8A8, AWQ and GPTQ W4A8 / W4A16, FP8 W8A16) served
    through the RVV ops against its dequantised fp32 twin on torch_native (about 10 minutes;
    not in the default run)."""
    install_sglang(session)
    session.run(
        "pytest", f"{SGLANG_RVV}/tests/test_e2e_quant.py", "-v", "-s", *session.posargs,
        env={"SGLANG_USE_CPU_ENGINE": "1"},
    )  # fmt: skip


@nox.session(name="sglang-moe")
def sglang_moe(session: nox.Session) -> None:
    """The MoE demo models (Qwen3-MoE, Qwen2-MoE with a shared expert) end to end in fp32 and
    bf16: rvv with layer routing (routing and fused-experts ops) against torch_native, and
    quantised (Qwen3-MoE W8A8; Qwen2-MoE AWQ, GPTQ, FP8) against their dequantised twins
    (about 12 minutes; sglang-tests runs Qwen2-MoE's fp32 comparisons)."""
    install_sglang(session)
    session.run(
        "pytest", f"{SGLANG_RVV}/tests/test_e2e_moe.py", "-v", "-s", *session.posargs,
        env={"SGLANG_USE_CPU_ENGINE": "1"},
    )  # fmt: skip


@nox.session(name="model-coverage")
def model_coverage(session: nox.Session) -> None:
    """The model matrix (packages/sglang-rvv/tests/model_matrix.py: Llama 3.2, SmolLM2,
    Qwen2.5, Qwen3, Qwen3.5, Gemma 2 / 3, Phi-3, Mistral, OLMo 2, Granite, GLM-4,
    DeepSeek-V2-Lite as tiny random checkpoints), each served rvv + routing vs torch_native in
    fp32, then docs/models.md rendered from the results (about 45 minutes; not in the default
    run). The report is written even when an architecture fails; the session then fails."""
    install_sglang(session)
    results = Path(session.create_tmp()) / "model-coverage.json"
    if not session.posargs:  # a full run starts afresh; a selection updates its entries
        results.unlink(missing_ok=True)
    try:
        session.run(
            "pytest", f"{SGLANG_RVV}/tests/test_model_matrix.py", "-v", "-s", "-m",
            "model_matrix", *session.posargs,
            env={"SGLANG_USE_CPU_ENGINE": "1", "RVV_MODEL_COVERAGE": str(results)},
        )  # fmt: skip
    finally:
        session.run("python", "tools/model_coverage.py", "--results", str(results))


@nox.session
def soak(session: nox.Session) -> None:
    """The demo model served with rvv and layer routing under 32 concurrent streams for 3,000
    requests or 10 minutes (tools/soak.py: aborts, invalid requests, RSS bound, a 5% sample
    replayed on torch_native). Not in the default run (~15 minutes; sglang-tests runs a
    1-minute variant). Writes build/soak.json."""
    install_sglang(session)
    session.run(
        "python", "tools/soak.py", "--minutes", "10", "--requests", "3000", *session.posargs,
        env={"SGLANG_USE_CPU_ENGINE": "1"},
    )  # fmt: skip


@nox.session
def serve(session: nox.Session) -> None:
    """The main job: SGLang with --attention-backend rvv on the demo model, until Ctrl-C.

    ``nox -s serve -- --model-path PATH [launch_server flags]`` serves another model.
    """
    install_sglang(session)
    # Ctrl-C reaches nox and the wrapper together; nox's defaults would SIGKILL the wrapper
    # 0.5 s later. These let the wrapper stop the server in order (its grace is 15 s).
    session.run(
        "python", "-m", "sglang_rvv.serve", *session.posargs,
        interrupt_timeout=30, terminate_timeout=30,
    )  # fmt: skip


@nox.session
def sanitize(session: nox.Session) -> None:
    """rvv-kernels' C++ tests and the rvv-ops extension built with sanitizers, any finding
    failing the session: the C++ tests natively with AddressSanitizer and UBSan (portable and
    every x86 variant the CPU runs), and cross-built for riscv64 with UBSan alone, in trap
    mode, under QEMU 10 (VLEN 128 and 512, Zvfh at 256); then rvv-ops built natively with
    ASan and UBSan (into build/sanitize, not this venv), its tests and the ops' conformance
    file run against it with ASan's runtime preloaded. torch writes the attention tests' case
    files. ``-- --quick``: VLEN 128 only; ``-- --steps kernels``, ``kernels-riscv`` or ``ops``
    (comma-separated) picks some."""
    # hatchling: the ops step builds rvv-ops' wheel against this torch (no build isolation).
    session.install(TORCH, "numpy", "pytest", "hatchling", KERNELS)
    session.run("python", "tools/sanitize.py", *session.posargs)


@nox.session(name="wheels-riscv64")
def wheels_riscv64(session: nox.Session) -> None:
    """Cross-builds the riscv64 wheel of rvv-ops (and rvv-kernels') into dist/."""
    session.install("hatchling", "build")
    session.run("python", "tools/ops_riscv.py", "build", "--out", "dist")


@nox.session(name="riscv-tests")
def riscv_tests(session: nox.Session) -> None:
    """rvv-ops' tests and the ops' conformance file inside the emulated Debian 13 riscv64
    Python (QEMU, VLEN 256 and 128), then rvv-attention's with its conformance file."""
    session.install("hatchling", "build")
    session.run("python", "tools/ops_riscv.py", "test", "--out", "dist", *session.posargs)


@nox.session(name="riscv-sglang")
def riscv_sglang(session: nox.Session) -> None:
    """SGLang's offline Engine inside the emulated Debian 13 riscv64 root (QEMU 10, VLEN 256):
    the demo model with attention_backend="rvv" vs "torch_native", same greedy tokens, RVV
    kernels ran; then launch_server and one HTTP completion; then the W8A8 and AWQ demo
    checkpoints against their dequantised twins (`-- --quant-only`: just these), then the
    Qwen3-MoE demo model against torch_native (`-- --moe-only`: just this), then the model
    matrix's Qwen3 (QK norms) and Mistral (sliding window) against torch_native
    (`-- --archs-only`: just these). Not in the default run (~50 minutes). Writes
    build/riscv-sglang.json."""
    # The demo model is built on the host: transformers + torch, and sglang-rvv's demo module.
    session.install(TORCH, TRANSFORMERS, "hatchling", "build")
    session.install("--no-deps", SGLANG_RVV)
    session.run("python", "tools/sglang_riscv64.py", "run", "--out", "dist", *session.posargs)


@nox.session(name="bench-kernels")
def bench_kernels(session: nox.Session) -> None:
    """Instruction counts under QEMU, RVV vs scalar build, per kernel case and VLEN.

    Writes build/bench/kernels.json. ``nox -s bench-kernels -- --quick`` runs VLEN 256 only.
    """
    session.run("python", "tools/bench_kernels.py", *session.posargs)


@nox.session(name="bench-x86")
def bench_x86(session: nox.Session) -> None:
    """Attention side by side on this machine: SGLang's torch_native backend, rvv-attention's
    fallback and the rvv-ops kernels (their x86_amx / x86_avx512_bf16 / x86_avx512 / x86_avx2
    variant, whichever the CPU runs), decode and extend.

    Writes build/bench/x86.json. ``nox -s bench-x86 -- --quick``: batch {1, 4} x context 512.
    """
    install_sglang(session)
    session.run(
        "python", "tools/bench_x86.py", *session.posargs, env={"SGLANG_USE_CPU_ENGINE": "1"}
    )


@nox.session(name="bench-e2e-riscv")
def bench_e2e_riscv(session: nox.Session) -> None:
    """Decode steps of a Qwen2.5-1.5B-shaped decoder in the emulated riscv64 Python:
    instructions and estimated cycles per token, torch-native vs rvv (bf16) vs rvv-w8a8.

    Writes build/bench/e2e_riscv.json. ``nox -s bench-e2e-riscv -- --quick``: a 1-layer narrow
    model at VLEN 256 (a harness smoke check, build/bench/e2e_riscv_quick.json).
    """
    session.install("hatchling", "build")
    session.run("python", "tools/bench_e2e_riscv.py", *session.posargs)


@nox.session(name="bench-smoke")
def bench_smoke(session: nox.Session) -> None:
    """The --quick variants of bench-kernels, bench-e2e-riscv and bench-peers (bench-x86's
    runs in sglang-tests): harness smoke checks for CI, not performance tests. They write
    build/bench/*_quick.json, which bench-report does not read."""
    session.install("hatchling", "build", GGUF, "numpy")
    session.run("python", "tools/bench_kernels.py", "--quick")
    session.run("python", "tools/bench_e2e_riscv.py", "--quick")
    session.run("python", "tools/bench_peers.py", "--quick")


@nox.session(name="bench-peers")
def bench_peers(session: nox.Session) -> None:
    """llama.cpp side by side: its ggml CPU backend built for riscv64 with RVV from the
    llama-cpp-python sdist (downloaded and cached at bench time), decoding GGUF files of our
    bench-e2e-riscv shape and TinyLlama-1.1B's under QEMU 7.2 with the insncount plugin;
    then our decode step at the K1 model's shapes (bench_e2e_riscv.py --projection) and the
    K1 time model (tools/k1_model.py) over both.

    Writes build/bench/peers.json, e2e_riscv_projection.json, e2e_riscv_vlens.json (our
    decode step at VLEN 128 and 512) and k1_model.json (~45 min).
    ``nox -s bench-peers -- --quick``: a tiny shape at VLEN 256 and the model's arithmetic on
    it (a harness smoke check; *_quick.json, which bench-report does not read).
    """
    session.install(GGUF, "numpy", "hatchling", "build")
    quick = "--quick" in session.posargs
    session.run("python", "tools/bench_peers.py", *session.posargs)
    if not quick:
        session.run("python", "tools/bench_e2e_riscv.py", "--projection")
        # Our decode step at the other VLENs of the side by side (section 2's full run, when
        # there is one, serves the report as well).
        session.run(
            "python", "tools/bench_e2e_riscv.py", "--mode", "rvv", "--mode", "rvv-w8a8",
            "--vlen", "128", "--vlen", "512", "--out", "build/bench/e2e_riscv_vlens.json",
        )  # fmt: skip
        session.run("python", "tools/k1_model.py")


# Newest matplotlib at the time.
MATPLOTLIB = "matplotlib==3.11.2"


@nox.session(name="bench-report")
def bench_report(session: nox.Session) -> None:
    """PNG plots under docs/performance/ and docs/performance.md from build/bench/*.json."""
    session.install(MATPLOTLIB)
    session.run("python", "tools/bench_report.py", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint + format check) and mypy --strict on the Python packages and tools, then the
    tools' own tests (tools/tests: bench-report rendered from synthetic records)."""
    # transformers: rvv-attention's integration is type-checked against it; matplotlib:
    # bench_report's plots, which tools/tests render.
    session.install(
        TORCH, "numpy", "pytest", "ruff", "mypy", "nox", "hatchling", TRANSFORMERS, MATPLOTLIB, GGUF
    )
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run(
        "mypy",
        f"{KERNELS}/src/rvv_kernels",
        f"{OPS}/src/rvv_ops",
        f"{ATTENTION}/src/rvv_attention",
        f"{SGLANG_RVV}/src/sglang_rvv",
        "tools/rvvtools",
        "tools/kernels_tests.py",
        "tools/ops_riscv.py",
        "tools/sglang_riscv64.py",
        "tools/bench_kernels.py",
        "tools/bench_x86.py",
        "tools/bench_e2e_riscv.py",
        "tools/bench_report.py",
        "tools/bench_peers.py",
        "tools/k1_model.py",
        "tools/peers",
        "tools/sanitize.py",
        "tools/soak.py",
        "tools/model_coverage.py",
        "tools/tests",
        "noxfile.py",
    )
    session.run("pytest", "tools/tests", "-q")
