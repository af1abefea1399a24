"""GEMMs below 8 bits or in integers: NVFP4 and int8, what their casts move and which chips run them.

The fp8 path (`cost.fp8`) is the model: a quantized GEMM runs at the chip's peak for its dtype, and
each GEMM activation operand (a linear layer's input, and its output's gradient) is cast before it,
HBM traffic per element summed over the layouts the forward and backward GEMMs read. Activations kept
for the backward, tensor-parallel all-gathers and MoE dispatch take the fp8 path's 1-byte widths
(`Shape.fp8` is true for every quantized precision): exact for int8, an upper bound for fp4's half
byte. A precision whose peak the device's preset does not list is refused by name.
"""

from __future__ import annotations

from bandwise.cost.fp8 import Fp8Recipe
from bandwise.errors import BandwiseError

QUANTIZED_CASTS: dict[str, Fp8Recipe] = {
    "fp4": Fp8Recipe(
        name="nvfp4", cast_bytes=2 + 2 + 2 * (0.5 + 1 / 16), block_scaled_gemm=True,
        source="NVFP4 (NVIDIA technical blog 'Introducing NVFP4 for efficient and accurate low-precision inference', and "
               "Transformer Engine's NVFP4BlockScaling recipe docs): E2M1 values with an E4M3 scale per 16 elements and a "
               "second-level fp32 scale per tensor, which needs the tensor's amax before the cast: an amax pass reads the bf16 "
               "tensor (2), the cast reads it again (2) and writes the row- and column-wise fp4 copies with their scales, "
               "2 x (0.5 + 1/16), the tensor cores applying the block scales (Blackwell)"),
    "int8": Fp8Recipe(
        name="aqt_int8", cast_bytes=2 + 2 + 1,
        source="AQT int8 (google/aqt, the quantization MaxText runs with quantization=int8): scales computed from the "
               "operand's current absolute maximum, so an amax pass reads the bf16 tensor (2) and the cast reads it again and "
               "writes int8 (2 + 1), as fp8's tensorwise recipe with one layout: the TPU's MXU reads either operand layout"),
}
"""The casts of each precision below fp8, by precision name (`specs.strategy.PRECISIONS`)."""

NEEDS_PEAK: tuple[str, ...] = tuple(QUANTIZED_CASTS)
"""Precisions priced only on a device whose preset lists a peak for them (`Device.peak_flops`)."""


def check_precision(precision: str, device: str, peaks: dict[str, float]) -> None:
    """fp4 or int8 on a device without that peak is a one-line error naming both."""
    if precision in NEEDS_PEAK and precision not in peaks:
        runs = ", ".join(k for k in peaks if k != "bf16") or "none"
        raise BandwiseError(f"precision {precision}: {device} has no {precision} peak in its preset (it lists bf16 and: {runs}); "
                            f"use bf16{' or fp8' if 'fp8' in peaks else ''}, or a cluster file whose device lists peak_flops_per_s {precision}")
