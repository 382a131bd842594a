"""Scratch buffers with stable storage (the split-KV decode's ``attn_logits``)."""

from __future__ import annotations

import threading

import torch
from torch import Tensor


class ScratchPool:
    """Hands out fp32 scratch tensors keyed by shape, dtype and device.

    The same request gets the same tensor (same storage, same ``data_ptr()``) every time, so
    a captured CPU graph or a ``torch.compile``'d region that replays a decode step sees the
    pointers it recorded. The contents are undefined between calls: the kernels overwrite
    what they read. One pool serves one process; calls from several threads at once must
    not share a buffer (each thread would need its own pool: ``ScratchPool()``).
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple[tuple[int, ...], torch.dtype, torch.device], Tensor] = {}
        self._lock = threading.Lock()

    def get(
        self,
        shape: tuple[int, ...],
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> Tensor:
        """The pool's contiguous tensor of this shape, dtype and device (created on first use)."""
        key = (tuple(int(s) for s in shape), dtype, torch.device(device))
        buf = self._buffers.get(key)
        if buf is None:
            with self._lock:
                buf = self._buffers.get(key)
                if buf is None:
                    buf = torch.empty(key[0], dtype=dtype, device=key[2])
                    self._buffers[key] = buf
        return buf

    def attn_logits(
        self, batch: int, heads: int, num_splits: int, v_head_dim: int, device: torch.device | str
    ) -> Tensor:
        """fp32 ``[batch, heads, num_splits, v_head_dim + 1]``: the decode kernels' scratch."""
        return self.get((batch, heads, num_splits, v_head_dim + 1), device=device)

    def nbytes(self) -> int:
        """Bytes held by the pool."""
        return sum(b.numel() * b.element_size() for b in self._buffers.values())

    def __len__(self) -> int:
        return len(self._buffers)

    def clear(self) -> None:
        """Drops every buffer (the next request of each shape allocates a new one)."""
        with self._lock:
            self._buffers.clear()


scratch = ScratchPool()
"""The process-wide pool the decode path takes ``attn_logits`` from."""


DEFAULT_KV_HEADS_PER_TASK = 2
"""KV heads per decode stage-1 task when rvv_ops cannot say (rvv-kernels'
``kDecodeKvHeadsPerTask`` when this was written)."""


def num_splits(
    batch: int, kv_heads: int, threads: int, *, kv_heads_per_task: int | None = None
) -> int:
    """How many ways the decode kernel splits each request's keys.

    Stage 1 runs ``batch * ceil(kv_heads / kv_heads_per_task) * num_splits`` tasks (a task
    takes up to ``kv_heads_per_task`` KV heads of one request and split; by default the
    loaded kernels' ``build_info()["decode_kv_heads_per_task"]``, or
    ``DEFAULT_KV_HEADS_PER_TASK`` without them); this aims at two tasks per thread and
    caps the split count at 16 (each split's partial result costs a merge). It depends on
    the shape and the thread count only, never on sequence lengths, so the scratch shape
    (and pointer) is stable for a captured batch size.
    """
    if kv_heads_per_task is None:
        from rvv_attention import _kernel

        kv_heads_per_task = _kernel.decode_kv_heads_per_task()
    if kv_heads_per_task < 1:
        raise ValueError(f"num_splits: kv_heads_per_task={kv_heads_per_task}; expected >= 1")
    work = max(1, batch * -(-kv_heads // kv_heads_per_task))
    return max(1, min(16, -(-2 * max(1, threads) // work)))
