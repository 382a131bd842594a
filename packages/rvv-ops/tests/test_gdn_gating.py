"""fused_gdn_gating_cpu (Gated DeltaNet gates): float64 references of SGLang's formula
(``g = -exp(A_log) * softplus(a + dt_bias)``, ``beta = sigmoid(b)``), parameter dtypes,
layouts, empty and length-1 shapes, opcheck and bad inputs."""

from __future__ import annotations

import pytest
import rvv_ops
import torch
import torch.nn.functional as F
from bad_input import Bad, Cases
from torch import Tensor

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
GATING = torch.ops.sgl_kernel.fused_gdn_gating_cpu.default


def randn(*shape: int, dtype: torch.dtype, seed: int, scale: float = 1.0) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype)


def reference(A_log: Tensor, a: Tensor, b: Tensor, dt_bias: Tensor) -> tuple[Tensor, Tensor]:
    # a + dt_bias is formed in fp32 (as the kernel and SGLang's a.float() + dt_bias do)
    x = (a.float() + dt_bias.float()).double()
    g = -A_log.double().exp() * F.softplus(x)
    return g.unsqueeze(0), torch.sigmoid(b.double()).unsqueeze(0)


def check(A_log: Tensor, a: Tensor, b: Tensor, dt_bias: Tensor) -> None:
    g, beta = GATING(A_log, a, b, dt_bias)
    want_g, want_beta = reference(A_log, a, b, dt_bias)
    assert g.dtype == torch.float32 and g.shape == (1, *a.shape)
    assert beta.dtype == b.dtype and beta.shape == (1, *b.shape)
    torch.testing.assert_close(g.double(), want_g, rtol=4e-6, atol=1e-30)
    eps = {torch.float32: 4e-6, torch.bfloat16: 2**-8, torch.float16: 2**-11}[b.dtype]
    torch.testing.assert_close(beta.double(), want_beta.to(b.dtype).double(), rtol=eps, atol=1e-7)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("heads", (1, 4, 7, 32, 33, 129))
def test_matches_reference(variant: str, dtype: torch.dtype, heads: int) -> None:
    a = randn(5, heads, dtype=dtype, seed=heads, scale=8.0)  # softplus tails, past 20 too
    a[0, 0] = 30.0
    b = randn(5, heads, dtype=dtype, seed=heads + 1, scale=6.0)
    A_log = randn(heads, dtype=torch.float32, seed=heads + 2)
    dt_bias = randn(heads, dtype=dtype, seed=heads + 3)
    check(A_log, a, b, dt_bias)
    # A_log in a's dtype, dt_bias in fp32
    check(A_log.to(dtype), a, b, dt_bias.float())


def test_sglang_formula() -> None:
    # gdn_backend's reference: -A_log.float().exp() * F.softplus(a.float() + dt_bias), b.sigmoid()
    a = randn(9, 8, dtype=torch.bfloat16, seed=1)
    b = randn(9, 8, dtype=torch.bfloat16, seed=2)
    A_log = torch.rand(8)
    dt_bias = torch.rand(8, dtype=torch.bfloat16)
    g, beta = rvv_ops.fused_gdn_gating(A_log, a, b, dt_bias)
    g_ref = -A_log.float().exp() * F.softplus(a.float() + dt_bias)
    torch.testing.assert_close(g, g_ref.unsqueeze(0), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(beta.float(), b.sigmoid().unsqueeze(0).float(), rtol=5e-3, atol=5e-3)


def test_layouts_and_empty() -> None:
    ab = randn(6, 20, dtype=torch.bfloat16, seed=3, scale=4.0)
    a, b = ab[:, :8], ab[:, 10:18]  # strided rows (a slice of the fused ba projection)
    A_log, dt_bias = randn(8, dtype=torch.float32, seed=4), randn(8, dtype=torch.bfloat16, seed=5)
    check(A_log, a, b, dt_bias)
    check(A_log, a.t().contiguous().t(), b, dt_bias)  # column-major a
    check(A_log[:1], a[:1, :1], b[:1, :1], dt_bias[:1])  # one element
    g, beta = GATING(A_log, a[:0], b[:0], dt_bias)
    assert g.shape == (1, 0, 8) and beta.shape == (1, 0, 8)
    many = randn(5000, 16, dtype=torch.float32, seed=6, scale=5.0)  # threads
    check(
        randn(16, dtype=torch.float32, seed=7),
        many,
        many * 0.5,
        randn(16, dtype=torch.float32, seed=8),
    )


def test_opcheck() -> None:
    a = randn(3, 8, dtype=torch.bfloat16, seed=1)
    torch.library.opcheck(GATING, (torch.rand(8), a, a * 2, torch.rand(8, dtype=torch.bfloat16)))
    torch.library.opcheck(
        GATING, (torch.rand(4), torch.randn(2, 4), torch.randn(2, 4), torch.rand(4))
    )


C = Cases(
    GATING,
    {
        "A_log": torch.zeros(8),
        "a": torch.zeros(3, 8).bfloat16(),
        "b": torch.zeros(3, 8).bfloat16(),
        "dt_bias": torch.zeros(8).bfloat16(),
    },
    words=("fused_gdn_gating_cpu",),
)
BAD = {
    "int a": C(TypeError, ("a", "torch.int32"), a=torch.zeros(3, 8, dtype=torch.int32)),
    "b dtype": C(TypeError, ("b", "torch.float32"), b=torch.zeros(3, 8)),
    "A_log dtype": C(TypeError, ("A_log", "torch.float16"), A_log=torch.zeros(8).half()),
    "3-D a": C(
        ValueError,
        ("a", "3-d"),
        a=torch.zeros(1, 3, 8).bfloat16(),
        b=torch.zeros(1, 3, 8).bfloat16(),
    ),
    "b shape": C(ValueError, ("b", "[3, 8]"), b=torch.zeros(3, 7).bfloat16()),
    "A_log heads": C(ValueError, ("A_log", "num_heads = a.size(1) = 8"), A_log=torch.zeros(7)),
    "dt_bias 2-D": C(ValueError, ("dt_bias",), dt_bias=torch.zeros(1, 8).bfloat16()),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input(case: str) -> None:
    bad: Bad = BAD[case]
    bad.check()
