"""The output logits' tanh soft-capping, ``logits = c * tanh(logits / c)`` (``model.logit_softcap``;
Gemma 2's ``final_logit_softcapping`` 30, applied by transformers' ``Gemma2ForCausalLM.forward``
between the LM head and the loss).

It is memory-bound work over the b*s*V/tp logits of the last stage, with no matmul (so no model
FLOPs), costed by how the framework runs its element-wise operations (``training.elementwise``):

- inside a fused loss (``training.fused_cross_entropy``): Liger-Kernel's cross-entropy and
  fused linear cross-entropy take ``softcap`` and apply the tanh (and its derivative) to each
  logit block they already hold in registers: no pass and no tensor of its own;
- ``fused`` (one compiled kernel, ``torch.compile``): forward reads the 16-bit logits and writes
  the capped ones, 2 elements; backward reads the incoming gradient and the saved capped
  logits and writes the gradient, d/dx c*tanh(x/c) = 1 - tanh^2(x/c), 3 elements;
- ``eager`` and ``nanotron`` (one kernel per operation, as Gemma2ForCausalLM writes it:
  ``logits / c``, ``torch.tanh``, ``* c``): forward three read-and-write passes, 6 elements;
  backward the two scalar multiplications' read-and-write and tanh's backward (the gradient
  and tanh's saved output in, the gradient out), 2 + 3 + 2 = 7 elements.

What it keeps for the backward, outside a fused loss: one 16-bit tensor of the logits (eager
``torch.tanh`` saves its output; the scalar divide and multiply save nothing; a compiled kernel
saves one of its input or output), :func:`kept_bytes`.
"""

from __future__ import annotations

# elements of the logits moved per pass, (forward, backward), by whether each operation is its
# own kernel (the module docstring)
_FUSED = (2.0, 3.0)
_PER_OP = (6.0, 7.0)


def traffic_bytes(cap: float, fused_loss: bool, per_op: bool, logits: float, elt: float, backward: bool) -> float:
    """HBM bytes of the cap's pass over ``logits`` elements of ``elt`` bytes, one phase."""
    if not cap or fused_loss:
        return 0.0
    passes = _PER_OP if per_op else _FUSED
    return passes[1 if backward else 0] * logits * elt


def kept_bytes(cap: float, fused_loss: bool, logits: float, elt: float) -> float:
    """Bytes the cap keeps for its backward: one 16-bit copy of the logits, none in a fused loss."""
    return 0.0 if not cap or fused_loss else logits * elt
