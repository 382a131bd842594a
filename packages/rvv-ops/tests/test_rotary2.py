"""apply_rotary_pos_emb_cpu (SGLang's apply_rotary_pos_emb with per-token cos/sin rows):
float64 references, SGLang's native formula as a second opinion, GQA, layouts, empty and
length-1 shapes, opcheck and bad inputs."""

from __future__ import annotations

import pytest
import rvv_ops
import torch
from bad_input import Bad, Cases
from torch import Tensor

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
APPLY = torch.ops.sgl_kernel.apply_rotary_pos_emb_cpu.default


def randn(*shape: int, dtype: torch.dtype, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def reference(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x * cos + rotate_half(x) * sin in float64 (cos/sin [T, D] broadcast over heads)."""
    x64, c, s = x.double(), cos.double().unsqueeze(1), sin.double().unsqueeze(1)
    return x64 * c + rotate_half(x64) * s


def assert_matches(actual: Tensor, x: Tensor, cos: Tensor, sin: Tensor) -> None:
    exact = reference(x, cos, sin)
    dt = actual.dtype
    want = exact.to(dt).double()
    # fp32 products and sum: a few fp32 ulps of the terms; 16-bit: one ulp of the dtype.
    terms = x.double().abs() * cos.double().abs().unsqueeze(1) + rotate_half(
        x.double()
    ).abs() * sin.double().abs().unsqueeze(1)
    ulp = {torch.float32: 0.0, torch.bfloat16: 2**-7, torch.float16: 2**-10}[dt]
    allowed = ulp * want.abs() + 4 * 2**-24 * terms + torch.finfo(dt).smallest_normal
    err = (actual.double() - want).abs()
    assert actual.shape == x.shape and actual.dtype == x.dtype
    bad = ~(err <= allowed)
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        raise AssertionError(
            f"{int(bad.sum())} of {err.numel()} differ; first at {i}: got "
            f"{actual.flatten()[i].item()!r}, want {want.flatten()[i].item()!r}"
        )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cos_dtype", ("same", torch.float32), ids=("cos-same", "cos-fp32"))
@pytest.mark.parametrize("head_size", (2, 16, 34, 64, 128, 256))
def test_matches_reference(
    variant: str, dtype: torch.dtype, cos_dtype: object, head_size: int
) -> None:
    cdt = dtype if cos_dtype == "same" else torch.float32
    tokens, heads, kv_heads = 5, 4, 2  # GQA: key has fewer heads
    q = randn(tokens, heads, head_size, dtype=dtype, seed=head_size)
    k = randn(tokens, kv_heads, head_size, dtype=dtype, seed=head_size + 1)
    # cos/sin rows with halves that differ (the op must not assume they repeat)
    cos = randn(tokens, head_size, dtype=cdt, seed=head_size + 2)
    sin = randn(tokens, head_size, dtype=cdt, seed=head_size + 3)
    q_before, k_before = q.clone(), k.clone()
    q_out, k_out = rvv_ops.apply_rotary_pos_emb(q, k, cos, sin)
    assert q_out.is_contiguous() and k_out.is_contiguous()
    assert_matches(q_out, q, cos, sin)
    assert_matches(k_out, k, cos, sin)
    torch.testing.assert_close(q, q_before, rtol=0, atol=0)
    torch.testing.assert_close(k, k_before, rtol=0, atol=0)


def test_sglang_native_formula() -> None:
    # SGLang's apply_rotary_pos_emb_native_eager on Gemma 3-style inputs: real cos/sin
    # (duplicated halves), bf16 activations and fp32 cos/sin.
    tokens, heads, kv_heads, d = 7, 8, 4, 64
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).double() / d))
    angles = torch.arange(tokens).double()[:, None] * inv[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos().float(), emb.sin().float()
    q = randn(tokens, heads, d, dtype=torch.bfloat16, seed=1)
    k = randn(tokens, kv_heads, d, dtype=torch.bfloat16, seed=2)
    q_out, k_out = APPLY(q, k, cos, sin)
    for x, out in ((q, q_out), (k, k_out)):
        native = (x.float() * cos.unsqueeze(1) + rotate_half(x.float()) * sin.unsqueeze(1)).to(
            x.dtype
        )
        torch.testing.assert_close(out, native, rtol=2**-7, atol=1e-2)
        assert_matches(out, x, cos, sin)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layouts_and_empty(dtype: torch.dtype) -> None:
    qkv = randn(6, 3 * 4 * 32, dtype=dtype, seed=3)
    q = qkv[:, : 4 * 32].view(6, 4, 32)  # a slice of a fused qkv projection
    k = qkv[:, 4 * 32 : 6 * 32].view(6, 2, 32)
    cs = randn(6, 70, dtype=torch.float32, seed=4)
    cos, sin = cs[:, :32], cs[:, 35:67]  # strided rows
    q_out, k_out = APPLY(q, k, cos, sin)
    assert_matches(q_out, q, cos, sin)
    assert_matches(k_out, k, cos, sin)
    # heads transposed in memory; cos with a non-contiguous last dimension (copied)
    qt = randn(4, 6, 16, dtype=dtype, seed=5).transpose(0, 1)
    ct = randn(16, 6, dtype=dtype, seed=6).t()
    st = randn(6, 16, dtype=dtype, seed=7)
    q_out, k_out = APPLY(qt, qt, ct, st)
    assert_matches(q_out, qt, ct, st)
    # one token, one head, one pair; no tokens; no kv heads
    one = randn(1, 1, 2, dtype=dtype, seed=8)
    c1, s1 = randn(1, 2, dtype=dtype, seed=9), randn(1, 2, dtype=dtype, seed=10)
    assert_matches(APPLY(one, one, c1, s1)[0], one, c1, s1)
    empty = APPLY(q[:0], k[:0], cos[:0], sin[:0])
    assert empty[0].shape == (0, 4, 32) and empty[1].shape == (0, 2, 32)
    no_kv = APPLY(q, k[:, :0], cos, sin)
    assert no_kv[1].shape == (6, 0, 32)
    # many tokens: threads
    qm = randn(300, 8, 64, dtype=dtype, seed=11)
    cm, sm = randn(300, 64, dtype=dtype, seed=12), randn(300, 64, dtype=dtype, seed=13)
    assert_matches(APPLY(qm, qm[:, :2], cm, sm)[0], qm, cm, sm)


def test_opcheck() -> None:
    q = randn(3, 4, 16, dtype=torch.float32, seed=1)
    k = randn(3, 2, 16, dtype=torch.float32, seed=2)
    c = randn(3, 16, dtype=torch.float32, seed=3)
    torch.library.opcheck(APPLY, (q, k, c, c))
    qb = q.bfloat16()
    torch.library.opcheck(APPLY, (qb, k.bfloat16(), c, c))


def test_no_autograd() -> None:
    q = torch.randn(2, 1, 4, requires_grad=True)
    q_out, _ = APPLY(q, torch.randn(2, 1, 4), torch.randn(2, 4), torch.randn(2, 4))
    with pytest.raises(RuntimeError, match="apply_rotary_pos_emb_cpu"):
        q_out.sum().backward()


C = Cases(
    APPLY,
    {
        "query": torch.zeros(3, 4, 8),
        "key": torch.zeros(3, 2, 8),
        "cos": torch.zeros(3, 8),
        "sin": torch.zeros(3, 8),
    },
    words=("apply_rotary_pos_emb_cpu",),
)
BAD = {
    "2-D query": C(
        ValueError, ("query", "2-d", "[tokens, heads, head_size]"), query=torch.zeros(3, 32)
    ),
    "4-D key": C(ValueError, ("key", "4-d"), key=torch.zeros(1, 3, 2, 8)),
    "3-D cos": C(ValueError, ("cos", "3-d"), cos=torch.zeros(3, 1, 8)),
    "odd head": C(
        ValueError,
        ("query", "odd head_size 7"),
        query=torch.zeros(3, 4, 7),
        key=torch.zeros(3, 2, 7),
        cos=torch.zeros(3, 7),
        sin=torch.zeros(3, 7),
    ),
    "key tokens": C(ValueError, ("key", "4 tokens", "query.size(0) = 3"), key=torch.zeros(4, 2, 8)),
    "cos tokens": C(ValueError, ("cos", "2 tokens"), cos=torch.zeros(2, 8)),
    "key head": C(
        ValueError, ("key", "last dimension of 6", "head_size = 8"), key=torch.zeros(3, 2, 6)
    ),
    "sin head": C(ValueError, ("sin", "last dimension of 4"), sin=torch.zeros(3, 4)),
    "key dtype": C(TypeError, ("key", "torch.bfloat16"), key=torch.zeros(3, 2, 8).bfloat16()),
    "sin dtype": C(TypeError, ("sin", "torch.float16"), sin=torch.zeros(3, 8).half()),
    "int query": C(
        TypeError, ("query", "torch.int64"), query=torch.zeros(3, 4, 8, dtype=torch.long)
    ),
    "int cos": C(
        TypeError,
        ("cos", "torch.int32"),
        cos=torch.zeros(3, 8, dtype=torch.int32),
        sin=torch.zeros(3, 8, dtype=torch.int32),
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input(case: str) -> None:
    bad: Bad = BAD[case]
    bad.check()
