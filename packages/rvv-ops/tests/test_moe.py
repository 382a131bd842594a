"""fused_experts_cpu and shared_expert_cpu against float64 references.

Unquantised experts: the expert MLPs in float64 from the same (dtype-rounded) inputs;
the ops compute in fp32 and round once, so the tolerance is fp32's accumulation error over
the sums plus one rounding to the output dtype. W8A8 experts: the reference quantises the
activations per row as SGLang's ``per_token_quant_int8`` (torch), sums exactly in int64, and
quantises the gated activations the same way; a quantised activation may land one step
away where it sits on a rounding boundary, which the tolerance allows for.

FP8 W8A16 experts: the float reference on the dequantised weights (fp8 value times its
block's scale). INT4 W4A8 experts (AWQ and GPTQ checkpoints written by test_quant_linear's
packers, converted by the 3-D convert_weight_packed_scale_zp): the gate/up GEMM in SGLang's
fp32 order (exact int64 group sums, then ``(sum * a_scale) * w_scale`` per group), the gated
activation quantised per row as for W8A8 with the same flip-aware tolerance, the down GEMM
from exact group sums.

Expert counts {1, 8, 60, 128}, top-k {1, 2, 8}, tokens {1, 3, 16, 300}; experts no token
chose and experts every token chose; odd hidden and intermediate sizes (where the format
allows: AWQ / GPTQ pack N and K in eights); biases; packed (is_vnni) and plain weights;
every kernel variant this CPU runs. Plus opcheck and bad inputs.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import rvv_ops
import torch
import torch.nn.functional as F
from rvv_ops.moe import FP8_W8A16, INT4_W4A8, INT8_W8A8, UNQUANT
from test_quant_linear import fp8_case, pack_awq, pack_gptq
from torch import Tensor

OPS = torch.ops.sgl_kernel


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def routing(
    tokens: int, experts: int, topk: int, g: torch.Generator, every: bool = False
) -> tuple[Tensor, Tensor]:
    """Distinct experts per token (what top-k gives) and positive weights; `every`: token t
    takes expert 0 first, so that one expert is chosen by every token."""
    ids = torch.stack([torch.randperm(experts, generator=g)[:topk] for _ in range(tokens)])
    if every and experts > 1:
        for t in range(tokens):
            row = ids[t].tolist()
            if 0 in row:
                row.remove(0)
            ids[t] = torch.tensor([0, *row[: topk - 1]])
    weights = torch.rand(tokens, topk, generator=g)
    return weights, ids.to(torch.int32)


def act64(g: Tensor, activation: str) -> Tensor:
    return F.silu(g) if activation == "silu" else F.gelu(g)


def float_reference(
    x: Tensor,
    w13: Tensor,
    w2: Tensor,
    weights: Tensor,
    ids: Tensor,
    b13: Tensor | None,
    b2: Tensor | None,
    activation: str,
) -> tuple[Tensor, Tensor]:
    """(out, magnitude) in float64, one expert at a time over the pairs that chose it:
    magnitude bounds the sums' absolute terms, for the fp32 error bound."""
    inter = w2.shape[2]
    xd = x.double()
    # per (token, choice); summed over the choices at the end
    out = torch.zeros(*ids.shape, x.shape[1], dtype=torch.float64)
    mag = torch.zeros(*ids.shape, x.shape[1], dtype=torch.float64)
    for e in ids.unique().tolist():
        t, j = (ids == e).nonzero(as_tuple=True)
        w13d, w2d = w13[e].double(), w2[e].double()
        gu = xd[t] @ w13d.T
        gu_mag = xd[t].abs() @ w13d.abs().T
        if b13 is not None:
            gu = gu + b13[e].double()
            gu_mag = gu_mag + b13[e].double().abs()
        a = act64(gu[:, :inter], activation)
        h = a * gu[:, inter:]
        # |d act / dg| <= 1.13: the gate's error, times |up|, plus the up's, times |act|
        h_mag = 1.13 * gu_mag[:, :inter] * gu[:, inter:].abs() + a.abs() * gu_mag[:, inter:]
        y = h @ w2d.T
        y_mag = (h.abs() + h_mag) @ w2d.abs().T
        if b2 is not None:
            y = y + b2[e].double()
            y_mag = y_mag + b2[e].double().abs()
        wt = weights[t, j].double().unsqueeze(1)
        out[t, j] = wt * y
        mag[t, j] = wt.abs() * y_mag
    return out.sum(1), mag.sum(1)


def quantize_rows(x: Tensor) -> tuple[Tensor, Tensor]:
    """SGLang's per_token_quant_int8 (torch), in fp32."""
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True).clamp_min(1e-10)
    q = (xf * (127 / amax)).round().clamp(-127, 127)
    return q.to(torch.int64), (amax / 127).squeeze(-1)


def w8a8_reference(
    x: Tensor, w13: Tensor, w2: Tensor, s13: Tensor, s2: Tensor, weights: Tensor, ids: Tensor
) -> tuple[Tensor, Tensor]:
    """(out, tolerance): the W8A8 arithmetic with exact integer sums; the tolerance allows a
    one-step change of each quantised activation that sits within 1e-4 steps of a
    rounding boundary (the op's fp32 gated activation differs from torch's by ulps)."""
    inter = w2.shape[2]
    xq, xs = quantize_rows(x)
    out = torch.zeros(*ids.shape, x.shape[1], dtype=torch.float64)
    tol = torch.zeros(*ids.shape, x.shape[1], dtype=torch.float64)
    for e in ids.unique().tolist():
        t, j = (ids == e).nonzero(as_tuple=True)
        acc = xq[t] @ w13[e].to(torch.int64).T
        gu = (acc.float() * xs[t].unsqueeze(1)) * s13[e]
        h = F.silu(gu[:, :inter]) * gu[:, inter:]
        hq, hs = quantize_rows(h)
        scaled = h * (127 / h.abs().amax(dim=1, keepdim=True).clamp_min(1e-10))
        near = ((scaled - scaled.floor() - 0.5).abs() < 1e-4).double()
        w2a = w2[e].double().abs()
        step = hs.double().unsqueeze(1) * s2[e].double()
        y = (hq @ w2[e].to(torch.int64).T).double() * step
        wt = weights[t, j].double().unsqueeze(1)
        out[t, j] = wt * y
        tol[t, j] = wt.abs() * (
            (near @ w2a.T) * step + 1e-5 * y.abs() + 1e-4 * step * w2a.sum(1) / inter
        )
    return out.sum(1), tol.sum(1)


def unquant_args(
    x: Tensor,
    w13: Tensor,
    w2: Tensor,
    weights: Tensor,
    ids: Tensor,
    *,
    inplace: bool = False,
    b13: Tensor | None = None,
    b2: Tensor | None = None,
    packed: bool = True,
    activation: str | None = "silu",
) -> tuple[object, ...]:
    """fused_experts_cpu's 18 positional arguments as SGLang's unquantised MoE passes them."""
    scales_zeros_block = (None, None, None, None, None)  # w1/w2_scale, w1/w2_zero, block_size
    alpha_limit = (None, None)
    return (x, w13, w2, weights, ids, inplace, UNQUANT, *scales_zeros_block, b13, b2,
            *alpha_limit, packed, activation)  # fmt: skip


def quant_moe_cases() -> Iterator[tuple[int, int, int, int]]:
    """(experts, topk, tokens, i): experts {1, 8, 60, 128} x top-k {1, 2, 8} (top-k <= experts)
    x tokens {1, 3, 16, 300}, i numbering them (the FP8 and INT4 tests pick sizes by it)."""
    i = 0
    for experts in (1, 8, 60, 128):
        for topk in (1, 2, 8):
            if topk > experts:
                continue
            for tokens in (1, 3, 16, 300):
                yield experts, topk, tokens, i
                i += 1


def moe_cases() -> Iterator[tuple[int, int, int, int, int]]:
    """(experts, topk, tokens, hidden, intermediate): quant_moe_cases' grid, i picking the
    sizes."""
    for experts, topk, tokens, i in quant_moe_cases():
        yield experts, topk, tokens, (33, 64, 17)[i % 3], (17, 40, 8, 1)[i % 4]


def rounding(dtype: torch.dtype, want: Tensor) -> Tensor:
    """The error of one rounding of `want` to `dtype` (fp16's subnormal spacing included)."""
    u = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}[dtype]
    return u * want.abs() + (2.0**-25 if dtype == torch.float16 else 0.0)


@pytest.mark.parametrize(("experts", "topk", "tokens", "hidden", "inter"), list(moe_cases()))
def test_fused_experts_float(experts: int, topk: int, tokens: int, hidden: int, inter: int) -> None:
    seed = experts * 1000 + topk * 100 + tokens + hidden + inter
    g = gen(seed)
    dtype = (torch.float32, torch.bfloat16, torch.float16)[seed % 3]
    wdtype = dtype if seed % 4 else torch.float32
    x = torch.randn(tokens, hidden, generator=g).to(dtype)
    w13 = (torch.randn(experts, 2 * inter, hidden, generator=g) / hidden**0.5).to(wdtype)
    w2 = (torch.randn(experts, hidden, inter, generator=g) / inter**0.5).to(wdtype)
    with_bias = seed % 2 == 0
    b13 = torch.randn(experts, 2 * inter, generator=g) if with_bias else None
    b2 = torch.randn(experts, hidden, generator=g) if with_bias else None
    weights, ids = routing(tokens, experts, topk, g, every=seed % 5 == 0)
    activation = "gelu" if seed % 7 == 0 else "silu"
    packed = seed % 3 != 1
    args13 = OPS.convert_weight_packed(w13) if packed else w13
    args2 = OPS.convert_weight_packed(w2) if packed else w2
    got = OPS.fused_experts_cpu(
        *unquant_args(
            x, args13, args2, weights, ids, b13=b13, b2=b2, packed=packed, activation=activation
        )
    )
    assert got.shape == x.shape and got.dtype == dtype
    want, mag = float_reference(x, w13, w2, weights, ids, b13, b2, activation)
    k = hidden + inter + topk + 8
    tol = k * 2.0**-24 * mag + rounding(dtype, want) + 1e-30
    check(got, want, tol)


def check(got: Tensor, want: Tensor, tol: Tensor) -> None:
    """|got - want| <= tol everywhere; else reports the worst element relative to tol."""
    err = (got.double() - want).abs()
    worst = int((err / tol).argmax())
    assert bool((err <= tol).all()), (
        f"{int((err > tol).sum())} elements out of tolerance; worst at "
        f"{divmod(worst, want.shape[1])}: got {float(got.flatten()[worst]):.9g}, want "
        f"{float(want.flatten()[worst]):.9g}, tolerance {float(tol.flatten()[worst]):.3g}"
    )


# The W8A8 reference loops in Python: 300 tokens only with the larger expert counts.
@pytest.mark.parametrize(
    ("experts", "topk", "tokens", "hidden", "inter"),
    [c for c in moe_cases() if c[2] < 300 or c[0] >= 60],
)
def test_fused_experts_w8a8(experts: int, topk: int, tokens: int, hidden: int, inter: int) -> None:
    seed = experts * 1000 + topk * 100 + tokens + hidden + inter + 7
    g = gen(seed)
    dtype = (torch.float32, torch.bfloat16, torch.float16)[seed % 3]
    x = torch.randn(tokens, hidden, generator=g).to(dtype)
    w13 = torch.randint(-128, 128, (experts, 2 * inter, hidden), generator=g, dtype=torch.int8)
    w2 = torch.randint(-128, 128, (experts, hidden, inter), generator=g, dtype=torch.int8)
    s13 = torch.rand(experts, 2 * inter, generator=g) / (64 * hidden**0.5) + 1e-4
    s2 = torch.rand(experts, hidden, generator=g) / (64 * inter**0.5) + 1e-4
    weights, ids = routing(tokens, experts, topk, g, every=seed % 3 == 0)
    packed = seed % 2 == 0
    got = OPS.fused_experts_cpu(
        x,
        OPS.convert_weight_packed(w13) if packed else w13,
        OPS.convert_weight_packed(w2) if packed else w2,
        weights,
        ids.to(torch.int64) if seed % 4 == 1 else ids,
        False,
        INT8_W8A8,
        s13.unsqueeze(-1) if seed % 2 else s13,  # SGLang's [E, N, 1] or [E, N]
        s2,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        packed,
        "silu",
    )
    want, tol = w8a8_reference(x, w13, w2, s13, s2, weights, ids)
    check(got, want, tol + rounding(dtype, want) + 1e-6)


DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def fp8_block_scales(
    experts: int, n: int, k: int, block: tuple[int, int], g: torch.Generator
) -> Tensor:
    nb, kb = -(-n // block[0]), -(-k // block[1])
    return (torch.rand(experts, nb, kb, generator=g) + 0.5) / (2 * k**0.5)


def fp8_dequant(w8: Tensor, scales: Tensor, block: tuple[int, int]) -> Tensor:
    """float64 [E, N, K]: each fp8 value times its block's scale."""
    n, k = w8.shape[1:]
    s = scales.double().repeat_interleave(block[0], 1)[:, :n].repeat_interleave(block[1], 2)
    return w8.double() * s[:, :, :k]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("experts", "topk", "tokens", "i"), list(quant_moe_cases()))
def test_fused_experts_fp8(
    experts: int, topk: int, tokens: int, i: int, dtype: torch.dtype
) -> None:
    hidden, inter = (33, 64, 17)[i % 3], (17, 40, 8, 1)[i % 4]
    block = ((128, 128), (4, 8), (3, 5))[i % 3]
    g = gen(experts * 1000 + topk * 100 + tokens + i)
    # fp8_case: every finite e4m3 value (magnitudes up to 448) in the first elements
    w13 = torch.stack([fp8_case(2 * inter, hidden, experts * 7 + e) for e in range(experts)])
    w2 = torch.stack([fp8_case(hidden, inter, experts * 11 + e) for e in range(experts)])
    s13 = fp8_block_scales(experts, 2 * inter, hidden, block, g) / 64
    s2 = fp8_block_scales(experts, hidden, inter, block, g) / 64
    if i % 2:  # SGLang keeps checkpoint scales in fp32; bf16 is accepted too
        s13, s2 = s13.bfloat16(), s2.bfloat16()
    x = torch.randn(tokens, hidden, generator=g).to(dtype)
    weights, ids = routing(tokens, experts, topk, g, every=i % 5 == 0)
    packed = i % 3 != 1
    got = OPS.fused_experts_cpu(
        x,
        OPS.convert_weight_packed(w13) if packed else w13,
        OPS.convert_weight_packed(w2) if packed else w2,
        weights,
        ids,
        False,
        FP8_W8A16,
        s13,
        s2,
        None,
        None,
        list(block),
        None,
        None,
        None,
        None,
        packed,
        "silu",
    )
    assert got.shape == x.shape and got.dtype == dtype
    w13d, w2d = fp8_dequant(w13, s13, block), fp8_dequant(w2, s2, block)
    want, mag = float_reference(x, w13d, w2d, weights, ids, None, None, "silu")
    blocks = -(-hidden // block[1]) + -(-inter // block[1])
    k = hidden + inter + topk + blocks + 8
    check(got, want, k * 2.0**-24 * mag + rounding(dtype, want) + 1e-30)


def int4_experts(
    experts: int, n: int, k: int, group: int, gptq: bool, g: torch.Generator
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Random q [E, N, K] (0..15), zeros [E, G, N] (AWQ 0..15, GPTQ 1..16), scales [E, G, N]
    (fp16, the checkpoints' dtype), and their AWQ / GPTQ checkpoint tensors (qweight,
    qzeros, scales) stacked over the experts."""
    groups = k // group
    q = torch.randint(0, 16, (experts, n, k), generator=g, dtype=torch.uint8)
    lo, hi = (1, 17) if gptq else (0, 16)
    zeros = torch.randint(lo, hi, (experts, groups, n), generator=g, dtype=torch.uint8)
    scales = ((torch.rand(experts, groups, n, generator=g) + 0.5) / (8 * k**0.5)).half()
    packer = pack_gptq if gptq else pack_awq
    qw, qz = zip(*(packer(q[e], zeros[e]) for e in range(experts)), strict=True)
    return q, zeros, scales, torch.stack(qw), torch.stack(qz), scales


def group_sums(a: Tensor, w: Tensor, group: int) -> list[Tensor]:
    """Exact int64 sums a[:, group] @ w[:, group]^T per group of the K columns."""
    k = a.shape[1]
    return [a[:, g : g + group] @ w[:, g : g + group].T for g in range(0, k, group)]


def w4a8_moe_reference(
    x: Tensor,
    q13: Tensor,
    z13: Tensor,
    s13: Tensor,
    q2: Tensor,
    z2: Tensor,
    s2: Tensor,
    weights: Tensor,
    ids: Tensor,
) -> tuple[Tensor, Tensor]:
    """(out, tolerance) of SGLang's INT4 W4A8 experts: x and the gated activation quantised
    per row; gate/up in the kernels' fp32 order; the down GEMM from exact group sums, with a
    one-step allowance for each quantised activation within 1e-4 steps of a rounding
    boundary (as w8a8_reference)."""
    inter = q2.shape[2]
    g13, g2 = x.shape[1] // z13.shape[1], inter // z2.shape[1]
    xq, xs = quantize_rows(x)
    out = torch.zeros(*ids.shape, x.shape[1], dtype=torch.float64)
    tol = torch.zeros(*ids.shape, x.shape[1], dtype=torch.float64)
    for e in ids.unique().tolist():
        t, j = (ids == e).nonzero(as_tuple=True)
        w13i = q13[e].to(torch.int64) - z13[e].T.to(torch.int64).repeat_interleave(g13, 1)
        gu = torch.zeros(len(t), 2 * inter)
        for gi, acc in enumerate(group_sums(xq[t], w13i, g13)):
            gu = gu + (acc.float() * xs[t].unsqueeze(1)) * s13[e, gi].float()
        h = F.silu(gu[:, :inter]) * gu[:, inter:]
        hq, hs = quantize_rows(h)
        scaled = h * (127 / h.abs().amax(dim=1, keepdim=True).clamp_min(1e-10))
        near = ((scaled - scaled.floor() - 0.5).abs() < 1e-4).double()
        w2i = q2[e].to(torch.int64) - z2[e].T.to(torch.int64).repeat_interleave(g2, 1)
        s2full = s2[e].double().T.repeat_interleave(g2, 1)  # [H, I]
        w2a = w2i.abs().double() * s2full  # |dequantised weight| / activation step
        y = torch.zeros(len(t), x.shape[1], dtype=torch.float64)
        mag = torch.zeros_like(y)
        for gi, acc in enumerate(group_sums(hq, w2i, g2)):
            term = acc.double() * hs.double().unsqueeze(1) * s2[e, gi].double()
            y, mag = y + term, mag + term.abs()
        step = hs.double().unsqueeze(1)
        wt = weights[t, j].double().unsqueeze(1)
        out[t, j] = wt * y
        tol[t, j] = wt.abs() * (
            (near @ w2a.T) * step + 1e-5 * mag + 1e-4 * step * w2a.sum(1) / inter
        )
    return out.sum(1), tol.sum(1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("experts", "topk", "tokens", "i"), list(quant_moe_cases()))
def test_fused_experts_int4(
    experts: int, topk: int, tokens: int, i: int, dtype: torch.dtype
) -> None:
    gptq = i % 2 == 1
    hidden = (24, 40, 64)[i % 3]
    # AWQ packs N (2I and H) in eights, GPTQ packs K (H and I) and N of qzeros in eights
    inter = (16, 8, 24, 40)[i % 4] if gptq else (20, 12, 36, 8)[i % 4]
    # group sizes: one group (== K), even ones giving several groups
    gs13 = (hidden, 8, hidden // 2)[i % 3]
    gs2 = (inter, inter // 2, 4)[(i + 1) % 3]
    g = gen(experts * 1000 + topk * 100 + tokens + i + 3)
    q13, z13, sc13, qw13, qz13, _ = int4_experts(experts, 2 * inter, hidden, gs13, gptq, g)
    q2, z2, sc2, qw2, qz2, _ = int4_experts(experts, hidden, inter, gs2, gptq, g)
    algo = rvv_ops.GPTQ if gptq else rvv_ops.AWQ
    w13, wz13, ws13 = OPS.convert_weight_packed_scale_zp(qw13, qz13, sc13, algo)
    w2, wz2, ws2 = OPS.convert_weight_packed_scale_zp(qw2, qz2, sc2, algo)
    assert w13.dtype == torch.uint8 and w13.shape[:2] == (experts, 2 * inter)
    assert wz13.shape == ws13.shape == (experts, hidden // gs13, 2 * inter)
    assert torch.equal(wz13, z13) and torch.equal(ws2, sc2.float())
    x = torch.randn(tokens, hidden, generator=g).to(dtype)
    weights, ids = routing(tokens, experts, topk, g, every=i % 5 == 0)
    got = OPS.fused_experts_cpu(
        x,
        w13,
        w2,
        weights,
        ids.to(torch.int64) if i % 4 == 1 else ids,
        False,
        INT4_W4A8,
        ws13,
        ws2,
        wz13,
        wz2,
        None,
        None,
        None,
        None,
        None,
        True,
        None,
    )
    assert got.shape == x.shape and got.dtype == dtype
    want, tol = w4a8_moe_reference(x, q13, z13, sc13, q2, z2, sc2, weights, ids)
    check(got, want, tol + rounding(dtype, want) + 1e-6)


def test_convert_weight_packed_scale_zp_3d_matches_2d() -> None:
    g = gen(31)
    for gptq in (False, True):
        _, _, _, qw, qz, sc = int4_experts(3, 24, 40, 8, gptq, g)
        algo = rvv_ops.GPTQ if gptq else rvv_ops.AWQ
        w, wz, ws = OPS.convert_weight_packed_scale_zp(qw, qz, sc, algo)
        assert w.shape[:2] == (3, 24) and w.stride(0) % 4 == 0
        assert wz.shape == ws.shape == (3, 5, 24) and ws.dtype == torch.float32
        for e in range(3):
            one, onez, ones = OPS.convert_weight_packed_scale_zp(qw[e], qz[e], sc[e], algo)
            assert torch.equal(w[e].flatten()[: one.numel()], one.flatten()), (gptq, e)
            assert torch.equal(wz[e], onez[0]) and torch.equal(ws[e], ones[0])
        # every expert's header identical
        assert torch.equal(w[0].flatten()[:64], w[2].flatten()[:64])
        # the fake kernel's shapes
        with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
            fake = OPS.convert_weight_packed_scale_zp(
                mode.from_tensor(qw), mode.from_tensor(qz), mode.from_tensor(sc), algo
            )
        assert [tuple(t.shape) for t in fake] == [tuple(w.shape), tuple(wz.shape), tuple(ws.shape)]


def test_convert_weight_packed_fp8_3d_matches_2d() -> None:
    w = torch.stack([fp8_case(9, 13, e) for e in range(4)])
    p = OPS.convert_weight_packed(w)
    assert p.dtype == torch.float8_e4m3fn and p.shape[:2] == (4, 9)
    for e in range(4):
        one = OPS.convert_weight_packed(w[e])
        n = one.numel()
        assert torch.equal(p[e].flatten()[:n].view(torch.uint8), one.flatten().view(torch.uint8))


def test_fused_experts_every_variant(variant: str) -> None:
    g = gen(5)
    x = torch.randn(7, 40, generator=g).bfloat16()
    w13 = (torch.randn(6, 2 * 24, 40, generator=g) / 6).bfloat16()
    w2 = (torch.randn(6, 40, 24, generator=g) / 5).bfloat16()
    weights, ids = routing(7, 6, 2, g)
    got = OPS.fused_experts_cpu(
        *unquant_args(
            x, OPS.convert_weight_packed(w13), OPS.convert_weight_packed(w2), weights, ids,
            activation=None,
        )
    )  # fmt: skip
    want, mag = float_reference(x, w13, w2, weights, ids, None, None, "silu")
    assert bool(((got.double() - want).abs() <= 80 * 2.0**-24 * mag + 2**-8 * want.abs()).all())


def test_fused_experts_inplace_and_empty() -> None:
    g = gen(9)
    x = torch.randn(5, 16, generator=g)
    w13 = torch.randn(3, 2 * 8, 16, generator=g)
    w2 = torch.randn(3, 16, 8, generator=g)
    weights, ids = routing(5, 3, 2, g)
    want = OPS.fused_experts_cpu(*unquant_args(x, w13, w2, weights, ids, packed=False))
    y = x.clone()
    got = OPS.fused_experts_cpu(*unquant_args(y, w13, w2, weights, ids, inplace=True, packed=False))
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(y, want, rtol=0, atol=0)
    assert got.data_ptr() != y.data_ptr()
    # Zero tokens: an empty result, nothing read.
    e = OPS.fused_experts_cpu(*unquant_args(x[:0], w13, w2, weights[:0], ids[:0], packed=False))
    assert e.shape == (0, 16)


def test_fused_experts_results_do_not_depend_on_threads() -> None:
    g = gen(11)
    x = torch.randn(9, 96, generator=g)
    w13 = OPS.convert_weight_packed(torch.randn(16, 2 * 80, 96, generator=g))
    w2 = OPS.convert_weight_packed(torch.randn(16, 96, 80, generator=g))
    weights, ids = routing(9, 16, 4, g)
    args = unquant_args(x, w13, w2, weights, ids)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = OPS.fused_experts_cpu(*args)
        torch.set_num_threads(max(2, threads))
        many = OPS.fused_experts_cpu(*args)
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(one, many, rtol=0, atol=0)


@pytest.mark.parametrize("int8", [False, True])
def test_shared_expert(int8: bool) -> None:
    g = gen(13)
    tokens, hidden, inter = 6, 48, 20
    x = torch.randn(tokens, hidden, generator=g).bfloat16()
    routed = torch.randn(tokens, hidden, generator=g).bfloat16()
    if int8:
        w13 = torch.randint(-128, 128, (2 * inter, hidden), generator=g, dtype=torch.int8)
        w2 = torch.randint(-128, 128, (hidden, inter), generator=g, dtype=torch.int8)
        s13 = torch.rand(2 * inter, generator=g) / 500 + 1e-4
        s2 = torch.rand(hidden, generator=g) / 300 + 1e-4
        shared, tol = w8a8_reference(
            x,
            w13[None],
            w2[None],
            s13[None],
            s2[None],
            torch.ones(tokens, 1),
            torch.zeros(tokens, 1, dtype=torch.int32),
        )
    else:
        w13 = (torch.randn(2 * inter, hidden, generator=g) / 7).bfloat16()
        w2 = (torch.randn(hidden, inter, generator=g) / 4).bfloat16()
        s13 = s2 = None
        shared, mag = float_reference(
            x,
            w13[None],
            w2[None],
            torch.ones(tokens, 1),
            torch.zeros(tokens, 1, dtype=torch.int32),
            None,
            None,
            "silu",
        )
        tol = 100 * 2.0**-24 * mag
    want = shared + 2.5 * routed.double()
    got = OPS.shared_expert_cpu(
        x,
        OPS.convert_weight_packed(w13),
        OPS.convert_weight_packed(w2),
        routed,
        2.5,
        False,
        int8,
        False,
        s13,
        s2,
        None,
        True,
    )
    err = (got.double() - want).abs()
    assert bool((err <= tol + 2**-8 * want.abs() + 1e-6).all()), float(err.max())


def test_convert_weight_packed_3d_matches_2d() -> None:
    g = gen(17)
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int8):
        w = (torch.randn(5, 9, 13, generator=g) * 50).to(dtype)
        p = OPS.convert_weight_packed(w)
        assert p.dim() == 3 and p.shape[:2] == (5, 9) and p.dtype == dtype
        assert p.stride(0) * p.element_size() % 4 == 0
        for e in range(5):
            one = OPS.convert_weight_packed(w[e])
            n = one.numel()
            assert torch.equal(p[e].flatten()[:n], one.flatten()), (dtype, e)


# ---- opcheck and bad inputs ----


def _opcheck_samples() -> list[tuple[str, tuple[object, ...]]]:
    g = gen(19)
    out: list[tuple[str, tuple[object, ...]]] = []
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(4, 24, generator=g).to(dtype)
        w13 = torch.randn(5, 16, 24, generator=g).to(dtype)
        w2 = torch.randn(5, 24, 8, generator=g).to(dtype)
        weights, ids = routing(4, 5, 2, g)
        packed13, packed2 = OPS.convert_weight_packed(w13), OPS.convert_weight_packed(w2)
        out.append((f"fused {dtype}", unquant_args(x, packed13, packed2, weights, ids)))
    x = torch.randn(3, 24, generator=g)
    out.append(
        (
            "shared",
            (
                x,
                torch.randn(16, 24, generator=g),
                torch.randn(24, 8, generator=g),
                torch.randn(3, 24, generator=g),
                1.5,
                False,
                False,
                False,
                None,
                None,
                None,
                False,
            ),
        )
    )
    return out


@pytest.mark.parametrize("i", range(3))
def test_opcheck(i: int) -> None:
    name, args = _opcheck_samples()[i]
    op = OPS.shared_expert_cpu.default if name == "shared" else OPS.fused_experts_cpu.default
    torch.library.opcheck(op, args)


def _quant_opcheck_samples() -> list[tuple[str, object, tuple[object, ...]]]:
    g = gen(43)
    experts, hidden, inter = 3, 16, 8
    _, _, _, qw13, qz13, sc13 = int4_experts(experts, 2 * inter, hidden, 8, False, g)
    _, _, _, qw2, qz2, sc2 = int4_experts(experts, hidden, inter, 8, True, g)
    w13, z13, s13 = OPS.convert_weight_packed_scale_zp(qw13, qz13, sc13, rvv_ops.AWQ)
    w2, z2, s2 = OPS.convert_weight_packed_scale_zp(qw2, qz2, sc2, rvv_ops.GPTQ)
    x = torch.randn(4, hidden, generator=g).bfloat16()
    weights, ids = routing(4, experts, 2, g)
    f13 = torch.stack([fp8_case(2 * inter, hidden, e) for e in range(experts)])
    f2 = torch.stack([fp8_case(hidden, inter, e + 3) for e in range(experts)])
    fs13 = torch.rand(experts, 4, 2, generator=g) / 100
    fs2 = torch.rand(experts, 4, 1, generator=g) / 100
    tail = (None, None, None, None, True, "silu")
    return [
        ("convert 3-D", OPS.convert_weight_packed_scale_zp.default,
         (qw13, qz13, sc13, rvv_ops.AWQ)),
        ("fused int4", OPS.fused_experts_cpu.default,
         (x, w13, w2, weights, ids, False, INT4_W4A8, s13, s2, z13, z2, None, *tail)),
        ("fused fp8", OPS.fused_experts_cpu.default,
         (x, OPS.convert_weight_packed(f13), OPS.convert_weight_packed(f2), weights, ids,
          False, FP8_W8A16, fs13, fs2, None, None, [4, 8], *tail)),
    ]  # fmt: skip


@pytest.mark.parametrize("i", range(3))
def test_quantised_opcheck(i: int) -> None:
    name, op, args = _quant_opcheck_samples()[i]
    if name == "fused fp8":
        # as test_quant_linear's FP8 opcheck: the schema test compares tensors with
        # arithmetic torch lacks for fp8 on CPU; the inputs must stay unchanged, checked
        # here byte for byte.
        tensors = [a for a in args if isinstance(a, Tensor)]
        before = [t.view(torch.uint8).clone() if t.dtype.itemsize == 1 else t.clone()
                  for t in tensors]  # fmt: skip
        torch.library.opcheck(
            op,
            args,
            test_utils=("test_autograd_registration", "test_faketensor",
                        "test_aot_dispatch_dynamic"),
        )  # fmt: skip
        after = [t.view(torch.uint8) if t.dtype.itemsize == 1 else t for t in tensors]
        assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
        return
    torch.library.opcheck(op, args)


def _fused(**kw: object) -> Tensor:
    g = gen(23)
    a: dict[str, object] = {
        "x": torch.randn(3, 16, generator=g),
        "w13": torch.randn(4, 2 * 8, 16, generator=g),
        "w2": torch.randn(4, 16, 8, generator=g),
        "weights": torch.rand(3, 2, generator=g),
        "ids": torch.tensor([[0, 1], [2, 3], [1, 0]], dtype=torch.int32),
        "method": UNQUANT,
        "s13": None,
        "s2": None,
        "zero": None,
        "block": None,
        "alpha": None,
        "vnni": False,
        "act": "silu",
    }
    a.update(kw)
    out: Tensor = OPS.fused_experts_cpu(
        a["x"],
        a["w13"],
        a["w2"],
        a["weights"],
        a["ids"],
        False,
        a["method"],
        a["s13"],
        a["s2"],
        a["zero"],
        None,
        a["block"],
        None,
        None,
        a["alpha"],
        None,
        a["vnni"],
        a["act"],
    )
    return out


@pytest.mark.parametrize(
    ("kw", "exc", "words"),
    [
        (
            {"ids": torch.tensor([[0, 4], [2, 3], [1, 0]], dtype=torch.int32)},
            ValueError,
            ("topk_ids[0, 1]", "is 4", "[0, 4)"),
        ),
        ({"ids": torch.tensor([[0, 1], [2, -1], [1, 0]])}, ValueError, ("topk_ids[1, 1]", "-1")),
        ({"ids": torch.tensor([[0, 1], [2, 2**33], [1, 0]])}, ValueError, ("8589934592",)),
        (
            {"ids": torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)},
            ValueError,
            ("topk_ids", "tokens = 3"),
        ),
        ({"ids": torch.tensor([[0.0, 1], [2, 3], [1, 0]])}, TypeError, ("topk_ids", "int32")),
        ({"w2": torch.randn(5, 16, 8)}, ValueError, ("w1", "4 experts", "w2", "5")),
        ({"w13": torch.randn(2 * 8, 16)}, ValueError, ("w1", "2-d", "3-D")),
        ({"w13": torch.randn(4, 2 * 7, 16)}, ValueError, ("w1", "[E, 16, 16]")),
        ({"method": 4}, NotImplementedError, ("moe_comp_method is 4", "MXFP4")),
        ({"method": 7}, NotImplementedError, ("moe_comp_method is 7",)),
        ({"method": FP8_W8A16, "block": [4, 4]}, TypeError, ("w1", "float8_e4m3fn")),
        ({"method": INT4_W4A8}, ValueError, ("is_vnni is False", "INT4_W4A8")),
        ({"alpha": 1.702}, NotImplementedError, ("alpha",)),
        ({"zero": torch.zeros(1)}, ValueError, ("w1_zero",)),
        ({"block": [128, 128]}, ValueError, ("block_size",)),
        ({"act": "relu"}, ValueError, ("activation is 'relu'",)),
        ({"x": torch.randn(3, 16).double()}, TypeError, ("hidden_states", "float64")),
        ({"method": INT8_W8A8}, TypeError, ("w1", "torch.int8")),
        (
            {
                "method": INT8_W8A8,
                "w13": torch.zeros(4, 16, 16, dtype=torch.int8),
                "w2": torch.zeros(4, 16, 8, dtype=torch.int8),
            },
            ValueError,
            ("w1_scale is None",),
        ),
        (
            {
                "method": INT8_W8A8,
                "w13": torch.zeros(4, 16, 16, dtype=torch.int8),
                "w2": torch.zeros(4, 16, 8, dtype=torch.int8),
                "s13": torch.ones(4, 15),
                "s2": torch.ones(4, 16),
            },
            ValueError,
            ("w1_scale", "[4, 16]"),
        ),
        ({"vnni": True}, ValueError, ("w2", "packed")),
    ],
)
def test_fused_experts_refuses_bad_arguments(
    kw: dict[str, object], exc: type[Exception], words: tuple[str, ...]
) -> None:
    with pytest.raises(exc) as info:
        _fused(**kw)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_fused_experts_refuses_mixed_packings() -> None:
    g = gen(29)
    w13 = torch.randn(2, 16, 24, generator=g)
    a = OPS.convert_weight_packed(w13)
    b = OPS.convert_weight_packed(torch.randn(2, 16, 20, generator=g))
    mixed = a.clone()
    # expert 1 packed for another K: its header differs from expert 0's
    mixed[1].flatten()[:16] = b[1].flatten()[:16]
    w2 = OPS.convert_weight_packed(torch.randn(2, 24, 8, generator=g))
    with pytest.raises(ValueError, match=r"w1\[1\] has a packed-weight header unlike"):
        OPS.fused_experts_cpu(
            *unquant_args(
                torch.randn(2, 24), mixed, w2, torch.ones(2, 1),
                torch.zeros(2, 1, dtype=torch.int32), activation=None,
            )
        )  # fmt: skip


def _quant_fused(method: int, **kw: object) -> Tensor:
    """fused_experts_cpu on small valid INT4 (AWQ) or FP8 experts, with kw replacing any of
    w13, w2, s13, s2, z13, z2, block, vnni."""
    g = gen(37)
    experts, hidden, inter = 3, 16, 8
    a: dict[str, object]
    if method == INT4_W4A8:
        _, _, _, qw13, qz13, sc13 = int4_experts(experts, 2 * inter, hidden, 8, False, g)
        _, _, _, qw2, qz2, sc2 = int4_experts(experts, hidden, inter, 4, False, g)
        w13, z13, s13 = OPS.convert_weight_packed_scale_zp(qw13, qz13, sc13, rvv_ops.AWQ)
        w2, z2, s2 = OPS.convert_weight_packed_scale_zp(qw2, qz2, sc2, rvv_ops.AWQ)
        a = {"w13": w13, "w2": w2, "s13": s13, "s2": s2, "z13": z13, "z2": z2, "block": None}
    else:
        w13 = torch.stack([fp8_case(2 * inter, hidden, e) for e in range(experts)])
        w2 = torch.stack([fp8_case(hidden, inter, e + 5) for e in range(experts)])
        a = {
            "w13": OPS.convert_weight_packed(w13),
            "w2": OPS.convert_weight_packed(w2),
            "s13": torch.rand(experts, 4, 4, generator=g),
            "s2": torch.rand(experts, 4, 2, generator=g),
            "z13": None,
            "z2": None,
            "block": [4, 4],
        }
    a["vnni"] = True
    a.update(kw)
    weights, ids = routing(2, experts, 2, g)
    out: Tensor = OPS.fused_experts_cpu(
        torch.randn(2, hidden, generator=g),
        a["w13"],
        a["w2"],
        weights,
        ids,
        False,
        method,
        a["s13"],
        a["s2"],
        a["z13"],
        a["z2"],
        a["block"],
        None,
        None,
        None,
        None,
        a["vnni"],
        None,
    )
    return out


def _with_other_header(w: Tensor) -> Tensor:
    """w with expert 1's header changed (its group size), as a foreign packing would."""
    bad = w.clone()
    view = bad[1].flatten()
    view[24:32] = view[24:32] + 1  # group_size: the fourth 8-byte field
    return bad


@pytest.mark.parametrize(
    ("method", "kw", "exc", "words"),
    [
        (INT4_W4A8, {"vnni": False}, ValueError, ("is_vnni is False", "True")),
        (INT4_W4A8, {"z13": None}, ValueError, ("w1_zero is None", "[3, 2, 16]")),
        (INT4_W4A8, {"s2": None}, ValueError, ("w2_scale is None",)),
        (INT4_W4A8, {"s13": torch.ones(3, 1, 16)}, ValueError, ("w1_scale", "[3, 2, 16]")),
        (
            INT4_W4A8,
            {"z2": torch.zeros(3, 2, 16, dtype=torch.int32)},
            TypeError,
            ("w2_zero", "torch.uint8"),
        ),
        (INT4_W4A8, {"block": [4, 4]}, ValueError, ("block_size is given", "INT4_W4A8")),
        (
            INT4_W4A8,
            {"w13": torch.zeros(3, 16, 16, dtype=torch.int8)},
            TypeError,
            ("w1", "torch.uint8", "convert_weight_packed_scale_zp"),
        ),
        (
            INT4_W4A8,
            {"w13": torch.zeros(3, 16, 80, dtype=torch.uint8)},
            ValueError,
            ("w1", "packed int4 header"),
        ),
        (FP8_W8A16, {"block": None}, ValueError, ("block_size is None", "[block_n, block_k]")),
        (FP8_W8A16, {"block": [4]}, ValueError, ("block_size is [4]",)),
        (FP8_W8A16, {"s13": None}, ValueError, ("w1_scale is None", "[3, 4, 4]")),
        (
            FP8_W8A16,
            {"s2": torch.ones(3, 2, 4)},
            ValueError,
            ("w2_scale", "[E, ceil(N / block_n), ceil(K / block_k)] = [3, 4, 2]"),
        ),
        (FP8_W8A16, {"s2": torch.ones(3, 4, 2).half()}, TypeError, ("w2_scale", "float16")),
        (
            FP8_W8A16,
            {"z13": torch.zeros(3, 2, 16, dtype=torch.uint8)},
            ValueError,
            ("w1_zero / w2_zero are given for FP8_W8A16",),
        ),
        (FP8_W8A16, {"w2": torch.randn(3, 16, 8)}, TypeError, ("w2", "float32")),
    ],
)
def test_quantised_experts_refuse_bad_arguments(
    method: int, kw: dict[str, object], exc: type[Exception], words: tuple[str, ...]
) -> None:
    with pytest.raises(exc) as info:
        _quant_fused(method, **kw)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_quantised_experts_refuse_mixed_headers() -> None:
    w13 = _quant_fused(INT4_W4A8)  # valid: runs
    assert w13.shape == (2, 16)
    g = gen(41)
    _, _, _, qw, qz, sc = int4_experts(3, 16, 16, 8, False, g)
    w, _, _ = OPS.convert_weight_packed_scale_zp(qw, qz, sc, rvv_ops.AWQ)
    with pytest.raises(ValueError, match=r"w1\[1\] has a packed-weight header unlike"):
        _quant_fused(INT4_W4A8, w13=_with_other_header(w))
    assert _quant_fused(FP8_W8A16).shape == (2, 16)


def test_quantised_experts_do_not_depend_on_threads() -> None:
    threads = torch.get_num_threads()
    try:
        for method in (FP8_W8A16, INT4_W4A8):
            torch.set_num_threads(1)
            one = _quant_fused(method)
            torch.set_num_threads(max(2, threads))
            many = _quant_fused(method)
            torch.testing.assert_close(one, many, rtol=0, atol=0)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("i", [4, 5])
def test_quantised_experts_every_variant(i: int, variant: str) -> None:
    test_fused_experts_fp8(8, 2, 16, i, torch.bfloat16)
    test_fused_experts_int4(8, 2, 16, i, torch.bfloat16)
