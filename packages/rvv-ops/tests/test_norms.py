"""layernorm_cpu, gemma_rmsnorm_cpu and gemma_fused_add_rmsnorm_cpu: torch fp32 references
(SGLang's own forward_native formulas), layouts, opcheck and bad inputs."""

from __future__ import annotations

from typing import Any

import pytest
import rvv_ops
import torch
import torch.nn.functional as F
from bad_input import Bad, Cases
from torch import Tensor

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
EPS = 1e-6
LAYERNORM = torch.ops.sgl_kernel.layernorm_cpu.default
GEMMA = torch.ops.sgl_kernel.gemma_rmsnorm_cpu.default
GEMMA_FUSED = torch.ops.sgl_kernel.gemma_fused_add_rmsnorm_cpu.default

# (rtol, atol) per dtype. Kernel and reference both compute in fp32 and differ in summation
# order (a few fp32 ulps of the statistics); 16-bit results may then round to the
# neighbouring value: 1 ulp = 2^-7 (bf16) or 2^-10 (fp16) relative.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-5, 1e-5),
    torch.bfloat16: (2**-7, 1e-5),
    torch.float16: (2**-10, 1e-5),
}


def assert_matches(actual: Tensor, expected: Tensor) -> None:
    rtol, atol = TOLERANCES[expected.dtype]
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


def make(shape: tuple[int, ...], dtype: torch.dtype, seed: int, scale: float = 2.0) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale + 0.5).to(dtype)


def reference_layernorm(x: Tensor, w: Tensor, b: Tensor | None, eps: float) -> Tensor:
    """SGLang's LayerNorm.forward_native: F.layer_norm in fp32, back to x's dtype."""
    bias = None if b is None else b.float()
    return F.layer_norm(x.float(), (x.shape[-1],), w.float(), bias, eps).to(x.dtype)


def reference_gemma(x: Tensor, w: Tensor, eps: float) -> Tensor:
    """SGLang's GemmaRMSNorm.forward_native: x * rsqrt(mean(x^2) + eps) * (1 + w) in fp32."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (x32 * (1.0 + w.float())).to(x.dtype)


def reference_gemma_fused(
    x: Tensor, residual: Tensor, w: Tensor, eps: float
) -> tuple[Tensor, Tensor]:
    """(new input, new residual) as sgl-kernel's CPU op: s = x + residual in fp32,
    residual = dtype(s), input = dtype(gemma(s)), the norm of the unrounded sum."""
    s = x.float() + residual.float()
    return reference_gemma(s, w, eps).to(x.dtype), s.to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layernorm_matches_reference(variant: str, dtype: torch.dtype, cols: int) -> None:
    x = make((3, cols), dtype, seed=cols)
    x_before = x.clone()
    # SGLang's LayerNorm keeps fp32 parameters by default; the model dtype works too.
    for i, param_dtype in enumerate(dict.fromkeys((torch.float32, dtype))):
        w = make((cols,), param_dtype, seed=cols + 1, scale=0.5)
        b = make((cols,), param_dtype, seed=cols + 2, scale=0.5) if i == 0 else None
        eps = 1e-5 if cols > 1 else 0.5  # a single element normalises to 0: eps irrelevant
        out = rvv_ops.layernorm(x, w, b, eps)
        assert out.shape == x.shape and out.dtype == dtype and out.is_contiguous()
        assert_matches(out, reference_layernorm(x, w, b, eps))
    torch.testing.assert_close(x, x_before, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gemma_rmsnorm_matches_reference(variant: str, dtype: torch.dtype, cols: int) -> None:
    x = make((3, cols), dtype, seed=cols)
    r = make((3, cols), dtype, seed=cols + 7)
    w = make((cols,), dtype, seed=cols + 1, scale=0.3)  # Gemma's weights sit around 0
    x_before = x.clone()
    assert_matches(rvv_ops.gemma_rmsnorm(x, w, EPS), reference_gemma(x, w, EPS))
    torch.testing.assert_close(x, x_before, rtol=0, atol=0)
    expected_x, expected_r = reference_gemma_fused(x, r, w, EPS)
    rvv_ops.gemma_fused_add_rmsnorm(x, r, w, EPS)
    torch.testing.assert_close(r, expected_r, rtol=0, atol=0)  # one fp32 add, rounded: exact
    assert_matches(x, expected_x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layouts_and_threads(dtype: torch.dtype) -> None:
    base = make((4, 3, 70), dtype, seed=5)
    w = make((64,), dtype, seed=6, scale=0.3)
    b = make((64,), dtype, seed=7, scale=0.3)
    cases = {
        "3-D": base[..., :64].contiguous(),
        "strided rows": base[..., 3:67],
        "1-D": base[0, 0, :64],
        "transposed leading dims": base.transpose(0, 1)[..., :64],
        "0 rows": base[:0, :, :64],
    }
    for name, x in cases.items():
        out = rvv_ops.layernorm(x, w, b, 1e-5)
        assert out.shape == x.shape and out.is_contiguous(), name
        assert_matches(out, reference_layernorm(x, w, b, 1e-5))
        assert_matches(rvv_ops.gemma_rmsnorm(x, w, EPS), reference_gemma(x, w, EPS))
    # 97 rows x 1536: split over threads by at::parallel_for
    x = make((97, 1536), dtype, seed=8)
    r = make((97, 1536), dtype, seed=9)
    w, b = make((1536,), dtype, seed=10, scale=0.3), make((1536,), dtype, seed=11)
    expected_ln = reference_layernorm(x, w, b, 1e-5)
    expected_x, expected_r = reference_gemma_fused(x, r, w, EPS)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        out = rvv_ops.layernorm(x, w, b, 1e-5)
        rvv_ops.gemma_fused_add_rmsnorm(x, r, w, EPS)
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(r, expected_r, rtol=0, atol=0)
    assert_matches(x, expected_x)
    assert_matches(out, expected_ln)


def test_sglang_call_style() -> None:
    # layernorm.py: torch.ops.sgl_kernel.layernorm_cpu(x, self.weight.data, bias_or_None, eps)
    # returns the result; GemmaRMSNorm.forward_cpu calls the fused op for its side effects
    # and returns (x, residual).
    x = make((2, 48), torch.bfloat16, seed=1)
    w32 = torch.ones(48)
    assert_matches(LAYERNORM(x, w32, None, 1e-6), reference_layernorm(x, w32, None, 1e-6))
    r = make((2, 48), torch.bfloat16, seed=2)
    w = make((48,), torch.bfloat16, seed=3, scale=0.3)
    assert_matches(GEMMA(x, w, 1e-6), reference_gemma(x, w, 1e-6))
    expected_x, expected_r = reference_gemma_fused(x, r, w, 1e-6)
    versions = (x._version, r._version)
    assert GEMMA_FUSED(x, r, w, 1e-6) is None
    assert x._version > versions[0] and r._version > versions[1]
    torch.testing.assert_close(r, expected_r, rtol=0, atol=0)
    assert_matches(x, expected_x)


def test_layernorm_large_mean() -> None:
    # fp32 data far from 0: two-pass statistics keep the variance accurate.
    x = torch.randn(4, 1536) + 1000.0
    w, b = torch.rand(1536) + 0.5, torch.randn(1536)
    torch.testing.assert_close(
        rvv_ops.layernorm(x, w, b, 1e-5), reference_layernorm(x, w, b, 1e-5), rtol=1e-3, atol=1e-3
    )


def _t(*shape: int, dtype: torch.dtype = torch.float32, device: str = "cpu") -> Tensor:
    return torch.randn(shape, device=device).to(dtype)


OPCHECK: dict[str, tuple[Any, ...]] = {
    "layernorm bf16 fp32 params": (
        LAYERNORM,
        (_t(4, 64, dtype=torch.bfloat16), _t(64), _t(64), 1e-5),
    ),
    "layernorm fp16 no bias strided": (
        LAYERNORM,
        (_t(5, 80, dtype=torch.float16)[:, 8:72], _t(64, dtype=torch.float16), None, 1e-5),
    ),
    "layernorm fp32 3-D": (LAYERNORM, (_t(2, 3, 48), _t(48), _t(48), 1e-5)),
    "gemma bf16": (GEMMA, (_t(4, 64, dtype=torch.bfloat16), _t(64, dtype=torch.bfloat16), 1e-6)),
    "gemma fused fp16": (
        GEMMA_FUSED,
        (
            _t(2, 3, 40, dtype=torch.float16),
            _t(2, 3, 40, dtype=torch.float16),
            _t(40, dtype=torch.float16),
            1e-6,
        ),
    ),
    "gemma fused fp32 0 rows": (GEMMA_FUSED, (_t(0, 64), _t(0, 64), _t(64), 1e-6)),
}


@pytest.mark.parametrize("name", OPCHECK)
def test_opcheck(name: str) -> None:
    op, args = OPCHECK[name]
    torch.library.opcheck(op, args)


ln = Cases(LAYERNORM, {"x": _t(4, 8), "w": _t(8), "b": None, "eps": 1e-5})
gemma = Cases(GEMMA, {"x": _t(4, 8), "w": _t(8), "eps": 1e-6})
gemma_fused = Cases(GEMMA_FUSED, {"x": _t(4, 8), "r": _t(4, 8), "w": _t(8), "eps": 1e-6})
BF16, F16, F64, I32 = torch.bfloat16, torch.float16, torch.float64, torch.int32
X = _t(4, 8)
BAD: dict[str, Bad] = {
    "ln input float64": ln(
        TypeError, ("layernorm_cpu", "input", "torch.float64"), x=_t(4, 8, dtype=F64)
    ),
    "ln weight dtype": ln(
        TypeError,
        ("weight", "torch.float16", "torch.bfloat16 or torch.float32"),
        x=_t(4, 8, dtype=BF16),
        w=_t(8, dtype=F16),
    ),
    "ln bias dtype": ln(
        TypeError,
        ("bias", "torch.bfloat16", "weight's dtype torch.float32"),
        x=_t(4, 8, dtype=BF16),
        b=_t(8, dtype=BF16),
    ),
    "ln weight length": ln(ValueError, ("weight", "7", "8"), w=_t(7)),
    "ln bias shape": ln(ValueError, ("bias", "[2, 8]", "[8]"), b=_t(2, 8)),
    "ln eps negative": ln(ValueError, ("eps", "-1"), eps=-1.0),
    "ln bias strided": ln(ValueError, ("bias", "not contiguous"), fake_too=False, b=_t(16)[::2]),
    "gemma weight dtype": gemma(
        TypeError, ("gemma_rmsnorm_cpu", "weight", "torch.bfloat16"), w=_t(8, dtype=BF16)
    ),
    "gemma input int32": gemma(
        TypeError, ("input", "torch.int32"), x=_t(4, 8, dtype=I32), w=_t(8, dtype=I32)
    ),
    "gemma eps nan": gemma(ValueError, ("eps", "nan"), eps=float("nan")),
    "gemma fused residual shape": gemma_fused(
        ValueError, ("gemma_fused_add_rmsnorm_cpu", "residual", "[4, 9]"), r=_t(4, 9)
    ),
    "gemma fused input is residual": gemma_fused(
        ValueError, ("input", "residual", "share memory"), fake_too=False, x=X, r=X
    ),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_input(name: str) -> None:
    BAD[name].check()


def test_no_autograd() -> None:
    x = _t(4, 8).requires_grad_()
    with pytest.raises(RuntimeError, match="layernorm_cpu"):
        LAYERNORM(x, _t(8), None, 1e-5).sum().backward()
    with pytest.raises(RuntimeError, match="gemma_fused_add_rmsnorm_cpu: has no derivative"):
        GEMMA_FUSED(_t(4, 8).requires_grad_(), _t(4, 8), _t(8), 1e-6)
    with torch.no_grad():
        GEMMA_FUSED(_t(4, 8), _t(4, 8), _t(8).requires_grad_(), 1e-6)
