"""The torch-native implementation: correct for every case, batched, fp32 arithmetic.

Each call gathers every request's keys at once into a padded ``[B, L, Hkv, D]`` block
(one ``gather`` on the request table, one index into the cache), masks the padding, the
causal part and the window, and runs one pair of fp32 matmuls per query chunk - no
Python loop over requests. The numbers follow the kernels: scores ``sm_scale * q.k`` in
fp32, optional ``cap * tanh(s / cap)``, a softmax whose denominator also holds
``exp(sink)``, zeros for a query that sees no key, and the result rounded once to the
output's dtype.

Window convention here is the kernels': ``window = 0`` none, ``window = W + 1`` keeps
keys at positions ``>= pos - W``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rvv_attention._cache import KVCache, dequantize, write_rows

# Bytes of fp32 scores one chunk of queries may take; bounds the fallback's peak memory.
_SCORE_BUDGET = 64 << 20


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor,
    *,
    sm_scale: float,
    logit_cap: float,
    sinks: Tensor | None,
) -> Tensor:
    """Masked attention in fp32 for a padded batch.

    ``q [B, M, Hq, D]``, ``k [B, L, Hkv, D]``, ``v [B, L, Hkv, Dv]`` (fp32), ``mask
    [B, M, L]`` (True = attend). Returns fp32 ``[B, M, Hq, Dv]``; rows with no key are 0.
    """
    b, m, hq, d = q.shape
    hkv = k.shape[2]
    g = hq // hkv
    qh = q.reshape(b, m, hkv, g, d).permute(0, 2, 3, 1, 4)  # [B, Hkv, G, M, D]
    kh = k.permute(0, 2, 3, 1).unsqueeze(2)  # [B, Hkv, 1, D, L]
    vh = v.permute(0, 2, 1, 3).unsqueeze(2)  # [B, Hkv, 1, L, Dv]
    s = torch.matmul(qh, kh) * sm_scale  # [B, Hkv, G, M, L]
    if logit_cap > 0:
        s = torch.tanh(s / logit_cap) * logit_cap
    s = s.masked_fill(~mask[:, None, None, :, :], float("-inf"))
    mx = s.amax(dim=-1, keepdim=True) if s.shape[-1] else s.new_full((*s.shape[:-1], 1), -1e30)
    sink = None
    if sinks is not None:
        sink = sinks.to(torch.float32).reshape(1, hkv, g, 1, 1)
        mx = torch.maximum(mx, sink)
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    p = torch.exp(s - mx)
    denom = p.sum(dim=-1, keepdim=True)
    if sink is not None:
        denom = denom + torch.exp(sink - mx)
    o = torch.matmul(p, vh)  # [B, Hkv, G, M, Dv]
    o = torch.where(denom > 0, o / torch.where(denom > 0, denom, 1.0), torch.zeros_like(o))
    return o.permute(0, 3, 1, 2, 4).reshape(b, m, hq, v.shape[-1])


def _rows(
    cache: KVCache, table: Tensor, cols: Tensor, valid: Tensor, what: str
) -> tuple[Tensor, Tensor]:
    """Cache rows ``table[b, cols[b, j]]`` for valid (b, j), 0 elsewhere; checks ranges."""
    width = table.shape[1]
    if bool(valid.any()):
        bad = valid & ((cols < 0) | (cols >= width))
        if bool(bad.any()):
            b, j = (int(x) for x in bad.nonzero()[0])
            raise ValueError(
                f"{what}: request {b} needs position {int(cols[b, j])} of its req_to_token row, "
                f"which has {width} columns"
            )
    rows = table.gather(1, cols.clamp(0, max(width - 1, 0))) if width else cols.clamp(0, 0)
    rows = torch.where(valid, rows.to(torch.int64), torch.zeros_like(cols))
    if bool(valid.any()):
        bad = valid & ((rows < 0) | (rows >= cache.tokens))
        if bool(bad.any()):
            b, j = (int(x) for x in bad.nonzero()[0])
            raise ValueError(
                f"{what}: req_to_token gives row {int(rows[b, j])} for request {b}, position "
                f"{int(cols[b, j])}; expected a row in [0, {cache.tokens}) of the KV cache"
            )
    return rows, valid


def _check_loc(what: str, name: str, loc: Tensor, cache: KVCache) -> None:
    if loc.numel() and (int(loc.min()) < 0 or int(loc.max()) >= cache.tokens):
        raise ValueError(
            f"{what}: {name} has entries outside [0, {cache.tokens}) (rows of the KV cache): "
            f"{loc.tolist()}"
        )


def _request_table(req_to_token: Tensor, req_pool_indices: Tensor, what: str) -> Tensor:
    idx = req_pool_indices.to(torch.int64)
    n = req_to_token.shape[0]
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise ValueError(
            f"{what}: req_pool_indices has entries outside [0, {n}) (rows of req_to_token): "
            f"{idx.tolist()}"
        )
    return req_to_token[idx].to(torch.int64)


def decode(
    q: Tensor,
    cache: KVCache,
    out: Tensor,
    req_to_token: Tensor,
    req_pool_indices: Tensor,
    seq_lens: Tensor,
    *,
    sm_scale: float,
    loc: Tensor | None,
    key: Tensor | None,
    value: Tensor | None,
    logit_cap: float,
    window: int,
    sinks: Tensor | None,
    cross_attention: bool,
    encoder_lens: Tensor | None,
) -> None:
    """Decode in torch: see :func:`rvv_attention.decode` for the semantics."""
    write = key is not None and value is not None and loc is not None
    # As in the kernels, everything is checked before anything is written.
    if write:
        assert loc is not None
        if seq_lens.numel() and int(seq_lens.min()) < 1:
            raise ValueError(
                f"decode: seq_lens {seq_lens.tolist()} has an entry < 1, but key/value were "
                "given: seq_lens counts the new token"
            )
        _check_loc("decode", "loc", loc, cache)
    batch = q.shape[0]
    if batch == 0:
        if write:
            write_rows(cache, loc, key, value)  # type: ignore[arg-type]
        return
    dev = q.device
    table = _request_table(req_to_token, req_pool_indices, "decode")
    lens = seq_lens.to(device=dev, dtype=torch.int64)
    enc = (
        encoder_lens.to(device=dev, dtype=torch.int64)
        if encoder_lens is not None
        else torch.zeros_like(lens)
    )
    if cross_attention:
        start, count = torch.zeros_like(lens), enc
    else:
        start, count = enc, lens
    width = int(count.max())
    j = torch.arange(width, device=dev)
    valid = j[None, :] < count[:, None]
    rows, _ = _rows(cache, table, start[:, None] + j[None, :], valid, "decode")
    if write:
        write_rows(cache, loc, key, value)  # type: ignore[arg-type]
    if width == 0:
        out.zero_()
        return
    kf, vf = dequantize(cache, rows)
    mask = valid
    if window > 0 and not cross_attention:
        mask = mask & (j[None, :] > (count - 1 - window)[:, None])
    res = attend(
        q.to(torch.float32).unsqueeze(1),
        kf,
        vf,
        mask.unsqueeze(1),
        sm_scale=sm_scale,
        logit_cap=logit_cap,
        sinks=sinks,
    )
    out.copy_(res.squeeze(1).to(out.dtype))


def extend(
    q: Tensor,
    k: Tensor | None,
    v: Tensor | None,
    cache: KVCache,
    out: Tensor,
    req_to_token: Tensor,
    req_pool_indices: Tensor,
    seq_lens: Tensor,
    extend_seq_lens: Tensor,
    extend_start_loc: Tensor,
    *,
    out_cache_loc: Tensor | None,
    sm_scale: float,
    causal: bool,
    logit_cap: float,
    window: int,
    sinks: Tensor | None,
    cross_attention: bool,
    encoder_lens: Tensor | None,
) -> None:
    """Extend in torch: see :func:`rvv_attention.extend` for the semantics."""
    write = out_cache_loc is not None and k is not None and v is not None
    if write:
        assert out_cache_loc is not None
        _check_loc("extend", "out_cache_loc", out_cache_loc, cache)
    batch, n = seq_lens.shape[0], q.shape[0]
    if batch == 0 or n == 0:
        if write:
            write_rows(cache, out_cache_loc, k, v)  # type: ignore[arg-type]
        return
    dev = q.device
    table = _request_table(req_to_token, req_pool_indices, "extend")
    lens = seq_lens.to(device=dev, dtype=torch.int64)
    ext = extend_seq_lens.to(device=dev, dtype=torch.int64)
    first = extend_start_loc.to(device=dev, dtype=torch.int64)
    enc = (
        encoder_lens.to(device=dev, dtype=torch.int64)
        if encoder_lens is not None
        else torch.zeros_like(lens)
    )
    if bool((ext < 0).any()) or bool((ext > lens).any()):
        raise ValueError(
            f"extend: extend_seq_lens {ext.tolist()} must be in [0, seq_lens] "
            f"(seq_lens {lens.tolist()})"
        )
    if bool(((first < 0) | (first + ext > n)).any()):
        raise ValueError(
            f"extend: extend_start_loc {first.tolist()} with extend_seq_lens {ext.tolist()} "
            f"reaches outside the {n} rows of q"
        )
    m_max = int(ext.max())
    prefix = lens - ext

    if cross_attention:
        kstart, kcount = torch.zeros_like(enc), enc
    else:
        kstart, kcount = enc, lens
    width = int(kcount.max())
    jk = torch.arange(width, device=dev)
    kvalid = jk[None, :] < kcount[:, None]
    rows, _ = _rows(cache, table, kstart[:, None] + jk[None, :], kvalid, "extend")
    if write:
        write_rows(cache, out_cache_loc, k, v)  # type: ignore[arg-type]
    if m_max == 0:
        return
    kf, vf = dequantize(cache, rows)
    if not cross_attention:
        new = (jk[None, :] >= prefix[:, None]) & kvalid  # [B, L]: the new tokens' slots
        if k is not None and v is not None:
            src = (first[:, None] + (jk[None, :] - prefix[:, None])).clamp(0, n - 1)
            kf = torch.where(new[..., None, None], k[src].to(torch.float32), kf)
            vf = torch.where(new[..., None, None], v[src].to(torch.float32), vf)
        else:
            # The kernels hand KV-shared layers' new tokens over in the query's dtype.
            kf = torch.where(new[..., None, None], kf.to(q.dtype).to(torch.float32), kf)
            vf = torch.where(new[..., None, None], vf.to(q.dtype).to(torch.float32), vf)

    hq, dv = q.shape[1], vf.shape[-1]
    per_query = max(1, batch * hq * max(width, 1) * 4 * 2)
    chunk = max(1, min(m_max, _SCORE_BUDGET // per_query))
    for i0 in range(0, m_max, chunk):
        i = torch.arange(i0, min(m_max, i0 + chunk), device=dev)
        qvalid = i[None, :] < ext[:, None]  # [B, m]
        qrow = (first[:, None] + i[None, :]).clamp(0, n - 1)
        qf = q[qrow].to(torch.float32)  # [B, m, Hq, D]
        mask = qvalid[:, :, None] & kvalid[:, None, :]
        if not cross_attention:
            pos = prefix[:, None] + i[None, :]  # [B, m]
            if causal:
                mask = mask & (jk[None, None, :] <= pos[..., None])
            if window > 0:
                mask = mask & (jk[None, None, :] > (pos - window)[..., None])
        res = attend(qf, kf, vf, mask, sm_scale=sm_scale, logit_cap=logit_cap, sinks=sinks)
        dst = qrow[qvalid]
        out.index_copy_(0, dst, res[qvalid].to(out.dtype).reshape(-1, hq, dv))
