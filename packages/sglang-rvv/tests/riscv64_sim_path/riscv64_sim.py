"""Makes this x86-64 SGLang environment look like a riscv64 one with Debian's torch 2.6, for
the tests of sglang_rvv.compat's riscv64 rows (imported first, in a fresh interpreter started
with SGLANG_RVV_RISCV64=1 so that sglang-rvv's compat hook installed those rows).

- triton, tvm_ffi and xgrammar are hidden (no riscv64 builds): imports of them reach only
  sglang-rvv's stand-in finder, or fail;
- torch loses torch.float8_e8m0fnu / torch.float4_e2m1fn_x2 and symbolic_shapes'
  guard_or_false / guard_or_true, and its
  torch.accelerator.current_accelerator() takes no argument and raises without an
  accelerator, as in torch 2.6 - before sglang-rvv's torch rows run;
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

from sglang_rvv import compat

HIDDEN = ("triton", "tvm_ffi", "xgrammar")

assert os.environ.get(compat.ENV_RISCV64) == "1", "start the interpreter with SGLANG_RVV_RISCV64=1"
assert compat.riscv64()
for name in list(sys.modules):
    assert name.split(".")[0] not in (*HIDDEN, "torch", "sglang"), f"{name} already imported"


class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] not in HIDDEN:
            return None
        spec = compat.FINDER.stand_in_spec(fullname)
        if spec is not None:
            return spec
        raise ModuleNotFoundError(f"No module named {fullname!r} (hidden: riscv64 simulation)")


sys.meta_path.insert(0, _Hide())


def _torch_26(torch: Any) -> None:
    for name in ("float8_e8m0fnu", "float4_e2m1fn_x2"):
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
compat.FINDER.after_import("torch", _torch_26, first=True)
compat.FINDER.after_import(compat.SYMBOLIC_SHAPES, _symbolic_shapes_26, first=True)
compat.FINDER.after_import("sglang.srt.utils.common", _sglang_sees_riscv64, first=True)
