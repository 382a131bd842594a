"""Transparent huge pages for KV-cache buffers (Linux).

A serving KV cache is read a row at a time from wherever the allocator put each token, so
on 4 KiB pages nearly every row a decode step reads is on another page, and the TLB misses
(a page-table walk, nested under a hypervisor) cost about as much as the row itself.
:func:`advise_huge_pages` asks the kernel to back the buffers with 2 MiB pages: it marks
the whole 2 MiB-aligned part of each tensor's storage ``MADV_HUGEPAGE`` (so pages faulted
in later are huge when the system's THP mode is ``madvise`` or ``always``) and collapses
what is already resident now with ``MADV_COLLAPSE`` (Linux 6.1+; contents are kept).
Everything is best-effort: the result says what was done and, if not all of it, why.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch

HUGE_PAGE = 2 << 20
"""The huge page size this advises for (x86-64 and riscv64 Sv39/48 both have 2 MiB)."""

MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25

THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@dataclass(frozen=True)
class HugePages:
    """What :func:`advise_huge_pages` did.

    ``advised``: bytes marked ``MADV_HUGEPAGE`` (whole 2 MiB pages inside the storages);
    ``collapsed``: bytes of those turned into huge pages now by ``MADV_COLLAPSE``;
    ``reason``: empty when every eligible byte was advised and collapsed, else why not.
    """

    advised: int
    collapsed: int
    reason: str


def thp_mode(path: Path = THP_ENABLED) -> str | None:
    """The system's THP mode (``always``, ``madvise`` or ``never``), None if unknown."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def _madvise() -> Callable[[int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return cast("Callable[[int, int, int], int]", fn)


def advise_huge_pages(*tensors: torch.Tensor) -> HugePages:
    """Back the storages of ``tensors`` (CPU tensors, e.g. a KV cache's buffers) with
    2 MiB pages where the kernel allows; views of one storage count once."""
    spans: dict[int, int] = {}
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(
                f"advise_huge_pages: tensors[{i}] is {type(t).__name__}; expected a torch.Tensor"
            )
        if t.device.type != "cpu":
            raise ValueError(
                f"advise_huge_pages: tensors[{i}].device={t.device}; expected a CPU tensor"
            )
        storage = t.untyped_storage()
        spans[storage.data_ptr()] = storage.nbytes()
    ranges = []
    for ptr, nbytes in sorted(spans.items()):
        start = -(-ptr // HUGE_PAGE) * HUGE_PAGE
        end = (ptr + nbytes) // HUGE_PAGE * HUGE_PAGE
        if end > start:
            ranges.append((start, end - start))
    if not ranges:
        return HugePages(0, 0, "no whole 2 MiB page inside the tensors' storages")
    if not sys.platform.startswith("linux"):
        return HugePages(
            0, 0, f"transparent huge pages are a Linux feature (platform {sys.platform})"
        )
    madvise = _madvise()
    if madvise is None:
        return HugePages(0, 0, "the C library has no madvise")
    advised = collapsed = 0
    reasons: list[str] = []
    for start, length in ranges:
        if madvise(start, length, MADV_HUGEPAGE) == 0:
            advised += length
        else:
            reasons.append(f"MADV_HUGEPAGE failed: {os.strerror(ctypes.get_errno())}")
            continue
        if madvise(start, length, MADV_COLLAPSE) == 0:
            collapsed += length
        else:
            err = ctypes.get_errno()
            if err == errno.EINVAL:
                reasons.append(
                    "MADV_COLLAPSE is not supported by this kernel (Linux 6.1+): resident "
                    "pages become huge only when khugepaged gets to them"
                )
            else:
                reasons.append(f"MADV_COLLAPSE failed: {os.strerror(err)}")
    if collapsed:
        # What the kernel says it did is checked against what the process's page tables
        # show: an emulator (QEMU user mode) accepts the advice and ignores it.
        shown = _huge_in([(start, start + length) for start, length in ranges])
        if shown < collapsed:
            reasons.append(
                f"MADV_COLLAPSE succeeded but /proc/self/smaps shows {shown >> 20} of "
                f"{collapsed >> 20} MiB on huge pages (e.g. under an emulator that ignores it)"
            )
            collapsed = shown
    mode = thp_mode()
    if mode == "never":
        reasons.append("the system's THP mode is 'never': pages faulted in later stay 4 KiB")
    return HugePages(advised, collapsed, "; ".join(dict.fromkeys(reasons)))


def huge_bytes(tensor: torch.Tensor) -> int:
    """Bytes of ``tensor``'s storage that sit on huge pages now (from /proc/self/smaps;
    0 where that file does not exist). For checks and diagnostics."""
    storage = tensor.untyped_storage()
    return _huge_in([(storage.data_ptr(), storage.data_ptr() + storage.nbytes())])


def _huge_in(spans: list[tuple[int, int]]) -> int:
    """Bytes of the disjoint address ranges [lo, hi) on huge pages per /proc/self/smaps
    (read once; 0 without that file)."""
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return 0
    total = 0
    cur: tuple[int, int] | None = None
    for line in lines:
        head = line.split(None, 1)[0] if line else ""
        if "-" in head and not head.endswith(":"):
            a, b = head.split("-")
            cur = (int(a, 16), int(b, 16))
        elif head == "AnonHugePages:" and cur is not None:
            huge = int(line.split()[1]) * 1024
            for lo, hi in spans:
                start, end = max(cur[0], lo), min(cur[1], hi)
                if end > start:
                    # the mapping's huge bytes, counted for the overlapping share of it
                    total += huge * (end - start) // (cur[1] - cur[0])
    return total
