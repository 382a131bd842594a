"""Quantised-weight linear ops against independent torch references.

- ``convert_weight_packed_scale_zp`` + ``int4_scaled_mm_cpu`` (W4A8, SGLang's semantics) and
  ``int4_w4a16_mm_cpu``: int4 weights written here in AWQ's and GPTQ's checkpoint layouts
  (this file's own packers), references from the unpacked nibbles: W4A8 with exact int64
  group sums and SGLang's order of fp32 operations (bias, then per group
  ``(sum * a_scale) * w_scale``), W4A16 in float64.
- ``fp8_scaled_mm_cpu``: e4m3 weights (every byte value occurs), block scales, float64
  reference through torch's own fp8 decoding.

Shapes: K and N from {1, 7, 16, 17, 255, 1536, 8960} where the format allows (AWQ packs N in
eights, GPTQ packs K in eights, the group size divides K and is even or K), M from
{1, 2, 5, 64, 300}, capped at a budget of multiply-adds (a smaller one on riscv64, usually
emulated). Plus opcheck, shapes of the results SGLang relies on, and bad inputs.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator

import pytest
import rvv_ops
import torch
from torch import Tensor

CONVERT = torch.ops.sgl_kernel.convert_weight_packed_scale_zp.default
W4A8 = torch.ops.sgl_kernel.int4_scaled_mm_cpu.default
W4A16 = torch.ops.sgl_kernel.int4_w4a16_mm_cpu.default
FP8 = torch.ops.sgl_kernel.fp8_scaled_mm_cpu.default
PACK = torch.ops.sgl_kernel.convert_weight_packed.default

EMULATED = platform.machine() == "riscv64"
BUDGET = 4e3 if EMULATED else 2e7
"""Multiply-adds per case (riscv64 is usually emulated: the op glue is checked there on small
shapes; the kernels' own tests cover every VLEN)."""
SMALL = 3e2 if EMULATED else 2e5
"""fp16 / fp32 activations (bf16 covers the rest) up to this many multiply-adds."""
ROWS = (1, 2, 5, 64, 300)
OUT_RTOL = {torch.float32: 2**-24, torch.bfloat16: 2**-8, torch.float16: 2**-11}
SUBNORMAL = {dt: torch.finfo(dt).smallest_normal * torch.finfo(dt).eps for dt in OUT_RTOL}
AWQ_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---- the checkpoint layouts, written independently of the op ----


def pack_awq(q: Tensor, zeros: Tensor) -> tuple[Tensor, Tensor]:
    """q [N, K] and zeros [G, N] (values 0..15) as AWQ's qweight [K, N/8], qzeros [G, N/8]."""

    def words(v: Tensor) -> Tensor:  # v [R, N] -> [R, N/8]: column 8c+j at 4 * order[j]
        r, n = v.shape
        out = torch.zeros(r, n // 8, dtype=torch.int64)
        for j in range(8):
            out |= (v[:, j::8].to(torch.int64) & 0xF) << (4 * AWQ_ORDER[j])
        return (out - ((out >> 31) << 32)).to(torch.int32)  # as two's complement int32

    return words(q.T.contiguous()), words(zeros)


def pack_gptq(q: Tensor, zeros: Tensor) -> tuple[Tensor, Tensor]:
    """q [N, K] and zeros [G, N] (1..16) as GPTQ's qweight [K/8, N], qzeros [G, N/8] (zero-1)."""
    qt = q.T.to(torch.int64)  # [K, N]
    k, n = qt.shape
    w = torch.zeros(k // 8, n, dtype=torch.int64)
    for i in range(8):
        w |= qt[i::8] << (4 * i)
    z = torch.zeros(zeros.shape[0], n // 8, dtype=torch.int64)
    zm1 = (zeros.to(torch.int64) - 1) & 0xF
    for i in range(8):
        z |= zm1[:, i::8] << (4 * i)
    as_i32 = lambda v: (v - ((v >> 31) << 32)).to(torch.int32)  # noqa: E731
    return as_i32(w), as_i32(z)


def int4_case(
    n: int, k: int, groups: int, seed: int, gptq: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    """Random q [N, K] in 0..15, zeros [G, N] (AWQ 0..15, GPTQ 1..16, extremes included),
    scales [G, N] (fp16, AWQ's and GPTQ's dtype)."""
    g = gen(seed)
    q = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
    q[0, :] = 15
    if n > 1:
        q[1, :] = 0
    lo, hi = (1, 17) if gptq else (0, 16)
    zeros = torch.randint(lo, hi, (groups, n), generator=g, dtype=torch.uint8)
    zeros[:, 0] = lo
    if n > 1:
        zeros[:, 1] = hi - 1
    scales = (torch.rand(groups, n, generator=g) * 0.02 + 0.001).to(torch.float16)
    return q, zeros, scales


def dequant(q: Tensor, zeros: Tensor, scales: Tensor) -> Tensor:
    """The float64 weight [N, K]."""
    k = q.shape[1]
    gs = k // zeros.shape[0]
    z = zeros.double().T.repeat_interleave(gs, dim=1)
    s = scales.double().T.repeat_interleave(gs, dim=1)
    return (q.double() - z) * s


def quantize_rows(x: Tensor) -> tuple[Tensor, Tensor]:
    """SGLang's per-token int8 quantisation (fp32 arithmetic): (q as int64, scale fp32)."""
    x32 = x.float()
    amax = x32.abs().amax(dim=1, keepdim=True).clamp_min(1e-10)
    inv = 127.0 * (1.0 / amax)
    q = torch.round(x32 * inv).clamp(-127, 127).to(torch.int64)
    return q, (amax / 127.0).squeeze(1)


def w4a8_reference(
    x: Tensor, q: Tensor, zeros: Tensor, scales: Tensor, bias: Tensor | None
) -> tuple[Tensor, Tensor]:
    """SGLang's W4A8 in its fp32 order: acc = bias; per group acc += (float(S_g) * a_scale)
    * w_scale, with S_g the exact int64 group sum. Returns (acc fp32, sum of |terms|)."""
    a, a_scale = quantize_rows(x)
    n, k = q.shape
    groups = zeros.shape[0]
    gs = k // groups
    acc = torch.zeros(x.shape[0], n) if bias is None else bias.float().expand(x.shape[0], n).clone()
    mag = acc.abs().double()
    w = q.to(torch.int64)
    for g in range(groups):
        sl = slice(g * gs, (g + 1) * gs)
        s_int = a[:, sl] @ (w[:, sl] - zeros[g].to(torch.int64)[:, None]).T  # exact
        term = (s_int.float() * a_scale[:, None]) * scales[g].float()[None, :]
        acc = acc + term
        mag = mag + term.double().abs()
    return acc, mag


def assert_close(got: Tensor, ref: Tensor, mag: Tensor, steps: int, what: str) -> None:
    # fp32 arithmetic: each of `steps` roundings errs by at most 2^-24 of the running
    # magnitude; then one rounding to the output dtype.
    tol = steps * 2.0**-24 * mag + OUT_RTOL[got.dtype] * ref.abs() + SUBNORMAL[got.dtype]
    err = (got.double() - ref.double()).abs()
    bad = err > tol
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {bad.numel()} outputs off; worst excess "
        f"{float((err - tol).max()):.3g}"
    )


def int4_shapes() -> Iterator[tuple[int, int, int, int, bool, torch.dtype]]:
    """(m, k, n, group_size, gptq, activation dtype) within the budget: bf16 activations for
    every shape, fp16 and fp32 for the small ones."""
    for k, sizes in (
        (1, (1,)),
        (7, (7,)),
        (16, (16, 2)),
        (17, (17,)),
        (255, (255,)),
        (1536, (32, 64, 128)),
        (8960, (128,)),
    ):
        for gs in sizes:
            for n in (8, 16, 1536, 8960):
                for m in ROWS:
                    if m * k * n > BUDGET:
                        continue
                    gptq = k % 8 == 0 and (m + n) % 2 == 0
                    for dtype in (torch.bfloat16, torch.float16, torch.float32):
                        if dtype == torch.bfloat16 or m * k * n <= SMALL:
                            yield m, k, n, gs, gptq, dtype


INT4_SHAPES = list(int4_shapes())


@pytest.mark.parametrize(("m", "k", "n", "gs", "gptq", "dtype"), INT4_SHAPES, ids=str)
def test_int4_w4a8_and_w4a16(
    m: int, k: int, n: int, gs: int, gptq: bool, dtype: torch.dtype
) -> None:
    groups = k // gs
    q, zeros, scales = int4_case(n, k, groups, m * 7919 + k * 31 + n, gptq)
    qweight, qzeros = pack_gptq(q, zeros) if gptq else pack_awq(q, zeros)
    w, wz, ws = CONVERT(qweight, qzeros, scales, rvv_ops.GPTQ if gptq else rvv_ops.AWQ)
    # what SGLang's code reads: N = scales.size(0) * scales.size(-1)
    assert w.dtype == torch.uint8 and w.shape[0] == n
    assert wz.shape == ws.shape == (1, groups, n) and ws.dtype == torch.float32
    assert torch.equal(wz[0], zeros) and torch.equal(ws[0], scales.float())
    g = gen(m + k + n)
    x = torch.randn(m, k, generator=g).to(dtype)
    x[0, 0] = 4.0  # the row's amax: one activation quantises to 127
    bias = torch.randn(n, generator=g).to(dtype) if (m + k) % 2 else None
    got = W4A8(x, w, wz, ws, bias)
    assert got.dtype == dtype and got.shape == (m, n)
    ref, mag = w4a8_reference(x, q, zeros, scales, bias)
    assert_close(got, ref, mag, groups + 2, f"W4A8 m={m} k={k} n={n} g={gs}")
    got16 = W4A16(x, w, wz, ws, bias)
    wd = dequant(q, zeros, scales)
    ref16 = x.double() @ wd.T + (0 if bias is None else bias.double())
    mag16 = x.double().abs() @ wd.abs().T + (0 if bias is None else bias.double().abs())
    assert_close(got16, ref16, mag16, k + groups + 2, f"W4A16 m={m} k={k} n={n} g={gs}")


def test_int4_leading_dimensions_and_empty_rows() -> None:
    q, zeros, scales = int4_case(16, 64, 2, 3)
    w, wz, ws = CONVERT(*pack_awq(q, zeros), scales, rvv_ops.AWQ)
    x = torch.randn(2, 3, 64, generator=gen(1)).bfloat16()
    out = rvv_ops.int4_scaled_mm(x, w, wz, ws)
    assert out.shape == (2, 3, 16)
    assert torch.equal(out.reshape(6, 16), W4A8(x.reshape(6, 64), w, wz, ws, None))
    assert W4A8(torch.empty(0, 64).bfloat16(), w, wz, ws, None).shape == (0, 16)
    assert W4A16(torch.empty(0, 64).bfloat16(), w, wz, ws, None).shape == (0, 16)


def test_int4_results_do_not_depend_on_threads() -> None:
    q, zeros, scales = int4_case(1536, 256, 2, 5)
    w, wz, ws = CONVERT(*pack_awq(q, zeros), scales, rvv_ops.AWQ)
    x = torch.randn(5, 256, generator=gen(2)).bfloat16()
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = (W4A8(x, w, wz, ws, None), W4A16(x, w, wz, ws, None))
        torch.set_num_threads(max(2, before))
        many = (W4A8(x, w, wz, ws, None), W4A16(x, w, wz, ws, None))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one[0], many[0]) and torch.equal(one[1], many[1])


# ---- FP8 W8A16 ----


def fp8_case(n: int, k: int, seed: int) -> Tensor:
    """A [N, K] e4m3fn weight with every finite byte value (NaN encodings 0x7f / 0xff left
    out) over its first elements."""
    g = gen(seed)
    raw = torch.randint(0, 256, (n * k,), generator=g, dtype=torch.int64)
    every = torch.tensor([b for b in range(256) if b not in (0x7F, 0xFF)], dtype=torch.int64)
    raw[: min(every.numel(), raw.numel())] = every[: raw.numel()]
    raw[(raw == 0x7F) | (raw == 0xFF)] = 0x3C
    return raw.to(torch.uint8).view(torch.float8_e4m3fn).reshape(n, k)


def fp8_shapes() -> Iterator[tuple[int, int, int, int, int]]:
    """(m, k, n, block_n, block_k)."""
    blocks = ((128, 128), (1, 7), (16, 1), (7, 16))
    for i, k in enumerate((1, 7, 16, 17, 255, 1536, 8960)):
        for j, n in enumerate((1, 7, 16, 17, 255, 1536, 8960)):
            for m in ROWS:
                if m * k * n <= BUDGET:
                    yield (m, k, n, *blocks[(i + j + m) % len(blocks)])


FP8_SHAPES = list(fp8_shapes())


@pytest.mark.parametrize(("m", "k", "n", "bn", "bk"), FP8_SHAPES, ids=lambda v: str(v))
def test_fp8_scaled_mm(m: int, k: int, n: int, bn: int, bk: int) -> None:
    w8 = fp8_case(n, k, m * 13 + k * 7 + n)
    g = gen(m + 3 * k + 5 * n)
    nb, kb = -(-n // bn), -(-k // bk)
    scales = torch.rand(nb, kb, generator=g) * 0.01 + 1e-4
    dtype = (torch.bfloat16, torch.float16, torch.float32)[(m + k + n) % 3]
    x = torch.randn(m, k, generator=g).to(dtype)
    bias = torch.randn(n, generator=g).to(dtype) if (k + n) % 2 else None
    packed = PACK(w8)
    assert packed.dtype == torch.float8_e4m3fn and packed.shape[0] == n
    got = FP8(x, packed, scales, [bn, bk], bias, dtype, True)
    assert got.dtype == dtype and got.shape == (m, n)
    s_full = scales.double().repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]
    wd = w8.double() * s_full
    ref = x.double() @ wd.T + (0 if bias is None else bias.double())
    mag = x.double().abs() @ wd.abs().T + (0 if bias is None else bias.double().abs())
    assert_close(got, ref, mag, k + kb + 2, f"FP8 m={m} k={k} n={n} block=[{bn}, {bk}]")
    if m * k * n <= BUDGET / 10:  # the plain-weight path packs for the call: same kernel
        assert torch.equal(FP8(x, w8, scales, [bn, bk], bias, dtype, False), got)


# ---- opcheck and bad inputs ----


def _samples() -> list[tuple[object, tuple[object, ...]]]:
    q, zeros, scales = int4_case(16, 64, 2, 9)
    qw, qz = pack_awq(q, zeros)
    w, wz, ws = CONVERT(qw, qz, scales, 0)
    x = torch.randn(3, 64, generator=gen(4)).bfloat16()
    w8 = fp8_case(17, 33, 1)
    s8 = torch.rand(2, 1) + 0.5
    return [
        (CONVERT, (qw, qz, scales, 0)),
        (W4A8, (x, w, wz, ws, torch.randn(16).bfloat16())),
        (W4A16, (x, w, wz, ws, None)),
        (FP8, (torch.randn(3, 33), PACK(w8), s8, [16, 128], None, torch.float32, True)),
    ]


@pytest.mark.parametrize("i", range(4))
def test_opcheck(i: int) -> None:
    op, args = _samples()[i]
    if op is FP8:
        # opcheck's schema test compares tensors with arithmetic torch lacks for fp8 on CPU;
        # the op must still leave its inputs unchanged, checked here byte for byte.
        before = [a.view(torch.uint8).clone() for a in args if isinstance(a, Tensor)]
        torch.library.opcheck(
            op,
            args,
            test_utils=(
                "test_autograd_registration",
                "test_faketensor",
                "test_aot_dispatch_dynamic",
            ),
        )
        after = [a.view(torch.uint8) for a in args if isinstance(a, Tensor)]
        assert all(torch.equal(x, y) for x, y in zip(before, after, strict=True))
        return
    torch.library.opcheck(op, args)


def test_convert_refuses_bad_checkpoints() -> None:
    q, zeros, scales = int4_case(16, 64, 2, 9)
    qw, qz = pack_awq(q, zeros)
    with pytest.raises(ValueError, match=r"quant_method is 2; expected 0 \(AWQ\) or 1 \(GPTQ\)"):
        CONVERT(qw, qz, scales, 2)
    with pytest.raises(TypeError, match=r"qweight has dtype torch\.uint8; expected torch\.int32"):
        CONVERT(qw.to(torch.uint8), qz, scales, 0)
    # 3-D (expert-stacked MoE weights): every tensor stacked over the same experts
    with pytest.raises(ValueError, match=r"qzeros .* is not 3-D with 1 experts first"):
        CONVERT(qw[None], qz, scales, 0)
    with pytest.raises(ValueError, match=r"scales .* is not 3-D with 2 experts first"):
        CONVERT(torch.stack([qw, qw]), torch.stack([qz, qz]), scales[None], 0)
    with pytest.raises(ValueError, match=r"qweight is 4-d .*\(or, for expert-stacked MoE"):
        CONVERT(qw[None, None], qz, scales, 0)
    with pytest.raises(ValueError, match=r"has 3 groups, which do not divide K = 64"):
        CONVERT(qw, qz, torch.ones(3, 16).half(), 0)
    with pytest.raises(ValueError, match=r"group size K / groups = 64 / 64 = 1 is odd"):
        CONVERT(qw, torch.zeros(64, 2, dtype=torch.int32), torch.ones(64, 16).half(), 0)
    with pytest.raises(ValueError, match=r"scales .* has 8 columns; expected N = 16"):
        CONVERT(qw, qz, torch.ones(2, 8).half(), 0)
    with pytest.raises(ValueError, match=r"qzeros .* does not match \[groups, N / 8\] = \[2, 2\]"):
        CONVERT(qw, qz[:, :1], scales, 0)


def test_int4_mm_refuses_bad_arguments() -> None:
    q, zeros, scales = int4_case(16, 64, 2, 9)
    w, wz, ws = CONVERT(*pack_awq(q, zeros), scales, 0)
    x = torch.randn(3, 64).bfloat16()
    with pytest.raises(ValueError, match="made for K = 64"):
        W4A8(torch.randn(3, 32).bfloat16(), w, wz, ws, None)
    with pytest.raises(ValueError, match="does not start with a packed int4 header"):
        W4A8(x, torch.zeros_like(w), wz, ws, None)
    with pytest.raises(ValueError, match="inconsistent packed int4 header"):
        bad = w.clone()
        bad.view(-1)[16:24] = 255  # k
        W4A8(x, bad, wz, ws, None)
    with pytest.raises(TypeError, match=r"w_scales has dtype torch\.float16; expected"):
        W4A8(x, w, wz, ws.half(), None)
    with pytest.raises(ValueError, match=r"w_zeros .* does not match \[1, 2, 16\]"):
        W4A8(x, w, wz[:, :1], ws, None)
    with pytest.raises(ValueError, match=r"bias .* does not have N = 16"):
        W4A16(x, w, wz, ws, torch.randn(15).bfloat16())
    with pytest.raises(TypeError, match=r"x has dtype torch\.int8"):
        W4A8(x.to(torch.int8), w, wz, ws, None)


def test_fp8_mm_refuses_bad_arguments() -> None:
    w8 = fp8_case(17, 33, 1)
    packed = PACK(w8)
    x = torch.randn(3, 33)
    s = torch.rand(2, 1)
    with pytest.raises(ValueError, match=r"block_size is \[16\]; expected \[block_n, block_k\]"):
        FP8(x, packed, s, [16], None, torch.float32, True)
    with pytest.raises(ValueError, match=r"scales2 .* does not match \[ceil\(N / block_n\)"):
        FP8(x, packed, torch.rand(3, 1), [16, 128], None, torch.float32, True)
    with pytest.raises(TypeError, match=r"mat2 has dtype torch\.float16; expected torch\.float8"):
        FP8(x, w8.half(), s, [16, 128], None, torch.float32, False)
    with pytest.raises(TypeError, match=r"scales2 has dtype torch\.float64"):
        FP8(x, packed, s.double(), [16, 128], None, torch.float32, True)
    with pytest.raises(ValueError, match="was packed for K = 33"):
        FP8(torch.randn(3, 32), packed, s, [16, 128], None, torch.float32, True)
