"""Every SGLang 0.5.23 model module imports in CPU mode with sglang-rvv's ``sgl_kernel``
stand-in, except the ones in ``OUT_OF_SCOPE``, each for the reason given there.

SGLang's model registry imports every module under ``sglang.srt.models`` at start-up and only
logs ("Ignore import error when loading ...") the ones that fail, whose architectures then
cannot be served at all. Several modules bind ``torch.ops.sgl_kernel.<op>`` at import time,
so a CPU op the stand-in lacks makes a whole family disappear (Qwen3.5 did, for want of
``fused_sigmoid_mul_cpu``). The imports run in a fresh interpreter (about 10 s).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

OUT_OF_SCOPE: dict[str, tuple[str, str]] = {
    "falcon_mamba": (
        r"cannot import name 'causal_conv1d_fn'",
        "SGLang's mamba layer binds causal_conv1d_fn only on CUDA, NPU and XPU (a SGLang gap, "
        "not an sgl_kernel op)",
    ),
    "mamba": (
        r"cannot import name 'causal_conv1d_fn'",
        "as falcon_mamba",
    ),
    "inkling": (r"No module named 'cutlass'", "imports NVIDIA's CUTLASS DSL (CUDA only)"),
    "midashenglm": (
        r"No module named 'torchaudio'",
        "an audio model; torchaudio is not in SGLang's CPU requirements",
    ),
}
"""Module (under ``sglang.srt.models``) -> (the error it fails with, why it stays out)."""

_SCRIPT = """
import importlib, json, pkgutil
import sgl_kernel
import sglang.srt.models as package
failed = {}
for _, name, ispkg in pkgutil.iter_modules(package.__path__, "sglang.srt.models."):
    if ispkg:
        continue
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name.rsplit(".", 1)[1]] = f"{type(exc).__name__}: {exc}"
print("RESULT " + json.dumps({"shim": getattr(sgl_kernel, "RVV_SHIM", False), "failed": failed}))
"""


def test_every_model_module_imports_except_the_out_of_scope_ones() -> None:
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1")
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    assert result["shim"], "sgl_kernel is not sglang-rvv's stand-in"
    failed: dict[str, str] = result["failed"]
    unexpected = {m: e for m, e in failed.items() if m not in OUT_OF_SCOPE}
    assert not unexpected, f"model modules that fail to import: {unexpected}"
    for module, (pattern, _) in OUT_OF_SCOPE.items():
        assert module in failed, f"{module} imports now: take it out of OUT_OF_SCOPE"
        assert re.search(pattern, failed[module]), f"{module}: {failed[module]}"
    missing_ops = {m: e for m, e in failed.items() if "sgl_kernel" in e}
    assert not missing_ops, missing_ops
