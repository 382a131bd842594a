"""sgl-kernel's norm variants (csrc/norms.cpp): gemma3_rmsnorm_cpu, gemma4_rmsnorm_cpu,
l2norm_cpu, fused_rmsnorm_gated_cpu, fused_qk_rmsnorm_cpu, fused_qk_gemma_rmsnorm_cpu,
fused_add_layernorm_cpu and fused_dual_residual_rmsnorm_cpu against float64 references
(SGLang 0.5.23's forward_native formulas), over odd shapes, layouts, SGLang's call style,
opcheck and bad inputs."""

from __future__ import annotations

from typing import Any

import pytest
import rvv_ops
import torch
from bad_input import Bad, Cases
from torch import Tensor

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
EPS = 1e-6
GEMMA3 = torch.ops.sgl_kernel.gemma3_rmsnorm_cpu.default
GEMMA4 = torch.ops.sgl_kernel.gemma4_rmsnorm_cpu.default
L2NORM = torch.ops.sgl_kernel.l2norm_cpu.default
GATED = torch.ops.sgl_kernel.fused_rmsnorm_gated_cpu.default
QK = torch.ops.sgl_kernel.fused_qk_rmsnorm_cpu.default
QK_GEMMA = torch.ops.sgl_kernel.fused_qk_gemma_rmsnorm_cpu.default

# (rtol, atol) per dtype against a float64 reference rounded once: the kernel's fp32
# statistics (a few ulps), then for 16-bit one rounding step (2^-8 bf16, 2^-11 fp16
# relative), which may go to the neighbour: 1 ulp. SGLang's CPU norm tests use 1e-5 (fp32)
# and 1e-2 / 1e-3 (bf16 / fp16) tolerances; these are tighter.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-5, 1e-5),
    torch.bfloat16: (2**-7, 1e-5),
    torch.float16: (2**-10, 1e-5),
}


def assert_matches(actual: Tensor, expected: Tensor) -> None:
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    assert actual.is_contiguous()
    rtol, atol = TOLERANCES[expected.dtype]
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


def make(shape: tuple[int, ...], dtype: torch.dtype, seed: int, scale: float = 2.0) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale + 0.25).to(dtype)


def rms64(x: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dimension, in float64."""
    x64 = x.double()
    return x64 * torch.rsqrt(x64.pow(2).mean(dim=-1, keepdim=True) + eps)


def ref_gemma3(x: Tensor, w: Tensor, eps: float) -> Tensor:
    """Gemma3RMSNorm.forward_native: norm(x) * (1 + w), rounded once to x's dtype."""
    return (rms64(x, eps) * (1.0 + w.double())).to(x.dtype)


def ref_gemma4(x: Tensor, w: Tensor, eps: float, shift: float, with_scale: bool) -> Tensor:
    """Gemma4RMSNorm.forward_native: norm(x) * (w + shift) with_scale, else norm(x)."""
    y = rms64(x, eps)
    return (y * (w.double() + shift) if with_scale else y).to(x.dtype)


def ref_l2norm(x: Tensor, eps: float) -> Tensor:
    """F.rms_norm(x, (n,), None, eps) (MuseSpark's fallback for l2norm_cpu)."""
    return rms64(x, eps).to(x.dtype)


def ref_gated(x: Tensor, w: Tensor, g: Tensor, eps: float) -> Tensor:
    """RMSNormGated (norm before gate, swish): norm(x) * w * silu(g)."""
    g64 = g.double()
    return (rms64(x, eps) * w.double() * g64 * torch.sigmoid(g64)).to(x.dtype)


def ref_rms(x: Tensor, w: Tensor, eps: float) -> Tensor:
    return (rms64(x, eps) * w.double()).to(x.dtype)


def ref_qk_gemma(x: Tensor, w: Tensor, eps: float, head_dim: int) -> Tensor:
    by_head = x.reshape(*x.shape[:-1], x.shape[-1] // head_dim, head_dim)
    return ref_gemma3(by_head, w, eps).reshape(x.shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_single_input_norms(variant: str, dtype: torch.dtype, cols: int) -> None:
    x = make((3, cols), dtype, seed=cols)
    w = make((cols,), dtype, seed=cols + 1, scale=0.3)  # Gemma's weights sit around 0
    g = make((3, cols), dtype, seed=cols + 2, scale=4.0)
    x_before = x.clone()
    eps = EPS if cols > 2 else 0.5  # a large eps must show
    assert_matches(rvv_ops.gemma3_rmsnorm(x, w, eps), ref_gemma3(x, w, eps))
    assert_matches(rvv_ops.l2norm(x, eps), ref_l2norm(x, eps))
    assert_matches(rvv_ops.gemma4_rmsnorm(x, w, eps, 1.0, True), ref_gemma4(x, w, eps, 1.0, True))
    assert_matches(rvv_ops.gemma4_rmsnorm(x, w, eps, 0.5, False), ref_gemma4(x, w, eps, 0, False))
    assert_matches(rvv_ops.fused_rmsnorm_gated(x, w + 1, g, eps), ref_gated(x, w + 1, g, eps))
    torch.testing.assert_close(x, x_before, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("tokens", "heads", "kv_heads", "head_dim"),
    [(1, 1, 1, 1), (3, 2, 1, 7), (5, 4, 2, 64), (2, 3, 3, 130), (0, 2, 1, 16), (7, 16, 8, 256)],
)
def test_qk_norms(
    dtype: torch.dtype, tokens: int, heads: int, kv_heads: int, head_dim: int
) -> None:
    # As Qwen3.5 / MiniMax-M2 pass them: q and k column slices of one fused qkv row.
    qkv = make((tokens, (heads + 2 * kv_heads) * head_dim), dtype, seed=head_dim)
    q, k, _ = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    wq = make((head_dim,), dtype, seed=1, scale=0.3)
    wk = make((head_dim,), dtype, seed=2, scale=0.3)
    q_out, k_out = rvv_ops.fused_qk_gemma_rmsnorm(q, k, wq, wk, EPS, head_dim)
    assert_matches(q_out, ref_qk_gemma(q, wq, EPS, head_dim))
    assert_matches(k_out, ref_qk_gemma(k, wk, EPS, head_dim))
    wq_full = make((q.shape[-1],), dtype, seed=3, scale=0.5) + 1
    wk_full = make((k.shape[-1],), dtype, seed=4, scale=0.5) + 1
    q_out, k_out = rvv_ops.fused_qk_rmsnorm(q, k, wq_full, wk_full, EPS)
    assert_matches(q_out, ref_rms(q, wq_full, EPS))
    assert_matches(k_out, ref_rms(k, wk_full, EPS))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layouts_and_threads(dtype: torch.dtype) -> None:
    base = make((4, 3, 70), dtype, seed=5)
    w = make((64,), dtype, seed=6, scale=0.3)
    gate_base = make((4, 3, 70), dtype, seed=7, scale=3.0)
    cases = {
        "3-D": (base[..., :64].contiguous(), gate_base[..., :64].contiguous()),
        "4-D (Gemma 3's [batch, heads, seq, head_dim])": (
            base[..., :64].reshape(2, 2, 3, 64),
            gate_base[..., :64].reshape(2, 2, 3, 64),
        ),
        "strided rows": (base[..., 3:67], gate_base[..., 5:69]),
        "1-D": (base[0, 0, :64], gate_base[0, 0, :64]),
        "transposed leading dims": (
            base.transpose(0, 1)[..., :64],
            gate_base.transpose(0, 1)[..., 2:66],
        ),
        "0 rows": (base[:0, :, :64], gate_base[:0, :, :64]),
    }
    for name, (x, g) in cases.items():
        assert_matches(rvv_ops.gemma3_rmsnorm(x, w, EPS), ref_gemma3(x, w, EPS))
        assert_matches(rvv_ops.l2norm(x, EPS), ref_l2norm(x, EPS))
        out = rvv_ops.fused_rmsnorm_gated(x, w, g, EPS)
        assert out.shape == x.shape, name
        assert_matches(out, ref_gated(x, w, g, EPS))
    # 97 rows x 1536 and a 97-token QK norm: split over threads by at::parallel_for
    x = make((97, 1536), dtype, seed=8)
    g = make((97, 1536), dtype, seed=9)
    w = make((1536,), dtype, seed=10, scale=0.3)
    wh = make((128,), dtype, seed=11, scale=0.3)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        outs = (
            rvv_ops.gemma3_rmsnorm(x, w, EPS),
            rvv_ops.fused_rmsnorm_gated(x, w, g, EPS),
            *rvv_ops.fused_qk_gemma_rmsnorm(x, g[:, :512], wh, wh, EPS, 128),
        )
    finally:
        torch.set_num_threads(threads)
    assert_matches(outs[0], ref_gemma3(x, w, EPS))
    assert_matches(outs[1], ref_gated(x, w, g, EPS))
    assert_matches(outs[2], ref_qk_gemma(x, wh, EPS, 128))
    assert_matches(outs[3], ref_qk_gemma(g[:, :512], wh, EPS, 128))


def test_sglang_call_style() -> None:
    # layernorm.py Gemma3RMSNorm.forward_cpu: gemma3_rmsnorm_cpu(x, self.weight, self.eps);
    # Gemma4RMSNorm: gemma4_rmsnorm_cpu(x, weight, eps, scale_shift, with_scale);
    # muse_spark: l2norm_cpu(x_2d, eps); fla layernorm_gated: fused_rmsnorm_gated_cpu(x, w, z,
    # eps); qwen3_5: q_by_head, k_by_head = fused_qk_gemma_rmsnorm_cpu(q, k, wq, wk, eps,
    # head_dim) then .view(q.shape); minimax_m2: fused_qk_rmsnorm_cpu(q, k, wq, wk, eps).
    bf = torch.bfloat16
    x = make((2, 48), bf, seed=1)
    w = make((48,), bf, seed=2, scale=0.3)
    assert_matches(GEMMA3(x, w, 1e-6), ref_gemma3(x, w, 1e-6))
    assert_matches(GEMMA4(x, w, 1e-6, 0.0, True), ref_gemma4(x, w, 1e-6, 0.0, True))
    assert_matches(L2NORM(x, 1e-6), ref_l2norm(x, 1e-6))
    z = make((2, 48), bf, seed=3)
    assert_matches(GATED(x, w, z, 1e-6), ref_gated(x, w, z, 1e-6))
    q, k = make((2, 4 * 12), bf, seed=4), make((2, 2 * 12), bf, seed=5)
    qn, kn = QK_GEMMA(q, k, w[:12], w[12:24], 1e-6, 12)
    assert qn.view(q.shape).shape == q.shape and kn.view(k.shape).shape == k.shape
    assert_matches(qn, ref_qk_gemma(q, w[:12], 1e-6, 12))
    qn, kn = QK(q, k, w, w[:24], 1e-6)
    assert_matches(qn, ref_rms(q, w, 1e-6))
    assert_matches(kn, ref_rms(k, w[:24], 1e-6))


def test_extreme_values() -> None:
    # fp16 values near its range: the fp32 statistics must not overflow; a saturated gate.
    x = torch.tensor([[60000.0, -60000.0, 1.0, 0.5]], dtype=torch.float16)
    w = torch.ones(4, dtype=torch.float16)
    assert_matches(rvv_ops.l2norm(x, EPS), ref_l2norm(x, EPS))
    g = torch.tensor([[-100.0, 100.0, 0.0, -20.0]], dtype=torch.float16)
    assert_matches(rvv_ops.fused_rmsnorm_gated(x, w, g, EPS), ref_gated(x, w, g, EPS))
    zeros = torch.zeros(2, 8)
    torch.testing.assert_close(rvv_ops.l2norm(zeros, EPS), zeros, rtol=0, atol=0)


def _t(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.randn(shape).to(dtype)


BF16, F16 = torch.bfloat16, torch.float16
OPCHECK: dict[str, tuple[Any, ...]] = {
    "gemma3 bf16 4-D": (GEMMA3, (_t(2, 2, 3, 32, dtype=BF16), _t(32, dtype=BF16), 1e-6)),
    "gemma3 fp32 strided": (GEMMA3, (_t(5, 80)[:, 8:72], _t(64), 1e-6)),
    "gemma4 fp16 with scale": (GEMMA4, (_t(3, 40, dtype=F16), _t(40, dtype=F16), 1e-6, 0.5, True)),
    "gemma4 fp32 no scale": (GEMMA4, (_t(2, 3, 40), _t(40), 1e-6, 1.0, False)),
    "l2norm bf16": (L2NORM, (_t(4, 64, dtype=BF16), 1e-6)),
    "l2norm fp32 0 rows": (L2NORM, (_t(0, 64), 1e-6)),
    "gated fp16": (GATED, (_t(4, 40, dtype=F16), _t(40, dtype=F16), _t(4, 40, dtype=F16), 1e-6)),
    "qk fp32": (QK, (_t(3, 64), _t(3, 32), _t(64), _t(32), 1e-6)),
    "qk gemma bf16": (
        QK_GEMMA,
        (
            _t(3, 64, dtype=BF16),
            _t(3, 32, dtype=BF16),
            _t(16, dtype=BF16),
            _t(16, dtype=BF16),
            1e-6,
            16,
        ),
    ),
    "qk gemma fp32 slices": (
        QK_GEMMA,
        (_t(2, 96)[:, :64], _t(2, 96)[:, 64:], _t(32), _t(32), 1e-6, 32),
    ),
}


@pytest.mark.parametrize("name", OPCHECK)
def test_opcheck(name: str) -> None:
    op, args = OPCHECK[name]
    torch.library.opcheck(op, args)


gemma3 = Cases(GEMMA3, {"x": _t(4, 8), "w": _t(8), "eps": 1e-6})
gemma4 = Cases(GEMMA4, {"x": _t(4, 8), "w": _t(8), "eps": 1e-6, "shift": 1.0, "scale": True})
l2 = Cases(L2NORM, {"x": _t(4, 8), "eps": 1e-6})
gated = Cases(GATED, {"x": _t(4, 8), "w": _t(8), "g": _t(4, 8), "eps": 1e-6})
qk = Cases(QK, {"q": _t(4, 8), "k": _t(4, 6), "wq": _t(8), "wk": _t(6), "eps": 1e-6})
qkg = Cases(
    QK_GEMMA, {"q": _t(4, 8), "k": _t(4, 4), "wq": _t(4), "wk": _t(4), "eps": 1e-6, "hd": 4}
)
BAD: dict[str, Bad] = {
    "gemma3 input float64": gemma3(
        TypeError,
        ("gemma3_rmsnorm_cpu", "input", "torch.float64"),
        x=_t(4, 8, dtype=torch.float64),
        w=_t(8, dtype=torch.float64),
    ),
    "gemma3 weight dtype": gemma3(TypeError, ("weight", "torch.bfloat16"), w=_t(8, dtype=BF16)),
    "gemma3 weight length": gemma3(ValueError, ("weight", "7", "8"), w=_t(7)),
    "gemma3 weight 2-D": gemma3(ValueError, ("weight", "2-d"), w=_t(1, 8)),
    "gemma3 0-d input": gemma3(ValueError, ("input", "0-d"), x=torch.tensor(1.0), w=_t(1)),
    "gemma3 eps negative": gemma3(ValueError, ("eps", "-1"), eps=-1.0),
    "gemma3 input last dim strided": gemma3(
        ValueError, ("input", "last-dimension stride"), fake_too=False, x=_t(4, 16)[:, ::2]
    ),
    "gemma3 weight strided": gemma3(
        ValueError, ("weight", "not contiguous"), fake_too=False, w=_t(16)[::2]
    ),
    "gemma4 scale_shift inf": gemma4(
        ValueError, ("gemma4_rmsnorm_cpu", "scale_shift", "inf"), shift=float("inf")
    ),
    "gemma4 weight length unused": gemma4(ValueError, ("weight", "5"), w=_t(5), scale=False),
    "l2norm input int32": l2(
        TypeError, ("l2norm_cpu", "input", "torch.int32"), x=_t(4, 8, dtype=torch.int32)
    ),
    "l2norm eps nan": l2(ValueError, ("eps", "nan"), eps=float("nan")),
    "gated gate shape": gated(
        ValueError, ("fused_rmsnorm_gated_cpu", "gate", "[4, 9]"), g=_t(4, 9)
    ),
    "gated gate dtype": gated(TypeError, ("gate", "torch.float16"), g=_t(4, 8, dtype=F16)),
    "gated gate last dim strided": gated(
        ValueError, ("gate", "last-dimension stride"), fake_too=False, g=_t(4, 16)[:, ::2]
    ),
    "qk k dtype": qk(
        TypeError, ("fused_qk_rmsnorm_cpu", "k", "torch.bfloat16"), k=_t(4, 6, dtype=BF16)
    ),
    "qk rows differ": qk(ValueError, ("q has 4 rows", "k 3"), k=_t(3, 6)),
    "qk k_weight length": qk(ValueError, ("k_weight", "8", "k.size(-1) = 6"), wk=_t(8)),
    "qk q_weight dtype": qk(TypeError, ("q_weight", "torch.float16"), wq=_t(8, dtype=F16)),
    "qk gemma head_dim 0": qkg(ValueError, ("fused_qk_gemma_rmsnorm_cpu", "head_dim", "0"), hd=0),
    "qk gemma q not multiple": qkg(
        ValueError, ("q.size(-1) = 8", "head_dim = 3"), hd=3, wq=_t(3), wk=_t(3)
    ),
    "qk gemma k not multiple": qkg(ValueError, ("k.size(-1) = 6", "head_dim = 4"), k=_t(4, 6)),
    "qk gemma weight length": qkg(ValueError, ("q_weight", "8", "head_dim = 4"), wq=_t(8)),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_input(name: str) -> None:
    BAD[name].check()


def test_devices() -> None:
    # Mixed devices: the Meta kernel names the CPU argument; reaching the CPU kernel with a
    # meta tensor takes an explicit redispatch.
    with pytest.raises(ValueError, match="gate is on device cpu"):
        GATED(_t(4, 8).to("meta"), _t(8).to("meta"), _t(4, 8), 1e-6)
    cpu = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    with pytest.raises(ValueError, match="l2norm_cpu: input is on device meta; expected a CPU"):
        L2NORM.redispatch(cpu, _t(4, 8).to("meta"), 1e-6)
    with pytest.raises(ValueError, match="fused_qk_rmsnorm_cpu: k is on device meta"):
        QK.redispatch(cpu, _t(4, 8), _t(4, 6).to("meta"), _t(8), _t(6), 1e-6)


def test_no_autograd() -> None:
    x = _t(4, 8).requires_grad_()
    with pytest.raises(RuntimeError, match="gemma3_rmsnorm_cpu"):
        GEMMA3(x, _t(8), 1e-6).sum().backward()
    with pytest.raises(RuntimeError, match="fused_qk_rmsnorm_cpu"):
        QK(x, _t(4, 6), _t(8), _t(6), 1e-6)[0].sum().backward()


ADD_LN = torch.ops.sgl_kernel.fused_add_layernorm_cpu.default
DUAL = torch.ops.sgl_kernel.fused_dual_residual_rmsnorm_cpu.default


def ref_add_layernorm(
    x: Tensor, r: Tensor, w: Tensor, b: Tensor | None, eps: float
) -> tuple[Tensor, Tensor]:
    """(output, new residual): s = x + r in fp32 (exact in float64 for 16-bit inputs),
    residual = dtype(s), output = LayerNorm of the unrounded s in float64."""
    s = (x.float() + r.float()).double()
    mean = s.mean(dim=-1, keepdim=True)
    var = (s - mean).pow(2).mean(dim=-1, keepdim=True)
    y = (s - mean) * torch.rsqrt(var + eps) * w.double()
    if b is not None:
        y = y + b.double()
    return y.to(x.dtype), s.to(x.dtype)


def ref_dual(x: Tensor, r: Tensor, w1: Tensor, w2: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """(output, mid): h = dtype(rms(x) * w1); s = r + h in fp32; mid = dtype(s),
    output = dtype(rms(s) * w2)."""
    h = ref_rms(x, w1, eps)
    s = (r.float() + h.float()).double()
    return (rms64(s, eps) * w2.double()).to(x.dtype), s.to(x.dtype)


def assert_dual_matches(
    out: Tensor, mid: Tensor, x: Tensor, r: Tensor, w1: Tensor, w2: Tensor, eps: float
) -> None:
    """(out, mid) of fused_dual_residual_rmsnorm_cpu against ref_dual. h = dtype(rms(x) * w1)
    may round to the neighbour of the reference's h (one ulp of |h|), which shows in
    mid = dtype(r + h) relative to |r| + |h| when r + h cancels, and in out scaled by
    rms(s) * |w2|; then each output's own rounding."""
    expected_out, expected_mid = ref_dual(x, r, w1, w2, eps)
    rtol, atol = TOLERANCES[x.dtype]
    h = ref_rms(x, w1, eps)
    terms = r.double().abs() + h.double().abs()
    s = (r.float() + h.float()).double()
    inv = torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + eps) if s.numel() else s
    for got, want, spread in (
        (mid, expected_mid, terms),
        (out, expected_out, terms * inv * w2.double().abs()),
    ):
        assert got.shape == want.shape and got.dtype == want.dtype and got.is_contiguous()
        bound = rtol * (spread + want.double().abs()) + atol
        excess = (got.double() - want.double()).abs() - bound
        assert got.numel() == 0 or excess.max().item() <= 0, excess.max().item()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_residual_norms(variant: str, dtype: torch.dtype, cols: int) -> None:
    x = make((3, cols), dtype, seed=cols)
    r = make((3, cols), dtype, seed=cols + 7)
    x_before, r_before = x.clone(), r.clone()
    eps = 1e-5 if cols > 1 else 0.5
    for i, param_dtype in enumerate(dict.fromkeys((torch.float32, dtype))):
        w = make((cols,), param_dtype, seed=cols + 1, scale=0.5)
        b = make((cols,), param_dtype, seed=cols + 2, scale=0.5) if i == 0 else None
        expected, expected_r = ref_add_layernorm(x, r_before, w, b, eps)
        r = r_before.clone()
        assert_matches(rvv_ops.fused_add_layernorm(x, r, w, b, eps), expected)
        torch.testing.assert_close(r, expected_r, rtol=0, atol=0)  # one fp32 add: exact
    w1 = make((cols,), dtype, seed=cols + 3, scale=0.5)
    w2 = make((cols,), dtype, seed=cols + 4, scale=0.5)
    out, mid = rvv_ops.fused_dual_residual_rmsnorm(x, r_before, w1, w2, EPS)
    assert_dual_matches(out, mid, x, r_before, w1, w2, EPS)
    torch.testing.assert_close(x, x_before, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_residual_layouts(dtype: torch.dtype) -> None:
    base = make((4, 3, 70), dtype, seed=5)
    rbase = make((4, 3, 70), dtype, seed=6)
    w = make((64,), dtype, seed=7, scale=0.5)
    cases = {
        "3-D": (base[..., :64].contiguous(), rbase[..., :64].contiguous()),
        "strided rows": (base[..., 3:67], rbase[..., 2:66]),
        "1-D": (base[0, 0, :64], rbase[0, 0, :64].clone()),
        "transposed input": (
            base.transpose(0, 1)[..., :64],
            rbase.transpose(0, 1)[..., :64].contiguous(),
        ),
        "0 rows": (base[:0, :, :64], rbase[:0, :, :64]),
    }
    for name, (x, r) in cases.items():
        r0 = r.clone()
        expected, expected_r = ref_add_layernorm(x, r0, w, None, 1e-5)
        out = rvv_ops.fused_add_layernorm(x, r, w, None, 1e-5)
        assert out.shape == x.shape, name
        assert_matches(out, expected)
        torch.testing.assert_close(r, expected_r, rtol=0, atol=0)
        out, mid = rvv_ops.fused_dual_residual_rmsnorm(x, r0, w, w, EPS)
        assert_dual_matches(out, mid, x, r0, w, w, EPS)


def test_fused_residual_call_style() -> None:
    # grok.py: hidden_states, residual = fused_dual_residual_rmsnorm(hidden_states, residual,
    # w1, w2, eps); the residual passed in is not written.
    x, r = make((5, 40), torch.bfloat16, seed=1), make((5, 40), torch.bfloat16, seed=2)
    w1, w2 = make((40,), torch.bfloat16, seed=3), make((40,), torch.bfloat16, seed=4)
    versions = (x._version, r._version)
    out, mid = DUAL(x, r, w1, w2, 1e-6)
    assert (x._version, r._version) == versions and mid.data_ptr() != r.data_ptr()
    assert_dual_matches(out, mid, x, r, w1, w2, 1e-6)
    # fused_add_layernorm_cpu writes residual (schema Tensor(a!) residual): version bump.
    before = r._version
    ADD_LN(x, r, torch.ones(40), None, 1e-5)
    assert r._version > before


OPCHECK2: dict[str, tuple[Any, ...]] = {
    "add layernorm bf16 fp32 params": (
        ADD_LN,
        (_t(4, 64, dtype=BF16), _t(4, 64, dtype=BF16), _t(64), _t(64), 1e-5),
    ),
    "add layernorm fp16 no bias 3-D": (
        ADD_LN,
        (_t(2, 3, 40, dtype=F16), _t(2, 3, 40, dtype=F16), _t(40, dtype=F16), None, 1e-5),
    ),
    "add layernorm fp32 0 rows": (ADD_LN, (_t(0, 64), _t(0, 64), _t(64), None, 1e-5)),
    "dual fp32": (DUAL, (_t(3, 48), _t(3, 48), _t(48), _t(48), 1e-6)),
    "dual bf16 strided": (
        DUAL,
        (
            _t(3, 80, dtype=BF16)[:, 8:72],
            _t(3, 64, dtype=BF16),
            _t(64, dtype=BF16),
            _t(64, dtype=BF16),
            1e-6,
        ),
    ),
}


@pytest.mark.parametrize("name", OPCHECK2)
def test_opcheck_fused_residual(name: str) -> None:
    op, args = OPCHECK2[name]
    torch.library.opcheck(op, args)


add_ln = Cases(ADD_LN, {"x": _t(4, 8), "r": _t(4, 8), "w": _t(8), "b": None, "eps": 1e-5})
dual = Cases(DUAL, {"x": _t(4, 8), "r": _t(4, 8), "w1": _t(8), "w2": _t(8), "eps": 1e-6})
_R = _t(4, 8)
BAD2: dict[str, Bad] = {
    "add ln residual shape": add_ln(
        ValueError, ("fused_add_layernorm_cpu", "residual", "[4, 9]"), r=_t(4, 9)
    ),
    "add ln residual dtype": add_ln(
        TypeError, ("residual", "torch.bfloat16"), r=_t(4, 8, dtype=BF16)
    ),
    "add ln weight dtype": add_ln(
        TypeError,
        ("weight", "torch.float16", "torch.bfloat16 or torch.float32"),
        x=_t(4, 8, dtype=BF16),
        r=_t(4, 8, dtype=BF16),
        w=_t(8, dtype=F16),
    ),
    "add ln bias shape": add_ln(ValueError, ("bias", "[2, 8]", "[8]"), b=_t(2, 8)),
    "add ln eps inf": add_ln(ValueError, ("eps", "inf"), eps=float("inf")),
    "add ln input is residual": add_ln(
        ValueError, ("input", "residual", "share memory"), fake_too=False, x=_R, r=_R
    ),
    "add ln residual rows overlap": add_ln(
        ValueError, ("residual",), fake_too=False, r=_t(8).expand(4, 8)
    ),
    "dual x float64": dual(
        TypeError,
        ("fused_dual_residual_rmsnorm_cpu", "x", "torch.float64"),
        x=_t(4, 8, dtype=torch.float64),
    ),
    "dual residual shape": dual(ValueError, ("residual", "[3, 8]"), r=_t(3, 8)),
    "dual weight2 length": dual(ValueError, ("weight2", "9", "x.size(-1) = 8"), w2=_t(9)),
    "dual weight1 dtype": dual(TypeError, ("weight1", "torch.float16"), w1=_t(8, dtype=F16)),
}


@pytest.mark.parametrize("name", BAD2)
def test_bad_input_fused_residual(name: str) -> None:
    BAD2[name].check()


QK_ROPE = torch.ops.sgl_kernel.fused_qk_norm_rope_cpu.default


def ref_qk_norm_rope(
    x: Tensor,
    w: Tensor,
    eps: float,
    is_neox: bool,
    positions: Tensor,
    cache: Tensor,
    rotary_dim: int,
) -> tuple[Tensor, Tensor]:
    """(result, spread): h = dtype(rms(head) * w) per head (Qwen3's RMSNorm, stored), then
    RoPE of h's first rotary_dim elements in float64, rounded once; spread: the magnitude of
    the rotation's terms (|h1 cos| + |h2 sin|), against which an ulp of h counts."""
    head_dim = w.shape[0]
    tokens = x.shape[0]
    heads = x.shape[-1] // head_dim
    h = ref_rms(x.reshape(tokens, heads, head_dim), w, eps).double()
    out, spread = h.clone(), h.abs()
    cs = cache.double()[positions.long()]  # [tokens, rotary_dim]
    half = rotary_dim // 2
    cos, sin = cs[:, None, :half], cs[:, None, half:]
    if is_neox:
        i1, i2 = torch.arange(half), torch.arange(half) + half
    else:
        i1, i2 = torch.arange(half) * 2, torch.arange(half) * 2 + 1
    x1, x2 = h[..., i1], h[..., i2]
    out[..., i1] = x1 * cos - x2 * sin
    out[..., i2] = x2 * cos + x1 * sin
    spread[..., i1] = (x1 * cos).abs() + (x2 * sin).abs()
    spread[..., i2] = (x2 * cos).abs() + (x1 * sin).abs()
    return out.reshape(x.shape).to(x.dtype), spread.reshape(x.shape)


def assert_rope_matches(got: Tensor, want: Tensor, spread: Tensor) -> None:
    """Within one ulp of the dtype of the terms (the stored norm may round to the neighbour
    of the reference's) plus the result's own rounding."""
    assert got.shape == want.shape and got.dtype == want.dtype
    rtol, atol = TOLERANCES[want.dtype]
    bound = rtol * (spread + want.double().abs()) + atol
    excess = (got.double() - want.double()).abs() - bound
    assert got.numel() == 0 or excess.max().item() <= 0, excess.max().item()


def make_cache(max_pos: int, rotary_dim: int, dtype: torch.dtype) -> Tensor:
    """SGLang's cos_sin_cache: [max_pos, rotary_dim], cos then sin of pos * inv_freq."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
    freqs = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize(
    ("tokens", "heads", "kv_heads", "head_dim", "rotary_dim"),
    [
        (1, 1, 1, 2, 2),
        (3, 4, 2, 64, 64),
        (5, 2, 1, 130, 64),
        (0, 2, 1, 16, 16),
        (9, 8, 4, 128, 128),
    ],
)
def test_qk_norm_rope(
    dtype: torch.dtype,
    is_neox: bool,
    tokens: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    rotary_dim: int,
) -> None:
    # As Qwen3-MoE passes them: q and k column slices of qkv, written in place; v untouched.
    qkv = make((tokens, (heads + 2 * kv_heads) * head_dim), dtype, seed=head_dim + tokens)
    qkv_before = qkv.clone()
    q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    wq = make((head_dim,), dtype, seed=1, scale=0.3) + 1
    wk = make((head_dim,), dtype, seed=2, scale=0.3) + 1
    positions = torch.randint(0, 50, (tokens,), generator=torch.Generator().manual_seed(3))
    for cache_dtype in dict.fromkeys((dtype, torch.float32)):
        q.copy_(qkv_before[:, : q.shape[1]])
        k.copy_(qkv_before[:, q.shape[1] : q.shape[1] + k.shape[1]])
        q0, k0 = q.clone(), k.clone()
        cache = make_cache(50, rotary_dim, cache_dtype)
        rvv_ops.fused_qk_norm_rope(q, k, wq, wk, EPS, is_neox, positions, cache, rotary_dim)
        assert_rope_matches(
            q, *ref_qk_norm_rope(q0, wq, EPS, is_neox, positions, cache, rotary_dim)
        )
        assert_rope_matches(
            k, *ref_qk_norm_rope(k0, wk, EPS, is_neox, positions, cache, rotary_dim)
        )
        torch.testing.assert_close(v, qkv_before[:, q.shape[1] + k.shape[1] :], rtol=0, atol=0)


def test_qk_norm_rope_call_style_and_threads() -> None:
    # qwen3_moe.py: torch.ops.sgl_kernel.fused_qk_norm_rope_cpu(q, k, q_norm.weight,
    # k_norm.weight, eps, is_neox_style, positions.view(-1), cos_sin_cache, rotary_dim), the
    # result unused (in place); int32 positions; 97 tokens split over threads.
    bf = torch.bfloat16
    qkv = make((97, 16 * 64), bf, seed=4)
    q, k, _ = qkv.split([8 * 64, 4 * 64, 4 * 64], dim=-1)
    q0, k0 = q.clone(), k.clone()
    w = make((64,), bf, seed=5, scale=0.2) + 1
    positions = torch.arange(97, dtype=torch.int32)
    cache = make_cache(128, 32, bf)  # partial rotary: the rest of each head is only normed
    versions = (q._version, k._version)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        assert QK_ROPE(q, k, w, w, 1e-6, True, positions, cache, 32) is None
    finally:
        torch.set_num_threads(threads)
    assert q._version > versions[0] and k._version > versions[1]
    assert_rope_matches(q, *ref_qk_norm_rope(q0, w, 1e-6, True, positions, cache, 32))
    assert_rope_matches(k, *ref_qk_norm_rope(k0, w, 1e-6, True, positions, cache, 32))


def test_opcheck_qk_norm_rope() -> None:
    qkv = _t(3, 8 * 16, dtype=BF16)
    q, k = qkv[:, :64], qkv[:, 64:96]
    pos = torch.tensor([0, 5, 2])
    torch.library.opcheck(
        QK_ROPE,
        (
            q,
            k,
            _t(16, dtype=BF16),
            _t(16, dtype=BF16),
            1e-6,
            False,
            pos,
            make_cache(8, 16, torch.float32),
            16,
        ),
    )


def _rope_defaults() -> dict[str, Any]:
    return {
        "q": _t(3, 32),
        "k": _t(3, 16),
        "wq": _t(16),
        "wk": _t(16),
        "eps": 1e-6,
        "neox": True,
        "pos": torch.tensor([0, 1, 2]),
        "cache": make_cache(4, 8, torch.float32),
        "rd": 8,
    }


rope = Cases(QK_ROPE, _rope_defaults())
_QK = _t(3, 48)
BAD3: dict[str, Bad] = {
    "rope q dtype": rope(
        TypeError,
        ("fused_qk_norm_rope_cpu", "q", "torch.float64"),
        q=_t(3, 32, dtype=torch.float64),
    ),
    "rope k rows": rope(ValueError, ("q has 3 rows", "k 2"), k=_t(2, 16)),
    "rope k_weight length": rope(ValueError, ("k_weight", "8", "head_dim"), wk=_t(8)),
    "rope q not multiple": rope(ValueError, ("q.size(-1) = 24", "head_dim = 16"), q=_t(3, 24)),
    "rope positions dtype": rope(
        TypeError, ("positions", "torch.float32", "torch.int64"), pos=torch.zeros(3)
    ),
    "rope positions length": rope(ValueError, ("positions", "[3]"), pos=torch.tensor([0, 1])),
    "rope rotary_dim odd": rope(ValueError, ("rotary_dim", "7", "even"), rd=7),
    "rope rotary_dim too big": rope(
        ValueError,
        ("rotary_dim", "18", "head_dim = 16"),
        rd=18,
        cache=make_cache(4, 18, torch.float32),
    ),
    "rope cache width": rope(
        ValueError, ("cos_sin_cache", "rotary_dim = 8"), cache=make_cache(4, 6, torch.float32)
    ),
    "rope cache dtype": rope(
        TypeError, ("cos_sin_cache", "torch.float16"), cache=make_cache(4, 8, torch.float16)
    ),
    "rope position out of range": rope(
        ValueError,
        ("positions[1]", "7", "cos_sin_cache.size(0) = 4"),
        fake_too=False,
        pos=torch.tensor([0, 7, 1]),
    ),
    "rope q overlaps k": rope(
        ValueError, ("q", "k", "share memory"), fake_too=False, q=_QK[:, :32], k=_QK[:, 16:32]
    ),
}


@pytest.mark.parametrize("name", BAD3)
def test_bad_input_qk_norm_rope(name: str) -> None:
    BAD3[name].check()
