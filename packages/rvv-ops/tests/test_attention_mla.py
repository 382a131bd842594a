"""extend_attention_cpu in sgl-kernel's MLA layout: k_extend / v_extend with other heads than
the cache (SGLang's CPU MLA path and sgl-kernel's extend test pass a one-head latent cache and
new-token K/V with more heads). No request may then have a cached prefix: the new tokens
attend causally to each other only, with k_extend's heads. Checked against a float64
reference; a prefix, or heads that do not divide the query heads, are refused."""

from __future__ import annotations

import math

import pytest
import rvv_ops  # noqa: F401  (registers the ops)
import torch

EXTEND = torch.ops.sgl_kernel.extend_attention_cpu.default


def _inputs(lens: list[int], hq: int, hkv: int, d: int, dv: int, dtype: torch.dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    total = sum(lens)
    q = torch.randn(total, hq, d, generator=g).to(dtype)
    k_new = torch.randn(total, hkv, d, generator=g).to(dtype)
    v_new = torch.randn(total, hkv, dv, generator=g).to(dtype)
    k_buf = torch.randn(total + 3, 1, d, generator=g).to(dtype)  # a one-head latent cache
    v_buf = torch.randn(total + 3, 1, dv, generator=g).to(dtype)
    batch = len(lens)
    req_to_token = torch.zeros(batch, max([*lens, 1]) + 2, dtype=torch.int32)
    start = 0
    for b, n in enumerate(lens):
        req_to_token[b, :n] = torch.arange(start, start + n)
        start += n
    seq_lens = torch.tensor(lens, dtype=torch.int64)
    ext = torch.tensor(lens, dtype=torch.int32)
    starts = torch.zeros(batch, dtype=torch.int32)
    if batch > 1:
        starts[1:] = torch.cumsum(ext[:-1], 0)
    return q, k_new, v_new, k_buf, v_buf, req_to_token, seq_lens, ext, starts


def _reference(q, k, v, lens: list[int], sm_scale: float) -> torch.Tensor:
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[2], dtype=torch.float64)
    group = q.shape[1] // k.shape[1]
    start = 0
    for n in lens:
        qs, ks, vs = (t[start : start + n].double() for t in (q, k, v))
        ks = ks.repeat_interleave(group, dim=1)
        vs = vs.repeat_interleave(group, dim=1)
        s = torch.einsum("qhd,khd->hqk", qs, ks) * sm_scale
        mask = torch.ones(n, n, dtype=torch.bool).triu(1)
        s = s.masked_fill(mask, float("-inf"))
        out[start : start + n] = torch.einsum("hqk,khd->qhd", s.softmax(-1), vs)
        start += n
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(
    ("lens", "hq", "hkv", "d", "dv"),
    [
        ([5], 16, 4, 64, 48),
        ([1, 7, 3], 6, 3, 33, 17),
        ([12], 1, 1, 16, 16),
        ([2, 0, 9], 12, 2, 40, 32),
    ],
    ids=str,
)
def test_mla_layout_matches_reference(
    lens: list[int], hq: int, hkv: int, d: int, dv: int, dtype: torch.dtype
) -> None:
    q, k, v, kb, vb, r2t, seq_lens, ext, starts = _inputs(lens, hq, hkv, d, dv, dtype, sum(lens))
    out = torch.full((q.shape[0], hq, dv), float("nan"), dtype=dtype)
    sm = 1.0 / math.sqrt(d)
    EXTEND(q, k, v, out, kb, vb, 1.0, 1.0, r2t, torch.arange(len(lens)), seq_lens, ext, starts,
           max([*lens, 0]), sm, 0.0, False, 0, None, None, None, True)  # fmt: skip
    ref = _reference(q, k, v, lens, sm)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


def test_mla_layout_refuses_a_prefix_and_bad_heads() -> None:
    q, k, v, kb, vb, r2t, seq_lens, ext, starts = _inputs([6], 8, 2, 16, 16, torch.float32, 1)
    out = torch.empty(6, 8, 16)
    args = (1.0, 1.0, r2t, torch.arange(1))
    with pytest.raises(ValueError, match=r"request 0 has a cached prefix of 2 tokens"):
        EXTEND(q[:4], k[:4], v[:4], out[:4], kb, vb, *args, seq_lens, ext - 2, starts, 4, 0.25,
               0.0, False, 0, None, None, None, True)  # fmt: skip
    with pytest.raises(ValueError, match=r"k_extend has shape .*: 3 KV heads; expected the "):
        EXTEND(q, torch.randn(6, 3, 16), torch.randn(6, 3, 16), out, kb, vb, *args, seq_lens,
               ext, starts, 6, 0.25, 0.0, False, 0, None, None, None, True)  # fmt: skip
    with pytest.raises(ValueError, match=r"v_extend .*num_kv_heads, from k_extend"):
        EXTEND(q, k, torch.randn(6, 4, 16), out, kb, vb, *args, seq_lens, ext, starts, 6, 0.25,
               0.0, False, 0, None, None, None, True)  # fmt: skip


def test_mla_layout_opcheck() -> None:
    q, k, v, kb, vb, r2t, seq_lens, ext, starts = _inputs([3, 4], 4, 2, 16, 8, torch.float32, 2)
    out = torch.empty(7, 4, 8)
    torch.library.opcheck(
        EXTEND,
        (q, k, v, out, kb, vb, 1.0, 1.0, r2t, torch.arange(2), seq_lens, ext, starts, 4, 0.25,
         0.0, False, 0, None, None, None, True),
    )  # fmt: skip
