"""Shared setup of the conformance files.

SGLang decides at import time whether it runs in CPU mode (``SGLANG_USE_CPU_ENGINE=1``), so
the variable is set here, before test_sglang_backend.py imports sglang (the other files do
not import SGLang; the variable means nothing to them).
"""

from __future__ import annotations

import os

os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
