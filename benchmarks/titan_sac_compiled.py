"""What a compiled block saves under TorchTitan's selective AC, against eager (benchmarks/RESULTS.md,
"TorchTitan on GB200: what the step holds (third pass)", D).

Runs the seven-mm Llama block of tests/unit/test_titan_selective_ac.py under torch.utils.checkpoint with
TorchTitan's every-other-mm policy as `context_fn`, compiled with the given backend, and prints the bytes of
the tensors its compiled autograd function saves (saved_tensors_hooks), weights left out.

    PYTHONPATH=src python3 benchmarks/titan_sac_compiled.py inductor
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
import test_titan_selective_ac as block  # noqa: E402


def _context():
    return create_selective_checkpoint_contexts(block._policy())


def _step(x, w):
    return checkpoint(block._block, x, w, use_reentrant=False, context_fn=_context)


def main(backend: str) -> None:
    torch.manual_seed(0)
    shapes = {"q": (block.H_MODEL, block.HEADS * block.D), "k": (block.H_MODEL, block.KV * block.D),
              "v": (block.H_MODEL, block.KV * block.D), "o": (block.HEADS * block.D, block.H_MODEL),
              "w1": (block.H_MODEL, block.F), "w3": (block.H_MODEL, block.F), "w2": (block.F, block.H_MODEL)}
    w = {n: (torch.randn(*s) * 0.05).to(torch.bfloat16).requires_grad_() for n, s in shapes.items()}
    x = torch.randn(block.B * block.S, block.H_MODEL, dtype=torch.bfloat16, requires_grad=True)
    weights = {p.untyped_storage().data_ptr() for p in w.values()}
    saved = []

    def pack(t):
        if t.untyped_storage().data_ptr() not in weights:
            saved.append((tuple(t.shape), str(t.dtype), t.untyped_storage().nbytes()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        torch.compile(_step, backend=backend)(x, w)
    for row in saved:
        print(row)
    print(f"{backend}: {sum(n for *_, n in saved)} bytes saved besides the weights")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "inductor")
