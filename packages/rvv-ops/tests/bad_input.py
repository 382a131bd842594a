"""One bad-input case of the norm and RoPE tests (test_norms.py, test_rotary.py): arguments
built once as CPU tensors, the exception they raise and words of its message, checked on CPU
tensors and, where the check reads neither memory layout nor index values, on meta tensors
(the Meta kernels, used by torch.compile tracing)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from torch import Tensor


@dataclass(frozen=True)
class Bad:
    op: Any
    args: tuple[Any, ...]  # CPU tensors (moved to the device under test) and scalars
    exc: type[Exception]
    words: tuple[str, ...]  # in the message: the argument's name and its bad value
    fake_too: bool = True  # the Meta kernel checks it as well

    def check(self) -> None:
        for device in ("cpu", "meta") if self.fake_too else ("cpu",):
            args = [a.to(device) if isinstance(a, Tensor) else a for a in self.args]
            with pytest.raises(self.exc) as info:
                self.op(*args)
            message = str(info.value)
            for word in self.words:
                assert word in message, f"{device}: {word!r} not in {message!r}"


@dataclass(frozen=True)
class Cases:
    """Makes the bad-input cases of `op`: `defaults` (valid arguments, by name, in the op's
    order; CPU tensors) with the arguments a case names replaced."""

    op: Any
    defaults: dict[str, Any]
    words: tuple[str, ...] = ()  # in every case's message (e.g. the op's name)

    def __call__(
        self, exc: type[Exception], words: tuple[str, ...], *, fake_too: bool = True, **replace: Any
    ) -> Bad:
        assert set(replace) <= set(self.defaults), sorted(set(replace) - set(self.defaults))
        args = tuple({**self.defaults, **replace}.values())
        return Bad(self.op, args, exc, (*self.words, *words), fake_too)
