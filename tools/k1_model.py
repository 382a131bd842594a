"""A time model of one decoded token on a SpacemiT K1, from emulated instruction counts.

    python tools/k1_model.py [--ours FILE] [--peers FILE] [--out FILE] [--threads T ...]

Projects the time per token of the full Qwen2.5-1.5B (28 layers, vocabulary 151,936) on a K1
from per-token counts of shorter emulated runs - ours (rvv bf16, rvv-w8a8, rvv-w4a8, rvv-
fp8) and llama.cpp's (bench_peers' ``qwen2-1.5b`` decode records, per type) - and checks the
same model against llama.cpp's published BPI-F3 (= K1) figures for TinyLlama-1.1B. Prints a
table, writes JSON (default ``build/bench/k1_model.json``); :func:`report` returns the same
dict for bench-report.

The board (:data:`K1`). 8 SpacemiT X60 cores (in-order, dual-issue, RVV 1.0, VLEN 256,
DLEN 128) at 1.6 GHz in 2 clusters of 4 (512 KiB L2 per cluster), LPDDR4X; ~10.7 GB/s of
memory bandwidth (the issue's figure; not measured here).

The model, per token at T threads:

* compute: ``C / (1.6 GHz x T)``. ``C`` is the token's estimated cycles on one core, the
  DLEN-128 in-order estimate of tools/bench_e2e_riscv.py (``rvvtools.est_cycles``: 1/2
  cycle per scalar instruction, 1 per ``vsetvl``, ``max(1, EMUL x VLEN / 128)`` per other
  vector instruction) of runs at VLEN 256 (the K1's VLEN), one thread. Threads: every part
  of ``C`` is divided by T - the matrix-vector products (which are nearly all of it) split
  their output rows over the threads in both ggml and our kernels, and the 8 cores each
  have their own vector unit; the two clusters share nothing the model counts but DRAM.
  This is optimistic for the parts that do not split: ggml's per-op thread barriers (a few
  hundred per token) and, on our side, the Python / torch dispatch between ops.
* memory: ``B / 10.7 GB/s``, ``B`` the bytes a token must read from DRAM (:func:`token_bytes`):
  every weight of every layer (including quantisation scales and biases/norms), the LM head
  (vocabulary x hidden in its type), the K/V cache rows at the context, the embedding row.
  Activations are assumed to stay in cache. The bandwidth is the chip's, the same for any
  T (one core alone may not reach it: optimistic at T = 1).
* time: ``max(compute, memory)`` - loads stream while the core computes (a roofline). The
  no-overlap sum ``compute + memory`` is printed as well; the point estimate is the max,
  chosen before the check below was run and not changed by it.

Per layer, per vocabulary row, fixed (:func:`split`). ``C`` of the full model comes from
runs at 1 and 2 layers (per layer = the difference) and two vocabularies (per vocabulary
row = the difference / the vocabulary difference; the rest is fixed: embedding, final norm,
argmax, the step's bookkeeping). A run at the full vocabulary, when there is one, is used
directly (full = that run + (layers - its layers) x per layer) and the per-row
extrapolation is checked against it. Per-layer costs are measured at the runs' context
(512 cached rows for ours), and the projection is stated at that context.

The check (:data:`PUBLISHED`, :func:`check`): the same model applied to llama.cpp's emulated
counts (tools/bench_peers.py, ``build/bench/peers.json``) for TinyLlama-1.1B in the types
with published BPI-F3 figures. Its error is ``max |ln(predicted / published)|`` over the
points; every projection carries that factor as its error bar (``time x/ exp(error)``).
Nothing in the model is fitted: the constants are the board's published figures and
rvvtools' cycle estimate, fixed before the check.

Published figures (what could be confirmed, and from where; ``search`` over GitHub threads):

* llama.cpp PR 18859 (ggml-cpu: RVV vec dot kernels for quantization types; merged
  2026-01): BananaPI BPI-F3 (VLEN 256), ``llama-bench``, TinyLlama 1.1B IQ4_NL, RVV vec-dot
  kernels: prefill 9.72 tokens/s at a 32-token prompt (9.76 / 9.02 / 8.99 / 8.86 at 64 /
  128 / 256 / 512), decode 7.94 tokens/s generating 10 tokens after a 32-token prompt
  (7.68 / 7.45 / 7.36 at 16 / 32 / 64). Scalar build: 2.81 / 2.53.
* llama.cpp PR 23745 (RVV repack GEMM/GEMV for Q3_K, Q6_K; open when read): BPI-F3,
  TinyLlama 1.1B Q3_K, decode 9.26 tokens/s (10 tokens) with the vec-dot kernels, 6.04 with
  the PR's repack GEMV (16 tokens: 9.17 / 6.26); prefill 11.52 (vec dot) / 24.9 (repack
  GEMM) at 32 tokens. The vendored llama.cpp of llama-cpp-python 0.3.36 has no RVV Q3_K
  GEMV, so its Q3_K decode runs the vec-dot kernel: 9.26 is the comparable figure.
* llama.cpp PR 18199 (llamafile: RVV sgemm; merged): BPI-F3, TinyLlama 1.1B F16 prefill
  with the sgemm tiles: 13.73 tokens/s at a 128-token prompt with the 2x2 / LMUL 4 tiles (the
  ones the vendored ``sgemm.cpp`` has: ``#define LMUL 4``), 11.31 at 64, 13.37 at 512; the
  vec-dot path 8.78 at 128.
* llama.cpp PR 15288 (SpacemiT IME backend): K1 (``Spacemit(R) X60``, isa string with zvfh),
  4 threads: Qwen2.5-1.5B Q4_0 pp512 24.16, tg128 3.83 tokens/s (0.5B: 64.12 / 10.03; 3B:
  12.08 / 2.23). Uses SpacemiT's IME matrix instructions, which QEMU cannot run: a reference
  figure, not a check point.
* Not confirmed: the thread count of the PR 18859 / 23745 / 18199 runs (their tables have no
  threads column and no command line in the text read). ``llama-bench``'s default ``-t`` is
  ``common_cpu_get_num_math()``, the physical core count - 8 on a K1 - so the check assumes
  8 threads (:data:`PUBLISHED_THREADS`). Their build flags, compiler and whether the decode
  runs used llama-bench's ``-pg`` (a prompt before the generated tokens) or ``-n`` alone are
  not stated either; "Prompt Size = 32" in PR 18859's decode table suggests a 32-token
  context. The IQ4_NL decode figure (January 2026) predates PR 19121 (RVV repack GEMV for
  IQ4_NL, merged 2026-01), which the vendored llama.cpp has: with its default repack
  buffers its IQ4_NL decode runs that GEMV, not the vec dot the 7.94 was measured with.

Inputs - ours: ``build/bench/e2e_riscv_projection.json`` (``tools/bench_e2e_riscv.py
--projection``): records ``{"mode": "rvv"|"rvv-w8a8"|"rvv-w4a8"|"rvv-fp8", "vlen", "layers",
"vocab", "context", "insns_per_token", "est_cycles_per_token"}`` at (layers, vocab) =
(1, 4096), (2, 4096), (1, 16384), (1, 151936), VLEN 256. Per-token weight bytes: rvv bf16,
2 bytes a weight; rvv-w8a8 1 byte a weight + an fp32 scale per output channel; rvv-w4a8 half
a byte a weight + an fp32 scale and a uint8 zero point per 128 weights of a channel; rvv-fp8 1
byte a weight + an fp32 scale per 128 weights of a channel; LM head bf16 in every mode (as
tools/guest/decode_step.py packs them); K/V cache bf16.

Inputs - llama.cpp: ``build/bench/peers.json`` (tools/bench_peers.py), records
``{"peer": "llama.cpp", "kind", "arch", "qtype", "vlen", "layers", "vocab", "context",
"insns_per_token", "est_cycles_per_token"}`` (+ ``"prompt_tokens"`` for prefill; optional
``"output_type"``, else :data:`HEAD_TYPE`). The check needs these runs, one thread, VLEN 256,
``arch`` ``tinyllama-1.1b``, layers 1 AND 2 of each, at its real vocabulary (32000) or,
for decode, at two vocabularies (per-row extrapolation):

* ``kind`` ``decode``, ``qtype`` ``iq4_nl``, context 32 (decode after 32 cached tokens; the
  records at the nearest context are used); if the driver can turn ggml's repack buffers
  off (``use_extra_bufts = false``), that is the path PR 18859 measured - say in the record
  which one ran (``"repack": bool``);
* ``kind`` ``decode``, ``qtype`` ``q3_k``, context 32 (nearest used);
* ``kind`` ``prefill``, ``qtype`` ``iq4_nl``, ``prompt_tokens`` 32;
* ``kind`` ``prefill``, ``qtype`` ``f16``, ``prompt_tokens`` 128 (zvfh build).

Prefill records: ``est_cycles_per_token`` = the cycles of the one ``llama_decode`` of the
prompt / ``prompt_tokens``; one vocabulary is enough (the head runs for the last prompt
token only). Memory for prefill reads the weights once per prompt.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Board:
    """A multi-core board's published figures."""

    name: str
    cores: int
    clusters: int
    ghz: float
    dlen: int
    bandwidth_gbs: float


K1 = Board("SpacemiT K1 (8 X60 cores)", cores=8, clusters=2, ghz=1.6, dlen=128, bandwidth_gbs=10.7)
"""The K1: 8 X60 cores at 1.6 GHz in 2 clusters of 4, DLEN 128, ~10.7 GB/s."""


@dataclass(frozen=True)
class Shape:
    """A decoder's dimensions (a Llama-style layer: q/k/v/o, gate/up/down, 2 RMSNorms)."""

    name: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    layers: int
    vocab: int
    qkv_bias: bool

    def matrices(self) -> list[tuple[int, int]]:
        """(output channels, inputs) of each of a layer's weight matrices."""
        q, kv, h = self.heads * self.head_dim, self.kv_heads * self.head_dim, self.hidden
        return [(q, h), (kv, h), (kv, h), (h, q), (self.ffn, h), (self.ffn, h), (h, self.ffn)]


QWEN = Shape("qwen2.5-1.5b", 1536, 12, 2, 128, 8960, layers=28, vocab=151936, qkv_bias=True)
TINYLLAMA = Shape("tinyllama-1.1b", 2048, 32, 4, 64, 5632, layers=22, vocab=32000, qkv_bias=False)
SHAPES = {"qwen2-1.5b": QWEN, "qwen2.5-1.5b": QWEN, "tinyllama-1.1b": TINYLLAMA}

# Bytes per weight of ggml's types (block bytes / block weights) and ours.
BYTES_PER_WEIGHT = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
    "iq4_nl": 18 / 32,
    "q3_k": 110 / 256,
    "q6_k": 210 / 256,
    "int8": 1.0,
    # Ours: INT4 in groups of 128 along K (rvv-ops' packed nibbles plus, per group and output
    # channel, an fp32 scale and a uint8 zero point); FP8 e4m3 with 128 x 128 block scales
    # (the op expands them to one fp32 per 128 k and channel, which the kernel reads).
    "int4_g128": 0.5 + (4 + 1) / 128,
    "fp8_b128": 1.0 + 4 / 128,
}
HEAD_TYPE = {"f16": "f16", "bf16": "bf16", "q8_0": "q8_0", "q4_0": "q6_k", "iq4_nl": "q6_k",
             "q3_k": "q6_k"}  # fmt: skip
"""llama.cpp's LM head (``output``) type in files of each layer type, as users' files have
it (tools/peers/gguf_models.py writes the same)."""


@dataclass(frozen=True)
class Types:
    """How a model's tensors are stored: layer matrices, per-output-channel scale bytes
    (W8A8), LM head, embedding, norms/biases, K/V cache elements."""

    matrix: str
    channel_scale_bytes: int
    head: str
    embed: str
    small: str
    kv: str


OUR_TYPES = {
    "rvv": Types("bf16", 0, "bf16", "bf16", "bf16", "bf16"),
    "rvv-w8a8": Types("int8", 4, "bf16", "bf16", "bf16", "bf16"),
    "rvv-w4a8": Types("int4_g128", 0, "bf16", "bf16", "bf16", "bf16"),
    "rvv-fp8": Types("fp8_b128", 0, "bf16", "bf16", "bf16", "bf16"),
}


def llama_types(qtype: str, output_type: str | None = None) -> Types:
    """A llama.cpp file's types: matrices in `qtype`, head per HEAD_TYPE (or
    `output_type`), embedding in `qtype`, norms/biases f32, K/V cache f16 (its default)."""
    if qtype not in HEAD_TYPE:
        raise ValueError(f"qtype {qtype!r}: expected one of {sorted(HEAD_TYPE)}")
    return Types(qtype, 0, output_type or HEAD_TYPE[qtype], qtype, "f32", "f16")


def layer_bytes(shape: Shape, types: Types) -> float:
    """Bytes of one layer's weights: matrices (+ channel scales), 2 norms, q/k/v biases."""
    total = 0.0
    for out, inp in shape.matrices():
        total += out * inp * BYTES_PER_WEIGHT[types.matrix] + out * types.channel_scale_bytes
    small = 2 * shape.hidden
    if shape.qkv_bias:
        small += (shape.heads + 2 * shape.kv_heads) * shape.head_dim
    return total + small * BYTES_PER_WEIGHT[types.small]


def token_bytes(
    shape: Shape, types: Types, *, layers: int, vocab: int, context: int, prompt: int = 1
) -> dict[str, float]:
    """DRAM bytes per token, by part: ``layers`` (weights), ``head`` (LM head), ``kv`` (the
    K/V rows read at `context`, plus the new row written), ``embed`` (one embedding row),
    ``total``. `prompt` > 1: a prefill of that many tokens, which reads the weights and the
    head once for all of them (logits of the last token only) and writes one K/V row each."""
    if prompt < 1:
        raise ValueError(f"prompt={prompt}: expected >= 1")
    kv_row = 2 * shape.kv_heads * shape.head_dim * BYTES_PER_WEIGHT[types.kv]  # K and V
    weights = layers * layer_bytes(shape, types) / prompt
    head = vocab * shape.hidden * BYTES_PER_WEIGHT[types.head] / prompt
    kv = layers * kv_row * ((context if prompt == 1 else 0) + 1)
    embed = shape.hidden * BYTES_PER_WEIGHT[types.embed]
    return {"layers": weights, "head": head, "kv": kv, "embed": embed,
            "total": weights + head + kv + embed}  # fmt: skip


@dataclass(frozen=True)
class Split:
    """A token's cost (cycles or instructions) as ``fixed + per_layer x layers + per_row x
    vocab``; ``anchor``: a measured run at a given vocabulary (layers, vocab, cost) used for
    projections to that vocabulary; ``per_row`` None when no two vocabularies were run."""

    per_layer: float
    per_row: float | None
    fixed: float
    anchors: tuple[tuple[int, int, float], ...]

    def at(self, layers: int, vocab: int) -> tuple[float, str]:
        """The cost at (layers, vocab) and how it was obtained: "measured vocabulary" (a run
        at `vocab`, plus per-layer differences) or "per-row extrapolation"."""
        for a_layers, a_vocab, cost in self.anchors:
            if a_vocab == vocab:
                return cost + (layers - a_layers) * self.per_layer, "measured vocabulary"
        if self.per_row is None:
            raise ValueError(
                f"no run at vocabulary {vocab} and no two vocabularies to extrapolate from "
                f"(runs at {sorted({a[1] for a in self.anchors})})"
            )
        return self.fixed + layers * self.per_layer + vocab * self.per_row, (
            "per-row extrapolation"
        )


def split(points: Mapping[tuple[int, int], float], *, exclude_vocab: int | None = None) -> Split:
    """Splits costs measured at (layers, vocab) points into per layer, per vocabulary row and
    fixed parts. Needs two layer counts at one vocabulary; a second vocabulary at one layer
    count gives the per-row part. `exclude_vocab`: runs at this vocabulary are not used for
    the per-row part (so a full-vocabulary run can check the extrapolation)."""
    by_vocab: dict[int, dict[int, float]] = {}
    for (layers, vocab), cost in points.items():
        by_vocab.setdefault(vocab, {})[layers] = cost
    pairs = [(v, sorted(ls)) for v, ls in sorted(by_vocab.items()) if len(ls) >= 2]
    if not pairs:
        raise ValueError(f"need two layer counts at one vocabulary; runs: {sorted(points)}")
    vocab0, (l_a, l_b, *_) = pairs[0]
    per_layer = (by_vocab[vocab0][l_b] - by_vocab[vocab0][l_a]) / (l_b - l_a)
    per_row: float | None = None
    usable = [v for v in sorted(by_vocab) if v != exclude_vocab]
    for v in usable:
        if v == vocab0:
            continue
        common = sorted(set(by_vocab[v]) & set(by_vocab[vocab0]))
        if common:
            lay = common[0]
            per_row = (by_vocab[v][lay] - by_vocab[vocab0][lay]) / (v - vocab0)
            break
    fixed = by_vocab[vocab0][l_a] - l_a * per_layer - vocab0 * (per_row or 0.0)
    anchors = tuple((min(ls), v, ls[min(ls)]) for v, ls in sorted(by_vocab.items()))
    return Split(per_layer, per_row, fixed, anchors)


def timing(cycles: float, nbytes: float, threads: int, board: Board = K1) -> dict[str, float]:
    """Milliseconds per token: ``compute`` (cycles over `threads` cores), ``memory`` (bytes at
    the board's bandwidth), ``time`` = their max, ``sum`` (no overlap), ``tokens_per_s``."""
    if not 1 <= threads <= board.cores:
        raise ValueError(f"threads={threads}: expected 1..{board.cores} ({board.name})")
    compute = cycles / (board.ghz * 1e9 * threads) * 1e3
    memory = nbytes / (board.bandwidth_gbs * 1e9) * 1e3
    time = max(compute, memory)
    return {"compute_ms": compute, "memory_ms": memory, "time_ms": time,
            "sum_ms": compute + memory, "tokens_per_s": 1e3 / time}  # fmt: skip


@dataclass(frozen=True)
class Published:
    """A published BPI-F3 figure the model is checked against."""

    label: str
    arch: str
    qtype: str
    kind: str  # "decode" | "prefill"
    tokens_per_s: float
    context: int  # decode: cached tokens; prefill: 0
    prompt_tokens: int  # prefill: the prompt; decode: 1
    source: str


PUBLISHED_THREADS = 8
"""Threads of the PR 18859 / 23745 / 18199 runs: not stated; llama-bench's default on a K1."""
PUBLISHED = (
    Published("IQ4_NL decode (tg10 after 32)", "tinyllama-1.1b", "iq4_nl", "decode", 7.94, 32, 1,
              "llama.cpp PR 18859, BPI-F3, vec-dot kernels"),
    Published("IQ4_NL prefill (pp32)", "tinyllama-1.1b", "iq4_nl", "prefill", 9.72, 0, 32,
              "llama.cpp PR 18859, BPI-F3"),
    Published("Q3_K decode (tg10)", "tinyllama-1.1b", "q3_k", "decode", 9.26, 32, 1,
              "llama.cpp PR 23745, BPI-F3, vec-dot column (repack GEMV: 6.04)"),
    Published("F16 prefill (pp128)", "tinyllama-1.1b", "f16", "prefill", 13.73, 0, 128,
              "llama.cpp PR 18199, BPI-F3, sgemm 2x2 / LMUL 4"),
)  # fmt: skip
REFERENCE = {
    "llama.cpp Q4_0 + IME, Qwen2.5-1.5B tg128, 4 threads (PR 15288)": 1e3 / 3.83,
    "upstream SGLang RVV bf16, Qwen2.5-1.5B (K1)": 711.0,
    "upstream SGLang RVV W8A8, Qwen2.5-1.5B (K1)": 483.0,
}
"""Published ms per token the projections are compared with (not check points)."""


def _points(records: Iterable[Mapping[str, Any]], key: str) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], float] = {}
    for r in records:
        out[(int(r["layers"]), int(r["vocab"]))] = float(r[key])
    return out


def _output_type(record: Mapping[str, Any]) -> str | None:
    """The LM head's type a llama.cpp record names: ``output_type``, or bench_peers'
    ``model.types.output``; None if neither."""
    model = record.get("model")
    types = model.get("types") if isinstance(model, Mapping) else None
    named = record.get("output_type") or (
        types.get("output") if isinstance(types, Mapping) else None
    )
    return None if named is None else str(named)


def check(peers: Sequence[Mapping[str, Any]], board: Board = K1) -> dict[str, Any]:
    """Predicted against published for every PUBLISHED point with llama.cpp records (VLEN 256,
    its kind/arch/qtype, context or prompt as published); ``error``: max |ln(pred/pub)|
    over the points checked (None if none could be); ``time_ratio_range``: the smallest and
    largest published / predicted time, which says on which side the model errs. Every
    point, checked or not, carries its DRAM bytes per token and the time they take at the
    board's bandwidth (``memory_floor_ms``): a published time below it would refute the
    bandwidth figure."""
    rows: list[dict[str, Any]] = []
    for pub in PUBLISHED:
        recs = [
            r for r in peers
            if r.get("peer", "llama.cpp") == "llama.cpp" and r.get("kind") == pub.kind
            and r.get("arch") == pub.arch and r.get("qtype") == pub.qtype
            and int(r.get("vlen", 0)) == 256
            and (pub.kind != "prefill" or int(r.get("prompt_tokens") or 1) == pub.prompt_tokens)
        ]  # fmt: skip
        if pub.kind == "decode" and recs:
            # Decode runs at the cached length nearest the published one (at these lengths
            # attention is a small part of a token).
            nearest = min({int(r["context"]) for r in recs}, key=lambda c: abs(c - pub.context))
            recs = [r for r in recs if int(r["context"]) == nearest]
        shape = SHAPES[pub.arch]
        types = llama_types(pub.qtype, _output_type(recs[0]) if recs else None)
        nbytes = token_bytes(shape, types, layers=shape.layers, vocab=shape.vocab,
                             context=pub.context, prompt=pub.prompt_tokens)  # fmt: skip
        row: dict[str, Any] = {
            **asdict(pub), "threads": PUBLISHED_THREADS, "bytes_per_token": nbytes["total"],
            "memory_floor_ms": nbytes["total"] / (board.bandwidth_gbs * 1e9) * 1e3,
        }  # fmt: skip
        try:
            sp = split(_points(recs, "est_cycles_per_token"))
            if (
                pub.kind == "prefill"
                and sp.per_row is None
                and shape.vocab not in {a[1] for a in sp.anchors}
            ):
                # Prefill computes logits for the last prompt token only: the head is a
                # 1 / prompt share of a token, so runs at one vocabulary stand for the real.
                cycles, _ = sp.at(shape.layers, sp.anchors[0][1])
                how = f"vocabulary {sp.anchors[0][1]} (head once per prompt)"
            else:
                cycles, how = sp.at(shape.layers, shape.vocab)
        except ValueError as e:
            rows.append({**row, "predicted_tokens_per_s": None, "missing": str(e)})
            continue
        t = timing(cycles, nbytes["total"], PUBLISHED_THREADS, board)
        rows.append({
            **row, "cycles_per_token": cycles, "how": how,
            "counted_context": int(recs[0].get("context", 0)),
            **{k: v for k, v in t.items() if k != "tokens_per_s"},  # keep the published
            "predicted_tokens_per_s": t["tokens_per_s"],
            "log_ratio": math.log(t["tokens_per_s"] / pub.tokens_per_s),
            "repack": recs[0].get("repack"),
        })  # fmt: skip
    ratios = [math.exp(r["log_ratio"]) for r in rows if r.get("predicted_tokens_per_s")]
    return {
        "points": rows,
        "error": max(abs(math.log(x)) for x in ratios) if ratios else None,
        "checked": len(ratios),
        # published time / predicted time, smallest and largest (1 = exact, > 1: the board
        # was slower than predicted)
        "time_ratio_range": [min(ratios), max(ratios)] if ratios else None,
    }


def project(
    ours: Sequence[Mapping[str, Any]],
    peers: Sequence[Mapping[str, Any]] = (),
    *,
    shape: Shape = QWEN,
    threads: Sequence[int] = (1, 4, 8),
    error: float | None = None,
    board: Board = K1,
) -> list[dict[str, Any]]:
    """Projected time per token of `shape` at each of `threads` for each of our modes with
    records at VLEN 256 (see the module docstring) and, from `peers`, each llama.cpp type
    with ``qwen2-1.5b`` decode records at VLEN 256 (``mode`` "llama.cpp <qtype>"); with
    `error`, the band ``time x/ exp(error)``. Also the per-row extrapolation's cycles against
    a full-vocabulary run where there is one (``extrapolation_check``). A mode whose runs
    cannot be split gets one row ``{"mode", "model", "missing": why}``."""
    groups: list[tuple[str, Types, list[Mapping[str, Any]]]] = []
    for mode, types in OUR_TYPES.items():
        recs = [r for r in ours if r.get("mode") == mode and int(r.get("vlen", 0)) == 256
                and r.get("layers") is not None and r.get("vocab") is not None]  # fmt: skip
        groups.append((mode, types, recs))
    for qtype in HEAD_TYPE:
        recs = [r for r in peers if r.get("kind") == "decode" and r.get("arch") == "qwen2-1.5b"
                and r.get("qtype") == qtype and int(r.get("vlen", 0)) == 256
                and r.get("layers") is not None and r.get("vocab") is not None]  # fmt: skip
        groups.append((f"llama.cpp {qtype}", llama_types(qtype), recs))
    out: list[dict[str, Any]] = []
    for mode, types, recs in groups:
        if not recs:
            continue
        contexts = {int(r["context"]) for r in recs}
        if len(contexts) != 1:
            raise ValueError(f"{mode}: records at several contexts {sorted(contexts)}")
        context = contexts.pop()
        try:
            sp = split(_points(recs, "est_cycles_per_token"))
            cycles, how = sp.at(shape.layers, shape.vocab)
            insns, _ = split(_points(recs, "insns_per_token")).at(shape.layers, shape.vocab)
        except ValueError as e:
            out.append({"mode": mode, "model": shape.name, "missing": str(e)})
            continue
        parts = {"per_layer": sp.per_layer, "per_vocab_row": sp.per_row, "fixed": sp.fixed}
        ext = split(_points(recs, "est_cycles_per_token"), exclude_vocab=shape.vocab)
        extrapolation = None
        if how == "measured vocabulary" and ext.per_row is not None:
            predicted = ext.fixed + shape.layers * ext.per_layer + shape.vocab * ext.per_row
            extrapolation = {"extrapolated": predicted, "measured": cycles,
                             "ratio": predicted / cycles}  # fmt: skip
        nbytes = token_bytes(shape, types, layers=shape.layers, vocab=shape.vocab,
                             context=context)  # fmt: skip
        for t in threads:
            tm = timing(cycles, nbytes["total"], t, board)
            band = None
            if error is not None:
                band = [tm["time_ms"] / math.exp(error), tm["time_ms"] * math.exp(error)]
            out.append({
                "mode": mode, "model": shape.name, "layers": shape.layers,
                "vocab": shape.vocab, "context": context, "threads": t,
                "cycles_per_token": cycles, "insns_per_token": insns, "how": how,
                "cycles_split": parts, "extrapolation_check": extrapolation,
                "bytes_per_token": nbytes, **tm, "time_ms_band": band,
            })  # fmt: skip
    return out


def _load(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of records")
    return data


def report(ours_file: Path, peers_file: Path, threads: Sequence[int] = (1, 4, 8)) -> dict[str, Any]:
    """The check and the projections from the two record files (either may be missing)."""
    peers = _load(peers_file)
    chk = check(peers)
    proj = project(_load(ours_file), peers, threads=threads, error=chk["error"])
    return {
        "board": asdict(K1), "published_threads": PUBLISHED_THREADS, "check": chk,
        "projections": proj, "reference_ms": REFERENCE,
        "inputs": {"ours": str(ours_file), "peers": str(peers_file)},
    }  # fmt: skip


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    bench = REPO / "build" / "bench"
    parser.add_argument("--ours", type=Path, default=bench / "e2e_riscv_projection.json")
    parser.add_argument("--peers", type=Path, default=bench / "peers.json")
    parser.add_argument("--out", type=Path, default=bench / "k1_model.json")
    parser.add_argument("--threads", type=int, action="append", help="default 1 4 8")
    args = parser.parse_args(argv)
    threads = args.threads or [1, 4, 8]
    for t in threads:
        if not 1 <= t <= K1.cores:
            parser.error(f"--threads {t}: expected 1..{K1.cores}")
    rep = report(args.ours, args.peers, threads)
    chk = rep["check"]
    print(f"check against published BPI-F3 figures ({PUBLISHED_THREADS} threads assumed):")
    for p in chk["points"]:
        if p["predicted_tokens_per_s"] is None:
            print(f"  {p['label']:<30} published {p['tokens_per_s']:6.2f} tok/s "
                  f"({1e3 / p['tokens_per_s']:.1f} ms; memory floor {p['memory_floor_ms']:.1f} "
                  f"ms): not checked ({p['missing']})")  # fmt: skip
            continue
        print(f"  {p['label']:<30} published {p['tokens_per_s']:6.2f}, predicted "
              f"{p['predicted_tokens_per_s']:6.2f} tok/s (compute {p['compute_ms']:.1f} ms, "
              f"memory {p['memory_ms']:.1f} ms), ln ratio {p['log_ratio']:+.2f}")  # fmt: skip
    err = chk["error"]
    print(f"model error: {'not checked' if err is None else f'x/ {math.exp(err):.2f}'}")
    if chk["time_ratio_range"] is not None:
        lo, hi = chk["time_ratio_range"]
        print(f"published time / predicted time: {lo:.2f} to {hi:.2f}")
    print(f"\n{'mode':<15} {'T':>2} {'compute ms':>10} {'memory ms':>9} {'time ms':>8} "
          f"{'band ms':>15} {'tok/s':>6} {'sum ms':>7}  how")  # fmt: skip
    for p in rep["projections"]:
        if "missing" in p:
            print(f"{p['mode']:<15} not projected: {p['missing']}")
            continue
        band = p["time_ms_band"]
        band_s = "-" if band is None else f"{band[0]:.0f}-{band[1]:.0f}"
        print(f"{p['mode']:<15} {p['threads']:>2} {p['compute_ms']:>10.1f} "
              f"{p['memory_ms']:>9.1f} {p['time_ms']:>8.1f} {band_s:>15} "
              f"{p['tokens_per_s']:>6.2f} {p['sum_ms']:>7.1f}  {p['how']}")  # fmt: skip
    for p in rep["projections"]:
        if p.get("threads") == threads[0]:
            s, ext = p["cycles_split"], p["extrapolation_check"]
            print(f"{p['mode']}: per layer {_fmt(s['per_layer'] / 1e6)} M cycles, per vocab "
                  f"row {_fmt(None if s['per_vocab_row'] is None else s['per_vocab_row'], '.0f')}"
                  f" cycles, fixed {_fmt(s['fixed'] / 1e6)} M; full model "
                  f"{p['cycles_per_token'] / 1e6:.0f} M cycles, "
                  f"{p['bytes_per_token']['total'] / 1e6:.0f} MB per token"
                  + ("" if ext is None else
                     f"; per-row extrapolation / measured = {ext['ratio']:.3f}"))  # fmt: skip
    print("published, for comparison (ms per token on a K1): " + "; ".join(
        f"{k} {v:.0f}" for k, v in REFERENCE.items()))  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rep, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
