"""What SGLang 0.5.23 (written for torch 2.14) touches at import and torch 2.6 lacks.

Debian 13's torch 2.6 is the only riscv64 torch. Each function fills one gap in the imported
module if the gap is there and returns what it did, or None when there was nothing to do (a
newer torch has everything). Standard library only until called.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any


class MissingDtype:
    """Stands for a torch dtype this torch does not have: equal only to itself, with the
    dtype's ``itemsize`` (SGLang computes buffer sizes from it at import time). A tensor
    cannot be created with it."""

    def __init__(self, name: str, itemsize: int, torch_version: str) -> None:
        self.name = name
        self.itemsize = itemsize
        self.is_floating_point = True
        self._torch_version = torch_version

    def __repr__(self) -> str:
        return (
            f"torch.{self.name} (missing from torch {self._torch_version}; sglang-rvv placeholder)"
        )


def dtype_placeholder(name: str, itemsize: int) -> Callable[[ModuleType], str | None]:
    """A patch adding ``torch.<name>`` as a :class:`MissingDtype` where torch lacks it."""

    def patch(torch: ModuleType) -> str | None:
        if hasattr(torch, name):
            return None
        setattr(torch, name, MissingDtype(name, itemsize, str(torch.__version__)))
        return f"torch {torch.__version__} has no torch.{name}"

    patch.__name__ = patch.__qualname__ = f"add_{name}"
    return patch


def current_accelerator(torch: ModuleType) -> str | None:
    """``torch.accelerator.current_accelerator(check_available=...)`` over torch 2.6's
    argument-less version, which also raises when there is no accelerator."""
    accelerator = getattr(torch, "accelerator", None)
    original = getattr(accelerator, "current_accelerator", None)
    if original is None or getattr(original, "_sglang_rvv", False):
        return None
    try:
        params = inspect.signature(original).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    if "check_available" in params:
        return None

    def current(check_available: bool = False) -> Any:
        try:
            device = original()
        except RuntimeError:  # torch 2.6: raised when the build or machine has no accelerator
            return None
        if device is None or not check_available:
            return device
        module = getattr(torch, device.type, None)
        available = getattr(module, "is_available", None)
        return device if available is not None and available() else None

    current._sglang_rvv = True  # type: ignore[attr-defined]
    current.__name__ = current.__qualname__ = "current_accelerator"
    current.__doc__ = "sglang-rvv: torch 2.14's signature over torch 2.6's current_accelerator()"
    accelerator.current_accelerator = current  # type: ignore[union-attr]
    return f"torch {torch.__version__}'s current_accelerator() takes no check_available"


def guard_or(name: str, default: bool) -> Callable[[ModuleType], str | None]:
    """A patch adding torch 2.7's ``symbolic_shapes.<name>`` (the boolean, or ``default`` when
    it depends on data the tracer does not have) where it is missing."""

    def patch(module: ModuleType) -> str | None:
        if hasattr(module, name):
            return None
        data_dependent: type[BaseException] = getattr(
            module, "GuardOnDataDependentSymNode", RuntimeError
        )

        def guard(a: Any) -> bool:
            try:
                return bool(a)
            except data_dependent:
                return default

        guard.__name__ = guard.__qualname__ = name
        guard.__doc__ = f"sglang-rvv: torch 2.7's {name} for torch 2.6"
        setattr(module, name, guard)
        return f"{module.__name__} has no {name}"

    patch.__name__ = patch.__qualname__ = f"add_{name}"
    return patch
