"""Attention side by side on this (x86-64) machine: SGLang's torch_native vs rvv.

One process, the same inputs for every implementation: Qwen2.5-1.5B's attention shapes
(12 query heads, 2 KV heads, head dim 128), a bf16 KV cache in SGLang's own pools
(``MHATokenToKVPool``, ``ReqToTokenPool``, page size 1, every request's tokens at rows of a
random permutation of the pool, as a long-running server's allocator leaves them), for
batch x context in {1, 4, 16} x {512, 2048, 8192}, decode and extend; decode at context
8192 also with each request's tokens at consecutive rows (layout ``contiguous``: as a fresh
server's allocator hands them out, free rows in order):

- ``torch_native``: SGLang's own ``TorchNativeAttnBackend`` (the real class) on hand-built
  ``ForwardBatch``es; timed: ``init_forward_metadata`` + ``forward_decode`` /
  ``forward_extend`` (including its ``set_kv_buffer`` of the new tokens).
- ``rvv_fallback``: rvv-attention's torch-native fallback (``ra.decode`` / ``ra.extend``
  with ``RVV_ATTENTION_IMPL=fallback``).
- ``rvv_kernel``: the rvv-ops kernels through rvv-attention's kernel path (``ra.decode`` /
  ``ra.extend`` with ``RVV_ATTENTION_IMPL=kernel``, which raises instead of falling back),
  i.e. ``torch.ops.sgl_kernel.decode_attention_cpu`` / ``extend_attention_cpu``; on x86 the
  kernels' ``x86_amx`` variant where the CPU has AMX (extend's bf16 matrix products on AMX
  tiles, the rest as ``x86_avx512_bf16``), ``x86_avx512_bf16`` where it has AVX512-BF16
  (bf16 dot products in decode's q.k and extend's matrix products, the rest as
  ``x86_avx512``), ``x86_avx512`` where it has AVX-512 (the same kernel sources on the
  AVX-512 vector layer), ``x86_avx2`` where it has AVX2 + FMA + F16C (on the AVX2 vector
  layer), else their portable path (plain C++ emulating a 256-bit vector unit); the JSON's
  ``machine.rvv_ops_build.active_variant`` says which ran.

Decode: one new token per request after ``context - 1`` cached ones (the new K/V are written
at their rows, then attended with the other ``context - 1``). Extend: ``min(512, context)``
new tokens per request after a cached prefix of ``context - 512`` tokens (chunked prefill /
a prefix-cache hit followed by a 512-token chunk; at context 512 a full prefill).

Per case every implementation runs once untimed and its output is compared with
torch_native's (bf16 tolerance, atol = rtol = 2e-2; non-finite values fail), so a fast but
wrong path cannot win; then ``repeats`` timed calls, the implementations interleaved call by
call so load changes hit them alike; the medians are reported. The cases the targets below
name get at least ``target_repeats`` (11) timed calls: a shared VM's speed drifts between
minutes, and a few calls leave a ratio at the mercy of that drift. Before each timed decode
call a buffer twice the size of the last-level cache is read (a real model's 28 layers do
not keep one layer's KV cache in cache between decode steps; what they do in between is
read their weights and KV caches, which leaves clean lines in the caches - a written buffer
would leave dirty lines whose write-back the next call would pay for). What these choices
changed on particular hosts is in docs/performance-log.md.

``ratio_vs_torch_native`` = torch_native's median / this implementation's median (> 1:
faster). ``bandwidth_fraction`` (decode only) = effective KV bandwidth / copy bandwidth:
bytes of K and V the step must read (batch x context x 2 KV heads x (128 + 128) x 2 bytes)
per second of the median, over the copy bandwidth measured in the same run (a torch copy
of a uint8 tensor at least twice the last-level cache, bytes read + bytes written per
second, median of several copies at the start and at the end).

Two measurements say what bounds the decode's bandwidth fraction on the machine at hand
(``ceilings``, when decode runs): ``in_cache``, rvv_kernel's decode with its K/V rows in the
last-level cache (calls back to back, no flush), whose fraction estimates what the kernel's
compute allows here (each bandwidth target records it as ``ceiling``) - an estimate, not a
hard bound: it is measured minutes apart from the DRAM cases, at a shorter context (more of
each call is fixed cost), and a shared VM's speed drifts between minutes, so a DRAM case
can even exceed it; and ``call_floor``, a decode of one 16-token request, warm and after the
flush: the fixed cost of a call, which a small batch pays on top of reading K/V (after the
flush, mostly the code and data of the call path coming back from DRAM).

Writes ``build/bench/x86.json``: ``{"machine", "method", "copy_bandwidth", "numerics",
"ceilings", "targets", "skipped", "samples", "records"}``, ``records`` a list of ``{"op",
"batch", "context", "layout", "impl", "median_s", "ratio_vs_torch_native",
"bandwidth_fraction"}`` (null where not applicable; ``layout`` ``random`` or
``contiguous``), and prints a table. Nothing here asserts a timing.

Usage: python tools/bench_x86.py [--quick] [--out FILE] [--repeats N] [--target-repeats N]
       [--budget S]
       [--batch B ...] [--context C ...] [--op decode|extend ...] [--skip OP:B:C ...]
       [--time-limit MIN] [--contiguous-context C ...]
(``--quick``: batch {1, 4} x context {512}, 2 repeats, decode also contiguous: a smoke
check of the harness. ``--contiguous-context 0``: no contiguous cases.
Cases run decode first, then extend, each in order of growing work; with ``--time-limit``
a case predicted to end after the limit is left out and listed in ``skipped``.)
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rvvtools  # tools/ is sys.path[0]: this file runs as a script
import torch

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "build" / "bench" / "x86.json"
# The cases come from the conformance suite's matrix (its perf mode): tests/conformance.
sys.path.insert(0, str(ROOT / "tests"))
from conformance.cases import (  # noqa: E402
    PERF_BATCHES,
    PERF_CONTEXTS,
    PERF_DIMS,
    PERF_DTYPE,
    PERF_EXTEND_NEW,
    PERF_HEADS,
    PERF_QUICK,
    ExtendCase,
    perf_case,
)

# Qwen2.5-1.5B's attention: 12 query heads, 2 KV heads, head dim 128.
HQ, HKV = PERF_HEADS
HEAD_DIM = PERF_DIMS[0]
KV_DTYPE = PERF_DTYPE
EXTEND_NEW = PERF_EXTEND_NEW
BATCHES = PERF_BATCHES
CONTEXTS = PERF_CONTEXTS
OPS = ("decode", "extend")
# Where each request's tokens sit in the pool: rows of a random permutation (every case),
# or consecutive rows (decode at the contexts of --contiguous-context).
LAYOUTS = ("random", "contiguous")
CONTIGUOUS_CONTEXTS = (8192,)
IMPLS = ("torch_native", "rvv_fallback", "rvv_kernel")
# RVV_ATTENTION_IMPL for the rvv-attention implementations.
IMPL_MODES = {"torch_native": None, "rvv_fallback": "fallback", "rvv_kernel": "kernel"}
ATOL = RTOL = 2e-2
TARGETS = (
    # (what, op, batch, context, layout, field, threshold)
    ("decode >= 10x over torch_native at batch 16 / context 2048", "decode", 16, 2048, "random",
     "ratio", 10),
    ("extend >= 3x over torch_native at batch 4 / context 2048", "extend", 4, 2048, "random",
     "ratio", 3),
    *(
        (f"decode bandwidth fraction >= 0.5 at context 8192, batch {b}, {layout} rows", "decode",
         b, 8192, layout, "bw", 0.5)
        for layout in LAYOUTS
        for b in (1, 4, 16)
    ),
)  # fmt: skip
# The cases the targets name (op, batch, context, layout).
TARGET_CASES = frozenset((t[1], t[2], t[3], t[4]) for t in TARGETS)
TARGET_REPEATS = 11


# ------------------------------------------------------------------------------ machine


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _llc_bytes() -> int:
    """The largest cache's size from sysfs (64 MiB if unknown)."""
    best = 0
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for size_file in base.glob("index*/size"):
        text = size_file.read_text().strip()
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * mult)
    return best or 64 << 20


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_facts() -> dict[str, Any]:
    import rvv_ops

    sglang = importlib.import_module("sglang")
    return {
        "cpu_model": _cpu_model(),
        "arch": platform.machine(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "llc_bytes": _llc_bytes(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "sglang": str(getattr(sglang, "__version__", "?")),
        "rvv_ops_build": dict(rvv_ops.build_info()),
        **rvvtools.run_stamp(),
        "uptime_start": _uptime(),
        "loadavg_start": list(os.getloadavg()),
    }


def copy_bandwidth(nbytes: int, repeats: int) -> list[float]:
    """(bytes read + bytes written) / s of ``dst.copy_(src)`` for uint8 tensors of nbytes."""
    src = torch.empty(nbytes, dtype=torch.uint8)
    src.fill_(1)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touch every page first
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        rates.append(2 * nbytes / (time.perf_counter() - t0))
    del src, dst
    return rates


# ------------------------------------------------------------------------------ set-up


def _sglang() -> dict[str, Any]:
    """SGLang's classes (imported here: ``SGLANG_USE_CPU_ENGINE`` must be set first).

    SGLang takes the Intel AMX paths when the CPU has AMX tiles and ``sgl_kernel`` has
    ``convert_weight_packed``; rvv-ops defines that op, so on an AMX x86 host SGLang would
    call sgl-kernel AMX ops rvv-ops does not have (``store_cache_cpu`` in the pool's
    ``set_kv_buffer``). sglang-rvv's start-up hook keeps SGLang's AMX check False while
    ``sgl_kernel`` is its stand-in, as on a RISC-V CPU (torch's own kernels are unaffected);
    this checks that it did.
    """
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    utils = importlib.import_module("sglang.srt.utils")
    if utils.cpu_has_amx_support():
        raise RuntimeError(
            "SGLang would take its Intel AMX paths here (sgl-kernel ops rvv-ops lacks): "
            "install sglang-rvv, whose start-up hook prevents it (SGLANG_RVV_SHIMS must not be 0)"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tn = importlib.import_module("sglang.srt.layers.attention.torch_native_backend")
        radix = importlib.import_module("sglang.srt.layers.radix_attention")
        pools = importlib.import_module("sglang.srt.mem_cache.memory_pool")
        fbi = importlib.import_module("sglang.srt.model_executor.forward_batch_info")
    return {
        "TorchNativeAttnBackend": tn.TorchNativeAttnBackend,
        "RadixAttention": radix.RadixAttention,
        "MHATokenToKVPool": pools.MHATokenToKVPool,
        "ReqToTokenPool": pools.ReqToTokenPool,
        "ForwardBatch": fbi.ForwardBatch,
        "ForwardMode": fbi.ForwardMode,
    }


@dataclass
class Pools:
    """Real SGLang pools holding ``batch`` requests of ``context`` tokens each."""

    batch: int
    context: int
    layout: str
    runner: Any
    layer: Any
    k_buffer: torch.Tensor
    v_buffer: torch.Tensor
    req_to_token: torch.Tensor


def make_pools(sg: dict[str, Any], batch: int, context: int, layout: str, seed: int) -> Pools:
    from types import SimpleNamespace

    gen = torch.Generator().manual_seed(seed)
    tokens = batch * context
    r2t = sg["ReqToTokenPool"](
        size=batch, max_context_len=context, device="cpu", enable_memory_saver=False
    )
    kv = sg["MHATokenToKVPool"](
        size=tokens,
        page_size=1,
        dtype=KV_DTYPE,
        head_num=HKV,
        head_dim=HEAD_DIM,
        layer_num=1,
        device="cpu",
        enable_memory_saver=False,
        enable_alt_stream=False,
    )
    # Row 0 is SGLang's padding slot; requests get rows 1..tokens, in random order or in
    # order (request i: rows i * context + 1 ..).
    if layout == "random":
        rows = torch.randperm(tokens, generator=gen) + 1
    else:
        rows = torch.arange(1, tokens + 1)
    r2t.req_to_token[:batch, :context] = rows.view(batch, context).to(r2t.req_to_token.dtype)
    k_buf: torch.Tensor = kv.get_key_buffer(0)
    v_buf: torch.Tensor = kv.get_value_buffer(0)
    k_buf.copy_(torch.randn(k_buf.shape, generator=gen).to(KV_DTYPE))
    v_buf.copy_(torch.randn(v_buf.shape, generator=gen).to(KV_DTYPE))
    # As the rvv backend does at start-up (SGLANG_RVV_HUGE_PAGES); every impl reads these.
    import rvv_attention as ra

    ra.advise_huge_pages(k_buf, v_buf)
    layer = sg["RadixAttention"](
        num_heads=HQ, head_dim=HEAD_DIM, scaling=HEAD_DIM**-0.5, num_kv_heads=HKV, layer_id=0
    )
    # TorchNativeAttnBackend reads exactly these three attributes of its model runner.
    runner = SimpleNamespace(device="cpu", req_to_token_pool=r2t, token_to_kv_pool=kv)
    return Pools(batch, context, layout, runner, layer, k_buf, v_buf, r2t.req_to_token)


@dataclass
class Case:
    """One batch (decode or extend) over ``Pools`` and the calls of each implementation."""

    op: str
    pools: Pools
    calls: dict[str, Callable[[], torch.Tensor]]
    kv_bytes: int


def make_case(sg: dict[str, Any], pools: Pools, op: str, seed: int) -> Case:
    import rvv_attention as ra

    gen = torch.Generator().manual_seed(seed)
    b, c = pools.batch, pools.context
    case = perf_case(op, b, c)
    new = case.reqs[0][1] if isinstance(case, ExtendCase) else 1
    prefix = c - new
    n = b * new
    seq = torch.full((b,), c, dtype=torch.int64)
    loc = pools.req_to_token[:b, prefix:c].reshape(-1).to(torch.int64)
    mode = sg["ForwardMode"].DECODE if op == "decode" else sg["ForwardMode"].EXTEND
    fb = sg["ForwardBatch"](
        forward_mode=mode,
        batch_size=b,
        input_ids=torch.zeros(n, dtype=torch.int64),
        req_pool_indices=torch.arange(b, dtype=torch.int64),
        seq_lens=seq,
        seq_lens_cpu=seq.clone(),
        out_cache_loc=loc,
        seq_lens_sum=b * c,
        positions=torch.arange(prefix, c, dtype=torch.int64).repeat(b),
    )
    ext_lens = torch.full((b,), new, dtype=torch.int32)
    ext_start = torch.arange(b, dtype=torch.int32) * new
    if op == "extend":
        fb.extend_prefix_lens = torch.full((b,), prefix, dtype=torch.int32)
        fb.extend_prefix_lens_cpu = [prefix] * b
        fb.extend_seq_lens = ext_lens
        fb.extend_seq_lens_cpu = [new] * b
        fb.extend_start_loc = ext_start
        fb.extend_num_tokens = n
    q = torch.randn(n, HQ * HEAD_DIM, generator=gen).to(KV_DTYPE)
    k = torch.randn(n, HKV, HEAD_DIM, generator=gen).to(KV_DTYPE)
    v = torch.randn(n, HKV, HEAD_DIM, generator=gen).to(KV_DTYPE)
    q3 = q.view(n, HQ, HEAD_DIM)
    out = torch.empty(n, HQ, HEAD_DIM, dtype=KV_DTYPE)
    cache = ra.KVCache(pools.k_buffer, pools.v_buffer)
    backend = sg["TorchNativeAttnBackend"](pools.runner)
    layer = pools.layer
    scale = HEAD_DIM**-0.5
    r2t, rpi = pools.req_to_token, fb.req_pool_indices

    def torch_native() -> torch.Tensor:
        backend.init_forward_metadata(fb)
        if op == "decode":
            res: torch.Tensor = backend.forward_decode(q, k, v, layer, fb)
        else:
            res = backend.forward_extend(q, k, v, layer, fb)
        return res

    def rvv() -> torch.Tensor:
        if op == "decode":
            ra.decode(q3, cache, out, r2t, rpi, seq, sm_scale=scale, loc=loc, key=k, value=v)
        else:
            ra.extend(
                q3, k, v, cache, out, r2t, rpi, seq, ext_lens, sm_scale=scale,
                extend_start_loc=ext_start, out_cache_loc=loc, max_extend_len=new,
            )  # fmt: skip
        return out.view(n, HQ * HEAD_DIM)

    kv_bytes = b * c * HKV * 2 * HEAD_DIM * KV_DTYPE.itemsize
    calls = {"torch_native": torch_native, "rvv_fallback": rvv, "rvv_kernel": rvv}
    return Case(op, pools, calls, kv_bytes)


def set_impl_mode(impl: str) -> None:
    """Points rvv-attention at the implementation ``impl`` stands for (outside the timing)."""
    import rvv_attention as ra

    mode = IMPL_MODES[impl]
    if mode is None:
        return
    # rvv-attention reads the mode on every call (its selection cache is keyed by it).
    os.environ[ra.ENV_IMPL] = mode


# ------------------------------------------------------------------------------ ceilings

# Timed calls for each ceiling measurement (back to back, medians).
CEILING_CALLS = 21


def _time_calls(call: Callable[[], object], n: int, before: Callable[[], object] | None) -> float:
    """Median seconds of n calls of ``call`` (each after ``before()``, untimed, if given)."""
    times = []
    for _ in range(n):
        if before is not None:
            before()
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def ceilings(sg: dict[str, Any], llc: int, flush: torch.Tensor) -> dict[str, Any]:
    """What bounds rvv_kernel's decode on this machine, whatever the memory does.

    - ``in_cache``: the decode with its K/V rows in the last-level cache (batch 4, a context
      whose K/V take at most a quarter of the LLC, random rows, calls back to back, no
      flush): its K/V bytes per second estimate what the kernel's compute allows; well
      below a bandwidth target, the target is out of reach on this machine. Not a hard
      bound (see the module docstring: other context, other minutes).
    - ``call_floor``: one request of 16 tokens (next to no K/V to read), warm and after the
      cache flush the timed decode calls get: the fixed cost of a call (Python, dispatch, the
      op, its threads), which a small batch pays on top of reading K/V.
    """
    set_impl_mode("rvv_kernel")
    batch = 4
    row_bytes = HKV * 2 * HEAD_DIM * KV_DTYPE.itemsize
    context = max(64, min(8192, llc // 4 // (batch * row_bytes) // 64 * 64))
    pools = make_pools(sg, batch, context, "random", seed=17)
    case = make_case(sg, pools, "decode", seed=18)
    call = case.calls["rvv_kernel"]
    for _ in range(3):
        call()
    in_cache = _time_calls(call, CEILING_CALLS, None)
    small = make_case(sg, make_pools(sg, 1, 16, "random", seed=19), "decode", seed=20)
    tiny = small.calls["rvv_kernel"]
    tiny()
    warm = _time_calls(tiny, CEILING_CALLS, None)
    cold = _time_calls(tiny, CEILING_CALLS, flush.max)
    return {
        "in_cache": {
            "definition": "rvv_kernel decode with its K/V rows in the last-level cache (random "
            "rows, calls back to back, no flush); bandwidth_fraction as for the records",
            "batch": batch,
            "context": context,
            "layout": "random",
            "median_s": in_cache,
            "kv_bytes": case.kv_bytes,
        },
        "call_floor": {
            "definition": "rvv_kernel decode of one request of 16 tokens: warm (calls back to "
            "back) and after the flush the timed decode calls get",
            "batch": 1,
            "context": 16,
            "warm_s": warm,
            "after_flush_s": cold,
        },
    }


# ------------------------------------------------------------------------------ running


@dataclass
class Options:
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    ops: tuple[str, ...]
    repeats: int
    skip: frozenset[tuple[str, int, int]]
    copy_bytes: int
    flush_bytes: int
    copy_repeats: int
    budget: float
    time_limit: float | None
    contiguous: tuple[int, ...]  # decode contexts also run with the contiguous layout
    target_repeats: int = 0  # at least this many timed calls in the cases TARGETS names


def parse(argv: list[str] | None) -> tuple[Options, Path, bool]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="batch {1, 4} x context {512}, 2 repeats")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON file ({DEFAULT_OUT})")
    p.add_argument("--repeats", type=int, help="timed calls per case and implementation (5)")
    p.add_argument(
        "--target-repeats", type=int,
        help="at least this many timed calls in the cases the targets name (11; --quick: 0)",
    )  # fmt: skip
    p.add_argument(
        "--budget", type=float, default=30.0,
        help="seconds per case: fewer repeats (at least 3) where one round takes longer (30)",
    )  # fmt: skip
    p.add_argument("--batch", type=int, action="append", help="batch sizes (1, 4, 16)")
    p.add_argument("--context", type=int, action="append", help="context lengths (512 2048 8192)")
    p.add_argument("--op", choices=OPS, action="append", help="decode and/or extend (both)")
    p.add_argument(
        "--time-limit", type=float, metavar="MIN",
        help="do not start a case predicted (from the previous case of its op, scaled by its "
        "work) to end after MIN minutes; such cases are listed in 'skipped'",
    )  # fmt: skip
    p.add_argument(
        "--contiguous-context", type=int, action="append", metavar="C",
        help="decode at context C also with each request's tokens at consecutive rows "
        "(8192; --quick: 512; 0: none)",
    )  # fmt: skip
    p.add_argument(
        "--skip", action="append", default=[], metavar="OP:B:C",
        help="leave out one case, e.g. extend:16:8192 (recorded in the JSON's 'skipped')",
    )  # fmt: skip
    a = p.parse_args(argv)
    llc = _llc_bytes()
    limit = None if a.time_limit is None else 60.0 * a.time_limit
    skip = set()
    for item in a.skip:
        op, b, c = item.split(":")
        skip.add((op, int(b), int(c)))
    if a.quick:
        small = 64 << 20
        opts = Options(
            *PERF_QUICK, OPS, 2, frozenset(skip), small, small, 3, a.budget, limit, PERF_QUICK[1]
        )
    else:
        big = max(512 << 20, 2 * llc)
        opts = Options(
            BATCHES, CONTEXTS, OPS, 5, frozenset(skip), big, big, 5, a.budget, limit,
            CONTIGUOUS_CONTEXTS, TARGET_REPEATS,
        )  # fmt: skip
    if a.batch:
        opts.batches = tuple(a.batch)
    if a.context:
        opts.contexts = tuple(a.context)
    if a.op:
        opts.ops = tuple(a.op)
    if a.repeats:
        opts.repeats = a.repeats
    if a.target_repeats is not None:
        opts.target_repeats = a.target_repeats
    if a.contiguous_context:
        opts.contiguous = tuple(c for c in a.contiguous_context if c > 0)
    return opts, a.out, a.quick


def _work(op: str, b: int, c: int) -> float:
    """A case's relative cost: K/V rows read x query rows (decode: 1, extend: new tokens)."""
    return b * c * (1 if op == "decode" else min(EXTEND_NEW, c))


def check(
    op: str, b: int, c: int, layout: str, outs: dict[str, torch.Tensor]
) -> list[dict[str, Any]]:
    """Each rvv implementation's output against torch_native's."""
    ref = outs["torch_native"].double()
    rows = []
    for impl in IMPLS[1:]:
        got = outs[impl].double()
        finite = bool(torch.isfinite(got).all() and torch.isfinite(ref).all())
        diff = float((got - ref).abs().max()) if finite else math.inf
        ok = finite and bool(torch.allclose(got, ref, atol=ATOL, rtol=RTOL))
        rows.append(
            {"op": op, "batch": b, "context": c, "layout": layout, "impl": impl,
             "vs": "torch_native", "max_abs_diff": diff, "ok": ok}
        )  # fmt: skip
    return rows


def run(opts: Options) -> dict[str, Any]:
    tqdm: Any = importlib.import_module("tqdm").tqdm
    sg = _sglang()
    facts = machine_facts()
    copies = copy_bandwidth(opts.copy_bytes, opts.copy_repeats)
    flush = torch.empty(opts.flush_bytes, dtype=torch.uint8)
    flush.fill_(1)  # touched once; read (not written) before each timed decode call
    bounds = ceilings(sg, facts["llc_bytes"], flush) if "decode" in opts.ops else None

    # Decode first (cheap, and every decode target), then extend; each by growing work, so
    # a --time-limit cuts the largest cases.
    # A contiguous case right after its random one (same batch and context).
    grid = sorted(
        (
            (op, b, c, layout)
            for b in opts.batches
            for c in opts.contexts
            for op in opts.ops
            for layout in LAYOUTS
            if (op, b, c) not in opts.skip
            and (layout == "random" or (op == "decode" and c in opts.contiguous))
        ),
        key=lambda k: (OPS.index(k[0]), _work(*k[:3]), k[1], LAYOUTS.index(k[3])),
    )
    skipped = [
        {"op": op, "batch": b, "context": c, "reason": "left out with --skip (every layout)"}
        for (op, b, c) in sorted(opts.skip)
    ]
    samples: dict[tuple[str, int, int, str, str], list[float]] = {}
    kv_bytes: dict[tuple[str, int, int, str], int] = {}
    numerics: list[dict[str, Any]] = []
    done: list[tuple[str, int, int, str]] = []
    last: dict[str, tuple[float, float]] = {}  # op -> (work, seconds) of its latest case
    bar = tqdm(
        total=len(grid) * len(IMPLS) * (1 + opts.repeats), unit="call", file=sys.stderr,
        mininterval=1.0, dynamic_ncols=True,
    )  # fmt: skip
    pools: Pools | None = None
    start = time.monotonic()
    with torch.inference_mode():
        for op, b, c, layout in grid:
            work = _work(op, b, c)
            name = f"{op} batch {b} context {c}" + (f" {layout}" if layout != "random" else "")
            if opts.time_limit is not None and op in last:
                predicted = last[op][1] * work / last[op][0]
                if time.monotonic() - start + predicted > opts.time_limit:
                    skipped.append(
                        {"op": op, "batch": b, "context": c, "layout": layout,
                         "reason": f"the run's time limit ({opts.time_limit / 60:g} min) would "
                         f"have been exceeded (about {predicted:.0f} s predicted)"}
                    )  # fmt: skip
                    bar.total -= len(IMPLS) * (1 + opts.repeats)
                    continue
            t_case = time.monotonic()
            if pools is None or (pools.batch, pools.context, pools.layout) != (b, c, layout):
                pools = None
                gc.collect()
                pools = make_pools(sg, b, c, layout, seed=1000 * b + c)
            case = make_case(sg, pools, op, seed=7 * b + c + (op == "extend"))
            kv_bytes[(op, b, c, layout)] = case.kv_bytes
            bar.set_postfix_str(f"{name}: check")
            outs = {}
            t_check = time.perf_counter()
            for impl in IMPLS:
                set_impl_mode(impl)
                outs[impl] = case.calls[impl]().clone()
                bar.update(1)
            t_check = time.perf_counter() - t_check
            numerics += check(op, b, c, layout, outs)
            del outs
            # Long cases get fewer repeats (at least 3): about budget seconds per case;
            # the targets' cases at least target_repeats.
            reps = max(min(3, opts.repeats), min(opts.repeats, int(opts.budget / t_check)))
            if (op, b, c, layout) in TARGET_CASES:
                reps = max(reps, opts.target_repeats)
            bar.total -= (opts.repeats - reps) * len(IMPLS)
            bar.set_postfix_str(name)
            for _ in range(reps):
                for impl in IMPLS:
                    call = case.calls[impl]
                    set_impl_mode(impl)
                    if op == "decode":
                        flush.max()
                    t0 = time.perf_counter()
                    call()
                    dt = time.perf_counter() - t0
                    samples.setdefault((op, b, c, layout, impl), []).append(dt)
                    bar.update(1)
            del case
            done.append((op, b, c, layout))
            last[op] = (work, time.monotonic() - t_case)
    bar.close()
    del pools, flush
    gc.collect()
    copies += copy_bandwidth(opts.copy_bytes, opts.copy_repeats)
    facts["uptime_end"] = _uptime()
    facts["loadavg_end"] = list(os.getloadavg())
    copy_bw = statistics.median(copies)
    if bounds is not None:
        ic = bounds["in_cache"]
        ic["bandwidth_fraction"] = ic["kv_bytes"] / ic["median_s"] / copy_bw

    records = []
    for op, b, c, layout in sorted(
        done, key=lambda k: (OPS.index(k[0]), k[1], k[2], LAYOUTS.index(k[3]))
    ):
        base = statistics.median(samples[(op, b, c, layout, "torch_native")])
        for impl in IMPLS:
            med = statistics.median(samples[(op, b, c, layout, impl)])
            bw = kv_bytes[(op, b, c, layout)] / med / copy_bw if op == "decode" else None
            records.append(
                {
                    "op": op,
                    "batch": b,
                    "context": c,
                    "layout": layout,
                    "impl": impl,
                    "median_s": med,
                    "ratio_vs_torch_native": base / med,
                    "bandwidth_fraction": bw,
                }
            )
    return {
        "benchmark": "x86 attention side by side (tools/bench_x86.py)",
        "machine": facts,
        "method": method(opts),
        "copy_bandwidth": {
            "definition": "(bytes read + bytes written) / s of a torch uint8 tensor copy",
            "bytes": opts.copy_bytes,
            "samples_bytes_per_s": copies,
            "median_bytes_per_s": copy_bw,
        },
        "numerics": numerics,
        "ceilings": bounds,
        "targets": targets(records, bounds),
        "skipped": skipped,
        "samples": [
            {"op": op, "batch": b, "context": c, "layout": layout, "impl": impl, "times_s": ts}
            for (op, b, c, layout, impl), ts in samples.items()
        ],
        "records": records,
    }


def method(opts: Options) -> dict[str, Any]:
    return {
        "shapes": {"q_heads": HQ, "kv_heads": HKV, "head_dim": HEAD_DIM, "kv_dtype": "bf16"},
        "decode": "1 new token per request after context - 1 cached tokens",
        "layouts": {
            "random": "every request's tokens at rows of a random permutation of the pool "
            "(as a long-running server's allocator leaves them)",
            "contiguous": "each request's tokens at consecutive rows (as a fresh server's "
            f"allocator hands them out); decode at context {', '.join(map(str, opts.contiguous))}"
            if opts.contiguous
            else "not run",
        },
        "extend": (
            f"min({EXTEND_NEW}, context) new tokens per request after a cached prefix of "
            f"context - {EXTEND_NEW} tokens (at context {EXTEND_NEW}: a full prefill)"
        ),
        "impls": {
            "torch_native": "sglang TorchNativeAttnBackend on hand-built ForwardBatches "
            "(init_forward_metadata + forward_decode / forward_extend)",
            "rvv_fallback": "rvv_attention.decode / extend with RVV_ATTENTION_IMPL=fallback",
            "rvv_kernel": "rvv_attention.decode / extend with RVV_ATTENTION_IMPL=kernel "
            "(rvv-ops' sgl_kernel ops; on x86 the x86_amx, x86_avx512_bf16, x86_avx512 or "
            "x86_avx2 kernel variant where the CPU has AMX, AVX512-BF16, AVX-512 or AVX2, else "
            "the portable one: see "
            "machine.rvv_ops_build.active_variant)",
        },
        "repeats": opts.repeats,
        "repeats_rule": f"min(repeats, max(3, {opts.budget:g} s / the time of one call of "
        f"each impl)), at least {opts.target_repeats} in the cases the targets name; "
        "'samples' holds every timed call",
        "target_repeats": opts.target_repeats,
        "statistic": "median of the timed calls; implementations interleaved call by call",
        "cold_cache": f"decode: {opts.flush_bytes >> 20} MiB read before each timed call "
        "(clean lines in the caches, as after a model's other layers)",
        "kv_pages": "the pool's K/V buffers on 2 MiB pages where the kernel allows "
        "(rvv_attention.advise_huge_pages, which sglang-rvv's backend applies to the KV pool at "
        "start-up); every impl reads the same buffers",
        "ratio_vs_torch_native": "torch_native median / impl median (> 1: faster)",
        "bandwidth_fraction": "decode: batch*context*kv_heads*(head_dim+v_head_dim)*2 bytes "
        "/ median_s / copy bandwidth",
        "numerics": f"each impl once per case vs torch_native, atol = rtol = {ATOL}",
        "sglang_amx": "off in SGLang (sglang-rvv's hook: its sgl_kernel stand-in is not "
        "sgl-kernel's AMX build), as on a RISC-V CPU; torch's own kernels still use AMX",
        "batches": list(opts.batches),
        "contexts": list(opts.contexts),
        "ops": list(opts.ops),
    }


def targets(records: list[dict[str, Any]], bounds: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each target's value and verdict; a bandwidth target also gets ``ceiling``, the
    in-cache fraction (it cannot be met where that is below its threshold)."""
    ceiling = None if bounds is None else bounds["in_cache"]["bandwidth_fraction"]
    out = []
    for what, op, b, c, layout, field, threshold in TARGETS:
        rec = next(
            (
                r
                for r in records
                if (r["op"], r["batch"], r["context"], r["layout"], r["impl"])
                == (op, b, c, layout, "rvv_kernel")
            ),
            None,
        )
        value = None
        if rec is not None:
            value = rec["ratio_vs_torch_native" if field == "ratio" else "bandwidth_fraction"]
        out.append(
            {"target": what, "op": op, "batch": b, "context": c, "layout": layout,
             "impl": "rvv_kernel",
             "threshold": threshold, "value": value,
             "met": None if value is None else bool(value >= threshold),
             "ceiling": ceiling if field == "bw" else None}
        )  # fmt: skip
    return out


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{'op':<7}{'batch':>6}{'context':>8}  {'layout':<11}{'impl':<13}{'median ms':>11}"
        f"{'x torch_native':>15}{'bw fraction':>12}"
    ]
    for r in result["records"]:
        bw = r["bandwidth_fraction"]
        lines.append(
            f"{r['op']:<7}{r['batch']:>6}{r['context']:>8}  {r['layout']:<11}{r['impl']:<13}"
            f"{r['median_s'] * 1e3:>11.2f}{r['ratio_vs_torch_native']:>15.2f}"
            f"{'-' if bw is None else f'{bw:.3f}':>12}"
        )
    copy = result["copy_bandwidth"]["median_bytes_per_s"]
    m = result["machine"]
    lines.append(f"copy bandwidth (read + written): {copy / 1e9:.2f} GB/s")
    lines.append(f"machine: {m['cpu_model']}, {m['cores']} cores, torch {m['torch']}")
    lines.append(f"load at start: {m['uptime_start']}")
    lines.append(f"load at end:   {m['uptime_end']}")
    bounds = result["ceilings"]
    if bounds is not None:
        ic, fl = bounds["in_cache"], bounds["call_floor"]
        lines.append(
            f"in cache (batch {ic['batch']} context {ic['context']}, no flush): "
            f"{ic['median_s'] * 1e3:.3f} ms, bw fraction {ic['bandwidth_fraction']:.3f} "
            "(what the kernel's compute allows here, an estimate)"
        )
        lines.append(
            f"call floor (batch 1 context 16): {fl['warm_s'] * 1e3:.3f} ms warm, "
            f"{fl['after_flush_s'] * 1e3:.3f} ms after the flush"
        )
    for t in result["targets"]:
        value = "not run" if t["value"] is None else f"{t['value']:.3f}"
        verdict = {True: "met", False: "NOT met", None: "-"}[t["met"]]
        bound = "" if t["ceiling"] is None else f"; in cache {t['ceiling']:.3f}"
        lines.append(f"target: {t['target']}: {value} ({verdict}{bound})")
    for s in result["skipped"]:
        lines.append(
            f"skipped: {s['op']} batch {s['batch']} context {s['context']} "
            f"{s.get('layout', 'random')}: {s['reason']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    opts, out, _quick = parse(argv)
    result = run(opts)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(f"wrote {out}")
    bad = [n for n in result["numerics"] if not n["ok"]]
    for n in bad:
        print(
            f"NUMERICS FAILED: {n['op']} batch {n['batch']} context {n['context']} "
            f"{n['layout']} {n['impl']}: "
            f"max |diff| vs torch_native {n['max_abs_diff']:.3g}",
            file=sys.stderr,
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
