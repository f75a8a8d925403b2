"""The units of work the engine executes: compute blocks and communication operations."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

# What compute time is spent on, for the step's time breakdown (engine/breakdown.py):
# tensor-core GEMMs; the attention core (fused kernel, or the unfused batched GEMMs and
# softmax); memory-bound kernels (norms, activations, residuals, rotary, copies, casts,
# embedding lookups, MoE permutes); the cross-entropy loss on the logits; adding each
# microbatch's weight gradients into the fp32 main gradients; the optimizer update.
CATEGORIES = ("gemm", "attention", "memory", "loss", "grad_accum", "optimizer", "host")


@dataclass(frozen=True)
class Work:
    """Seconds of compute split by category (one of ``CATEGORIES``); adds and scales."""

    parts: tuple[tuple[str, float], ...] = ()

    @staticmethod
    def of(**seconds: float) -> Work:
        """``Work.of(gemm=1e-3, memory=2e-4)``; zero parts are dropped, unknown ones refused."""
        unknown = set(seconds) - set(CATEGORIES)
        if unknown:
            raise ValueError(f"unknown work categories {sorted(unknown)}")
        return Work(tuple((c, float(seconds[c])) for c in CATEGORIES if seconds.get(c)))

    @property
    def total(self) -> float:
        """All the seconds, whatever they are spent on."""
        return sum(s for _, s in self.parts)

    def __add__(self, other: Work) -> Work:
        merged = dict(self.parts)
        for c, s in other.parts:
            merged[c] = merged.get(c, 0.0) + s
        return Work(tuple((c, merged[c]) for c in CATEGORIES if merged.get(c)))

    def scaled(self, factor: float) -> Work:
        """Every part times ``factor`` (a GEMM slowed by SMs lent to a collective, say)."""
        return Work(tuple((c, s * factor) for c, s in self.parts))


@dataclass(frozen=True)
class Compute:
    """Work on the compute stream (one or more fused kernels), in seconds.

    ``work`` says what the seconds are spent on; build with :meth:`of` so both agree.
    ``host`` = seconds the CPU spends issuing its kernels (``engine/worker.py`` keeps a host
    clock per rank: the GPU cannot finish a block before the host has issued it); ``sync`` = after
    it the host waits for the GPU to finish it (a device-to-host copy the next ops depend on, as
    a dropless MoE dispatcher's per-expert token counts), so the host's lead is lost there.
    """

    name: str
    seconds: float
    layer: int = -1
    kind: str = ""  # event kind; "" = the kind of the phase it belongs to
    work: Work = field(default_factory=Work)
    host: float = 0.0
    sync: bool = False
    #: the read-back's host seconds where measured (calibrate's ``measured.moe.count_read_s``);
    #: None: one Python op (``efficiency.host_op_us``)
    sync_s: float | None = None

    @staticmethod
    def of(
        name: str, work: Work, layer: int = -1, kind: str = "", host: float = 0.0, sync: bool = False,
        sync_s: float | None = None,
    ) -> Compute:
        """A compute block whose seconds are ``work``'s total."""
        return Compute(name, work.total, layer, kind, work, host, sync, sync_s)


@dataclass(frozen=True)
class Comm:
    """A collective or p2p exchange on a parallel group's communication stream.

    ``overlap`` = the comm runs concurrently with the next Compute segment (Megatron's
    tp-comm-overlap, ring attention); otherwise the compute stream waits for it.
    ``holds_sms`` = it runs as NCCL kernels whose CTAs take SMs from that compute, whatever its
    group (an async TP collective from torch.distributed); the data-parallel, context- and
    expert-parallel groups always do (``engine/interference.py``). ``sms`` > 0 = its kernels
    hold that many SMs instead (a TransformerEngine userbuffers overlap's ``num_sm``). It cannot
    start before the host has issued it (``host``: seconds of CPU time, on the rank's host clock).
    ``nccl`` False = not an NCCL call (a userbuffers exchange): its group's NCCL CTA limits
    (``cluster.nccl_communicators``) do not reach it.
    """

    name: str
    group: str  # tp, cp, ep, dp, pp
    op: str  # all_reduce, all_gather, reduce_scatter, all_to_all, send_recv
    nbytes: float
    overlap: bool = False
    layer: int = -1
    holds_sms: bool = False
    sms: int = 0
    host: float = 0.0  # seconds the CPU spends issuing it (see ``Compute.host``)
    #: an uneven exchange's time over an even one's of the same bytes (a calibrated MoE
    #: all-to-all, simcluster/moe_kernels.py), times DeepEP's own share inside a node
    #: (parallelism/expert.py ``deepep_link_factor``): the network moves ``nbytes`` times it, the
    #: events record ``nbytes``
    uneven: float = 1.0
    nccl: bool = True


Segment = Compute | Comm


def as_recompute(segments: list[Segment] | tuple[Segment, ...]) -> tuple[Segment, ...]:
    """The same work rerun before a backward: compute relabelled ``recompute_*``, comms kept."""
    return tuple(
        replace(s, kind="recompute", name=f"recompute_{s.name}") if isinstance(s, Compute) else s
        for s in segments
    )

# schedule op kind -> event kind of its compute
PHASE_KIND = {"F": "forward", "B": "backward_input", "W": "backward_weight", "BW": "backward"}
