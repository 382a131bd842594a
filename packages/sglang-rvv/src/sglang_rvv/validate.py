"""Request checks SGLang 0.5.23 lacks, added by the plugin through SGLang's ``HookRegistry``.

A prompt given as token ids is not range-checked by SGLang 0.5.23: ``/v1/completions`` with
``"prompt": [5, 100000]`` (or a negative id) reaches the model's embedding lookup in the
scheduler, whose ``IndexError`` ends the scheduler and with it the whole server (every other
request in flight is lost). :func:`check_prompt_ids`, a BEFORE hook on
``TokenizerManager._validate_one_request`` (where SGLang checks a request's length against
the context, in the HTTP server's process), refuses such a request with a ``ValueError``,
which SGLang answers with a 400 naming the id and the valid range, like its own checks.
"""

from __future__ import annotations

from typing import Any

from sglang_rvv import hooks

TARGET = "sglang.srt.managers.tokenizer_manager.TokenizerManager._validate_one_request"


def check_prompt_ids(manager: Any, obj: Any, input_ids: Any, *args: Any, **kwargs: Any) -> None:
    """Raises ``ValueError`` if a prompt token id is outside ``[0, vocab_size)`` of the served
    model (``manager.model_config.vocab_size``); returns None (arguments unchanged)."""
    if input_ids is None or len(input_ids) == 0:
        return
    vocab = int(manager.model_config.vocab_size)
    low, high = min(input_ids), max(input_ids)
    if low < 0 or high >= vocab:
        bad = low if low < 0 else high
        raise ValueError(
            f"The input contains token id {bad}, outside the model's vocabulary: valid token "
            f"ids are in [0, {vocab})."
        )


HOOKS: tuple[hooks.Hook, ...] = ((TARGET, check_prompt_ids, "BEFORE"),)
"""(target, hook, HookType name) registered by :func:`register`."""


def register() -> None:
    """Registers :data:`HOOKS` with SGLang (idempotent; every SGLang process)."""
    hooks.register_once(__name__, HOOKS)
