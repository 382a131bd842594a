"""advise_huge_pages: 2 MiB pages under KV buffers (Linux THP), best-effort and honest."""

from __future__ import annotations

import platform

import pytest
import rvv_attention as ra
import torch
from rvv_attention._hugepages import HUGE_PAGE, huge_bytes, thp_mode

LINUX_COLLAPSE = platform.system() == "Linux" and tuple(
    int(x) for x in platform.release().split(".")[:2] if x.isdigit()
) >= (6, 1)


# Not under an emulator: this file's x86-64 runs are native, its riscv64 runs are QEMU's.
NATIVE = platform.machine() == "x86_64"


def whole_pages(t: torch.Tensor) -> int:
    s = t.untyped_storage()
    lo = -(-s.data_ptr() // HUGE_PAGE) * HUGE_PAGE
    hi = (s.data_ptr() + s.nbytes()) // HUGE_PAGE * HUGE_PAGE
    return max(0, hi - lo)


def test_collapses_resident_pages_and_keeps_contents():
    t = torch.randn(24 << 18)  # 24 MiB of fp32, faulted in on 4 KiB pages
    want = t.clone()
    r = ra.advise_huge_pages(t, t[7:], t.view(-1, 64)[3])  # views count once
    assert torch.equal(t, want)
    assert r.advised == whole_pages(t) > 0
    # what it reports collapsed is on huge pages; whatever it did not collapse, it explains
    assert huge_bytes(t) >= r.collapsed
    assert r.collapsed == r.advised or r.reason, r
    if NATIVE and LINUX_COLLAPSE and thp_mode() in ("madvise", "always"):
        # natively on Linux 6.1+ with THP available (this project's machines) all of it
        assert r.collapsed == r.advised and r.reason == "", r
    else:  # e.g. the riscv64 tests under QEMU user mode, which ignores the advice
        assert r.collapsed == r.advised or "MADV_COLLAPSE" in r.reason or "THP" in r.reason, r


def test_small_tensor_is_reported_not_advised():
    r = ra.advise_huge_pages(torch.zeros(1000))
    assert (r.advised, r.collapsed) == (0, 0)
    assert "no whole 2 MiB page" in r.reason


def test_bad_arguments_name_the_argument():
    with pytest.raises(TypeError, match=r"tensors\[1\] is list"):
        ra.advise_huge_pages(torch.zeros(4), [1, 2])
    with pytest.raises(ValueError, match=r"tensors\[0\]\.device=meta"):
        ra.advise_huge_pages(torch.zeros(4, device="meta"))


def test_thp_mode_parses_sysfs(tmp_path):
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    assert thp_mode(f) == "madvise"
    assert thp_mode(tmp_path / "missing") is None
