"""Megatron-DeepSpeed's ZB-H1 (``--enable-zbh1-pipeline``): DeepSpeed's pipeline engine running
``ZeroBubbleH1Pipeline`` (microsoft/Megatron-DeepSpeed,
megatron/core/pipeline_parallel/deepspeed_zbh1_schedule.py) in place of its ``TrainSchedule``.

The order differs from the paper's handcrafted ZB-H1 (``zb-h1``) in where the weight gradients
run. Stage s runs p-s-1 warm-up forwards, then s steps of a forward and a backward-only pass
whose weight gradients wait in the ``WeightGradStore`` queue, then the steady steps with a
whole backward (weight gradients at once) - except the step of the last forward, which splits
it and runs one queued weight pass - then the cool-down's backward-only passes each followed by
one queued weight pass, then the queue's rest (pull request 396, deepspeedai/Megatron-DeepSpeed:
"when the backward pass is followed by a weight pass, the custom schedule does not split
them"). The queue is first in, first out (``WeightGradStore.pop``). The first stage never
splits (a 1F1B). Both place s weight passes in
the cool-down bubble of stage s, so the idle time is ZB-H1's (p-1)(F+B-W) (Qi et al. 2024).

``--enable-zbh1-exact-semantics`` (``zb-h1-ds-exact``) splits every steady backward of the
stages after the first as well, each followed by the oldest queued weight pass: the paper's
ZB-H1, the weight pass of microbatch i - s after the backward of microbatch i on stage s, and
each gradient sent before its weight pass rather than after the whole backward. Its tutorial
(examples_deepspeed/zero_bubble_pp/README.md) calls the default "more friendly to a synchronized
communication implementation" and exact semantics "a bit slower": under the blocking transfers a
steady exchange then waits a weight pass. A gradient's ``dist.send`` completes only once the
previous stage's receive runs, which PyTorch's NCCL process group orders after that stage's
forward (each op's NCCL stream first waits for the work issued before it), and the sender's
weight pass waits for the send (``work.wait()`` on the compute stream); its next activation
receive, issued after the weight pass, waits for it too, and the previous stage's blocking
activation send with it.

Each step's sends and receives are blocking, in its own order: a step with a forward and a
backward receives the gradient before it sends the forward's activation, and sends the
gradient right after the backward (:attr:`serial_receives_first`, ``overlap.pp_p2p: serial``).
"""

from __future__ import annotations

from collections import deque

from simcluster.schedules.base import BaseSchedule, PipeOp, ScheduleSpec, require_m_at_least
from simcluster.schedules.registry import register

NAME = "zb-h1-ds"
#: the same schedule under ``--enable-zbh1-exact-semantics``
EXACT_NAME = "zb-h1-ds-exact"


def stage_order(p: int, m: int, stage: int, exact: bool = False) -> list[PipeOp]:
    """Stage ``stage``'s ops as ``ZeroBubbleH1Pipeline.steps`` issues them (m >= p), with
    ``get_args().enable_zbh1_exact_semantics`` as ``exact``."""
    first = stage == 0
    ops = [PipeOp("F", mb) for mb in range(p - stage - 1)]  # F section
    queued: deque[int] = deque()  # backward-only passes whose weight pass waits

    def split(mb: int) -> None:  # BackwardOnlyPass: its weight gradients join the queue
        ops.append(PipeOp("B", mb))
        queued.append(mb)

    def weight_pass() -> None:  # WeightPass: the oldest queued weight gradients
        ops.append(PipeOp("W", queued.popleft()))

    forward = len(ops)
    backward = 0
    for _ in range(stage):  # FB section
        ops.append(PipeOp("F", forward))
        split(backward)
        forward, backward = forward + 1, backward + 1
    while forward < m:  # FBW section
        ops.append(PipeOp("F", forward))
        forward += 1
        if first or (forward < m and not exact):
            ops.append(PipeOp("BW", backward))
        else:
            split(backward)
            weight_pass()
        backward += 1
    for mb in range(backward, m):  # BW section
        if first:
            ops.append(PipeOp("BW", mb))
        else:
            split(mb)
            weight_pass()
    while queued:  # W section
        weight_pass()
    return ops


@register
class ZeroBubbleH1DeepSpeed(BaseSchedule):
    """Megatron-DeepSpeed's ZB-H1: weight gradients of s microbatches deferred on stage s."""

    name = NAME
    splits_backward = True
    # a step's backward receives its gradient before the step's forward sends its activation
    serial_receives_first = "B"

    def validate(self, spec: ScheduleSpec) -> None:
        super().validate(spec)
        # with fewer, a warm-up step's forward would precede a backward in another step, whose
        # blocking order this model does not follow
        require_m_at_least(spec, self.name, spec.p, "its steady section runs at least once")

    #: whether every steady backward after the first stage is split (exact semantics)
    exact = False

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        self.validate(spec)
        return [stage_order(spec.p, spec.m, s, self.exact) for s in range(spec.p)]


@register
class ZeroBubbleH1DeepSpeedExact(ZeroBubbleH1DeepSpeed):
    """Megatron-DeepSpeed's ZB-H1 with exact semantics: every steady backward after stage 0 split, W lagging B by s."""

    name = EXACT_NAME
    exact = True
