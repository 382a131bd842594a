"""What SGLang 0.5.23 lacks on a riscv64 machine, supplied only where it is missing.

Activated by :mod:`sglang_rvv._bootstrap` (``sglang_rvv.pth``, at interpreter start, before
SGLang or torch is imported) when :func:`needed` is true: on a riscv64 CPU, or when
``SGLANG_RVV_RISCV64=1`` forces it (tests on x86 simulate riscv64 that way;
``SGLANG_RVV_RISCV64=0`` turns it off). Each piece exists for one reason:

- ``SGLANG_USE_CPU_ENGINE`` defaults to ``1``: a RISC-V machine has no GPU, and SGLang's
  ``is_cpu()`` and platform discovery both read that variable.
- ``is_cpu()`` (``sglang.srt.utils.common``) answers True on riscv64 when the CPU engine is
  selected: SGLang's own version accepts only x86-64 and arm64 and is read at import time by
  many modules, so it is patched right after its module runs.
- ``triton`` stand-in: triton has no riscv64 build and SGLang imports it unconditionally
  (kernel definitions at module level; none runs on the CPU engine). Every attribute is a
  placeholder; a stand-in kernel that is *launched* raises a RuntimeError naming it.
- ``tvm_ffi`` stand-in: apache-tvm-ffi has no riscv64 wheel (sdist only); SGLang imports it
  for its JIT kernels, which are CUDA-only.
- ``xgrammar`` stand-in: xgrammar publishes only an sdist (a C++ build over tvm-ffi) and
  SGLang's function-call parsers import it at module level (the detokenizer loads them).
  Grammar-constrained decoding through it is unavailable: serve with
  ``grammar_backend="none"`` (or ``llguidance``, which has riscv64 wheels). Its classes accept
  any value in pydantic models (SGLang's OpenAI protocol puts ``StructuralTag`` in a union).
- torch 2.6 (Debian 13's, the only riscv64 torch) lacks what SGLang 0.5.23 (built for torch
  2.14) touches at import: ``torch.accelerator.current_accelerator(check_available=...)``
  (2.6 has no such argument and raises when there is no accelerator) and the dtypes
  ``torch.float8_e8m0fnu`` and ``torch.float4_e2m1fn_x2`` (placeholders that equal no real
  dtype; creating a tensor with one fails).
- ``torch.fx.experimental.symbolic_shapes.guard_or_false`` / ``guard_or_true`` (torch 2.7):
  imported by SGLang's element-wise kernels module, which its MoE models (and through them
  the HTTP server's transcription endpoint) import. Same meaning: the boolean, or the
  default when it depends on data the tracer does not have.
- ``USE_LIBUV=0`` (unless set): Debian's torch 2.6 is built without libuv, while torch's
  TCP rendezvous (SGLang's scheduler initialises torch.distributed even for one process)
  asks for the libuv store by default and fails ("use_libuv was requested but PyTorch was
  build without libuv support").

The stand-ins are appended to the *end* of ``sys.meta_path``: an installed triton or tvm_ffi
is always found first. The torch and SGLang patches check for the gap before filling it.
This module must stay import-light: it is imported in every Python process.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import os
import platform
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

ENV = "SGLANG_RVV_RISCV64"
#: Modules supplied by :class:`StandInFinder` when nothing installed provides them.
STAND_INS = ("triton", "tvm_ffi", "xgrammar")
#: dtypes newer than torch 2.6 that SGLang 0.5.23 names at import time, with their sizes.
MISSING_DTYPES = {"float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1}

#: What :func:`install` activated in this process, with the reason (for logs and tests).
ACTIVE: dict[str, str] = {}


def needed() -> bool:
    """True on a riscv64 CPU (or when ``SGLANG_RVV_RISCV64`` is 1/true/yes/on, false when it
    is 0/false/no/off)."""
    value = os.environ.get(ENV, "auto").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return platform.machine().lower() in ("riscv64", "riscv")


# ----------------------------------------------------------------------------- stand-ins
class StandInError(RuntimeError):
    """A stand-in (no riscv64 build of the real module) was asked to do real work."""


class _StandInKernel:
    """What ``@triton.jit`` / ``@triton.autotune`` turn a function into: defined, never run."""

    def __init__(self, fn: Any, module: str) -> None:
        self.fn = fn
        self._module = module
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid: object) -> Callable[..., Any]:
        return self._launch

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._launch()

    def _launch(self, *args: Any, **kwargs: Any) -> Any:
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        raise StandInError(
            f"{self._module} kernel {name!r} was launched, but {self._module} is sglang-rvv's "
            "stand-in (no riscv64 build exists): this code path needs a GPU"
        )


class StandInClass:
    """Base of the stand-ins' placeholder classes: subclassable, and any value in a pydantic
    model field typed with it."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.any_schema()


class StandInModule(ModuleType):
    """A package whose every missing attribute is a placeholder: a child stand-in module for
    lower-case names, an (empty, subclassable) class for capitalised ones. Called as a
    decorator (``@triton.jit``, ``@triton.jit(...)``, ``@triton.autotune(...)``) it returns
    a :class:`_StandInKernel`."""

    def __init__(self, name: str) -> None:
        super().__init__(name, f"sglang-rvv stand-in for {name} (not available on riscv64)")
        self.__path__: list[str] = []
        self.__package__ = name
        self.__spec__ = importlib.machinery.ModuleSpec(name, StandInFinder.LOADER, is_package=True)
        self.__loader__ = StandInFinder.LOADER

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        full = f"{self.__name__}.{attr}"
        value: Any
        if full in sys.modules:
            value = sys.modules[full]
        elif attr[:1].isupper():
            value = type(attr, (StandInClass,), {"__module__": self.__name__})
        else:
            value = _new_stand_in(full)
        setattr(self, attr, value)
        return value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        root = self.__name__.split(".")[0]
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return _StandInKernel(args[0], root)
        return lambda fn: _StandInKernel(fn, root)

    def __bool__(self) -> bool:
        return False

    def __iter__(self) -> Any:
        return iter(())

    def __repr__(self) -> str:
        return f"<sglang-rvv stand-in {self.__name__!r}>"


def _cdiv(a: int, b: int) -> int:
    return -(a // -b)


def _next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


class _Config:
    """``triton.Config``: holds its arguments."""

    def __init__(self, kwargs: dict[str, Any] | None = None, **options: Any) -> None:
        self.kwargs = dict(kwargs or {})
        self.options = options


class _Constexpr:
    """``triton.language.constexpr``: an annotation and a value wrapper."""

    def __init__(self, value: object = None) -> None:
        self.value = value


_STAND_IN_VERSION = "0.0.0+sglang-rvv-stand-in"
# The real functions and classes a stand-in module starts with (the rest are placeholders).
_PRESET: dict[str, dict[str, Any]] = {
    "triton": {
        "__version__": _STAND_IN_VERSION,
        "cdiv": _cdiv,
        "next_power_of_2": _next_power_of_2,
        "Config": _Config,
    },
    "triton.language": {"constexpr": _Constexpr, "cdiv": _cdiv},
    "tvm_ffi": {"__version__": _STAND_IN_VERSION},
    "xgrammar": {"__version__": _STAND_IN_VERSION},
}


def _new_stand_in(name: str) -> StandInModule:
    module = StandInModule(name)
    for attr, value in _PRESET.get(name, {}).items():
        setattr(module, attr, value)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, module)
    return module


class _StandInLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        existing = sys.modules.get(spec.name)
        return existing if isinstance(existing, StandInModule) else _new_stand_in(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        return None


class StandInFinder(importlib.abc.MetaPathFinder):
    """Answers for :data:`STAND_INS` (and their submodules) when no other finder does: it is
    appended to the end of ``sys.meta_path``."""

    LOADER = _StandInLoader()

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        root = fullname.partition(".")[0]
        if root not in STAND_INS:
            return None
        ACTIVE.setdefault(f"{root} stand-in", f"no {root} installed (no riscv64 build exists)")
        return importlib.machinery.ModuleSpec(fullname, self.LOADER, is_package=True)


# ----------------------------------------------------------------------------- torch 2.6
class MissingDtype:
    """Stands for a torch dtype this torch does not have: equal only to itself, with the
    dtype's ``itemsize`` (SGLang computes buffer sizes from it at import time)."""

    def __init__(self, name: str, itemsize: int, torch_version: str) -> None:
        self.name = name
        self.itemsize = itemsize
        self.is_floating_point = True
        self._torch_version = torch_version

    def __repr__(self) -> str:
        return (
            f"torch.{self.name} (missing from torch {self._torch_version}; sglang-rvv placeholder)"
        )


def patch_torch(torch: ModuleType) -> list[str]:
    """Fills torch 2.6's gaps in the imported ``torch``; returns what it patched."""
    patched: list[str] = []
    for name, itemsize in MISSING_DTYPES.items():
        if not hasattr(torch, name):
            setattr(torch, name, MissingDtype(name, itemsize, str(torch.__version__)))
            patched.append(f"torch.{name}")
    accelerator = getattr(torch, "accelerator", None)
    current = getattr(accelerator, "current_accelerator", None)
    if current is not None and not getattr(current, "_sglang_rvv", False):
        try:
            params = inspect.signature(current).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        if "check_available" not in params:
            accelerator.current_accelerator = _current_accelerator(torch, current)  # type: ignore[union-attr]
            patched.append("torch.accelerator.current_accelerator")
    for what in patched:
        ACTIVE[what] = f"missing from torch {torch.__version__}"
    return patched


def _current_accelerator(torch: ModuleType, original: Callable[[], Any]) -> Callable[..., Any]:
    def current_accelerator(check_available: bool = False) -> Any:
        try:
            device = original()
        except RuntimeError:  # torch 2.6: raised when the build or machine has no accelerator
            return None
        if device is None or not check_available:
            return device
        module = getattr(torch, device.type, None)
        available = getattr(module, "is_available", None)
        return device if available is not None and available() else None

    current_accelerator._sglang_rvv = True  # type: ignore[attr-defined]
    current_accelerator.__doc__ = (
        "sglang-rvv: torch 2.14's signature over torch 2.6's current_accelerator()"
    )
    return current_accelerator


SYMBOLIC_SHAPES = "torch.fx.experimental.symbolic_shapes"


def patch_symbolic_shapes(module: ModuleType) -> list[str]:
    """Adds torch 2.7's ``guard_or_false`` / ``guard_or_true`` where missing."""
    data_dependent: type[BaseException] = getattr(
        module, "GuardOnDataDependentSymNode", RuntimeError
    )
    patched: list[str] = []
    for name, default in (("guard_or_false", False), ("guard_or_true", True)):
        if hasattr(module, name):
            continue

        def guard_or(a: Any, _default: bool = default) -> bool:
            try:
                return bool(a)
            except data_dependent:
                return _default

        guard_or.__name__ = guard_or.__qualname__ = name
        guard_or.__doc__ = f"sglang-rvv: torch 2.7's {name} for torch 2.6"
        setattr(module, name, guard_or)
        patched.append(f"{SYMBOLIC_SHAPES}.{name}")
        ACTIVE[f"torch {name}"] = f"missing from torch {_torch_version()}"
    return patched


def _torch_version() -> str:
    return str(getattr(sys.modules.get("torch"), "__version__", "?"))


# ----------------------------------------------------------------------------- SGLang
IS_CPU_MODULE = "sglang.srt.utils.common"


def patch_is_cpu(module: ModuleType) -> bool:
    """Makes ``is_cpu()`` in SGLang's ``module`` true on riscv64 with the CPU engine."""
    original = getattr(module, "is_cpu", None)
    if original is None or getattr(original, "_sglang_rvv", False):
        return original is not None

    @functools.lru_cache(maxsize=1)
    def is_cpu() -> bool:
        return os.getenv("SGLANG_USE_CPU_ENGINE", "0") == "1" or bool(original())

    is_cpu._sglang_rvv = True  # type: ignore[attr-defined]
    is_cpu.__doc__ = "sglang-rvv: SGLang's is_cpu(), true on riscv64 with SGLANG_USE_CPU_ENGINE=1"
    setattr(module, "is_cpu", is_cpu)  # noqa: B010
    ACTIVE["sglang is_cpu()"] = "SGLang 0.5.23 recognises only x86-64 and arm64 CPUs"
    return True


def install() -> None:
    """Activates everything above (idempotent)."""
    from sglang_rvv import _bootstrap

    if "SGLANG_USE_CPU_ENGINE" not in os.environ:
        os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
        ACTIVE["SGLANG_USE_CPU_ENGINE=1"] = "no GPU on riscv64: SGLang's CPU engine"
    if "USE_LIBUV" not in os.environ:
        os.environ["USE_LIBUV"] = "0"
        ACTIVE["USE_LIBUV=0"] = "Debian's riscv64 torch has no libuv TCPStore"
    if not any(isinstance(f, StandInFinder) for f in sys.meta_path):
        sys.meta_path.append(StandInFinder())
    _bootstrap.after_import("torch", patch_torch)
    _bootstrap.after_import(SYMBOLIC_SHAPES, patch_symbolic_shapes)
    _bootstrap.after_import(IS_CPU_MODULE, patch_is_cpu)
