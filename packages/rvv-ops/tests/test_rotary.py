"""rotary_embedding_cpu: a torch fp32 reference (SGLang's forward_native formula), neox and
GPT-J layouts, partial rotary dimensions, 2-D, 3-D and 4-D query/key with different head
counts, strided inputs, position dtypes, opcheck and bad inputs."""

from __future__ import annotations

import math
from typing import Any

import pytest
import rvv_ops
import torch
from bad_input import Bad, Cases
from torch import Tensor

ROPE = torch.ops.sgl_kernel.rotary_embedding_cpu.default
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_POS = 64

# (rtol, atol): kernel and reference both compute x1 * cos - x2 * sin in fp32 (the kernel
# fuses one multiply-add), so outputs near 0 carry an fp32 error relative to the terms
# (|x| <= ~4); 16-bit results may then round to the neighbouring value, 1 ulp.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-6, 2e-6),
    torch.bfloat16: (2**-7, 1e-5),
    torch.float16: (2**-10, 1e-5),
}


def cos_sin_cache(rotary_dim: int, dtype: torch.dtype, base: float = 10000.0) -> Tensor:
    """[MAX_POS, rotary_dim]: cos then sin of position * inv_freq, as SGLang builds it."""
    inv_freq = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
    freqs = torch.outer(torch.arange(MAX_POS, dtype=torch.float32), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype)


def reference_rope(
    positions: Tensor, x: Tensor, head_size: int, cache: Tensor, neox: bool
) -> Tensor:
    """Rotates the first rotary_dim elements of every head of x in fp32; x's dtype and shape."""
    cos, sin = cache.float()[positions.long()].chunk(2, dim=-1)  # [tokens, rotary_dim / 2]
    cos, sin = cos[:, None, :], sin[:, None, :]
    rotary_dim = cache.shape[-1]
    # heads counted from the shape, not with -1: a reshape of 0 tokens cannot infer it
    heads = x.float().reshape(x.shape[0], math.prod(x.shape[1:]) // head_size, head_size)
    rot, rest = heads[..., :rotary_dim], heads[..., rotary_dim:]
    if neox:
        x1, x2 = rot.chunk(2, dim=-1)
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    else:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    return torch.cat((out, rest), dim=-1).reshape(x.shape).to(x.dtype)


def randn(*shape: int, dtype: torch.dtype, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def positions(tokens: int, seed: int, dtype: torch.dtype = torch.int64) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    p = torch.randint(0, MAX_POS, (tokens,), generator=g)
    if tokens >= 2:
        p[0], p[1] = 0, MAX_POS - 1
    return p.to(dtype)


def check(pos: Tensor, q: Tensor, k: Tensor, head_size: int, cache: Tensor, neox: bool) -> None:
    q_before, k_before = q.clone(), k.clone()
    q_out, k_out = rvv_ops.rotary_embedding(pos, q, k, head_size, cache, neox)
    for out, x in ((q_out, q), (k_out, k)):
        assert out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous()
        rtol, atol = TOLERANCES[x.dtype]
        torch.testing.assert_close(
            out, reference_rope(pos, x, head_size, cache, neox), rtol=rtol, atol=atol
        )
    # The inputs are left as they were.
    assert torch.equal(q, q_before) and torch.equal(k, k_before)


@pytest.mark.parametrize("cache_fp32", [False, True], ids=["cache=dtype", "cache=fp32"])
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_reference(variant: str, dtype: torch.dtype, neox: bool, cache_fp32: bool) -> None:
    def cache(rotary_dim: int) -> Tensor:
        return cos_sin_cache(rotary_dim, torch.float32 if cache_fp32 else dtype)

    # Qwen2.5-1.5B: 12 query heads, 2 KV heads, head 128, full rotary; 2-D [tokens, heads*128]
    check(
        positions(3, 1),
        randn(3, 12 * 128, dtype=dtype, seed=1),
        randn(3, 2 * 128, dtype=dtype, seed=2),
        128,
        cache(128),
        neox,
    )
    # 3-D [tokens, heads, head], partial rotary (the rest passes through), MQA key
    check(
        positions(5, 2),
        randn(5, 4, 64, dtype=dtype, seed=3),
        randn(5, 1, 64, dtype=dtype, seed=4),
        64,
        cache(32),
        neox,
    )
    # q and k as column slices of a fused qkv projection (strided rows), int32 positions
    qkv = randn(4, (4 + 2 + 2) * 32, dtype=dtype, seed=5)
    check(positions(4, 3, torch.int32), qkv[:, :128], qkv[:, 128:192], 32, cache(32), neox)
    # a rotary half that is no multiple of any vector length, 3-D views with padded heads
    qp = randn(2, 3, 90, dtype=dtype, seed=6)[..., :80]
    kp = randn(2, 2, 81, dtype=dtype, seed=7)[..., 1:]
    check(positions(2, 4), qp, kp, 80, cache(34), neox)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tokens_and_threads(dtype: torch.dtype) -> None:
    cache = cos_sin_cache(128, dtype)
    # no tokens, 2-D and 3-D (the reference takes them too)
    check(
        positions(0, 0),
        randn(0, 256, dtype=dtype, seed=0),
        randn(0, 128, dtype=dtype, seed=0),
        128,
        cache,
        True,
    )
    check(
        positions(0, 0),
        randn(0, 2, 128, dtype=dtype, seed=0),
        randn(0, 1, 128, dtype=dtype, seed=0),
        128,
        cache,
        False,
    )
    # 70 tokens x 14 heads x 128: split over threads by at::parallel_for
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        for neox in (True, False):
            q = randn(70, 12 * 128, dtype=dtype, seed=1)
            k = randn(70, 2, 128, dtype=dtype, seed=2)
            check(positions(70, 5), q, k, 128, cache, neox)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_4d_batch_seq(dtype: torch.dtype, neox: bool) -> None:
    # sgl-kernel's rope.cpp takes [batch, seq, heads, head_size] too, positions flattened in
    # (batch, seq) order: the result equals the 3-D call on [batch * seq, heads, head_size].
    batch, seq = 2, 3
    pos = positions(batch * seq, 11)
    cache = cos_sin_cache(32, dtype)  # partial rotary: head 64, rotary 32
    q = randn(batch, seq, 4, 64, dtype=dtype, seed=12)
    k = randn(batch, seq, 2, 64, dtype=dtype, seed=13)
    q_before, k_before = q.clone(), k.clone()
    q_out, k_out = rvv_ops.rotary_embedding(pos, q, k, 64, cache, neox)
    q3, k3 = rvv_ops.rotary_embedding(pos, q.flatten(0, 1), k.flatten(0, 1), 64, cache, neox)
    assert q_out.shape == q.shape and k_out.shape == k.shape
    assert torch.equal(q_out.flatten(0, 1), q3) and torch.equal(k_out.flatten(0, 1), k3)
    rtol, atol = TOLERANCES[dtype]
    for out, x in ((q_out, q), (k_out, k)):
        ref = reference_rope(pos, x.flatten(0, 1), 64, cache, neox).reshape(x.shape)
        torch.testing.assert_close(out, ref, rtol=rtol, atol=atol)
    assert torch.equal(q, q_before) and torch.equal(k, k_before)
    # batch and seq that do not collapse into one token stride (a seq-major tensor
    # transposed to [batch, seq, ...]), and 0 tokens
    qt = randn(seq, batch, 4, 64, dtype=dtype, seed=14).transpose(0, 1)
    kt = randn(seq, batch, 2, 64, dtype=dtype, seed=15).transpose(0, 1)
    q_out, k_out = rvv_ops.rotary_embedding(pos, qt, kt, 64, cache, neox)
    q3, k3 = rvv_ops.rotary_embedding(
        pos, qt.reshape(batch * seq, 4, 64), kt.reshape(batch * seq, 2, 64), 64, cache, neox
    )
    assert torch.equal(q_out.flatten(0, 1), q3) and torch.equal(k_out.flatten(0, 1), k3)
    q_out, k_out = ROPE(
        positions(0, 0), Z(2, 0, 4, 64, dtype=dtype), Z(2, 0, 1, 64, dtype=dtype), 64, cache, neox
    )
    assert q_out.shape == (2, 0, 4, 64) and k_out.shape == (2, 0, 1, 64)


def test_sglang_call_style() -> None:
    # rotary_embedding/base.py: return torch.ops.sgl_kernel.rotary_embedding_cpu(positions,
    # query, key, self.head_size, self.cos_sin_cache, self.is_neox_style), the cache
    # converted to the query's dtype first; the caller uses the returned pair.
    pos = positions(2, 9)
    q = randn(2, 4 * 64, dtype=torch.bfloat16, seed=8)
    k = randn(2, 64, dtype=torch.bfloat16, seed=9)
    cache = cos_sin_cache(64, torch.bfloat16)
    result = ROPE(pos, q, k, 64, cache, True)
    assert isinstance(result, tuple) and len(result) == 2
    rtol, atol = TOLERANCES[torch.bfloat16]
    torch.testing.assert_close(
        result[0], reference_rope(pos, q, 64, cache, True), rtol=rtol, atol=atol
    )
    torch.testing.assert_close(
        result[1], reference_rope(pos, k, 64, cache, True), rtol=rtol, atol=atol
    )


# A valid call: 3 tokens, 2 query heads and 1 key head of 32, a cache of 8 positions.
rope = Cases(
    ROPE,
    {
        "pos": torch.zeros(3, dtype=torch.int64),
        "q": torch.zeros(3, 2 * 32),
        "k": torch.zeros(3, 32),
        "head_size": 32,
        "cache": torch.zeros(8, 32),
        "neox": True,
    },
    ("rotary_embedding_cpu",),
)
Z = torch.zeros
F64, BF16, F16 = torch.float64, torch.bfloat16, torch.float16
BAD: dict[str, Bad] = {
    "positions float": rope(
        TypeError, ("positions", "torch.float32", "torch.int64 or torch.int32"), pos=Z(3)
    ),
    "positions 2-D": rope(ValueError, ("positions", "2-d", "1-D"), pos=Z(3, 1, dtype=torch.int64)),
    "query float64": rope(TypeError, ("query", "torch.float64"), q=Z(3, 64, dtype=F64)),
    "key dtype": rope(
        TypeError, ("key", "torch.bfloat16", "query's dtype torch.float32"), k=Z(3, 32, dtype=BF16)
    ),
    "cache dtype": rope(
        TypeError,
        ("cos_sin_cache", "torch.float16", "torch.bfloat16 or torch.float32"),
        q=Z(3, 64, dtype=BF16),
        k=Z(3, 32, dtype=BF16),
        cache=Z(8, 32, dtype=F16),
    ),
    "cache 1-D": rope(
        ValueError, ("cos_sin_cache", "1-d", "[max_position, rotary_dim]"), cache=Z(32)
    ),
    "rotary_dim odd": rope(ValueError, ("rotary_dim 31", "even"), cache=Z(8, 31)),
    "rotary_dim beyond head_size": rope(
        ValueError, ("rotary_dim 34", "head_size = 32"), cache=Z(8, 34)
    ),
    "head_size 0": rope(ValueError, ("head_size is 0",), head_size=0),
    "query 1-D": rope(ValueError, ("query", "1-d", "[tokens, heads * head_size]"), q=Z(64)),
    "query tokens": rope(ValueError, ("query", "4 tokens", "positions.numel() = 3"), q=Z(4, 64)),
    "key not whole heads": rope(
        ValueError, ("key", "48", "multiple of head_size = 32"), k=Z(3, 48)
    ),
    "query 5-D": rope(
        ValueError, ("query", "5-d", "[batch, seq, heads, head_size]"), q=Z(3, 1, 1, 2, 32)
    ),
    "query 4-D tokens": rope(
        ValueError,
        ("query", "batch * seq = 4", "positions.numel() = 3"),
        q=Z(2, 2, 2, 32),
        k=Z(2, 2, 1, 32),
    ),
    "query 4-D head size": rope(
        ValueError,
        ("query", "heads of size 16", "head_size = 32"),
        q=Z(1, 3, 2, 16),
        k=Z(1, 3, 1, 32),
    ),
    "query 4-D, key 2-D": rope(
        ValueError,
        ("query", "4-d and 2-d", "both [batch, seq, heads, head_size]"),
        q=Z(1, 3, 2, 32),
    ),
    "key 4-D batch": rope(
        ValueError,
        ("key", "[batch, seq] = [3, 1]", "query's [1, 3]"),
        q=Z(1, 3, 2, 32),
        k=Z(3, 1, 1, 32),
    ),
    "query 3-D head size": rope(
        ValueError, ("query", "heads of size 16", "head_size = 32"), q=Z(3, 2, 16)
    ),
    # index values and strides: the CPU kernel's checks only
    "position too large": rope(
        ValueError,
        ("positions[1] is 8", "cos_sin_cache.size(0) = 8"),
        fake_too=False,
        pos=torch.tensor([0, 8, 1]),
    ),
    "position negative": rope(
        ValueError,
        ("positions[2] is -1",),
        fake_too=False,
        pos=torch.tensor([0, 1, -1], dtype=torch.int32),
    ),
    "query last dim strided": rope(
        ValueError, ("query", "last-dimension stride of 3"), fake_too=False, q=Z(64, 3).t()
    ),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_input(name: str) -> None:
    BAD[name].check()


OPCHECK: dict[str, tuple[Any, ...]] = {
    "bf16 2-D neox, fp32 cache": (
        positions(3, 1),
        randn(3, 4 * 64, dtype=torch.bfloat16, seed=1),
        randn(3, 64, dtype=torch.bfloat16, seed=2),
        64,
        cos_sin_cache(64, torch.float32),
        True,
    ),
    "fp16 3-D gptj partial": (
        positions(2, 2, torch.int32),
        randn(2, 3, 64, dtype=torch.float16, seed=3),
        randn(2, 1, 64, dtype=torch.float16, seed=4),
        64,
        cos_sin_cache(32, torch.float16),
        False,
    ),
    "bf16 4-D [batch, seq, heads, head] partial": (
        positions(6, 4),
        randn(2, 3, 4, 64, dtype=torch.bfloat16, seed=7),
        randn(2, 3, 1, 64, dtype=torch.bfloat16, seed=8),
        64,
        cos_sin_cache(32, torch.bfloat16),
        True,
    ),
    "fp32 strided": (
        positions(4, 3),
        randn(4, 200, dtype=torch.float32, seed=5)[:, :128],
        randn(4, 200, dtype=torch.float32, seed=6)[:, 128:192],
        64,
        cos_sin_cache(64, torch.float32),
        True,
    ),
}


@pytest.mark.parametrize("sample", OPCHECK)
def test_opcheck(sample: str) -> None:
    torch.library.opcheck(ROPE, OPCHECK[sample])


def test_no_autograd() -> None:
    q = randn(2, 64, dtype=torch.float32, seed=1).requires_grad_()
    q_out, _ = ROPE(
        positions(2, 1),
        q,
        randn(2, 64, dtype=torch.float32, seed=2),
        64,
        cos_sin_cache(64, torch.float32),
        True,
    )
    with pytest.raises(RuntimeError, match="rotary_embedding_cpu"):
        q_out.sum().backward()
