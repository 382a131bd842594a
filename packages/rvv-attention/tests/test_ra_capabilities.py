"""Capability parsing on recorded machines, and detection on the machine that runs."""

from __future__ import annotations

import os
import platform
import struct
from pathlib import Path
from typing import Any

import pytest
import rvv_attention as ra
from rvv_attention._capabilities import (
    AT_HWCAP,
    HWCAP_V,
    parse_auxv,
    parse_cpuinfo,
    parse_isa,
)
from rvv_attention._capabilities import detect as detect_caps

DATA = Path(__file__).parent / "data"
K1 = (DATA / "cpuinfo-spacemit-k1-bpi-f3.txt").read_text()
ZVL = (DATA / "cpuinfo-zvl128b-board.txt").read_text()
X86 = (DATA / "cpuinfo-x86-64.txt").read_text()
HWCAP_IMAFDCV = sum(1 << (ord(c) - ord("A")) for c in "IMAFDCV")


def auxv(pairs: dict[int, int]) -> bytes:
    """Little-endian 64-bit auxv bytes ending in AT_NULL."""
    return b"".join(struct.pack("<QQ", t, v) for t, v in [*pairs.items(), (0, 0)])


def detect_riscv(cpuinfo_text: str, **changes: Any) -> ra.Capabilities:
    """detect() on a recorded riscv64 machine: its /proc/cpuinfo, V in AT_HWCAP, no
    riscv_hwprobe answer, one thread; ``changes`` replace any of these (or add arguments)."""
    args: dict[str, Any] = {
        "auxv": auxv({AT_HWCAP: HWCAP_IMAFDCV}),
        "hwprobe_ext": None,
        "machine": "riscv64",
        "threads": 1,
    }
    return detect_caps(cpuinfo_text=cpuinfo_text, **{**args, **changes})


def k1_kernels(vlen: int = 256) -> dict[str, object]:
    """What rvv_ops.build_info() reports on a K1 (riscv64 build with the Zvfh variant)."""
    return {
        "version": "0.1.0",
        "target_arch": "riscv64",
        "torch_version": "2.6.0",
        "compiled_variants": ["portable", "rvv", "rvv_zvfh"],
        "supported_variants": ["portable", "rvv", "rvv_zvfh"],
        "active_variant": "rvv_zvfh",
        "variant_error": "",
        "cpu": {
            "has_v": True,
            "vlen": vlen,
            "zvfh": True,
            "zvfhmin": True,
            "zvfbfmin": False,
            "source": "hwprobe",
        },
    }


def test_parse_isa_k1() -> None:
    isa = parse_cpuinfo(K1).isa
    assert isa is not None
    assert isa.base == "rv64" and isa.has_v
    assert set("imafdcv") <= isa.letters
    assert isa.has("zvfh") and isa.has("zvfhmin") and not isa.has("zvfbfmin")
    assert isa.has("zve64d") and isa.has("svpbmt")
    assert not any(e.startswith("zvl") for e in isa.extensions)
    assert isa.vlen == 128  # V alone guarantees Zvl128b


def test_parse_cpuinfo_fields() -> None:
    k1 = parse_cpuinfo(K1)
    assert k1.harts == 8 and k1.uarch == "spacemit,x60"
    assert k1.mvendorid == "0x710" and k1.marchid == "0x8000000058000001"
    zvl = parse_cpuinfo(ZVL)
    assert zvl.harts == 4 and zvl.uarch == "thead,c920"
    assert zvl.isa is not None and zvl.isa.vlen == 128
    assert {"zvl32b", "zvl64b", "zvl128b"} <= zvl.isa.extensions
    x86 = parse_cpuinfo(X86)
    assert x86.isa is None and x86.harts == 2
    assert x86.uarch.startswith("Intel(R) Xeon(R) Platinum")


@pytest.mark.parametrize(
    ("isa", "letters", "exts", "vlen"),
    [
        ("rv64gc", "imafdgc", set(), 0),
        ("rv64gcv_zvl512b_zvl256b", "imafdgcv", {"zvl512b", "zvl256b"}, 512),
        (
            "rv64i2p1_m2p0_a2p1_f2p2_d2p2_c2p0_v1p0_zicsr2p0_zvfh1p0",
            "imafdcv",
            {"zicsr", "zvfh"},
            128,
        ),
        ("RV64IMAFDCV_ZVL1024B", "imafdcv", {"zvl1024b"}, 1024),
        ("x86_64", "", set(), 0),
    ],
)
def test_parse_isa_forms(isa: str, letters: str, exts: set[str], vlen: int) -> None:
    info = parse_isa(isa)
    assert info.letters == frozenset(letters)
    assert info.extensions == frozenset(exts)
    assert info.vlen == vlen


def test_parse_cpuinfo_harts_disagree() -> None:
    text = "processor : 0\nisa : rv64imafdcv_zvfh\n\nprocessor : 1\nisa : rv64imafdc\n"
    isa = parse_cpuinfo(text).isa
    assert isa is not None and not isa.has_v and not isa.has("zvfh")


def test_parse_auxv() -> None:
    data = auxv({6: 4096, AT_HWCAP: HWCAP_IMAFDCV, 25: 0xDEAD})
    parsed = parse_auxv(data + b"junk-after-AT_NULL-is-ignored!")
    assert parsed[AT_HWCAP] == HWCAP_IMAFDCV and parsed[6] == 4096
    assert parsed[AT_HWCAP] & HWCAP_V
    big = b"".join(struct.pack(">II", t, v) for t, v in [(AT_HWCAP, 5), (0, 0)])
    assert parse_auxv(big, word=4, byteorder="big") == {AT_HWCAP: 5}


def test_detect_k1_with_kernels() -> None:
    caps = detect_riscv(K1, kernels=k1_kernels(), threads=8, cores=8)
    assert caps.has_v and caps.vlen == 256 and caps.vlen_source == "vlenb"
    assert caps.zvfh and caps.zvfhmin and not caps.zvfbfmin and caps.source == "cpuinfo"
    assert caps.uarch == "spacemit,x60" and caps.cores == 8 and caps.threads == 8
    assert caps.isa.startswith("rv64imafdcv_zicbom")
    d = caps.as_dict()
    assert d["kernels"]["active_variant"] == "rvv_zvfh" and d["vlen"] == 256


def test_detect_no_zvl_and_no_kernels_gives_the_minimum() -> None:
    caps = detect_riscv(K1, kernels=None, kernels_error="rvv_ops cannot be imported (test)")
    assert caps.has_v and caps.vlen == 128 and caps.vlen_source == "minimum"
    assert caps.kernels is None and caps.kernels_error == "rvv_ops cannot be imported (test)"


def test_detect_zvl_board() -> None:
    caps = detect_riscv(ZVL, threads=4)
    assert caps.vlen == 128 and caps.vlen_source == "isa" and caps.zvfh
    # vlenb wins over the isa string, and a disagreement is reported
    caps = detect_riscv(ZVL.replace("zvl128b", "zvl512b"), kernels=k1_kernels(vlen=128), threads=4)
    assert caps.vlen == 128 and caps.vlen_source == "vlenb"
    assert any("zvl512b" in n for n in caps.notes)


def test_detect_hwcap_without_v_overrides_the_isa_string() -> None:
    hwcap_no_v = HWCAP_IMAFDCV & ~HWCAP_V
    caps = detect_riscv(K1, auxv=auxv({AT_HWCAP: hwcap_no_v}))
    assert not caps.has_v and caps.vlen == 0 and not caps.zvfh


def test_detect_hwprobe_wins_for_zvf() -> None:
    zvfh, zvfbfmin, ima_v = 1 << 30, 1 << 53, 1 << 2
    caps = detect_riscv(K1, hwprobe_ext=ima_v | zvfbfmin)
    assert caps.source == "hwprobe" and not caps.zvfh and caps.zvfbfmin and not caps.zvfhmin
    caps = detect_riscv("", auxv=b"", hwprobe_ext=ima_v | zvfh)
    assert caps.has_v and caps.zvfh and caps.zvfhmin and caps.vlen == 128


def test_detect_x86() -> None:
    caps = detect_caps(
        cpuinfo_text=X86,
        auxv=auxv({AT_HWCAP: 0xFFFFFFFF}),
        hwprobe_ext=None,
        machine="x86_64",
        threads=2,
        cores=2,
    )
    assert not caps.has_v and caps.vlen == 0 and caps.vlen_source == "none"
    assert not (caps.zvfh or caps.zvfhmin or caps.zvfbfmin) and caps.source == "none"
    assert caps.isa == "" and "Xeon" in caps.uarch


def test_capabilities_of_this_process() -> None:
    caps = ra.capabilities(refresh=True)
    assert caps.machine == platform.machine()
    assert caps.cores == (os.cpu_count() or 1) and caps.threads >= 1
    if caps.kernels is not None:
        assert caps.kernels["target_arch"] == platform.machine()
    if platform.machine() != "riscv64":
        assert not caps.has_v and caps.vlen == 0


@pytest.mark.skipif(
    "RVV_ATTENTION_EXPECT_VLEN" not in os.environ,
    reason="needs RVV_ATTENTION_EXPECT_VLEN (set by tools/ops_riscv.py for the emulated CPU)",
)
def test_capabilities_match_the_emulated_cpu() -> None:
    """Under QEMU the detected VLEN / Zvfh must be the emulated CPU's."""
    vlen = int(os.environ["RVV_ATTENTION_EXPECT_VLEN"])
    zvfh = os.environ.get("RVV_ATTENTION_EXPECT_ZVFH") == "1"
    caps = ra.capabilities(refresh=True)
    assert caps.machine == "riscv64"
    assert caps.has_v
    assert caps.vlen == vlen and caps.vlen_source == "vlenb"
    assert caps.zvfh == zvfh
    # Without the kernels' vlenb: V from AT_HWCAP and Zvfh from hwprobe / cpuinfo alone.
    bare = detect_caps(kernels=None)
    assert bare.has_v and bare.zvfh == zvfh
    assert bare.vlen in (128, vlen)
