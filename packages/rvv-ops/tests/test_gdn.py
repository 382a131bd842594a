"""Gated DeltaNet's ops (csrc/gdn.cpp) against float64 references written here: the causal
conv1d ops with their conv states, the decode step of the gated delta rule against its
recurrent form, the prefill op against the chunked (UT-transform) form of the same
recurrence; odd sizes, empty and length-1 sequences, padding slots, every dtype; bad
inputs; torch.library.opcheck."""

from __future__ import annotations

import pytest
import rvv_ops
import torch
from torch import Tensor

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# fp32 kernels on rounded inputs: the output tolerance is the dtype's (outputs are rounded)
TOL = {torch.float32: 2e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}
F64 = torch.float64


def _close(got: Tensor, want: Tensor, dtype: torch.dtype, what: str) -> None:
    tol = TOL[dtype]
    torch.testing.assert_close(got.to(F64), want, rtol=tol, atol=tol, msg=lambda m: f"{what}: {m}")


# ---------------------------------------------------------------------------------------
# causal conv1d


def conv_ref(
    x: Tensor, hist: Tensor, w: Tensor, bias: Tensor | None, silu: bool
) -> tuple[Tensor, Tensor]:
    """x [len, dim], hist [width - 1, dim] (oldest first), w [dim, width]: (out [len, dim],
    the new history [width - 1, dim]), float64."""
    width = w.shape[1]
    window = torch.cat([hist, x], 0)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        acc = torch.zeros(x.shape[1], dtype=F64) if bias is None else bias.clone()
        for j in range(width):
            acc = acc + w[:, j] * window[t + j]
        out[t] = acc * torch.sigmoid(acc) if silu else acc
    return out, window[window.shape[0] - (width - 1) :]


def _conv_case(dtype: torch.dtype, dim: int, width: int, lens: list[int], seed: int):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed)
    total = sum(lens) + 2  # two padding tokens past the last sequence
    x = torch.randn(total, dim, generator=g).to(dtype)
    w = torch.randn(dim, width, generator=g).to(dtype)
    bias = torch.randn(dim, generator=g).to(dtype)
    slots = len(lens) + 3
    states = torch.randn(slots, dim, width - 1, generator=g).to(dtype)
    return x, w, bias, states


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim,width", [(1, 4), (17, 4), (300, 4), (33, 2), (8, 1)])
@pytest.mark.parametrize("silu,with_bias", [(True, True), (False, False)])
def test_conv_fwd_varlen(
    dtype: torch.dtype, dim: int, width: int, silu: bool, with_bias: bool
) -> None:
    lens = [3, 0, 1, 9, 2]
    x, w, bias, states = _conv_case(dtype, dim, width, lens, seed=dim + width)
    qsl = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    idx = torch.tensor([4, 0, 2, -1, 6], dtype=torch.int32)  # -1: pad_slot_id
    init = torch.tensor([True, True, False, True, True])
    before = states.clone()
    xt = x.t()  # [dim, total], as SGLang passes mixed_qkv.transpose(0, 1)
    out = rvv_ops.causal_conv1d_fwd(
        xt, w, bias if with_bias else None, states, qsl, idx, init, silu, -1
    )
    assert out.shape == xt.shape and out.dtype == dtype and out.stride() == xt.stride()
    want_states = before.to(F64).clone()
    for i, n in enumerate(lens):
        s0 = int(qsl[i])
        slot = int(idx[i])
        hist = (
            before[slot].to(F64).t()
            if slot >= 0 and bool(init[i])
            else torch.zeros(width - 1, dim, dtype=F64)
        )
        o, new = conv_ref(
            x[s0 : s0 + n].to(F64), hist, w.to(F64), bias.to(F64) if with_bias else None, silu
        )
        _close(out.t()[s0 : s0 + n], o, dtype, f"seq {i} out")
        if slot >= 0:
            want_states[slot] = new.t()
    assert torch.all(out.t()[sum(lens) :] == 0)
    _close(states, want_states, dtype, "conv_states")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_conv_fwd_batched(dtype: torch.dtype) -> None:
    batch, dim, seqlen, width = 3, 19, 5, 4
    g = torch.Generator().manual_seed(7)
    x = torch.randn(batch, dim, seqlen, generator=g).to(dtype)
    w = torch.randn(dim, width, generator=g).to(dtype)
    states = torch.randn(batch, dim, width - 1, generator=g).to(dtype)
    before = states.clone()
    init = torch.tensor([True, False, True])
    out = rvv_ops.causal_conv1d_fwd(x, w, None, states, None, None, init, True)
    for b in range(batch):
        hist = before[b].to(F64).t() if bool(init[b]) else torch.zeros(width - 1, dim, dtype=F64)
        o, new = conv_ref(x[b].t().to(F64), hist, w.to(F64), None, True)
        _close(out[b].t(), o, dtype, f"batch {b}")
        _close(states[b].t(), new, dtype, f"state {b}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("seqlen", [None, 1, 3])
def test_conv_update(dtype: torch.dtype, seqlen: int | None) -> None:
    batch, dim, width = 4, 37, 4
    g = torch.Generator().manual_seed(11)
    shape = (batch, dim) if seqlen is None else (batch, dim, seqlen)
    x = torch.randn(*shape, generator=g).to(dtype)
    w = torch.randn(dim, width, generator=g).to(dtype)
    bias = torch.randn(dim, generator=g).to(dtype)
    # SGLang's pool: [slots, dim, width - 1] views of a larger buffer
    states = torch.randn(7, dim, width + 2, generator=g).to(dtype)[:, :, 1:width]
    before = states.clone()
    idx = torch.tensor([5, 1, -1, 3], dtype=torch.int64)
    out = rvv_ops.causal_conv1d_update(x, states, w, bias, True, None, idx, -1)
    assert out.shape == x.shape
    want = before.to(F64).clone()
    for b in range(batch):
        slot = int(idx[b])
        hist = before[slot].to(F64).t() if slot >= 0 else torch.zeros(width - 1, dim, dtype=F64)
        xb = x[b].to(F64).reshape(dim, -1).t()
        o, new = conv_ref(xb, hist, w.to(F64), bias.to(F64), True)
        _close(out[b].reshape(dim, -1).t(), o, dtype, f"row {b}")
        if slot >= 0:
            want[slot] = new.t()
    _close(states, want, dtype, "conv_states")


def _vnni_pack(w: Tensor) -> Tensor:
    """sgl-kernel's causal_conv1d_weight_pack layout, built from its description: 16-bit
    pairs (k, k + 1) of 32-channel blocks: [dim / 32, width / 2, 32, 2]."""
    dim, width = w.shape
    return w.reshape(dim // 32, 32, width // 2, 2).permute(0, 2, 1, 3).reshape(dim, width)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_conv_vnni_weight(dtype: torch.dtype) -> None:
    dim, width = 64, 4
    g = torch.Generator().manual_seed(3)
    x = torch.randn(dim, 6, generator=g).to(dtype)
    w = torch.randn(dim, width, generator=g).to(dtype)
    qsl = torch.tensor([0, 6], dtype=torch.int32)
    plain = rvv_ops.causal_conv1d_fwd(x, w, None, None, qsl, None, None, True, -1, False)
    packed = rvv_ops.causal_conv1d_fwd(
        x, _vnni_pack(w), None, None, qsl, None, None, True, -1, True
    )
    assert torch.equal(plain, packed)


# ---------------------------------------------------------------------------------------
# gated delta rule


def _l2(x: Tensor, eps: float) -> Tensor:
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def gdn_recurrent_ref(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor
) -> tuple[Tensor, Tensor]:
    """One sequence, float64, token by token. q, k [T, H, K], v [T, HV, V], g, beta [T, HV],
    state [HV, V, K] (q, k already normalised): (out [T, HV, V], final state)."""
    T, H, K = q.shape
    HV = v.shape[1]
    S = state.clone()
    out = torch.zeros(T, HV, v.shape[2], dtype=F64)
    for t in range(T):
        for h in range(HV):
            hq = h // (HV // H)
            S[h] = S[h] * torch.exp(g[t, h])
            pred = S[h] @ k[t, hq]
            S[h] = S[h] + beta[t, h] * torch.outer(v[t, h] - pred, k[t, hq])
            out[t, h] = (S[h] @ q[t, hq]) * K**-0.5
    return out, S


def gdn_chunk_ref(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor, chunk: int
) -> tuple[Tensor, Tensor]:
    """As gdn_recurrent_ref, by chunks (the UT transform of the chunked algorithm): within a
    chunk with cumulative log decay G, the corrections u solve (I + A) u = beta (v -
    exp(G) S0 k), A[i, j] = beta_i exp(G_i - G_j) k_i . k_j (j < i); outputs and the final
    state follow from S0 and u in closed form."""
    T, H, K = q.shape
    HV = v.shape[1]
    S = state.clone()
    out = torch.zeros(T, HV, v.shape[2], dtype=F64)
    for h in range(HV):
        hq = h // (HV // H)
        for c0 in range(0, T, chunk):
            sl = slice(c0, min(c0 + chunk, T))
            qc, kc, vc = q[sl, hq], k[sl, hq], v[sl, h]
            bc, G = beta[sl, h], torch.cumsum(g[sl, h], 0)
            n = qc.shape[0]
            D = torch.exp(G[:, None] - G[None, :])  # exp(G_i - G_j)
            strict = torch.tril(torch.ones(n, n, dtype=torch.bool), -1)
            A = torch.where(strict, bc[:, None] * D * (kc @ kc.t()), torch.zeros((), dtype=F64))
            rhs = bc[:, None] * (vc - torch.exp(G)[:, None] * (kc @ S[h].t()))
            u = torch.linalg.solve_triangular(torch.eye(n, dtype=F64) + A, rhs, upper=False)
            causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
            P = torch.where(causal, D * (qc @ kc.t()), torch.zeros((), dtype=F64))
            out[sl, h] = (torch.exp(G)[:, None] * (qc @ S[h].t()) + P @ u) * K**-0.5
            S[h] = torch.exp(G[-1]) * S[h] + (torch.exp(G[-1] - G)[:, None] * u).t() @ kc
    return out, S


def test_chunk_reference_is_the_recurrence() -> None:
    """The two float64 references agree, so each checks the op against the same math."""
    gen = torch.Generator().manual_seed(0)
    T, H, HV, K, V = 11, 1, 2, 6, 5
    q = _l2(torch.randn(T, H, K, generator=gen, dtype=F64), 1e-6)
    k = _l2(torch.randn(T, H, K, generator=gen, dtype=F64), 1e-6)
    v = torch.randn(T, HV, V, generator=gen, dtype=F64)
    g = -torch.rand(T, HV, generator=gen, dtype=F64)
    beta = torch.rand(T, HV, generator=gen, dtype=F64)
    s = torch.randn(HV, V, K, generator=gen, dtype=F64)
    o1, s1 = gdn_recurrent_ref(q, k, v, g, beta, s)
    o2, s2 = gdn_chunk_ref(q, k, v, g, beta, s, chunk=4)
    torch.testing.assert_close(o1, o2)
    torch.testing.assert_close(s1, s2)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("H,HV,K,V", [(1, 1, 5, 7), (2, 4, 16, 16), (1, 3, 33, 9)])
@pytest.mark.parametrize("seq_len", [1, 2])
def test_fused_sigmoid_gating_decode(
    dtype: torch.dtype, H: int, HV: int, K: int, V: int, seq_len: int
) -> None:
    gen = torch.Generator().manual_seed(H * 100 + K + seq_len)
    B, slots = 3, 6
    q = torch.randn(seq_len, B, H, K, generator=gen).to(dtype)
    k = torch.randn(seq_len, B, H, K, generator=gen).to(dtype)
    v = torch.randn(seq_len, B, HV, V, generator=gen).to(dtype)
    a = torch.randn(B, HV, generator=gen).to(dtype)
    b = torch.randn(B, HV, generator=gen).to(dtype)
    A_log = torch.randn(HV, generator=gen)
    dt_bias = torch.randn(HV, generator=gen).to(dtype)
    state = torch.randn(slots, HV, V, K, generator=gen)
    before = state.clone()
    idx = torch.tensor([4, -1, 1], dtype=torch.int32)
    cu = torch.arange(B + 1, dtype=torch.int32)
    out = rvv_ops.fused_sigmoid_gating_delta_rule_update(
        A_log, dt_bias, q, k, v, a, b, state, idx, cu, True
    )
    assert out.shape == (B, seq_len, HV, V) and out.dtype == dtype
    g = -torch.exp(A_log.to(F64)) * torch.nn.functional.softplus(a.to(F64) + dt_bias.to(F64))
    beta = torch.sigmoid(b.to(F64))
    want_state = before.to(F64).clone()
    for i in range(B):
        slot = int(idx[i])
        s0 = before[slot].to(F64) if slot >= 0 else torch.zeros(HV, V, K, dtype=F64)
        o, s1 = gdn_recurrent_ref(
            _l2(q[:, i].to(F64), 1e-6),
            _l2(k[:, i].to(F64), 1e-6),
            v[:, i].to(F64),
            g[i].expand(seq_len, HV),
            beta[i].expand(seq_len, HV),
            s0,
        )
        _close(out[i], o, dtype, f"out {i}")
        if slot >= 0:
            want_state[slot] = s1
    torch.testing.assert_close(state.to(F64), want_state, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("H,HV,K,V", [(1, 2, 8, 8), (2, 2, 17, 5)])
@pytest.mark.parametrize("l2norm", [True, False])
def test_chunk_gated_delta_rule(
    dtype: torch.dtype, H: int, HV: int, K: int, V: int, l2norm: bool
) -> None:
    gen = torch.Generator().manual_seed(K * 7 + HV + int(l2norm))
    lens = [5, 0, 1, 70]
    T = sum(lens)
    q = torch.randn(1, T, H, K, generator=gen).to(dtype)
    k = torch.randn(1, T, H, K, generator=gen).to(dtype)
    if not l2norm:  # keep the recurrence stable without the norm
        k = (k / (K**0.5 * 1.5)).to(dtype)
    v = torch.randn(1, T, HV, V, generator=gen).to(dtype)
    g = -torch.rand(1, T, HV, generator=gen)  # fp32, as fused_gdn_gating_cpu returns
    beta = torch.rand(1, T, HV, generator=gen).to(dtype)
    state = torch.randn(7, HV, V, K, generator=gen)
    before = state.clone()
    cu = torch.tensor([0, 5, 5, 6, 76], dtype=torch.int32)
    idx = torch.tensor([2, 0, -1, 5], dtype=torch.int32)
    out, final = rvv_ops.chunk_gated_delta_rule(
        q, k, v, g, beta, state, True, cu, False, l2norm, idx
    )
    assert out.shape == (1, T, HV, V) and out.dtype == dtype
    assert final.shape == (4, HV, V, K) and final.dtype == torch.float32
    want_state = before.to(F64).clone()
    for i, n in enumerate(lens):
        s, slot = int(cu[i]), int(idx[i])
        s0 = before[slot].to(F64) if slot >= 0 else torch.zeros(HV, V, K, dtype=F64)
        qq, kk = q[0, s : s + n].to(F64), k[0, s : s + n].to(F64)
        if l2norm:
            qq, kk = _l2(qq, 1e-6), _l2(kk, 1e-6)
        o, s1 = gdn_chunk_ref(
            qq, kk, v[0, s : s + n].to(F64), g[0, s : s + n].to(F64),
            beta[0, s : s + n].to(F64), s0, chunk=64,
        )  # fmt: skip
        _close(out[0, s : s + n], o, dtype, f"seq {i}")
        if slot >= 0:
            want_state[slot] = s1
            torch.testing.assert_close(final[i].to(F64), s1, rtol=1e-4, atol=1e-4)
        else:
            assert torch.all(final[i] == 0)
    torch.testing.assert_close(state.to(F64), want_state, rtol=1e-4, atol=1e-4)


def test_decode_continues_prefill() -> None:
    """A prefill then decode steps of one request equal the prefill of the whole sequence."""
    gen = torch.Generator().manual_seed(1)
    T, H, HV, K, V = 6, 1, 2, 8, 4
    q = torch.randn(1, T, H, K, generator=gen)
    k = torch.randn(1, T, H, K, generator=gen)
    v = torch.randn(1, T, HV, V, generator=gen)
    a = torch.randn(T, HV, generator=gen)
    b = torch.randn(T, HV, generator=gen)
    A_log, dt_bias = torch.randn(HV, generator=gen), torch.randn(HV, generator=gen)
    g = (-torch.exp(A_log) * torch.nn.functional.softplus(a + dt_bias))[None]
    beta = torch.sigmoid(b)[None]
    s_all = torch.zeros(2, HV, V, K)
    idx = torch.tensor([1], dtype=torch.int32)
    full, _ = rvv_ops.chunk_gated_delta_rule(
        q, k, v, g, beta, s_all, False, torch.tensor([0, T], dtype=torch.int32), False, True, idx
    )
    s_inc = torch.zeros(2, HV, V, K)
    part, _ = rvv_ops.chunk_gated_delta_rule(
        q[:, :3], k[:, :3], v[:, :3], g[:, :3], beta[:, :3], s_inc, False,
        torch.tensor([0, 3], dtype=torch.int32), False, True, idx,
    )  # fmt: skip
    outs = [part[0]]
    for t in range(3, T):
        o = rvv_ops.fused_sigmoid_gating_delta_rule_update(
            A_log, dt_bias, q[:, t : t + 1], k[:, t : t + 1], v[:, t : t + 1],
            a[t : t + 1], b[t : t + 1], s_inc, idx, torch.tensor([0, 1], dtype=torch.int32), True,
        )  # fmt: skip
        outs.append(o[0])
    torch.testing.assert_close(torch.cat(outs, 0), full[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s_inc, s_all, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------
# bad inputs: the exception, the argument and its value in the message, nothing written


def _conv_args() -> dict[str, object]:
    return {
        "x": torch.randn(8, 5),
        "weight": torch.randn(8, 4),
        "bias": None,
        "conv_states": torch.zeros(3, 8, 3),
        "query_start_loc": torch.tensor([0, 2, 5], dtype=torch.int32),
        "cache_indices": torch.tensor([0, 2], dtype=torch.int32),
        "has_initial_state": torch.tensor([True, False]),
        "silu_activation": True,
        "pad_slot_id": -1,
        "is_vnni": False,
    }


@pytest.mark.parametrize(
    "change,exc,words",
    [
        ({"x": torch.randn(8, 5, dtype=F64)}, TypeError, ["x", "torch.float64"]),
        ({"x": torch.randn(2, 8, 5, 1)}, ValueError, ["x", "4 dimensions"]),
        ({"weight": torch.randn(7, 4)}, ValueError, ["weight", "[7, 4]"]),
        ({"conv_states": torch.zeros(3, 8, 2)}, ValueError, ["conv_states", "[3, 8, 2]"]),
        (
            {"cache_indices": torch.tensor([0, 3], dtype=torch.int32)},
            ValueError,
            ["cache_indices[1] = 3", "< 3"],
        ),
        ({"cache_indices": torch.tensor([2, 2], dtype=torch.int32)}, ValueError, ["slot 2 twice"]),
        (
            {"cache_indices": torch.tensor([0.0, 1.0])},
            TypeError,
            ["cache_indices", "torch.float32"],
        ),
        (
            {"query_start_loc": torch.tensor([0, 4, 2], dtype=torch.int32)},
            ValueError,
            ["query_start_loc", "non-decreasing"],
        ),
        (
            {"query_start_loc": torch.tensor([0, 2, 6], dtype=torch.int32)},
            ValueError,
            ["query_start_loc", "[0, 5]"],
        ),
        (
            {"has_initial_state": torch.tensor([1, 0])},
            TypeError,
            ["has_initial_state", "torch.bool"],
        ),
        ({"is_vnni": True}, ValueError, ["is_vnni", "fp32"]),
    ],
)
def test_conv_fwd_bad_inputs(
    change: dict[str, object], exc: type[Exception], words: list[str]
) -> None:
    args = {**_conv_args(), **change}
    states = args["conv_states"]
    assert isinstance(states, Tensor)
    before = states.clone()
    with pytest.raises(exc) as info:
        torch.ops.sgl_kernel.causal_conv1d_fwd_cpu(*args.values())
    for w in ["causal_conv1d_fwd_cpu", *words]:
        assert w in str(info.value)
    assert torch.equal(states, before)


def test_conv_update_bad_inputs() -> None:
    x, s, w = torch.randn(2, 8), torch.zeros(2, 8, 3), torch.randn(8, 4)
    op = torch.ops.sgl_kernel.causal_conv1d_update_cpu
    with pytest.raises(ValueError, match="cache_seqlens"):
        op(x, s, w, None, True, torch.tensor([1, 1], dtype=torch.int32), None, -1, False)
    with pytest.raises(ValueError, match=r"conv_state_indices\[0\] = 5"):
        op(x, s, w, None, True, None, torch.tensor([5, 0], dtype=torch.int32), -1, False)
    with pytest.raises(ValueError, match="conv_state_indices has shape"):
        op(x, s, w, None, True, None, torch.tensor([0], dtype=torch.int32), -1, False)
    with pytest.raises(ValueError, match="x has 1 dimensions"):
        op(torch.randn(8), s, w, None, True, None, None, -1, False)
    assert torch.all(s == 0)


def _gdn_args() -> dict[str, object]:
    B, H, HV, K, V = 2, 1, 2, 4, 3
    return {
        "A_log": torch.zeros(HV),
        "dt_bias": torch.zeros(HV),
        "q": torch.randn(1, B, H, K),
        "k": torch.randn(1, B, H, K),
        "v": torch.randn(1, B, HV, V),
        "a": torch.randn(B, HV),
        "b": torch.randn(B, HV),
        "initial_state_source": torch.zeros(3, HV, V, K),
        "initial_state_indices": torch.tensor([0, 2], dtype=torch.int32),
        "cu_seqlens": torch.tensor([0, 1, 2], dtype=torch.int32),
        "use_qk_l2norm_in_kernel": True,
    }


@pytest.mark.parametrize(
    "change,exc,words",
    [
        (
            {"q": torch.randn(1, 2, 1, 4, dtype=F64)},
            TypeError,
            ["q", "torch.float64"],
        ),
        ({"k": torch.randn(1, 2, 1, 5)}, ValueError, ["k has shape", "[1, 2, 1, 5]"]),
        (
            {
                "q": torch.randn(1, 2, 2, 4),
                "k": torch.randn(1, 2, 2, 4),
                "v": torch.randn(1, 2, 3, 3),
                "a": torch.randn(2, 3),
                "b": torch.randn(2, 3),
                "A_log": torch.zeros(3),
                "dt_bias": torch.zeros(3),
            },
            ValueError,
            ["v has 3 heads", "multiple"],
        ),
        ({"a": torch.randn(3, 2)}, ValueError, ["a has shape", "[3, 2]"]),
        (
            {"initial_state_source": torch.zeros(3, 2, 4, 3)},
            ValueError,
            ["initial_state_source", "[3, 2, 4, 3]"],
        ),
        (
            {"initial_state_source": torch.zeros(3, 2, 3, 4, dtype=torch.bfloat16)},
            TypeError,
            ["initial_state_source", "bfloat16"],
        ),
        (
            {"initial_state_indices": torch.tensor([0, 3], dtype=torch.int32)},
            ValueError,
            ["initial_state_indices[1] = 3"],
        ),
        (
            {"initial_state_indices": torch.tensor([1, 1], dtype=torch.int32)},
            ValueError,
            ["slot 1 twice"],
        ),
        (
            {"cu_seqlens": torch.tensor([0, 2], dtype=torch.int32)},
            ValueError,
            ["cu_seqlens has shape"],
        ),
    ],
)
def test_fused_sigmoid_bad_inputs(
    change: dict[str, object], exc: type[Exception], words: list[str]
) -> None:
    args = {**_gdn_args(), **change}
    with pytest.raises(exc) as info:
        torch.ops.sgl_kernel.fused_sigmoid_gating_delta_rule_update_cpu(*args.values())
    for w in ["fused_sigmoid_gating_delta_rule_update_cpu", *words]:
        assert w in str(info.value)


def test_chunk_bad_inputs() -> None:
    T, H, K, V = 4, 1, 4, 4
    q, v = torch.randn(1, T, H, K), torch.randn(1, T, H, V)
    g, beta = -torch.rand(1, T, H), torch.rand(1, T, H)
    s = torch.zeros(2, H, V, K)
    op = torch.ops.sgl_kernel.chunk_gated_delta_rule_cpu
    cu, idx = torch.tensor([0, T], dtype=torch.int32), torch.tensor([1], dtype=torch.int32)
    with pytest.raises(ValueError, match="head_first"):
        op(q, q, v, g, beta, s, True, cu, True, True, idx)
    with pytest.raises(ValueError, match=r"cu_seqlens = \[0, 5\]"):
        op(q, q, v, g, beta, s, True, torch.tensor([0, 5], dtype=torch.int32), False, True, idx)
    with pytest.raises(ValueError, match=r"initial_state_indices\[0\] = 2"):
        op(q, q, v, g, beta, s, True, cu, False, True, torch.tensor([2], dtype=torch.int32))
    with pytest.raises(ValueError, match="g has shape"):
        op(q, q, v, g[:, :3], beta, s, True, cu, False, True, idx)
    with pytest.raises(ValueError, match="query has shape"):
        op(q.expand(2, T, H, K), q.expand(2, T, H, K), v, g, beta, s, True, cu, False, True, idx)
    assert torch.all(s == 0)


# ---------------------------------------------------------------------------------------
# opcheck


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck_gdn_ops(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(2)
    dim, width = 12, 4
    x = torch.randn(7, dim, generator=gen).to(dtype).t()
    w = torch.randn(dim, width, generator=gen).to(dtype)
    states = torch.randn(3, dim, width - 1, generator=gen).to(dtype)
    qsl = torch.tensor([0, 3, 7], dtype=torch.int32)
    idx = torch.tensor([2, 0], dtype=torch.int32)
    init = torch.tensor([True, False])
    torch.library.opcheck(
        torch.ops.sgl_kernel.causal_conv1d_fwd_cpu.default,
        (x, w, None, states, qsl, idx, init, True, -1, False),
    )
    torch.library.opcheck(
        torch.ops.sgl_kernel.causal_conv1d_update_cpu.default,
        (
            torch.randn(2, dim).to(dtype),
            states,
            w,
            w[:, 0].contiguous(),
            True,
            None,
            idx,
            -1,
            False,
        ),
    )
    B, H, HV, K, V = 2, 1, 2, 8, 4
    st = torch.randn(3, HV, V, K, generator=gen)
    torch.library.opcheck(
        torch.ops.sgl_kernel.fused_sigmoid_gating_delta_rule_update_cpu.default,
        (
            torch.randn(HV), torch.randn(HV).to(dtype), torch.randn(1, B, H, K).to(dtype),
            torch.randn(1, B, H, K).to(dtype), torch.randn(1, B, HV, V).to(dtype),
            torch.randn(B, HV).to(dtype), torch.randn(B, HV).to(dtype), st, idx,
            torch.tensor([0, 1, 2], dtype=torch.int32), True, 1.0, 20.0,
        ),
    )  # fmt: skip
    T = 5
    torch.library.opcheck(
        torch.ops.sgl_kernel.chunk_gated_delta_rule_cpu.default,
        (
            torch.randn(1, T, H, K).to(dtype), torch.randn(1, T, H, K).to(dtype),
            torch.randn(1, T, HV, V).to(dtype), -torch.rand(1, T, HV),
            torch.rand(1, T, HV).to(dtype),
            st, True, torch.tensor([0, 2, 5], dtype=torch.int32), False, True, idx, 1e-6,
        ),
    )  # fmt: skip
