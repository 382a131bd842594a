"""fused_sigmoid_mul_cpu (in place ``input *= sigmoid(gate)``) and fused_linear_sigmoid_mul
(``sigmoid(mat1 @ w^T + bias) * post_mul_mat``): float64 references, SGLang's call styles,
layouts, empty and length-1 shapes, opcheck and bad inputs."""

from __future__ import annotations

import pytest
import rvv_ops
import torch
from bad_input import Bad, Cases
from torch import Tensor

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SIGMOID_MUL = torch.ops.sgl_kernel.fused_sigmoid_mul_cpu.default
LINEAR_SIGMOID_MUL = torch.ops.sgl_kernel.fused_linear_sigmoid_mul.default

# Relative tolerance against the float64 reference rounded to the dtype: fp32 a few ulps
# (exp, an add, a division); 16-bit one ulp of the dtype (the fp32 result may round to the
# neighbour), plus one subnormal step.
RTOL = {torch.float32: 4e-6, torch.bfloat16: 2**-7, torch.float16: 2**-10}
SUBNORMAL_STEP = {dt: torch.finfo(dt).smallest_normal * torch.finfo(dt).eps for dt in RTOL}


def randn(*shape: int, dtype: torch.dtype, seed: int, scale: float = 3.0) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype)


def assert_close_to(actual: Tensor, exact: Tensor, extra: Tensor | float = 0.0) -> None:
    """actual against the float64 `exact`, rounded to actual's dtype."""
    dt = actual.dtype
    want = exact.to(dt).double()
    allowed = RTOL[dt] * want.abs() + SUBNORMAL_STEP[dt] + extra
    err = (actual.double() - want).abs()
    bad = ~(err <= allowed)
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        raise AssertionError(
            f"{int(bad.sum())} of {err.numel()} differ; first at {i}: got "
            f"{actual.flatten()[i].item()!r}, want {want.flatten()[i].item()!r}"
        )


# ---------------------------------------------------------------- fused_sigmoid_mul_cpu


def sigmoid_mul_ref(x: Tensor, gate: Tensor) -> Tensor:
    return x.double() * torch.sigmoid(gate.double().reshape(x.shape))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sigmoid_mul_matches_reference(variant: str, dtype: torch.dtype, cols: int) -> None:
    x = randn(3, cols, dtype=dtype, seed=cols)
    gate = randn(3, cols, dtype=dtype, seed=cols + 1)
    exact = sigmoid_mul_ref(x, gate)
    out = rvv_ops.fused_sigmoid_mul(x, gate)
    assert out is x
    assert_close_to(x, exact)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sigmoid_mul_qwen3_5_gate_layout(dtype: torch.dtype) -> None:
    # Qwen3.5 splits q_gate [T, H, 2 * head_dim] into q and the gate: a 3-D gate whose heads
    # are strided; SGLang's wrapper passes the 2-D attention output and that gate.
    tokens, heads, head_dim = 5, 3, 40
    q_gate = randn(tokens, heads, 2 * head_dim, dtype=dtype, seed=1)
    gate = q_gate[..., head_dim:]
    assert not gate.is_contiguous()
    x = randn(tokens, heads * head_dim, dtype=dtype, seed=2)
    exact = sigmoid_mul_ref(x, gate)
    gate_before = gate.clone()
    assert SIGMOID_MUL(x, gate) is None
    assert_close_to(x, exact)
    torch.testing.assert_close(gate, gate_before, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sigmoid_mul_layouts(dtype: torch.dtype) -> None:
    base = randn(6, 50, dtype=dtype, seed=3)
    cases: dict[str, tuple[Tensor, Tensor]] = {
        "row slice of a wider input": (base[:, 5:37], randn(6, 32, dtype=dtype, seed=4)),
        "transposed gate (copied)": (
            randn(8, 6, dtype=dtype, seed=5),
            randn(6, 8, dtype=dtype, seed=6).t(),
        ),
        "one token": (randn(1, 9, dtype=dtype, seed=7), randn(1, 3, 3, dtype=dtype, seed=8)),
        "one element": (randn(1, 1, dtype=dtype, seed=9), randn(1, 1, dtype=dtype, seed=10)),
        "0 tokens": (randn(0, 16, dtype=dtype, seed=11), randn(0, 2, 8, dtype=dtype, seed=12)),
        "0 hidden": (randn(4, 0, dtype=dtype, seed=13), randn(4, 0, dtype=dtype, seed=14)),
        "many rows, threads": (
            randn(97, 515, dtype=dtype, seed=15),
            randn(97, 5, 103, dtype=dtype, seed=16),
        ),
        "gate a view of input's storage (read from a copy)": (base[:, :20], base[:, 30:50]),
    }
    for name, (x, gate) in cases.items():
        exact = sigmoid_mul_ref(x, gate)
        outside = base[:, 37:].clone()
        SIGMOID_MUL(x, gate)
        assert_close_to(x, exact)
        if x.data_ptr() == base[:, 5:37].data_ptr():
            torch.testing.assert_close(base[:, 37:], outside, rtol=0, atol=0, msg=name)


def test_sigmoid_mul_extremes() -> None:
    g = torch.tensor([[0.0, -0.0, 1e-30, 20.0, -20.0, 100.0, -100.0, float("inf")]])
    x = torch.full_like(g, 2.0)
    exact = sigmoid_mul_ref(x, g)
    SIGMOID_MUL(x, g)
    # -100: the exact 7e-44 comes out as a tiny value of the same sign (exp saturates)
    assert_close_to(x, exact, extra=1e-37)
    # NaN in input propagates. A NaN gate does not (the vector exp clamps its argument, as
    # for the activations): documented in the op's README entry.
    y = torch.tensor([[float("nan"), 1.0]])
    SIGMOID_MUL(y, torch.ones(1, 2))
    assert torch.isnan(y[0, 0]) and y[0, 1].item() == pytest.approx(1 / (1 + torch.e**-1))


def test_sigmoid_mul_sglang_wrapper_style() -> None:
    # qwen3_5.py's CPU wrapper: clone for inplace=False, call the op, return x. SGLang's
    # test compares against x * sigmoid(gate) computed in the dtype (bf16: rounded twice).
    x = randn(7, 64, dtype=torch.bfloat16, seed=20)
    gate = randn(7, 4, 16, dtype=torch.bfloat16, seed=21)
    ref = x * torch.sigmoid(gate.reshape(7, 64))
    out = x.clone()
    SIGMOID_MUL(out, gate)
    torch.testing.assert_close(out, ref, rtol=2 * 2**-7, atol=1e-2)


def test_sigmoid_mul_opcheck() -> None:
    for x, gate in (
        (randn(3, 16, dtype=torch.float32, seed=1), randn(3, 16, dtype=torch.float32, seed=2)),
        (randn(2, 12, dtype=torch.bfloat16, seed=3), randn(2, 3, 4, dtype=torch.bfloat16, seed=4)),
    ):
        torch.library.opcheck(SIGMOID_MUL, (x, gate))


def test_sigmoid_mul_no_autograd() -> None:
    x = torch.randn(2, 4, requires_grad=True)
    with pytest.raises(RuntimeError):
        SIGMOID_MUL(x, torch.randn(2, 4))


SM = Cases(
    SIGMOID_MUL,
    {"input": torch.zeros(3, 8), "gate": torch.zeros(3, 8)},
    words=("fused_sigmoid_mul_cpu",),
)
SIGMOID_MUL_BAD = {
    "int input": SM(
        TypeError, ("input", "torch.int32"), input=torch.zeros(3, 8, dtype=torch.int32)
    ),
    "gate dtype": SM(TypeError, ("gate", "torch.float16"), gate=torch.zeros(3, 8).half()),
    "3-D input": SM(ValueError, ("input", "3-d", "[tokens, hidden]"), input=torch.zeros(3, 2, 4)),
    "1-D gate": SM(ValueError, ("gate", "1-d"), gate=torch.zeros(8)),
    "gate tokens": SM(
        ValueError, ("gate", "4 tokens", "input.size(0) = 3"), gate=torch.zeros(4, 8)
    ),
    "gate width": SM(
        ValueError, ("gate", "9 elements", "input.size(1) = 8"), gate=torch.zeros(3, 9)
    ),
    "3-D gate width": SM(ValueError, ("gate", "6 elements"), gate=torch.zeros(3, 2, 3)),
    "input with overlapping rows": SM(
        ValueError, ("input", "overlap"), input=torch.zeros(1, 8).expand(3, 8), fake_too=False
    ),
    "input last dim strided": SM(
        ValueError, ("input", "stride"), input=torch.zeros(8, 3).t(), fake_too=False
    ),
}


@pytest.mark.parametrize("case", SIGMOID_MUL_BAD)
def test_sigmoid_mul_bad_input(case: str) -> None:
    bad: Bad = SIGMOID_MUL_BAD[case]
    bad.check()


# ---------------------------------------------------------------- fused_linear_sigmoid_mul


def linear_sigmoid_mul_ref(x: Tensor, w: Tensor, bias: Tensor | None, post: Tensor) -> Tensor:
    g = x.double() @ w.double().t()
    if bias is not None:
        g = g + bias.double()
    return torch.sigmoid(g) * post.double()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("packed", (True, False), ids=("packed", "plain"))
def test_linear_sigmoid_mul_matches_reference(
    variant: str, dtype: torch.dtype, packed: bool
) -> None:
    for m, k, n, with_bias in (
        (1, 1, 1, True),
        (3, 17, 5, False),
        (5, 257, 64, True),
        (33, 128, 96, True),
    ):
        x = randn(m, k, dtype=dtype, seed=k, scale=0.5)
        w = randn(1, k, dtype=dtype, seed=k + 1, scale=0.5)
        bias = randn(1, dtype=torch.float32, seed=k + 2) if with_bias else None
        post = randn(m, n, dtype=dtype, seed=k + 3)
        weight = rvv_ops.convert_weight_packed(w) if packed else w
        out = rvv_ops.fused_linear_sigmoid_mul(x, weight, bias, post, is_packed=packed)
        assert out.shape == (m, n) and out.dtype == dtype and out.is_contiguous()
        # The gate is an fp32 dot product of K terms: its error (relative to sum |x w|)
        # reaches the output through sigmoid' <= 1/4.
        dot_err = 1e-6 * k * (x.double().abs() @ w.double().abs().t()) * post.double().abs()
        assert_close_to(out, linear_sigmoid_mul_ref(x, w, bias, post), extra=dot_err)


def test_linear_sigmoid_mul_sglang_call() -> None:
    # qwen2_moe.py: fused_linear_sigmoid_mul(hidden_states, gate.weight (packed), gate.bias,
    # True, shared_output); SGLang's reference: sigmoid(linear(x)) * shared in the dtype.
    x = randn(6, 96, dtype=torch.bfloat16, seed=1, scale=0.3)
    w = randn(1, 96, dtype=torch.bfloat16, seed=2, scale=0.3)
    shared = randn(6, 96, dtype=torch.bfloat16, seed=3)
    out = LINEAR_SIGMOID_MUL(x, rvv_ops.convert_weight_packed(w), None, True, shared)
    ref = torch.sigmoid(torch.nn.functional.linear(x, w)) * shared
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)


def test_linear_sigmoid_mul_layouts_and_empty() -> None:
    x = randn(4, 40, dtype=torch.float32, seed=1)[:, 3:35]  # strided rows
    w = randn(1, 32, dtype=torch.float32, seed=2)
    post = randn(16, 4, dtype=torch.float32, seed=3).t()  # transposed (copied)
    out = LINEAR_SIGMOID_MUL(x, w, None, False, post)
    assert_close_to(out, linear_sigmoid_mul_ref(x, w, None, post), extra=1e-6)
    empty = LINEAR_SIGMOID_MUL(x[:0], w, None, False, post[:0])
    assert empty.shape == (0, 16)
    no_cols = LINEAR_SIGMOID_MUL(x, w, None, False, post[:, :0])
    assert no_cols.shape == (4, 0)
    many = randn(300, 64, dtype=torch.bfloat16, seed=4, scale=0.3)  # threads
    wm = randn(1, 64, dtype=torch.bfloat16, seed=5, scale=0.3)
    pm = randn(300, 128, dtype=torch.bfloat16, seed=6)
    out = LINEAR_SIGMOID_MUL(many, rvv_ops.convert_weight_packed(wm), None, True, pm)
    dot_err = 1e-6 * 64 * (many.double().abs() @ wm.double().abs().t()) * pm.double().abs()
    assert_close_to(out, linear_sigmoid_mul_ref(many, wm, None, pm), extra=dot_err)


def test_linear_sigmoid_mul_opcheck() -> None:
    x = randn(3, 16, dtype=torch.float32, seed=1)
    w = randn(1, 16, dtype=torch.float32, seed=2)
    post = randn(3, 8, dtype=torch.float32, seed=3)
    torch.library.opcheck(LINEAR_SIGMOID_MUL, (x, w, torch.ones(1), False, post))
    torch.library.opcheck(
        LINEAR_SIGMOID_MUL, (x, rvv_ops.convert_weight_packed(w), None, True, post)
    )


LSM = Cases(
    LINEAR_SIGMOID_MUL,
    {
        "mat1": torch.zeros(3, 8),
        "mat2": torch.zeros(1, 8),
        "bias": None,
        "is_vnni": False,
        "post_mul_mat": torch.zeros(3, 4),
    },
    words=("fused_linear_sigmoid_mul",),
)
LINEAR_SIGMOID_MUL_BAD = {
    "two output channels": LSM(ValueError, ("mat2", "N = 2", "expected 1"), mat2=torch.zeros(2, 8)),
    "K mismatch": LSM(ValueError, ("mat2", "K = 7"), mat2=torch.zeros(1, 7)),
    "post rows": LSM(
        ValueError, ("post_mul_mat", "5 rows", "mat1.size(0) = 3"), post_mul_mat=torch.zeros(5, 4)
    ),
    "post dtype": LSM(
        TypeError, ("post_mul_mat", "torch.bfloat16"), post_mul_mat=torch.zeros(3, 4).bfloat16()
    ),
    "1-D post": LSM(ValueError, ("post_mul_mat", "1-d"), post_mul_mat=torch.zeros(3)),
    "bias size": LSM(ValueError, ("bias", "N = 1"), bias=torch.zeros(2)),
    "3-D mat1": LSM(ValueError, ("mat1", "3-d"), mat1=torch.zeros(3, 1, 8)),
    "int mat1": LSM(TypeError, ("mat1", "torch.int64"), mat1=torch.zeros(3, 8, dtype=torch.long)),
    "not packed": LSM(
        ValueError,
        ("mat2", "packed-weight header"),
        is_vnni=True,
        fake_too=False,
        mat2=torch.zeros(1, 64),
    ),
}


@pytest.mark.parametrize("case", LINEAR_SIGMOID_MUL_BAD)
def test_linear_sigmoid_mul_bad_input(case: str) -> None:
    bad: Bad = LINEAR_SIGMOID_MUL_BAD[case]
    bad.check()
