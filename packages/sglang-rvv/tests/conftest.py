"""Shared test setup for sglang-rvv.

SGLang decides at import time whether it runs in CPU mode (``SGLANG_USE_CPU_ENGINE=1``), so
the variable is set here, before any test module imports sglang.
"""

from __future__ import annotations

import os

os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
