"""HBM bytes per element of the elementwise passes that accumulate gradients, each tensor read
or written once: the frameworks' accumulation paths (Megatron's ``main_grad.add_``, autograd's
``AccumulateGrad``, torch.autocast's ``ToCopyBackward0``, FSDP2's unsharded accumulator) are
sums of these, by the widths of what they read and write (bf16/fp16: 2 B, fp32: 4 B)."""

from __future__ import annotations

CAST_16_TO_32 = 2.0 + 4.0  # a 16-bit gradient read, its fp32 copy written
ADD_16_INTO_32 = 2.0 + 4.0 + 4.0  # a 16-bit gradient and the fp32 sum read, the fp32 sum written
ADD_16_INTO_16 = 2.0 + 2.0 + 2.0  # two 16-bit gradients read, one written
ADD_32_INTO_32 = 4.0 + 4.0 + 4.0  # two fp32 gradients read, one written
