"""Registration of sglang-rvv's hooks with SGLang's plugin ``HookRegistry``.

Each module that hooks SGLang (:mod:`sglang_rvv.kv_int8`, :mod:`sglang_rvv.tp`,
:mod:`sglang_rvv.validate`) lists its hooks as ``(target, hook, HookType name)`` and registers
them through :func:`register_once`, from ``plugin.register`` in every SGLang process. Only the
standard library is imported at load (SGLang is imported when the hooks are registered).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

Hook = tuple[str, Callable[..., Any], str]
"""``(target, hook, HookType name)``: the dotted SGLang function or method, our hook, and
``"BEFORE"`` / ``"AFTER"`` / ``"AROUND"``."""

_registered: set[str] = set()


def register_once(owner: str, hooks: Iterable[Hook]) -> bool:
    """Registers ``hooks`` with SGLang unless ``owner`` (the registering module's name)
    registered its hooks in this process already; returns whether it registered them."""
    if owner in _registered:
        return False
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for target, hook, kind in hooks:
        HookRegistry.register(target, hook, HookType[kind])
    _registered.add(owner)
    return True
