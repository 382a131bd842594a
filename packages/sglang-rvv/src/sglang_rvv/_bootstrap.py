"""Run at interpreter start by ``sglang_rvv.pth``: makes ``import sgl_kernel`` work in CPU mode.

SGLang's CPU code imports the ``sgl_kernel`` Python module at module load (for example
``from sgl_kernel import assign_req_to_token_pool_cpu`` in ``srt/mem_cache/allocation.py``),
before any SGLang plugin runs, and no CPU build of that module exists on PyPI or for riscv64.
This hook appends a finder to the *end* of ``sys.meta_path`` that answers for ``sgl_kernel``
only when no installed distribution provides it, with :mod:`sglang_rvv.shims.sgl_kernel`.
A real ``sgl_kernel`` (sgl-kernel's own CPU build, say) is always found first and wins.

rvv-ops defines ``torch.ops.sgl_kernel.convert_weight_packed``, and SGLang takes that op (on a
CPU with Intel AMX tiles) as proof that sgl-kernel's whole CPU build is installed
(``_is_intel_amx_backend_available`` in ``sglang/srt/utils/common.py``), after which it calls
dozens of sgl-kernel ops rvv-ops does not have. So a second, post-import hook wraps that one
check right after SGLang's module runs: it answers False while ``sgl_kernel`` is this stand-in
and defers to SGLang's own check otherwise. It matters only on x86 hosts with AMX (like the
machines this project is tested on); a RISC-V CPU has no AMX tiles.

On a riscv64 machine :mod:`sglang_rvv.riscv64` adds what SGLang lacks there (a triton
stand-in, torch 2.6 gaps, SGLang's CPU engine on riscv64) through the same two mechanisms: a
finder at the end of ``sys.meta_path`` and :func:`after_import` patches.

Set ``SGLANG_RVV_SHIMS=0`` to turn all hooks off. This module must stay import-light: it runs
in every Python process of the environment.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

SHIMMED = "sgl_kernel"
_SHIM_FILE = Path(__file__).with_name("shims") / "sgl_kernel.py"


def enabled() -> bool:
    """False when ``SGLANG_RVV_SHIMS`` is ``0``, ``false``, ``no`` or ``off``."""
    value = os.environ.get("SGLANG_RVV_SHIMS", "1").strip().lower()
    return value not in ("0", "false", "no", "off")


class SglKernelShimFinder(importlib.abc.MetaPathFinder):
    """Provides ``sgl_kernel`` from sglang-rvv when nothing earlier on ``sys.meta_path`` does."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != SHIMMED or not enabled():
            return None
        return importlib.util.spec_from_file_location(SHIMMED, _SHIM_FILE)


AMX_CHECK_MODULE = "sglang.srt.utils.common"
AMX_CHECK = "_is_intel_amx_backend_available"


def _shim_in_use() -> bool:
    module = sys.modules.get(SHIMMED)
    if module is None:
        try:
            module = importlib.import_module(SHIMMED)
        except Exception:
            return False
    return bool(getattr(module, "RVV_SHIM", False))


def patch_amx_check(module: ModuleType) -> bool:
    """Wraps SGLang's ``_is_intel_amx_backend_available`` in ``module``; False if absent."""
    original = getattr(module, AMX_CHECK, None)
    if original is None or getattr(original, "_sglang_rvv", False):
        return original is not None

    def check() -> bool:
        if _shim_in_use():
            return False
        return bool(original())

    check._sglang_rvv = True  # type: ignore[attr-defined]
    check.__doc__ = "sglang-rvv: no AMX backend while sgl_kernel is sglang-rvv's stand-in."
    setattr(module, AMX_CHECK, check)
    return True


def _warn_amx_unpatched(module: ModuleType) -> bool:
    if patch_amx_check(module):
        return True
    import warnings

    warnings.warn(
        f"sglang-rvv: {AMX_CHECK_MODULE}.{AMX_CHECK} not found: this SGLang may take "
        "rvv-ops' sgl_kernel ops for sgl-kernel's AMX build",
        RuntimeWarning,
        stacklevel=2,
    )
    return False


# module name -> functions run on the module right after its code ran (before the importer
# sees it). Registered with after_import(); the AMX check is always there.
_AFTER_IMPORT: dict[str, list[Callable[[ModuleType], object]]] = {
    AMX_CHECK_MODULE: [_warn_amx_unpatched]
}


def after_import(module_name: str, patch: Callable[[ModuleType], object]) -> None:
    """Runs ``patch(module)`` right after ``module_name`` is first imported (or now, if it
    already was)."""
    patches = _AFTER_IMPORT.setdefault(module_name, [])
    if patch not in patches:
        patches.append(patch)
    if module_name in sys.modules:
        patch(sys.modules[module_name])


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then the module's :func:`after_import` patches."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        for patch in list(_AFTER_IMPORT.get(module.__name__, ())):
            patch(module)

    def __getattr__(self, name: str) -> object:  # get_source, is_package, ... for tracebacks
        return getattr(self._inner, name)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds the modules :func:`after_import` names with the other finders and wraps their
    loaders so that the patches run after the module's code."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _AFTER_IMPORT or not enabled():
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, PostImportFinder):
                continue
            find = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = (
                find(fullname, path, target) if find is not None else None
            )
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Installs the finders once (idempotent), and on riscv64 :mod:`sglang_rvv.riscv64`'s."""
    if not any(isinstance(f, SglKernelShimFinder) for f in sys.meta_path):
        sys.meta_path.append(SglKernelShimFinder())
    if not any(isinstance(f, PostImportFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, PostImportFinder())
    from sglang_rvv import riscv64

    if riscv64.needed():
        riscv64.install()


if enabled():
    install()
