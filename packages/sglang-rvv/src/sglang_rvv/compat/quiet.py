"""SGLang messages that say nothing a CPU-engine user can act on, quieted one by one.

Each row names one message exactly (where it comes from and how it starts), why it is
harmless on SGLang's CPU engine, and the test that checks it is gone. A Python warning is
ignored; a log record is moved to DEBUG (still shown with ``--log-level debug``). Applied by
:func:`sglang_rvv.compat.install` in every process, only when SGLang's CPU engine is selected
(``SGLANG_USE_CPU_ENGINE=1``): on a GPU the same messages can mean something.
Standard library only (imported at interpreter start).
"""

from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Quiet:
    """One quieted message."""

    kind: Literal["warning", "log"]
    """A Python ``UserWarning`` (ignored) or a log record (moved to DEBUG)."""
    source: str
    """The module that warns, or the logger that logs."""
    message: str
    """How the message starts (literal text)."""
    reason: str
    test: str = "test_e2e.py::test_startup_log_is_clean_and_says_what_runs_where"


QUIET: tuple[Quiet, ...] = (
    Quiet(
        "warning",
        "sglang.srt.layers.quantization.awq.awq",
        "Only CUDA, HIP and XPU support AWQ currently.",
        "raised when the module is imported, in every SGLang process, whatever the model",
    ),
    Quiet(
        "warning",
        "sglang.srt.layers.quantization.gguf",
        "Only CUDA, MUSA and NPU support GGUF quantization currently.",
        "raised when the module is imported, in every SGLang process, whatever the model",
    ),
    Quiet(
        "warning",
        "sglang.kernels.ops.attention.fla.utils",
        "Triton is not supported on current platform, roll back to CPU.",
        "raised when the module is imported; it announces the CPU path it then takes",
    ),
    Quiet(
        "log",
        "sglang.srt.models.registry",
        "Ignore import error when loading ",
        "SGLang imports every model module at start-up and logs each one that cannot load on "
        "the CPU engine (CUDA-only packages, sgl-kernel ops rvv-ops does not have, "
        "torchaudio): one line per module, about models that are not being served",
    ),
    Quiet(
        "log",
        "sglang.kernels.jit.utils.arch",
        "Cannot detect CUDA architecture.",
        "there is no CUDA device on the CPU engine; SGLang's CUDA JIT kernels do not run",
    ),
    Quiet(
        "log",
        "sglang.srt.distributed.bootstrap",
        "init_cpu_threads_env and shared memory based AllReduce is disabled",
        "both need sgl-kernel's x86 CPU build; torch's own thread pool runs the model",
    ),
    Quiet(
        "log",
        "sglang.srt.utils.common",
        "Fail to set RLIMIT_NOFILE",
        "SGLang asks for a soft limit of 65535 open files and logs this when the hard limit "
        "is lower, which only root can raise; the server runs with the limit it has "
        "(`python -m sglang_rvv.serve` first raises the soft limit up to the hard one)",
    ),
    Quiet(
        "log",
        "sglang.srt.entrypoints.openai.serving_rerank",
        "Using fallback token IDs for yes/no",
        "only the /v1/rerank endpoint uses these token ids, and only for reranker models",
    ),
)


class _ToDebug(logging.Filter):
    """Moves records starting with one of ``prefixes`` to DEBUG (kept only if the logger is
    enabled for DEBUG)."""

    def __init__(self, prefixes: list[str]) -> None:
        super().__init__()
        self.prefixes = tuple(prefixes)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG or not str(record.msg).startswith(self.prefixes):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def install() -> None:
    """Installs the warning filters and log filters of :data:`QUIET` in this process."""
    by_logger: dict[str, list[str]] = {}
    for q in QUIET:
        if q.kind == "warning":
            warnings.filterwarnings(
                "ignore",
                message=re.escape(q.message),
                category=UserWarning,
                module=re.escape(q.source) + r"\Z",
            )
        else:
            by_logger.setdefault(q.source, []).append(q.message)
    for name, prefixes in by_logger.items():
        logging.getLogger(name).addFilter(_ToDebug(prefixes))
