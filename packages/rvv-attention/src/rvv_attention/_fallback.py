"""The torch-native implementation: correct for every case, batched, fp32 arithmetic.

Each call gathers every request's keys at once into a padded ``[B, L, Hkv, D]`` block
(one ``gather`` on the request table, one index into the cache), masks the padding, the
causal part and the window, and runs one pair of fp32 matmuls per query chunk - no
Python loop over requests. The numbers follow the kernels: scores ``sm_scale * q.k`` in
fp32, optional ``cap * tanh(s / cap)``, a softmax whose denominator also holds
``exp(sink)``, zeros for a query that sees no key, and the result rounded once to the
output's dtype.

The calls arrive as the records of :mod:`rvv_attention._batch`, already checked by the
public entry points. The window convention is the kernels': ``window = 0`` none,
``window = W + 1`` keeps keys at positions ``>= pos - W``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rvv_attention._batch import Batch, DecodeBatch, ExtendBatch
from rvv_attention._cache import dequantize, write_rows

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
    bias: Tensor | None = None,
) -> Tensor:
    """Masked attention in fp32 for a padded batch.

    ``q [B, M, Hq, D]``, ``k [B, L, Hkv, D]``, ``v [B, L, Hkv, Dv]`` (fp32), ``mask
    [B, M, L]`` or, per query head, ``[B, Hq, M, L]`` (True = attend); ``bias [B, Hq, M,
    L]``: added to the (capped) scores. Returns fp32 ``[B, M, Hq, Dv]``; rows with no key
    are 0.
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
    if bias is not None:
        s = s + bias.reshape(s.shape)
    per_head = mask.reshape(s.shape) if mask.dim() == 4 else mask[:, None, None, :, :]
    s = s.masked_fill(~per_head, float("-inf"))
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


def _check_loc(b: Batch) -> None:
    """The rows new K/V go to are rows of the cache (checked before anything is written)."""
    loc, tokens = b.loc, b.cache.tokens
    if not (b.writes and loc is not None and loc.numel()):
        return
    if int(loc.min()) < 0 or int(loc.max()) >= tokens:
        raise ValueError(
            f"{b.OP}: {b.LOC} has entries outside [0, {tokens}) (rows of the KV cache): "
            f"{loc.tolist()}"
        )


def _write(b: Batch) -> None:
    """Writes the new K/V into the cache, when the call has them."""
    if b.writes:
        assert b.loc is not None and b.k is not None and b.v is not None
        write_rows(b.cache, b.loc, b.k, b.v)


def _request_table(b: Batch) -> Tensor:
    """Each request's row of ``req_to_token`` (int64), the indices checked."""
    idx = b.req_pool_indices.to(torch.int64)
    n = b.req_to_token.shape[0]
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise ValueError(
            f"{b.OP}: req_pool_indices has entries outside [0, {n}) (rows of req_to_token): "
            f"{idx.tolist()}"
        )
    return b.req_to_token[idx].to(torch.int64)


def _keys(b: Batch) -> tuple[Tensor, Tensor, Tensor]:
    """Where each request's keys are: ``(rows [B, L], j [L], valid [B, L])``, the cache rows
    of key slot ``j`` (0 where not valid). Self-attention: the positions ``[e, e +
    seq_lens[b])`` of the request's ``req_to_token`` row, ``e = encoder_lens[b]`` (0
    without encoder_lens); cross-attention: the encoder tokens ``[0, encoder_lens[b])``."""
    dev = b.q.device
    table = _request_table(b)
    lens = b.seq_lens.to(device=dev, dtype=torch.int64)
    enc = torch.zeros_like(lens)
    if b.encoder_lens is not None:
        enc = b.encoder_lens.to(device=dev, dtype=torch.int64)
    start, count = (torch.zeros_like(lens), enc) if b.cross_attention else (enc, lens)
    j = torch.arange(int(count.max()), device=dev)
    valid = j[None, :] < count[:, None]
    return _rows(b, table, start[:, None] + j[None, :], valid), j, valid


def _rows(b: Batch, table: Tensor, cols: Tensor, valid: Tensor) -> Tensor:
    """Cache rows ``table[r, cols[r, c]]`` for valid (r, c), 0 elsewhere; checks ranges."""
    width = table.shape[1]
    if bool(valid.any()):
        bad = valid & ((cols < 0) | (cols >= width))
        if bool(bad.any()):
            r, c = (int(x) for x in bad.nonzero()[0])
            raise ValueError(
                f"{b.OP}: request {r} needs position {int(cols[r, c])} of its req_to_token "
                f"row, which has {width} columns"
            )
    rows = table.gather(1, cols.clamp(0, max(width - 1, 0))) if width else cols.clamp(0, 0)
    rows = torch.where(valid, rows.to(torch.int64), torch.zeros_like(cols))
    if bool(valid.any()):
        bad = valid & ((rows < 0) | (rows >= b.cache.tokens))
        if bool(bad.any()):
            r, c = (int(x) for x in bad.nonzero()[0])
            raise ValueError(
                f"{b.OP}: req_to_token gives row {int(rows[r, c])} for request {r}, position "
                f"{int(cols[r, c])}; expected a row in [0, {b.cache.tokens}) of the KV cache"
            )
    return rows


def decode(b: DecodeBatch) -> None:
    """Decode in torch: see :func:`rvv_attention.decode` for the semantics."""
    # As in the kernels, everything is checked before anything is written.
    if b.writes and b.seq_lens.numel() and int(b.seq_lens.min()) < 1:
        raise ValueError(
            f"decode: seq_lens {b.seq_lens.tolist()} has an entry < 1, but key/value were "
            "given: seq_lens counts the new token"
        )
    _check_loc(b)
    if b.q.shape[0] == 0:
        _write(b)
        return
    rows, j, valid = _keys(b)
    _write(b)
    if j.numel() == 0:
        b.out.zero_()
        return
    kf, vf = dequantize(b.cache, rows)
    mask = valid
    if b.window > 0 and not b.cross_attention:
        last = b.seq_lens.to(device=j.device, dtype=torch.int64) - 1  # the query's slot
        mask = mask & (j[None, :] > (last - b.window)[:, None])
    res = attend(
        b.q.to(torch.float32).unsqueeze(1),
        kf,
        vf,
        mask.unsqueeze(1),
        sm_scale=b.sm_scale,
        logit_cap=b.logit_cap,
        sinks=b.sinks,
    )
    b.out.copy_(res.squeeze(1).to(b.out.dtype))


def extend(b: ExtendBatch) -> None:
    """Extend in torch: see :func:`rvv_attention.extend` for the semantics."""
    _check_loc(b)
    q, k, v, out = b.q, b.k, b.v, b.out
    batch, n = b.seq_lens.shape[0], q.shape[0]
    if batch == 0 or n == 0:
        _write(b)
        return
    dev = q.device
    lens = b.seq_lens.to(device=dev, dtype=torch.int64)
    ext = b.extend_seq_lens.to(device=dev, dtype=torch.int64)
    first = b.extend_start_loc.to(device=dev, dtype=torch.int64)
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

    rows, jk, kvalid = _keys(b)
    _write(b)
    if m_max == 0:
        return
    kf, vf = dequantize(b.cache, rows)
    if not b.cross_attention:
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
    per_query = max(1, batch * hq * max(jk.numel(), 1) * 4 * 2)
    chunk = max(1, min(m_max, _SCORE_BUDGET // per_query))
    for i0 in range(0, m_max, chunk):
        i = torch.arange(i0, min(m_max, i0 + chunk), device=dev)
        qvalid = i[None, :] < ext[:, None]  # [B, m]
        qrow = (first[:, None] + i[None, :]).clamp(0, n - 1)
        qf = q[qrow].to(torch.float32)  # [B, m, Hq, D]
        mask = qvalid[:, :, None] & kvalid[:, None, :]
        if not b.cross_attention:
            pos = prefix[:, None] + i[None, :]  # [B, m]
            if b.causal:
                mask = mask & (jk[None, None, :] <= pos[..., None])
            if b.window > 0:
                mask = mask & (jk[None, None, :] > (pos - b.window)[..., None])
        res = attend(qf, kf, vf, mask, sm_scale=b.sm_scale, logit_cap=b.logit_cap, sinks=b.sinks)
        dst = qrow[qvalid]
        out.index_copy_(0, dst, res[qvalid].to(out.dtype).reshape(-1, hq, dv))
