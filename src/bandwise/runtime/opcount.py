"""Count the ops a piece of training dispatches: a work budget that needs no clock.

`OpCounter` is a `TorchDispatchMode` (torch/utils/_python_dispatch.py): every aten (or custom)
op that reaches the dispatcher below autograd and autocast passes through it, forward, backward
and optimizer alike. It keeps three figures:

- `ops`: every op dispatched;
- `work`: the ops that compute something, i.e. not aliasing ops (`OpOverload.is_view`: view, t,
  transpose, slice, ...; and detach, `_unsafe_view`, `_conj`, which alias but are not marked so);
  on an accelerator each of these is at least one kernel launch, the host cost the step pays;
- `param_casts`: `_to_copy` calls whose input shares storage with a parameter: autocast (or any
  code) casting a weight that does not change within the step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_ALIASING = ("detach", "_unsafe_view", "_conj", "alias")


class OpCounter(TorchDispatchMode):
    def __init__(self, params: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self.by_op: Counter[str] = Counter()
        self.work = 0
        self.param_casts = 0
        self._storages = {p.untyped_storage().data_ptr() for p in params}

    @property
    def ops(self) -> int:
        return sum(self.by_op.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func.overloadpacket
        name = str(packet)
        self.by_op[name] += 1
        if not (func.is_view or name.rsplit(".", 1)[-1] in _ALIASING):
            self.work += 1
        if packet is torch.ops.aten._to_copy and args and isinstance(args[0], torch.Tensor):
            if args[0].untyped_storage().data_ptr() in self._storages:
                self.param_casts += 1
        return func(*args, **(kwargs or {}))
