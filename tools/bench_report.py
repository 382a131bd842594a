"""Turns the benchmark JSON files into PNG plots and docs/performance.md.

Reads whichever of these exist under ``build/bench/`` (for a missing one the section of
the existing ``docs/performance.md`` is kept as it is, with a line saying so, or reported as
not run if there is none - so one benchmark can be re-run and reported without the others):

- ``kernels.json`` (``nox -s bench-kernels``): retired instructions per kernel call under
  QEMU, RVV build vs scalar build of the same source, per VLEN;
- ``e2e_riscv.json`` (``nox -s bench-e2e-riscv``): instructions per decoded token by mode
  (the ``--quick`` smoke run's ``e2e_riscv_quick.json`` is not reported);
- ``x86.json`` (``nox -s bench-x86``): attention side by side on the x86 machine;
- ``peers.json`` (``nox -s bench-peers``): llama.cpp's instructions per decoded token and per
  matrix-vector product under QEMU, set beside ours from ``e2e_riscv.json``,
  ``e2e_riscv_projection.json``, ``e2e_riscv_vlens.json`` and ``kernels.json``;
- ``k1_model.json`` (``tools/k1_model.py``, run by ``nox -s bench-peers``): the projected
  time per token on a SpacemiT K1 and the model's check against published board figures.

Writes ``docs/performance/*.png`` and ``docs/performance.md`` (method, machine, date, the
numbers, and what these proxies can and cannot say about a RISC-V board).

Usage: python tools/bench_report.py [--bench-dir DIR] [--docs DIR]
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rvvtools

ROOT = Path(__file__).resolve().parent.parent
IMPL_LABEL = {
    "torch_native": "SGLang torch_native",
    "rvv_fallback": "rvv-attention fallback",
    "rvv_kernel": "rvv-ops kernels",
}


def _pyplot() -> Any:
    mpl = importlib.import_module("matplotlib")
    mpl.use("Agg")
    mpl.rcParams["svg.hashsalt"] = "rvv-sglang"
    return importlib.import_module("matplotlib.pyplot")


def _load(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def _plain_log(plt: Any, axis: Any) -> None:
    """Plain numbers (2, 5, 10, 0.5) instead of powers of ten on a log axis; minor ticks
    labelled only at 2 and 5 times a power of ten (every minor label crowds the axis)."""
    axis.set_major_formatter(plt.FuncFormatter(lambda v, _pos: f"{v:g}"))

    def minor(v: float, _pos: int) -> str:
        lead = f"{v:.0e}"[0]
        return f"{v:g}" if lead in "25" else ""

    axis.set_minor_formatter(plt.FuncFormatter(minor))


def _save(plt: Any, fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def _run_line(record: dict[str, Any]) -> list[str]:
    """The line "Run DATE, checkout X." for a record with ``date_utc``
    (rvvtools.run_stamp); none for older records, which lack it."""
    if "date_utc" not in record:
        return []
    return [f"Run {record['date_utc']}, checkout `{record.get('git', '?')}`.", ""]


def _grouped_bars(
    series: list[Any], slots: list[Any], value: Callable[[Any, Any], Any]
) -> tuple[float, list[float], list[tuple[Any, list[float], list[Any]]]]:
    """A grouped bar chart's geometry: the bars of slot i at i, i + width, ... (one per
    series, width 0.8 / len(series)); ``value(series, slot)`` is a bar's height, None for
    no bar. Returns the width, each slot's tick (its group's centre) and, per series,
    (series, positions, heights)."""
    width = 0.8 / len(series)
    bars = []
    for j, name in enumerate(series):
        found = [(i + j * width, value(name, slot)) for i, slot in enumerate(slots)]
        kept = [(x, y) for x, y in found if y is not None]
        bars.append((name, [x for x, _ in kept], [y for _, y in kept]))
    ticks = [i + width * (len(series) - 1) / 2 for i in range(len(slots))]
    return width, ticks, bars


def _field(records: list[dict[str, Any]], key: str, **match: Any) -> Any:
    """``key`` of the first record whose fields equal ``match``, None if there is none."""
    rec = next((r for r in records if all(r[k] == v for k, v in match.items())), None)
    return None if rec is None else rec[key]


# ------------------------------------------------------------------------------ kernels


def kernels_section(plt: Any, records: list[dict[str, Any]], img: Path) -> list[str]:
    out: list[str] = []
    cases = sorted({r["case"] for r in records})
    vlens = sorted({r["vlen"] for r in records})
    # The chart shows the plain-RVV variant (records before the variant field were all rvv);
    # the table lists every variant counted (rvv_zvfh for the kernels with a Zvfh path).
    plain = [r for r in records if r.get("variant", "rvv") == "rvv"]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(cases) + 2))
    height, ticks, bars = _grouped_bars(
        vlens, cases, lambda vlen, case: _field(plain, "ratio", case=case, vlen=vlen)
    )
    for vlen, ys, xs in bars:
        ax.barh(ys, xs, height=height, label=f"VLEN {vlen}")
    ax.set_yticks(ticks)
    ax.set_yticklabels(cases, fontsize=8)
    ax.set_xscale("log")
    _plain_log(plt, ax.xaxis)
    ax.set_xlabel("scalar-build instructions / RVV-build instructions (log)")
    ax.set_title("Retired instructions per call under QEMU: scalar / RVV")
    ax.legend(fontsize=8)
    _save(plt, fig, img / "kernels_ratio.png")
    out += _run_line(records[0])
    out += [
        "Each case's kernel call, counted with QEMU 7.2's instruction-count plugin (user mode,",
        "one thread) as the difference of runs with 2 and 1 calls; `scalar` is the portable",
        "variant of the same source built for rv64gc (no vector unit, no auto-vectorisation).",
        "`est cycles`: the RVV build's cycles on the in-order DLEN-128 model of section 2",
        "(`rvvtools.est_cycles`), `cycle ratio` the scalar build's over them (`-` where a",
        "record has no cycle estimate).",
        "",
        "![instruction ratios](performance/kernels_ratio.png)",
        "",
        "| case | variant | VLEN | RVV insns | scalar insns | ratio | RVV est cycles | "
        "cycle ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(records, key=lambda r: (r["case"], r.get("variant", "rvv"), r["vlen"])):
        cycles, cycle_ratio = r.get("est_cycles_rvv"), r.get("cycle_ratio")
        out.append(
            f"| {r['case']} | {r.get('variant', 'rvv')} | {r['vlen']} | {r['insns_rvv']:,} "
            f"| {r['insns_scalar']:,} "
            f"| {r['ratio']:.1f} | {'-' if cycles is None else f'{cycles:,}'} "
            f"| {'-' if cycle_ratio is None else f'{cycle_ratio:.1f}'} |"
        )
    out.append("")
    return out


# ------------------------------------------------------------------------------ e2e


def e2e_section(plt: Any, records: list[dict[str, Any]], img: Path) -> list[str]:
    out: list[str] = []
    modes = sorted({r["mode"] for r in records})
    vlens = sorted({r["vlen"] for r in records})
    fig, ax = plt.subplots(figsize=(8, 4))
    width, ticks, bars = _grouped_bars(
        modes, vlens, lambda mode, vlen: _field(records, "insns_per_token", mode=mode, vlen=vlen)
    )
    for mode, xs, ys in bars:
        ax.bar(xs, ys, width=width, label=mode)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"VLEN {v}" for v in vlens])
    ax.set_yscale("log")
    ax.set_ylabel("instructions per decoded token (log)")
    ax.legend(fontsize=8)
    _save(plt, fig, img / "e2e_insns_per_token.png")
    first = records[0]
    lo, hi = first.get("decoded", ["?", "?"])
    out += _run_line(first)
    out += [
        f"Shape: {first.get('shape', '?')}. Instructions per token are counted between the "
        f"marks the guest sets after decoded tokens {lo} and {hi} of one run (start-up, "
        "weights and the first call of every op left out), under QEMU 7.2 with the insncount "
        "plugin; estimated cycles use the DLEN-128 in-order model of "
        "`tools/bench_e2e_riscv.py`. Tokens: how many greedy tokens equal torch-native's "
        "(near-ties flip under different rounding, W8A8 also quantises the weights; every "
        "later token follows a flipped one).",
        "",
        "![instructions per token](performance/e2e_insns_per_token.png)",
        "",
        "| mode | VLEN | insns / token | est. cycles / token | x torch-native (insns) "
        "| x torch-native (est. cycles) | tokens vs torch-native |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in sorted(records, key=lambda r: (r["mode"], r["vlen"])):
        ratio = r.get("ratio_vs_torch_native")
        cratio = r.get("cycle_ratio_vs_torch_native")
        cycles = r.get("est_cycles_per_token")
        out.append(
            f"| {r['mode']} | {r['vlen']} | {r['insns_per_token']:,.0f} | "
            f"{'-' if cycles is None else f'{cycles:,.0f}'} | "
            f"{'-' if ratio is None else f'{ratio:.2f}'} | "
            f"{'-' if cratio is None else f'{cratio:.2f}'} | "
            f"{r.get('tokens_agree_with_torch_native', '-')} |"
        )
    out.append("")
    diffs = [r for r in records if r.get("first_difference")]
    if diffs:
        out += [
            "Where a mode's tokens first differ from torch-native's (the same history before "
            "that token, so the logits compare): each run's token, its rank among the other "
            "run's logits and how far below that run's top logit it is, in spacings of bf16 "
            "at the top logit.",
            "",
        ]
        for r in sorted(diffs, key=lambda r: (r["mode"], r["vlen"])):
            what = rvvtools.describe_difference(r["mode"], r["first_difference"])
            out.append(f"- VLEN {r['vlen']}, {what}.")
        out.append("")
    return out


# ------------------------------------------------------------------------------ x86


def x86_section(plt: Any, data: dict[str, Any], img: Path) -> list[str]:
    out: list[str] = []
    every: list[dict[str, Any]] = data["records"]
    for r in every:
        r.setdefault("layout", "random")  # runs before layouts were recorded
    # The speed-up plot and the per-shape comparisons: requests on random rows.
    records = [r for r in every if r["layout"] == "random"]
    contiguous = [r for r in every if r["layout"] == "contiguous"]
    m = data["machine"]
    ops = [op for op in ("decode", "extend") if any(r["op"] == op for r in records)]
    fig, axes = plt.subplots(1, len(ops), figsize=(6 * len(ops), 4.5), squeeze=False)
    for ax, op in zip(axes[0], ops, strict=True):
        keys = sorted({(r["batch"], r["context"]) for r in records if r["op"] == op})

        def speedup(impl: str, key: tuple[int, int], op: str = op) -> Any:
            batch, context = key
            match = {"op": op, "batch": batch, "context": context, "impl": impl}
            return _field(records, "ratio_vs_torch_native", **match)

        width, ticks, bars = _grouped_bars(["rvv_fallback", "rvv_kernel"], keys, speedup)
        for impl, xs, ys in bars:
            ax.bar(xs, ys, width=width, label=IMPL_LABEL[impl])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"B{b}\nC{c}" for b, c in keys], fontsize=8)
        ax.set_yscale("log")
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi * 2.5)  # headroom for the legend above the bars
        _plain_log(plt, ax.yaxis)
        ax.set_ylabel("speed-up over SGLang torch_native (log)")
        ax.set_title(f"{op}: torch_native median / median")
        ax.legend(fontsize=8, loc="upper left")
    _save(plt, fig, img / "x86_speedup.png")

    decode = [r for r in records if r["op"] == "decode"]
    if decode:
        fig, ax = plt.subplots(figsize=(7, 4))
        for impl in ("torch_native", "rvv_fallback", "rvv_kernel"):
            for b in sorted({r["batch"] for r in decode}):
                pts = sorted(
                    (r["context"], r["bandwidth_fraction"])
                    for r in decode
                    if r["impl"] == impl and r["batch"] == b
                )
                if pts:
                    ax.plot(
                        [p[0] for p in pts], [p[1] for p in pts], marker="o",
                        label=f"{IMPL_LABEL[impl]}, B{b}",
                    )  # fmt: skip
        for b in sorted({r["batch"] for r in contiguous if r["op"] == "decode"}):
            pts = sorted(
                (r["context"], r["bandwidth_fraction"])
                for r in contiguous
                if r["op"] == "decode" and r["impl"] == "rvv_kernel" and r["batch"] == b
            )
            ax.plot(
                [p[0] for p in pts], [p[1] for p in pts], marker="x", linestyle="none",
                markersize=8, label=f"{IMPL_LABEL['rvv_kernel']}, B{b}, consecutive rows",
            )  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sorted({r["context"] for r in decode}))
        _plain_log(plt, ax.xaxis)
        _plain_log(plt, ax.yaxis)
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("KV bytes read per s / copy bandwidth (log)")
        ax.set_title("decode: effective KV-cache bandwidth fraction")
        ax.legend(fontsize=6, ncol=2)
        _save(plt, fig, img / "x86_decode_bandwidth.png")

    copy = data["copy_bandwidth"]
    method = data["method"]
    build = m.get("rvv_ops_build", {})
    out += [
        f"Machine: {m['cpu_model']} ({m['arch']}, {m['cores']} cores, torch threads "
        f"{m['torch_threads']}, torch CPU capability {m['torch_cpu_capability']}, last-level "
        f"cache {m['llc_bytes'] / 2**20:.0f} MiB), Python {m['python']}, torch {m['torch']}, "
        f"SGLang {m['sglang']}, rvv-ops kernel variant `{build.get('active_variant', '?')}`, "
        f"checkout `{m.get('git', '?')}`. Run {m['date_utc']}.",
        "",
        f"Load: at the start `{m['uptime_start']}`; at the end `{m['uptime_end']}` "
        f"({m['cores']} cores: a load average well above {m['cores']} means other work "
        "shared the machine and the timings are noisy).",
        "",
        f"Copy bandwidth (the reference for the bandwidth fraction): "
        f"{copy['median_bytes_per_s'] / 1e9:.2f} GB/s, {copy['definition']}, "
        f"{copy['bytes'] / 2**20:.0f} MiB tensors.",
        "",
        "Method: Qwen2.5-1.5B attention shapes (12 query heads, 2 KV heads, head dim 128), "
        "bf16 KV cache in SGLang's own pools"
        + (
            f": layout `random`, {method['layouts']['random']}; layout `contiguous`, "
            f"{method['layouts']['contiguous']} (the plots of speed-ups are `random`; the "
            "bandwidth plot marks `contiguous` with crosses)."
            if "layouts" in method
            else ", every request's tokens at random rows."
        ),
        f"- decode: {method['decode']};",
        f"- extend: {method['extend']};",
    ]
    out += [f"- `{k}`: {v};" for k, v in method["impls"].items()]
    out += [
        f"- {method['statistic']}; {method['repeats']} timed calls per case and "
        f"implementation ({method['repeats_rule']}); {method['cold_cache']};",
        *([f"- KV pages: {method['kv_pages']};"] if "kv_pages" in method else []),
        f"- numerics: {method['numerics']}: "
        + (
            "all agreed."
            if all(n["ok"] for n in data["numerics"])
            else "SOME DID NOT AGREE (see the JSON)."
        ),
        f"- `ratio` = {method['ratio_vs_torch_native']}; `bw fraction` = "
        f"{method['bandwidth_fraction']}.",
        "",
        "![x86 speed-ups](performance/x86_speedup.png)",
        "",
    ]
    if decode:
        out += ["![x86 decode bandwidth](performance/x86_decode_bandwidth.png)", ""]
    out += [
        "| op | batch | context | layout | impl | median ms | x torch_native | bw fraction |",
        "|---|---:|---:|---|---|---:|---:|---:|",
    ]
    for r in every:
        bw = r["bandwidth_fraction"]
        out.append(
            f"| {r['op']} | {r['batch']} | {r['context']} | {r['layout']} | {r['impl']} | "
            f"{r['median_s'] * 1e3:.2f} | {r['ratio_vs_torch_native']:.2f} | "
            f"{'-' if bw is None else f'{bw:.3f}'} |"
        )
    out.append("")
    if data.get("skipped"):
        out.append("Left out of this run:")
        out += [
            f"- {s['op']} batch {s['batch']} context {s['context']}: {s['reason']}"
            for s in data["skipped"]
        ]
        out.append("")
    bounds = data.get("ceilings")  # older records have none
    if bounds:
        ic, fl = bounds["in_cache"], bounds["call_floor"]
        out += [
            "What bounds the decode's bandwidth fraction on this machine (same run):",
            "",
            f"- in cache: rvv_kernel's decode at batch {ic['batch']} / context "
            f"{ic['context']} with its K/V rows in the last-level cache (calls back to back, "
            f"no flush) took {ic['median_s'] * 1e3:.3f} ms, a bandwidth fraction of "
            f"{ic['bandwidth_fraction']:.3f}: an estimate of what the kernel's compute allows "
            "here. Not a hard bound: it is measured minutes apart from the DRAM cases (a "
            "shared VM's speed drifts between minutes) and at a shorter context, where more "
            "of a call is fixed cost;",
            f"- call floor: a decode of one 16-token request took {fl['warm_s'] * 1e3:.3f} ms "
            f"warm and {fl['after_flush_s'] * 1e3:.3f} ms after the flush the timed decode "
            "calls get: the fixed cost of a call (Python, dispatch, the op, its threads, "
            "their code and data back from DRAM after the flush), which batch 1 pays on top "
            "of its K/V.",
            "",
        ]
    out += ["Targets (issue 7; reported, not asserted):", ""]
    for t in data["targets"]:
        value = "not run" if t["value"] is None else f"{t['value']:.3f}"
        verdict = {True: "met", False: "**not met**", None: "-"}[t["met"]]
        bound = "" if t.get("ceiling") is None else f"; in cache {t['ceiling']:.3f}"
        out.append(f"- {t['target']}: {value} ({verdict}{bound})")
    out.append("")
    return out


# ------------------------------------------------------------------------------ peers

# Our decode mode beside the llama.cpp weight types of the same weight width.
PEER_PAIRS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("bf16 weights", "rvv", ("f16", "bf16")),
    ("8-bit weights", "rvv-w8a8", ("q8_0",)),
    ("4-bit weights", "rvv-w4a8", ("q4_0",)),
)
# Our bench-kernels case for the 1536 -> 8960 matrix-vector product, by the llama.cpp types
# it is set beside.
PEER_MATVEC: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("linear_bf16_m1_k1536_n8960", ("f16", "bf16")),
    ("w8a8_m1_k1536_n8960", ("q8_0",)),
    ("w4a8_m1_k1536_n8960_g128", ("q4_0",)),
)
PEER_SHORT = {"rvv": "bf16", "rvv-w8a8": "W8A8", "rvv-w4a8": "W4A8"}  # plot labels
PEER_TARGET = 0.8  # ours / llama.cpp estimated cycles per token at VLEN 256 (issue 37)


def _fmt(v: Any, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def _same_shape(ours: dict[str, Any], peer: dict[str, Any]) -> bool:
    """Whether one of our e2e records decodes the shape of a llama.cpp decode record: the
    layer count, vocabulary and context (our records from before these fields existed are
    the default shape, Qwen2.5-1.5B layers x2, vocab 4096, context 512)."""
    return all(
        ours.get(key, default) == peer.get(key)
        for key, default in (("layers", 2), ("vocab", 4096), ("context", 512))
    )


def peers_section(plt: Any, data: dict[str, Any], img: Path) -> list[str]:
    peers: list[dict[str, Any]] = data["peers"]
    ours: list[dict[str, Any]] = data.get("ours") or []
    kernels: list[dict[str, Any]] = data.get("kernels") or []
    # The side-by-side shape: bench_peers' "main" set (its projection set's other layer
    # counts and vocabularies feed the K1 model, section 5).
    decode = [
        r
        for r in peers
        if r.get("kind") == "decode"
        and r.get("arch") == "qwen2-1.5b"
        and r.get("set", "main") == "main"
    ]
    out: list[str] = [*_run_line(peers[0])]
    first = peers[0]
    flags = first.get("build_flags", "?")
    if isinstance(flags, dict):  # peers.build.build_info(): the compiler and its flags
        flags = flags.get("flags", "?")
    if isinstance(flags, list):
        flags = " ".join(str(f) for f in flags)
    out += [
        f"llama.cpp: {first.get('source', '?')}, its ggml CPU backend built for riscv64 with "
        f"RVV by `tools/peers/build.py` ({flags}), driven by "
        "our own program (`tools/peers/driver.cpp`) on GGUF files of random weights written "
        "by `tools/peers/gguf_models.py`. Counted like our decode step (section 2): QEMU 7.2 "
        "with the insncount plugin, one thread, instructions between marks after decoded "
        "tokens, and the same DLEN-128 cycle estimate. QEMU cannot run SpacemiT's IME matrix "
        "extension, so these are llama.cpp's plain-RVV figures; the published K1 numbers with "
        "IME (section 5) are faster than a plain-RVV build.",
        "",
    ]
    if decode:
        vlens = sorted({r["vlen"] for r in decode})
        out += [
            f"Decode, per token, Qwen2.5-1.5B layers x{decode[0].get('layers', '?')}, vocab "
            f"{decode[0].get('vocab', '?')}, context {decode[0].get('context', '?')} (the "
            f"shape of section 2). `ours / llama.cpp`: estimated cycles; the target is at "
            f"most {PEER_TARGET} at VLEN 256 (the K1's). At VLEN 256 ggml runs its RVV "
            "repacked layouts for Q8_0 and Q4_0 (`repack` in the records); at 128 and 512 it "
            "has none and falls back to dot products of a fixed vector length, which the "
            "cycle model still charges at the full register width - so its VLEN-512 cycles "
            "are overstated, and only VLEN 256 is a fair comparison.",
            "",
            "| weights | VLEN | ours | ours insns | ours est. cycles | llama.cpp | llama.cpp "
            "insns | llama.cpp est. cycles | ours / llama.cpp |",
            "|---|---:|---|---:|---:|---|---:|---:|---:|",
        ]
        chart: list[tuple[str, int, float | None, float | None]] = []
        for label, mode, qtypes in PEER_PAIRS:
            for vlen in vlens:
                mine = next(
                    (
                        r
                        for r in ours
                        if r.get("mode") == mode
                        and r.get("vlen") == vlen
                        and _same_shape(r, decode[0])
                    ),
                    None,
                )
                for qtype in [q for q in qtypes if any(r.get("qtype") == q for r in decode)]:
                    theirs = next(
                        (r for r in decode if r.get("qtype") == qtype and r["vlen"] == vlen), None
                    )
                    if theirs is None and mine is None:
                        continue
                    mc = None if mine is None else mine.get("est_cycles_per_token")
                    tc = None if theirs is None else theirs.get("est_cycles_per_token")
                    ratio = None if mc is None or tc is None else mc / tc
                    flag = ""
                    if ratio is not None and vlen == 256:
                        flag = " (met)" if ratio <= PEER_TARGET else " (not met)"
                    out.append(
                        f"| {label} | {vlen} | {mode if mine else f'{mode}: not run'} | "
                        f"{_fmt(None if mine is None else mine.get('insns_per_token'))} | "
                        f"{_fmt(mc)} | {qtype if theirs else f'{qtype}: not run'} | "
                        f"{_fmt(None if theirs is None else theirs.get('insns_per_token'))} | "
                        f"{_fmt(tc)} | {_fmt(ratio, '.2f')}{flag} |"
                    )
                    chart.append((f"{PEER_SHORT.get(mode, mode)} / {qtype}", vlen, mc, tc))
        out.append("")
        shown = [c for c in chart if c[2] is not None or c[3] is not None]
        if shown:
            labels = list(dict.fromkeys(c[0] for c in shown))  # PEER_PAIRS' order
            fig, ax = plt.subplots(figsize=(8, 4))
            series = ["ours", "llama.cpp"]
            slots = [(lab, v) for lab in labels for v in vlens]

            def height(name: str, slot: tuple[str, int]) -> float | None:
                hit = next((c for c in shown if (c[0], c[1]) == slot), None)
                value = None if hit is None else (hit[2] if name == "ours" else hit[3])
                return None if value is None else value / 1e6

            width, ticks, bars = _grouped_bars(series, slots, height)
            for name, xs, ys in bars:
                ax.bar(xs, ys, width=width, label=name)
            ax.set_xticks(ticks)
            ax.set_xticklabels([f"{lab}\n{v}" for lab, v in slots], fontsize=7)
            ax.set_xlabel("ours / llama.cpp type, VLEN")
            ax.set_ylabel("estimated DLEN-128 cycles per token (millions)")
            ax.legend(fontsize=8)
            _save(plt, fig, img / "peers_cycles_per_token.png")
            out += ["![cycles per token](performance/peers_cycles_per_token.png)", ""]
    else:
        out += ["No llama.cpp decode records of the Qwen2.5-1.5B shape in this run.", ""]
    matvec = [r for r in peers if r.get("kind") == "matvec"]
    if matvec:
        out += [
            "Matrix-vector product 1536 -> 8960 (M = 1), per call: ggml's `mul_mat` of each "
            "type against our bench-kernels case (section 1). Cycles per weight byte: the "
            "estimated cycles over the bytes of the weight matrix (incl. block scales).",
            "",
            "| VLEN | ours | ours est. cycles | cycles / byte | llama.cpp type | llama.cpp est. "
            "cycles | cycles / byte | ours / llama.cpp |",
            "|---:|---|---:|---:|---|---:|---:|---:|",
        ]
        for case, qtypes in PEER_MATVEC:
            for vlen in sorted({r["vlen"] for r in matvec}):
                mine = next(
                    (r for r in kernels if r.get("case") == case and r.get("vlen") == vlen), None
                )
                mc = None if mine is None else mine.get("est_cycles_rvv")
                mbytes = _case_weight_bytes(case)
                for qtype in [q for q in qtypes if any(r.get("qtype") == q for r in matvec)]:
                    theirs = next(
                        (r for r in matvec if r.get("qtype") == qtype and r["vlen"] == vlen),
                        None,
                    )
                    if theirs is None and mine is None:
                        continue
                    tc = None if theirs is None else theirs.get("est_cycles_per_call")
                    tbytes = (
                        None
                        if theirs is None
                        else theirs.get("weight_bytes_per_call", theirs.get("weight_bytes"))
                    )
                    out.append(
                        f"| {vlen} | {case if mine else f'{case}: not run'} | {_fmt(mc)} | "
                        f"{_fmt(None if mc is None or not mbytes else mc / mbytes, '.3f')} | "
                        f"{qtype if theirs else f'{qtype}: not run'} | {_fmt(tc)} | "
                        f"{_fmt(None if tc is None or not tbytes else tc / tbytes, '.3f')} | "
                        f"{_fmt(None if mc is None or tc is None else mc / tc, '.2f')} |"
                    )
        out.append("")
    return out


def _case_weight_bytes(case: str) -> int | None:
    """Bytes of the weight matrix a bench-kernels linear case reads: K x N at 2 bytes (bf16)
    or 1 byte plus a 4-byte scale per output channel (w8a8)."""
    fields = {p[0]: p[1:] for p in case.split("_") if p[:1] in "kn" and p[1:].isdigit()}
    if "k" not in fields or "n" not in fields:
        return None
    k, n = int(fields["k"]), int(fields["n"])
    if case.startswith("linear_bf16"):
        return 2 * k * n
    if case.startswith("w8a8"):
        return k * n + 4 * n
    return None


def _peers_data(bench_dir: Path) -> dict[str, Any] | None:
    """peers.json with our records it is set beside: section 2's e2e_riscv.json, the K1
    model's runs of our decode step (e2e_riscv_projection.json, VLEN 256), our decode step at
    the other VLENs when section 2's run is not at hand (e2e_riscv_vlens.json:
    ``bench_e2e_riscv.py --mode rvv --mode rvv-w8a8 --vlen 128 --vlen 512 --out ...``) and
    kernels.json."""
    peers = _load(bench_dir / "peers.json")
    if peers is None:
        return None
    ours = [
        record
        for name in ("e2e_riscv.json", "e2e_riscv_projection.json", "e2e_riscv_vlens.json")
        for record in _load(bench_dir / name) or []
    ]
    return {"peers": peers, "ours": ours, "kernels": _load(bench_dir / "kernels.json") or []}


# ------------------------------------------------------------------------------ K1 model


def _ms_band(p: dict[str, Any]) -> str:
    band = p.get("time_ms_band")
    return "-" if not band else f"{band[0]:,.0f}-{band[1]:,.0f}"


def k1_section(plt: Any, data: dict[str, Any], img: Path) -> list[str]:
    board = data.get("board", {})
    check = data.get("check", {})
    error = check.get("error")
    factor = None if error is None else math.exp(error)
    out: list[str] = []
    out += [
        f"Board: {board.get('name', '?')} at {board.get('ghz', '?')} GHz, DLEN "
        f"{board.get('dlen', '?')}, {board.get('bandwidth_gbs', '?')} GB/s of DRAM bandwidth "
        "(published figures, not measured). Per token at T threads: compute = the token's "
        "estimated DLEN-128 cycles on one core (section 2's model, VLEN 256) / (clock x T); "
        "memory = the bytes a token reads from DRAM (every weight with its scales, the LM "
        "head, the K/V rows at the context) / the bandwidth; time = the larger of the two. "
        "A token's cycles are split into per-layer, per-vocabulary-row and fixed parts from "
        "emulated runs at 1 and 2 layers and several vocabularies, and scaled to the full "
        "model. Nothing is fitted: `tools/k1_model.py`'s docstring states every constant "
        "and where the published figures come from.",
        "",
        "**The check.** The same model applied to llama.cpp's emulated counts (section 4) "
        "for TinyLlama-1.1B's shapes in the types with published BPI-F3 (= K1) figures, "
        f"{data.get('published_threads', '?')} threads assumed (the published runs do not "
        "state theirs; llama-bench's default is the core count):",
        "",
        "| point | source | published tokens/s | predicted tokens/s | compute ms | memory ms "
        "| ln(predicted / published) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for pt in check.get("points", []):
        if pt.get("predicted_tokens_per_s") is None:
            out.append(
                f"| {pt['label']} | {pt.get('source', '?')} | {pt['tokens_per_s']:.2f} | "
                f"not run ({pt.get('missing', '?')}) | - | - | - |"
            )
            continue
        out.append(
            f"| {pt['label']} | {pt.get('source', '?')} | {pt['tokens_per_s']:.2f} | "
            f"{pt['predicted_tokens_per_s']:.2f} | {pt['compute_ms']:.1f} | "
            f"{pt['memory_ms']:.1f} | {pt['log_ratio']:+.2f} |"
        )
    out.append("")
    if factor is None:
        out += ["No published point could be checked: the projections carry no error bar.", ""]
    else:
        lo, hi = check.get("time_ratio_range") or (None, None)
        spread = "" if lo is None else f" (published time / predicted: {lo:.2f} to {hi:.2f})"
        out += [
            f"Model error: x/ {factor:.2f}, the largest |ln(predicted / published)| over the "
            f"{check.get('checked', '?')} checked points{spread}; every projection below "
            "carries it as its band (time x/ the error).",
            "",
        ]
    projections = data.get("projections", [])
    if projections:
        first = projections[0]
        out += [
            f"**Projections**: {first.get('model', '?')}, {first.get('layers', '?')} layers, "
            f"vocabulary {first.get('vocab', '?'):,}, context {first.get('context', '?')}, "
            "ms per token on the K1. Ours: `rvv` (bf16), `rvv-w8a8`, `rvv-w4a8` (INT4 groups "
            "of 128) and `rvv-fp8` (block-scaled e4m3), the modes the records hold; llama.cpp's "
            "rows are its plain-RVV build (no IME) through the same model.",
            "",
            "| mode | threads | compute ms | memory ms | time ms | band ms | tokens/s |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for p in projections:
            out.append(
                f"| {p['mode']} | {p['threads']} | {p['compute_ms']:,.1f} | "
                f"{p['memory_ms']:,.1f} | {p['time_ms']:,.1f} | {_ms_band(p)} | "
                f"{p['tokens_per_s']:.2f} |"
            )
        out.append("")
    refs = data.get("reference_ms") or {}
    if refs:
        out += ["Published K1 figures, for comparison (ms per token):", ""]
        out += [f"- {name}: {ms:,.0f}" for name, ms in refs.items()]
        out.append("")
    return out


# ------------------------------------------------------------------------------ document

PROXIES = """## What these numbers can and cannot say about a RISC-V board

We have no RISC-V board. Every number here is a proxy:

- **Instruction counts under QEMU** (sections 1 and 2) are exact and repeatable, and say how
  much work the RVV code removes compared with scalar code of the same source, and how that
  scales with VLEN. They do not model time: no caches or memory bandwidth, no latency or
  throughput of vector instructions (a VLEN-256 core with a 128-bit datapath takes two
  cycles or more per vector instruction), no in-order pipeline stalls, no threads. On a
  memory-bound step such as decode attention, a board's speed-up can be far below the
  instruction ratio. The DLEN-128 cycle estimate of section 2 is a model stated there,
  not a measurement.
- **The x86 side by side** (section 3) runs the rvv-ops kernels' x86 variant - the same
  kernel sources on the vector layer of the CPU at hand: `x86_avx2` (AVX2 + FMA + F16C, as a
  VLEN-256 unit), `x86_avx512`, `x86_avx512_bf16` (bf16 dot products in decode's q.k and
  extend's matrix products) or `x86_amx` (extend's bf16 matrix products on AMX tiles);
  section 3 names the one that ran - not the RVV code, against torch's x86 kernels (oneDNN
  and ATen's vectorised code for the same CPU). It shows that all three implementations
  agree on the same SGLang batches, and how much of torch_native's cost is structural (a
  Python loop over requests, a gathered copy of every request's K/V, and in extend an
  attention over all `context` positions of which only the new ones are kept). It says
  nothing direct about a board: there torch has no RVV vectorisation at all (PyTorch's ATen
  has no RVV path), so torch_native is relatively slower, while the kernels run their RVV
  variant. Whether the ratios grow or shrink on a board can only be measured on one.
- **The ratios depend on the host.** A ratio is torch_native's time over the kernels' on
  the CPU that ran section 3 (its model, kernel variant and load are named there). Where
  torch has fast kernels for that CPU (AVX-512, bf16 dot products, AMX tiles) the ratios are
  lower even when the kernels' own times are as good or better, and on a shared VM the same
  code's times drift between minutes: compare runs only on the same host, and the targets'
  cases by their medians over many calls. The bandwidth fraction divides by the copy
  bandwidth measured in the same run, which varies between runs as well.
- A board result also depends on its memory system, thread count and clock, none of
  which these proxies contain.

Earlier runs, on this and other hosts, what was measured along the way and what was tried
and not kept: [performance-log.md](performance-log.md).
"""


def _old_sections(doc: Path) -> dict[str, list[str]]:
    """The numbered sections ("## 1." ...) of an existing report, by number, without any
    earlier "kept" line."""
    sections: dict[str, list[str]] = {}
    if not doc.exists():
        return sections
    current: list[str] | None = None
    for line in doc.read_text().splitlines():
        if line.startswith("## "):
            number = line[3:].split(" ", 1)[0]
            current = sections.setdefault(number, []) if number[:1].isdigit() else None
        if current is not None and not line.startswith(KEPT):
            current.append(line)
    return sections


KEPT = "_Kept from an earlier report:"


def _section(
    number: str,
    title: str,
    name: str,
    old: dict[str, list[str]],
    make: Any,
    plt: Any,
    data: Any,
    img: Path,
) -> list[str]:
    """Section `number` from `data` (made by `make`), else the earlier report's, else a
    line saying `build/bench/<name>` was not present."""
    if data is None and number in old:
        body = old[number]
        note = f"{KEPT} this report's run had no `build/bench/{name}`._"
        rest = body[1:]
        while rest and not rest[0].strip():  # the blank lines the last keeping put there
            rest = rest[1:]
        return [body[0], "", note, "", *rest]
    head = [f"## {number} {title}", ""]
    if not data:
        return [*head, f"`build/bench/{name}` was not present: not run.", ""]
    lines: list[str] = make(plt, data, img)
    return head + lines


SECTIONS: tuple[tuple[str, str, str, Callable[[Any, Any, Path], list[str]]], ...] = (
    ("1.", "Kernels: instructions under QEMU, RVV vs scalar (`nox -s bench-kernels`)",
     "kernels.json", kernels_section),
    ("2.", "A decode step on emulated RISC-V (`nox -s bench-e2e-riscv`)",
     "e2e_riscv.json", e2e_section),
    ("3.", "Attention side by side on the x86 machine (`nox -s bench-x86`)",
     "x86.json", x86_section),
    ("4.", "Side by side with llama.cpp on emulated RVV (`nox -s bench-peers`)",
     "peers.json", peers_section),
    ("5.", "A K1 time model (`tools/k1_model.py`, run by `nox -s bench-peers`)",
     "k1_model.json", k1_section),
)  # fmt: skip
"""(number, title, JSON file under build/bench/, the function that renders its data)."""


LOADERS: dict[str, Callable[[Path], Any]] = {"peers.json": _peers_data}
"""Sections whose data is more than their own JSON file: JSON file -> loader(bench_dir)."""


def render(bench_dir: Path, docs: Path) -> str:
    plt = _pyplot()
    img = docs / "performance"
    old = _old_sections(docs / "performance.md")
    lines = [
        "# Performance evidence",
        "",
        "Generated by `nox -s bench-report` (tools/bench_report.py) from the JSON files the",
        "benchmark sessions write under `build/bench/`; do not edit by hand. Report built "
        f"{datetime.datetime.now(datetime.UTC).date().isoformat()}.",
        "",
        "Earlier runs, and what was tried and not kept: [performance-log.md](performance-log.md).",
        "",
    ]
    for number, title, name, make in SECTIONS:
        load = LOADERS.get(name)
        data = load(bench_dir) if load else _load(bench_dir / name)
        lines += _section(number, title, name, old, make, plt, data, img)
    lines += PROXIES.splitlines()
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--bench-dir", type=Path, default=ROOT / "build" / "bench")
    p.add_argument("--docs", type=Path, default=ROOT / "docs")
    a = p.parse_args(argv)
    text = render(a.bench_dir, a.docs)
    out = a.docs / "performance.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out} and {a.docs / 'performance'}/*.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
