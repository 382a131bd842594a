"""Greedy generation with SGLang's offline Engine, once per attention backend, in one process.

    python sglang_engine.py --model DIR --backend rvv --backend torch_native --out FILE.json
    python sglang_engine.py --model DIR --backend rvv --backend rvv:int8 --score --out ...

Runs inside the emulated Debian 13 riscv64 Python (tools/sglang_riscv64.py, ``nox -s
riscv-sglang``) and on x86-64 in the sglang-rvv tests' riscv64 simulation. For each backend it
starts ``sglang.Engine(model_path=DIR, device="cpu", attention_backend=B, ...)``, generates
``--max-new-tokens`` tokens greedily (ignore_eos) for each prompt, shuts the engine down, and
records the token ids, the text, the wall time and the op-call counts sglang-rvv's processes
wrote (``SGLANG_RVV_LAYER_STATS``: routed layer ops and ``attention <op>:<implementation>``).
``--dtype`` sets the engines' dtype (a quantised demo checkpoint and its dequantised twin:
tools/sglang_riscv64.py ``--quant``). ``B:KV`` runs backend ``B`` with ``kv_cache_dtype=KV``
(``rvv:int8``); ``B@tpN`` runs it with
``tp_size=N`` in fp32 (``rvv@tp1``, ``rvv@tp2``: the tensor-parallel comparison; the op counts
are then also recorded per process, one scheduler per rank). ``--score`` also scores
the demo corpus's first passages teacher-forced (prompt log-probabilities from position 0,
top-1 token per position) and records the KV pool's bytes as the start-up line reports them.
Writes everything to ``--out`` as JSON; exits 0 when every engine ran.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROMPTS = ("The vector unit", "A RISC-V board runs")
DTYPE = ""
"""``--dtype`` for every engine (default: SGLang's ``auto``; the tp engines use fp32)."""


def _progress(msg: str) -> None:
    print(f"[sglang_engine {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _per_process(directory: Path) -> list[dict[str, int]]:
    return [json.loads(file.read_text()) for file in sorted(directory.glob("*.json"))]


def _read_stats(directory: Path) -> dict[str, int]:
    total: dict[str, int] = {}
    for counts in _per_process(directory):
        for k, v in counts.items():
            total[k] = total.get(k, 0) + int(v)
    return total


def passages() -> list[str]:
    """The demo corpus's passages as tests/test_e2e.py scores them (over 1,000 tokens)."""
    from sglang_rvv import demo

    lines = [ln for ln in demo.corpus().splitlines() if ln.strip()]
    half = len(lines) // 2
    # the two halves as trained, and every line in reverse order (transitions never seen)
    return [" ".join(lines[:half]), " ".join(lines[half:]), " ".join(reversed(lines))]


def score(engine: Any, texts: list[str]) -> list[dict[str, Any]]:
    """Teacher-forced: each text's token ids, their log-probabilities and the top-1 token
    at every position after the first."""
    out = []
    for text in texts:
        o = engine.generate(
            text,
            {"temperature": 0.0, "max_new_tokens": 1},
            return_logprob=True,
            logprob_start_len=0,
            top_logprobs_num=1,
        )
        meta = o["meta_info"]
        given = meta["input_token_logprobs"][1:]
        tops = meta["input_top_logprobs"][1:]
        out.append(
            {
                "ids": [int(t[1]) for t in given],
                "logprobs": [float(t[0]) for t in given],
                "top1": [int(t[0][1]) for t in tops],
            }
        )
    return out


def run_engine(
    model: str, spec: str, prompts: list[str], new_tokens: int, scored: bool
) -> dict[str, Any]:
    import sglang

    rest, _, tp = spec.partition("@tp")
    backend, _, kv = rest.partition(":")
    parallel: dict[str, Any] = {"tp_size": int(tp), "dtype": "float32"} if tp else {}
    if DTYPE and not tp:
        parallel["dtype"] = DTYPE
    stats_dir = Path(tempfile.mkdtemp(prefix=f"sglang-rvv-stats-{backend}-"))
    os.environ["SGLANG_RVV_LAYER_STATS"] = str(stats_dir)
    _progress(f"{spec}: starting the engine")
    start = time.monotonic()
    engine = sglang.Engine(
        model_path=model,
        device="cpu",
        attention_backend=backend,
        kv_cache_dtype=kv or "auto",
        grammar_backend="none",
        max_total_tokens=1024,
        max_running_requests=4,
        chunked_prefill_size=256,
        disable_cuda_graph=True,
        log_level="info",
        random_seed=0,
        **parallel,
    )
    ready = time.monotonic()
    _progress(f"{spec}: engine ready after {ready - start:.0f} s; generating")
    try:
        params = {"temperature": 0.0, "max_new_tokens": new_tokens, "ignore_eos": True}
        outputs = engine.generate(prompts, params)
        done = time.monotonic()
        # sglang-rvv's processes write their op counts at most once a second (on a call):
        # one more short request after that second makes the scheduler write all of the above.
        time.sleep(1.2)
        teacher = score(engine, passages()) if scored and backend == "rvv" and not tp else None
        engine.generate(prompts[0], {"temperature": 0.0, "max_new_tokens": 1})
    finally:
        engine.shutdown()
    results = [
        {
            "prompt": p,
            "text": o["text"],
            "output_ids": list(o.get("output_ids") or []),
            "completion_tokens": o["meta_info"].get("completion_tokens"),
        }
        for p, o in zip(prompts, outputs, strict=True)
    ]
    _progress(f"{spec}: generated in {done - ready:.0f} s: {[r['text'] for r in results]}")
    return {
        "backend": spec,
        "scored": teacher,
        "startup_s": round(ready - start, 1),
        "generate_s": round(done - ready, 1),
        "results": results,
        "ops": _read_stats(stats_dir),
        **({"ops_per_process": _per_process(stats_dir)} if tp else {}),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--backend", action="append", required=True)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--prompt", action="append", help=f"default: {list(PROMPTS)}")
    p.add_argument("--score", action="store_true", help="teacher-forced corpus passages too")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--dtype", default="", help="the engines' dtype (default: auto)")
    a = p.parse_args()
    global DTYPE
    DTYPE = a.dtype
    t0 = time.monotonic()
    _progress(f"python {platform.python_version()} on {platform.machine()}: importing sglang")
    import sglang  # noqa: F401
    import torch
    from sglang_rvv import compat

    _progress(f"imported sglang (torch {torch.__version__}) in {time.monotonic() - t0:.0f} s")
    report: dict[str, Any] = {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "engines": [],
    }
    for backend in a.backend:
        report["engines"].append(
            run_engine(a.model, backend, a.prompt or list(PROMPTS), a.max_new_tokens, a.score)
        )
    report["compat"] = dict(compat.ACTIVE)
    report["wall_s"] = round(time.monotonic() - t0, 1)
    a.out.write_text(json.dumps(report, indent=1))
    _progress(f"wrote {a.out} ({report['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
