"""llama.cpp on emulated RISC-V beside our decoder: instructions and estimated cycles per token.

    python tools/bench_peers.py [--quick] [--projection] [--vlen N ...] [--type T ...]
                                [--set main|matvec|projection ...] [--out FILE]

What runs. The peers driver (tools/peers/driver.cpp: llama.cpp's CPU backend from the
``llama-cpp-python`` 0.3.36 sdist, one thread, built by :func:`peers.build.build`) on GGUF
files written by :mod:`peers.gguf_models` (real layer dimensions, chosen layer count and
vocabulary, random weights from seed 0), under QEMU 7.2 with the project's insncount plugin
(``rvvtools.qemu_cmd(vlen, zvfh=True, qemu="7", plugin_out=...)``), at most two QEMU
processes at once. QEMU cannot run SpacemiT's IME matrix extension (the vendor instructions
llama.cpp uses on the K1 for its fastest Q4_0 figures), so these are plain-RVV llama.cpp
figures (RVV 1.0 + Zvfh). ggml's RVV BF16 dot product needs Zvfbfwma, which neither the
build's ``-march`` nor QEMU 7.2 has: BF16 runs ggml's scalar code, so it is not in the
default types (``--type bf16`` runs it anyway; its records say so in ``note``).

Sets (``--set``, default all; ``--projection`` = ``--set projection``):

* ``main``: decode of the shape tools/bench_e2e_riscv.py runs - Qwen2.5-1.5B layers, 2 layers,
  vocabulary 4096, 512 cached tokens - in F16, Q8_0 and Q4_0 (``--type``) at VLEN 128, 256,
  512 (``--vlen``);
* ``matvec``: ggml's matrix-vector product alone (``driver matvec``), K = 1536 -> N = 8960,
  M = 1, in F16, Q8_0, Q4_0, IQ4_NL and Q3_K at the same VLENs, against bench-kernels'
  ``linear_*`` / ``w8a8_*`` cases;
* ``projection``: the inputs of tools/k1_model.py at VLEN 256 (the first ``--vlen``), so a
  token's count splits into per-layer, per-vocabulary-row and fixed parts: Qwen2.5-1.5B
  decode from 512 cached tokens at PROJECTION_SHAPES (1 and 2 layers with vocabulary 4096,
  1 layer with 16384) and at its real vocabulary (1 layer, 151,936) in F16, Q8_0, Q4_0;
  TinyLlama-1.1B - the model of the published BPI-F3 figures the K1 model is checked
  against - decode from TINYLLAMA_CONTEXT cached tokens at the same shapes and its real
  vocabulary (1 layer, 32,000) in IQ4_NL and Q3_K, and prompt processing at 1 and 2 layers
  (PREFILLS: F16 of 128 tokens, IQ4_NL of 32, the published prompt lengths).

Repacking. The driver loads models with llama.cpp's defaults, so ggml-cpu repacks weights
into its interleaved layouts where it has one for the type and the machine: in this
llama.cpp, RVV layouts (16 rows x 1) exist for Q4_0, Q8_0 and IQ4_NL (and Q4_K, Q2_K) at
VLEN 256 only (with Zvfh). Decode at VLEN 256 in those types runs the repacked GEMV; at VLEN
128 and 512, and in F16, Q3_K and the Q6_K head, ggml's vec-dot kernels. Records say which
(``repack``). The matvec mode puts its weights in the buffer type llama.cpp's loader would
choose (``weight_buffer``: ``CPU_REPACK`` where repacked, else ``CPU``).

Prompts. A decode run needs its prompt's KV cache. Emulating the prefill would cost more
than the decode itself, so the native driver (same source, x86-64) fills the cache once per
model and saves llama.cpp's state file (``--state``); the emulated run loads it, then marks
the plugin's counts after every decoded token. The greedy tokens of the two builds are
compared (``tokens_agree_with_native``): a check that the riscv64 build computes the same
model (near-ties can flip a token, and every later token follows the flipped one).

Counting, as tools/bench_e2e_riscv.py: per decoded token, the counts between the marks after
tokens ``lo`` and ``hi`` (2 and 6; ``--quick``: 1 and 3) divided by ``hi - lo`` (load, state,
first token left out); prefill: between the marks around the one ``llama_decode`` of the
prompt, divided by its tokens; matvec: between the mark after the warm-up product and the one
after MATVEC_REPS more, divided by MATVEC_REPS. Estimated cycles: the same DLEN-128 model
(``rvvtools.est_cycles``). ``--quick`` (a harness smoke check: a small Qwen2-shaped model at
VLEN 256, Q4_0 and F16 decode, a Q4_0 prefill of 16 tokens and a Q4_0 matvec) runs everything
twice and requires positive per-token counts that agree within rvvtools.DETERMINISM and every token
decoded; every run must retire vector instructions.

Writes ``build/bench/peers.json`` (``--quick``: ``peers_quick.json``; ``--projection``:
``peers_projection.json``), rewritten after every finished case, a list of records::

    {"peer": "llama.cpp", "kind": "decode" | "prefill" | "matvec", "arch", "qtype", "vlen",
     "layers", "vocab", "context", "insns_per_token", "est_cycles_per_token",
     "counts": {plugin key: per token}, "weight_bytes_per_token", "output_type",
     "flash_attn", "model",
     "tokens", "tokens_agree_with_native", "decoded": [lo, hi], "prompt_tokens",
     "set", "projection", "quick", "runs_agreeing", "source", "build_flags",
     "repack", "note", "run_wall_s", "git", "date_utc"}

``build_flags``: :func:`peers.build.build_info` of the riscv64 build (compile flags,
``-march``, cache key). ``model`` is :func:`peers.gguf_models.write`'s description (types per
tensor role, bytes per layer, LM head and embedding row); ``weight_bytes_per_token`` is the
weight bytes a decoded token reads. Prefill records count per prompt token (``prompt_tokens``;
``context`` is the prompt length). Matvec records have ``insns_per_call``,
``est_cycles_per_call``, ``counts`` per call, ``k``, ``n``, ``m``, ``weight_bytes_per_call``,
``weight_buffer``, and null ``arch``, ``layers``, ``vocab``, ``context``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rvvtools
from peers import build as peers_build
from peers import gguf_models

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "build" / "bench-peers"
SEED = 0
VLENS = (256, 128, 512)
MAIN_TYPES = ("f16", "q8_0", "q4_0")
MATVEC_TYPES = ("f16", "q8_0", "q4_0", "iq4_nl", "q3_k")
MATVEC_REPS = 3
# --projection: (layers, vocab) pairs, as tools/bench_e2e_riscv.py --projection runs ours.
PROJECTION_SHAPES = ((1, 4096), (2, 4096), (1, 16384))
PROJECTION_QWEN_TYPES = ("f16", "q8_0", "q4_0")
PROJECTION_TINYLLAMA_TYPES = ("iq4_nl", "q3_k")
# The published TinyLlama decode figures generate after a 32-token prompt (llama.cpp PR 18859).
TINYLLAMA_CONTEXT = 32
# TinyLlama prompt processing: (type, prompt tokens) of the published figures.
PREFILLS = (("f16", 128), ("iq4_nl", 32))
PREFILL_LAYERS = (1, 2)
PREFILL_VOCAB = 4096  # the LM head runs for the last prompt token only
# Types ggml-cpu repacks for RVV (repack.cpp: 16x1 layouts, VLEN 256 with Zvfh only).
REPACKED_TYPES = ("q4_0", "q8_0", "iq4_nl")
REPACK_VLENS = (256,)
# --quick: a narrow Qwen2-shaped model (rows of 256 values fit every block size).
QUICK_ARCH = dataclasses.replace(
    gguf_models.ARCHS["qwen2-1.5b"], name="qwen2-quick", hidden=256, heads=2, kv_heads=1,
    head_dim=128, ffn=512,
)  # fmt: skip
BF16_NOTE = (
    "ggml's RVV bf16 dot product needs Zvfbfwma (not in this build's -march, not in QEMU "
    "7.2): these are ggml's scalar bf16 paths"
)

# peers.build.build_info's keys that are not about how llama.cpp was compiled.
DROP_BUILD_KEYS = ("seconds", "source", "target")

_print_lock = threading.Lock()


def say(msg: str) -> None:
    with _print_lock:
        print(msg, flush=True)


@dataclass(frozen=True)
class Case:
    """One measurement: `kind` decode (of `tokens` after `context` cached tokens), prefill
    (of `prompt` tokens) or matvec (K x N weights of `qtype` times K x M activations)."""

    kind: str
    qtype: str
    arch: str = ""
    layers: int = 0
    vocab: int = 0
    context: int = 0
    prompt: int = 0
    k: int = 0
    n: int = 0
    m: int = 0
    set: str = "main"

    def model_name(self) -> str:
        return f"{self.arch}-{self.qtype}-L{self.layers}-V{self.vocab}-s{SEED}.gguf"

    def __str__(self) -> str:
        if self.kind == "matvec":
            return f"matvec {self.qtype} {self.k}x{self.n}x{self.m}"
        size = f"{self.arch} {self.qtype} L{self.layers} V{self.vocab}"
        if self.kind == "prefill":
            return f"prefill {size} P{self.prompt}"
        return f"decode {size} C{self.context}"


@dataclass(frozen=True)
class Run:
    """One QEMU process: `case` at `vlen` (`rep`: the how-manieth identical run)."""

    case: Case
    vlen: int
    rep: int = 0

    def __str__(self) -> str:
        return f"{self.case} VLEN {self.vlen}" + (f" (repeat {self.rep})" if self.rep else "")


# The main set's decode (qtype filled in per type) and matvec shapes.
MAIN = Case("decode", "", "qwen2-1.5b", layers=2, vocab=4096, context=512)
MATVEC = Case("matvec", "", k=1536, n=8960, m=1, set="matvec")
QUICK = Case("decode", "", "qwen2-quick", layers=1, vocab=512, context=64, set="quick")
QUICK_TYPES = ("q4_0", "f16")
QUICK_MATVEC = Case("matvec", "q4_0", k=256, n=512, m=1, set="quick")
QUICK_PREFILL = Case("prefill", "q4_0", "qwen2-quick", 1, 512, 16, prompt=16, set="quick")


def arch_of(name: str) -> gguf_models.Arch:
    return QUICK_ARCH if name == QUICK_ARCH.name else gguf_models.ARCHS[name]


def driver_args(case: Case, tokens: int, model_dir: Path) -> list[str]:
    """The driver's command line (after the binary) for `case`."""
    seed = ["--seed", str(SEED)]
    if case.kind == "matvec":
        return ["matvec", "--type", case.qtype, "--k", str(case.k), "--n", str(case.n),
                "--m", str(case.m), "--reps", str(MATVEC_REPS), *seed]  # fmt: skip
    model = str(model_dir / case.model_name())
    if case.kind == "prefill":
        return ["prefill", model, "--tokens", str(case.prompt), "--batch", str(case.prompt), *seed]
    state = str(model_dir / f"{case.model_name()}.C{case.context}.N{tokens}.state")
    return ["decode", model, "--context", str(case.context), "--tokens", str(tokens),
            "--state", state, *seed]  # fmt: skip


def run_driver(cmd: list[str], timeout: float, what: str) -> tuple[dict[str, Any], float]:
    """Runs `cmd`, returns (its stdout's JSON object, wall seconds). Raises RuntimeError with
    its stderr's tail when it fails or outlives `timeout`."""
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{what}: killed after the {timeout:.0f} s timeout") from e
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.splitlines()[-15:])
        raise RuntimeError(f"{what}: exit status {proc.returncode}: {shlex.join(cmd)}\n{tail}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"{what}: no JSON object on stdout: {proc.stdout[-500:]!r}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result, seconds


def expected_marks(case: Case, hi: int) -> int:
    """The last mark label a run of `case` takes (its first is 0)."""
    return {"decode": hi, "prefill": 1, "matvec": MATVEC_REPS}[case.kind]


def per_unit(case: Case, marks: dict[int, dict[str, int]], lo: int, hi: int) -> dict[str, float]:
    """Counts per decoded token (decode), per prompt token (prefill) or per call (matvec)."""
    if case.kind == "decode":
        a, b, n = marks[hi], marks[lo], hi - lo
    elif case.kind == "prefill":
        a, b, n = marks[1], marks[0], case.prompt
    else:
        a, b, n = marks[MATVEC_REPS], marks[0], MATVEC_REPS
    return rvvtools.counts_between(a, b, n)


def plan(args: argparse.Namespace, vlens: list[int]) -> list[Case]:
    """The cases the command line asks for."""
    if args.quick:
        cases = [dataclasses.replace(QUICK, qtype=t) for t in (args.type or QUICK_TYPES)]
        return [*cases, QUICK_PREFILL, QUICK_MATVEC]
    sets = ["projection"] if args.projection else (args.set or ["main", "matvec", "projection"])
    cases = []
    if "main" in sets:
        cases += [dataclasses.replace(MAIN, qtype=t) for t in (args.type or MAIN_TYPES)]
    if "matvec" in sets:
        cases += [dataclasses.replace(MATVEC, qtype=t) for t in (args.type or MATVEC_TYPES)]
    if "projection" in sets:
        qwen = (*PROJECTION_SHAPES, (1, gguf_models.ARCHS["qwen2-1.5b"].vocab))
        tiny = (*PROJECTION_SHAPES, (1, gguf_models.ARCHS["tinyllama-1.1b"].vocab))
        cases += [
            Case("decode", t, "qwen2-1.5b", layers, vocab, MAIN.context, set="projection")
            for layers, vocab in qwen
            for t in PROJECTION_QWEN_TYPES
        ]
        cases += [
            Case("decode", t, "tinyllama-1.1b", layers, vocab, TINYLLAMA_CONTEXT, set="projection")
            for layers, vocab in tiny
            for t in PROJECTION_TINYLLAMA_TYPES
        ]
        cases += [
            Case("prefill", t, "tinyllama-1.1b", layers, PREFILL_VOCAB, prompt, prompt=prompt,
                 set="projection")
            for t, prompt in PREFILLS
            for layers in PREFILL_LAYERS
        ]  # fmt: skip
    # A projection case the main set runs already (same shape and type) is measured once.
    unique: dict[tuple[Any, ...], Case] = {}
    for c in cases:
        unique.setdefault(dataclasses.astuple(dataclasses.replace(c, set="")), c)
    return list(unique.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="harness smoke check (CI)")
    parser.add_argument(
        "--projection", action="store_true", help="only the K1 model's inputs (--set projection)"
    )
    parser.add_argument(
        "--set", action="append", choices=("main", "matvec", "projection"),
        help="which cases (default: all three)",
    )  # fmt: skip
    parser.add_argument("--vlen", type=int, action="append", help="VLENs (default 256 128 512)")
    parser.add_argument(
        "--type", action="append", choices=sorted(gguf_models.QTYPES),
        help="types of the main and matvec sets (default: f16 q8_0 q4_0; matvec adds iq4_nl q3_k)",
    )  # fmt: skip
    parser.add_argument("--tokens", type=int, nargs=2, metavar=("LO", "HI"), help="run lengths")
    parser.add_argument("--jobs", type=int, default=2, help="QEMU processes at once (<= 2)")
    parser.add_argument("--timeout", type=float, help="seconds per emulated run")
    parser.add_argument("--out", type=Path, help="JSON output")
    args = parser.parse_args(argv)
    if args.quick and (args.projection or args.set):
        parser.error("--quick runs its own cases; it excludes --projection and --set")
    for v in args.vlen or []:
        if v not in rvvtools.VLENS:
            parser.error(f"--vlen {v}: expected one of {rvvtools.VLENS}")
    vlens: list[int] = args.vlen or ([256] if args.quick or args.projection else list(VLENS))
    lo, hi = args.tokens or ((1, 3) if args.quick else (2, 6))
    if not 0 <= lo < hi:
        parser.error("--tokens LO HI needs 0 <= LO < HI")
    timeout = args.timeout or (600.0 if args.quick else 3600.0)
    jobs = max(1, min(args.jobs, 2))
    name = "peers_quick" if args.quick else "peers_projection" if args.projection else "peers"
    out: Path = args.out or REPO / "build" / "bench" / f"{name}.json"
    reps = 2 if args.quick else 1
    t_start = time.monotonic()
    run_facts = rvvtools.run_stamp()

    cases = plan(args, vlens)
    runs = [
        Run(c, v, r)
        for c in cases
        for v in (vlens if c.set != "projection" else vlens[:1])
        for r in range(reps)
    ]
    say("[host] provisioning (QEMU 7.2 + insncount plugin, clang-19 for llama.cpp)")
    rvvtools.provision(["qemu7", "plugin", "peers"])
    say("[host] building the peers driver (riscv64 and native; cached)")
    riscv_driver = peers_build.build("riscv64")
    native_driver = peers_build.build("native")
    build = peers_build.build_info("riscv64")

    model_dir = WORK / "models"
    model_dir.mkdir(parents=True, exist_ok=True)
    models: dict[str, dict[str, Any]] = {}
    native_tokens: dict[Case, list[int]] = {}
    for case in cases:
        if case.kind == "matvec":
            continue
        path = model_dir / case.model_name()
        if case.model_name() not in models:
            t0 = time.monotonic()
            models[case.model_name()] = gguf_models.write(
                path, arch_of(case.arch), case.qtype, layers=case.layers, vocab=case.vocab,
                seed=SEED,
            )  # fmt: skip
            say(f"[host] wrote {path.name} ({path.stat().st_size / 2**20:.0f} MiB, "
                f"{time.monotonic() - t0:.1f} s)")  # fmt: skip
        if case.kind == "decode":
            # The native run saves the prompt's state for the emulated runs; a state file
            # from an earlier bench run is stale (the model was rewritten).
            argv_ = driver_args(case, hi, model_dir)
            state = Path(argv_[argv_.index("--state") + 1])
            state.unlink(missing_ok=True)
            result, seconds = run_driver([str(native_driver), *argv_], timeout, f"native {case}")
            if result.get("state") != "saved" or len(result["tokens"]) != hi:
                raise RuntimeError(f"native {case}: expected a saved state and {hi} tokens, "
                                   f"got {result}")  # fmt: skip
            native_tokens[case] = result["tokens"]
            say(f"[host] native {case}: prompt state saved ({seconds:.1f} s)")

    work = WORK / "counts"
    work.mkdir(parents=True, exist_ok=True)

    def run_one(run: Run) -> tuple[dict[int, dict[str, int]], dict[str, Any], float]:
        tag = f"{run.case}-{run.vlen}-{run.rep}".replace(" ", "_")
        counts_file = work / f"{tag}.count"
        counts_file.unlink(missing_ok=True)
        cmd = [
            *rvvtools.qemu_cmd(run.vlen, zvfh=True, qemu="7", plugin_out=counts_file),
            str(riscv_driver), *driver_args(run.case, hi, model_dir),
        ]  # fmt: skip
        say(f"[{run}] start")
        result, seconds = run_driver(cmd, timeout, str(run))
        marks = rvvtools.read_marks(counts_file, expected_marks(run.case, hi), str(run))
        if run.case.kind == "decode" and result.get("state") != "loaded":
            raise RuntimeError(f"{run}: the driver did not load the prompt state: {result}")
        say(f"[{run}] done in {seconds:.0f} s")
        return marks, result, seconds

    records: list[dict[str, Any]] = []
    done_runs: dict[Run, tuple[dict[int, dict[str, int]], dict[str, Any], float]] = {}

    def add_record(case: Case, vlen: int) -> None:
        got = [per_unit(case, done_runs[Run(case, vlen, r)][0], lo, hi) for r in range(reps)]
        pt = rvvtools.agreeing(got, f"{case} VLEN {vlen}")
        if pt["vector"] <= 0:
            raise RuntimeError(f"{case} VLEN {vlen}: no vector instruction retired (an RVV build?)")
        _, result, seconds = done_runs[Run(case, vlen, 0)]
        cycles = rvvtools.est_cycles(pt, vlen)
        rec: dict[str, Any] = {
            "peer": "llama.cpp",
            "kind": case.kind,
            "arch": case.arch or None,
            "qtype": case.qtype,
            "vlen": vlen,
        }
        if case.kind == "matvec":
            kind = gguf_models.QTYPES[case.qtype]
            rec |= {
                "layers": None, "vocab": None, "context": None,
                "k": case.k, "n": case.n, "m": case.m, "reps": MATVEC_REPS,
                "insns_per_call": round(pt["total"]),
                "est_cycles_per_call": round(cycles),
                "counts": {k: round(v) for k, v in pt.items()},
                "weight_bytes_per_call": gguf_models.type_bytes(kind, case.n, case.k),
                "weight_buffer": result["weight_buffer"],
            }  # fmt: skip
        else:
            model = models[case.model_name()]
            rec |= {
                "layers": case.layers,
                "vocab": case.vocab,
                "context": case.context,
                "insns_per_token": round(pt["total"]),
                "est_cycles_per_token": round(cycles),
                "counts": {k: round(v) for k, v in pt.items()},
                "weight_bytes_per_token": model["weight_bytes_per_token"],
                "output_type": model["types"]["output"],
                "flash_attn": result.get("flash_attn"),
                "model": model,
            }
            if case.kind == "decode":
                tokens: list[int] = result["tokens"]
                if len(tokens) != hi:
                    raise RuntimeError(f"{case} VLEN {vlen}: {len(tokens)} tokens, wanted {hi}")
                ref = native_tokens[case]
                same = sum(a == b for a, b in zip(tokens, ref, strict=True))
                rec |= {
                    "tokens": tokens,
                    "tokens_agree_with_native": f"{same}/{hi}",
                    "decoded": [lo, hi],
                }
            else:
                rec["prompt_tokens"] = case.prompt
        rec |= {
            "set": case.set,
            "projection": case.set == "projection",
            "quick": args.quick,
            "runs_agreeing": reps,
            "source": build.get("source", peers_build.source_label()),
            "build_flags": {k: v for k, v in build.items() if k not in DROP_BUILD_KEYS},
            "repack": "REPACK" in result["weight_buffer"]
            if case.kind == "matvec"
            else case.qtype in REPACKED_TYPES and vlen in REPACK_VLENS,
            "note": BF16_NOTE if case.qtype == "bf16" else None,
            "run_wall_s": round(seconds),
            "bench_wall_s": round(time.monotonic() - t_start),
            **run_facts,
        }
        records.append(rec)
        records.sort(key=lambda r: (r["set"], r["kind"], r["vlen"], str(r["arch"]),
                                    r["qtype"], r["layers"] or 0, r["vocab"] or 0))  # fmt: skip
        # Rewritten after every case, so a long run that is stopped keeps what it finished.
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(records, indent=2) + "\n")

    say(f"[host] {len(runs)} emulated runs, {jobs} at a time, timeout {timeout:.0f} s each")
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_one, r): r for r in runs}
        for n_done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            run = futures[future]
            done_runs[run] = future.result()
            say(f"[host] {n_done}/{len(runs)} runs finished ({run}), "
                f"{time.monotonic() - t_start:.0f} s so far")  # fmt: skip
            if all(Run(run.case, run.vlen, r) in done_runs for r in range(reps)):
                add_record(run.case, run.vlen)
    wall = time.monotonic() - t_start

    header = (
        f"{'kind':<8} {'arch':<15} {'type':<7} {'L':>2} {'vocab':>6} {'VLEN':>5} "
        f"{'insns/unit':>14} {'est cycles/unit':>16}  tokens vs native"
    )
    say("\n" + header + "\n" + "-" * len(header))
    for r in records:
        unit = "call" if r["kind"] == "matvec" else "token"
        say(
            f"{r['kind']:<8} {r['arch'] or '-':<15} {r['qtype']:<7} {r['layers'] or '-':>2} "
            f"{r['vocab'] or '-':>6} {r['vlen']:>5} {r[f'insns_per_{unit}']:>14,} "
            f"{r[f'est_cycles_per_{unit}']:>16,}  {r.get('tokens_agree_with_native', '')}"
        )
    if any(r["qtype"] == "bf16" for r in records):
        say(f"bf16: {BF16_NOTE}")
    say(f"wrote {out} ({wall:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
