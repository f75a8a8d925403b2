"""engine/stream_slot.py: a stream held by one collective at a time, the rest served in order.

The reference is SimPy's own ``Resource(capacity=1)``, which the slot replaced in
engine/comms.py (two events fewer per collective): for the same asks and holds, every holder
gets the stream at the same time under both.
"""

from __future__ import annotations

import random

import simpy

from simcluster.engine.stream_slot import StreamSlot


def _resource_user(env, res, arrive, hold, got):
    yield env.timeout(arrive)
    with res.request() as req:
        yield req
        got.append((env.now, arrive))
        yield env.timeout(hold)


def _slot_user(env, slot, arrive, hold, got):
    yield env.timeout(arrive)
    yield from slot.take()
    try:
        got.append((env.now, arrive))
        yield env.timeout(hold)
    finally:
        slot.give()


def test_each_holder_gets_the_stream_when_simpys_resource_would_give_it():
    rng = random.Random(7)
    for _ in range(20):
        # distinct arrival times: with ties SimPy breaks by event order, the slot by call order
        asks = [(rng.uniform(0, 10), rng.uniform(0.1, 3)) for _ in range(12)]
        runs = []
        for make, user in ((lambda e: simpy.Resource(e, capacity=1), _resource_user), (StreamSlot, _slot_user)):
            env, got = simpy.Environment(), []
            stream = make(env)
            for arrive, hold in asks:
                env.process(user(env, stream, arrive, hold, got))
            env.run()
            runs.append(got)
        assert runs[0] == runs[1]


def test_a_free_slot_is_taken_without_an_event_and_waiters_are_served_first_come():
    env = simpy.Environment()
    slot = StreamSlot(env)
    assert slot.ask() is None  # held now
    second, third = slot.ask(), slot.ask()
    assert second is not None and third is not None
    slot.give()
    assert second.triggered and not third.triggered  # handed over, still held
    slot.give()
    assert third.triggered
    slot.give()
    assert slot.ask() is None  # free again
