"""Float8 recipes: how a job quantizes its GEMMs, and what each costs beyond the fp8 GEMM itself.

A recipe is the scaling granularity and the kernels around the GEMM. The GEMM runs at the chip's
fp8 rate in all of them (but the weight-gradient GEMM of `rowwise_with_gw_hp`, in bf16); they differ
in the HBM traffic of the casts, in a rescale pass after GEMMs that cannot apply the scales
themselves, and in the hardware they need. Cast traffic is per element of each GEMM activation
operand (a linear layer's input, and its output's gradient), summed over every layout the forward
and backward GEMMs read, the bf16 source read as often as the recipe's kernels read it: torchao's
roofline model of its own kernels (`torchao/testing/training/roofline_utils.py`,
`get_tensor_memory_traffic_ovhd_s` and `get_blockwise_float8_mem_sympy`, pytorch/ao at 36027d82d,
2026-08), without the fusion with the previous op that it models as optional. The weights' casts
(`weight_cast_bytes`: tensorwise an amax read and two casts, 2 + 3 + 3; rowwise a cast, a bf16 transpose
and a cast, 3 + 4 + 3; rowwise_with_gw_hp, MXFP8 and blockwise one cast per layout, 3 + 3; delayed one fused
cast-transpose, 2 + 1 + 1) are priced where the engine repeats them every micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from bandwise.errors import BandwiseError


@dataclass(frozen=True, slots=True, kw_only=True)
class Fp8Recipe:
    name: str
    cast_bytes: float
    """HBM bytes per element of each GEMM activation operand over the forward and backward casts."""
    rescaled_backward: bool = False
    """The backward GEMMs run on the tensorwise kernel and the row scales are applied after, one more
    read and write of each output."""
    bf16_weight_grad: bool = False
    """The weight-gradient GEMM runs in bf16, at the bf16 rate."""
    block_scaled_gemm: bool = False
    """The GEMM needs tensor cores that apply per-block scales themselves (Blackwell's MX formats)."""
    axiswise: bool = False
    """Scales per row or column (torchao's AXISWISE granularity): a tensor cannot be cast on a sequence shard and
    gathered in fp8 as one tensorwise scale allows (`CostParams.rowwise_tp_in_bf16`)."""
    weight_cast_bytes: float = 0.0
    """HBM bytes per weight element to quantize a linear layer's weight for its forward and input-gradient
    GEMMs, where the engine does it every micro-batch (`CostParams.fp8_weight_cast_per_microbatch`): torchao's
    roofline, role "weight" (`get_tensor_memory_traffic_ovhd_s`; `get_blockwise_float8_mem_sympy`, "Weight is
    quantized twice")."""
    source: str = ""


FP8_RECIPES: dict[str, Fp8Recipe] = {r.name: r for r in (
    Fp8Recipe(
        name="tensorwise", cast_bytes=2 + 2 + 1 + 1, weight_cast_bytes=2 + (2 + 1) + (2 + 1),
        source="one scale per tensor from its current amax: an amax pass reads the bf16 tensor (2), a cast reads it again and "
               "writes the row- and column-major fp8 copies (2 + 1 + 1) (torchao roofline, 'tensorwise'; Transformer Engine's "
               "current scaling, Megatron-LM --fp8-recipe tensorwise, NeMo's FP8-CS)"),
    Fp8Recipe(
        name="delayed", cast_bytes=2 + 1 + 1, weight_cast_bytes=2 + 1 + 1,
        source="the scale comes from the amax history of earlier steps, so one fused cast-transpose reads the tensor once, "
               "writes both fp8 layouts and records the amax on the way (2 + 1 + 1) (Transformer Engine's DelayedScaling recipe; "
               "Megatron-LM's default --fp8-recipe delayed, megatron/training/arguments.py)"),
    Fp8Recipe(
        name="rowwise", cast_bytes=(2 + 1 + 2) + (2 + 1), rescaled_backward=True, axiswise=True, weight_cast_bytes=(2 + 1) + 2 * 2 + (2 + 1),
        source="one scale per row: a kernel reads the tensor, writes the fp8 rows and a bf16 transpose (2 + 1 + 2), a second "
               "casts the transpose (2 + 1) (torchao roofline, 'rowwise'); the backward GEMMs run without fast accumulation, "
               "which torchao sends to cuBLAS's tensorwise kernel and then multiplies each output by its scales "
               "(torchao/float8/float8_ops.py, addmm_float8_unwrapped; Float8GemmConfig use_fast_accum=False for grad_input and "
               "grad_weight, torchao/float8/config.py)"),
    Fp8Recipe(
        name="rowwise_with_gw_hp", cast_bytes=2 + 1, bf16_weight_grad=True, axiswise=True, weight_cast_bytes=(2 + 1) + (2 + 1),
        source="rowwise scales for the output and input-gradient GEMMs, each operand cast once (2 + 1); the weight-gradient "
               "GEMM reads the bf16 tensors and runs in bf16 (torchao roofline and Float8LinearConfig.from_recipe_name, "
               "'rowwise_with_gw_hp')"),
    Fp8Recipe(
        name="blockwise", cast_bytes=2 * (2 + 1 + 4 / 128), weight_cast_bytes=2 * (2 + 1 + 4 / 128**2),
        source="1x128 tiles of activations and gradients, 128x128 blocks of weights (DeepSeek-V3 report, Sec. 3.3.2): each "
               "operand quantized once per layout its GEMMs read, reading the bf16 tensor and writing fp8 with an fp32 scale per "
               "128 elements, 2 x (2 + 1 + 4/128) (torchao roofline, get_blockwise_float8_mem_sympy); Megatron-LM --fp8-recipe "
               "blockwise"),
    Fp8Recipe(
        name="mxfp8", cast_bytes=2 * (2 + 1 + 1 / 32), block_scaled_gemm=True, weight_cast_bytes=2 * (2 + 1 + 1 / 32),
        source="OCP MX: an E8M0 scale per 32 elements, applied by the tensor cores (NVIDIA Blackwell; AMD CDNA4); one kernel "
               "per layout reads the tensor and writes fp8 with its scales, 2 x (2 + 1 + 1/32) (torchao roofline, 'mxfp8_cublas'; "
               "Megatron-LM --fp8-recipe mxfp8, NeMo's FP8-MX)"),
)}
"""Every recipe bandwise prices, by name (`--fp8-recipe`)."""

BLOCK_SCALED_DEVICES = ("b200", "b300", "gb200", "gb300", "mi350x", "mi355x")
"""Device presets whose tensor cores apply MX block scales: NVIDIA Blackwell (B200/B300, GB200/GB300;
Blackwell architecture technical brief, 5th-generation Tensor Cores with micro-tensor scaling) and
AMD CDNA4 (MI350X and MI355X; AMD CDNA 4 architecture white paper, MXFP8/MXFP6/MXFP4)."""


def fp8_recipe(name: str) -> Fp8Recipe:
    """The recipe of that name; an unknown one is a one-line error naming the choices."""
    recipe = FP8_RECIPES.get(name) if isinstance(name, str) else None
    if recipe is None:
        raise BandwiseError(f"--fp8-recipe {name!r}: not a recipe bandwise prices; use one of {', '.join(FP8_RECIPES)}")
    return recipe


def check_device(recipe: Fp8Recipe, device: str) -> None:
    """A block-scaled recipe on a chip without block-scaled tensor cores is refused by name."""
    if recipe.block_scaled_gemm and not device.lower().startswith(BLOCK_SCALED_DEVICES):
        raise BandwiseError(f"--fp8-recipe {recipe.name}: {device} has no tensor cores that apply MX block scales "
                            f"(Blackwell or CDNA4: {', '.join(BLOCK_SCALED_DEVICES)}); use tensorwise, delayed, rowwise or blockwise")
