"""What can set a stage's activation peak: the stash alone, or a transient on top of it.

Its own module so that both the memory model (``memory.StageMemory.peak_part``) and the walk that
finds the peak (``memory_report``) name the parts by one constant each.
"""

from __future__ import annotations

#: the parts a ``WalkPeak.part`` / ``StageMemory.peak_part`` can be
STASH, LOSS_LOGITS, CP_ATTENTION, WEIGHT_GRADS, BUCKET_COPY = (
    "stash", "loss_logits", "cp_attention", "weight_grads", "bucket_copy",
)
#: how the memory command names what sets an activation peak beside the stash, in full
PEAK_PARTS = {
    BUCKET_COPY: "a gradient bucket's flat copy or cast",
    WEIGHT_GRADS: "a weight pass's 16-bit gradients",
    LOSS_LOGITS: "the loss's logit copies",
    CP_ATTENTION: "the context-parallel attention's buffers",
}
