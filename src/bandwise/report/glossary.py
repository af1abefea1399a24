"""The words under each table, and the same words in --help: one place, so they cannot drift apart."""

from __future__ import annotations

LAYOUT = (
    "DP replicated data parallel (ZeRO-1/2: optimizer state / + gradients sharded) · FSDP sharded data "
    "parallel (ZeRO-3; DP·FSDP is HSDP) · TP tensor + sequence parallel · CP context · PP pipeline "
    "stages, then the schedule, ×v stages per rank · EP expert parallel."
)
PLAN_COLUMNS = (
    "mb sequences per micro-batch · recomp activation recomputation (sel. selective) · GiB memory per "
    "device · tok/s tokens per second per device · comm communication not hidden by compute, share of the step."
)
PLAN_WIDE_COLUMNS = "mbs micro-batches per step · HFU MFU counting recomputation · bubble pipeline idle share of the step."
BREAKDOWN = (
    "overlap slowdown: compute slowed by the collectives hidden behind it (they take SMs and memory "
    "bandwidth) · exposed: communication not hidden behind compute · pipeline bubble: stages idle at "
    "the start and end of a step · buffers: FSDP gather/reduce and expert all-to-all buffers, CUDA "
    "context and communication workspace."
)
RECOMMENDED = (
    "The recommended layout is `best` in --json and what `bandwise train --strategy` runs: the fastest "
    "layout, or the fastest without PP when the verdict says PP is not needed (`--pick N` runs row N of the table)."
)
SCHEDULE = (
    "stages: the pipeline stages a rank holds · busy: time it computes · idle: its share of the makespan "
    "spent waiting (its bubble) · peak in-flight: most micro-batches whose activations it holds at once "
    "(peak bytes: the same in bytes, with --activation-bytes)."
)
MODELS = (
    "params: all parameters · active: parameters one token uses (non-embedding, plus the output "
    "projection) · heads/kv: attention and key-value heads (MLA: multi-head latent attention) · "
    "experts: routed experts and how many each token picks · seq: default sequence length."
)
CLUSTERS = (
    "Dense peaks (not the 2:4-sparse figures) · topology: the interconnect levels, innermost first, "
    "each with its size (∞: as many as the job needs; AxB: a torus; 8 mesh: every device linked to every "
    "other) and bandwidth per device per direction (per link on a torus or a mesh). A TPU job smaller "
    "than the pod runs on a slice of its own shape."
)
COMPARE = (
    "verdict: PP is not needed when the best layout without PP is within the threshold of the best, in "
    "tokens/s per device; the share is what the best layout gains over the best without PP."
)

MEMORY_LABELS = {"params": "parameters", "grads_optimizer": "grads + optimizer", "grads_not_at_peak": "grads not yet made at the peak", "activations": "activations", "buffers": "buffers"}
