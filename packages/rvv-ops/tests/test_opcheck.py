"""torch.library.opcheck on sample inputs of every dtype and layout.

opcheck runs the op for real and through FakeTensor / AOT autograd with dynamic shapes,
checking the schema (what is mutated, what aliases), the Meta kernels' shapes, dtypes
and strides against the real ones, and the autograd registration.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import rvv_ops  # noqa: F401  (registers the ops)
import torch
from torch import Tensor

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _randn(*shape: int, dtype: torch.dtype) -> Tensor:
    return torch.randn(shape).to(dtype)


# name -> builder of (input, residual, weight) for a dtype
SAMPLES: dict[str, Callable[[torch.dtype], tuple[Tensor, Tensor, Tensor]]] = {
    "2-D": lambda dt: (_randn(4, 64, dtype=dt), _randn(4, 64, dtype=dt), _randn(64, dtype=dt)),
    "strided rows": lambda dt: (
        _randn(5, 80, dtype=dt)[:, 8:72],
        _randn(5, 100, dtype=dt)[:, :64],
        _randn(64, dtype=dt),
    ),
    "3-D": lambda dt: (
        _randn(2, 3, 48, dtype=dt),
        _randn(2, 3, 48, dtype=dt),
        _randn(48, dtype=dt),
    ),
    "3-D strided": lambda dt: (
        _randn(2, 6, 40, dtype=dt)[:, ::2, :32],
        _randn(2, 3, 33, dtype=dt)[..., 1:],
        _randn(32, dtype=dt),
    ),
    "one row": lambda dt: (_randn(1, 96, dtype=dt), _randn(1, 96, dtype=dt), _randn(96, dtype=dt)),
    "1-D": lambda dt: (_randn(96, dtype=dt), _randn(96, dtype=dt), _randn(96, dtype=dt)),
    "0 rows": lambda dt: (_randn(0, 64, dtype=dt), _randn(0, 64, dtype=dt), _randn(64, dtype=dt)),
}


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_rmsnorm(dtype: torch.dtype, sample: str) -> None:
    x, _, w = SAMPLES[sample](dtype)
    torch.library.opcheck(torch.ops.sgl_kernel.rmsnorm_cpu.default, (x, w, 1e-6))


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_fused_add_rmsnorm(dtype: torch.dtype, sample: str) -> None:
    x, r, w = SAMPLES[sample](dtype)
    torch.library.opcheck(torch.ops.sgl_kernel.fused_add_rmsnorm_cpu.default, (x, r, w, 1e-6))


def test_opcheck_rmsnorm_copied_layout() -> None:
    # Leading dimensions without a single row stride: the out-of-place op copies them.
    x = torch.randn(3, 4, 64).transpose(0, 1)
    torch.library.opcheck(torch.ops.sgl_kernel.rmsnorm_cpu.default, (x, torch.randn(64), 1e-6))
