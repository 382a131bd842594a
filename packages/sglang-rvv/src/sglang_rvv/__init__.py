"""SGLang glue for the RVV kernels: the ``rvv`` attention backend and its plugins.

Importing this package is cheap (it runs at every interpreter start through the
``sglang_rvv.pth`` hook); SGLang, torch and the kernels are imported only by the submodules
that need them.
"""

from __future__ import annotations

__version__ = "0.1.0"
