"""The batch a job states, turned into sequences per step: one rule for every command and the trainer."""

from __future__ import annotations

from bandwise.errors import BandwiseError
from bandwise.specs.model import ModelSpec

DEFAULT_BATCH_TOKENS = 1 << 22
"""4M tokens per step, the scale of published runs (GPT-3 3.2M, Llama 3 405B 4M at first)."""
MAX_BATCH_TOKENS = 1 << 34
"""Tokens per step the planner accepts: 17.2 billion, 273 x DeepSeek-V3's 63M (15,360 sequences of
4,096 tokens, report Sec. 4.2) and 4 x the default batch of 1,048,576 devices (one sequence each)."""


def global_batch_of(model: ModelSpec, seqs: int | None, tokens: int | None, devices: int) -> int:
    if seqs is not None and tokens is not None:
        raise BandwiseError("give --global-batch (sequences) or --global-batch-tokens, not both")
    if tokens is not None:
        if tokens <= 0 or tokens % model.seq_len:
            raise BandwiseError(f"--global-batch-tokens={tokens} must be a positive multiple of seq_len={model.seq_len}")
        seqs = tokens // model.seq_len
    elif seqs is None:
        return max(DEFAULT_BATCH_TOKENS // model.seq_len, devices)
    if seqs <= 0:
        raise BandwiseError(f"--global-batch={seqs} must be a positive number of sequences")
    if seqs * model.seq_len > MAX_BATCH_TOKENS:
        raise BandwiseError(
            f"a global batch of {seqs:,} sequences of {model.seq_len:,} tokens is past the planner's bound of 2^34 "
            f"({MAX_BATCH_TOKENS:,}) tokens per step; use at most --global-batch {MAX_BATCH_TOKENS // model.seq_len}"
        )
    return seqs
