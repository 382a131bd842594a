"""Instruction counts of rvv-kernels' benchmark cases under QEMU: RVV versus scalar.

For every case of ``rvvk_bench --list`` and every VLEN, counts the retired instructions
of one call with the RVV variant (``rvv``; for the kernels with a Zvfh path of their own,
``ZVFH_KERNELS``, and the cases running them, ``ZVFH_CASES``, also ``rvv_zvfh``) and with
the portable variant of the same source (built with ``-march=rv64gc``, no vector unit,
auto-vectorisation off; its count does not depend on VLEN, so it is taken once per case):
the difference between runs doing 2 and 1 calls, so process start-up, set-up and
first-call effects cancel out.
Counting uses Debian's QEMU 7.2 with the project's insncount plugin (exact, repeatable,
single-threaded). Prints a table and writes ``build/bench/kernels.json``: a list of records
``{"kernel", "case", "vlen", "variant", "insns_rvv", "insns_scalar", "ratio", ...}``, one per
case, VLEN and vector variant (``variant``: ``rvv``, or ``rvv_zvfh`` after the case's ``rvv``
records; the ``*_rvv`` fields then hold that variant's counts). QEMU 7.2 runs ``rvv_zvfh``
with ``Zfh=true`` (it has no Zvfh property and allows fp16 vector arithmetic with Zfh) and
``RVVK_ASSUME_EXTENSIONS=zvfh``: its user mode offers the library neither hwprobe nor a
``/proc/cpuinfo`` isa line, so without that override ``RVVK_VARIANT=rvv_zvfh`` would be
refused. ``--quick`` counts ``rvv_zvfh`` for the decode cases only (``_m1_`` in the name)
and, unless ``--case`` is given, leaves out the INT4 / FP8 prefill cases.
Cases that stream
a weight matrix (linear layers at M = 1; ``rvvk_bench --list`` gives their weight bytes)
also get ``weight_bytes``, ``insns_per_weight_byte`` (RVV instructions per weight byte:
what decides whether an in-order core keeps up with its memory) and
``est_cycles_per_weight_byte`` (the estimated cycles below, per weight byte; the quantised
cases count their scales and zero points as weight bytes). Cases that read a KV cache
(decode) get ``kv_bytes``: the K and V rows (and an int8 cache's scales) one call reads. A
case compared with another of the same shapes (``rvvk_bench --list``'s last field: the int8
decode with the bf16 one, which ``--case`` then runs too) gets ``baseline_case``,
``insns_vs_baseline`` and ``est_cycles_vs_baseline`` (its RVV counts over the baseline's at
the same VLEN, of the same variant where the baseline has it), also printed in a second
table. Every record carries the run's checkout and start time (``git``, ``date_utc``, as
bench-e2e-riscv's) and also has
``est_cycles_rvv`` / ``est_cycles_scalar`` and their ratio ``cycle_ratio``: the cycles of
an in-order, dual-issue core with a 128-bit datapath such as the SpacemiT X60 under the
model of ``rvvtools.est_cycles`` (also bench-e2e-riscv's): a scalar instruction 1/2 cycle,
``vsetvl*`` 1, any other vector instruction ``max(1, EMUL x VLEN / 128)``, EMUL from the
plugin's histogram. Instruction counts alone favour long register groups (one LMUL-4
instruction does the work of four LMUL-1 ones), which such a core pays for in cycles.

Usage: python tools/bench_kernels.py [--quick] [--vlen N ...] [--case NAME ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rvvtools
from kernels_tests import ROOT, build

DEFAULT_VLENS = (128, 256, 512)
# Kernels (rvvk_bench --list's second field) with code of their own in the rvv_zvfh variant.
ZVFH_KERNELS = frozenset({"int4_linear", "fp8_linear"})
# Cases of other kernels that run those (the MoE layer's INT4 and FP8 experts).
ZVFH_CASES = frozenset({"moe_w4a8_qwen3-30b-a3b_m1", "moe_fp8_qwen3-30b-a3b_m1"})
# Kernels whose --quick run counts only the decode (``_m1_``) cases.
QUICK_DECODE_ONLY = frozenset({"int4_linear", "fp8_linear", "moe_experts"})
# Cases --quick leaves out although they are decode cases: the MoE layer's W8A8, W4A8 and
# FP8 forms (the W8A8 scalar baseline alone retires ~0.5 billion instructions; the bf16
# form runs the same stages, and the dense W4A8 / FP8 decode cases the same GEMMs).
QUICK_SKIP = frozenset(
    {"moe_w8a8_qwen3-30b-a3b_m1", "moe_w4a8_qwen3-30b-a3b_m1", "moe_fp8_qwen3-30b-a3b_m1"}
)


def count(bench: Path, case: str, reps: int, vlen: int, variant: str) -> dict[str, int]:
    """Instruction counts of one ``rvvk_bench CASE REPS`` run with kernel variant ``variant``."""
    zvfh = variant == "rvv_zvfh"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "count"
        cmd = [
            *rvvtools.qemu_cmd(vlen, zvfh, qemu="7", plugin_out=out),
            str(bench),
            case,
            str(reps),
        ]
        env = dict(os.environ, RVVK_VARIANT=variant)
        if zvfh:
            env["RVVK_ASSUME_EXTENSIONS"] = "zvfh"
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr}")
        return rvvtools.parse_insncount(out)


def per_call(bench: Path, case: str, vlen: int, variant: str) -> dict[str, int]:
    """Counts of one steady-state call: run(2 calls) - run(1 call)."""
    one = count(bench, case, 1, vlen, variant)
    two = count(bench, case, 2, vlen, variant)
    return {key: two[key] - one[key] for key in one}


def progress(done: int, total: int, start: float) -> None:
    """A one-line progress bar on stderr."""
    width = 30
    filled = width * done // total
    elapsed = time.monotonic() - start
    sys.stderr.write(
        f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} runs, {elapsed:.0f} s"
    )
    sys.stderr.flush()
    if done == total:
        sys.stderr.write("\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="VLEN 256 only (a CI smoke run)")
    parser.add_argument("--vlen", type=int, action="append", help="VLENs (default 128 256 512)")
    parser.add_argument("--case", action="append", help="cases to run (default: all)")
    parser.add_argument(
        "--out",
        type=Path,
        help="JSON output (build/bench/kernels.json; --quick: build/bench/kernels_quick.json)",
    )
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = (
            ROOT / "build" / "bench" / ("kernels_quick.json" if args.quick else "kernels.json")
        )
    vlens = tuple(args.vlen or ((256,) if args.quick else DEFAULT_VLENS))

    rvvtools.provision(["toolchain", "qemu7", "plugin"])
    build_dir = ROOT / "build" / "kernels" / "riscv64"
    build(build_dir, rvvtools.toolchain_file())
    bench = build_dir / "rvvk_bench"
    listing = subprocess.run(
        [*rvvtools.qemu_cmd(256, qemu="7"), str(bench), "--list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    # "name kernel weight_bytes kv_bytes baseline" per case (bytes 0: not a weight-streaming /
    # KV-reading case; baseline "-": compared with no other case).
    kernels: dict[str, str] = {}
    weight_bytes: dict[str, int] = {}
    kv_bytes: dict[str, int] = {}
    baselines: dict[str, str] = {}
    for line in listing:
        fields = line.split()
        if fields:
            kernels[fields[0]] = fields[1]
            weight_bytes[fields[0]] = int(fields[2]) if len(fields) > 2 else 0
            kv_bytes[fields[0]] = int(fields[3]) if len(fields) > 3 else 0
            if len(fields) > 4 and fields[4] != "-":
                baselines[fields[0]] = fields[4]
    cases = args.case or sorted(kernels)
    if args.quick and not args.case:
        # CI's smoke run leaves out the quantised and MoE prefill cases: their scalar
        # baselines retire 1-5 billion instructions under QEMU (minutes), and the decode
        # cases run the same kernels.
        cases = [
            c
            for c in cases
            if (kernels[c] not in QUICK_DECODE_ONLY or "_m1_" in c or c.endswith("_m1"))
            and c not in QUICK_SKIP
        ]
    unknown = [c for c in cases if c not in kernels]
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {sorted(kernels)}")
    # A case compared with a baseline brings the baseline along, and that one its own (a MoE
    # case's dense layer is compared with another dense layer).
    while extra := sorted({baselines[c] for c in cases if c in baselines} - set(cases)):
        cases += extra

    run = rvvtools.run_stamp()
    # The portable variant runs no vector instruction, so its count does not depend on
    # VLEN: it is counted once per case (at the first VLEN) and reused.
    variants = {
        c: ["rvv"]
        + (
            ["rvv_zvfh"]
            if (kernels[c] in ZVFH_KERNELS or c in ZVFH_CASES) and (not args.quick or "_m1_" in c)
            else []
        )
        for c in cases
    }
    jobs = [(c, v, variant) for c in cases for v in vlens for variant in variants[c]] + [
        (c, vlens[0], "portable") for c in cases
    ]
    results: dict[tuple[str, int, str], dict[str, int]] = {}
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        futures = {pool.submit(per_call, bench, *job): job for job in jobs}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            results[futures[future]] = future.result()
            progress(done, len(jobs), start)

    records = []
    for case, variant, vlen in [(c, w, v) for c in cases for w in variants[c] for v in vlens]:
        rvv, scalar = results[(case, vlen, variant)], results[(case, vlens[0], "portable")]
        cycles_rvv = rvvtools.est_cycles(rvv, vlen)
        cycles_scalar = rvvtools.est_cycles(scalar, vlen)
        record: dict[str, object] = {
            "kernel": kernels[case],
            "case": case,
            "vlen": vlen,
            "variant": variant,
            "insns_rvv": rvv["total"],
            "insns_scalar": scalar["total"],
            "ratio": round(scalar["total"] / rvv["total"], 2),
            "rvv_vector_insns": rvv["vector"],
            "rvv_vsetvl_insns": rvv["vsetvl"],
            "rvv_scalar_insns": rvv["scalar"],
            "est_cycles_rvv": round(cycles_rvv),
            "est_cycles_scalar": round(cycles_scalar),
            "cycle_ratio": round(cycles_scalar / cycles_rvv, 2),
            **run,
        }
        if weight_bytes[case]:
            record["weight_bytes"] = weight_bytes[case]
            record["insns_per_weight_byte"] = round(rvv["total"] / weight_bytes[case], 4)
            record["est_cycles_per_weight_byte"] = round(cycles_rvv / weight_bytes[case], 4)
        if kv_bytes[case]:
            record["kv_bytes"] = kv_bytes[case]
        if case in baselines:
            # The baseline's counts of the same variant where it has them (a MoE layer's
            # INT4 / FP8 experts against the dense layer's), else its rvv ones.
            base = results.get(
                (baselines[case], vlen, variant), results[(baselines[case], vlen, "rvv")]
            )
            record["baseline_case"] = baselines[case]
            record["insns_vs_baseline"] = round(rvv["total"] / base["total"], 3)
            record["est_cycles_vs_baseline"] = round(
                cycles_rvv / rvvtools.est_cycles(base, vlen), 3
            )
            if weight_bytes[case] and weight_bytes[baselines[case]]:
                # Cases of different sizes that stream weights (a MoE layer's experts and a
                # dense layer) compare per weight byte.
                record["est_cycles_per_weight_byte_vs_baseline"] = round(
                    (cycles_rvv / weight_bytes[case])
                    / (rvvtools.est_cycles(base, vlen) / weight_bytes[baselines[case]]),
                    3,
                )
        records.append(record)
    header = (
        f"{'case':<28} {'VLEN':>5} {'variant':<8} {'RVV insns':>12} {'scalar insns':>14} "
        f"{'ratio':>7} {'RVV est cycles':>15} {'cycle ratio':>12} {'insns/weight byte':>17} "
        f"{'cycles/weight byte':>18}"
    )
    print(header)
    print("-" * len(header))
    for r in records:
        per_byte = r.get("insns_per_weight_byte")
        cyc_byte = r.get("est_cycles_per_weight_byte")
        print(
            f"{r['case']:<28} {r['vlen']:>5} {r['variant']:<8} {r['insns_rvv']:>12,} "
            f"{r['insns_scalar']:>14,} {r['ratio']:>7.2f} {r['est_cycles_rvv']:>15,} "
            f"{r['cycle_ratio']:>12.2f} "
            f"{'' if per_byte is None else f'{per_byte:.4f}':>17} "
            f"{'' if cyc_byte is None else f'{cyc_byte:.4f}':>18}"
        )
    compared = [r for r in records if "baseline_case" in r]
    if compared:
        header = (
            f"\n{'case':<28} {'VLEN':>5} {'KV bytes/call':>14} {'vs case':<28} "
            f"{'insns ratio':>11} {'est cycles ratio':>16}"
        )
        print(header)
        print("-" * len(header.strip()))
        for r in sorted(
            (r for r in records if r.get("kv_bytes")), key=lambda r: (r["vlen"], r["case"])
        ):
            print(
                f"{r['case']:<28} {r['vlen']:>5} {r['kv_bytes']:>14,} "
                f"{r.get('baseline_case', '-'):<28} "
                f"{r.get('insns_vs_baseline', ''):>11} {r.get('est_cycles_vs_baseline', ''):>16}"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(records, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
