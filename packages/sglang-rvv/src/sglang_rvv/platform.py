"""SGLang platform plugin (entry point ``sglang.srt.platforms: rvv``): SGLang's CPU engine on
riscv64.

SGLang 0.5.23 discovers platforms through this entry-point group; without a plugin it picks
its generic CPU platform only through ``SGLANG_USE_CPU_ENGINE=1`` and labels the device by
x86-64/arm64 alone. :func:`activate` answers on riscv64 (see :func:`sglang_rvv.compat.riscv64`)
with :class:`RiscvCpuPlatform`, and None everywhere else, so that on other machines SGLang's
own choice stands. This is SGLang's extension point, not a patch (patches are in
:mod:`sglang_rvv.compat`).
"""

from __future__ import annotations

import importlib
import platform as _platform
from typing import Any

from sglang_rvv import compat
from sglang_rvv.compat import stand_ins

PLATFORM = "sglang_rvv.platform.RiscvCpuPlatform"


def activate() -> str | None:
    """The platform class's qualified name on riscv64, else None."""
    return PLATFORM if compat.riscv64() else None


def apply_defaults(server_args: Any) -> None:
    """SGLang's CPU defaults, made to work on riscv64 (only fields the user left unset, or set
    to something that cannot run here, change):

    - attention backend ``rvv`` instead of ``intel_amx`` (SGLang's CPU default for every
      non-arm64 CPU: it needs sgl-kernel's x86 build);
    - grammar backend ``none`` when xgrammar is sglang-rvv's stand-in (SGLang would default to
      xgrammar, which has no riscv64 build; ``llguidance`` can be chosen explicitly).
    """
    if server_args.attention_backend in (None, "intel_amx"):
        server_args.attention_backend = "rvv"
    if server_args.grammar_backend is None and _xgrammar_is_stand_in():
        server_args.grammar_backend = "none"


def _xgrammar_is_stand_in() -> bool:
    try:
        xgrammar = importlib.import_module("xgrammar")
    except ImportError:
        return True
    return isinstance(xgrammar, stand_ins.StandInModule)


def _platform_class() -> type:
    from sglang.srt.platforms.cpu import CpuSRTPlatform

    class RiscvCpuPlatform(CpuSRTPlatform):  # type: ignore[misc]
        """SGLang's CPU platform, named for the RISC-V CPU it runs on, with its defaults."""

        def get_device_name(self, device_id: int = 0) -> str:
            return f"cpu ({_platform.machine()})"

        def apply_server_args_defaults(self, server_args: Any) -> None:
            apply_defaults(server_args)

    RiscvCpuPlatform.__module__ = __name__
    RiscvCpuPlatform.__qualname__ = "RiscvCpuPlatform"
    return RiscvCpuPlatform


def __getattr__(name: str) -> type:
    # The class subclasses SGLang's, so it is built on first use: importing this module
    # (to call activate) must not import SGLang's platform package.
    if name == "RiscvCpuPlatform":
        cls = _platform_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
