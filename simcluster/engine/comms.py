"""Communication as SimPy processes: per-rank streams, symmetric peers, rendezvous.

In symmetric mode one representative rank per stage is simulated; each collective is started
for every symmetric group of that stage at once (so their flows share links), and the
representative waits for its own. In all-ranks mode every rank is simulated and a collective
starts when the last member of its group arrives (a rendezvous), as NCCL does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy

from simcluster.engine.interference import SmShare
from simcluster.engine.recorder import STREAM_OF_GROUP, Recorder
from simcluster.engine.stream_slot import StreamSlot
from simcluster.layout import Layout

GROUP_DIM = {
    "tp": "tp",
    "cp": "cp",
    "cpa": "cpa",  # a2a+p2p: the all-to-all groups inside cp
    "cpr": "cpr",  # and the ring across them
    "ep": "ep",
    "etp": "etp",
    "dp": "dpcp",
    "dps": "dps",  # hybrid sharding: the ranks sharing one copy of the ZeRO state
    "dpr": "dpr",  # and the replicas of one shard
    "edp": "edp",
    "edps": "edps",  # hybrid sharding of the routed experts: their shard group in the replica
    "edpr": "edpr",  # and the replicas of one expert shard
    "dph": "dph",  # ZeRO++ hpZ: the secondary weight partition's ranks (inside a node)
    "dpl": "dpl",  # ZeRO++ qgZ: the ZeRO group's ranks in one node
    "dpx": "dpx",  # and those at the same place in every node
    "pp": "pp",
    # the receiving stage's all-gather of the slices a scatter/gather pipeline transfer sends
    # (overlap.pp_scatter_gather): a TP-group collective that belongs to the pipeline transfer
    "ppg": "tp",
    "embd": "embd",
    # FP8 delayed scaling's amax all-reduce over the stage's tp x cp x dp ranks (fp8_amax.py)
    "amax": "stage",
    # and over the tp x cp ranks only (training.tp_only_amax_red)
    "amax_tp": "tpcp",
}
# groups whose members sit on different pipeline stages: even in symmetric mode each member is
# simulated (one representative per stage), so they meet in a rendezvous like all-ranks mode
CROSS_STAGE = frozenset({"embd"})
# recorded (and reported) as data-parallel communication
DP_GROUPS = frozenset({"edp", "dps", "dpr", "edps", "edpr", "dph", "dpl", "dpx"})
# groups reported under another's name: the expert-TP gathers are part of the MoE dispatch
SHOWN_AS = {**dict.fromkeys(DP_GROUPS, "dp"), "etp": "ep", "ppg": "pp", "cpa": "cp", "cpr": "cp", "amax": "dp", "amax_tp": "tp"}

# the algorithms whose CTAs drive NVLink SHARP (their SM count is the profile's nvls_sms)
NVLS_ALGORITHMS = frozenset({"nvls", "nvls_tree"})

# a collective's route (Comms._route): dimension, members, stream name, issue-order key,
# recorded group, stream
_Route = tuple[str, list[int], str, tuple[int, str], str, StreamSlot]


@dataclass
class Comms:
    """Starts collectives and p2p transfers on the network and records them."""

    env: simpy.Environment
    network: Any
    layout: Layout
    all_ranks: bool
    recorder: Recorder
    sm_share: SmShare | None = None
    #: group -> NCCL channels, for the groups whose communicator's CTA limits change the count
    #: (simcluster.nccl_ctas); a group not listed runs on the profile's
    channels: dict[str, int] = field(default_factory=dict)
    _streams: dict[tuple[int, str], StreamSlot] = field(default_factory=dict)
    _groups: dict[tuple, tuple] = field(default_factory=dict)
    _group_of: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    _rendezvous: dict[tuple, list] = field(default_factory=dict)
    _counters: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    # issue-order tickets per (rank, stream): handed out as the host issues, served in turn
    _tickets: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    _served: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    _ticket_waits: dict[tuple[int, str], simpy.Event] = field(default_factory=dict)
    # (rank, group, stream) -> _route's answer: a step runs hundreds of thousands of collectives
    _routes: dict[tuple, _Route] = field(default_factory=dict)
    # call shape -> whether it runs an NVLS algorithm (_runs_nvls)
    _nvls: dict[tuple, bool] = field(default_factory=dict)

    def stream(self, rank: int, name: str) -> StreamSlot:
        """``rank``'s stream ``name`` (made on first use)."""
        key = (rank, name)
        if key not in self._streams:
            self._streams[key] = StreamSlot(self.env)
        return self._streams[key]

    def group_of(self, dim: str, rank: int) -> list[int]:
        key = (dim, rank)
        if key not in self._group_of:
            self._group_of[key] = self.layout.group(dim, rank)
        return self._group_of[key]

    def stage_groups(self, dim: str, stage: int) -> tuple[tuple[int, ...], ...]:
        """The ``dim`` groups of ``stage``'s ranks, one cached tuple per (dim, stage): the
        network remembers a call's groups by this object's identity."""
        key = (dim, stage)
        if key not in self._groups:
            self._groups[key] = tuple(map(tuple, self.layout.groups(dim, stage)))
        return self._groups[key]

    def _route(self, rank: int, group: str, stream: str | None) -> _Route:
        """What a collective of ``rank``'s ``group`` (on ``stream``, else the group's) needs
        before it starts, looked up once: the grid dimension, the members, the stream's name,
        the issue-order key, the group it is recorded as and the stream itself."""
        dim = GROUP_DIM[group]
        name = stream or STREAM_OF_GROUP[group]
        members = self.group_of(dim, rank)
        route = (dim, members, name, (rank, name), SHOWN_AS.get(group, group), self.stream(rank, name))
        self._routes[(rank, group, stream)] = route
        return route

    def ticket(self, rank: int, group: str) -> int:
        """A place in ``rank``'s issue order on ``group``'s stream, taken when the host issues
        the collective (see :meth:`collective`'s ``ticket``)."""
        key = (rank, STREAM_OF_GROUP[group])
        number = self._tickets[key]
        self._tickets[key] += 1
        return number

    def _await_turn(self, key: tuple[int, str], ticket: int) -> Generator:
        while self._served[key] != ticket:
            if key not in self._ticket_waits:
                self._ticket_waits[key] = self.env.event()
            yield self._ticket_waits[key]

    def _serve(self, key: tuple[int, str]) -> None:
        self._served[key] += 1
        waiting = self._ticket_waits.pop(key, None)
        if waiting is not None:
            waiting.succeed()

    def ring_pairs(self, dim: str, stage: int) -> tuple[tuple[int, int], ...]:
        """Every (rank, next rank) pair of ``stage``'s ``dim`` rings (cached)."""
        key = ("ring", dim, stage)
        if key not in self._groups:
            self._groups[key] = tuple(
                (g[i], g[(i + 1) % len(g)])
                for g in self.stage_groups(dim, stage)
                for i in range(len(g))
            )
        return self._groups[key]

    def stage_pairs(self, src_stage: int, dst_stage: int) -> tuple[tuple[int, int], ...]:
        """Every (rank, its peer) pair between two pipeline stages: the symmetric sends of a
        pipeline transfer (cached)."""
        key = ("pp", src_stage, dst_stage)
        if key not in self._groups:
            lay = self.layout
            self._groups[key] = tuple(
                zip(lay.stage_ranks(src_stage), lay.stage_ranks(dst_stage), strict=True)
            )
        return self._groups[key]

    def collective(
        self,
        rank: int,
        stage: int,
        group: str,
        op: str,
        nbytes: float,
        name: str,
        mb: int = -1,
        chunk: int = -1,
        layer: int = -1,
        holds_sms: bool = False,
        sms: int = 0,
        ticket: int | None = None,
        lead_s: float = 0.0,
        stream: str | None = None,
        shown_bytes: float | None = None,
        redop: str = "sum",
        nccl: bool = True,
    ) -> Generator[simpy.Event, Any, None]:  # SimPy sends each yielded event's value back
        """Run one collective of ``rank``'s ``group`` on its stream; records the event.

        An interfering collective (see :mod:`simcluster.engine.interference`; ``holds_sms``
        makes one of any group interfere; ``sms``: a userbuffers overlap's own SM count) slows
        the rank's compute from when it holds its stream until it ends, peers' wait included.
        ``ticket`` (from :meth:`ticket`): the collective takes its stream in the order the host
        issued it, as NCCL enqueues a rank's work, not in the order the processes that carry
        the collectives get there (an overlapped one waits for its host time; the two ops of an
        F&B pair issue side by side). Peers meet in their k-th collective of a group, so the
        issue order, not the timing, must decide which one that is. ``lead_s``: seconds the
        stream waits, once it is this collective's turn, for its input to be produced on
        another stream (ProcessGroupNCCL's stream waits on the issuing stream), holding back
        what was issued after it. ``stream``: a stream of its own instead of its group's
        (PyTorch FSDP's HSDP all-reduce stream). ``shown_bytes``: what the event records, when
        the network is given more (``Comm.uneven``). ``redop``: the reduction NCCL is asked
        for (sum, avg, premul_sum: a data-parallel gradient's ``dp.reduce_op``), which decides
        whether NVLS may run. ``nccl`` False: not an NCCL call (a userbuffers exchange), which
        its group's CTA limits (``channels``) do not reach.
        """
        route = self._routes.get((rank, group, stream))
        if route is None:
            route = self._route(rank, group, stream)
        dim, members, stream, key, shown, slot = route
        if ticket is not None and self._served[key] != ticket:
            yield from self._await_turn(key, ticket)
        if len(members) == 1 or nbytes <= 0:
            if ticket is not None:
                self._serve(key)
            return
        yield from slot.take()
        try:
            if ticket is not None:
                self._serve(key)
            if lead_s > 0:
                yield self.env.timeout(lead_s)
            start = self.env.now
            channels = self.channels.get(group, 0) if nccl else 0
            nvls = self._runs_nvls(op, group, dim, members, stage, nbytes, redop, channels, holds_sms, sms)
            held = self._enter_sms(rank, group, holds_sms, sms, nvls)
            joined = yield from self._move(rank, stage, op, group, dim, members, nbytes, redop, channels)
            if joined is not None:
                start = joined
            self._leave_sms(rank, held)
            kind = "send" if op == "send_recv" else op
            self.recorder.add(
                rank,
                stage,
                stream,
                kind,
                shown,
                name,
                mb,
                chunk,
                layer,
                start,
                self.env.now,
                nbytes if shown_bytes is None else shown_bytes,
            )
        finally:
            slot.give()

    def _runs_nvls(
        self, op: str, group: str, dim: str, members: list[int], stage: int, nbytes: float,
        redop: str, channels: int, holds_sms: bool, sms: int,
    ) -> bool:  # fmt: skip
        """Whether the collective runs an NVLS algorithm, asked only where its SMs depend on
        it (:meth:`SmShare.counts_nvls`); the network's cached recipe answers."""
        share = self.sm_share
        if share is None or not share.counts_nvls(group, holds_sms, sms):
            return False
        if op == "send_recv" or group in CROSS_STAGE:
            return False
        # every member asks in all-ranks mode: remembered, not re-planned, per call shape
        key = (op, dim, tuple(members) if self.all_ranks else stage, nbytes, redop, channels)
        hit = self._nvls.get(key)
        if hit is None:
            groups = [members] if self.all_ranks else self.stage_groups(dim, stage)
            hit = self._nvls[key] = self.network.algorithm(op, groups, nbytes, redop, channels) in NVLS_ALGORITHMS
        return hit

    def _enter_sms(self, rank: int, group: str, holds_sms: bool, sms: int, nvls: bool = False) -> int:
        """The SMs an interfering collective of ``group`` takes from ``rank``'s compute while
        it runs (``nvls``: on an NVLS algorithm), entered into the share (see
        :meth:`collective`); 0 when it takes none."""
        held = self.sm_share.held_by(group, holds_sms, sms, nvls) if self.sm_share else 0
        if held:
            assert self.sm_share is not None  # held is nonzero only with a share (above)
            self.sm_share.enter(rank, held)
        return held

    def _leave_sms(self, rank: int, held: int) -> None:
        """Give back the ``held`` SMs :meth:`_enter_sms` took from ``rank``'s compute."""
        if held:
            assert self.sm_share is not None  # held is nonzero only with a share (above)
            self.sm_share.leave(rank, held)

    def _move(
        self, rank: int, stage: int, op: str, group: str, dim: str, members: list[int],
        nbytes: float, redop: str, channels: int = 0,
    ) -> Generator[simpy.Event, Any, float | None]:  # fmt: skip
        """The collective's data movement, once it holds its stream, on ``channels`` (0: the
        profile's); returns when the event starts instead of now (a cross-stage partner's
        arrival), else None."""
        if op == "send_recv":  # ring exchange with the next rank of the group (CP)
            yield from self._ring_step(rank, stage, group, members, nbytes, channels)
        elif group in CROSS_STAGE:
            # the event starts when the partner arrives: the wait for it is pipeline
            # imbalance (the last stage finishes its backward first), not communication
            start: float | None = yield self._join(rank, group, op, members, nbytes, stage,
                                                   channels=channels)  # fmt: skip
            return start
        elif self.all_ranks:
            yield self._join(rank, group, op, members, nbytes, stage, redop, channels)
        else:
            yield self.network.collective(op, self.stage_groups(dim, stage), nbytes, redop=redop,
                                          channels=channels)  # fmt: skip
        return None

    def _ring_step(
        self, rank: int, stage: int, group: str, members: list[int], nbytes: float, channels: int
    ) -> Generator:
        dim = GROUP_DIM[group]
        nxt = members[(members.index(rank) + 1) % len(members)]
        if self.all_ranks:
            yield self._join(rank, group, "send_recv", members, nbytes, stage, channels=channels)
            return
        yield self.network.send(rank, nxt, nbytes, pairs=self.ring_pairs(dim, stage),
                                channels=channels)  # fmt: skip

    def _join(
        self, rank: int, group: str, op: str, members: list[int], nbytes: float, stage: int,
        redop: str = "sum", channels: int = 0,
    ) -> simpy.Event:
        """Rendezvous of a group's members; the last arrival starts the network operation
        (in symmetric mode for every symmetric group of ``stage`` at once). The event's value
        is the time the operation started. Calls are matched in order per ``group``: two
        groups over the same ranks (``tp`` and ``ppg``) are issued by different processes, so
        neither their counts nor their rendezvous may mix."""
        counter_key = (rank, group)
        seq = self._counters[counter_key]
        self._counters[counter_key] += 1
        key = (group, tuple(members), op, seq)
        entry = self._rendezvous.get(key)
        if entry is None:
            entry = self._rendezvous[key] = [0, self.env.event()]
        entry[0] += 1
        if entry[0] == len(members):
            done = entry[1]
            del self._rendezvous[key]
            if op == "send_recv":
                pairs = [(members[i], members[(i + 1) % len(members)]) for i in range(len(members))]
                ev = self.network.send(members[0], members[1], nbytes, pairs=pairs, channels=channels)
            else:
                groups = [members] if self.all_ranks else self.stage_groups(GROUP_DIM[group], stage)
                ev = self.network.collective(op, groups, nbytes, redop=redop, channels=channels)
            ev.callbacks.append(lambda _e, d=done, t=self.env.now: d.succeed(t))
        started: simpy.Event = entry[1]
        return started

    def p2p(
        self,
        src: int,
        dst: int,
        src_stage: int,
        dst_stage: int,
        nbytes: float,
        name: str,
        mb: int,
        chunk: int,
        pairs: Sequence[tuple[int, int]],
    ) -> Generator:
        """Pipeline send from ``src`` to ``dst``; records a send and a matching recv.

        The transfer holds the sender's p2p stream and the receiver's recv stream (NCCL runs a
        send kernel on one and a recv kernel on the other), so neither lane overlaps itself.
        """
        send, recv = self.stream(src, "comm_pp"), self.stream(dst, "comm_pp_recv")
        turns = (send.ask(), recv.ask())
        for turn in turns:
            if turn is not None:
                yield turn
        try:
            start = self.env.now
            yield self.network.send(
                src, dst, nbytes, pairs=pairs if not self.all_ranks else [(src, dst)],
                channels=self.channels.get("pp", 0),
            )
            flow = self.recorder.next_flow()
            end = self.env.now
            for rank, stage, stream, kind in (
                (src, src_stage, "comm_pp", "send"),
                (dst, dst_stage, "comm_pp_recv", "recv"),
            ):
                self.recorder.add(
                    rank, stage, stream, kind, "pp", name, mb, chunk, -1, start, end, nbytes, flow
                )
        finally:
            send.give()
            recv.give()
