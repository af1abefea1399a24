"""Options and argument helpers shared by the planning commands (plan, estimate, compare, sweep)."""

from __future__ import annotations

import math

import typer

from bandwise.errors import BandwiseError
from bandwise.plan.verdict import THRESHOLD
from bandwise.specs.model import ModelSpec
from bandwise.specs.registry import get_model
from bandwise.specs.strategy import PRECISIONS

DEFAULT_BATCH_TOKENS = 1 << 22
"""4M tokens per step, the scale of published runs (GPT-3 3.2M, Llama 3 405B 4M at first)."""

SEQ_LEN = typer.Option(None, "--seq-len", help="Training sequence length (default: the model's).")
GLOBAL_BATCH = typer.Option(None, "--global-batch", help="Sequences per optimizer step.")
GLOBAL_BATCH_TOKENS = typer.Option(None, "--global-batch-tokens", help="Tokens per optimizer step (alternative to --global-batch; default 4M, at least one sequence per device).")
PRECISION = typer.Option("bf16", "--precision", help="bf16, fp8, or bf16,fp8 to search both.")
THRESHOLD_OPT = typer.Option(THRESHOLD, "--threshold", help="PP is 'not needed' if the best no-PP layout is within this share.")
HEADROOM = typer.Option(0.1, "--headroom", help="Share of device memory kept free.")
OVERLAP_TP = typer.Option(False, "--overlap-tp", help="Assume TP communication overlapped with GEMMs (async TP; inside one NVLink domain only).")
OVERLAP_EP = typer.Option(False, "--overlap-ep", help="Assume the expert all-to-all hidden behind compute in every layout, not only under DualPipeV.")
JSON_OUT = typer.Option(False, "--json", help="Print one JSON document.")


def model_spec(name: str, seq_len: int | None) -> ModelSpec:
    model = get_model(name)
    return model.with_seq_len(seq_len) if seq_len is not None else model


def global_batch_of(model: ModelSpec, seqs: int | None, tokens: int | None, devices: int) -> int:
    if seqs is not None and tokens is not None:
        raise BandwiseError("give --global-batch (sequences) or --global-batch-tokens, not both")
    if tokens is not None:
        if tokens <= 0 or tokens % model.seq_len:
            raise BandwiseError(f"--global-batch-tokens={tokens} must be a positive multiple of seq_len={model.seq_len}")
        return tokens // model.seq_len
    if seqs is None:
        return max(DEFAULT_BATCH_TOKENS // model.seq_len, devices)
    if seqs <= 0:
        raise BandwiseError(f"--global-batch={seqs} must be a positive number of sequences")
    return seqs


def fraction(name: str, value: float) -> float:
    if not (math.isfinite(value) and 0 <= value < 1):
        raise BandwiseError(f"{name}={value} must be a fraction in [0, 1)")
    return value


def precisions_of(text: str) -> tuple[str, ...]:
    """'bf16,fp8' -> ('bf16', 'fp8'); an unknown or empty list is a one-line error."""
    precisions = tuple(p.strip() for p in text.split(",") if p.strip())
    if not precisions or any(p not in PRECISIONS for p in precisions):
        raise BandwiseError(f"--precision {text!r}: valid values are {', '.join(PRECISIONS)} (comma-separated)")
    return precisions
