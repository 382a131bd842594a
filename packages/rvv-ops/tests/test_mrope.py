"""multimodal_rotary_embedding_cpu (M-RoPE, in place): float64 references written after
SGLang's MRotaryEmbedding.forward_native (consecutive and interleaved sections, 1-D and
[3, T] positions, neox and GPT-J, partial rotary), layouts, empty and length-1 shapes,
opcheck and bad inputs."""

from __future__ import annotations

import pytest
import rvv_ops
import torch
from bad_input import Bad, Cases
from torch import Tensor

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MROPE = torch.ops.sgl_kernel.multimodal_rotary_embedding_cpu.default


def randn(*shape: int, dtype: torch.dtype, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def cache(max_pos: int, rotary_dim: int, dtype: torch.dtype) -> Tensor:
    inv = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2).double() / rotary_dim))
    angles = torch.arange(max_pos).double()[:, None] * inv[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).to(dtype)


def positions_3(tokens: int, max_pos: int, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, max_pos, (3, tokens), generator=g)


def select_rows(x: Tensor, section: list[int], interleaved: bool) -> Tensor:
    """[3, T, half] -> [T, half]: each element from its section's position row."""
    if interleaved:
        out = x[0].clone()
        out[..., 1 : section[1] * 3 : 3] = x[1, ..., 1 : section[1] * 3 : 3]
        out[..., 2 : section[2] * 3 : 3] = x[2, ..., 2 : section[2] * 3 : 3]
        return out
    parts, start = [], 0
    for i, size in enumerate(section):
        parts.append(x[i, ..., start : start + size])
        start += size
    return torch.cat(parts, dim=-1)


def reference(
    positions: Tensor,
    x: Tensor,
    head_size: int,
    cos_sin: Tensor,
    section: list[int] | None,
    interleaved: bool,
    neox: bool,
) -> Tensor:
    rd = cos_sin.shape[1]
    cs = cos_sin.double()[positions]
    cos, sin = cs.chunk(2, dim=-1)
    if positions.dim() == 2:
        assert section is not None
        cos, sin = select_rows(cos, section, interleaved), select_rows(sin, section, interleaved)
    xs = x.double().view(x.shape[0], -1, head_size)
    rot = xs[..., :rd]
    if neox:
        x1, x2 = rot.chunk(2, dim=-1)
    else:
        x1, x2 = rot[..., ::2], rot[..., 1::2]
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
    rotated = torch.cat((o1, o2), -1) if neox else torch.stack((o1, o2), -1).flatten(-2)
    return torch.cat((rotated, xs[..., rd:]), dim=-1).reshape(x.shape)


def assert_matches(actual: Tensor, exact: Tensor) -> None:
    dt = actual.dtype
    want = exact.to(dt).double()
    ulp = {torch.float32: 1e-6, torch.bfloat16: 2**-7, torch.float16: 2**-10}[dt]
    # |x| < ~5 and |cos|, |sin| <= 1: the fp32 terms' rounding is below 1e-6 absolute
    allowed = ulp * want.abs() + 2e-6 + torch.finfo(dt).smallest_normal
    err = (actual.double() - want).abs()
    bad = ~(err <= allowed)
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        raise AssertionError(
            f"{int(bad.sum())} of {err.numel()} differ; first at {i}: got "
            f"{actual.flatten()[i].item()!r}, want {want.flatten()[i].item()!r}"
        )


CONFIGS = {
    # name: (head_size, rotary_dim, section, interleaved)
    "qwen2-vl": (128, 128, [16, 24, 24], False),
    "qwen3-vl interleaved": (128, 128, [24, 20, 20], True),
    "partial rotary (qwen3.5)": (64, 32, [6, 5, 5], False),
    "partial interleaved": (64, 32, [6, 5, 5], True),
    "odd sizes": (34, 30, [5, 4, 6], False),
    "one pair": (2, 2, [1, 0, 0], False),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("neox", (True, False), ids=("neox", "gptj"))
def test_matches_reference(variant: str, dtype: torch.dtype, config: str, neox: bool) -> None:
    head_size, rd, section, interleaved = CONFIGS[config]
    tokens, heads, kv_heads, max_pos = 7, 4, 2, 50
    cos_sin = cache(max_pos, rd, dtype)
    q = randn(tokens, heads * head_size, dtype=dtype, seed=head_size)
    k = randn(tokens, kv_heads * head_size, dtype=dtype, seed=rd)
    for pos in (positions_3(tokens, max_pos, seed=3), torch.randint(0, max_pos, (tokens,))):
        want_q = reference(pos, q, head_size, cos_sin, section, interleaved, neox)
        want_k = reference(pos, k, head_size, cos_sin, section, interleaved, neox)
        qq, kk = q.clone(), k.clone()
        out = rvv_ops.multimodal_rotary_embedding(
            pos, qq, kk, head_size, cos_sin, section, interleaved, neox
        )
        assert out[0] is qq and out[1] is kk
        assert_matches(qq, want_q)
        assert_matches(kk, want_k)


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=str)
def test_fp32_cache_and_layouts(dtype: torch.dtype) -> None:
    head_size, section = 32, [4, 6, 6]
    tokens, max_pos = 9, 40
    cos_sin = cache(max_pos, 32, torch.float32)
    qkv = randn(tokens, 3 * 3 * head_size, dtype=dtype, seed=1)
    q, k = qkv[:, : 3 * head_size], qkv[:, 3 * head_size : 5 * head_size]  # fused qkv slices
    v_before = qkv[:, 5 * head_size :].clone()
    pos = positions_3(tokens, max_pos, seed=2)
    want_q = reference(pos, q, head_size, cos_sin, section, False, True)
    want_k = reference(pos, k, head_size, cos_sin, section, False, True)
    MROPE(pos.to(torch.int32), q, k, head_size, cos_sin, section, False, True)
    assert_matches(q, want_q)
    assert_matches(k, want_k)
    torch.testing.assert_close(qkv[:, 5 * head_size :], v_before, rtol=0, atol=0)


def test_empty_and_one_token() -> None:
    cos_sin = cache(10, 16, torch.float32)
    q, k = torch.zeros(0, 32), torch.zeros(0, 16)
    MROPE(torch.zeros(3, 0, dtype=torch.long), q, k, 16, cos_sin, [2, 3, 3], False, True)
    q1, k1 = randn(1, 16, dtype=torch.float32, seed=1), torch.zeros(1, 0)
    want = reference(torch.tensor([[9], [0], [4]]), q1, 16, cos_sin, [2, 3, 3], True, True)
    MROPE(torch.tensor([[9], [0], [4]]), q1, k1, 16, cos_sin, [2, 3, 3], True, True)
    assert_matches(q1, want)
    many_q = randn(400, 2 * 64, dtype=torch.bfloat16, seed=2)  # threads
    many_k = randn(400, 64, dtype=torch.bfloat16, seed=3)
    cs = cache(500, 64, torch.bfloat16)
    pos = positions_3(400, 500, seed=4)
    want_q = reference(pos, many_q, 64, cs, [8, 12, 12], False, True)
    MROPE(pos, many_q, many_k, 64, cs, [8, 12, 12], False, True)
    assert_matches(many_q, want_q)


def test_opcheck() -> None:
    cos_sin = cache(20, 16, torch.float32)
    q, k = randn(3, 32, dtype=torch.float32, seed=1), randn(3, 16, dtype=torch.float32, seed=2)
    torch.library.opcheck(
        MROPE, (positions_3(3, 20, seed=3), q, k, 16, cos_sin, [2, 3, 3], False, True)
    )
    torch.library.opcheck(MROPE, (torch.tensor([1, 5, 19]), q, k, 16, cos_sin, None, False, False))


C = Cases(
    MROPE,
    {
        "positions": torch.zeros(3, 4, dtype=torch.long),
        "query": torch.zeros(4, 32),
        "key": torch.zeros(4, 16),
        "head_size": 16,
        "cos_sin_cache": torch.zeros(10, 16),
        "mrope_section": [2, 3, 3],
        "mrope_interleaved": False,
        "is_neox": True,
    },
    words=("multimodal_rotary_embedding_cpu",),
)
BAD = {
    "float positions": C(TypeError, ("positions", "torch.float32"), positions=torch.zeros(3, 4)),
    "positions [2, T]": C(
        ValueError, ("positions", "[3, tokens]"), positions=torch.zeros(2, 4, dtype=torch.long)
    ),
    "no section": C(ValueError, ("mrope_section", "None"), mrope_section=None),
    "two sections": C(ValueError, ("mrope_section", "[2, 6]"), mrope_section=[2, 6]),
    "section sum": C(
        ValueError, ("mrope_section", "sums to 9", "rotary_dim / 2 = 8"), mrope_section=[3, 3, 3]
    ),
    "negative section": C(ValueError, ("mrope_section", "negative"), mrope_section=[-1, 5, 4]),
    "3-D query": C(ValueError, ("query", "3-d"), query=torch.zeros(4, 2, 16)),
    "query tokens": C(ValueError, ("query", "5 tokens", "= 4"), query=torch.zeros(5, 32)),
    "key width": C(ValueError, ("key", "20", "head_size = 16"), key=torch.zeros(4, 20)),
    "key dtype": C(TypeError, ("key", "torch.float16"), key=torch.zeros(4, 16).half()),
    "cache dtype": C(
        TypeError, ("cos_sin_cache", "torch.float16"), cos_sin_cache=torch.zeros(10, 16).half()
    ),
    "rotary_dim > head": C(
        ValueError, ("rotary_dim 18",), cos_sin_cache=torch.zeros(10, 18), mrope_section=[3, 3, 3]
    ),
    "head_size 0": C(ValueError, ("head_size is 0",), head_size=0),
    "position out of range": C(
        ValueError,
        ("positions[2, 1]", "is 10", "cos_sin_cache.size(0) = 10"),
        positions=torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3], [0, 10, 2, 3]]),
        fake_too=False,
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input(case: str) -> None:
    bad: Bad = BAD[case]
    bad.check()
