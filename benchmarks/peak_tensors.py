"""Every tensor alive at a dry-run role's memory peak: size, the tracker's category, forward or
backward, the operator that allocated it and the module it ran in.

    python benchmarks/peak_tensors.py ROW [--role "first stage"] [--top 40]

ROW indexes `memory_dryrun.LAYOUTS` (0-41). This is the listing that traced the misses of the table
in benchmarks/RESULTS.md ("Dry run against the memory model"): e.g. row 9 (Llama 3 8B, TP 8) shows
the output projection's all-gathered input and the logits at the loss, row 23 (Llama 3 70B, PP 4)
the stage's fp32 gradient accumulators beside three micro-batches.

It records, for each storage torch's memory tracker sees, the operator and module current when the
tracker first saw it, and at every new peak the storages alive. This reads private parts of
`torch.distributed._tools.mem_tracker` (`_WeakRefInfo`, `_update_peak_stats`, `_curr_mem_snap`) as
torch 2.11-2.15 have them; where they change it says so in one line. Split-backward schedules run
the tracker without module hooks (runtime/dryrun.py), so their tensors carry no module name.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys

GIB = 2**30


class PeakListing:
    """Patches the tracker classes while active; `live` holds (bytes, category, phase, op, module)."""

    def __init__(self) -> None:
        self.op = "?"
        self.origin: dict[int, tuple[str, str, str]] = {}
        self.peak = 0
        self.live: list[tuple[int, str, str, str, str]] = []
        self.at = ("?", "", False)
        self.tracker = None

    def __enter__(self) -> PeakListing:
        from torch.distributed._tools import fsdp2_mem_tracker as fmt
        from torch.distributed._tools import mem_tracker as mt

        self._undo: list[tuple[object, str, object]] = []
        listing = self

        def patch(owner, name, new) -> None:
            self._undo.append((owner, name, owner.__dict__[name]))
            setattr(owner, name, new)

        for cls in (mt.MemTracker, fmt.FSDPMemTracker):
            if "__torch_dispatch__" in cls.__dict__:
                orig_dispatch = cls.__dict__["__torch_dispatch__"]

                def dispatch(self, func, types, args=(), kwargs=None, _orig=orig_dispatch):
                    listing.op = str(func)
                    return _orig(self, func, types, args, kwargs)

                patch(cls, "__torch_dispatch__", dispatch)

        orig_create = mt._WeakRefInfo.__dict__["create_winfo"].__func__

        def create_winfo(cls, st, device, reftype, callback=None):
            winfo, ref = orig_create(cls, st, device, reftype, callback)
            t = listing.tracker
            module, phase = ("", "fw") if t is None else (_innermost(t._mod_tracker.parents), "bw" if t._mod_tracker.is_bw else "fw")
            listing.origin[id(winfo)] = (listing.op, module, phase)
            return winfo, ref

        patch(mt._WeakRefInfo, "create_winfo", classmethod(create_winfo))
        orig_peak = mt.MemTracker.__dict__["_update_peak_stats"]

        def update_peak_stats(self, peak_state) -> None:
            listing.tracker = self
            orig_peak(self, peak_state)
            for snap in self._curr_mem_snap.values():
                if snap[mt._TOTAL_KEY] > listing.peak:
                    listing.peak = snap[mt._TOTAL_KEY]
                    listing.at = (listing.op, _innermost(self._mod_tracker.parents), self._mod_tracker.is_bw)
                    listing.live = [
                        (w.mem_consumed, str(w.reftype).split(".")[-1], *listing._origin_of(w))
                        for w, _ in list(self._WINFO.values())
                        if w.mem_consumed > 0
                    ]

        patch(mt.MemTracker, "_update_peak_stats", update_peak_stats)
        return self

    def _origin_of(self, winfo) -> tuple[str, str, str]:
        op, module, phase = self.origin.get(id(winfo), ("?", "", "?"))
        return phase, op, module

    def __exit__(self, *exc) -> None:
        for owner, name, old in reversed(self._undo):
            setattr(owner, name, old)


def _innermost(parents) -> str:
    return max(parents, key=len) if parents else ""


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import memory_dryrun
    import torch

    from bandwise.runtime import dryrun
    from bandwise.specs.registry import get_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("row", type=int, help=f"index into memory_dryrun.LAYOUTS, 0-{len(memory_dryrun.LAYOUTS) - 1}")
    ap.add_argument("--role", default="", help="the role to play (default: the last of the layout's roles)")
    ap.add_argument("--top", type=int, default=40, help="print the largest N groups")
    args = ap.parse_args(argv)
    if not 0 <= args.row < len(memory_dryrun.LAYOUTS):
        ap.error(f"row {args.row} is not a layout; use 0-{len(memory_dryrun.LAYOUTS) - 1}")
    name, layers, seq, s = memory_dryrun.LAYOUTS[args.row]
    full = get_model(name).with_seq_len(seq)
    spec = dataclasses.replace(full, layers=layers, dense_layers=min(full.dense_layers, layers))
    roles = dryrun.roles(s)
    chosen = [r for r in roles if r[0] == args.role] if args.role else roles[-1:]
    if not chosen:
        ap.error(f"role {args.role!r} is not one of this layout's: {', '.join(r for r, _ in roles)}")
    role, pp_rank = chosen[0]
    try:
        with PeakListing() as listing:
            result = dryrun._play(spec, s, role, pp_rank, steps=2, dtype=torch.bfloat16)
    except (AttributeError, KeyError) as exc:
        print(f"error: this torch's memory tracker has no {exc} where this listing reads it (written for torch 2.11-2.15)", file=sys.stderr)
        return 1
    print(f"{name} {s.describe()} ({role}): peak {result.peak_bytes / GIB:.3f} GiB",
          {k: round(v / GIB, 3) for k, v in result.by_category.items()})
    op, module, is_bw = listing.at
    print(f"at {op} in {module or '-'} ({'backward' if is_bw else 'forward'}); {sum(x[0] for x in listing.live) / GIB:.3f} GiB alive")
    groups: collections.Counter = collections.Counter()
    for size, category, phase, op_, module_ in listing.live:
        groups[(category, phase, op_, module_)] += size
    for (category, phase, op_, module_), size in groups.most_common(args.top):
        print(f"{size / GIB:8.3f}  {category:16s} {phase:2s} {op_:50s} {module_}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
