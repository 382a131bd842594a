"""A minimal decoding loop over a paged KV cache, with only rvv_attention and torch.

    python docs/examples/paged_decode.py [--steps 16] [--kv-dtype bf16|fp8|int8]

A toy one-layer attention "model" with random weights serves three requests of different
prompt lengths at once: a page allocator hands out 16-token pages of one KV cache, a
request table maps each request's positions to cache rows (SGLang's ``req_to_token``),
the prompts are prefilled together with ``rvv_attention.extend`` and then every step
decodes one token per request with ``rvv_attention.decode``, which writes the new K/V
into the pages. At the end the generated tokens are checked against a dense recomputation
with ``rvv_attention.attention`` over the same (dequantised) keys and values.
"""

from __future__ import annotations

import argparse

import rvv_attention as ra
import torch
from torch import Tensor

PAGE = 16  # tokens per page
VOCAB, HEADS, KV_HEADS, HEAD_DIM = 64, 6, 2, 32


class Pages:
    """A free list of cache pages; a request's table row lists its pages' token rows."""

    def __init__(self, num_pages: int) -> None:
        self.free = list(range(num_pages))

    def allocate(self, table_row: Tensor, have: int, need: int) -> None:
        """Extends a request's table row from `have` to `need` tokens, page by page."""
        for pos in range(have, need):
            if pos % PAGE == 0:
                page = self.free.pop(0)
                table_row[pos : pos + PAGE] = torch.arange(page * PAGE, (page + 1) * PAGE)


class ToyModel:
    """Embedding -> one attention layer (GQA) -> vocabulary projection; random weights."""

    def __init__(self, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        d = HEADS * HEAD_DIM
        self.embed = torch.randn(VOCAB, d, generator=g)
        self.wq = torch.randn(d, HEADS * HEAD_DIM, generator=g) / d**0.5
        self.wk = torch.randn(d, KV_HEADS * HEAD_DIM, generator=g) / d**0.5
        self.wv = torch.randn(d, KV_HEADS * HEAD_DIM, generator=g) / d**0.5
        self.wo = torch.randn(HEADS * HEAD_DIM, VOCAB, generator=g) / d**0.5

    def qkv(self, tokens: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x = self.embed[tokens]
        q = (x @ self.wq).view(-1, HEADS, HEAD_DIM)
        k = (x @ self.wk).view(-1, KV_HEADS, HEAD_DIM)
        v = (x @ self.wv).view(-1, KV_HEADS, HEAD_DIM)
        return q, k, v

    def logits(self, attn: Tensor) -> Tensor:
        return attn.reshape(attn.shape[0], -1).float() @ self.wo


def make_cache(tokens: int, kv_dtype: str) -> ra.KVCache:
    shape = (tokens, KV_HEADS, HEAD_DIM)
    if kv_dtype == "int8":
        return ra.KVCache(
            torch.zeros(shape, dtype=torch.int8),
            torch.zeros(shape, dtype=torch.int8),
            k_scales=torch.zeros(tokens, KV_HEADS),
            v_scales=torch.zeros(tokens, KV_HEADS),
        )
    if kv_dtype == "fp8":
        fp8 = torch.float8_e4m3fn
        return ra.KVCache(
            torch.zeros(shape, dtype=fp8), torch.zeros(shape, dtype=fp8), k_scale=0.05, v_scale=0.05
        )
    return ra.KVCache(torch.zeros(shape), torch.zeros(shape))


def run(steps: int = 16, kv_dtype: str = "fp32") -> list[list[int]]:
    """Generates `steps` tokens for three prompts; returns every request's tokens."""
    model = ToyModel()
    prompts = [[3, 14, 15, 9, 2, 6], [5, 35], [8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3]]
    max_len = max(len(p) for p in prompts) + steps
    pages_per_req = -(-max_len // PAGE)
    pages = Pages(num_pages=len(prompts) * pages_per_req + 1)
    cache = make_cache(len(pages.free) * PAGE, kv_dtype)
    table = torch.zeros(len(prompts), pages_per_req * PAGE, dtype=torch.int64)
    reqs = torch.arange(len(prompts))
    scale = HEAD_DIM**-0.5

    # Prefill: all prompts in one extend call; their K/V go into the pages.
    lens = torch.tensor([len(p) for p in prompts])
    for b, n in enumerate(lens.tolist()):
        pages.allocate(table[b], 0, n)
    flat = torch.tensor([t for p in prompts for t in p])
    q, k, v = model.qkv(flat)
    rows = torch.cat([table[b, :n] for b, n in enumerate(lens.tolist())])
    out = torch.empty(flat.numel(), HEADS, HEAD_DIM)
    ra.extend(q, k, v, cache, out, table, reqs, lens, lens, sm_scale=scale, out_cache_loc=rows)
    last = torch.cumsum(lens, 0) - 1
    tokens = [list(p) for p in prompts]
    next_tok = model.logits(out[last]).argmax(-1)

    # Decode: one token per request per step; decode() writes its K/V at `loc`.
    for _ in range(steps):
        for b in range(len(prompts)):
            tokens[b].append(int(next_tok[b]))
            pages.allocate(table[b], int(lens[b]), int(lens[b]) + 1)
        lens = lens + 1
        loc = table[reqs, lens - 1]
        q, k, v = model.qkv(next_tok)
        out = torch.empty(len(prompts), HEADS, HEAD_DIM)
        ra.decode(q, cache, out, table, reqs, lens, sm_scale=scale, loc=loc, key=k, value=v)
        next_tok = model.logits(out).argmax(-1)

    check_against_dense(model, cache, table, tokens, steps)
    return tokens


def dequantised(cache: ra.KVCache, rows: Tensor) -> tuple[Tensor, Tensor]:
    if cache.kind == "fp8":  # torch 2.6 cannot index fp8 tensors: go through their bytes
        k = cache.k.view(torch.uint8)[rows].view(cache.dtype).float()
        v = cache.v.view(torch.uint8)[rows].view(cache.dtype).float()
    else:
        k, v = cache.k[rows].float(), cache.v[rows].float()
    if cache.kind == "int8":
        assert cache.k_scales is not None and cache.v_scales is not None
        return k * cache.k_scales[rows, :, None], v * cache.v_scales[rows, :, None]
    if cache.kind == "fp8":
        return k * cache.k_scale, v * cache.v_scale
    return k, v


def check_against_dense(
    model: ToyModel, cache: ra.KVCache, table: Tensor, tokens: list[list[int]], steps: int
) -> None:
    """Each generated token must be the argmax of dense attention over the cache's K/V."""
    for b, toks in enumerate(tokens):
        n = len(toks) - 1  # the last token's K/V were never needed
        k, v = dequantised(cache, table[b, :n])
        q, _, _ = model.qkv(torch.tensor(toks[:n]))
        dense = ra.attention(
            q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None]
        )[0].transpose(0, 1)
        want = model.logits(dense).argmax(-1)
        got = torch.tensor(toks[1 : n + 1])
        start = n - steps  # the prompt's last position predicts the first generated token
        if not torch.equal(want[start:], got[start:]):
            raise AssertionError(
                f"request {b}: paged {got[start:].tolist()} != dense {want[start:].tolist()}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=16, help="tokens to generate per request")
    parser.add_argument(
        "--kv-dtype", choices=("fp32", "fp8", "int8"), default="fp32", help="KV cache storage"
    )
    args = parser.parse_args()
    for b, toks in enumerate(run(args.steps, args.kv_dtype)):
        print(f"request {b}: {toks}")
    kv = {"fp32": torch.float32, "fp8": torch.float8_e4m3fn, "int8": torch.int8}[args.kv_dtype]
    features = {"kv_write"} | ({f"{args.kv_dtype}_kv"} if args.kv_dtype != "fp32" else set())
    sel = ra.select(
        "decode", q_dtype=torch.float32, kv_dtype=kv, head_dim=HEAD_DIM, features=features
    )
    print(f"decode ran on: {sel.impl.name}" + (f" ({sel.reason})" if sel.reason else ""))
    print("matches dense attention over the same cache: yes")


if __name__ == "__main__":
    main()
