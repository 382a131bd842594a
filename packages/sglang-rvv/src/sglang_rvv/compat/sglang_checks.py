"""The two SGLang functions sglang-rvv wraps, both in ``sglang.srt.utils.common``.

Each is wrapped right after that module's code runs (many SGLang modules call them at import
time), keeps SGLang's own answer where it is right, and is marked ``_sglang_rvv``.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import warnings
from types import ModuleType

COMMON = "sglang.srt.utils.common"
AMX_CHECK = "_is_intel_amx_backend_available"


def sgl_kernel_is_stand_in() -> bool:
    """True when ``sgl_kernel`` is sglang-rvv's stand-in (it sets ``RVV_SHIM``)."""
    module = sys.modules.get("sgl_kernel")
    if module is None:
        try:
            module = importlib.import_module("sgl_kernel")
        except Exception:
            return False
    return bool(getattr(module, "RVV_SHIM", False))


def wrap_amx_check(module: ModuleType) -> str | None:
    """``_is_intel_amx_backend_available()`` answers False while ``sgl_kernel`` is the
    stand-in and SGLang's own answer otherwise. A RuntimeWarning if this SGLang has no such
    function (then it may take rvv-ops' ops for sgl-kernel's AMX build)."""
    original = getattr(module, AMX_CHECK, None)
    if original is None:
        warnings.warn(
            f"sglang-rvv: {COMMON}.{AMX_CHECK} not found: this SGLang may take rvv-ops' "
            "sgl_kernel ops for sgl-kernel's AMX build",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    if getattr(original, "_sglang_rvv", False):
        return None

    def check() -> bool:
        if sgl_kernel_is_stand_in():
            return False
        return bool(original())

    check._sglang_rvv = True  # type: ignore[attr-defined]
    check.__name__ = check.__qualname__ = AMX_CHECK
    check.__doc__ = "sglang-rvv: no AMX backend while sgl_kernel is sglang-rvv's stand-in."
    setattr(module, AMX_CHECK, check)
    return "False while sgl_kernel is sglang-rvv's stand-in"


def wrap_is_cpu(module: ModuleType) -> str | None:
    """``is_cpu()`` also true with ``SGLANG_USE_CPU_ENGINE=1`` on a CPU SGLang does not know
    (its own accepts only x86-64 and arm64)."""
    original = getattr(module, "is_cpu", None)
    if original is None or getattr(original, "_sglang_rvv", False):
        return None

    @functools.lru_cache(maxsize=1)
    def is_cpu() -> bool:
        return os.getenv("SGLANG_USE_CPU_ENGINE", "0") == "1" or bool(original())

    is_cpu._sglang_rvv = True  # type: ignore[attr-defined]
    is_cpu.__doc__ = "sglang-rvv: SGLang's is_cpu(), true on riscv64 with SGLANG_USE_CPU_ENGINE=1"
    setattr(module, "is_cpu", is_cpu)  # noqa: B010
    return "true with SGLANG_USE_CPU_ENGINE=1"
