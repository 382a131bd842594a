"""The model matrix (``nox -s model-coverage``; marker ``model_matrix``): every architecture
of :mod:`model_matrix` served by SGLang 0.5.23 in fp32 with ``--attention-backend rvv`` and
layer routing on, against ``torch_native`` without routing: the greedy tokens of the 8
prompts must be identical.

An architecture SGLang cannot run on a CPU at all (its ``torch_native`` server fails) must
fail with the error recorded in ``UNSUPPORTED`` (so the entry is revisited when that changes);
one whose ``torch_native`` server runs must also run through RVV.

With ``RVV_MODEL_COVERAGE=FILE`` each test adds its entry (tokens agreement, the sgl_kernel
ops and layers the rvv server reached and where they ran, counted by
:mod:`sglang_rvv.op_stats`, or the failure) to the JSON file that
``tools/model_coverage.py`` renders into ``docs/models.md``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import model_matrix
import pytest
from sglang_rvv import layers
from sglang_rvv.serve import server_command, stop_group, wait_healthy

pytestmark = pytest.mark.model_matrix

MAX_TOKENS = 16
CHUNK = 64
READY_TIMEOUT = 900.0

UNSUPPORTED: dict[str, str] = {
    # SGLang's RMSNormGated runs a Triton (CUDA) kernel on a CPU without sgl-kernel's AMX build
    "qwen3.5": r"Found no NVIDIA driver",
    # SGLang's torch_native extend attention for MLA (query / value head sizes differ)
    "deepseek-v2-lite": r"Expected size for first two dimensions of batch2 tensor",
}
"""Matrix entries SGLang 0.5.23 cannot serve on a CPU with its own torch_native backend:
name -> a regular expression matching the error that server fails with. The rvv server (with
layer routing) is then compared with transformers' greedy generation on the same weights."""


@dataclass
class Served:
    ok: bool
    tokens: list[list[str]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    margins: list[list[float]] = field(default_factory=list)
    error: str = ""
    stats: dict[str, int] = field(default_factory=dict)
    ready_s: float = 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _error(log: str) -> str:
    """The exception SGLang's log ends with (the last ``SomethingError: ...`` line)."""
    lines = [ln.strip() for ln in log.splitlines()]
    found = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b(:.*)?$", ln)]
    if found:
        return found[-1][:400]
    return "\n".join(lines[-5:])[-400:]


BIND_ERROR = "error while attempting to bind on address"
"""uvicorn's message when the port _free_port picked was taken meanwhile (the server then
hangs in shutdown instead of exiting): the start is retried on another port."""


def _start(
    cmd: list[str], env: dict[str, str], log_path: Path, url: str
) -> subprocess.Popen[bytes]:
    """Starts the server; returns it once healthy, raises RuntimeError / TimeoutError (the
    process is stopped first), or ``ConnectionRefusedError`` on a port clash."""
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            wait_healthy(url, proc, 10.0)
            return proc
        except TimeoutError:
            if BIND_ERROR in log_path.read_text(errors="replace"):
                stop_group(proc)
                raise ConnectionRefusedError(BIND_ERROR) from None
            if time.monotonic() > deadline:
                stop_group(proc)
                raise
        except RuntimeError:
            stop_group(proc)
            raise


def serve(
    model: Path, backend: str, *, routed: bool, tmp: Path, extra: tuple[str, ...] = ()
) -> Served:
    """Starts a fp32 server, generates greedily for the matrix prompts, stops it."""
    import openai

    env = dict(os.environ)
    env["SGLANG_USE_CPU_ENGINE"] = "1"
    env["SGLANG_RVV_LAYERS"] = "1" if routed else "0"
    env["SGLANG_RVV_OP_STATS"] = "1"
    name = f"{model.name}-{backend}-{int(routed)}"
    stats_dir = tmp / f"stats-{name}"
    env["SGLANG_RVV_LAYER_STATS"] = str(stats_dir)
    log_path = tmp / f"server-{name}.log"
    res = Served(ok=False)
    started = time.monotonic()
    for _ in range(3):
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = server_command(
            [
                "--attention-backend", backend,
                "--port", str(port),
                "--chunked-prefill-size", str(CHUNK),
                "--random-seed", "0",
                "--dtype", "float32",
                *extra,
            ],
            model,
        )  # fmt: skip
        try:
            proc = _start(cmd, env, log_path, url)
            break
        except ConnectionRefusedError:
            print(f"[matrix] {name}: port {port} was taken, retrying", flush=True)
            continue
        except (RuntimeError, TimeoutError) as exc:
            res.error = _error(log_path.read_text(errors="replace")) or str(exc)
            return res
    else:
        res.error = f"no free port after 3 attempts ({BIND_ERROR})"
        return res
    try:
        res.ready_s = time.monotonic() - started
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=600)
        for prompt in model_matrix.prompts():
            resp = client.completions.create(
                model="default", prompt=prompt, max_tokens=MAX_TOKENS, temperature=0,
                logprobs=2,
            )  # fmt: skip
            lp = resp.choices[0].logprobs
            res.tokens.append(list(lp.tokens))
            res.texts.append(resp.choices[0].text)
            margins = []
            for top in lp.top_logprobs:
                vals = sorted(top.values(), reverse=True)
                margins.append(vals[0] - vals[1] if len(vals) > 1 else float("inf"))
            res.margins.append(margins)
        time.sleep(1.2)  # the next call's count flushes everything counted so far
        client.completions.create(model="default", prompt="RISC-V", max_tokens=1)
        time.sleep(0.5)
        res.ok = True
    except Exception as exc:  # the server died mid-way: report its error
        res.error = _error(log_path.read_text(errors="replace")) or repr(exc)
    finally:
        stop_group(proc)
    if stats_dir.is_dir():
        res.stats = dict(layers.read_stats(stats_dir))
    return res


def _transformers_greedy(model: Path) -> list[str]:
    """transformers' greedy completions (fp32, MAX_TOKENS new tokens) of the matrix prompts,
    decoded as SGLang's API returns them (special tokens skipped)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    hf = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for prompt in model_matrix.prompts():
            ids = tok(prompt, return_tensors="pt")["input_ids"]
            gen = hf.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False)
            out.append(tok.decode(gen[0, ids.shape[1] :], skip_special_tokens=True))
    return out


def _record(entry: dict[str, Any]) -> None:
    path = model_matrix.coverage_path()
    if path is None:
        return
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[entry["arch"]] = entry
    path.write_text(json.dumps(data, indent=1, sort_keys=True))


@pytest.mark.parametrize("name", [a.name for a in model_matrix.MATRIX])
def test_rvv_serves_the_arch_as_torch_native_does(name: str, tmp_path: Path) -> None:
    arch = model_matrix.BY_NAME[name]
    model = model_matrix.ensure(name)
    ref = serve(model, "torch_native", routed=False, tmp=tmp_path, extra=arch.server_args)
    entry: dict[str, Any] = {
        "arch": name, "family": arch.family, "features": arch.features,
        "torch_native": {"ok": ref.ok, "error": ref.error, "stats": ref.stats},
    }  # fmt: skip
    if not ref.ok:
        entry["status"] = "sglang-cannot-serve"
        expected = UNSUPPORTED.get(name)
        if expected is None or not re.search(expected, ref.error):
            _record(entry)
            pytest.fail(f"{name}: torch_native failed: {ref.error}")
        rvv = serve(model, "rvv", routed=True, tmp=tmp_path, extra=arch.server_args)
        entry["rvv"] = {"ok": rvv.ok, "error": rvv.error, "stats": rvv.stats}
        if rvv.ok:
            hf = _transformers_greedy(model)
            same = [a == b for a, b in zip(rvv.texts, hf, strict=True)]
            entry["identical_to_transformers"] = sum(same)
            entry["prompts"] = len(same)
            entry["status"] = "rvv-only"
            entry["differences"] = [
                f"prompt {i}: {a!r} vs transformers' {b!r}"
                for i, (a, b) in enumerate(zip(rvv.texts, hf, strict=True))
                if a != b
            ]
        _record(entry)
        if rvv.ok:
            assert not entry["differences"], f"{name}: " + "; ".join(entry["differences"])
        return
    rvv = serve(model, "rvv", routed=True, tmp=tmp_path, extra=arch.server_args)
    entry["rvv"] = {"ok": rvv.ok, "error": rvv.error, "stats": rvv.stats}
    if not rvv.ok:
        entry["status"] = "rvv-failed"
        _record(entry)
        pytest.fail(f"{name}: the rvv server failed where torch_native runs: {rvv.error}")
    same = [a == b for a, b in zip(rvv.tokens, ref.tokens, strict=True)]
    entry["identical"] = sum(same)
    entry["prompts"] = len(same)
    diffs = []
    for i, (a, b) in enumerate(zip(rvv.tokens, ref.tokens, strict=True)):
        if a != b:
            k = next(j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
            diffs.append(f"prompt {i} token {k}: {a[k]!r} vs {b[k]!r} "
                         f"(torch_native's top-2 margin {ref.margins[i][k]:.2e})")  # fmt: skip
    entry["differences"] = diffs
    entry["status"] = "identical" if not diffs else "tokens-differ"
    _record(entry)
    assert not diffs, f"{name}: " + "; ".join(diffs)
