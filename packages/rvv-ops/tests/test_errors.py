"""Every bad input raises the documented exception type, naming the argument and its value.

Each case runs on CPU tensors (the C++ checks) and, where the check does not depend on
memory layout, on meta tensors too (the Meta kernels, used by torch.compile tracing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import rvv_ops  # noqa: F401  (registers the ops)
import torch
from torch import Tensor

RMS = torch.ops.sgl_kernel.rmsnorm_cpu.default
FUSED = torch.ops.sgl_kernel.fused_add_rmsnorm_cpu.default


@dataclass(frozen=True)
class Bad:
    op: Any
    args: Callable[[str], tuple[Any, ...]]  # device -> arguments
    exc: type[Exception]
    words: tuple[str, ...]  # in the message: the argument's name and its bad value
    fake_too: bool = True  # the Meta kernel checks it as well


def t(*shape: int, dtype: torch.dtype = torch.float32, device: str = "cpu") -> Tensor:
    return torch.randn(shape, device=device).to(dtype)


def rms(x: Callable[[str], Tensor], w: Callable[[str], Tensor], eps: float = 1e-6) -> Any:
    return lambda d: (x(d), w(d), eps)


def fused(
    x: Callable[[str], Tensor],
    r: Callable[[str], Tensor],
    w: Callable[[str], Tensor],
    eps: float = 1e-6,
) -> Any:
    return lambda d: (x(d), r(d), w(d), eps)


def x48(d: str) -> Tensor:
    return t(4, 8, device=d)


def w8(d: str) -> Tensor:
    return t(8, device=d)


def _shared(d: str, make: Callable[[Tensor], tuple[Tensor, Tensor, Tensor]]) -> tuple[Any, ...]:
    return (*make(t(4, 24, device=d)), 1e-6)


F64, I32, BF16, F16 = torch.float64, torch.int32, torch.bfloat16, torch.float16

CASES: dict[str, Bad] = {
    # rmsnorm_cpu
    "rms input float64": Bad(
        RMS,
        rms(lambda d: t(4, 8, dtype=F64, device=d), lambda d: t(8, dtype=F64, device=d)),
        TypeError,
        ("input", "torch.float64"),
    ),
    "rms input int32": Bad(
        RMS,
        rms(lambda d: t(4, 8, dtype=I32, device=d), lambda d: t(8, dtype=I32, device=d)),
        TypeError,
        ("input", "torch.int32"),
    ),
    "rms weight dtype": Bad(
        RMS,
        rms(x48, lambda d: t(8, dtype=BF16, device=d)),
        TypeError,
        ("weight", "torch.bfloat16", "torch.float32"),
    ),
    "rms input 0-d": Bad(
        RMS, rms(lambda d: t(device=d), lambda d: t(1, device=d)), ValueError, ("input", "0-d")
    ),
    "rms weight 2-D": Bad(
        RMS, rms(x48, lambda d: t(1, 8, device=d)), ValueError, ("weight", "2-d")
    ),
    "rms weight length": Bad(
        RMS, rms(x48, lambda d: t(7, device=d)), ValueError, ("weight", "7", "8")
    ),
    "rms eps negative": Bad(RMS, rms(x48, w8, -1e-6), ValueError, ("eps", "-1e-06")),
    "rms eps nan": Bad(RMS, rms(x48, w8, float("nan")), ValueError, ("eps", "nan")),
    "rms eps inf": Bad(RMS, rms(x48, w8, float("inf")), ValueError, ("eps", "inf")),
    "rms eps beyond fp32": Bad(RMS, rms(x48, w8, 1e39), ValueError, ("eps", "1e+39")),
    "rms weight strided": Bad(
        RMS,
        rms(x48, lambda d: t(16, device=d)[::2]),
        ValueError,
        ("weight", "not contiguous"),
        fake_too=False,
    ),
    "rms input last dim strided": Bad(
        RMS,
        rms(lambda d: t(8, 4, device=d).t(), w8),
        ValueError,
        ("input", "stride of 4"),
        fake_too=False,
    ),
    # fused_add_rmsnorm_cpu
    "fused input float64": Bad(
        FUSED,
        fused(
            lambda d: t(4, 8, dtype=F64, device=d),
            lambda d: t(4, 8, dtype=F64, device=d),
            lambda d: t(8, dtype=F64, device=d),
        ),
        TypeError,
        ("input", "torch.float64"),
    ),
    "fused residual dtype": Bad(
        FUSED,
        fused(x48, lambda d: t(4, 8, dtype=F16, device=d), w8),
        TypeError,
        ("residual", "torch.float16", "torch.float32"),
    ),
    "fused weight dtype": Bad(
        FUSED,
        fused(x48, x48, lambda d: t(8, dtype=BF16, device=d)),
        TypeError,
        ("weight", "torch.bfloat16"),
    ),
    "fused residual shape": Bad(
        FUSED, fused(x48, lambda d: t(4, 9, device=d), w8), ValueError, ("residual", "[4, 9]")
    ),
    "fused input 0-d": Bad(
        FUSED,
        fused(lambda d: t(device=d), lambda d: t(device=d), lambda d: t(1, device=d)),
        ValueError,
        ("input", "0-d"),
    ),
    "fused weight 2-D": Bad(
        FUSED, fused(x48, x48, lambda d: t(2, 8, device=d)), ValueError, ("weight", "2-d")
    ),
    "fused weight length": Bad(
        FUSED, fused(x48, x48, lambda d: t(9, device=d)), ValueError, ("weight", "9", "8")
    ),
    "fused eps negative": Bad(FUSED, fused(x48, x48, w8, -0.5), ValueError, ("eps", "-0.5")),
    "fused eps nan": Bad(FUSED, fused(x48, x48, w8, float("nan")), ValueError, ("eps", "nan")),
    "fused weight strided": Bad(
        FUSED,
        fused(x48, x48, lambda d: t(8, 2, device=d)[:, 0]),
        ValueError,
        ("weight", "not contiguous"),
        fake_too=False,
    ),
    "fused input last dim strided": Bad(
        FUSED,
        fused(lambda d: t(8, 4, device=d).t(), lambda d: t(4, 8, device=d), w8),
        ValueError,
        ("input", "stride of 4"),
        fake_too=False,
    ),
    "fused residual last dim strided": Bad(
        FUSED,
        fused(x48, lambda d: t(8, 4, device=d).t(), w8),
        ValueError,
        ("residual", "stride of 4"),
        fake_too=False,
    ),
    "fused input no single row stride": Bad(
        FUSED,
        fused(lambda d: t(3, 4, 8, device=d).transpose(0, 1), lambda d: t(4, 3, 8, device=d), w8),
        ValueError,
        ("input", "shape [4, 3, 8], strides [8, 32, 1]", "one stride"),
        fake_too=False,
    ),
    "fused residual no single row stride": Bad(
        FUSED,
        fused(lambda d: t(4, 3, 8, device=d), lambda d: t(3, 4, 8, device=d).transpose(0, 1), w8),
        ValueError,
        ("residual", "one stride"),
        fake_too=False,
    ),
    "fused input rows overlap": Bad(
        FUSED,
        fused(lambda d: t(8, device=d).expand(4, 8), x48, w8),
        ValueError,
        ("input", "strides [0, 1]", "overlap"),
        fake_too=False,
    ),
    "fused residual rows overlap": Bad(
        FUSED,
        fused(x48, lambda d: t(1, 8, device=d).expand(4, 8), w8),
        ValueError,
        ("residual", "overlap"),
        fake_too=False,
    ),
    "fused input is residual": Bad(
        FUSED,
        lambda d: (lambda x: (x, x, t(8, device=d), 1e-6))(t(4, 8, device=d)),
        ValueError,
        ("input", "residual", "share memory"),
        fake_too=False,
    ),
    "fused input and residual partly overlap": Bad(
        FUSED,
        lambda d: _shared(d, lambda b: (b[:, :8], b[:, 4:12], t(8, device=d))),
        ValueError,
        ("input", "residual", "share memory"),
        fake_too=False,
    ),
    "fused weight inside input": Bad(
        FUSED,
        lambda d: _shared(d, lambda b: (b[:, :8], t(4, 8, device=d), b[2, 3:11])),
        ValueError,
        ("input", "weight", "share memory"),
        fake_too=False,
    ),
    "fused weight inside residual": Bad(
        FUSED,
        lambda d: _shared(d, lambda b: (t(4, 8, device=d), b[:, 8:16], b[0, 12:20])),
        ValueError,
        ("residual", "weight", "share memory"),
        fake_too=False,
    ),
}


def _check_raises(case: Bad, device: str) -> None:
    with pytest.raises(case.exc) as info:
        case.op(*case.args(device))
    message = str(info.value)
    for word in case.words:
        assert word in message, f"{word!r} not in {message!r}"


@pytest.mark.parametrize("name", CASES)
def test_bad_input_cpu(name: str) -> None:
    _check_raises(CASES[name], "cpu")


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.fake_too])
def test_bad_input_fake(name: str) -> None:
    _check_raises(CASES[name], "meta")


def test_mixed_devices() -> None:
    # A meta tensor among the arguments routes the call to the Meta kernel.
    with pytest.raises(ValueError, match="weight is on device cpu; expected input's device meta"):
        RMS(t(4, 8, device="meta"), t(8), 1e-6)
    with pytest.raises(ValueError, match="residual is on device cpu"):
        FUSED(t(4, 8, device="meta"), t(4, 8), t(8, device="meta"), 1e-6)


def test_cpu_kernel_refuses_other_devices() -> None:
    # Reaching the CPU kernel with a non-CPU tensor takes an explicit redispatch.
    cpu = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    with pytest.raises(ValueError, match="rmsnorm_cpu: input is on device meta; expected a CPU"):
        RMS.redispatch(cpu, t(4, 8, device="meta"), t(8), 1e-6)
    with pytest.raises(ValueError, match="fused_add_rmsnorm_cpu: residual is on device meta"):
        FUSED.redispatch(cpu, t(4, 8), t(4, 8, device="meta"), t(8), 1e-6)


def test_interleaved_views_are_not_overlap() -> None:
    # Rows of input and residual alternate within one buffer without sharing an element.
    big = t(4, 16)
    FUSED(big[:, :8], big[:, 8:], t(8), 1e-6)
    base = t(8, 8)
    FUSED(base[::2], base[1::2], t(8), 1e-6)


def test_no_autograd() -> None:
    x = t(4, 8).requires_grad_()
    out = RMS(x, t(8), 1e-6)
    with pytest.raises(RuntimeError, match="rmsnorm_cpu"):
        out.sum().backward()
    with pytest.raises(RuntimeError, match="has no derivative"):
        FUSED(t(4, 8).requires_grad_(), t(4, 8), t(8), 1e-6)
    with torch.no_grad():
        FUSED(t(4, 8), t(4, 8), t(8).requires_grad_(), 1e-6)
