"""What torch 2.13 offers for the experts' grouped GEMM on the CPU, timed against each other.

`projections`: the w1 and w3 projections of E experts (forward, dX, dW each) at top-4 of E over
2,048 tokens of width 256, expert width 176, fp32, one thread, as
- `grouped`: `torch._grouped_mm`, the runtime's kernel (on the CPU torch's `_grouped_mm_fallback`,
  one `mm_out` a group: GroupedMMUtils.h at 2295ac7);
- `fused_w13`: the same op over w1 and w3 concatenated (E, D, 2F): half the calls, twice as wide
  (a parameter layout the runtime does not have);
- `padded_bmm`: rows scattered into (E, max rows, D), one `torch.bmm`, gathered back;
- `dense`: the dense SwiGLU's two input projections of the same FLOPs (width 4·176).
A block-diagonal layout (one matmul of every row against every expert) does E times the FLOPs
and is not timed. `layer`: bandwise's MoE layer forward + backward with and without the empty-group
mask on the weight gradient (`grouped.masks_empty_groups`), against the dense layer.

Rounds alternate the variants; each figure is the median over rounds of paired ratios.

    PYTHONPATH=src python benchmarks/grouped_gemm_cpu.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def _paired(fns: dict, rounds: int, calls: int = 2) -> dict[str, list[float]]:
    res: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            res[k].append((time.perf_counter() - t0) / calls)
    return res


def _ratio(res, a: str, b: str) -> float:
    return statistics.median(x / y for x, y in zip(res[a], res[b]))


def projections(E: int, rounds: int, T: int = 2048, K: int = 4, D: int = 256, F: int = 176) -> str:
    g = torch.Generator().manual_seed(0)
    idx = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)])
    counts = torch.zeros(E, dtype=torch.long).scatter_add_(0, idx.flatten(), torch.ones(T * K, dtype=torch.long))
    N, C = T * K, int(counts.max())
    x, gy, gy2 = torch.randn(N, D), torch.randn(N, F), torch.randn(N, 2 * F)
    w1, w3 = torch.randn(E, D, F), torch.randn(E, D, F)
    w13 = torch.cat([w1, w3], -1)
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    start = torch.cumsum(counts, 0) - counts
    group = torch.repeat_interleave(torch.arange(E), counts)
    slot = group * C + (torch.arange(N) - start[group])  # each row's place in the padded (E, C) layout

    def grouped_proj(w, dy):
        torch._grouped_mm(x, w, offs=offs)
        torch._grouped_mm(dy, w.mT, offs=offs)
        torch._grouped_mm(x.mT, dy, offs=offs)

    def padded():
        for w in (w1, w3):
            xp = x.new_zeros(E * C, D).index_copy_(0, slot, x).view(E, C, D)
            torch.bmm(xp, w).view(E * C, F).index_select(0, slot)
            gp = gy.new_zeros(E * C, F).index_copy_(0, slot, gy).view(E, C, F)
            torch.bmm(gp, w.mT).view(E * C, D).index_select(0, slot)
            torch.bmm(xp.mT, gp)

    wd, xd, gd = torch.randn(D, K * F), torch.randn(T, D), torch.randn(T, K * F)

    def dense():
        for _ in range(2):
            xd @ wd, gd @ wd.T, xd.T @ gd

    res = _paired({"grouped": lambda: (grouped_proj(w1, gy), grouped_proj(w3, gy)), "fused_w13": lambda: grouped_proj(w13, gy2),
                   "padded_bmm": padded, "dense": dense}, rounds)
    return (f"E={E:3d} rows max/mean {C / (N / E):.2f}  " + "  ".join(f"{k} {1e3 * statistics.median(v):.1f} ms" for k, v in res.items())
            + f"  | grouped/dense {_ratio(res, 'grouped', 'dense'):.2f}  fused_w13/grouped {_ratio(res, 'fused_w13', 'grouped'):.2f}"
            f"  padded_bmm/grouped {_ratio(res, 'padded_bmm', 'grouped'):.2f}")


def layer(E: int, rounds: int) -> str:
    import moe_layer

    from bandwise.runtime import grouped

    mods = moe_layer.layers(E, 4, 256, 176, torch.device("cpu"))
    x = torch.randn(1, 2048, 256, requires_grad=True)
    own = grouped.masks_empty_groups
    masked = lambda d: True  # noqa: E731

    def run(mask: bool) -> float:
        grouped.masks_empty_groups = masked if mask else own
        try:
            return moe_layer.time_fwd_bwd(mods["moe"], x, 3, torch.float32)
        finally:
            grouped.masks_empty_groups = own

    res: dict[str, list[float]] = {"mask": [], "no_mask": [], "dense": []}
    for _ in range(rounds):
        res["mask"].append(run(True))
        res["no_mask"].append(run(False))
        res["dense"].append(moe_layer.time_fwd_bwd(mods["dense"], x, 3, torch.float32))
    return (f"E={E:3d} layer " + "  ".join(f"{k} {1e3 * statistics.median(v):.1f} ms" for k, v in res.items())
            + f"  | no_mask/mask {_ratio(res, 'no_mask', 'mask'):.3f}  mask/dense {_ratio(res, 'mask', 'dense'):.3f}"
            f"  no_mask/dense {_ratio(res, 'no_mask', 'dense'):.3f}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--experts", default="8,40,64")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--what", choices=("projections", "layer", "both"), default="both")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(f"cpu, torch {torch.__version__}, fp32, 1 thread, {args.rounds} rounds")
    for e in (int(v) for v in args.experts.split(",")):
        if args.what in ("projections", "both"):
            print(projections(e, args.rounds), flush=True)
        if args.what in ("layer", "both"):
            print(layer(e, args.rounds), flush=True)


if __name__ == "__main__":
    main()
