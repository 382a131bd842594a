"""The ``sgl_kernel`` stand-in (compat/sgl_kernel.py), how it is served, and the AMX-check
wrap that goes with it (rows ``sgl_kernel`` and ``..._is_intel_amx_backend_available`` of
sglang_rvv.compat's table)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sglang_rvv import compat


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_shim_serves_sgl_kernel_and_registers_the_ops() -> None:
    res = _python(
        "import sgl_kernel, torch; print(sgl_kernel.RVV_SHIM, sgl_kernel.__file__);"
        "print(hasattr(torch.ops.sgl_kernel, 'decode_attention_cpu'))"
    )
    assert res.returncode == 0, res.stderr
    first, second = res.stdout.strip().splitlines()
    assert first.startswith("True ") and first.endswith("compat/sgl_kernel.py")
    assert second == "True"


def test_switch_off_with_env() -> None:
    res = _python("import sgl_kernel", SGLANG_RVV_SHIMS="0")
    assert res.returncode != 0
    assert "No module named 'sgl_kernel'" in res.stderr


def _python_with_real_sgl_kernel(tmp_path: Path, init: str, code: str, **env: str) -> str:
    """Runs ``code`` with a package ``sgl_kernel`` (``__init__.py``: ``init``) on the path,
    standing for a real sgl-kernel install; returns what it printed (stripped)."""
    real = tmp_path / "sgl_kernel"
    real.mkdir()
    (real / "__init__.py").write_text(init)
    res = _python(code, PYTHONPATH=str(tmp_path), **env)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout.strip()


def test_a_real_sgl_kernel_wins(tmp_path: Path) -> None:
    out = _python_with_real_sgl_kernel(
        tmp_path,
        "REAL = True\n",
        "import sgl_kernel; print(getattr(sgl_kernel, 'REAL', False), "
        "getattr(sgl_kernel, 'RVV_SHIM', False))",
    )
    assert out == "True False"


def test_finder_ignores_other_names() -> None:
    finder = compat.FINDER
    assert finder.find_spec("sgl_kernel_npu", None) is None
    assert finder.stand_in_spec("sgl_kernel.flash_attn") is None
    spec = finder.stand_in_spec("sgl_kernel")
    assert spec is not None and spec.origin is not None
    assert spec.origin.endswith("sgl_kernel.py")


def _cpu_mode_sgl_kernel_imports() -> dict[str, set[str]]:
    """Names SGLang imports from sgl_kernel under an ``if _is_cpu:`` guard, per module."""
    import sglang

    root = Path(sglang.__file__).parent
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "sgl_kernel" not in text or "_is_cpu" not in text:
            continue
        tree = ast.parse(text)
        for node in tree.body:
            if not isinstance(node, ast.If):
                continue
            branches: list[tuple[ast.expr, list[ast.stmt]]] = []
            cur: ast.stmt = node
            while isinstance(cur, ast.If):
                branches.append((cur.test, cur.body))
                cur = cur.orelse[0] if len(cur.orelse) == 1 else ast.Pass()
            for test, body in branches:
                if ast.unparse(test) != "_is_cpu":
                    continue
                for stmt in body:
                    if isinstance(stmt, ast.ImportFrom) and stmt.module == "sgl_kernel":
                        mod = ".".join(path.relative_to(root.parent).with_suffix("").parts)
                        found.setdefault(mod, set()).update(a.name for a in stmt.names)
    return found


def test_every_name_sglang_imports_in_cpu_mode_exists() -> None:
    import sgl_kernel

    wanted = _cpu_mode_sgl_kernel_imports()
    # The scan must find the ones known to be used while serving.
    names = set().union(*wanted.values())
    assert {"assign_req_to_token_pool_cpu", "copy_all_layer_kv_cache_cpu"} <= names
    missing = sorted(n for n in names if not hasattr(sgl_kernel, n))
    assert not missing, f"sgl_kernel shim lacks {missing} (imported by {wanted})"


def test_sglang_modules_that_import_it_load_in_cpu_mode() -> None:
    mods = sorted(_cpu_mode_sgl_kernel_imports())
    code = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in mods)
    res = _python(code + "print('ok')", SGLANG_USE_CPU_ENGINE="1")
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("ok")


def _assign_reference(
    r2t: torch.Tensor,
    rpi: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    locs: torch.Tensor,
) -> None:
    off = 0
    for i in range(rpi.numel()):
        n = int(end[i] - start[i])
        for j in range(n):
            r2t[int(rpi[i]), int(start[i]) + j] = int(locs[off + j])
        off += n


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("lens", [[], [0], [1], [3, 0, 5], [7, 1, 1, 2]])
def test_assign_req_to_token_pool(dtype: torch.dtype, lens: list[int]) -> None:
    import sgl_kernel

    gen = torch.Generator().manual_seed(len(lens))
    pool_len = 16
    r2t = torch.randint(0, 1000, (6, pool_len), generator=gen, dtype=dtype)
    expected = r2t.clone()
    rpi = torch.randperm(6, generator=gen)[: len(lens)].to(torch.int64)
    start = torch.tensor([i % 3 for i in range(len(lens))], dtype=torch.int64)
    end = start + torch.tensor(lens, dtype=torch.int64)
    locs = torch.randint(0, 5000, (sum(lens) + 2,), generator=gen, dtype=torch.int64)
    _assign_reference(expected, rpi, start, end, locs)
    sgl_kernel.assign_req_to_token_pool_cpu(rpi, r2t, start, end, locs, pool_len)
    assert torch.equal(r2t, expected)


def test_assign_req_to_token_pool_bad_input() -> None:
    import sgl_kernel

    r2t = torch.zeros(2, 4, dtype=torch.int32)
    one = torch.tensor([0])
    with pytest.raises(ValueError, match="exceeds pool_len=4"):
        sgl_kernel.assign_req_to_token_pool_cpu(
            one, r2t, one, torch.tensor([5]), torch.arange(5), 4
        )
    with pytest.raises(ValueError, match="out_cache_loc has 1"):
        sgl_kernel.assign_req_to_token_pool_cpu(one, r2t, one, torch.tensor([3]), one, 4)
    with pytest.raises(ValueError, match="expected \\[rows, pool_len=8\\]"):
        sgl_kernel.assign_req_to_token_pool_cpu(one, r2t, one, one, one, 8)


def test_copy_all_layer_kv_cache_moves_rows_in_every_buffer() -> None:
    import sgl_kernel

    gen = torch.Generator().manual_seed(3)
    bufs = [
        torch.randn(10, 3, 4, generator=gen),
        torch.randn(10, 2, 8, generator=gen).to(torch.bfloat16),
        torch.randint(-100, 100, (10, 5), generator=gen, dtype=torch.int8),
    ]
    expected = [b.clone() for b in bufs]
    src = torch.tensor([1, 2, 3, 4])
    tgt = torch.tensor([2, 3, 4, 9])  # overlaps its own sources: all reads come first
    for e in expected:
        e[tgt] = e[src].clone()
    ptrs = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64)
    strides = torch.tensor([b[0].numel() * b.element_size() for b in bufs], dtype=torch.int64)
    sgl_kernel.copy_all_layer_kv_cache_cpu(ptrs, strides, tgt, src)
    for b, e in zip(bufs, expected, strict=True):
        assert torch.equal(b, e)


def test_copy_all_layer_kv_cache_rejects_mismatched_lengths() -> None:
    import sgl_kernel

    with pytest.raises(ValueError, match="tgt_loc has 2 entries, src_loc 1"):
        sgl_kernel.copy_all_layer_kv_cache_cpu(
            torch.tensor([0], dtype=torch.uint64),
            torch.tensor([4]),
            torch.tensor([0, 1]),
            torch.tensor([0]),
        )


@pytest.mark.parametrize("name", ["rotate_input_ids_cpu", "verify_tree_greedy_cpu"])
def test_speculative_helpers_refuse_clearly(name: str) -> None:
    import sgl_kernel

    assert name in sgl_kernel.SPECULATIVE
    with pytest.raises(NotImplementedError, match="speculative decoding is not supported"):
        getattr(sgl_kernel, name)(torch.zeros(1))


def test_sglang_does_not_take_the_stand_in_for_sgl_kernels_amx_build() -> None:
    # rvv-ops defines sgl_kernel::convert_weight_packed, SGLang's marker of sgl-kernel's CPU
    # build; with the stand-in SGLang must not switch to its AMX code paths.
    res = _python(
        "import json, torch, rvv_ops\n"
        "from sglang.srt.utils import cpu_has_amx_support\n"
        "import sglang.srt.utils.common as c\n"
        "print(json.dumps([cpu_has_amx_support(), c._is_intel_amx_backend_available(),"
        " hasattr(torch.ops.sgl_kernel, 'convert_weight_packed'),"
        " getattr(c._is_intel_amx_backend_available, '_sglang_rvv', False)]))",
        SGLANG_USE_CPU_ENGINE="1",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    amx, backend, _, wrapped = json.loads(res.stdout.strip().splitlines()[-1])
    assert wrapped is True
    assert amx is False and backend is False


def test_a_real_sgl_kernel_keeps_sglangs_own_amx_check(tmp_path: Path) -> None:
    out = _python_with_real_sgl_kernel(
        tmp_path,
        "import rvv_ops  # stands for sgl-kernel's CPU build\n",
        "import json, torch\n"
        "import sglang.srt.utils.common as c\n"
        "print(json.dumps([c._is_intel_amx_backend_available(),"
        " hasattr(torch.ops.sgl_kernel, 'convert_weight_packed')]))",
        SGLANG_USE_CPU_ENGINE="1",
    )
    backend, has_op = json.loads(out.splitlines()[-1])
    assert backend == has_op  # SGLang's own answer: the op's presence
