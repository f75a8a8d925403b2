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
        self.saved[key] = self.env.process(self._copy(self.to_host, "copy_d2h", "activation_offload", key, nbytes))

    def load(self, key: tuple, nbytes: float) -> None:
        """Start the copy back (once the copy out is done), unless it has started already."""
        if key in self.loaded:
            return

        def back() -> Generator:
            out = self.saved.get(key)
            if out is not None and not out.triggered:
                yield out
            yield from self._copy(self.to_gpu, "copy_h2d", "activation_reload", key, nbytes)

        self.loaded[key] = self.env.process(back())

    def wait(self, copies: Iterable[simpy.Process | None]) -> Generator:
        """Until every given copy is done."""
        for proc in copies:
            if proc is not None and not proc.triggered:
                yield proc
