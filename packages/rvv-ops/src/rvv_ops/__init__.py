"""rvv-ops: SGLang's ``sgl_kernel`` CPU ops on rvv-kernels, as PyTorch custom ops.

Importing this package loads ``rvv_ops/_C.so``, which registers

- ``torch.ops.sgl_kernel.rmsnorm_cpu(input, weight, eps) -> Tensor``
- ``torch.ops.sgl_kernel.fused_add_rmsnorm_cpu(input, residual, weight, eps) -> ()``
  (``input`` and ``residual`` updated in place)

with SGLang's names and arguments, so SGLang's CPU code paths find them, plus fake
kernels for torch.compile. The kernels are rvv-kernels': RVV 1.0 (with or without Zvfh)
on riscv64, chosen at run time for the CPU, portable C++ elsewhere.

Import fails with ImportError, before anything is registered, if the library was built
for another machine or torch minor version, or if another library (e.g. a CUDA build of
sgl-kernel) already defines one of these ops; and after loading if ``RVVK_VARIANT``
names a variant that cannot be used here.
"""

from __future__ import annotations

from rvv_ops._library import BuildInfo, CpuInfo, build_info, load_library, set_variant
from rvv_ops.ops import fused_add_rmsnorm, register_fakes, rmsnorm

__all__ = [
    "BuildInfo",
    "CpuInfo",
    "__version__",
    "build_info",
    "fused_add_rmsnorm",
    "rmsnorm",
    "set_variant",
]
__version__ = "0.1.0"

load_library()
register_fakes()
