"""One rank's activation copies to and from host memory (``training.activation_offload_layers``,
``offload_modules``).

TransformerEngine's CPU offload (Megatron-Core ``--cpu-offloading``), double-buffered: once a
layer's forward is done its saved tensors are copied to the host on a side stream, under the
next layer's forward, and the layer after that waits for the copy (two buffers); in the backward
a layer's copy back is started when the layer after it (in backward order) begins, and the
layer waits for its own. Megatron-Core's fine-grained offload (``training.offload_modules``)
copies the named modules' saved tensors the same way, but its forward never waits for a copy
(:mod:`simcluster.module_offload`). Each direction is one copy engine on the GPU's host link
(``node.host_link_GBps``), one copy at a time, FIFO; the two directions run at once (PCIe and
NVLink-C2C are full duplex).

A saved tensor leaves the GPU only once its copy out is done (PyTorch's ``record_stream`` on the
copy stream), so where the copies fall behind the forward the tensors waiting for them are still
in GPU memory; in the backward a layer's copy back occupies GPU memory from its start until the
layer's backward is done. The stage's memory walk (and the timeline, held to it) counts one
layer's moved bytes in flight for each microbatch's stash of a chunk instead
(``memory.chunk_activation_bytes``), a matter of the copies' timing it cannot follow: here
:attr:`ActivationOffload.resident` holds the moved bytes on the GPU now and
:attr:`ActivationOffload.allowance` what the walk counts for them (the worker tells
:meth:`ActivationOffload.allow` as the stashes come and go), and the worker compares its memory
with them to its walked peak (:func:`backlog`; ``run`` reports what the peak misses). Megatron-Core's
``fine_grained_offloading_max_inflight_offloads`` (``training.offload_max_inflight``) bounds the
backlog by making the compute wait for older copies (the worker's ``_offload_after``); its
default, None, never waits.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field

import simpy

#: (stream, name, key, start, end, bytes) -> the recorder
Record = Callable[[str, str, tuple, float, float, float], None]


@dataclass
class ActivationOffload:
    """The copies of one rank; keys are (microbatch, chunk, layer)."""

    env: simpy.Environment
    link_bytes_per_s: float
    record: Record
    to_host: simpy.Resource = field(init=False)
    to_gpu: simpy.Resource = field(init=False)
    saved: dict[tuple, simpy.Process] = field(default_factory=dict)
    loaded: dict[tuple, simpy.Process] = field(default_factory=dict)
    resident: float = 0.0  # moved bytes on the GPU: copies out not done, copies back until released
    allowance: float = 0.0  # what the memory walk counts in flight for them now
    on_change: Callable[[], None] | None = None  # told whenever either changes

    def __post_init__(self) -> None:
        self.to_host = simpy.Resource(self.env, capacity=1)
        self.to_gpu = simpy.Resource(self.env, capacity=1)

    def _copy(self, engine: simpy.Resource, stream: str, name: str, key: tuple, nbytes: float) -> Generator:
        with engine.request() as turn:
            yield turn
            start = self.env.now
            yield self.env.timeout(nbytes / self.link_bytes_per_s)
            self.record(stream, name, key, start, self.env.now, nbytes)

    def save(self, key: tuple, nbytes: float) -> None:
        """Start the copy of one layer's activations to the host."""
        self._move(nbytes)

        def out() -> Generator:
            yield from self._copy(self.to_host, "copy_d2h", "activation_offload", key, nbytes)
            self._move(-nbytes)  # the GPU copy is freed once the host holds it

        self.saved[key] = self.env.process(out())

    def load(self, key: tuple, nbytes: float) -> None:
        """Start the copy back (once the copy out is done), unless it has started already."""
        if key in self.loaded:
            return
        self._move(nbytes)  # the copy back's buffer, until the layer's backward releases it

        def back() -> Generator:
            out = self.saved.get(key)
            if out is not None and not out.triggered:
                yield out
            yield from self._copy(self.to_gpu, "copy_h2d", "activation_reload", key, nbytes)

        self.loaded[key] = self.env.process(back())

    def release(self, nbytes: float) -> None:
        """A layer's backward is done with its copied-back tensors."""
        self._move(-nbytes)

    def allow(self, nbytes: float) -> None:
        """A stash that the memory walk counts ``nbytes`` of moved bytes in flight for appears
        (positive) or is freed (negative)."""
        self.allowance += nbytes
        self._changed()

    def _move(self, nbytes: float) -> None:
        self.resident += nbytes
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def wait(self, copies: Iterable[simpy.Process | None]) -> Generator:
        """Until every given copy is done."""
        for proc in copies:
            if proc is not None and not proc.triggered:
                yield proc


def backlog(moved_peak: float, walked_peak: float) -> float:
    """How far a stage's memory with the offloads' moved bytes as timed goes above its walked
    peak; 0 where the walk's in-flight layer covers them."""
    over = moved_peak - walked_peak
    # a relative margin: sums of float bytes need not cancel exactly
    return over if over > 1e-9 * walked_peak else 0.0
