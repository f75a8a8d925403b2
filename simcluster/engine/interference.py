"""Compute/communication interference: NCCL collectives occupy SMs that compute then lacks.

An NCCL collective runs as one CTA per channel, and NCCL's CTAs never share an SM with compute
kernels (NVIDIA/nccl issue 689, maintainer's words); a DGX-A100 all-reduce uses 24 CTAs
(NVIDIA/nccl issue 1225) and an H100 GEMM next to a 24-CTA all-gather drops from ~80% to ~47%
MFU (NVIDIA developer forum thread 337991). Lee et al. (arXiv 2507.03114) measure an average
18.9% slowdown of overlapped compute.

The rule simulated here: while at least one *interfering* collective is in flight on a rank --
from the moment the rank enters it (its stream is free, so the kernel is resident) until it
ends, including the time it waits for its peers -- that rank's compute progresses at rate
``(sm_count - collective_sms) / sm_count`` of its standalone speed. Interfering collectives
are those of the groups in :data:`INTERFERING_GROUPS`: data parallel (dp, edp, and hybrid
sharding's shard and replica groups dps/dpr, edps/edpr, ZeRO++'s hpZ and qgZ groups dph, dpl,
dpx; ZeRO-1/2/3 gathers and reduce-scatters run there; FP8's amax all-reduce over the stage, amax), context parallel (cp, and hierarchical CP's all-to-all and ring groups cpa/cpr:
the same kernels on smaller groups) and expert parallel (ep, etp).
Not interfering:

* pipeline p2p: one send/recv pair per peer, few channels (NCCL_MAX_P2P_NCHANNELS), and
  mostly overlapping idle time rather than compute;
* blocking tensor-parallel communication: no concurrent compute to slow. The TP collectives
  launched asynchronously through torch.distributed next to a GEMM (the backward's input
  re-gather and, in a fused backward, the input gradient's reduce-scatter without
  userbuffers; nanotron's async linears) are NCCL kernels like any other, marked
  ``holds_sms`` on their segment.

TransformerEngine's userbuffers overlaps are kernels too, with an SM count of their own
(``num_sm`` of the overlap's config, e.g. the bulk backward overlaps of NeMo's H100 presets hold
2-24 SMs next to the GEMM they overlap): such a collective carries its count (``Comm.sms``)
and holds that many SMs while in flight, whatever the NCCL rule above says. An overlap with
``set_sm_margin`` holds none here: its GEMM runs on the SMs left to it instead
(``simcluster.userbuffers``); ring exchanges move data on copy engines.

Several interfering collectives in flight at once hold the sum of their SMs. They run on
different streams (one per communicator kind, :data:`~simcluster.engine.recorder.STREAM_OF_GROUP`;
a stream runs one collective at a time), so each is its own kernel with its own CTAs, and two
NCCL CTAs cannot share an SM: NCCL's kernels are built for one CTA per SM
(``__launch_bounds__(NCCL_MAX_NTHREADS, 1)`` in its generated device code) with up to 96
registers a thread (``-maxrregcount=96``, NVIDIA/nccl makefiles/common.mk), so one 512- or
640-thread CTA takes 49,152-61,440 of an SM's 65,536 registers and a second cannot join it.
The compute rate is floored at one SM. Compute segments are re-timed exactly: a sleeping
compute segment is interrupted whenever the rank's held SM count changes and continues with
its remaining work at the new rate.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field

import simpy

INTERFERING_GROUPS = frozenset(
    {"dp", "edp", "dps", "dpr", "edps", "edpr", "dph", "dpl", "dpx", "amax", "cp", "cpa", "cpr", "ep", "etp"}
)


@dataclass
class SmShare:
    """Per rank, the SM counts of its in-flight interfering collectives, and the compute rate
    they leave."""

    env: simpy.Environment
    sm_count: int | None
    collective_sms: int
    #: the most SMs a userbuffers overlap of this run holds (0: none); enables the share on a
    #: profile whose NCCL collectives take none
    userbuffer_sms: int = 0
    #: group -> its NCCL channels (one CTA, one SM each) where its communicator's CTA limits
    #: change them from ``collective_sms`` (simcluster.nccl_ctas)
    group_sms: dict[str, int] = field(default_factory=dict)
    #: SMs an NVLS / NVLS_TREE collective holds instead of ``collective_sms`` (None: the same)
    nvls_sms: int | None = None
    # rank -> {SMs held: collectives in flight holding that many}, and their sum now
    _in_flight: dict[int, dict[int, int]] = field(default_factory=dict)
    _held_now: dict[int, int] = field(default_factory=dict)
    # processes sleeping in compute, per rank; a dict keeps insertion order (deterministic)
    _sleepers: dict[int, dict[simpy.Process, None]] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        """Whether collectives slow compute at all (some collective holds SMs)."""
        return bool(self.sm_count) and max(self.collective_sms, self.userbuffer_sms) > 0

    @property
    def slow_rate(self) -> float:
        """Compute speed, relative to standalone, next to an in-flight NCCL collective."""
        return self._rate_with(self.collective_sms)

    def _rate_with(self, held: int) -> float:
        if not self.enabled or held <= 0:
            return 1.0
        assert self.sm_count is not None
        return max(self.sm_count - held, 1) / self.sm_count

    def _update(self, rank: int) -> bool:
        """Recount the SMs ``rank`` holds; whether that changed."""
        counts = self._in_flight[rank]
        held = sum(sms * n for sms, n in counts.items())
        changed = held != self._held_now.get(rank, 0)
        self._held_now[rank] = held
        return changed

    def rate(self, rank: int) -> float:
        """The current compute speed of ``rank`` relative to standalone."""
        return self._rate_with(self._held_now.get(rank, 0))

    def held_by(self, group: str, holds_sms: bool = False, sms: int = 0, nvls: bool = False) -> int:
        """SMs a collective of ``group`` takes from compute while in flight: ``sms`` when it
        names its own count (a userbuffers overlap), else its communicator's NCCL channels
        (``group_sms``, else ``collective_sms``; ``nvls``: an NVLS algorithm's ``nvls_sms``,
        within the communicator's limit) when it interferes (its group, or ``holds_sms``: an
        NCCL call whatever its group), else 0."""
        if not self.enabled:
            return 0
        if sms:
            return sms
        if holds_sms or group in INTERFERING_GROUPS:
            held = self.group_sms.get(group, self.collective_sms)
            return min(held, self.nvls_sms) if nvls and self.nvls_sms is not None else held
        return 0

    def counts_nvls(self, group: str, holds_sms: bool, sms: int) -> bool:
        """Whether a collective's SMs depend on its algorithm being NVLS (so the caller should
        find out): an NCCL call that interferes, on a profile with its own NVLS count."""
        return (
            self.nvls_sms is not None and self.enabled and not sms
            and (holds_sms or group in INTERFERING_GROUPS)
        )  # fmt: skip

    def enter(self, rank: int, sms: int | None = None) -> None:
        """A collective holding ``sms`` SMs (default NCCL's) became resident on ``rank``."""
        held = self.collective_sms if sms is None else sms
        counts = self._in_flight.setdefault(rank, {})
        counts[held] = counts.get(held, 0) + 1
        if self._update(rank):
            self._wake(rank)

    def leave(self, rank: int, sms: int | None = None) -> None:
        """A collective on ``rank`` holding ``sms`` SMs (default NCCL's) ended."""
        held = self.collective_sms if sms is None else sms
        self._in_flight[rank][held] -= 1
        if self._update(rank):
            self._wake(rank)

    def _wake(self, rank: int) -> None:
        # the rate changed: sleeping compute re-times its remaining work; each process is
        # interrupted once even if the count changes again before it resumes
        sleepers = self._sleepers.get(rank)
        if not sleepers:
            return
        active = self.env.active_process
        for proc in list(sleepers):
            if proc is not active and proc.is_alive:
                proc.interrupt("sm_share")
        sleepers.clear()

    def compute(self, rank: int, seconds: float) -> Generator:
        """Run ``seconds`` of standalone compute on ``rank`` at the rank's varying rate."""
        env = self.env
        if not self.enabled:
            yield env.timeout(seconds)  # the exact pre-interference path
            return
        proc = env.active_process
        if proc is None:  # a rate change interrupts the sleeping process, so there must be one
            raise RuntimeError("SmShare.compute must run inside a SimPy process")
        sleepers = self._sleepers.setdefault(rank, {})
        remaining = seconds
        while remaining > 0:
            rate = self.rate(rank)
            t0 = env.now
            sleepers[proc] = None
            try:
                yield env.timeout(remaining / rate)
                return
            except simpy.Interrupt:
                remaining -= (env.now - t0) * rate
            finally:
                sleepers.pop(proc, None)
