"""sglang-rvv's one import hook: stand-in modules and post-import patches.

:class:`CompatFinder` sits first on ``sys.meta_path`` and answers only for the module names
registered with it; every other import passes through untouched. For a registered name it
asks the other finders first, so an installed module always wins, then:

- a *stand-in* name (:meth:`CompatFinder.stand_in`) nobody else finds gets sglang-rvv's
  module (``sgl_kernel``, and on riscv64 ``triton`` / ``tvm_ffi`` / ``xgrammar``);
- a *patched* name (:meth:`CompatFinder.after_import`) keeps its own spec, whose loader is
  wrapped so that the patches run right after the module's code, before the importer sees it.

Only the standard library is imported here: the hook is installed in every Python process.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType

SpecFactory = Callable[[str], importlib.machinery.ModuleSpec | None]
Patch = Callable[[ModuleType], object]


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then the module's patches."""

    def __init__(self, inner: importlib.abc.Loader, patches: list[Patch]) -> None:
        self._inner = inner
        self._patches = patches

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        for patch in list(self._patches):
            patch(module)

    def __getattr__(self, name: str) -> object:  # get_source, is_package, ... for tracebacks
        return getattr(self._inner, name)


class CompatFinder(importlib.abc.MetaPathFinder):
    """Stand-ins for missing modules and patches run after a module's code (see the module
    docstring). One instance, :data:`FINDER`, is installed."""

    def __init__(self) -> None:
        self._stand_ins: dict[str, SpecFactory] = {}
        self._patches: dict[str, list[Patch]] = {}
        self._busy = threading.local()

    def stand_in(self, root: str, factory: SpecFactory) -> None:
        """Serves ``factory(fullname)`` for ``root`` (and, if the factory answers, its
        submodules) when no other finder finds the module."""
        self._stand_ins[root] = factory

    def after_import(self, module_name: str, patch: Patch, *, first: bool = False) -> None:
        """Runs ``patch(module)`` right after ``module_name``'s code (now, if it is already
        imported). ``first`` puts it before the patches registered so far."""
        patches = self._patches.setdefault(module_name, [])
        if patch in patches:
            return
        if first:
            patches.insert(0, patch)
        else:
            patches.append(patch)
        if module_name in sys.modules:
            patch(sys.modules[module_name])

    def stand_in_spec(self, fullname: str) -> importlib.machinery.ModuleSpec | None:
        """The stand-in's spec for ``fullname``, or None if it has none."""
        factory = self._stand_ins.get(fullname.partition(".")[0])
        return None if factory is None else factory(fullname)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        patches = self._patches.get(fullname)
        if patches is None and fullname.partition(".")[0] not in self._stand_ins:
            return None
        busy: set[str] = self._busy.__dict__.setdefault("names", set())
        if fullname in busy:  # asked again by a finder we are consulting
            return None
        busy.add(fullname)
        try:
            spec = _find_elsewhere(self, fullname, path, target)
        finally:
            busy.discard(fullname)
        if spec is None:
            spec = self.stand_in_spec(fullname)
        if spec is not None and patches and hasattr(spec.loader, "exec_module"):
            spec.loader = _PatchingLoader(spec.loader, patches)  # type: ignore[arg-type]
        return spec


def _find_elsewhere(
    me: CompatFinder, fullname: str, path: Sequence[str] | None, target: ModuleType | None
) -> importlib.machinery.ModuleSpec | None:
    for finder in sys.meta_path:
        if finder is me:
            continue
        find = getattr(finder, "find_spec", None)
        spec: importlib.machinery.ModuleSpec | None = (
            find(fullname, path, target) if find is not None else None
        )
        if spec is not None:
            return spec
    return None


FINDER = CompatFinder()
"""The instance :func:`install` puts first on ``sys.meta_path``."""


def install() -> None:
    """Puts :data:`FINDER` first on ``sys.meta_path`` (idempotent)."""
    if FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)
