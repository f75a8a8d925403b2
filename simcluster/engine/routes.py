"""Where a rank's pipeline outputs go, looked up once per run instead of once per op.

A step of a 405B model runs ~100,000 pipeline ops; each asked :func:`~simcluster.schedules.locate`
(every stage x chunk tried until one holds the target position) and ``Layout.coords`` (a search
of the rank grid) for its receiver, a few percent of the whole simulation. The answers depend
only on the schedule, the layout and the microbatch, so they are computed once and kept: the
same values in the same cases, so the simulated step is unchanged to the last bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simcluster.layout import Layout
from simcluster.schedules import Schedule, ScheduleSpec, locate


@dataclass
class PipelineRoutes:
    """Cached pipeline lookups of one run: position -> (stage, chunk) per microbatch, and the
    rank at the same tp/cp/dp place of another stage."""

    schedule: Schedule
    spec: ScheduleSpec
    layout: Layout
    # microbatch -> {virtual stage -> (stage, chunk)}: the first stage and chunk, in locate's
    # order, whose position it is and that serves the microbatch
    _tables: dict[int, dict[int, tuple[int, int]]] = field(default_factory=dict)
    _peers: dict[tuple[int, int], int] = field(default_factory=dict)
    _virtual_stages: int | None = None

    @property
    def virtual_stages(self) -> int:
        """The schedule's positions in the model's layer pipeline (cached)."""
        if self._virtual_stages is None:
            self._virtual_stages = self.schedule.virtual_stages(self.spec)
        return self._virtual_stages

    def locate(self, vstage: int, microbatch: int) -> tuple[int, int]:
        """:func:`~simcluster.schedules.locate`'s answer, from a table built per microbatch."""
        table = self._tables.get(microbatch)
        if table is None:
            table = self._tables[microbatch] = self._table(microbatch)
        hit = table.get(vstage)
        if hit is None:
            # not a position of this microbatch: locate raises its own error
            return locate(self.schedule, self.spec, vstage, microbatch)
        return hit

    def _table(self, microbatch: int) -> dict[int, tuple[int, int]]:
        sched, spec = self.schedule, self.spec
        serves = getattr(sched, "chunk_serves", None)
        table: dict[int, tuple[int, int]] = {}
        # the order locate tries them in, keeping the first match of each position
        for stage in range(spec.p):
            for chunk in range(sched.chunks(spec)):
                k = sched.virtual_stage(spec, stage, chunk, microbatch)
                if k in table:
                    continue
                if serves is None or bool(serves(spec, chunk, microbatch)):
                    table[k] = (stage, chunk)
        return table

    def peer(self, rank: int, stage: int) -> int:
        """The rank of ``stage`` at ``rank``'s tensor-, context- and data-parallel place."""
        key = (rank, stage)
        hit = self._peers.get(key)
        if hit is None:
            c = self.layout.coords(rank)
            hit = self._peers[key] = self.layout.rank(tp=c["tp"], cp=c["cp"], dp=c["dp"], pp=stage)
        return hit
