"""Bad arguments to the attention ops: the documented exception type, a message naming the
argument and its value, and nothing written (caches, scales and outputs keep every bit).

Each case runs on CPU tensors (the C++ checks) and, where the check depends neither on
memory layout nor on index values, on meta tensors too (the Meta kernels, used by
torch.compile tracing). Unsupported features raise NotImplementedError starting with
"rvv_ops: unsupported: " on both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import rvv_ops
import torch
from conformance.cases import DecodeCase, ExtendCase, make_decode, make_extend
from conformance.kvcache import same_bits
from test_attention import DECODE, DECODE_INT8, EXTEND, EXTEND_INT8
from torch import Tensor

OPS = {"decode": DECODE, "decode_int8": DECODE_INT8, "extend": EXTEND, "extend_int8": EXTEND_INT8}
Args = dict[str, Any]

# Small batches: decode B = 2 (seq_lens 3 and 5), Hq = 4, Hkv = 2, D = 16, Dv = 8, 13 cache
# rows, req_to_token [4, 8]; extend: requests (prefix, new) = (2, 3) and (0, 2), 5 rows of
# q_extend, 12 cache rows, req_to_token [4, 8].
TOKENS, TABLE_ROWS, TABLE_COLS = 13, 4, 8


def base(kind: str, device: str) -> Args:
    cache = "int8" if kind.endswith("int8") else "same"
    if kind.startswith("decode"):
        args = make_decode(DecodeCase(lens=(3, 5), dims=(16, 8), cache=cache)).args
    else:
        args = make_extend(ExtendCase(reqs=((2, 3), (0, 2)), dims=(16, 8), cache=cache)).args
    if device != "cpu":
        args = {n: v.to(device) if isinstance(v, Tensor) else v for n, v in args.items()}
    return args


def call(kind: str, args: Args) -> None:
    op = OPS[kind]
    op(*[args[a.name] for a in op._schema.arguments])


def written(kind: str) -> list[str]:
    return [a.name for a in OPS[kind]._schema.arguments if a.alias_info and a.alias_info.is_write]


Mutation = Callable[[Args], None]


def put(name: str, make: Callable[[Args], Any]) -> Mutation:
    """Replaces argument `name` by make(args)."""

    def mutate(args: Args) -> None:
        args[name] = make(args)

    return mutate


def put_entry(name: str, index: tuple[int, ...], value: int) -> Mutation:
    """Sets one element of an index tensor (a copy of it)."""

    def mutate(args: Args) -> None:
        t = args[name].clone()
        t[index] = value
        args[name] = t

    return mutate


def table_entry(b: int, pos: int, value: int) -> Mutation:
    """Sets req_to_token at request b's position pos."""

    def mutate(args: Args) -> None:
        t = args["req_to_token"].clone()
        t[int(args["req_pool_indices"][b]), pos] = value
        args["req_to_token"] = t

    return mutate


def both(*mutations: Mutation) -> Mutation:
    def mutate(args: Args) -> None:
        for m in mutations:
            m(args)

    return mutate


@dataclass(frozen=True)
class Bad:
    kinds: tuple[str, ...]
    mutate: Mutation
    exc: type[Exception]
    words: tuple[str, ...]  # in the message: the argument's name and its bad value


DEC = ("decode", "decode_int8")
EXT = ("extend", "extend_int8")
ALL = DEC + EXT
F64, F32, BF16, F16, I32 = torch.float64, torch.float32, torch.bfloat16, torch.float16, torch.int32
NI = NotImplementedError


def to(dtype: torch.dtype, name: str) -> Mutation:
    return put(name, lambda a: a[name].to(dtype))


class _Index:
    """S[index] is `index`: the indices of cut(), written as in a subscript."""

    def __getitem__(self, index: Any) -> Any:
        return index


S = _Index()


def cut(name: str, index: Any) -> Mutation:
    """Replaces argument `name` by the view args[name][index]."""
    return put(name, lambda a: a[name][index])


def strided(name: str, d0: int, d1: int) -> Mutation:
    """Replaces argument `name` by a copy with the same values whose dimensions d0 and d1
    are laid out in memory the other way round."""
    return put(name, lambda a: a[name].transpose(d0, d1).contiguous().transpose(d0, d1))


CASES: dict[str, Bad] = {
    # features the kernels do not have
    "cross-attention": Bad(
        ALL,
        put("is_cross_attention", lambda a: True),
        NI,
        ("rvv_ops: unsupported: cross-attention", "is_cross_attention=True"),
    ),
    "encoder_lens": Bad(
        ALL,
        put("encoder_lens", lambda a: a["seq_lens"].clone()),
        NI,
        ("rvv_ops: unsupported: cross-attention", "encoder_lens"),
    ),
    "tree_mask": Bad(
        EXT,
        put("tree_mask", lambda a: torch.ones(4, dtype=torch.bool, device=a["q_extend"].device)),
        NI,
        ("rvv_ops: unsupported: tree_mask",),
    ),
    # query / q_extend
    "query float64": Bad(DEC, to(F64, "query"), TypeError, ("query", "torch.float64")),
    "query int32": Bad(DEC, to(I32, "query"), TypeError, ("query", "torch.int32")),
    "query 2-D": Bad(DEC, cut("query", S[0]), ValueError, ("query", "2-d")),
    "q_extend float64": Bad(EXT, to(F64, "q_extend"), TypeError, ("q_extend", "torch.float64")),
    "q_extend 4-D": Bad(EXT, cut("q_extend", S[None]), ValueError, ("q_extend", "4-d")),
    # caches
    "k_cache head_dim": Bad(
        DEC, cut("k_cache", S[..., :15]), ValueError, ("k_cache", "[13, 2, 15]", "head_dim")
    ),
    "heads not divisible": Bad(
        DEC, cut("query", S[:, :3]), ValueError, ("k_cache", "2 KV heads", "3 query heads")
    ),
    "v_cache tokens": Bad(DEC, cut("v_cache", S[:-1]), ValueError, ("v_cache", "tokens")),
    "v_buffer kv_heads": Bad(EXT, cut("v_buffer", S[:, :1]), ValueError, ("v_buffer", "kv_heads")),
    "k_cache float16": Bad(
        ("decode",), to(F16, "k_cache"), TypeError, ("k_cache", "torch.float16", "torch.bfloat16")
    ),
    "k_buffer int8": Bad(("extend",), to(torch.int8, "k_buffer"), TypeError, ("k_buffer", "int8")),
    "v_cache dtype": Bad(
        ("decode",),
        to(torch.float8_e4m3fn, "v_cache"),
        TypeError,
        ("v_cache", "torch.float8_e4m3fn", "k_cache's dtype torch.bfloat16"),
    ),
    "int8 op, bf16 cache": Bad(
        ("decode_int8",), to(BF16, "k_cache"), TypeError, ("k_cache", "torch.bfloat16", "int8")
    ),
    "int8 op, fp8 buffer": Bad(
        ("extend_int8",),
        to(torch.float8_e5m2, "k_buffer"),
        TypeError,
        ("k_buffer", "torch.float8_e5m2"),
    ),
    # scales
    "k_scale 0": Bad(("decode", "extend"), put("k_scale", lambda a: 0.0), ValueError, ("k_scale",)),
    "k_scale negative": Bad(
        ("decode", "extend"), put("k_scale", lambda a: -0.5), ValueError, ("k_scale", "-0.5")
    ),
    "k_scale nan": Bad(("decode",), put("k_scale", lambda a: float("nan")), ValueError, ("nan",)),
    "v_scale inf": Bad(
        ("extend",), put("v_scale", lambda a: float("inf")), ValueError, ("v_scale", "inf")
    ),
    "k_scale 0 as fp32": Bad(
        ("decode",), put("k_scale", lambda a: 1e-50), ValueError, ("k_scale", "1e-50")
    ),
    "v_scale beyond fp32": Bad(
        ("decode",), put("v_scale", lambda a: 1e39), ValueError, ("v_scale", "1e+39")
    ),
    "k_scale_buf bf16": Bad(
        ("decode_int8", "extend_int8"),
        to(BF16, "k_scale_buf"),
        TypeError,
        ("k_scale_buf", "torch.bfloat16", "torch.float32"),
    ),
    "v_scale_buf 1-D": Bad(
        ("decode_int8", "extend_int8"),
        cut("v_scale_buf", S[:, 0]),
        ValueError,
        ("v_scale_buf", "1-d"),
    ),
    "k_scale_buf heads": Bad(
        ("decode_int8", "extend_int8"),
        cut("k_scale_buf", S[:, :1]),
        ValueError,
        ("k_scale_buf", ", 1]", "kv_heads"),
    ),
    # outputs and scratch
    "output dtype": Bad(
        DEC, to(F32, "output"), TypeError, ("output", "torch.float32", "torch.bfloat16")
    ),
    "output head_dim_v": Bad(
        DEC,
        put("output", lambda a: torch.empty(2, 4, 9, dtype=BF16, device=a["query"].device)),
        ValueError,
        ("output", "[2, 4, 9]", "head_dim_v"),
    ),
    "o_extend dtype": Bad(EXT, to(F16, "o_extend"), TypeError, ("o_extend", "torch.float16")),
    "o_extend rows": Bad(EXT, cut("o_extend", S[:-1]), ValueError, ("o_extend", "tokens")),
    "attn_logits bf16": Bad(
        DEC, to(BF16, "attn_logits"), TypeError, ("attn_logits", "torch.bfloat16")
    ),
    "attn_logits last dim": Bad(
        DEC,
        cut("attn_logits", S[..., :8]),
        ValueError,
        ("attn_logits", "[2, 4, 8, 8]", "head_dim_v + 1"),
    ),
    "attn_logits no split": Bad(
        DEC, cut("attn_logits", S[:, :, :0]), ValueError, ("attn_logits", "num_kv_splits >= 1")
    ),
    # new K/V
    "key without value": Bad(
        DEC, put("value", lambda a: None), ValueError, ("key is a tensor but value is None",)
    ),
    "v_extend without k_extend": Bad(
        EXT,
        put("k_extend", lambda a: None),
        ValueError,
        ("k_extend is None but v_extend is a tensor",),
    ),
    "key dtype": Bad(DEC, to(F32, "key"), TypeError, ("key", "torch.float32")),
    "key heads": Bad(DEC, cut("key", S[:, :1]), ValueError, ("key", "num_kv_heads")),
    "value head_dim": Bad(DEC, cut("value", S[..., :7]), ValueError, ("value", "head_dim_v")),
    "k_extend rows": Bad(EXT, cut("k_extend", S[:4]), ValueError, ("k_extend", "tokens")),
    "v_extend dtype": Bad(EXT, to(F16, "v_extend"), TypeError, ("v_extend", "torch.float16")),
    # index tensors: dtypes and shapes
    "loc float": Bad(DEC, to(F32, "loc"), TypeError, ("loc", "torch.float32", "torch.int64")),
    "loc length": Bad(DEC, cut("loc", S[:1]), ValueError, ("loc", "[1]", "[2]")),
    "out_cache_loc length": Bad(
        ("extend_int8",), cut("out_cache_loc", S[1:]), ValueError, ("out_cache_loc", "[4]", "[5]")
    ),
    "req_to_token float": Bad(
        ALL, to(F32, "req_to_token"), TypeError, ("req_to_token", "torch.float32")
    ),
    "req_to_token 1-D": Bad(ALL, cut("req_to_token", S[0]), ValueError, ("req_to_token", "1-d")),
    "req_pool_indices float": Bad(
        ALL, to(F32, "req_pool_indices"), TypeError, ("req_pool_indices", "torch.float32")
    ),
    "req_pool_indices length": Bad(
        ALL, cut("req_pool_indices", S[:1]), ValueError, ("req_pool_indices", "[1]")
    ),
    "seq_lens float": Bad(ALL, to(F32, "seq_lens"), TypeError, ("seq_lens", "torch.float32")),
    "seq_lens 2-D": Bad(EXT, cut("seq_lens", S[None]), ValueError, ("seq_lens", "[batch]")),
    "extend_seq_lens length": Bad(
        EXT, cut("extend_seq_lens", S[:1]), ValueError, ("extend_seq_lens", "[1]", "[2]")
    ),
    "extend_start_loc float": Bad(
        EXT, to(F16, "extend_start_loc"), TypeError, ("extend_start_loc", "torch.float16")
    ),
    # index values (CPU only: meta tensors have none)
    "max_len_extend negative": Bad(
        EXT, put("max_len_extend", lambda a: -1), ValueError, ("max_len_extend is -1",)
    ),
    # scalars
    "sm_scale nan": Bad(ALL, put("sm_scale", lambda a: float("nan")), ValueError, ("sm_scale",)),
    "sm_scale inf": Bad(
        ALL, put("sm_scale", lambda a: float("-inf")), ValueError, ("sm_scale", "-inf")
    ),
    "logit_cap negative": Bad(
        ALL, put("logit_cap", lambda a: -1.0), ValueError, ("logit_cap", "-1")
    ),
    "logit_cap inf": Bad(ALL, put("logit_cap", lambda a: float("inf")), ValueError, ("logit_cap",)),
    "sliding_window_size negative": Bad(
        ALL,
        put("sliding_window_size", lambda a: -1),
        ValueError,
        ("sliding_window_size is -1", "W + 1"),
    ),
    "sinks length": Bad(
        ALL,
        put("sinks", lambda a: torch.zeros(3, device=a["seq_lens"].device)),
        ValueError,
        ("sinks", "[3]", "[4]"),
    ),
    "sinks int": Bad(
        ALL,
        put("sinks", lambda a: torch.zeros(4, dtype=I32, device=a["seq_lens"].device)),
        TypeError,
        ("sinks", "torch.int32"),
    ),
}
# Checks of memory layout (strides, overlap, shared memory) and index values: the CPU
# kernels' only (meta tensors have neither).
CPU_CASES: dict[str, Bad] = {
    "query last dim strided": Bad(
        DEC, strided("query", 1, 2), ValueError, ("query", "last-dimension stride of 4")
    ),
    "k_cache rows overlap": Bad(
        DEC,
        put("k_cache", lambda a: a["k_cache"][:1].expand(TOKENS, -1, -1)),
        ValueError,
        ("k_cache", "overlap"),
    ),
    "scale bufs' strides differ": Bad(
        ("decode_int8", "extend_int8"),
        put("v_scale_buf", lambda a: torch.zeros(len(a["v_scale_buf"]), 3)[:, :2]),
        ValueError,
        ("k_scale_buf and v_scale_buf", "strides 2 and 3"),
    ),
    "int8 caches share memory": Bad(
        ("decode_int8",),
        put("v_cache", lambda a: a["k_cache"][..., :8]),
        ValueError,
        ("k_cache", "v_cache", "share memory"),
    ),
    "output rows overlap": Bad(
        DEC,
        put("output", lambda a: a["output"][:1].expand(2, -1, -1)),
        ValueError,
        ("output", "overlap"),
    ),
    "output inside query": Bad(
        DEC,
        put("output", lambda a: a["query"][..., :8]),
        ValueError,
        ("output", "query", "share memory"),
    ),
    "o_extend inside q_extend": Bad(
        EXT,
        put("o_extend", lambda a: a["q_extend"][..., :8]),
        ValueError,
        ("o_extend", "q_extend", "share memory"),
    ),
    "attn_logits strided": Bad(
        DEC, strided("attn_logits", 0, 1), ValueError, ("attn_logits", "not contiguous")
    ),
    "output inside attn_logits": Bad(
        DEC,
        put("output", lambda a: a["attn_logits"].view(BF16)[:, :, 0, :8]),
        ValueError,
        ("output", "attn_logits", "share memory"),
    ),
    "key inside k_cache": Bad(
        ("decode",),
        put("key", lambda a: a["k_cache"][:2]),
        ValueError,
        ("k_cache", "key", "share memory"),
    ),
    "req_to_token strided": Bad(
        ALL, strided("req_to_token", 0, 1), ValueError, ("req_to_token", "stride of 4")
    ),
    "loc beyond the cache": Bad(
        DEC, put_entry("loc", (1,), TOKENS), ValueError, ("loc[1] is 13", "[0, 13)")
    ),
    "loc negative": Bad(DEC, put_entry("loc", (0,), -1), ValueError, ("loc[0] is -1",)),
    "req_to_token entry beyond the cache": Bad(
        DEC, table_entry(1, 0, TOKENS), ValueError, ("req_to_token[", "is 13", "request 1")
    ),
    "req_to_token entry negative": Bad(
        DEC, table_entry(0, 2, -7), ValueError, ("is -7", "position 2 of request 0")
    ),
    "prefix entry beyond the cache": Bad(
        EXT, table_entry(0, 1, 10**6), ValueError, ("is 1000000", "position 1 of request 0")
    ),
    "seq_len beyond the table": Bad(
        ALL, put_entry("seq_lens", (0,), TABLE_COLS + 1), ValueError, ("seq_lens[0] is 9",)
    ),
    "seq_len negative": Bad(
        ALL, put_entry("seq_lens", (1,), -2), ValueError, ("seq_lens[1] is -2",)
    ),
    "seq_len 0 with a new token": Bad(
        DEC, put_entry("seq_lens", (0,), 0), ValueError, ("seq_lens[0] is 0", "[1, 8]")
    ),
    "out_cache_loc beyond the cache": Bad(
        ("extend_int8",),
        put_entry("out_cache_loc", (4,), 99),
        ValueError,
        ("out_cache_loc[4] is 99",),
    ),
    "req_pool_indices beyond the table": Bad(
        ALL,
        put_entry("req_pool_indices", (1,), TABLE_ROWS),
        ValueError,
        ("req_pool_indices[1] is 4", "[0, 4)"),
    ),
    "new-token entry read without k_extend": Bad(
        EXT,
        both(
            table_entry(0, 3, -1), put("k_extend", lambda a: None), put("v_extend", lambda a: None)
        ),
        ValueError,
        ("position 3 of request 0", "is -1"),
    ),
    "extend beyond seq_len": Bad(
        EXT,
        put_entry("extend_seq_lens", (1,), 3),
        ValueError,
        ("extend_seq_lens[1] is 3", "seq_lens[1] = 2"),
    ),
    "extend length negative": Bad(
        EXT, put_entry("extend_seq_lens", (0,), -1), ValueError, ("extend_seq_lens[0] is -1",)
    ),
    "extend rows beyond q_extend": Bad(
        EXT,
        put_entry("extend_start_loc", (1,), 4),
        ValueError,
        ("extend_start_loc[1] is 4", "5 rows of q_extend"),
    ),
    "extend rows overlap": Bad(
        EXT, put_entry("extend_start_loc", (1,), 2), ValueError, ("requests 0 and 1 share rows",)
    ),
    "max_len_extend too small": Bad(
        EXT,
        put("max_len_extend", lambda a: 2),
        ValueError,
        ("max_len_extend is 2", "max(extend_seq_lens) = 3"),
    ),
}

PARAMS = [(kind, name) for name, case in CASES.items() for kind in case.kinds]
CPU_PARAMS = [(kind, name) for name, case in CPU_CASES.items() for kind in case.kinds]


def _check(kind: str, name: str, device: str) -> None:
    case = CASES[name] if name in CASES else CPU_CASES[name]
    args = base(kind, device)
    case.mutate(args)
    before = {}
    if device == "cpu":
        before = {n: args[n].clone() for n in written(kind) if isinstance(args[n], Tensor)}
    with pytest.raises(case.exc) as info:
        call(kind, args)
    message = str(info.value)
    assert message.startswith(OPS[kind]._schema.name.split("::")[1] + ":") or message.startswith(
        rvv_ops.UNSUPPORTED
    ), message
    for word in case.words:
        assert word in message, f"{word!r} not in {message!r}"
    for n, t in before.items():
        assert same_bits(args[n], t), f"{n} was modified"


@pytest.mark.parametrize(("kind", "name"), PARAMS + CPU_PARAMS)
def test_bad_input_cpu(kind: str, name: str) -> None:
    _check(kind, name, "cpu")


@pytest.mark.parametrize(("kind", "name"), PARAMS)
def test_bad_input_fake(kind: str, name: str) -> None:
    _check(kind, name, "meta")


def test_base_arguments_are_valid() -> None:
    # The cases above each break one thing in arguments that are otherwise fine.
    for kind in OPS:
        call(kind, base(kind, "cpu"))
        call(kind, base(kind, "meta"))


def test_new_token_entries_unread_with_k_extend() -> None:
    # With k_extend given, the table entries of the new tokens are not read.
    for kind in EXT:
        args = base(kind, "cpu")
        table_entry(0, 3, -1)(args)
        call(kind, args)


def test_mixed_devices() -> None:
    # A meta tensor among the arguments routes the call to the Meta kernel.
    args = base("decode", "cpu")
    args["query"] = args["query"].to("meta")
    with pytest.raises(ValueError, match="k_cache is on device cpu; expected query's device meta"):
        call("decode", args)
    args = base("extend", "meta")
    args["sinks"] = torch.zeros(4)
    with pytest.raises(ValueError, match="sinks is on device cpu"):
        call("extend", args)


def test_cpu_kernels_refuse_other_devices() -> None:
    cpu = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    for kind, arg in (("decode", "loc"), ("extend_int8", "v_buffer")):
        args = base(kind, "cpu")
        args[arg] = args[arg].to("meta")
        op = OPS[kind]
        with pytest.raises(ValueError, match=f"{arg} is on device meta; expected a CPU tensor"):
            op.redispatch(cpu, *[args[a.name] for a in op._schema.arguments])
