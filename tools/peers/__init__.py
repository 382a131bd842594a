"""llama.cpp as a benchmark peer: its CPU backend and our driver built from the
``llama-cpp-python`` sdist (:mod:`peers.build`), run under QEMU with the insncount plugin.

Everything this package downloads or builds lives under :func:`cache_dir`
(``rvvtools.cache_dir() / "peers"``), outside the clone.
"""

from __future__ import annotations

import sys
from pathlib import Path

_TOOLS = Path(__file__).resolve().parent.parent
if str(_TOOLS) not in sys.path:
    sys.path.insert(0, str(_TOOLS))

import rvvtools  # noqa: E402

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """The peers cache: ``rvvtools.cache_dir() / "peers"`` (sdist, unpacked source, builds,
    GGUF files)."""
    return rvvtools.cache_dir() / "peers"
