"""sglang_rvv.compat: the table of what sglang-rvv patches, its one import hook, and the docs
that show the table."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import json
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from sglang_rvv import compat
from sglang_rvv.compat import quiet, stand_ins
from sglang_rvv.compat._finder import CompatFinder

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parents[2]


def _python(code: str, **env: str | None) -> str:
    full = dict(os.environ)
    for k, v in env.items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = v
    res = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout.strip().splitlines()[-1]


def _test_functions(file: Path) -> set[str]:
    tree = ast.parse(file.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_every_row_names_existing_tests() -> None:
    missing = []
    for gap in compat.GAPS:
        assert gap.tests, f"{gap.patched}: no test named"
        for test in gap.tests:
            file, _, name = test.partition("::")
            path = TESTS / file
            if not path.is_file() or name not in _test_functions(path):
                missing.append(f"{gap.patched}: {test}")
    assert not missing, f"rows name tests that do not exist: {missing}"


def test_every_quieted_message_names_an_existing_test() -> None:
    for q in quiet.QUIET:
        file, _, name = q.test.partition("::")
        assert name in _test_functions(TESTS / file), q


def test_rows_are_complete_and_distinct() -> None:
    seen = set()
    for gap in compat.GAPS:
        assert gap.patched not in seen, f"two rows patch {gap.patched}"
        seen.add(gap.patched)
        assert gap.reason and gap.condition and gap.target
        if gap.kind == "stand-in":
            assert gap.stand_in is not None and gap.patch is None, gap.patched
        elif gap.kind == "env":
            assert gap.value and gap.patch is None and gap.stand_in is None, gap.patched
        else:
            assert gap.patch is not None and gap.stand_in is None, gap.patched


@pytest.mark.parametrize(
    ("doc", "option"),
    [
        ("packages/sglang-rvv/README.md", ""),
        ("packages/sglang-rvv/README.md", "--quiet"),
        ("docs/riscv64.md", "--riscv64-only"),
    ],
)
def test_docs_show_the_table(doc: str, option: str) -> None:
    text = (REPO / doc).read_text()
    if option == "--quiet":
        table = compat.quiet_table()
    else:
        table = compat.markdown_table(riscv64_only=option == "--riscv64-only")
    assert table in text, (
        f"{doc}: the table is out of date; paste the output of "
        f"`python -m sglang_rvv.compat {option}`"
    )


def test_one_hook_first_on_meta_path() -> None:
    # The .pth file of the installed wheel installs it in every interpreter.
    out = _python(
        """
        import json, sys
        print(json.dumps([type(f).__module__ + "." + type(f).__name__ for f in sys.meta_path]))
        """
    )
    finders = json.loads(out)
    ours = [f for f in finders if f.startswith("sglang_rvv")]
    assert ours == ["sglang_rvv.compat._finder.CompatFinder"] and finders[0] == ours[0]


def test_switch_off() -> None:
    out = _python(
        """
        import json, sys
        from sglang_rvv import compat
        compat.install()
        print(json.dumps([compat.FINDER in sys.meta_path, compat.ACTIVE]))
        """,
        SGLANG_RVV_SHIMS="0",
    )
    assert json.loads(out) == [False, {}]


def test_riscv64_rows_in_a_fresh_interpreter() -> None:
    # Environment defaults: set where unset, the user's value kept otherwise.
    code = """
        import json, os
        from sglang_rvv import compat
        print(json.dumps({
            "env": [os.environ.get("SGLANG_USE_CPU_ENGINE"), os.environ.get("USE_LIBUV")],
            "active": sorted(compat.ACTIVE),
        }))
        """
    got = json.loads(
        _python(code, SGLANG_RVV_RISCV64="1", SGLANG_USE_CPU_ENGINE=None, USE_LIBUV=None)
    )
    assert got == {"env": ["1", "0"], "active": ["SGLANG_USE_CPU_ENGINE=1", "USE_LIBUV=0"]}
    got = json.loads(
        _python(code, SGLANG_RVV_RISCV64="1", SGLANG_USE_CPU_ENGINE="0", USE_LIBUV="1")
    )
    assert got == {"env": ["0", "1"], "active": []}
    got = json.loads(
        _python(code, SGLANG_RVV_RISCV64="0", SGLANG_USE_CPU_ENGINE=None, USE_LIBUV=None)
    )
    assert got == {"env": [None, None], "active": []}


@pytest.fixture
def finder(tmp_path: Path) -> Iterator[CompatFinder]:
    """A second CompatFinder, first on sys.meta_path, and tmp_path on sys.path."""
    f = CompatFinder()
    sys.meta_path.insert(0, f)
    sys.path.insert(0, str(tmp_path))
    importlib.invalidate_caches()
    try:
        yield f
    finally:
        sys.meta_path.remove(f)
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n.startswith("sglang_rvv_compat_probe")]:
            del sys.modules[name]


def test_stand_in_only_when_nothing_else_finds_the_module(
    finder: CompatFinder, tmp_path: Path
) -> None:
    made: list[str] = []

    def factory(fullname: str) -> importlib.machinery.ModuleSpec:
        made.append(fullname)
        return stand_ins.spec(fullname)

    finder.stand_in("sglang_rvv_compat_probe_a", factory)
    finder.stand_in("sglang_rvv_compat_probe_b", factory)
    (tmp_path / "sglang_rvv_compat_probe_b.py").write_text("REAL = True\n")
    a = importlib.import_module("sglang_rvv_compat_probe_a")
    b = importlib.import_module("sglang_rvv_compat_probe_b")
    assert made == ["sglang_rvv_compat_probe_a"]
    assert isinstance(a, stand_ins.StandInModule) and b.REAL is True
    assert finder.find_spec("sglang_rvv_unrelated_name", None) is None


def test_patches_run_after_the_module_code_in_order(finder: CompatFinder, tmp_path: Path) -> None:
    (tmp_path / "sglang_rvv_compat_probe_c.py").write_text("VALUE = [1]\n")
    seen: list[str] = []

    def ours(module: types.ModuleType) -> None:
        seen.append(f"ours {module.VALUE}")
        module.VALUE.append(2)

    def simulation(module: types.ModuleType) -> None:
        seen.append(f"simulation {module.VALUE}")

    finder.after_import("sglang_rvv_compat_probe_c", ours)
    finder.after_import("sglang_rvv_compat_probe_c", simulation, first=True)
    finder.after_import("sglang_rvv_compat_probe_c", ours)  # registered once
    module = importlib.import_module("sglang_rvv_compat_probe_c")
    assert seen == ["simulation [1]", "ours [1]"] and module.VALUE == [1, 2]
    late: list[object] = []
    finder.after_import("sglang_rvv_compat_probe_c", late.append)  # already imported: now
    assert late == [module]
