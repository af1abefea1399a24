"""Would one (E, D, 2F) weight for the experts' w1 and w3 make bandwise's MoE layer cheaper on the CPU?

The layer as it is (two grouped GEMMs for w1 and w3, then SwiGLU) against the same layer with the
two weights concatenated once, outside the timing, into one grouped GEMM of twice the width, whose
output SwiGLU reads as its two halves and whose input gradient is one GEMM (no sum of two), and
the dense SwiGLU of the same active FLOPs. Thread CPU time of forward + backward
(`moe_layer.time_fwd_bwd`), rounds alternating, medians of paired per-round ratios. Nothing in the
runtime changes: the fused variant is patched in here only.

    THP_MEM_ALLOC_ENABLE=1 PYTHONPATH=src:benchmarks python benchmarks/moe_fused_w13.py --experts 40,64
"""

from __future__ import annotations

import argparse
import statistics

import moe_layer
import torch
import torch.nn.functional as F

from bandwise.runtime import grouped
from bandwise.runtime.moe import GroupedExperts


class _SwiGLUHalves(torch.autograd.Function):
    """silu(a) · b · w for h = [a | b] (N, 2F), its gradient written into one (N, 2F) buffer."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        f = h.shape[1] // 2
        ctx.save_for_backward(h, w)
        return F.silu(h[:, :f]) * h[:, f:] * w

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        h, w = ctx.saved_tensors
        f = h.shape[1] // 2
        a, b = h[:, :f], h[:, f:]
        s = F.silu(a)
        dw = torch.sum(s * b * g, -1, keepdim=True)
        gw = g * w
        d = torch.empty_like(h)
        torch.mul(gw, s, out=d[:, f:])
        torch.ops.aten.silu_backward.grad_input(gw * b, a, grad_input=d[:, :f])
        return d, dw


def _fused(self, x_ND, counts_E, gates_N, w1, w2, w3):
    offsets_E = grouped.group_offsets(counts_E)
    h = grouped.grouped_linear(x_ND, self.w13, offsets_E)
    return grouped.grouped_linear(_SwiGLUHalves.apply(h, gates_N), w2, offsets_E)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--experts", default="40,64")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    own = GroupedExperts._grouped
    for e in (int(v) for v in args.experts.split(",")):
        mods = moe_layer.layers(e, 4, 256, 176, torch.device("cpu"))
        moe = mods["moe"]
        moe.experts.w13 = torch.nn.Parameter(torch.cat([moe.experts.w1.detach(), moe.experts.w3.detach()], -1))
        x = torch.randn(1, 2048, 256, requires_grad=True)
        cpu: dict[str, list[float]] = {"split": [], "fused": [], "dense": []}
        try:
            for _ in range(args.rounds):
                for k in cpu:
                    GroupedExperts._grouped = _fused if k == "fused" else own
                    st: dict = {}
                    moe_layer.time_fwd_bwd(mods["dense"] if k == "dense" else moe, x, 3, torch.float32, st)
                    cpu[k].append(st["cpu"])
        finally:
            GroupedExperts._grouped = own
        r = lambda a, b: statistics.median(p / q for p, q in zip(cpu[a], cpu[b]))  # noqa: E731
        print(f"E={e:3d}  fused/split {r('fused', 'split'):.3f}  split/dense {r('split', 'dense'):.3f}  fused/dense {r('fused', 'dense'):.3f}")


if __name__ == "__main__":
    main()
