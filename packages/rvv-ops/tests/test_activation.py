"""silu_and_mul_cpu, gelu_and_mul_cpu, gelu_tanh_and_mul_cpu: torch fp32 references, SGLang's
own formulas as a second opinion, layouts, opcheck and bad inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import rvv_ops
import torch
import torch.nn.functional as F
from torch import Tensor

DTYPES = (torch.float32, torch.bfloat16, torch.float16)

OPS: dict[str, tuple[Any, Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]] = {
    # name -> (op, wrapper, activation in torch)
    "silu": (torch.ops.sgl_kernel.silu_and_mul_cpu.default, rvv_ops.silu_and_mul, F.silu),
    "gelu": (
        torch.ops.sgl_kernel.gelu_and_mul_cpu.default,
        rvv_ops.gelu_and_mul,
        lambda x: F.gelu(x, approximate="none"),
    ),
    "gelu_tanh": (
        torch.ops.sgl_kernel.gelu_tanh_and_mul_cpu.default,
        rvv_ops.gelu_tanh_and_mul,
        lambda x: F.gelu(x, approximate="tanh"),
    ),
}

# Relative tolerance per dtype against the float64 reference rounded to the dtype. fp32: the
# kernels' exp and erf are within ~2 ulp. 16-bit: the fp32 result may round to the
# neighbouring value, 1 ulp. On top of that an absolute error of 2e-7 * |gate * up|: for
# x < 0, erf-GELU's 1 + erf(x / sqrt 2) cancels (in torch's formula as in ours) and
# tanh-GELU's exp argument is a cubic whose fp32 rounding error grows with |x|^3. And one
# step of the dtype's subnormal spacing, where relative ulps get larger (fp16 below 6e-5).
RTOL: dict[torch.dtype, float] = {
    torch.float32: 2e-6,
    torch.bfloat16: 2**-7,
    torch.float16: 2**-10,
}
SUBNORMAL_STEP = {dt: torch.finfo(dt).smallest_normal * torch.finfo(dt).eps for dt in RTOL}


def reference(name: str, x: Tensor) -> Tensor:
    """act(x[..., :d]) * x[..., d:] in float64, rounded to x's dtype."""
    d = x.shape[-1] // 2
    x64 = x.double()
    return (OPS[name][2](x64[..., :d]) * x64[..., d:]).to(x.dtype)


def make(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 3.0).to(dtype)


def assert_matches(actual: Tensor, expected: Tensor, x: Tensor) -> None:
    d = x.shape[-1] // 2
    scale = (x[..., :d].double() * x[..., d:].double()).abs()
    dt = expected.dtype
    allowed = RTOL[dt] * expected.double().abs() + 2e-7 * scale + SUBNORMAL_STEP[dt]
    err = (actual.double() - expected.double()).abs()
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    bad = ~(err <= allowed)
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        raise AssertionError(
            f"{int(bad.sum())} of {err.numel()} elements differ; first at flat index {i}: "
            f"got {actual.flatten()[i].item()!r}, want {expected.flatten()[i].item()!r} "
            f"(allowed {allowed.flatten()[i].item():.3g})"
        )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_reference(variant: str, dtype: torch.dtype, cols: int) -> None:
    x = make((3, 2 * cols), dtype, seed=cols)
    x_before = x.clone()
    for name, (_, wrapper, _) in OPS.items():
        out = wrapper(x)
        assert out.shape == (3, cols) and out.dtype == dtype and out.is_contiguous(), name
        assert_matches(out, reference(name, x), x)
    torch.testing.assert_close(x, x_before, rtol=0, atol=0)


@pytest.mark.parametrize("name", OPS)
def test_sglang_formula_and_call_style(name: str) -> None:
    # SGLang's CPU layers call torch.ops.sgl_kernel.<name>_and_mul_cpu(x) and use the
    # result; its test helpers (test/cpu_test_utils.py) compute act(x[..., :d]) * x[..., d:]
    # in the input's dtype, rounding twice: a second opinion at twice the tolerance.
    x = make((4, 2, 2 * 160), torch.bfloat16, seed=3)
    out = OPS[name][0](x)
    d = x.shape[-1] // 2
    sglang_style = OPS[name][2](x[..., :d]) * x[..., d:]
    torch.testing.assert_close(out, sglang_style, rtol=2 * 2**-7, atol=1e-2)
    assert_matches(out, reference(name, x), x)


def test_extreme_values() -> None:
    x = torch.tensor([[0.0, -0.0, 1e-30, -1e-30, 20.0, -20.0, 100.0, -100.0] + [1.0] * 8])
    for name, (_, wrapper, _) in OPS.items():
        assert_matches(wrapper(x), reference(name, x), x)
    nan = torch.tensor([float("nan"), 1.0])
    for name, (_, wrapper, _) in OPS.items():
        assert torch.isnan(wrapper(nan)).all(), name


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layouts_and_threads(dtype: torch.dtype) -> None:
    base = make((4, 3, 90), dtype, seed=5)
    cases = {
        "1-D": base[0, 0, :64],
        "3-D": base[..., :64].contiguous(),
        "strided rows (a slice of a fused gate_up projection)": base[..., 10:74],
        "transposed leading dims": base.transpose(0, 1)[..., :64],
        "0 rows": base[:0, :, :64],
        "0 columns": base[..., :0],
        "many rows, threads": make((97, 2 * 400), dtype, seed=6),  # > 32K elements
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        for case, x in cases.items():
            for name, (_, wrapper, _) in OPS.items():
                out = wrapper(x)
                assert out.shape == (*x.shape[:-1], x.shape[-1] // 2), (case, name)
                assert out.is_contiguous(), (case, name)
                assert_matches(out, reference(name, x), x)
    finally:
        torch.set_num_threads(threads)


OPCHECK_INPUTS = {
    "bf16 2-D": lambda: make((4, 128), torch.bfloat16, seed=1),
    "fp16 3-D strided": lambda: make((2, 3, 80), torch.float16, seed=2)[..., 8:72],
    "fp32 0 rows": lambda: make((0, 64), torch.float32, seed=3),
}


@pytest.mark.parametrize("sample", OPCHECK_INPUTS)
@pytest.mark.parametrize("name", OPS)
def test_opcheck(name: str, sample: str) -> None:
    torch.library.opcheck(OPS[name][0], (OPCHECK_INPUTS[sample](),))


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_bad_input(name: str, device: str) -> None:
    op = OPS[name][0]
    with pytest.raises(TypeError, match=rf"{name}_and_mul_cpu: input has dtype torch\.float64"):
        op(torch.zeros(2, 8, dtype=torch.float64, device=device))
    with pytest.raises(TypeError, match=r"input has dtype torch\.int32"):
        op(torch.zeros(2, 8, dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match="odd last dimension 7; expected an even size"):
        op(torch.zeros(2, 7, device=device))
    with pytest.raises(ValueError, match="0-d tensor"):
        op(torch.zeros((), device=device))
    if device == "cpu":
        with pytest.raises(ValueError, match="last-dimension stride of 4"):
            op(torch.zeros(8, 4).t())


def test_no_autograd() -> None:
    x = make((2, 16), torch.float32, seed=1).requires_grad_()
    for name, (op, _, _) in OPS.items():
        with pytest.raises(RuntimeError, match=f"{name}_and_mul_cpu"):
            op(x).sum().backward()
