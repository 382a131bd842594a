"""SGLang general plugin (entry point ``sglang.srt.plugins: rvv``).

SGLang calls :func:`register` in every one of its processes (the launcher before it parses
arguments, the engine, each scheduler, the detokenizer). It adds ``rvv`` to the
``--attention-backend`` choices and registers the backend's factory in SGLang's
``ATTENTION_BACKENDS``. Both are SGLang's documented extension points; nothing of SGLang is
patched.

If SGLang itself (or another plugin) already registered a backend named ``rvv``, that one is
kept and a warning says so: set ``SGLANG_RVV_REPLACE_BACKEND=1`` to use sglang-rvv's anyway.

It registers ``--kv-cache-dtype int8`` (:mod:`sglang_rvv.kv_int8`: an INT8 KV pool with
per-token scales, read by the ``rvv`` backend) and routes SGLang's CPU model layers to the RVV
ops when ``SGLANG_RVV_LAYERS`` asks for it (:mod:`sglang_rvv.layers`), and makes
``--tp-size N`` start on CPU hosts (:mod:`sglang_rvv.tp`). It adds a check SGLang lacks: a
prompt's token ids must be in the model's vocabulary (:mod:`sglang_rvv.validate`; an id outside
it ends SGLang 0.5.23's scheduler), and makes Qwen2-MoE start on a CPU (its shared-expert gate
is a triton kernel in SGLang; :mod:`sglang_rvv.moe`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

logger = logging.getLogger("sglang_rvv")

BACKEND_NAME = "rvv"


def _ours(factory: Any) -> bool:
    return getattr(factory, "__module__", "").startswith("sglang_rvv")


def create_rvv_backend(model_runner: Any) -> Any:
    """Factory SGLang calls with its ModelRunner (heavy imports happen here, not at load)."""
    from sglang_rvv.backend import RVVAttnBackend

    return RVVAttnBackend(model_runner)


def register() -> None:
    """Registers the ``rvv`` attention backend and its CLI choice (idempotent)."""
    from sglang.srt.arg_groups.choices import ATTENTION_BACKEND_CHOICES
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    existing = ATTENTION_BACKENDS.get(BACKEND_NAME)
    replace = os.environ.get("SGLANG_RVV_REPLACE_BACKEND", "0") == "1"
    if existing is not None and not _ours(existing) and not replace:
        logger.warning(
            "sglang-rvv: an attention backend named %r is already registered by %s; keeping it "
            "(set SGLANG_RVV_REPLACE_BACKEND=1 to use sglang-rvv's instead)",
            BACKEND_NAME,
            getattr(existing, "__module__", "?"),
        )
    else:
        ATTENTION_BACKENDS[BACKEND_NAME] = create_rvv_backend
    if BACKEND_NAME not in ATTENTION_BACKEND_CHOICES:
        ATTENTION_BACKEND_CHOICES.append(BACKEND_NAME)

    from sglang_rvv import kv_int8, layers, moe, op_stats, tp, validate

    op_stats.trace_ops()
    op_stats.trace_layers()
    kv_int8.register()
    moe.register_cpu_fixes()
    tp.register()
    validate.register()
    layers.maybe_enable()
