"""Makes this x86-64 SGLang environment look like a riscv64 one with Debian's torch 2.6, for
the tests of sglang_rvv.riscv64 (imported first, in a fresh interpreter started with
SGLANG_RVV_RISCV64=1 so that sglang-rvv's bootstrap installed its riscv64 shims).

- triton, tvm_ffi and xgrammar are hidden (no riscv64 builds): imports of them reach only
  sglang-rvv's stand-in finder, or fail;
- torch loses torch.float8_e8m0fnu / torch.float4_e2m1fn_x2 and symbolic_shapes'
  guard_or_false / guard_or_true, and its
  torch.accelerator.current_accelerator() takes no argument and raises without an
  accelerator, as in torch 2.6 - before sglang-rvv's torch patch runs;
- SGLang's ``sglang.srt.utils.common`` sees ``platform.machine() == "riscv64"``.
The rest of the process (rvv-ops, rvv-attention) still sees x86-64.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Sequence
from typing import Any

from sglang_rvv import _bootstrap, riscv64

HIDDEN = ("triton", "tvm_ffi", "xgrammar")

assert os.environ.get(riscv64.ENV) == "1", "start the interpreter with SGLANG_RVV_RISCV64=1"
assert riscv64.needed()
for name in list(sys.modules):
    assert name.split(".")[0] not in (*HIDDEN, "torch", "sglang"), f"{name} already imported"


class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] not in HIDDEN:
            return None
        for finder in sys.meta_path:
            if isinstance(finder, riscv64.StandInFinder):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    return spec
        raise ModuleNotFoundError(f"No module named {fullname!r} (hidden: riscv64 simulation)")


sys.meta_path.insert(0, _Hide())


def _torch_26(torch: Any) -> None:
    for name in riscv64.MISSING_DTYPES:
        if hasattr(torch, name):
            delattr(torch, name)

    def current_accelerator() -> Any:
        raise RuntimeError("no accelerator (simulated torch 2.6)")

    torch.accelerator.current_accelerator = current_accelerator


def _symbolic_shapes_26(module: Any) -> None:
    for name in ("guard_or_false", "guard_or_true"):
        if hasattr(module, name):
            delattr(module, name)


def _sglang_sees_riscv64(module: Any) -> None:
    module.platform = types.SimpleNamespace(machine=lambda: "riscv64")


# before sglang-rvv's own patches of the same modules
_bootstrap._AFTER_IMPORT.setdefault("torch", []).insert(0, _torch_26)
_bootstrap._AFTER_IMPORT.setdefault(riscv64.SYMBOLIC_SHAPES, []).insert(0, _symbolic_shapes_26)
_bootstrap._AFTER_IMPORT.setdefault(riscv64.IS_CPU_MODULE, []).insert(0, _sglang_sees_riscv64)
