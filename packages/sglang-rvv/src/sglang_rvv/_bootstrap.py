"""Run at interpreter start by ``sglang_rvv.pth``: makes ``import sgl_kernel`` work in CPU mode.

SGLang's CPU code imports the ``sgl_kernel`` Python module at module load (for example
``from sgl_kernel import assign_req_to_token_pool_cpu`` in ``srt/mem_cache/allocation.py``),
before any SGLang plugin runs, and no CPU build of that module exists on PyPI or for riscv64.
This hook appends a finder to the *end* of ``sys.meta_path`` that answers for ``sgl_kernel``
only when no installed distribution provides it, with :mod:`sglang_rvv.shims.sgl_kernel`.
A real ``sgl_kernel`` (sgl-kernel's own CPU build, say) is always found first and wins.

Set ``SGLANG_RVV_SHIMS=0`` to turn the hook off. It must stay import-light: it runs in every
Python process of the environment.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
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


def install() -> None:
    """Appends the finder once (idempotent)."""
    if not any(isinstance(f, SglKernelShimFinder) for f in sys.meta_path):
        sys.meta_path.append(SglKernelShimFinder())


if enabled():
    install()
