"""rmsnorm / fused_add_rmsnorm against an independent torch reference, and in-place semantics."""

from __future__ import annotations

import pytest
import rvv_ops
import torch
from torch import Tensor

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
EPS = 1e-6

# (rtol, atol) of rmsnorm's output, per dtype. Kernel and reference both compute in fp32
# with the same operation order; they differ only in the summation order of sum(x^2) and
# in 1/sqrt vs rsqrt, a few fp32 ulps of the scale factor.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    # a few fp32 ulps (2^-23 = 1.2e-7) of error in the scale, times values of order 1-10
    torch.float32: (1e-5, 1e-5),
    # the fp32 results may round to neighbouring bf16 values: 1 ulp = at most 2^-7 relative
    torch.bfloat16: (2**-7, 1e-6),
    # likewise 1 fp16 ulp = at most 2^-10 relative; atol covers subnormal outputs
    torch.float16: (2**-10, 1e-6),
}


def reference_rmsnorm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """RMSNorm in fp32 with plain torch ops, rounded to x's dtype."""
    x32 = x.float()
    scale = torch.rsqrt(x32.square().mean(dim=-1, keepdim=True) + eps)
    return (x32 * scale * weight.float()).to(x.dtype)


def reference_fused(
    x: Tensor, residual: Tensor, weight: Tensor, eps: float
) -> tuple[Tensor, Tensor]:
    """(new input, new residual) as sgl-kernel's CPU op computes them: s = x + residual in
    fp32, residual = dtype(s) and input = dtype(rmsnorm(s)), the norm of the fp32 sum."""
    s = x.float() + residual.float()
    scale = torch.rsqrt(s.square().mean(dim=-1, keepdim=True) + eps)
    return (s * scale * weight.float()).to(x.dtype), s.to(x.dtype)


def make(shape: tuple[int, ...], dtype: torch.dtype, seed: int, scale: float = 3.0) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype)


def make_weight(cols: int, dtype: torch.dtype, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed + 1)
    return (1.0 + 0.5 * torch.randn(cols, generator=g)).to(dtype)


def assert_matches(actual: Tensor, expected: Tensor) -> None:
    rtol, atol = TOLERANCES[expected.dtype]
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rmsnorm_matches_reference(variant: str, dtype: torch.dtype, cols: int) -> None:
    x = make((3, cols), dtype, seed=cols)
    w = make_weight(cols, dtype, seed=cols)
    x_before = x.clone()
    out = rvv_ops.rmsnorm(x, w, EPS)
    assert out.shape == x.shape and out.dtype == dtype and out.is_contiguous()
    assert_matches(out, reference_rmsnorm(x, w, EPS))
    torch.testing.assert_close(x, x_before, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_add_rmsnorm_matches_reference(variant: str, dtype: torch.dtype, cols: int) -> None:
    x = make((3, cols), dtype, seed=cols)
    r = make((3, cols), dtype, seed=cols + 7)
    w = make_weight(cols, dtype, seed=cols)
    expected_x, expected_r = reference_fused(x, r, w, EPS)
    rvv_ops.fused_add_rmsnorm(x, r, w, EPS)
    # The add is one fp32 addition rounded to dtype in both: bit-exact.
    torch.testing.assert_close(r, expected_r, rtol=0, atol=0)
    assert_matches(x, expected_x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_many_rows_run_in_parallel_chunks(variant: str, dtype: torch.dtype) -> None:
    # 97 rows x 1536 = 149k elements: at::parallel_for splits them (unevenly) over the
    # threads, of which there are several whatever the machine has.
    x = make((97, 1536), dtype, seed=1)
    r = make((97, 1536), dtype, seed=2)
    w = make_weight(1536, dtype, seed=3)
    expected_out = reference_rmsnorm(x, w, EPS)
    expected_x, expected_r = reference_fused(x, r, w, EPS)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        out = rvv_ops.rmsnorm(x, w, EPS)
        rvv_ops.fused_add_rmsnorm(x, r, w, EPS)
    finally:
        torch.set_num_threads(threads)
    assert_matches(out, expected_out)
    torch.testing.assert_close(r, expected_r, rtol=0, atol=0)
    assert_matches(x, expected_x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_zero_rows_and_eps(dtype: torch.dtype) -> None:
    x = torch.zeros(2, 40, dtype=dtype)
    x[1] = 0.5
    w = make_weight(40, dtype, seed=0)
    for eps in (1e-6, 0.25):
        out = rvv_ops.rmsnorm(x, w, eps)
        assert torch.equal(out[0], torch.zeros_like(out[0]))
        assert_matches(out, reference_rmsnorm(x, w, eps))


def test_fp16_large_values_accumulate_in_fp32() -> None:
    # Squares of 6e4 overflow fp16 (max 65504): only an fp32 sum of squares gets this right.
    x = torch.full((2, 300), 6.0e4, dtype=torch.float16)
    x[1, ::2] = -3.0e4
    w = torch.ones(300, dtype=torch.float16)
    out = rvv_ops.rmsnorm(x, w, EPS)
    assert torch.isfinite(out).all()
    assert_matches(out, reference_rmsnorm(x, w, EPS))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layouts(dtype: torch.dtype) -> None:
    base = make((4, 3, 70), dtype, seed=5)
    w = make_weight(64, dtype, seed=5)
    cases = {
        "3-D": base[..., :64].contiguous(),
        "strided rows": base[..., 3:67],
        "1-D": base[0, 0, :64],
        # leading dimensions that no single row stride walks: copied first
        "transposed leading dims": base.transpose(0, 1)[..., :64],
        # every row the same memory (stride 0): fine to read
        "expanded": base[0, 0, :64].expand(5, 64),
        "0 rows": base[:0, :, :64],
    }
    for name, x in cases.items():
        out = rvv_ops.rmsnorm(x, w, EPS)
        assert out.shape == x.shape and out.is_contiguous(), name
        assert_matches(out, reference_rmsnorm(x, w, EPS))


def test_sglang_call_style() -> None:
    # SGLang calls the op packets positionally: torch.ops.sgl_kernel.rmsnorm_cpu(x, w, eps).
    x = make((2, 32), torch.bfloat16, seed=3)
    r = make((2, 32), torch.bfloat16, seed=4)
    w = make_weight(32, torch.bfloat16, seed=3)
    assert_matches(torch.ops.sgl_kernel.rmsnorm_cpu(x, w, EPS), reference_rmsnorm(x, w, EPS))
    expected_x, expected_r = reference_fused(x, r, w, EPS)
    assert torch.ops.sgl_kernel.fused_add_rmsnorm_cpu(x, r, w, EPS) is None
    torch.testing.assert_close(r, expected_r, rtol=0, atol=0)
    assert_matches(x, expected_x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_writes_in_place(dtype: torch.dtype) -> None:
    x = make((5, 48), dtype, seed=8)
    r = make((5, 48), dtype, seed=9)
    w = make_weight(48, dtype, seed=8)
    expected_x, expected_r = reference_fused(x, r, w, EPS)
    x_ptr, r_ptr, x_version, r_version = x.data_ptr(), r.data_ptr(), x._version, r._version
    rvv_ops.fused_add_rmsnorm(x, r, w, EPS)
    assert (x.data_ptr(), r.data_ptr()) == (x_ptr, r_ptr)
    # The schema's (a!)/(b!) make autograd's version counters see the writes.
    assert x._version > x_version and r._version > r_version
    torch.testing.assert_close(r, expected_r, rtol=0, atol=0)
    assert_matches(x, expected_x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_strided_views_leave_gaps_untouched(dtype: torch.dtype) -> None:
    cols = 40
    # input and residual interleaved in one buffer, residual's rows also 3-D and strided
    big = make((6, 2 * cols + 9), dtype, seed=10)
    big_before = big.clone()
    x = big[:, 2 : 2 + cols]
    r = big[:, cols + 5 : 2 * cols + 5]
    w = make_weight(cols, dtype, seed=10)
    expected_x, expected_r = reference_fused(x, r, w, EPS)
    rvv_ops.fused_add_rmsnorm(x, r, w, EPS)
    torch.testing.assert_close(r, expected_r, rtol=0, atol=0)
    assert_matches(x, expected_x)
    untouched = torch.ones(big.shape, dtype=torch.bool)
    untouched[:, 2 : 2 + cols] = False
    untouched[:, cols + 5 : 2 * cols + 5] = False
    assert torch.equal(big[untouched], big_before[untouched])

    # 3-D views: every other row of a bigger tensor, with padding at the end of each row
    bx = make((4, 6, cols + 3), dtype, seed=11)
    br = make((4, 3, cols + 1), dtype, seed=12)
    bx_before, br_before = bx.clone(), br.clone()
    x3 = bx[:, ::2, :cols]
    r3 = br[..., 1:]
    assert x3.shape == r3.shape
    expected_x, expected_r = reference_fused(x3, r3, w, EPS)
    rvv_ops.fused_add_rmsnorm(x3, r3, w, EPS)
    torch.testing.assert_close(r3, expected_r, rtol=0, atol=0)
    assert_matches(x3, expected_x)
    x_gap = torch.ones(bx.shape, dtype=torch.bool)
    x_gap[:, ::2, :cols] = False
    r_gap = torch.ones(br.shape, dtype=torch.bool)
    r_gap[..., 1:] = False
    assert torch.equal(bx[x_gap], bx_before[x_gap])
    assert torch.equal(br[r_gap], br_before[r_gap])


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=str)
def test_fused_normalises_the_fp32_sum(dtype: torch.dtype) -> None:
    # sgl-kernel's csrc/cpu/norm.cpp normalises the fp32 sum x + residual and rounds once;
    # normalising the sum already rounded to the dtype differs from it by a 16-bit ulp in a
    # few elements of a 121 x 2048 batch (Llama-3.2-1B's hidden size).
    x = make((121, 2048), dtype, seed=21, scale=1.0)
    r = make((121, 2048), dtype, seed=22, scale=1.0)
    w = make_weight(2048, dtype, seed=21)
    expected_x, expected_r = reference_fused(x, r, w, EPS)
    rounded_first = reference_rmsnorm(expected_r, w, EPS)
    differ = expected_x != rounded_first
    assert differ.sum() >= 10  # the two semantics do differ here
    rvv_ops.fused_add_rmsnorm(x, r, w, EPS)
    torch.testing.assert_close(r, expected_r, rtol=0, atol=0)
    assert_matches(x, expected_x)
    # Where they differ (by 1 ulp, inside the tolerance), the kernel takes the fp32 sum's
    # value; only the fp32 summation order of sum(s^2) may flip a rare rounding.
    assert (x[differ] == expected_x[differ]).float().mean() > 0.9
