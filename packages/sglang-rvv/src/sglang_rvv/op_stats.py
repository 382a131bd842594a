"""What a served model reached, counted per process (``SGLANG_RVV_OP_STATS=1``).

For the op-coverage report (``nox -s model-coverage``): with the variable set (and
``SGLANG_RVV_LAYER_STATS=DIR``, where the counts are written, see :mod:`sglang_rvv.layers`)
every SGLang process counts

- ``op <name>``: calls of each ``torch.ops.sgl_kernel.<name>`` that rvv-ops or sglang-rvv
  defines, whoever makes them (SGLang's model code, SGLang's CPU layers, our hooks);
- ``layer <Class>``: calls of each SGLang layer class built on ``BaseFusedOp`` (RMSNorm,
  SiluAndMul, RotaryEmbedding, ...), whatever then runs them;
- ``hook <Class>.<method> rvv`` / ``... torch``: each of our routing hooks' calls, by whether
  it ran the RVV ops or handed the call to SGLang's own (torch) method, which is what it does
  for a case the ops do not cover exactly.

The counting wrappers cost a Python call per op and layer call; without the variable nothing is
wrapped.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

ENV = "SGLANG_RVV_OP_STATS"
_ops_wrapped = False
_layers_wrapped = False


def enabled() -> bool:
    return os.environ.get(ENV, "0").strip().lower() in ("1", "true", "yes", "on")


def _count(key: str) -> None:
    from sglang_rvv import layers

    layers.CALLS[key] += 1
    layers.maybe_flush_stats()


class _CountedOp:
    """Stands for ``torch.ops.sgl_kernel.<name>``: counts each call, forwards everything
    else (``.default``, ``._schema``, ...) to the op."""

    def __init__(self, name: str, op: Any) -> None:
        self._name = name
        self._key = f"op {name}"
        self._op = op

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _count(self._key)
        return self._op(*args, **kwargs)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._op, attr)

    def __repr__(self) -> str:
        return f"<counted torch.ops.sgl_kernel.{self._name}>"


def trace_ops(names: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Replaces ``torch.ops.sgl_kernel.<name>`` for each defined op (or ``names``) with a
    counting stand-in, once per process, if :func:`enabled`; returns the names wrapped. Call
    it before SGLang's model modules bind ops at import."""
    global _ops_wrapped
    if _ops_wrapped or not enabled():
        return ()
    if names is None:
        import rvv_ops

        from sglang_rvv.compat import collectives

        defined = [n.split("::", 1)[1] for n in rvv_ops._library.defined_ops()]
        names = tuple(n for n in defined if n) + tuple(collectives.SCHEMAS)
    ns = torch.ops.sgl_kernel
    wrapped = []
    for name in names:
        op = getattr(ns, name, None)
        if op is None or isinstance(op, _CountedOp):
            continue
        setattr(ns, name, _CountedOp(name, op))
        wrapped.append(name)
    _ops_wrapped = True
    return tuple(wrapped)


def trace_layers() -> bool:
    """Counts the calls of every ``BaseFusedOp`` layer by class (once per process, if
    :func:`enabled`); returns whether it is counting."""
    global _layers_wrapped
    if _layers_wrapped:
        return True
    if not enabled():
        return False
    from sglang.kernels.fused_op import BaseFusedOp

    forward = BaseFusedOp.forward

    def counted_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        _count(f"layer {type(self).__name__}")
        return forward(self, *args, **kwargs)

    BaseFusedOp.forward = counted_forward
    _layers_wrapped = True
    return True


def counted_hook(target: str, hook: Callable[..., Any]) -> Callable[..., Any]:
    """``hook`` (an AROUND hook on ``target``), counting each call as ``hook <Class>.<method>
    rvv`` or ``... torch`` (it called SGLang's original); ``hook`` itself if not
    :func:`enabled`."""
    if not enabled():
        return hook
    where = ".".join(target.rsplit(".", 2)[-2:])

    def counted(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        fell_back = False

        def tracked(*a: Any, **k: Any) -> Any:
            nonlocal fell_back
            fell_back = True
            return original(*a, **k)

        result = hook(tracked, *args, **kwargs)
        _count(f"hook {where} {'torch' if fell_back else 'rvv'}")
        return result

    counted.__name__ = counted.__qualname__ = getattr(hook, "__name__", "hook")
    counted.__doc__ = hook.__doc__
    return counted
