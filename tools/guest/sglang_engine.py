"""Greedy generation with SGLang's offline Engine, once per attention backend, in one process.

    python sglang_engine.py --model DIR --backend rvv --backend torch_native --out FILE.json

Runs inside the emulated Debian 13 riscv64 Python (tools/sglang_riscv64.py, ``nox -s
riscv-sglang``) and on x86-64 in the sglang-rvv tests' riscv64 simulation. For each backend it
starts ``sglang.Engine(model_path=DIR, device="cpu", attention_backend=B, ...)``, generates
``--max-new-tokens`` tokens greedily (ignore_eos) for each prompt, shuts the engine down, and
records the token ids, the text, the wall time and the op-call counts sglang-rvv's processes
wrote (``SGLANG_RVV_LAYER_STATS``: routed layer ops and ``attention <op>:<implementation>``).
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


def _progress(msg: str) -> None:
    print(f"[sglang_engine {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _read_stats(directory: Path) -> dict[str, int]:
    total: dict[str, int] = {}
    for file in directory.glob("*.json"):
        for k, v in json.loads(file.read_text()).items():
            total[k] = total.get(k, 0) + int(v)
    return total


def run_engine(model: str, backend: str, prompts: list[str], new_tokens: int) -> dict[str, Any]:
    import sglang

    stats_dir = Path(tempfile.mkdtemp(prefix=f"sglang-rvv-stats-{backend}-"))
    os.environ["SGLANG_RVV_LAYER_STATS"] = str(stats_dir)
    _progress(f"{backend}: starting the engine")
    start = time.monotonic()
    engine = sglang.Engine(
        model_path=model,
        device="cpu",
        attention_backend=backend,
        grammar_backend="none",
        max_total_tokens=1024,
        max_running_requests=4,
        chunked_prefill_size=256,
        disable_cuda_graph=True,
        log_level="info",
        random_seed=0,
    )
    ready = time.monotonic()
    _progress(f"{backend}: engine ready after {ready - start:.0f} s; generating")
    try:
        params = {"temperature": 0.0, "max_new_tokens": new_tokens, "ignore_eos": True}
        outputs = engine.generate(prompts, params)
        done = time.monotonic()
        # sglang-rvv's processes write their op counts at most once a second (on a call):
        # one more short request after that second makes the scheduler write all of the above.
        time.sleep(1.2)
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
    _progress(f"{backend}: generated in {done - ready:.0f} s: {[r['text'] for r in results]}")
    return {
        "backend": backend,
        "startup_s": round(ready - start, 1),
        "generate_s": round(done - ready, 1),
        "results": results,
        "ops": _read_stats(stats_dir),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--backend", action="append", required=True)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--prompt", action="append", help=f"default: {list(PROMPTS)}")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
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
            run_engine(a.model, backend, a.prompt or list(PROMPTS), a.max_new_tokens)
        )
    report["compat"] = dict(compat.ACTIVE)
    report["wall_s"] = round(time.monotonic() - t0, 1)
    a.out.write_text(json.dumps(report, indent=1))
    _progress(f"wrote {a.out} ({report['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
