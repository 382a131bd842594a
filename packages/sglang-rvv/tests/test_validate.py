"""The request check the plugin adds (sglang_rvv.validate): a prompt token id outside the
model's vocabulary is refused with a ValueError (SGLang answers 400) instead of reaching the
scheduler's embedding lookup, whose IndexError ends SGLang 0.5.23's server. tools/soak.py
sends such requests to a running server (test_soak.py) and asserts the 400."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
from sglang_rvv import validate

MANAGER = SimpleNamespace(model_config=SimpleNamespace(vocab_size=384))


@pytest.mark.parametrize("ids", [[0], [5, 383, 17], []])
def test_ids_in_the_vocabulary_pass(ids: list[int]) -> None:
    assert validate.check_prompt_ids(MANAGER, None, ids) is None


@pytest.mark.parametrize(("ids", "bad"), [([5, 384], 384), ([-1, 5], -1), ([100000], 100000)])
def test_ids_outside_the_vocabulary_are_refused(ids: list[int], bad: int) -> None:
    with pytest.raises(ValueError, match=rf"token id {bad}, outside .* \[0, 384\)"):
        validate.check_prompt_ids(MANAGER, None, ids)


def test_sglang_runs_the_check_before_its_own_validation() -> None:
    """In a fresh interpreter (hooks patch SGLang's class once per process): after SGLang's
    load_plugins(), TokenizerManager._validate_one_request refuses an out-of-vocabulary id
    before SGLang's own code runs (the stub has nothing else SGLang's checks would read)."""
    code = """
        import json, types
        from sglang.srt.plugins import load_plugins
        load_plugins()
        from sglang.srt.managers.tokenizer_manager import TokenizerManager
        stub = types.SimpleNamespace(model_config=types.SimpleNamespace(vocab_size=384))
        messages = []
        for ids in ([5, 384], [-3]):
            try:
                TokenizerManager._validate_one_request(stub, None, ids)
                messages.append(None)
            except ValueError as exc:
                messages.append(str(exc))
        print(json.dumps(messages))
        """
    res = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    messages = json.loads(res.stdout.strip().splitlines()[-1])
    assert [m and "outside the model's vocabulary" in m for m in messages] == [True, True]
    assert "token id 384" in messages[0] and "token id -3" in messages[1]
