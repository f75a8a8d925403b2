"""Core types shared by every pipeline schedule.

A schedule is data: for a :class:`ScheduleSpec` (p stages, m microbatches, v chunks) it
returns, per stage, the ordered list of :class:`PipeOp`. The engine (and
:mod:`simcluster.schedules.check`) derive cross-stage dependencies from
:meth:`Schedule.virtual_stage`: F(mb) at model position k waits for F(mb) at k-1, B(mb) at k
waits for B(mb) at k+1 (or for F(mb) at the last position), W waits for B on the same stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from simcluster.errors import UserError

OpKind = Literal["F", "B", "W", "BW"]

# Scenario field names used in error messages (the scenario schema owns these names).
FIELD_PP = "parallel.pp"
FIELD_VPP = "parallel.vpp"
FIELD_MICROBATCHES = "training.global_batch"  # m = global_batch / (dp * micro_batch)
FIELD_SCHEDULE = "parallel.schedule"


@dataclass(frozen=True)
class PipeOp:
    """One compute op of a pipeline stage.

    ``kind``: F forward, B backward for inputs, W backward for weights, BW both fused.
    ``chunk``: local chunk index on the stage (0..chunks-1).
    ``overlap``: True on the second op of an F&B pair that runs overlapped with the op just
    before it on the same stage (DualPipe); the engine may overlap their communication.
    """

    kind: OpKind
    microbatch: int
    chunk: int = 0
    overlap: bool = False

    def __str__(self) -> str:
        tail = "&" if self.overlap else ""
        return f"{tail}{self.kind}{self.microbatch}.{self.chunk}"


@dataclass(frozen=True)
class OpCosts:
    """What a cost-aware schedule plans with: one microbatch's F, B and W on one stage
    (seconds), the stage-to-stage transfer, and what W frees in units of F's stash
    (``w_memory``: B frees the rest of the stash, ``1 - w_memory``; above 1 under full
    recomputation, where B's rerun forward keeps more than F stashed until W, so B adds
    memory). Frameworks measure these in the first iterations (sail-sg's Zero Bubble runtime
    times F/B/W and p2p and the memory each pass allocates, then schedules); the simulator
    passes its own."""

    f: float = 1.0
    b: float = 1.0
    w: float = 1.0
    comm: float = 0.0
    w_memory: float = 0.5
    # per stage, the activation room in units of one microbatch's F stash (None: unknown)
    memory_limit: tuple[float, ...] | None = None
    # sail-sg's fixed per-layer estimate of w_memory, which its V heuristic plans with instead of
    # measurements (None: w_memory)
    w_memory_estimate: float | None = None
    # per stage, w_memory where stages differ (full recomputation: a stage with the loss keeps
    # its logits in F's stash); None: ``w_memory`` on every stage
    stage_w_memory: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("f", "b", "w"):
            if not getattr(self, name) > 0:
                raise ValueError(f"op cost {name} must be positive, got {getattr(self, name)!r}")
        if self.comm < 0 or min((self.w_memory, *(self.stage_w_memory or ()))) < 0.0:
            raise ValueError(f"comm and w_memory must be >= 0, got {self}")


@dataclass(frozen=True)
class ScheduleSpec:
    """Pipeline shape: ``p`` stages, ``m`` microbatches per step, ``v`` chunks per stage.

    ``costs``: op times for cost-aware schedules (None: unit times, as before profiling).
    ``group``: contiguous microbatches per chunk of an interleaved schedule (0: p, Megatron's
    default).
    ``rounds``: the interleaved schedule runs as torch.distributed.pipelining's
    ``ScheduleInterleaved1F1B`` (frameworks on PyTorch's schedules): max(1, m // p) rounds of
    m / rounds microbatches, under PyTorch's rule (m a multiple of the rounds, fewer than p
    allowed) instead of Megatron-Core's (group in [p, m]); and 1F1B as ``Schedule1F1B``, which
    refuses m < p.
    ``activation_limit``: v-auto's limit on each stage's activations, a fraction of 1F1B's
    (p microbatches of a whole stage); None: not given.
    """

    p: int
    m: int
    v: int = 1
    costs: OpCosts | None = None
    group: int = 0
    rounds: bool = False
    activation_limit: float | None = None

    def __post_init__(self) -> None:
        for value, field, what in (
            (self.p, FIELD_PP, "pipeline stages"),
            (self.m, FIELD_MICROBATCHES, "microbatches"),
            (self.v, FIELD_VPP, "virtual chunks per stage"),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(field, f"{what} must be a positive integer, got {value!r}")


class Schedule(Protocol):
    """A registered pipeline schedule (pure functions of a :class:`ScheduleSpec`)."""

    name: str
    splits_backward: bool
    uses_vpp: bool
    cost_aware: bool
    holds_every_microbatch: bool
    serial_receives_first: str

    def chunks(self, spec: ScheduleSpec) -> int:
        """Model chunks held by each stage."""
        ...

    def virtual_stages(self, spec: ScheduleSpec) -> int:
        """Number V of positions in the model's layer pipeline (layers are split over V)."""
        ...

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        """Per stage, the ops in execution order."""
        ...

    def virtual_stage(self, spec: ScheduleSpec, stage: int, chunk: int, microbatch: int) -> int:
        """Position 0..V-1 in the model's layer pipeline of ``chunk`` on ``stage``."""
        ...

    def validate(self, spec: ScheduleSpec) -> None:
        """Raise :class:`UserError` when this schedule cannot run ``spec``."""
        ...


class BaseSchedule:
    """Defaults for a one-chunk-per-stage, one-direction schedule; subclasses override."""

    name: str = ""
    splits_backward: bool = False
    uses_vpp: bool = False  # True: parallel.vpp sets the chunks per stage
    cost_aware: bool = False  # True: the order depends on ScheduleSpec.costs
    # True: every microbatch's activations are held at once, so memory grows with m and a long
    # step has no steady state to extrapolate from (steady_state.py)
    holds_every_microbatch: bool = False
    # under a pipeline engine's blocking p2p (overlap.pp_p2p: serial), the pass ("F" or "B")
    # whose receive comes before the send of the previous op when that was the other pass:
    # DeepSpeed's TrainSchedule receives a forward's activation before it sends the previous
    # backward's gradient
    serial_receives_first: str = "F"

    def chunks(self, spec: ScheduleSpec) -> int:
        return 1

    def virtual_stages(self, spec: ScheduleSpec) -> int:
        return spec.p * self.chunks(spec)

    def virtual_stage(self, spec: ScheduleSpec, stage: int, chunk: int, microbatch: int) -> int:
        return chunk * spec.p + stage

    def validate(self, spec: ScheduleSpec) -> None:
        if spec.v != 1 and self.chunks(spec) != spec.v:
            raise UserError(
                FIELD_VPP,
                f"schedule '{self.name}' uses {self.chunks(spec)} chunk(s) per stage, got "
                f"vpp={spec.v}; set parallel.vpp: 1 or use schedule 'interleaved' or 'looped-bfs'",
            )

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        raise NotImplementedError


class LoopedSchedule(BaseSchedule):
    """``parallel.vpp`` chunks per stage placed in loops: chunk c of stage s is model position
    ``c * p + s`` (BaseSchedule's placement), one fused backward per chunk (interleaved 1F1B,
    looped breadth-first)."""

    splits_backward = False
    uses_vpp = True

    def chunks(self, spec: ScheduleSpec) -> int:
        return spec.v


class VShapeSchedule(BaseSchedule):
    """Two chunks per stage in a V: chunk 0 runs model position ``stage``, chunk 1 runs
    ``2p - 1 - stage``, so the first stage holds both ends of the model (ZB-V, DualPipeV)."""

    def chunks(self, spec: ScheduleSpec) -> int:
        return 2

    def virtual_stage(self, spec: ScheduleSpec, stage: int, chunk: int, microbatch: int) -> int:
        return stage if chunk == 0 else 2 * spec.p - 1 - stage

    def validate(self, spec: ScheduleSpec) -> None:
        if spec.v not in (1, 2):
            raise UserError(FIELD_VPP, f"{self.name} always uses 2 chunks per stage; drop parallel.vpp")


def require_m_at_least(spec: ScheduleSpec, name: str, minimum: int, why: str) -> None:
    """UserError when ``spec.m < minimum`` (schedules whose order needs enough microbatches)."""
    if spec.m < minimum:
        raise UserError(
            FIELD_MICROBATCHES,
            f"schedule '{name}' needs at least {minimum} microbatches ({why}), got {spec.m}; "
            f"raise the global batch or lower the micro batch size",
        )


def pytorch_rounds(spec: ScheduleSpec) -> tuple[int, int]:
    """torch.distributed.pipelining's (rounds, microbatches per round) of a looped schedule:
    max(1, m // p) rounds of m / rounds each (p when p divides m, all m when m < p)."""
    n = max(1, spec.m // spec.p)
    return n, spec.m // n


def require_whole_rounds(spec: ScheduleSpec, name: str, pytorch_class: str) -> None:
    """UserError unless ``spec.m`` is a whole number of PyTorch's rounds (``pytorch_rounds``),
    as ``pytorch_class`` requires: it relaxed Megatron's m % p == 0 to this, m < p included."""
    n, _ = pytorch_rounds(spec)
    if spec.m % n:
        lower, upper = n * (spec.m // n), n * (spec.m // n + 1)
        raise UserError(
            FIELD_MICROBATCHES,
            f"schedule '{name}' runs microbatches in {n} rounds of equal size (as PyTorch's "
            f"{pytorch_class}: max(1, m // pp) rounds), so m must be a multiple of {n}, got "
            f"{spec.m}; use {lower} or {upper} microbatches",
        )


def locate(schedule: Schedule, spec: ScheduleSpec, vstage: int, microbatch: int) -> tuple[int, int]:
    """(stage, chunk) that runs model position ``vstage`` for ``microbatch``."""
    for stage in range(spec.p):
        for chunk in range(schedule.chunks(spec)):
            if schedule.virtual_stage(spec, stage, chunk, microbatch) == vstage:
                if _chunk_serves(schedule, spec, chunk, microbatch):
                    return stage, chunk
    raise ValueError(f"no stage runs virtual stage {vstage} for microbatch {microbatch}")


def _chunk_serves(schedule: Schedule, spec: ScheduleSpec, chunk: int, microbatch: int) -> bool:
    serves = getattr(schedule, "chunk_serves", None)
    return True if serves is None else bool(serves(spec, chunk, microbatch))


Upstream = tuple[int, Literal["F", "B"], int, int]


def upstream(schedule: Schedule, spec: ScheduleSpec, stage: int, op: PipeOp) -> Upstream | None:
    """The op on another (or the same) stage that must finish before ``op`` may start.

    Returns ``(stage, "F"|"B", microbatch, chunk)`` where "B" means the B or BW of that
    (microbatch, chunk); ``None`` when ``op`` only depends on ops earlier on its own stage.
    """
    last = schedule.virtual_stages(spec) - 1
    k = schedule.virtual_stage(spec, stage, op.chunk, op.microbatch)
    if op.kind == "F":
        if k == 0:
            return None
        s, c = locate(schedule, spec, k - 1, op.microbatch)
        return (s, "F", op.microbatch, c)
    if op.kind in ("B", "BW"):
        if k == last:
            return (stage, "F", op.microbatch, op.chunk)
        s, c = locate(schedule, spec, k + 1, op.microbatch)
        return (s, "B", op.microbatch, c)
    return (stage, "B", op.microbatch, op.chunk)
