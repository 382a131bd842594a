"""SGLang on riscv64: the install pieces, and the proof under QEMU (``nox -s riscv-sglang``).

    python tools/sglang_riscv64.py sglang-wheel --out DIR    # SGLang 0.5.23 without x86 code
    python tools/sglang_riscv64.py wheels --out DIR          # + PyPI's riscv64/pure wheels
    python tools/sglang_riscv64.py run [--out dist] [--vlen 256] [--max-new-tokens 16]

``sglang-wheel`` works on any machine (a RISC-V board included: tools/install-riscv64.sh calls
it): PyPI has only x86-64/aarch64 wheels of SGLang 0.5.23, whose Python code is
architecture-independent; this downloads the x86-64 CPython 3.13 wheel and writes
``sglang-0.5.23-py3-none-any.whl`` without its five Rust extension modules (SGLang falls back
to Python where it needs one: the radix tree; the others serve options not used here).

``run`` is the emulated proof: it provisions the Debian 13 riscv64 root with SGLang's Debian
packages (tools/provision.sh sglang-root), cross-builds rvv-ops' riscv64 wheel, builds the
pure-Python wheels (rvv-kernels, rvv-attention, sglang-rvv, SGLang), downloads
packages/sglang-rvv/requirements/riscv64-pip.txt for riscv64 / CPython 3.13, installs all of
it into a venv of the root's Python (the same venv + pip steps tools/install-riscv64.sh takes
on a board), then runs tools/guest/sglang_engine.py under QEMU 10 (VLEN 256, Zvfh): SGLang's
offline Engine on the demo model with ``attention_backend="rvv"``, then ``torch_native``, then
``rvv`` with ``kv_cache_dtype="int8"``, greedy, 2 prompts, and teacher-forced corpus passages
for the ``rvv`` engines, then ``rvv`` in fp32 with ``tp_size=1`` and ``tp_size=2`` (tensor
parallelism: two scheduler processes). It checks that rvv and torch_native produce the same
tokens (at least ``--max-new-tokens`` each), that the INT8 KV cache agrees with the default one
(first tokens, teacher-forced top-1 and log-probabilities over >= 500 positions), that
``tp_size=2`` produces the tokens of ``tp_size=1`` with both ranks running the RVV attention
kernels, that the RVV attention kernels ran (INT8 ones for the INT8 engine; no fallback), and
writes ``build/riscv-sglang.json``.

``run --quant`` (after the engines above, or alone with ``--quant-only``): the W8A8 and AWQ
demo checkpoints (``python -m sglang_rvv.demo --quant``, built on the host) with ``rvv`` and
layer routing (W8A8 in bf16; AWQ in fp32 with ``SGLANG_RVV_INT4_ACT=none``, W4A16), each
against its dequantised fp32 twin on ``torch_native`` without routing: the same greedy tokens
for both prompts, and the quantised ops' calls counted (``quant`` in the report).

``run --moe`` (default; alone with ``--moe-only``): the tiny Qwen3-MoE demo model in fp32 with
``rvv`` and layer routing (its experts in ``fused_experts_cpu``, its expert choice in the
routing ops) against SGLang's own torch MoE code on ``torch_native`` without routing: the same
greedy tokens, and ``fused_experts_cpu`` ran (``twins`` in the report, with the quantised
runs).

``run --archs`` (default; alone with ``--archs-only``): two model-matrix architectures besides
Qwen2 (``packages/sglang-rvv/tests/model_matrix.py``, built on the host): Qwen3 (QK RMSNorm) and
Mistral (a 24-token sliding window on every layer), in fp32 with ``rvv`` and layer routing
against ``torch_native`` without routing: the same greedy tokens for a short prompt and one
that, with its new tokens, runs past the window.

Emulation only (a board needs none of it): the guest Python cannot exec riscv64 programs, so
the venv gets a ``.pth`` line pointing ``sys.executable`` at a host shell script that runs the
venv's python under the same QEMU (SGLang starts its scheduler and detokenizer as
"spawn" processes).
"""

from __future__ import annotations

import argparse
import ast
import base64
import csv
import hashlib
import io
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SGLANG_RVV = REPO / "packages" / "sglang-rvv"
REQUIREMENTS = SGLANG_RVV / "requirements"
SGLANG = "sglang==0.5.23"
GUEST_SCRIPT = REPO / "tools" / "guest" / "sglang_engine.py"
# pip (before 24) matches --platform tags literally: list every glibc a wheel may name
# (Debian 13 has glibc 2.41).
GLIBCS = range(41, 16, -1)
RISCV64_PLATFORMS = (*(f"manylinux_2_{v}_riscv64" for v in GLIBCS), "linux_riscv64")
X86_64_PLATFORMS = (*(f"manylinux_2_{v}_x86_64" for v in GLIBCS), "manylinux2014_x86_64")


def _log(msg: str) -> None:
    print(f"[riscv-sglang {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------- wheels
def sglang_wheel(out_dir: Path, spec: str = SGLANG) -> Path:
    """Downloads SGLang's x86-64 CPython 3.13 wheel and writes its pure-Python form to out_dir.

    Drops the compiled extension modules (``*.so``) from the files and from ``RECORD`` and
    retags the wheel ``py3-none-any`` (``Root-Is-Purelib: true``). Returns the new wheel.
    """
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    name, _, version = spec.partition("==")
    target = out_dir / f"{name}-{version}-py3-none-any.whl"
    if target.exists():
        return target
    platforms = [arg for p in X86_64_PLATFORMS for arg in ("--platform", p)]
    with tempfile.TemporaryDirectory(prefix="sglang-x86-wheel-") as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", *platforms, "--python-version", "3.13",
             "--implementation", "cp", "-d", tmp, spec],
            check=True,
        )  # fmt: skip
        (src,) = Path(tmp).glob("*.whl")
        dropped = _strip_wheel(src, target)
    _log(f"wrote {target.name} ({target.stat().st_size >> 20} MB), without {', '.join(dropped)}")
    return target


def _strip_wheel(src: Path, target: Path) -> list[str]:
    dropped: list[str] = []
    tmp = target.with_suffix(".tmp")
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if info.filename.endswith(".so"):
                dropped.append(info.filename)
                continue
            data = zin.read(info)
            if info.filename.endswith(".dist-info/WHEEL"):
                lines = [
                    ln
                    for ln in data.decode().splitlines()
                    if not ln.startswith(("Tag:", "Root-Is-Purelib:"))
                ]
                lines += ["Root-Is-Purelib: true", "Tag: py3-none-any"]
                data = ("\n".join(lines) + "\n").encode()
            elif info.filename.endswith(".dist-info/RECORD"):
                continue  # written last, from what was kept
            zout.writestr(info, data)
        record = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        rows = io.StringIO()
        writer = csv.writer(rows, lineterminator="\n")  # quotes the names with commas
        for info in zout.infolist():
            digest = hashlib.sha256(zout.read(info.filename)).digest()
            b64 = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
            writer.writerow([info.filename, f"sha256={b64}", info.file_size])
        writer.writerow([record, "", ""])
        zout.writestr(record, rows.getvalue())
    tmp.replace(target)
    return [Path(n).name for n in dropped]


def requirement_lines(path: Path) -> list[str]:
    """The requirement specifiers of a requirements file (comments and blanks dropped)."""
    lines = (ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines())
    return [ln for ln in lines if ln]


def download_riscv64_wheels(out_dir: Path) -> Path:
    """Downloads requirements/riscv64-pip.txt for riscv64 / CPython 3.13 into out_dir."""
    target = out_dir.resolve() / "riscv64-sglang-wheels"
    target.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in RISCV64_PLATFORMS for arg in ("--platform", p)]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
         "--only-binary=:all:", *platforms, "--python-version", "3.13",
         "--implementation", "cp", "-d", str(target),
         "-r", str(REQUIREMENTS / "riscv64-pip.txt")],
        check=True,
    )  # fmt: skip
    return target


# ----------------------------------------------------------------------------- emulation
def _guest_python_wrapper(path: Path, qemu: Sequence[str], python: Path) -> None:
    path.write_text(f'#!/bin/sh\nexec {shlex.join([*qemu, str(python)])} "$@"\n')
    path.chmod(0o755)


def install_venv(venv: Path, qemu: Sequence[str], wheels: Sequence[Path], finds: Path) -> Path:
    """Makes a venv of the root's Python with the given wheels (no index: ``finds``); returns
    the host wrapper script that runs its python under QEMU."""
    import rvvtools

    env = rvvtools.guest_env()
    python = rvvtools.make_guest_venv(venv, qemu, rvvtools.riscv_sglang_root())
    start = time.monotonic()
    reqs = requirement_lines(REQUIREMENTS / "riscv64-pip.txt")
    # --no-compile: byte-compiling SGLang and transformers under emulation takes many minutes;
    # the modules used are compiled on first import instead.
    subprocess.run(
        [*python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-cache-dir",
         "--no-compile", "--find-links", str(finds), *reqs, *map(str, wheels)],
        env=env, check=True,
    )  # fmt: skip
    _log(f"installed {len(reqs)} requirements + {len(wheels)} wheels in "
         f"{time.monotonic() - start:.0f} s")  # fmt: skip
    wrapper = venv.parent / "python-riscv64"
    _guest_python_wrapper(wrapper, qemu, venv / "bin" / "python3")
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "zz_emulated_executable.pth").write_text(
        "import os, sys; sys.executable = os.environ.get('RVV_GUEST_PYTHON', sys.executable)\n"
    )
    return wrapper


INT8_POSITIONS = 500
INT8_TOP1 = 0.98
INT8_LOGPROB_BOUND = 0.25
"""``--kv-cache-dtype int8`` vs the model's KV dtype, teacher-forced: at least this many
positions, this share of equal top-1 tokens, at most this log-probability difference (nats)
of a text token (the bounds packages/sglang-rvv/tests/test_e2e.py asserts on x86)."""


def int8_agreement(rvv: dict[str, Any], int8: dict[str, Any]) -> dict[str, Any]:
    """First tokens, completions and teacher-forced figures of ``rvv:int8`` against ``rvv``."""
    firsts = sum(
        a["output_ids"][:1] == b["output_ids"][:1] and bool(a["output_ids"])
        for a, b in zip(int8["results"], rvv["results"], strict=True)
    )
    same = sum(
        a["output_ids"] == b["output_ids"]
        for a, b in zip(int8["results"], rvv["results"], strict=True)
    )
    positions = top1 = 0
    worst = 0.0
    for a, b in zip(int8.get("scored") or [], rvv.get("scored") or [], strict=True):
        if a["ids"] != b["ids"]:
            raise ValueError("the two engines tokenised a passage differently")
        positions += len(a["ids"])
        top1 += sum(x == y for x, y in zip(a["top1"], b["top1"], strict=True))
        worst = max(
            [worst, *(abs(x - y) for x, y in zip(a["logprobs"], b["logprobs"], strict=True))]
        )
    return {
        "prompts": len(rvv["results"]),
        "first_tokens_equal": firsts,
        "completions_equal": same,
        "positions": positions,
        "top1_equal": top1,
        "max_logprob_diff": round(worst, 5),
    }


def check_int8(rvv: dict[str, Any], int8: dict[str, Any]) -> list[str]:
    """``rvv:int8`` agrees with ``rvv`` within the bounds above and ran the INT8 kernels."""
    problems = []
    a = int8_agreement(rvv, int8)
    if a["first_tokens_equal"] != a["prompts"]:
        problems.append(f"int8 KV: first tokens differ from the default KV's: {a}")
    if a["positions"] < INT8_POSITIONS:
        problems.append(f"int8 KV: {a['positions']} teacher-forced positions < {INT8_POSITIONS}")
    elif a["top1_equal"] / a["positions"] < INT8_TOP1:
        problems.append(f"int8 KV: teacher-forced top-1 agreement below {INT8_TOP1}: {a}")
    if a["max_logprob_diff"] > INT8_LOGPROB_BOUND:
        problems.append(f"int8 KV: log-probabilities differ by more than {INT8_LOGPROB_BOUND}: {a}")
    return problems + kernel_calls(int8["ops"], " int8_kv", "INT8", "int8 KV: ")


def kernel_calls(ops: dict[str, int], kind: str, label: str, prefix: str) -> list[str]:
    """What is wrong with an engine's attention op counts: no decode or extend call of
    ``kind`` ("" or " int8_kv") through the kernel, or any call through the fallback."""
    problems = []
    for op in ("extend", "decode"):
        if not ops.get(f"attention {op}{kind}:kernel"):
            problems.append(f"no {label} {op} attention kernel call recorded: {ops}")
        if ops.get(f"attention {op}:fallback"):
            problems.append(f"{prefix}{op} attention fell back to torch: {ops}")
    return problems


TP_SPECS = ("rvv@tp1", "rvv@tp2")
"""The guest's tensor-parallel engines: ``rvv`` in fp32 with tp_size 1 and 2."""


def tp_agreement(one: dict[str, Any], two: dict[str, Any]) -> dict[str, Any]:
    """``rvv@tp2`` against ``rvv@tp1``: equal completions, and the processes (ranks) of the
    tp2 engine that ran both RVV attention kernels."""
    same = sum(
        a["output_ids"] == b["output_ids"] and bool(a["output_ids"])
        for a, b in zip(one["results"], two["results"], strict=True)
    )
    ranks = [
        p
        for p in two.get("ops_per_process", [])
        if p.get("attention decode:kernel") and p.get("attention extend:kernel")
    ]
    return {
        "prompts": len(one["results"]),
        "completions_equal": same,
        "ranks_ran_kernels": len(ranks),
    }


def check_tp(one: dict[str, Any], two: dict[str, Any]) -> list[str]:
    """tp2 gives tp1's tokens, and both of its ranks ran the RVV attention kernels."""
    a = tp_agreement(one, two)
    problems = []
    if a["completions_equal"] != a["prompts"]:
        problems.append(f"tp2: completions differ from tp1's: {a}")
    if a["ranks_ran_kernels"] != 2:
        problems.append(f"tp2: expected 2 ranks with RVV attention kernel calls: {a}, "
                        f"per process {two.get('ops_per_process')}")  # fmt: skip
    return problems + kernel_calls(two["ops"], "", "RVV", "tp2: ")


def check(report: dict[str, Any], new_tokens: int) -> list[str]:
    """What is wrong with the guest's report (empty: the proof holds)."""
    problems: list[str] = []
    engines = {e["backend"]: e for e in report["engines"]}
    rvv, ref = engines.get("rvv"), engines.get("torch_native")
    if rvv is None or ref is None:
        return [f"expected engines rvv and torch_native, got {sorted(engines)}"]
    if "rvv:int8" in engines:
        problems += check_int8(rvv, engines["rvv:int8"])
    if all(spec in engines for spec in TP_SPECS):
        problems += check_tp(*(engines[spec] for spec in TP_SPECS))
    for r, t in zip(rvv["results"], ref["results"], strict=True):
        if len(r["output_ids"]) < new_tokens:
            problems.append(f"rvv produced {len(r['output_ids'])} tokens for {r['prompt']!r}")
        if r["output_ids"] != t["output_ids"]:
            problems.append(
                f"{r['prompt']!r}: rvv {r['output_ids']} != torch_native {t['output_ids']}"
            )
    return problems + kernel_calls(rvv["ops"], "", "RVV", "")


# A twin run: a model served with rvv + layer routing in the guest against a twin on
# torch_native without routing, the same greedy tokens required.
# (label, model, twin, dtype of the rvv engine, extra environment, ops of which one must run,
# prompts: empty for the guest script's defaults)
TwinRun = tuple[str, Path, Path, str, dict[str, str], tuple[str, ...], tuple[str, ...]]

ARCH_PROMPTS = (
    "The vector unit",
    "The server answers each request with the next words of the text. Each request has a "
    "prompt. A prompt is a list of tokens, and the answer is more tokens, one at a time.",
)
"""The matrix architectures' prompts: a short one and one of about 40 tokens, past the
sliding window (24 tokens) of the matrix's Mistral with the 16 new tokens."""


def quant_runs() -> list[TwinRun]:
    """The W8A8 checkpoint in bf16 and AWQ as W4A16 in fp32, against their dequantised
    fp32 twins."""
    return [
        ("w8a8", _demo_model("qwen2", "w8a8"), _demo_model("qwen2", "w8a8", twin=True),
         "bfloat16", {}, ("int8_scaled_mm_with_quant",), ()),
        ("awq", _demo_model("qwen2", "awq"), _demo_model("qwen2", "awq", twin=True),
         "float32", {"SGLANG_RVV_INT4_ACT": "none"}, ("int4_w4a16_mm_cpu",), ()),
    ]  # fmt: skip


def moe_runs() -> list[TwinRun]:
    """The tiny Qwen3-MoE demo model in fp32: its experts in fused_experts_cpu and its
    routing in a routing op with rvv, SGLang's torch MoE code on torch_native."""
    model = _demo_model("qwen3-moe")
    return [("qwen3-moe", model, model, "float32", {}, ("fused_experts_cpu",), ())]


ARCHS = ("qwen3", "mistral")
"""Matrix architectures (packages/sglang-rvv/tests/model_matrix.py) run in the guest besides
the Qwen2 demo model: Qwen3 (QK RMSNorm) and Mistral (a sliding window on every layer)."""


def arch_runs() -> list[TwinRun]:
    """The :data:`ARCHS` checkpoints in fp32 with rvv and layer routing against
    torch_native."""
    runs: list[TwinRun] = []
    for name in ARCHS:
        model = _matrix_model(name)
        runs.append((name, model, model, "float32", {}, ("rmsnorm_cpu",), ARCH_PROMPTS))
    return runs


def run_twins(
    runs: Sequence[TwinRun],
    wrapper: Path,
    env: dict[str, str],
    new_tokens: int,
    timeout: float,
    tmp: Path,
) -> tuple[dict[str, Any], list[str]]:
    """The twin runs in the guest; returns the report part and the problems found."""
    report: dict[str, Any] = {}
    problems: list[str] = []
    for label, model, twin_model, dtype, extra, ops, prompts in runs:
        results = {}
        for which, path, backend, engine_env, engine_dtype in (
            ("rvv", model, "rvv", {"SGLANG_RVV_LAYERS": "1", **extra}, dtype),
            ("twin", twin_model, "torch_native", {"SGLANG_RVV_LAYERS": "0"}, "float32"),
        ):  # fmt: skip
            out = tmp / f"twin-{label}-{which}.json"
            cmd = [str(wrapper), str(GUEST_SCRIPT), "--model", str(path), "--backend", backend,
                   "--dtype", engine_dtype, "--max-new-tokens", str(new_tokens),
                   "--out", str(out), *(a for p in prompts for a in ("--prompt", p))]  # fmt: skip
            _log(f"+ {shlex.join(cmd)}")
            code = subprocess.run(
                cmd, env={**env, **engine_env}, timeout=timeout, check=False
            ).returncode
            if code != 0:
                problems.append(f"{label} {which}: the guest exited with {code}")
                break
            results[which] = json.loads(out.read_text())["engines"][0]
        if len(results) < 2:
            continue
        ours, twin = results["rvv"], results["twin"]
        same = [r["output_ids"] == t["output_ids"]
                for r, t in zip(ours["results"], twin["results"], strict=True)]  # fmt: skip
        report[label] = {
            "dtype": dtype,
            "tokens_equal": same,
            "rvv": [r["output_ids"] for r in ours["results"]],
            "twin": [t["output_ids"] for t in twin["results"]],
            "ops": ours["ops"],
        }
        _log(f"{label} ({dtype}) rvv vs twin: tokens equal {same}; ops {ours['ops']}")
        if not all(same):
            problems.append(f"{label}: rvv tokens differ from the twin's: {report[label]}")
        for op in ops:
            if not ours["ops"].get(op):
                problems.append(f"{label}: {op} did not run: {ours['ops']}")
        if any(len(r["output_ids"]) < new_tokens for r in ours["results"]):
            problems.append(f"{label}: fewer than {new_tokens} tokens")
    return report, problems


def run(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(REPO / "tools"))
    import ops_riscv
    import rvvtools

    t0 = time.monotonic()
    rvvtools.provision(["toolchain", "sglang-root"])
    out: Path = args.out.resolve()
    wheels = [
        ops_riscv.build_wheel(out),
        ops_riscv.build_kernels_wheel(out),
        ops_riscv.build_attention_wheel(out),
        ops_riscv.pip_wheel(SGLANG_RVV, out, dict(os.environ), "sglang_rvv-*.whl"),
        sglang_wheel(out),
    ]
    finds = download_riscv64_wheels(out)
    _log(f"wheels ready ({time.monotonic() - t0:.0f} s): {', '.join(w.name for w in wheels)}")
    demo = _demo_model()
    root = rvvtools.riscv_sglang_root()
    qemu = rvvtools.qemu_cmd(args.vlen, True, sysroot=root)
    report_path = REPO / "build" / "riscv-sglang.json"
    report_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="riscv-sglang-") as tmp:
        wrapper = install_venv(Path(tmp) / "venv", qemu, wheels, finds)
        env = {
            **rvvtools.guest_env(),
            "RVV_GUEST_PYTHON": str(wrapper),
            "TORCHINDUCTOR_COMPILE_THREADS": "1",
            "SGLANG_RVV_EXPECT_VLEN": str(args.vlen),
        }
        if args.quant_only or args.moe_only or args.archs_only:
            runs = (
                (quant_runs() if args.quant_only else [])
                + (moe_runs() if args.moe_only else [])
                + (arch_runs() if args.archs_only else [])
            )
            only, only_problems = run_twins(
                runs, wrapper, env, args.max_new_tokens, args.timeout, Path(tmp)
            )
            report_path.write_text(json.dumps({"twins": only, "vlen": args.vlen}, indent=1))
            for p in only_problems:
                _log(f"FAILED: {p}")
            verdict = "FAILED" if only_problems else "passed"
            _log(f"{verdict} in {time.monotonic() - t0:.0f} s; {report_path}")
            return 1 if only_problems else 0
        specs = [] if args.tp_only else ["rvv", "torch_native", "rvv:int8"]
        specs += list(TP_SPECS) if args.tp or args.tp_only else []
        cmd = [str(wrapper), str(GUEST_SCRIPT), "--model", str(demo),
               *(arg for spec in specs for arg in ("--backend", spec)),
               *([] if args.tp_only else ["--score"]),
               "--max-new-tokens", str(args.max_new_tokens), "--out", str(report_path)]  # fmt: skip
        _log(f"+ {shlex.join(cmd)}")
        code = subprocess.run(cmd, env=env, timeout=args.timeout, check=False).returncode
        if code != 0:
            _log(f"FAILED: the guest exited with {code}")
            return 1
        serve = args.server and not args.tp_only
        server = _server_completion(wrapper, demo, env, args.timeout) if serve else None
        quant_problems: list[str] = []
        quant: dict[str, Any] | None = None
        twins = (
            []
            if args.tp_only
            else (quant_runs() if args.quant else [])
            + (moe_runs() if args.moe else [])
            + (arch_runs() if args.archs else [])
        )
        if twins:
            quant, quant_problems = run_twins(
                twins, wrapper, env, args.max_new_tokens, args.timeout, Path(tmp)
            )
    report = json.loads(report_path.read_text())
    if server is not None:
        report["server"] = server
    if quant is not None:
        report["twins"] = quant
    report["vlen"] = args.vlen
    report["host_wall_s"] = round(time.monotonic() - t0, 1)
    report_path.write_text(json.dumps(report, indent=1))
    for e in report["engines"]:
        _log(f"{e['backend']}: start-up {e['startup_s']} s, generation {e['generate_s']} s, "
             f"ops {e['ops']}")  # fmt: skip
        for r in e["results"]:
            _log(f"  {r['prompt']!r} -> {r['text']!r} {r['output_ids']}")
    engines = {e["backend"]: e for e in report["engines"]}
    if "rvv" in engines and "rvv:int8" in engines:
        report["int8_kv"] = int8_agreement(engines["rvv"], engines["rvv:int8"])
        report_path.write_text(json.dumps(report, indent=1))
        _log(f"int8 KV vs default KV: {report['int8_kv']}")
    if all(spec in engines for spec in TP_SPECS):
        report["tp"] = tp_agreement(*(engines[spec] for spec in TP_SPECS))
        report_path.write_text(json.dumps(report, indent=1))
        _log(f"tp_size=2 vs tp_size=1 (fp32): {report['tp']}")
    _log(f"sglang-rvv compat rows active in the guest: {json.dumps(report['compat'])}")
    if args.tp_only:
        problems = check_tp(*(engines[spec] for spec in TP_SPECS))
    else:
        problems = check(report, args.max_new_tokens)
    if server is not None:
        _log(f"launch_server: {server}")
        problems += check_server(report)
    problems += quant_problems
    for p in problems:
        _log(f"FAILED: {p}")
    _log(f"{'FAILED' if problems else 'passed'} in {time.monotonic() - t0:.0f} s; {report_path}")
    return 1 if problems else 0


def _server_completion(
    wrapper: Path, model: Path, env: dict[str, str], timeout: float
) -> dict[str, object]:
    """``python -m sglang_rvv.serve --exit-when-ready`` in the guest: SGLang's launch_server
    with --attention-backend rvv, /health, one completion of "The vector unit" (16 tokens,
    temperature 0) over HTTP, stop."""
    cmd = [str(wrapper), "-m", "sglang_rvv.serve", "--model-path", str(model),
           "--exit-when-ready", "--port", "30111", "--ready-timeout", str(timeout)]  # fmt: skip
    _log(f"+ {shlex.join(cmd)}")
    start = time.monotonic()
    res = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout + 300, check=False
    )
    lines = (res.stdout + res.stderr).splitlines()
    found = [ln for ln in lines if ln.startswith("[serve] completion: ")]
    completion = ast.literal_eval(found[-1].removeprefix("[serve] completion: ")) if found else None
    if completion is None:
        print("\n".join(ln for ln in lines[-60:] if "server_args=" not in ln), flush=True)
    return {
        "prompt": "The vector unit",
        "completion": completion,
        "exit_code": res.returncode,
        "wall_s": round(time.monotonic() - start, 1),
    }


def check_server(report: dict[str, Any]) -> list[str]:
    """The HTTP completion exists and continues the prompt as the rvv Engine did (a prefix
    of it: the server stops at an end-of-sequence token, the Engine ran with ignore_eos)."""
    server = report["server"]
    completion = server["completion"]
    if server["exit_code"] != 0 or not completion:
        return [f"launch_server run failed: {server}"]
    engine = report["engines"][0]["results"]
    expected = next(r["text"] for r in engine if r["prompt"] == server["prompt"])
    if not expected.startswith(completion):
        return [f"HTTP completion {completion!r} is not a prefix of the Engine's {expected!r}"]
    return []


def _demo_model(arch: str = "qwen2", quant: str = "", twin: bool = False) -> Path:
    """A demo model (or, with ``quant``, its quantised checkpoint or that one's dequantised
    twin), built on the host (transformers is needed only to build it)."""
    call = (
        f"demo.ensure_quantized({arch!r}, {quant!r}, dequantized={twin})"
        if quant
        else f"demo.ensure({arch!r})"
    )
    code = f"from sglang_rvv import demo; print({call})"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"building the demo model failed:\n{res.stderr[-2000:]}")
    return Path(res.stdout.strip().splitlines()[-1])


def _matrix_model(name: str) -> Path:
    """A model-matrix checkpoint, built on the host like the demo models."""
    tests = REPO / "packages" / "sglang-rvv" / "tests"
    code = (
        f"import sys; sys.path.insert(0, {str(tests)!r}); import model_matrix; "
        f"print(model_matrix.ensure({name!r}))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"building the {name} matrix model failed:\n{res.stderr[-2000:]}")
    return Path(res.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("sglang-wheel", help="SGLang's pure-Python wheel into --out")
    w.add_argument("--out", type=Path, default=REPO / "dist")
    d = sub.add_parser("wheels", help="sglang-wheel + riscv64-pip.txt's wheels into --out")
    d.add_argument("--out", type=Path, default=REPO / "dist")
    r = sub.add_parser("run", help="the Engine proof under QEMU")
    r.add_argument("--out", type=Path, default=REPO / "dist", help="wheel directory (dist/)")
    r.add_argument("--vlen", type=int, default=256)
    r.add_argument("--max-new-tokens", type=int, default=16)
    r.add_argument("--timeout", type=float, default=3600, help="seconds for the guest run")
    r.add_argument(
        "--no-server",
        dest="server",
        action="store_false",
        help="skip the launch_server + HTTP completion after the Engine runs",
    )
    r.add_argument(
        "--no-tp",
        dest="tp",
        action="store_false",
        help="skip the tp_size=1 / tp_size=2 engines (tensor parallelism)",
    )
    r.add_argument(
        "--tp-only",
        action="store_true",
        help="only the tp_size=1 / tp_size=2 engines and their check (no server)",
    )
    r.add_argument(
        "--no-quant",
        dest="quant",
        action="store_false",
        help="skip the quantised checkpoints (W8A8, AWQ) against their dequantised twins",
    )
    r.add_argument(
        "--quant-only",
        action="store_true",
        help="only the quantised checkpoints against their twins (no other engine, no server)",
    )
    r.add_argument(
        "--no-moe",
        dest="moe",
        action="store_false",
        help="skip the MoE demo model (Qwen3-MoE) against torch_native",
    )
    r.add_argument(
        "--moe-only",
        action="store_true",
        help="only the MoE demo model against torch_native (no other engine, no server)",
    )
    r.add_argument(
        "--no-archs",
        dest="archs",
        action="store_false",
        help=f"skip the matrix architectures ({', '.join(ARCHS)}) against torch_native",
    )
    r.add_argument(
        "--archs-only",
        action="store_true",
        help="only the matrix architectures against torch_native (no other engine, no server)",
    )
    a = p.parse_args(argv)
    if a.command == "sglang-wheel":
        print(sglang_wheel(a.out))
        return 0
    if a.command == "wheels":
        print(sglang_wheel(a.out))
        print(download_riscv64_wheels(a.out))
        return 0
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
