"""torchao's Float8Linear (tensorwise recipe) as torchtitan's float8 converter runs it
(``training.fp8_library: torchao``): its casts and layout copies where they differ from
TransformerEngine's (:meth:`KernelModel.quantise`), for the dense linears (attention and MLP;
routed experts keep their grouped GEMMs' casts).

Read in pytorch/ao ``torchao/float8/`` (float8_linear.py at 2d812af, float8_ops.py at 3e4098f,
fsdp_utils.py at 11ce634; a research helper, session 96; the weight's handling read again in
session 97): ``matmul_with_hp_or_float8_args`` saves the 16-bit input and the weight as it
received it (``save_for_backward(input_hp, weight_hp_t)``: FP8 under FSDP2's FP8 all-gather,
else 16-bit), so the backward casts the input again (an amax pass and a cast) for the
weight-gradient GEMM; the output gradient is cast for both backward
GEMMs (one kernel writing both layouts under ``torch.compile``, as the library's own
roofline model assumes); ``preprocess_addmm`` gives ``torch._scaled_mm`` its first operand
row-major and its second column-major, so the forward ``x @ W.t()`` copies nothing while the
input gradient ``dY @ W`` copies the row-major FP8 weight column-major (``.t().contiguous()
.t()``: a read and a write of each byte) in every backward. Under FSDP2's FP8 all-gather
(``training.fp8_param_gather``) each rank casts its shard before the gather and the gathered
weight is used as it arrives (that shard's cast, 1/dp of a weight, is left out); without it the
16-bit weight is cast in every forward and again in every backward (:func:`weight_cast_seconds`),
in place of TransformerEngine's cached cast. Eager mode's
separate abs, max and scaling kernels, and its copy of the input into the weight gradient's
layout, are not modelled: ``torch.compile`` fuses them, and torchtitan runs Float8 with it.
"""

from __future__ import annotations

from simcluster.compute import KernelModel, keeps_fp8_transpose
from simcluster.parallelism.fp8_weights import cast_seconds, transpose_seconds
from simcluster.scenario import TrainingSection


def applies(training: TrainingSection) -> bool:
    """Whether the FP8 linears run torchao's tensorwise casts (per-tensor scales)."""
    return training.precision == "fp8" and training.fp8_library == "torchao" and training.fp8_recipe != "block"


def weight_cast_seconds(km: KernelModel, training: TrainingSection, weights: list[float]) -> float:
    """Seconds one forward, or one backward, spends casting the 16-bit weights of ``weights``
    (elements of each) to FP8: ``matmul_with_hp_or_float8_args`` casts the weight in the forward
    and, having saved it in 16 bits, again in the backward for the input gradient
    (``hp_tensor_to_float8_dynamic``: an amax read and a rowwise cast, 5 B per element, every
    microbatch; torchao keeps no cast between them). None where FSDP2 gathers the weights in
    FP8 (``training.fp8_param_gather``): they arrive cast, and the backward uses them as they are."""
    if not applies(training) or training.fp8_param_gather:
        return 0.0
    return cast_seconds(km, weights, "fp8", columnwise=False)


def backward_seconds(km: KernelModel, tokens: float, shapes: list[tuple[float, float]]) -> float:
    """Seconds one microbatch's backward adds to TransformerEngine's output-gradient casts for
    linears of ``shapes`` ((in, out) features each) over ``tokens`` rows: the saved input cast
    again, the output gradient's second layout where TransformerEngine writes one (datacenter
    Blackwell under a per-tensor scale), and the weight's column-major copy."""
    one_layout = not keeps_fp8_transpose(km.fp8_recipe, km.profile.gpu.compute_capability)
    seconds = sum(km.quantise(tokens * k, "fp8", columnwise=False) for k, _ in shapes)
    if one_layout:
        seconds += sum(tokens * n for _, n in shapes) / km.hbm_bytes_per_s
    return seconds + transpose_seconds(km, [k * n for k, n in shapes])
