"""The two Qwen3.5 ops SGLang 0.5.23 binds at import time (models/qwen3_5.py):
fused_qk_gemma_rmsnorm_with_gate_cpu against a float64 reference of SGLang's non-fused path
(q / gate halves per head, GemmaRMSNorm per head), and
fused_qkvzba_split_reshape_cat_contiguous_cpu against SGLang's split / reshape / cat; bad
inputs and opcheck."""

from __future__ import annotations

import pytest
import rvv_ops
import torch

WITH_GATE = torch.ops.sgl_kernel.fused_qk_gemma_rmsnorm_with_gate_cpu.default
SPLIT = torch.ops.sgl_kernel.fused_qkvzba_split_reshape_cat_contiguous_cpu.default
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _gemma_rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.double())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("tokens", "heads", "kv_heads", "head_dim"),
    [(1, 1, 1, 8), (5, 6, 2, 16), (3, 3, 1, 33), (0, 4, 2, 8), (17, 8, 1, 64)],
    ids=str,
)
def test_qk_gemma_rmsnorm_with_gate(
    tokens: int, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype
) -> None:
    g = torch.Generator().manual_seed(tokens * 100 + heads)
    # As SGLang passes them: column slices of one qkv row.
    width = 2 * heads * head_dim + 2 * kv_heads * head_dim
    qkv = torch.randn(tokens, width, generator=g).to(dtype)
    q_gate, k, _ = qkv.split([2 * heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], -1)
    qw = torch.randn(head_dim, generator=g).to(dtype)
    kw = torch.randn(head_dim, generator=g).to(dtype)
    q, k_out, gate = WITH_GATE(q_gate, k, qw, kw, 1e-6, head_dim, heads)
    assert q.shape == gate.shape == (tokens * heads, head_dim)
    assert k_out.shape == (tokens * kv_heads, head_dim)
    qg = q_gate.reshape(tokens, heads, 2 * head_dim)
    ref_q = _gemma_rms(qg[..., :head_dim], qw, 1e-6).reshape(-1, head_dim)
    ref_k = _gemma_rms(k.reshape(tokens, kv_heads, head_dim), kw, 1e-6).reshape(-1, head_dim)
    tol = 2e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(q.double(), ref_q, atol=tol, rtol=tol)
    torch.testing.assert_close(k_out.double(), ref_k, atol=tol, rtol=tol)
    assert torch.equal(gate, qg[..., head_dim:].reshape(-1, head_dim))
    w = rvv_ops.norms.fused_qk_gemma_rmsnorm_with_gate(q_gate, k, qw, kw, 1e-6, head_dim, heads)
    assert all(torch.equal(a, b) for a, b in zip(w, (q, k_out, gate), strict=True))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("tokens", "nk", "nv", "hk", "hv"), [(1, 1, 1, 4, 4), (7, 2, 6, 16, 8), (0, 2, 4, 8, 8)]
)
def test_qkvzba_split_contiguous(
    tokens: int, nk: int, nv: int, hk: int, hv: int, dtype: torch.dtype
) -> None:
    g = torch.Generator().manual_seed(tokens + nv)
    qkvz = torch.randn(tokens, 2 * nk * hk + 2 * nv * hv + 3, generator=g).to(dtype)[:, 3:]
    ba = torch.randn(tokens, 2 * nv, generator=g).to(dtype)
    mixed, z, b, a = SPLIT(qkvz, ba, nk, nv, hk, hv)
    q, k, v, zz = qkvz.split([nk * hk, nk * hk, nv * hv, nv * hv], -1)
    assert torch.equal(mixed, torch.cat([q, k, v], -1))
    assert torch.equal(z, zz.reshape(tokens, nv, hv))
    assert torch.equal(b, ba[:, :nv]) and torch.equal(a, ba[:, nv:])
    assert mixed.is_contiguous() and z.is_contiguous() and b.is_contiguous()
    assert mixed.data_ptr() != qkvz.data_ptr() or tokens == 0


def test_bad_inputs() -> None:
    q_gate, k = torch.randn(2, 2 * 3 * 8), torch.randn(2, 8)
    w = torch.randn(8)
    with pytest.raises(ValueError, match=r"q_gate.size\(1\) = 48; expected 2 \* num_head"):
        WITH_GATE(q_gate, k, w, w, 1e-6, 8, 2)
    with pytest.raises(ValueError, match=r"k.size\(1\) = 8 is not a multiple of head_dim = 3"):
        WITH_GATE(torch.randn(2, 12), k, torch.randn(3), torch.randn(3), 1e-6, 3, 2)
    with pytest.raises(ValueError, match=r"head_dim is 0"):
        WITH_GATE(q_gate, k, w, w, 1e-6, 0, 3)
    with pytest.raises(TypeError, match=r"q_weight has dtype"):
        WITH_GATE(q_gate, k, w.double(), w, 1e-6, 8, 3)
    with pytest.raises(ValueError, match=r"mixed_qkvz.size\(1\) = 10; expected"):
        SPLIT(torch.randn(2, 10), torch.randn(2, 4), 1, 2, 2, 2)
    with pytest.raises(ValueError, match=r"mixed_ba.size\(1\) = 3; expected 2 \* num_heads_v"):
        SPLIT(torch.randn(2, 12), torch.randn(2, 3), 1, 2, 2, 2)
    with pytest.raises(ValueError, match=r"num_heads_v is 0"):
        SPLIT(torch.randn(2, 12), torch.randn(2, 4), 1, 0, 2, 2)
    with pytest.raises(ValueError, match=r"mixed_ba has 3 rows"):
        SPLIT(torch.randn(2, 12), torch.randn(3, 4), 1, 2, 2, 2)


def test_opcheck() -> None:
    q_gate = torch.randn(3, 2 * 2 * 8)
    torch.library.opcheck(WITH_GATE, (q_gate, torch.randn(3, 8), torch.randn(8), torch.randn(8),
                                      1e-6, 8, 2))  # fmt: skip
    torch.library.opcheck(SPLIT, (torch.randn(3, 12), torch.randn(3, 4), 1, 2, 2, 2))


QK_NORM = torch.ops.sgl_kernel.fused_qk_norm_cpu.default


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("tokens", "heads", "kv_heads", "head_dim"),
    [(1, 1, 1, 8), (5, 6, 2, 16), (4, 3, 1, 33), (0, 2, 1, 8), (9, 16, 4, 128)],
    ids=str,
)
def test_fused_qk_norm_in_place_on_qkv_slices(
    tokens: int, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype
) -> None:
    """SGLang's apply_qk_norm: q and k are column slices of one qkv row, normalised in place
    per head; v is left alone."""
    g = torch.Generator().manual_seed(tokens * 7 + heads)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, generator=g).to(dtype)
    before = qkv.clone()
    q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], -1)
    qw = torch.randn(head_dim, generator=g).to(dtype)
    kw = torch.randn(head_dim, generator=g).to(dtype)
    QK_NORM(q, k, qw, kw, 1e-6)
    bq, bk, bv = before.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], -1)
    ref_q = _rms(bq.reshape(tokens, heads, head_dim), qw, 1e-6).reshape(tokens, heads * head_dim)
    ref_k = _rms(bk.reshape(tokens, kv_heads, head_dim), kw, 1e-6).reshape(
        tokens, kv_heads * head_dim
    )
    tol = 2e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(q.double(), ref_q, atol=tol, rtol=tol)
    torch.testing.assert_close(k.double(), ref_k, atol=tol, rtol=tol)
    assert torch.equal(v, bv)


def test_fused_qk_norm_bad_inputs_and_opcheck() -> None:
    q, k, w = torch.randn(2, 24), torch.randn(2, 8), torch.randn(8)
    with pytest.raises(ValueError, match=r"q.size\(-1\) = 24 is not a multiple of head_dim = 5"):
        QK_NORM(q, k, torch.randn(5), torch.randn(5), 1e-6)
    with pytest.raises(ValueError, match=r"k_weight has 4 elements; expected head_dim"):
        QK_NORM(q, k, w, torch.randn(4), 1e-6)
    with pytest.raises(ValueError, match=r"q has 2 rows .* and k 3"):
        QK_NORM(q, torch.randn(3, 8), w, w, 1e-6)
    with pytest.raises(ValueError, match=r"eps"):
        QK_NORM(q, k, w, w, -1.0)
    torch.library.opcheck(QK_NORM, (torch.randn(3, 16), torch.randn(3, 8), w, w, 1e-6))
