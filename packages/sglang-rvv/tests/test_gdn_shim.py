"""``sgl_kernel.mamba`` of the stand-in (compat/sgl_kernel_mamba.py): SGLang 0.5.23's Gated
DeltaNet code (Qwen3-Next, Qwen3.5) imports its names in CPU mode, and a call made as
SGLang makes it matches a float64 torch reference."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import torch
import torch.nn.functional as F


def _sglang_mamba_imports() -> set[str]:
    """Every name SGLang imports from ``sgl_kernel.mamba``."""
    spec = importlib.util.find_spec("sglang")  # the sources only: sglang is not imported
    assert spec is not None and spec.submodule_search_locations
    names: set[str] = set()
    for path in Path(next(iter(spec.submodule_search_locations))).rglob("*.py"):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "sgl_kernel.mamba" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module == "sgl_kernel.mamba":
                names.update(a.name for a in node.names)
    return names


def test_sgl_kernel_mamba_names_sglang_imports() -> None:
    import sgl_kernel.mamba

    assert sgl_kernel.mamba.__file__ is not None
    assert sgl_kernel.mamba.__file__.endswith("compat/sgl_kernel_mamba.py")
    wanted = _sglang_mamba_imports()
    assert {
        "causal_conv1d_fn_cpu",
        "causal_conv1d_update_cpu",
        "chunk_gated_delta_rule_cpu",
    } <= wanted
    missing = sorted(n for n in wanted if not hasattr(sgl_kernel.mamba, n))
    assert not missing, f"sgl_kernel.mamba stand-in lacks {missing}"


def _conv_ref(
    x: torch.Tensor, hist: torch.Tensor, w: torch.Tensor, b: torch.Tensor
) -> torch.Tensor:
    """x [dim, len], hist [dim, width - 1]: SiLU(depthwise conv) by F.conv1d, float64."""
    full = torch.cat([hist, x], 1)[None]
    return F.silu(F.conv1d(full, w[:, None, :], b, groups=w.shape[0]))[0]


def test_conv_wrappers_match_torch() -> None:
    from sgl_kernel.mamba import causal_conv1d_fn_cpu, causal_conv1d_update_cpu

    gen = torch.Generator().manual_seed(0)
    dim, width, lens = 24, 4, [5, 2]
    x = torch.randn(sum(lens), dim, generator=gen)
    w, b = torch.randn(dim, width, generator=gen), torch.randn(dim, generator=gen)
    states = torch.randn(4, dim, width - 1, generator=gen)
    before = states.clone()
    qsl = torch.tensor([0, 5, 7], dtype=torch.int32)
    idx = torch.tensor([3, 1], dtype=torch.int32)
    init = torch.tensor([False, True])
    # as gdn_backend._convolve_prefill calls it
    out = causal_conv1d_fn_cpu(
        x.transpose(0, 1), w, b, activation="silu", conv_states=states,
        has_initial_state=init, cache_indices=idx, query_start_loc=qsl, seq_lens_cpu=lens,
    ).transpose(0, 1)  # fmt: skip
    d = torch.float64
    want0 = _conv_ref(x[:5].t().to(d), torch.zeros(dim, width - 1, dtype=d), w.to(d), b.to(d))
    want1 = _conv_ref(x[5:].t().to(d), before[1].to(d), w.to(d), b.to(d))
    torch.testing.assert_close(out[:5].to(d), want0.t(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[5:].to(d), want1.t(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(states[3], x[2:5].t())
    torch.testing.assert_close(states[1], torch.cat([before[1][:, 2:], x[5:].t()], 1))
    # a decode step, as gdn_backend's forward_decode calls it
    step = torch.randn(2, dim, generator=gen)
    prev = states.clone()
    o = causal_conv1d_update_cpu(step, states, w, b, "silu", conv_state_indices=idx)
    for i, s in enumerate([3, 1]):
        want = _conv_ref(step[i, :, None].to(d), prev[s].to(d), w.to(d), b.to(d))[:, 0]
        torch.testing.assert_close(o[i].to(d), want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(states[s], torch.cat([prev[s][:, 1:], step[i, :, None]], 1))


def test_chunk_wrapper_matches_recurrence() -> None:
    from sgl_kernel.mamba import chunk_gated_delta_rule_cpu

    gen = torch.Generator().manual_seed(1)
    T, H, HV, K, V = 6, 1, 2, 8, 4
    q, k = torch.randn(1, T, H, K, generator=gen), torch.randn(1, T, H, K, generator=gen)
    v = torch.randn(1, T, HV, V, generator=gen)
    g, beta = -torch.rand(1, T, HV, generator=gen), torch.rand(1, T, HV, generator=gen)
    pool = torch.randn(3, HV, V, K, generator=gen)
    s0 = pool[2].to(torch.float64).clone()
    # as TritonGDNKernel.extend calls it on CPU
    out, last, h = chunk_gated_delta_rule_cpu(
        q=q, k=k, v=v, g=g, beta=beta, initial_state=pool,
        cu_seqlens=torch.tensor([0, T], dtype=torch.int32), head_first=False,
        use_qk_l2norm_in_kernel=True, initial_state_indices=torch.tensor([2], dtype=torch.int32),
    )  # fmt: skip
    assert h is None and out.shape == (1, T, HV, V)
    d = torch.float64
    qn, kn = F.normalize(q[0].to(d), dim=-1), F.normalize(k[0].to(d), dim=-1)
    S = s0
    for t in range(T):
        for hv in range(HV):
            S[hv] = S[hv] * torch.exp(g[0, t, hv].to(d))
            S[hv] += beta[0, t, hv].to(d) * torch.outer(
                v[0, t, hv].to(d) - S[hv] @ kn[t, 0], kn[t, 0]
            )
            want = (S[hv] @ qn[t, 0]) * K**-0.5
            torch.testing.assert_close(out[0, t, hv].to(d), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(pool[2].to(d), S, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(last[0].to(d), S, rtol=1e-5, atol=1e-5)
