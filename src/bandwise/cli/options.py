"""Options and argument helpers shared by the planning commands (plan, estimate, compare, sweep).

Each shared option is declared here once and named in each command's signature, where its place
sets its place in that command's --help. An option whose default differs by command (--model,
--devices) is a function of that default; one whose help differs (estimate's) stays in its command."""

from __future__ import annotations

import difflib
import shlex
from typing import Any

import typer

# the readers of a planning command's values live below the CLI, where the Python API reads them too;
# they are named here as well so that every command imports its options from one place
from bandwise.api.inputs import (  # noqa: F401
    MAX_SEQ_LEN,
    cost_params,
    fraction,
    model_spec,
    plan_inputs,
    precisions_of,
    pricing,
)
from bandwise.errors import BandwiseError
from bandwise.export import ENGINES
from bandwise.plan.verdict import THRESHOLD
from bandwise.specs.hardware import MAX_DEVICES, Device
from bandwise.specs.registry import DEFAULT_ENGINE, engine_for, get_cluster, get_engine


def model_option(default: str) -> Any:
    """--model/-m with the command's default model."""
    return typer.Option(default, "--model", "-m", help="Model preset or path to a config.json.")


def devices_option(default: int) -> Any:
    """--devices/-n with the command's default device count."""
    return typer.Option(default, "--devices", "-n", help=f"Number of accelerators (at most {MAX_DEVICES:,}).")


SEQ_LEN = typer.Option(None, "--seq-len", help=f"Training sequence length (default: the model's; at most {MAX_SEQ_LEN:,}).")
GLOBAL_BATCH = typer.Option(None, "--global-batch", help="Sequences per optimizer step (at most 2^34 tokens in all).")
GLOBAL_BATCH_TOKENS = typer.Option(
    None, "--global-batch-tokens",
    help="Tokens per optimizer step (alternative to --global-batch; default 4M, at least one sequence per device; at most 2^34).",
)
EXHAUSTIVE = typer.Option(
    False, "--exhaustive",
    help="Search every candidate layout even past the 4,000,000 that keep any answer within 10 s on two cores "
    "(past them the search takes a coarse grid, then refines the best degrees).",
)
PRECISION = typer.Option("bf16", "--precision", help="bf16, fp8, fp4 (NVFP4, Blackwell) or int8 (TPU), or a comma-separated list to search several.")
THRESHOLD_OPT = typer.Option(THRESHOLD, "--threshold", help="PP is 'not needed' if the best no-PP layout is within this share.")
HEADROOM = typer.Option(0.1, "--headroom", help="Share of device memory kept free.")
OVERLAP_TP = typer.Option(False, "--overlap-tp", help="Assume TP communication overlapped with GEMMs (async TP; inside one NVLink domain only).")
OVERLAP_EP = typer.Option(False, "--overlap-ep", help="Assume the expert all-to-all hidden behind compute in every layout, not only under DualPipeV.")
ATTENTION = typer.Option(
    None, "--attention",
    help="The attention kernel the job runs, over the engine's: flash (the chip's current fused kernel: FlashAttention-3/cuDNN on Hopper), "
    "fa2 (FlashAttention-2, PyTorch SDPA's flash backend: 0.52-0.61 of cuDNN's speed on an H100, measured), "
    "fa1 (FlashAttention 1.x: half FlashAttention-2's rate, Dao 2023), triton (FlashAttention in Triton: FlashAttention 1.x's rate, "
    "which its own docstring says it slightly trails), materialized (s x s scores in memory).",
)
EAGER = typer.Option(None, "--eager/--compiled", help="Element-wise ops as separate eager kernels, or fused (torch.compile); default: the engine's.")
GRAD_REDUCE = typer.Option(
    None, "--grad-reduce",
    help="fp32 or bf16: the dtype gradients are kept and reduced in; default: the engine's (fp32 for every preset). bf16 is "
    "Megatron-LM's --grad-reduce-in-bf16 (Megatron-Core DistributedDataParallelConfig.grad_reduce_in_fp32=False), NeMo's "
    "optim.grad_sync_dtype: bf16.",
)
FP8_RECIPE = typer.Option(
    None, "--fp8-recipe",
    help="How fp8 GEMMs are scaled, over the engine's default: tensorwise (current scaling; NeMo's FP8-CS), delayed (Transformer "
    "Engine's amax history; Megatron-LM's default), rowwise and rowwise_with_gw_hp (torchao; TorchTitan 0.3's default is rowwise), "
    "blockwise (1x128 / 128x128 tiles, DeepSeek-V3), mxfp8 (MX block scales; Blackwell and MI350X/MI355X only). Applies where --precision has fp8.",
)
ENGINE = typer.Option(
    None, "--engine", "-e",
    help="The training engine the plan is priced as: a preset (bandwise engines), a version (megatron@2022), or an engine file; "
         "default: the device's platform's (megatron on GPUs, maxtext on TPUs).",
)
JSON_OUT = typer.Option(False, "--json", help="Print one JSON document.")
TOKENS = typer.Option(
    None, "--tokens",
    help="Price a whole run of this many tokens (15T, 400B, 1.5e13): wall-clock days, device-hours, cost, energy, and the goodput "
    "lost to failures, checkpoints and restarts (the cluster file's operations fields; `bandwise clusters --show NAME --yaml`).",
)
STEPS = typer.Option(None, "--steps", help="The whole run's length in optimizer steps, instead of --tokens.")
PRICE = typer.Option(None, "--price", help="Money per device-hour for --tokens or --steps ($2.10/h, 2.1); default: the cluster file's operations.price_per_device_hour.")
CALIBRATION = typer.Option(
    None, "--calibration",
    help="A calibration file (bandwise calibrate): factors measured on this device and engine, applied to the cluster and the pricing; "
    "levels it did not measure keep their datasheet bandwidth, and the header says which.",
)
EMIT = typer.Option(
    None, "--emit",
    help="Print the layout as a job for torchtitan, megatron or maxtext instead of the report; --emit alone: the --engine's own job.",
)
PLAN_ENGINE = ""
"""--emit's value when it is given alone (`bare_emit`): the job of the engine the plan is priced as."""


def bare_emit(args: list[str]) -> list[str]:
    """The command line with PLAN_ENGINE after an --emit that names no engine (the last word, or one
    followed by another option): the parser takes an option's value only when it is written."""
    out = list(args)
    for i in reversed(range(len(out))):
        if out[i] == "--emit" and (i + 1 == len(out) or out[i + 1].startswith("-")):
            out.insert(i + 1, PLAN_ENGINE)
    return out


def engine_and_emit(cluster: str, engine: str | None, emit: str | None, json_out: bool) -> tuple[str, str | None]:
    """(the engine a plan or estimate on `cluster` is priced as, the job --emit writes): both train on the
    cluster's chips (`registry.engine_for`), checked before any search."""
    device = get_cluster(cluster).device
    engine = engine_for(device, engine)
    return engine, check_emit(emit, json_out, engine, device)


def check_emit(emit: str | None, json_out: bool, engine: str = DEFAULT_ENGINE, device: Device | None = None) -> str | None:
    """The engine --emit writes a job for: the one it names, or the plan's `engine` when it names
    none; not combined with --json; one that does not train on `device` is refused (`registry.engine_for`)."""
    if emit is None:
        return None
    if emit == PLAN_ENGINE:
        emit = get_engine(engine).exports
        if emit is None:
            there = [e for e in ENGINES if device is None or get_engine(e).runs_on(device.platform)]  # the formats its chips run
            raise BandwiseError(f"--emit: bandwise writes no job for the engine {engine!r}; "
                                f"name the engine to export to: --emit {' or '.join(there)}")
        if emit not in ENGINES:  # the engine file's own `exports` names no format
            raise BandwiseError(f"engine {engine!r}: exports={emit!r} is not an --emit format; write one of {', '.join(ENGINES)} "
                                f"in its file, or leave it out")
    if emit not in ENGINES:
        raise BandwiseError(f"--emit {emit!r}: expected one of {', '.join(ENGINES)}{did_you_mean(emit, ENGINES)}")
    if device is not None:  # each --emit format is the launch file of the engine preset of its name
        engine_for(device, emit, flag="--emit")
    if json_out:
        raise BandwiseError("--emit prints a job file and --json a report: choose one")
    return emit


def did_you_mean(word: str, choices: tuple[str, ...]) -> str:
    """'; did you mean Interleaved1F1B?' for a near miss (case-insensitive), else ''."""
    lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(lower), n=1, cutoff=0.75)
    return f"; did you mean {lower[close[0]]}?" if close else ""


def command_line(ctx: typer.Context) -> str:
    """The command that is running, as one line a page can show: its name and each option that
    differs from its default (a flag by its own name), in the order of --help; arguments (a
    command's files) by their values."""
    words = ctx.command_path.split()
    for param in ctx.command.params:
        v = ctx.params.get(param.name)
        if v == param.default or not getattr(param, "opts", None):
            continue
        if param.param_type_name == "argument":
            words += [str(x) for x in (v if isinstance(v, (list, tuple)) else [v])]
        elif getattr(param, "is_flag", False):
            words.append(param.opts[0] if v else (param.secondary_opts or param.opts)[0])
        else:
            words += [param.opts[0], str(v)]
    return shlex.join(words)
