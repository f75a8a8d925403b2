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
are those of the groups in :data:`INTERFERING_GROUPS`: data parallel (dp, edp; ZeRO-1/2/3
gathers and reduce-scatters run there), context parallel (cp) and expert parallel (ep).
Not interfering:

* pipeline p2p: one send/recv pair per peer, few channels (NCCL_MAX_P2P_NCHANNELS), and
  mostly overlapping idle time rather than compute;
* tensor parallel: Megatron's TP overlap runs through TransformerEngine userbuffers with
  1-4 SMs for the bulk and ring-exchange methods (NeMo/Megatron-Bridge userbuffers presets),
  and blocking TP communication has no concurrent compute to slow. The exceptions are the
  TP collectives launched asynchronously through torch.distributed next to a GEMM (the
  backward's input re-gather without userbuffers, nanotron's async linears): NCCL kernels
  like any other, marked ``holds_sms`` on their segment.

Several interfering collectives in flight at once count as one: an ASSUMPTION that keeps
the rate two-valued (collectives on different communicators would each hold their own CTAs;
on a rank they mostly run one after another on the data-parallel stream anyway). Compute segments are re-timed exactly: a
sleeping compute segment is interrupted whenever the rank's in-flight count crosses zero
and continues with its remaining work at the new rate.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field

import simpy

INTERFERING_GROUPS = frozenset({"dp", "edp", "dps", "dpr", "cp", "ep"})


@dataclass
class SmShare:
    """Per-rank count of in-flight interfering collectives and the compute rate it implies."""

    env: simpy.Environment
    sm_count: int | None
    collective_sms: int
    _in_flight: dict[int, int] = field(default_factory=dict)
    # processes sleeping in compute, per rank; a dict keeps insertion order (deterministic)
    _sleepers: dict[int, dict[simpy.Process, None]] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        """Whether collectives slow compute at all (collective_sms > 0)."""
        return self.collective_sms > 0 and bool(self.sm_count)

    @property
    def slow_rate(self) -> float:
        """Compute speed, relative to standalone, next to an in-flight collective."""
        if not self.enabled:
            return 1.0
        assert self.sm_count is not None
        return (self.sm_count - self.collective_sms) / self.sm_count

    def rate(self, rank: int) -> float:
        """The current compute speed of ``rank`` relative to standalone."""
        return self.slow_rate if self._in_flight.get(rank, 0) else 1.0

    def interferes(self, group: str, holds_sms: bool = False) -> bool:
        """Whether a collective of ``group`` occupies SMs that compute would use (``holds_sms``:
        this one does, whatever its group)."""
        return self.enabled and (holds_sms or group in INTERFERING_GROUPS)

    def enter(self, rank: int) -> None:
        """A collective's kernel became resident on ``rank``."""
        count = self._in_flight.get(rank, 0) + 1
        self._in_flight[rank] = count
        if count == 1:
            self._wake(rank)

    def leave(self, rank: int) -> None:
        """A collective on ``rank`` ended."""
        count = self._in_flight[rank] - 1
        self._in_flight[rank] = count
        if count == 0:
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
