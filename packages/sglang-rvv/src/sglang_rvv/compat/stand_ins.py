"""Stand-in modules for packages with no riscv64 build: ``triton``, ``tvm_ffi``, ``xgrammar``.

SGLang imports them at module level to *define* GPU kernels, JIT bindings and grammar
classes; none of that runs on its CPU engine. A stand-in is a package whose every missing
attribute is a placeholder (a child stand-in module for lower-case names, an empty
subclassable class for capitalised ones), with the few real helpers SGLang calls at import
time (``triton.cdiv``, ``triton.next_power_of_2``, ``triton.Config``, ``tl.constexpr``). A
stand-in kernel that is *launched* raises :class:`StandInError` naming it.

Served by :mod:`sglang_rvv.compat` only when nothing installed provides the module.
Standard library only (imported at interpreter start).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

VERSION = "0.0.0+sglang-rvv-stand-in"


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
    model field typed with it (SGLang's OpenAI protocol puts ``xgrammar.StructuralTag`` in a
    union)."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.any_schema()


class _StandInLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        existing = sys.modules.get(spec.name)
        return existing if isinstance(existing, StandInModule) else _new(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        return None


LOADER = _StandInLoader()


class StandInModule(ModuleType):
    """A stand-in package (see the module docstring). Called as a decorator (``@triton.jit``,
    ``@triton.jit(...)``, ``@triton.autotune(...)``) it returns a kernel that refuses to run."""

    def __init__(self, name: str) -> None:
        super().__init__(name, f"sglang-rvv stand-in for {name} (not available on riscv64)")
        self.__path__: list[str] = []
        self.__package__ = name
        self.__spec__ = importlib.machinery.ModuleSpec(name, LOADER, is_package=True)
        self.__loader__ = LOADER

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
            value = _new(full)
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


# The real functions and classes a stand-in module starts with (the rest are placeholders).
_PRESET: dict[str, dict[str, Any]] = {
    "triton": {
        "__version__": VERSION,
        "cdiv": _cdiv,
        "next_power_of_2": _next_power_of_2,
        "Config": _Config,
    },
    "triton.language": {"constexpr": _Constexpr, "cdiv": _cdiv},
    "tvm_ffi": {"__version__": VERSION},
    "xgrammar": {"__version__": VERSION},
}


def _new(name: str) -> StandInModule:
    module = StandInModule(name)
    for attr, value in _PRESET.get(name, {}).items():
        setattr(module, attr, value)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, module)
    return module


def spec(fullname: str) -> importlib.machinery.ModuleSpec:
    """The spec that makes ``fullname`` (a stand-in package or any submodule) a stand-in."""
    return importlib.machinery.ModuleSpec(fullname, LOADER, is_package=True)
