"""Kernel-level attention cases for rvv-kernels' torch-free C++ tests, as case files.

rvv-kernels' C++ test driver (``tests/cpp/test_decode_attention.cpp`` and
``test_extend_attention.cpp``) has no attention reference of its own: this module owns the
cases, their inputs and their expected outputs, and the driver only runs the kernel on each
case file and compares. ``python -m conformance.kernel_cases --out DIR`` (with ``tests`` on
``PYTHONPATH``; ``tools/kernels_tests.py`` does this before its native and QEMU runs) writes
one file per case; the driver reads every file of DIR named by ``RVVK_CASES_DIR``.

The cases aim at the kernels' ISA forms: head sizes off and on the vector and tile widths,
GQA groups that run every per-pass head count and remainder, context lengths around the
key blocks, every query / cache dtype pair, quantised caches with their scales, the
features that act on the scores, padded and unpadded cache rows. Each keeps its reason in
a comment. Inputs come from :func:`conformance.kvcache.make_pool` (shuffled cache rows,
spare rows, -1 in unused table entries, padded views); expected outputs from
:func:`conformance.reference.attention` in fp64 and the per-element allowed error from
:func:`conformance.reference.allowed_error`, the conformance tests' tolerance rule.

File format (little-endian): the 8 bytes ``RVVKCASE``, a u32 version (1), a u32 section
count, then per section a 32-byte NUL-padded ASCII name, an 8-byte NUL-padded ASCII type
(``f64 f32 bf16 f16 e4m3 e5m2 i8 i32 i64`` or ``text``), a u64 element count and the
elements, padded with zeros to a multiple of 8 bytes. Buffers hold the whole allocation the
kernel reads through the stored strides (padding included), each buffer ``x`` with its
strides ``x_stride_row`` and ``x_stride_head`` in elements; ``expected`` and
``tolerance`` cover the output buffer element by element, in f32 (that rounding, 2^-24
relative, is far below every tolerance), and ``expected`` is NaN where the kernel must
leave the output untouched (the driver fills it with NaN first). File names are
``<group>-<number>.case``; each group is one C++ test of that name, in the decode driver
for ``decode_attention_*`` groups, in the extend driver for ``extend_attention_*``.
``cases.txt`` lists each group and its number of files (``<group> <count>`` lines), so the
driver can tell a complete directory from a partial one.
"""

from __future__ import annotations

import argparse
import math
import struct
import sys
from collections.abc import Iterator
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from conformance.kvcache import KvPool, gen, make_pool
from conformance.reference import (
    allowed_error,
    attention,
    p_rounding_slack,
    rounds_p,
    window_of_ops,
)

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
E4M3, E5M2, I8 = torch.float8_e4m3fn, torch.float8_e5m2, torch.int8

TYPE_NAMES: dict[torch.dtype, str] = {
    torch.float64: "f64",
    F32: "f32",
    BF16: "bf16",
    F16: "f16",
    E4M3: "e4m3",
    E5M2: "e5m2",
    I8: "i8",
    torch.int32: "i32",
    torch.int64: "i64",
}
"""Section types of tensors; the driver maps the activation and cache ones to rvvk::DType."""

MAGIC, VERSION = b"RVVKCASE", 1
Pairs = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class _Case:
    """What decode and extend cases share: the C++ test that runs the case, the inputs'
    seed, `hq` query heads over `hkv` KV heads of sizes `d` (K) and `dv` (V), and the score
    features (keyword-only)."""

    group: str
    seed: int
    hq: int
    hkv: int
    d: int
    dv: int
    _: KW_ONLY
    cap: float = 0.0
    window: int = 0  # > 0: the last `window` keys (the kernel's convention)
    sinks: bool = False
    r2t64: bool = False


@dataclass(frozen=True)
class DecodeCase(_Case):
    """One decode batch: requests of `lens` tokens, run once per split count of `splits`."""

    lens: tuple[int, ...]
    q_dtype: torch.dtype
    kv_dtype: torch.dtype
    splits: tuple[int, ...] = (4,)
    # Cache heads padded by 3 elements, so bf16 rows start at odd 2-byte offsets; or not
    # padded (SGLang's pools: rows 4-byte aligned, which the RVV form that reads bf16 rows
    # in 32-bit pairs needs).
    padded: bool = True


@dataclass(frozen=True)
class ExtendCase(_Case):
    """One extend batch: requests of (prefix, new tokens) `reqs`."""

    reqs: tuple[tuple[int, int], ...]
    dtype: torch.dtype  # of q, the new k / v and the output
    kv_dtype: torch.dtype
    causal: bool = True
    scaled: bool = False  # per-tensor scales on a 16/32-bit cache (K 0.5, V 2)
    # Run every task once over a cache holding other values first (the same buffers and
    # rows): nothing of that call may leak into the checked one (the x86_amx variant
    # keeps packed key blocks per thread).
    rerun: bool = False


def _name(dt: torch.dtype) -> str:
    return TYPE_NAMES[dt]


def describe(c: DecodeCase | ExtendCase) -> str:
    """The case's parameters, as the driver prints them on a failure."""
    if isinstance(c, DecodeCase):
        shape = f"q={_name(c.q_dtype)} lens={','.join(map(str, c.lens))} splits="
        shape += ",".join(map(str, c.splits)) + f" padded={int(c.padded)}"
    else:
        shape = f"dtype={_name(c.dtype)} reqs=" + ",".join(f"{p}+{e}" for p, e in c.reqs)
        shape += f" causal={int(c.causal)} scaled={int(c.scaled)} rerun={int(c.rerun)}"
    return (
        f"{c.group} seed={c.seed} hq={c.hq} hkv={c.hkv} d={c.d} dv={c.dv} {shape} "
        f"kv={_name(c.kv_dtype)} cap={c.cap:g} win={c.window} sinks={int(c.sinks)} "
        f"r2t={'i64' if c.r2t64 else 'i32'}"
    )


# --------------------------------------------------------------------------------------
# The cases


def decode_cases() -> list[DecodeCase]:
    """The decode cases, by group (the C++ test that runs them)."""
    out: list[DecodeCase] = []
    case = DecodeCase

    g = "decode_attention_head_sizes_and_gqa"
    # Head sizes off the vector width (20 / 12: 8-lane tails on AVX2); groups of 1 to 10
    # query heads per KV head (AVX2 takes up to 6 heads at a time, so 7, 8, 9 and 10 split
    # as 6 + 1, 6 + 2, 6 + 3 and 6 + 4 and 5 is its own form); odd KV head counts (3, 5),
    # whose last task has one KV head, not a pair.
    dims: Pairs = ((16, 16), (20, 12), (64, 64), (80, 80), (96, 64), (128, 128), (256, 256))
    heads: Pairs = ((12, 2), (7, 1), (4, 4), (8, 1), (14, 2), (10, 2), (9, 1), (20, 2), (15, 3),
                    (5, 5))  # fmt: skip
    seed = 10
    for d, dv in dims:
        for hq, hkv in heads:
            seed += 1
            out.append(case(g, seed, hq, hkv, d, dv, (17, 1, 70), F32, F32))
    # A bf16 cache: x86_avx2 reads bf16 rows whose size is a multiple of 16 in pairs (q and
    # the P.V accumulators in pair order), others element-wise; sizes of both kinds, K and
    # V of different kinds, every per-step head count.
    for d, dv in ((20, 12), (80, 80), (96, 40), (40, 96)):
        for hq, hkv in ((12, 2), (9, 1), (10, 2), (8, 2), (8, 1), (5, 1)):
            seed += 1
            out.append(case(g, seed, hq, hkv, d, dv, (17, 1, 70), F32, BF16))
    # bf16 q over a bf16 cache: x86_avx512_bf16 takes q.k by bf16 dot products where the
    # head size is a multiple of 32 (up to 4 heads x 4 keys at a time, so groups of 1 to 9
    # run every per-pass head count and key tails), and the AVX-512 P.V reads bf16 V rows
    # of whole 32s in pairs.
    dot_dims = ((32, 32), (64, 40), (96, 64), (128, 128), (160, 96), (80, 80), (256, 256))
    for d, dv in dot_dims:
        for hq, hkv in ((12, 2), (7, 1), (5, 1), (3, 1), (1, 1), (8, 1), (18, 2)):
            seed += 1
            out.append(case(g, seed, hq, hkv, d, dv, (17, 1, 70, 3), BF16, BF16))

    g = "decode_attention_bf16_aligned_rows"
    # bf16 caches with unpadded rows, as SGLang's pools have them: RVV reads these rows in
    # 32-bit pairs (even head sizes), q.k by gathers with the keys in lanes (blocks of up
    # to 64 keys in VLEN / 16 at a time) and both products for up to 6 heads at a time, so
    # groups of 1 to 10 run every pass size and remainder; odd head sizes (the generic
    # forms) and odd KV head counts too; fp32 and bf16 q.
    dims = ((2, 2), (20, 12), (64, 64), (80, 80), (96, 40), (128, 128), (256, 256), (15, 15),
            (576, 512))  # fmt: skip
    heads = ((12, 2), (7, 1), (4, 4), (8, 1), (1, 1), (2, 1), (10, 2), (9, 1), (15, 3), (5, 5),
             (18, 2))  # fmt: skip
    seed = 500
    for d, dv in dims:
        for hq, hkv in heads:
            for qd in (F32, BF16):
                seed += 1
                out.append(case(g, seed, hq, hkv, d, dv, (17, 1, 70, 3), qd, BF16, padded=False))
    # Context lengths around the key blocks, one and three splits of the same inputs.
    for n in (0, 1, 2, 63, 64, 65, 257, 1000):
        seed += 1
        out.append(case(g, seed, 12, 2, 128, 128, (n, 5), BF16, BF16, splits=(1, 3), padded=False))
    out.append(case(g, seed + 1, 7, 1, 64, 64, (0, 1, 200, 65), BF16, BF16, cap=30.0, window=64,
                    sinks=True, splits=(3,), padded=False))  # fmt: skip

    g = "decode_attention_context_lengths"
    # Lengths around the key blocks and splits, up to more keys than any split holds.
    seed = 100
    for n in (0, 1, 2, 17, 63, 64, 65, 255, 256, 257, 1000, 4097):
        seed += 1
        out.append(case(g, seed, 6, 2, 64, 64, (n,), F32, BF16, splits=(1, 3, 8)))
    lens = (1, 2, 17, 255, 256, 257, 1000, 9)
    out.append(case(g, seed + 1, 12, 2, 128, 128, lens, BF16, BF16))

    g = "decode_attention_dtypes"
    # Every query dtype over every 16/32-bit cache dtype, int32 and int64 req_to_token.
    seed = 200
    for qd in (F32, BF16, F16):
        for kd in (F32, BF16, F16):
            for r2t64 in (False, True):
                seed += 1
                out.append(case(g, seed, 6, 3, 48, 40, (33, 130), qd, kd, splits=(2,),
                                r2t64=r2t64))  # fmt: skip

    g = "decode_attention_quantised_caches"
    # fp8 (per-tensor scales) and int8 (per-token, per-head scales) caches, every q dtype.
    seed = 250
    for kd in (E4M3, E5M2, I8):
        for qd in (F32, BF16, F16):
            seed += 1
            out.append(case(g, seed, 12, 2, 128, 128, (1, 77, 300), qd, kd, splits=(3,)))
    out.append(case(g, seed + 1, 7, 1, 80, 80, (5, 129), BF16, I8, cap=20.0, window=50,
                    sinks=True, splits=(2,)))  # fmt: skip
    # int8 caches with unpadded rows, as SGLang's pools have them: RVV reads these rows in
    # 16-bit pairs (the padded ones above, at odd offsets, take the generic form); K 50 and
    # V 42 elements: rows of an odd number of 16-bit words.
    seed += 1
    for qd in (F32, BF16, F16):
        seed += 1
        out.append(case(g, seed, 12, 2, 128, 128, (1, 77, 300, 1000), qd, I8, splits=(3,),
                        padded=False))  # fmt: skip
    out.append(case(g, seed + 1, 7, 1, 80, 80, (5, 129), BF16, I8, cap=20.0, window=50,
                    sinks=True, splits=(2,), padded=False))  # fmt: skip
    out.append(case(g, seed + 2, 6, 3, 50, 42, (33, 130), BF16, I8, splits=(2,), padded=False))

    g = "decode_attention_features"
    # Logit cap x sliding window x sinks, over requests shorter and longer than the window.
    seed = 300
    for cap in (0.0, 1.5, 30.0):
        for window in (0, 1, 5, 64, 300):
            for sinks in (False, True):
                seed += 1
                out.append(case(g, seed, 7, 1, 64, 64, (0, 1, 200, 65), BF16, BF16, cap=cap,
                                window=window, sinks=sinks, splits=(3,)))  # fmt: skip

    # MLA's shape: one KV head of 576 (K) / 512 (V).
    out.append(case("decode_attention_mla_shape", 400, 16, 1, 576, 512, (1, 300), BF16, BF16))
    return out


def extend_cases() -> list[ExtendCase]:
    """The extend cases, by group. Shapes are chosen so that both ways the kernel computes
    scores (q transposed, or dot products for tasks with few query rows) and head sizes
    that are not multiples of its tiles run at every VLEN."""
    out: list[ExtendCase] = []
    case = ExtendCase

    g = "extend_attention_head_sizes_and_gqa"
    # Every head size with two of the GQA ratios, each ratio with three sizes.
    dims = ((16, 16), (64, 64), (80, 80), (96, 64), (128, 128), (256, 256))
    heads = ((12, 2), (7, 1), (4, 4), (8, 1))
    seed = 10
    for di, (d, dv) in enumerate(dims):
        for k in range(2):
            hq, hkv = heads[(2 * di + k + di // 2) % 4]
            seed += 1
            out.append(case(g, seed, hq, hkv, d, dv, ((17, 20), (0, 3)), F32, F32))
    # Head sizes that are not multiples of 8 (the kernel takes keys' elements in tiles of
    # 8 when the query rows span several vectors; 12 x 25 rows do at every VLEN up to 1024).
    for d, dv in ((4, 6), (36, 20), (100, 36)):
        seed += 1
        out.append(case(g, seed, 12, 1, d, dv, ((10, 25), (0, 3)), BF16, BF16))

    g = "extend_attention_lengths"
    # Every prefix length {0, 1, 17, 255, 256, 257} with several extend lengths {1, 2, 17,
    # 31, 32, 33, 100}, in two mixed batches (each with an empty request).
    a = ((0, 1), (1, 2), (17, 17), (255, 31), (256, 32), (257, 33), (0, 100), (3, 0))
    b = ((256, 17), (0, 0), (0, 33), (257, 1), (17, 100), (1, 31), (255, 2), (0, 32))
    out.append(case(g, 101, 2, 1, 16, 16, a, BF16, BF16))
    out.append(case(g, 102, 3, 1, 16, 24, b, BF16, BF16, r2t64=True))
    out.append(case(g, 103, 2, 2, 24, 16, b, F32, F32, causal=False))
    out.append(case(g, 104, 2, 1, 16, 16, a, F16, I8, window=100, sinks=True, r2t64=True))

    g = "extend_attention_dtypes"
    # Every activation dtype with every cache dtype; int32 and int64 req_to_token.
    seed, r2t64 = 200, False
    for ad in (F32, BF16, F16):
        for kd in (F32, BF16, F16, E4M3, E5M2, I8):
            seed += 1
            reqs: Pairs = ((40, 10), (0, 5), (20, 3))
            out.append(case(g, seed, 4, 2, 48, 40, reqs, ad, kd, r2t64=r2t64))
            r2t64 = not r2t64

    g = "extend_attention_quantised_caches"
    out.append(case(g, 251, 12, 2, 128, 128, ((77, 10), (300, 1)), BF16, E4M3))
    out.append(case(g, 252, 4, 2, 64, 64, ((77, 10), (300, 2)), F16, E5M2))
    out.append(case(g, 253, 4, 2, 64, 64, ((77, 10), (300, 2)), BF16, I8))
    out.append(case(g, 254, 7, 1, 80, 80, ((5, 35), (129, 3)), BF16, I8, cap=20.0, window=50,
                    sinks=True))  # fmt: skip

    g = "extend_attention_features"
    # Windows {none, 1, 5, 64} x {sinks or not} x {causal or not}, the logit cap {none,
    # 1.5, 30} rotating over them, plus every cap with window and sinks. (Tasks with few
    # query rows compute scores by dot products, the others with q transposed: both run.)
    seed = 300
    reqs = ((0, 35), (20, 33), (0, 0), (70, 3))
    caps = (0.0, 1.5, 30.0)
    for n, (window, mode) in enumerate((w, m) for w in (0, 1, 5, 64) for m in range(4)):
        out.append(case(g, seed + 1 + n, 3, 1, 16, 16, reqs, BF16, BF16, cap=caps[n % 3],
                        window=window, sinks=mode & 1 != 0, causal=mode & 2 == 0))  # fmt: skip
    seed += 16
    for cap in caps:
        seed += 1
        out.append(case(g, seed, 6, 2, 32, 32, reqs, BF16, BF16, cap=cap, window=5, sinks=True))
    # One head per group and D = 64: the blocks of 32 tokens take the transposed-q path and
    # the tails of up to 6 tokens the dot-product path, at every VLEN.
    tails = ((0, 34), (20, 6), (0, 0), (70, 3))
    for n, (window, mode) in enumerate((w, m) for w in (0, 5) for m in range(4)):
        out.append(case(g, seed + 1 + n, 2, 2, 64, 64, tails, BF16, BF16, cap=caps[n % 3],
                        window=window, sinks=mode & 1 != 0, causal=mode & 2 == 0))  # fmt: skip

    # MLA's shape: one KV head of 576 (K) / 512 (V).
    reqs = ((20, 9), (0, 2))
    out.append(case("extend_attention_mla_shape", 400, 16, 1, 576, 512, reqs, BF16, BF16))

    g = "extend_attention_bf16_blocks"
    # bf16 q with a bf16 cache at head sizes that are multiples of 32 (the x86_amx
    # variant's tile path; the others run their usual path): prefixes around the 64-key
    # blocks, extends around the 32-token tasks, query rows per task not a multiple of the
    # 16-row tiles (GQA 6 and 7), and the features that act on the scores.
    reqs = ((0, 1), (1, 31), (63, 32), (64, 33), (65, 2), (0, 0), (130, 70), (0, 97))
    out.append(case(g, 501, 12, 2, 128, 128, reqs, BF16, BF16))
    out.append(case(g, 502, 7, 1, 64, 96, reqs, BF16, BF16, causal=False))
    out.append(case(g, 503, 6, 3, 96, 64, reqs, BF16, BF16, cap=30.0, window=40, sinks=True,
                    r2t64=True))  # fmt: skip
    out.append(case(g, 504, 5, 5, 32, 32, reqs, BF16, BF16, window=1))
    # The same tasks over other cache contents just before: one request and KV head, so
    # every task of both calls reads the same whole block of 128 keys.
    out.append(case(g, 505, 6, 1, 128, 128, ((200, 40),), BF16, BF16, rerun=True))
    # Per-tensor cache scales (the x86_amx variant leaves these to the fp32 path).
    out.append(case(g, 506, 12, 2, 128, 128, reqs, BF16, BF16, scaled=True))
    out.append(case(g, 507, 4, 2, 64, 64, reqs, F32, F32, r2t64=True, scaled=True))
    return out


# --------------------------------------------------------------------------------------
# Building a case's inputs and expected output


def _pool(
    c: DecodeCase | ExtendCase, g: torch.Generator, lens: tuple[int, ...], pad: int
) -> KvPool:
    """The case's KV cache: `lens` cached tokens per request, heads padded by `pad`."""
    kinds = {E4M3: "e4m3", E5M2: "e5m2", I8: "int8"}
    return make_pool(
        g,
        lens,
        kv_heads=c.hkv,
        dims=(c.d, c.dv),
        dtype=c.kv_dtype,
        cache=kinds.get(c.kv_dtype, "same"),
        table=torch.int64 if c.r2t64 else torch.int32,
        pad=pad,
    )


def allocation(t: Tensor) -> Tensor:
    """The elements of the allocation strided view t reads through its strides, from its
    first element through the end of its last row (trailing padding included), flat."""
    return t.as_strided((t.shape[0] * t.stride(0),), (1,), t.storage_offset())


def padded_view(values: Tensor, pad_head: int, pad_row: int, fill: float = 0.0) -> Tensor:
    """values [T, H, D] in a new allocation whose heads are followed by `pad_head` and rows
    by `pad_row` unused elements (`fill`)."""
    t, h, d = values.shape
    stride_h, stride_t = d + pad_head, h * (d + pad_head) + pad_row
    flat = torch.full((t * stride_t,), fill, dtype=torch.float64).to(values.dtype)
    view = flat.as_strided((t, h, d), (stride_t, stride_h, 1))
    view.copy_(values)
    return view


def _uniform(g: torch.Generator, n: int, lo: float, hi: float) -> Tensor:
    return torch.rand(n, generator=g) * (hi - lo) + lo


Sections = list[tuple[str, Tensor | str]]


def _scalars(**values: int | float) -> Sections:
    return [
        (k, torch.tensor([v], dtype=torch.int64 if isinstance(v, int) else F32))
        for k, v in values.items()
    ]


def _strided(name: str, t: Tensor) -> Sections:
    """Buffer `name`: the allocation t reads, with its row and head strides."""
    strides = {f"{name}_stride_row": t.stride(0), f"{name}_stride_head": t.stride(1)}
    return [(name, allocation(t)), *_scalars(**strides)]


def _sections(
    c: DecodeCase | ExtendCase,
    pool: KvPool,
    *,
    seq_lens: list[int],
    sm_scale: float,
    scales: tuple[float, float],
    sinks: Tensor,
    expected: Tensor,
    tolerance: Tensor,
) -> Sections:
    """The sections decode and extend share: the case's name, the cache and table, the
    shapes, the score features and the expected output with its tolerance (flat)."""
    out: Sections = [
        ("name", describe(c)),
        *_strided("k_cache", pool.k),
        *_strided("v_cache", pool.v),
        ("req_to_token", pool.req_to_token),
        ("req_pool_indices", pool.req_pool_indices.long()),
        ("seq_lens", torch.tensor(seq_lens, dtype=torch.int64)),
        ("expected", expected.float()),
        ("tolerance", tolerance.float()),
    ]
    out += _scalars(
        batch=len(seq_lens),
        num_heads=c.hq,
        num_kv_heads=c.hkv,
        head_dim=c.d,
        head_dim_v=c.dv,
        req_to_token_stride=pool.req_to_token.stride(0),
        window=c.window,
        sm_scale=sm_scale,
        logit_cap=c.cap,
        k_scale=scales[0],
        v_scale=scales[1],
    )
    if pool.k_scales is not None and pool.v_scales is not None:
        out += [("k_scales", pool.k_scales), ("v_scales", pool.v_scales)]
        out += _scalars(scales_stride=pool.k_scales.stride(0))
    if c.sinks:
        out.append(("sinks", sinks))
    return out


def decode_sections(c: DecodeCase) -> Sections:
    """The decode case file's sections (see the module docstring)."""
    g = gen(c.seed)
    pool = _pool(c, g, c.lens, 3 if c.padded else 0)
    batch = len(c.lens)
    q = torch.randn(batch, c.hq, c.d, generator=g).to(c.q_dtype)
    sinks = _uniform(g, c.hq, -2.0, 2.0)
    sm_scale = float(torch.tensor(1.0 / math.sqrt(c.d), dtype=F32))
    expected = torch.zeros(batch, c.hq, c.dv, dtype=torch.float64)
    for b, n in enumerate(c.lens):
        k, v = pool.keys(b, 0, n)
        expected[b] = attention(
            q[b : b + 1], k, v, torch.tensor([n - 1]), sm_scale=sm_scale,
            window=window_of_ops(c.window), logit_cap=c.cap, sinks=sinks if c.sinks else None,
        )[0]  # fmt: skip
    out = _sections(
        c, pool, seq_lens=list(c.lens), sm_scale=sm_scale, scales=(pool.k_scale, pool.v_scale),
        sinks=sinks, expected=expected.flatten(),
        tolerance=allowed_error(expected, c.q_dtype).flatten(),
    )  # fmt: skip
    out += _strided("q", q)
    out += [
        ("splits", torch.tensor(c.splits, dtype=torch.int64)),
        ("o_dtype", _name(c.q_dtype)),
    ]
    out += _scalars(o_stride_row=c.hq * c.dv, o_stride_head=c.dv)
    return out


def extend_sections(c: ExtendCase) -> Sections:
    """The extend case file's sections (see the module docstring)."""
    g = gen(c.seed)
    prefixes = tuple(p for p, _ in c.reqs)
    pool = _pool(c, g, prefixes, 3)
    # Per-tensor scales on a 16/32-bit cache: the kernel multiplies by them.
    k_scale, v_scale = (0.5, 2.0) if c.scaled else (pool.k_scale, pool.v_scale)
    # The new tokens: one unused row before each request's rows and after the last,
    # padded heads and rows.
    starts, tokens = [], 0
    for _, e in c.reqs:
        starts.append(tokens + 1)
        tokens += e + 1
    tokens += 1
    q = padded_view(torch.randn(tokens, c.hq, c.d, generator=g).to(c.dtype), 1, 3)
    k = padded_view(torch.randn(tokens, c.hkv, c.d, generator=g).to(c.dtype), 0, 2)
    v = padded_view(torch.randn(tokens, c.hkv, c.dv, generator=g).to(c.dtype), 0, 1)
    # The output, NaN but where the kernel writes.
    nan = torch.full((tokens, c.hq, c.dv), math.nan, dtype=torch.float64)
    expected = padded_view(nan, 2, 1, math.nan)
    slack = torch.zeros_like(expected)
    sinks = _uniform(g, c.hq, -2.0, 2.0)
    sm_scale = float(torch.tensor(1.0 / math.sqrt(c.d), dtype=F32))
    kw: dict[str, Any] = {
        "sm_scale": sm_scale,
        "causal": c.causal,
        "window": window_of_ops(c.window),
        "logit_cap": c.cap,
        "sinks": sinks if c.sinks else None,
    }
    p_bf16 = rounds_p(c.dtype, "same" if c.kv_dtype == c.dtype else "other")
    for b, (p, e) in enumerate(c.reqs):
        if e == 0:
            continue
        rows = slice(starts[b], starts[b] + e)
        k_pre, v_pre = pool.keys(b, 0, p)
        if c.scaled:
            k_pre, v_pre = k_pre * k_scale, v_pre * v_scale
        keys = torch.cat([k_pre, k[rows].double()])
        values = torch.cat([v_pre, v[rows].double()])
        args = (q[rows], keys, values, p + torch.arange(e))
        expected[rows] = attention(*args, **kw)
        if p_bf16:
            slack[rows] = p_rounding_slack(*args, **kw).double()
    tolerance = padded_view(allowed_error(expected, c.dtype, slack), 2, 1)
    out = _sections(
        c, pool, seq_lens=[p + e for p, e in c.reqs], sm_scale=sm_scale,
        scales=(k_scale, v_scale), sinks=sinks, expected=allocation(expected),
        tolerance=allocation(tolerance),
    )  # fmt: skip
    out += _strided("q", q) + _strided("k", k) + _strided("v", v)
    out += [
        ("extend_seq_lens", torch.tensor([e for _, e in c.reqs], dtype=torch.int64)),
        ("extend_start_loc", torch.tensor(starts, dtype=torch.int64)),
        ("o_dtype", _name(c.dtype)),
    ]
    out += _scalars(
        # more blocks than needed in every other case: tasks past the requests' ends
        max_extend_len=max(e for _, e in c.reqs) + (33 if c.seed % 2 else 0),
        o_stride_row=expected.stride(0), o_stride_head=expected.stride(1),
        causal=int(c.causal),
    )  # fmt: skip
    if c.rerun:
        other = _pool(c, gen(c.seed + 10_000), prefixes, 3)
        out += [
            ("rerun_k_cache", allocation(other.k)),
            ("rerun_v_cache", allocation(other.v)),
        ]
    return out


# --------------------------------------------------------------------------------------
# The file format


def encode(sections: Sections) -> bytes:
    """The case file holding `sections` (see the module docstring)."""
    assert sys.byteorder == "little", "case files are little-endian"
    names = [name for name, _ in sections]
    assert len(set(names)) == len(names), f"sections named twice: {names}"
    parts = [MAGIC, struct.pack("<II", VERSION, len(sections))]
    for name, value in sections:
        if isinstance(value, str):
            kind, data, count = "text", value.encode("ascii"), len(value)
        else:
            kind, count = TYPE_NAMES[value.dtype], value.numel()
            data = value.detach().contiguous().flatten().view(torch.uint8).numpy().tobytes()
        assert len(name) < 32 and len(kind) < 8, (name, kind)
        header = struct.pack("<32s8sQ", name.encode("ascii"), kind.encode("ascii"), count)
        parts += [header, data, b"\0" * (-len(data) % 8)]
    return b"".join(parts)


def all_cases() -> Iterator[tuple[DecodeCase | ExtendCase, Sections]]:
    for d in decode_cases():
        yield d, decode_sections(d)
    for e in extend_cases():
        yield e, extend_sections(e)


def write_all(out_dir: Path) -> dict[str, int]:
    """Writes every case file into out_dir (removing case files already there); returns
    the number of files per group."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in [*out_dir.glob("*.case"), out_dir / "cases.txt"]:
        old.unlink(missing_ok=True)
    counts: dict[str, int] = {}
    for case, sections in all_cases():
        counts[case.group] = counts.get(case.group, 0) + 1
        path = out_dir / f"{case.group}-{counts[case.group]:03d}.case"
        path.write_bytes(encode(sections))
    (out_dir / "cases.txt").write_text("".join(f"{g} {n}\n" for g, n in counts.items()))
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for the case files")
    args = parser.parse_args(argv)
    counts = write_all(args.out)
    size = sum(p.stat().st_size for p in args.out.glob("*.case"))
    for group, n in counts.items():
        print(f"{group}: {n} case files")
    print(f"{sum(counts.values())} case files ({size / 1e6:.1f} MB) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
