"""How the vocab-parallel cross-entropy runs on a GPU's logits (``training.fused_cross_entropy``):
its HBM bytes per phase, its tensor-parallel collectives and whether it keeps an fp32 copy.

In units of the fp32 logits L (4 bytes an element of the rank's tokens x vocab / tp):

- ``False``: Megatron's and nanotron's ``vocab_parallel_cross_entropy`` in eager PyTorch.
  Forward casts the 16-bit logits to fp32 (0.5 L read + L write), takes the max (L),
  subtracts it in place (2 L), exponentiates in place (2 L), sums (L) and divides in place
  to keep the softmax (2 L): 9.5 L. Backward updates the softmax in place by the loss
  gradient (2 L) and casts it back to 16 bits (1.5 L): 3.5 L. It all-reduces the max, the
  target logit and the sum of exponentials one by one.
- ``"native"``: Megatron-Core's ``fused_vocab_parallel_cross_entropy`` (``--cross-entropy-loss-
  fusion`` with ``cross_entropy_fusion_impl`` native, its default), the same steps under
  ``jit_fuser`` (``torch.compile`` from PyTorch 2.2). Compiled as whole functions (the form
  until its 2026 rewrite), a graph that mutates the logits in place and also reduces or
  scatters into them is materialised in a fresh buffer and copied back ("a full logits-sized
  transient allocation plus an extra read/write pass", the rewrite's own note in
  ``megatron/core/fusions/fused_cross_entropy.py``). Forward: the fp32 upcast with the max
  (0.5 + 1 L), subtract-exp-sum into a fresh buffer and back (L + L + 2 L), the in-place divide
  (2 L): 7.5 L. Backward: the scatter and scale into a fresh buffer and back (4 L) with the
  16-bit cast fused in (0.5 L): 4.5 L. The target logit and the sum go out in one all-reduce
  (``torch.cat``), after the max's.
- ``"te"``: TransformerEngine's ``parallel_cross_entropy`` (``cross_entropy_fusion_impl`` te,
  ``te_parallel_cross_entropy``; its Triton kernels in ``transformer_engine/pytorch/triton/
  cross_entropy.py``). Forward: an online-softmax pass reads the 16-bit logits (each rank's
  running max and sum), one all-gather of those and the target logit, then the loss kernel
  reads the logits again and writes the gradient over them in place; backward scales that
  gradient by the per-token loss gradient in place (``element_mul_kernel``; Megatron's masked
  per-token loss makes it a tensor, not 1). 3 and 2 16-bit logit sizes; no fp32 copy.
- ``True``: one fused kernel (Liger-Kernel's cross-entropy): the 16-bit logits read once
  forward and the gradient written once backward; the logit soft-cap folded in.
"""

from __future__ import annotations

from typing import Literal

#: the scenario's setting: False, True, "native" or "te"
LossMode = bool | Literal["native", "te"]


def cross_entropy_bytes(mode: LossMode, elements: float, elt: float, backward: bool) -> float:
    """HBM bytes of the loss over ``elements`` logits of ``elt`` bytes (16-bit: 2), one phase."""
    if mode is True:
        return elements * elt
    if mode == "te":
        return (2.0 if backward else 3.0) * elements * elt
    fp32 = elements * 4.0
    if mode == "native":
        return fp32 * (4.5 if backward else 7.5)
    return fp32 * (3.5 if backward else 9.5)


def loss_collectives(mode: LossMode, tokens: float, tp: int) -> list[tuple[str, str, float]]:
    """(name, collective, nccl-tests size in bytes) of the loss's forward TP collectives, each of
    fp32 values per token: all-reduces of one or two values, or TransformerEngine's all-gather
    of each rank's (max, sum, target logit), whose size is the gathered output."""
    per_token = tokens * 4.0
    if mode == "te":
        return [("loss_tp_gather", "all_gather", 3 * per_token * tp)]
    if mode in (True, "native"):
        return [("loss_tp_max", "all_reduce", per_token), ("loss_tp_sums", "all_reduce", 2 * per_token)]
    return [
        ("loss_tp_max", "all_reduce", per_token),
        ("loss_tp_target", "all_reduce", per_token),
        ("loss_tp_sum_exp", "all_reduce", per_token),
    ]


def keeps_fp32_copies(mode: LossMode) -> bool:
    """Whether the loss makes fp32 copies of the logits beside the 16-bit ones (the unfused
    loss's and the compiled native one's upcast); the fused kernels work on the 16-bit logits."""
    return mode is False or mode == "native"


def kept_bytes_per_logit(mode: LossMode, elt: float) -> float:
    """Bytes per logit the loss keeps for its backward: the fp32 softmax of the unfused and the
    native losses (computed in place in their fp32 copy), or the 16-bit logits TransformerEngine's
    and Liger-Kernel's kernels overwrite with the gradient in their forward (``elt`` each)."""
    return 4.0 if keeps_fp32_copies(mode) else elt


def compiled_transient_per_logit(mode: LossMode, elt: float) -> float | None:
    """Bytes per logit alive only while the compiled native loss runs, beyond the fp32 copy it
    keeps: its forward holds the ``elt``-byte logits and the fresh fp32 buffer Inductor
    materialises the in-place graph in, its backward that buffer alone; the larger counts.
    None for the other losses: the fused kernels keep nothing beside their input, and the
    eager loss's transients are its elementwise style's (``memory.loss_transient_bytes``)."""
    if mode != "native":
        return None
    return max(elt + 4.0, 4.0)


def folds_softcap(mode: LossMode) -> bool:
    """Whether the loss applies the logit soft-cap inside its kernel (Liger-Kernel's ``softcap``);
    Megatron's and TransformerEngine's losses take no cap."""
    return mode is True
