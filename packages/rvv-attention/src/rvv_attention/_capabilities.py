"""What the running machine and the installed kernels can do.

Everything is detected where the code runs, never taken from the build machine:

- RVV present: bit ``'V' - 'A'`` of ``AT_HWCAP`` from ``/proc/self/auxv``;
- VLEN: ``vlenb`` as read by rvv-kernels (``rvv_ops.build_info()["cpu"]``), else the
  largest ``zvl<N>b`` of the isa string, else 128 (V implies Zvl128b);
- Zvfh / Zvfhmin / Zvfbfmin: the ``riscv_hwprobe`` syscall, else the isa string of
  ``/proc/cpuinfo``;
- cores: ``os.cpu_count()``; threads: ``torch.get_num_threads()``;
- the kernel build: ``rvv_ops.build_info()`` (compiled / supported / active variants).

The parsers take text or bytes so recorded ``/proc/cpuinfo`` files can be tested.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import struct
import sys
from dataclasses import dataclass, field
from typing import Any, Literal

AT_HWCAP = 16
HWCAP_V = 1 << (ord("V") - ord("A"))

# linux/arch/riscv/include/uapi/asm/hwprobe.h
_NR_RISCV_HWPROBE = 258
_KEY_IMA_EXT_0 = 4
_HWPROBE_IMA_V = 1 << 2
_HWPROBE_EXT_ZVFH = 1 << 30
_HWPROBE_EXT_ZVFHMIN = 1 << 31
_HWPROBE_EXT_ZVFBFMIN = 1 << 53


@dataclass(frozen=True)
class IsaInfo:
    """What an isa string says (``rv64imafdcv_zicbom_..._zvl256b``)."""

    isa: str
    base: str
    """``rv32`` / ``rv64``."""
    letters: frozenset[str]
    """Single-letter extensions (``g`` expanded to ``imafd`` + ``zicsr_zifencei``)."""
    extensions: frozenset[str]
    """Multi-letter extensions, lower case (``zvfh``, ``zvl256b``, ...)."""

    @property
    def has_v(self) -> bool:
        """The V extension (RVV 1.0) is listed."""
        return "v" in self.letters

    @property
    def vlen(self) -> int:
        """Guaranteed VLEN in bits: the largest ``zvl<N>b``, 128 with V and none listed, 0
        without V."""
        sizes = [int(m.group(1)) for e in self.extensions if (m := re.fullmatch(r"zvl(\d+)b", e))]
        if sizes:
            return max(sizes)
        return 128 if self.has_v else 0

    def has(self, ext: str) -> bool:
        """Whether the multi-letter extension ``ext`` is listed."""
        return ext.lower() in self.extensions


def parse_isa(isa: str) -> IsaInfo:
    """Parses a RISC-V isa string such as ``rv64imafdcv_zicbom_zvfh_zvl256b``."""
    text = isa.strip().lower()
    m = re.match(r"(rv32|rv64|rv128)([a-z0-9]*)", text)
    if not m:
        return IsaInfo(isa=isa.strip(), base="", letters=frozenset(), extensions=frozenset())
    base, rest = m.group(1), m.group(2)
    parts = text[m.end() :].split("_")
    # The single-letter part ends where the first multi-letter one (z*, s*, x*) starts; a
    # version suffix like "2p0" belongs to the letter before it.
    stripped = re.sub(r"\d+p\d+", "", rest)
    single = re.split(r"[zsx]", stripped, maxsplit=1)[0]
    letters = set(single)
    extensions: set[str] = set()
    tail = stripped[len(single) :]
    if tail:  # "rv64gcvzfh" without underscores: rare, but keep the extension
        extensions.add(tail)
    for part in parts:
        name = re.sub(r"\d+p\d+$", "", part)
        if len(name) == 1:  # "rv64i2p1_m2p0_..._v1p0": versioned single letters
            letters.add(name)
        elif name:
            extensions.add(name)
    if "g" in letters:
        letters |= set("imafd")
    return IsaInfo(
        isa=isa.strip(), base=base, letters=frozenset(letters), extensions=frozenset(extensions)
    )


@dataclass(frozen=True)
class CpuInfoText:
    """The fields of ``/proc/cpuinfo`` this package uses."""

    isa: IsaInfo | None
    """The isa string every hart shares; the intersection if they differ; None if absent."""
    harts: int
    """``processor`` entries."""
    uarch: str
    """``uarch`` (riscv), else ``model name``, else empty."""
    mvendorid: str = ""
    marchid: str = ""


def parse_cpuinfo(text: str) -> CpuInfoText:
    """Parses ``/proc/cpuinfo`` text (any architecture; RISC-V fields when present)."""
    isas: list[str] = []
    harts = 0
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if key == "processor":
            harts += 1
        elif key == "isa":
            isas.append(value)
        elif key not in fields:
            fields[key] = value
    info: IsaInfo | None = None
    if isas:
        parsed = [parse_isa(s) for s in isas]
        first = parsed[0]
        info = IsaInfo(
            isa=first.isa,
            base=first.base,
            letters=frozenset.intersection(*(p.letters for p in parsed)),
            extensions=frozenset.intersection(*(p.extensions for p in parsed)),
        )
    uarch = fields.get("uarch") or fields.get("model name") or ""
    return CpuInfoText(
        isa=info,
        harts=harts,
        uarch=uarch,
        mvendorid=fields.get("mvendorid", ""),
        marchid=fields.get("marchid", ""),
    )


def parse_auxv(data: bytes, *, word: int = 8, byteorder: str = "little") -> dict[int, int]:
    """Parses ``/proc/self/auxv`` bytes into ``{a_type: a_val}`` (stops at ``AT_NULL``)."""
    fmt = ("<" if byteorder == "little" else ">") + ("QQ" if word == 8 else "II")
    size = 2 * word
    out: dict[int, int] = {}
    for off in range(0, len(data) - size + 1, size):
        a_type, a_val = struct.unpack_from(fmt, data, off)
        if a_type == 0:
            break
        out[a_type] = a_val
    return out


def hwprobe() -> int | None:
    """``RISCV_HWPROBE_KEY_IMA_EXT_0`` from the ``riscv_hwprobe`` syscall; None off riscv64 or
    when the kernel (< 6.4) does not have it."""
    if platform.machine() != "riscv64":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pair = (ctypes.c_int64 * 2)(_KEY_IMA_EXT_0, 0)
        rc = libc.syscall(_NR_RISCV_HWPROBE, ctypes.byref(pair), 1, 0, None, 0)
    except (OSError, AttributeError):
        return None
    if rc != 0 or pair[0] != _KEY_IMA_EXT_0:
        return None
    return int(pair[1]) & 0xFFFFFFFFFFFFFFFF


@dataclass(frozen=True)
class Capabilities:
    """The running machine and kernel build, as :func:`capabilities` detected them."""

    machine: str
    """``platform.machine()``."""
    has_v: bool
    """RVV 1.0 usable (AT_HWCAP V bit)."""
    vlen: int
    """VLEN in bits (0 without V)."""
    vlen_source: str
    """Where ``vlen`` came from: ``vlenb`` (rvv-kernels read the CSR), ``isa`` (zvl*b),
    ``minimum`` (V implies 128) or ``none``."""
    zvfh: bool
    zvfhmin: bool
    zvfbfmin: bool
    source: str
    """Where the Zvf* bits came from: ``hwprobe``, ``cpuinfo``, ``rvv_ops`` or ``none``."""
    cores: int
    """``os.cpu_count()``."""
    threads: int
    """``torch.get_num_threads()``: what the kernels' ``at::parallel_for`` uses."""
    isa: str
    """The isa string of ``/proc/cpuinfo`` (empty off RISC-V)."""
    uarch: str
    kernels: dict[str, Any] | None
    """``rvv_ops.build_info()``, or None when rvv_ops cannot be imported."""
    kernels_error: str | None = None
    """Why rvv_ops could not be imported (None when it could)."""
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field."""
        return {
            "machine": self.machine,
            "has_v": self.has_v,
            "vlen": self.vlen,
            "vlen_source": self.vlen_source,
            "zvfh": self.zvfh,
            "zvfhmin": self.zvfhmin,
            "zvfbfmin": self.zvfbfmin,
            "source": self.source,
            "cores": self.cores,
            "threads": self.threads,
            "isa": self.isa,
            "uarch": self.uarch,
            "kernels": self.kernels,
            "kernels_error": self.kernels_error,
            "notes": list(self.notes),
        }


def _read(path: str, binary: bool = False) -> Any:
    try:
        with open(path, "rb" if binary else "r") as f:
            return f.read()
    except OSError:
        return None


def detect(
    *,
    cpuinfo_text: str | None = None,
    auxv: bytes | None = None,
    hwprobe_ext: int | Literal["detect"] | None = "detect",
    machine: str | None = None,
    kernels: dict[str, Any] | None = None,
    kernels_error: str | None = None,
    threads: int | None = None,
    cores: int | None = None,
) -> Capabilities:
    """Combines the sources into :class:`Capabilities`.

    Every input may be given (tests, recorded machines); what is not given is read from
    this process (``/proc/cpuinfo``, ``/proc/self/auxv``; ``hwprobe_ext="detect"`` calls
    ``riscv_hwprobe``, None means "not available"). ``kernels`` is ``rvv_ops.build_info()``
    or None; :func:`rvv_attention.capabilities` passes it.
    """
    machine = machine if machine is not None else platform.machine()
    if cpuinfo_text is None:
        cpuinfo_text = _read("/proc/cpuinfo") or ""
    if auxv is None:
        auxv = _read("/proc/self/auxv", binary=True) or b""
    if hwprobe_ext == "detect":
        hwprobe_ext = hwprobe() if machine == platform.machine() else None
    if threads is None:
        import torch

        threads = torch.get_num_threads()
    cpu = parse_cpuinfo(cpuinfo_text)
    notes: list[str] = []
    hwcap = parse_auxv(auxv, byteorder=sys.byteorder).get(AT_HWCAP) if auxv else None
    is_riscv = machine.startswith("riscv")
    isa = cpu.isa

    if not is_riscv:
        has_v = False
    elif hwcap is not None:
        has_v = bool(hwcap & HWCAP_V)
    elif hwprobe_ext is not None:
        has_v = bool(hwprobe_ext & _HWPROBE_IMA_V)
    else:
        has_v = bool(isa and isa.has_v)
        notes.append("no AT_HWCAP: V taken from the isa string")

    kcpu = kernels.get("cpu") if kernels else None
    if not has_v:
        vlen, vlen_source = 0, "none"
    elif kcpu and int(kcpu.get("vlen", 0)) > 0:
        vlen, vlen_source = int(kcpu["vlen"]), "vlenb"
    elif isa and any(e.startswith("zvl") for e in isa.extensions):
        vlen, vlen_source = isa.vlen, "isa"
    else:
        vlen, vlen_source = 128, "minimum"
    if has_v and isa and vlen_source == "vlenb" and isa.vlen > vlen:
        notes.append(f"isa string claims zvl{isa.vlen}b but vlenb says VLEN {vlen}")

    if not is_riscv:
        zvfh = zvfhmin = zvfbfmin = False
        source = "none"
    elif hwprobe_ext is not None:
        zvfh = bool(hwprobe_ext & _HWPROBE_EXT_ZVFH)
        zvfhmin = bool(hwprobe_ext & (_HWPROBE_EXT_ZVFHMIN | _HWPROBE_EXT_ZVFH))
        zvfbfmin = bool(hwprobe_ext & _HWPROBE_EXT_ZVFBFMIN)
        source = "hwprobe"
    elif isa is not None:
        zvfh = isa.has("zvfh")
        zvfhmin = zvfh or isa.has("zvfhmin")
        zvfbfmin = isa.has("zvfbfmin")
        source = "cpuinfo"
    elif kcpu:
        zvfh, zvfhmin, zvfbfmin = bool(kcpu["zvfh"]), bool(kcpu["zvfhmin"]), bool(kcpu["zvfbfmin"])
        source = "rvv_ops"
    else:
        zvfh = zvfhmin = zvfbfmin = False
        source = "none"
    if not has_v:
        zvfh = zvfhmin = zvfbfmin = False

    return Capabilities(
        machine=machine,
        has_v=has_v,
        vlen=vlen,
        vlen_source=vlen_source,
        zvfh=zvfh,
        zvfhmin=zvfhmin,
        zvfbfmin=zvfbfmin,
        source=source,
        cores=cores if cores is not None else (os.cpu_count() or 1),
        threads=threads,
        isa=isa.isa if isa else "",
        uarch=cpu.uarch,
        kernels=kernels,
        kernels_error=kernels_error,
        notes=tuple(notes),
    )
