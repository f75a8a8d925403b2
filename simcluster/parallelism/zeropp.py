"""ZeRO++ (Wang et al. 2023, arXiv 2306.10209) as DeepSpeed's ZeRO-3 runs it.

hpZ (``zero3.hpz_partition_size``, DeepSpeed's ``zero_hpz_partition_size``): when a gathered
parameter is released, ``partition_parameters.py _partition_param_sec`` copies its slice of the
whole tensor into ``ds_secondary_tensor``, a 16-bit partition over ``hpz`` consecutive ranks
(``groups._create_zero_param_parallel_group``), allocated once and kept until
``stage3.py _post_step`` invalidates it after the optimizer step. ``all_gather_coalesced``
gathers from it over that group whenever it exists: every gather of the step after a unit's
first one (its backward, the later microbatches' forwards) stays inside the node.

qwZ (``zero3.quantized_weights``): ``all_gather_coalesced(quantize=True)`` quantizes the rank's
partition (``CUDAQuantizer.quantize``: int8, symmetric, one fp32 scale per group of at most
``target_group_size`` = 8000 elements) on the all-gather stream, all-gathers the int8 data and
the scales in two collectives, and ``AllGatherCoalescedHandle.wait`` dequantizes the whole
buffer to 16 bits on the compute stream before the module runs. Secondary (hpZ) gathers are
quantized the same way (``__all_gather_params``: ``quantize=self.zero_quantized_weights`` for
every gather).

qgZ (``zero3.quantized_gradients``): ``stage3.py __avg_scatter_grads`` calls
``coalesced_collectives.all_to_all_quant_reduce``: each gradient is quantized to int4
(``swizzle_quant``, ``max(rows, cols, world)`` groups, one fp32 scale each), all-to-all'd inside
the node (``local_`` groups of ``device_count`` ranks), reduced and requantized to int4
(``quantized_reduction``: 1/local of it), all-to-all'd across nodes (``global_`` groups), then
dequantized and the node chunks summed: 1/world of the gradient per rank, as a reduce-scatter
leaves. Its groups are built over the whole world, so it needs pure data parallelism.

The kernels are memory-bound passes priced by the kernel model's stream rate; the groups are
the cluster graph's (``Layout.group``: ``dph``, ``dpl``, ``dpx``), so the traffic on NVLink and
on the NICs follows from where the ranks sit. NOT MODELLED: the device synchronization after
each secondary copy (``_partition_param_sec``'s temporary fix), the 1-D tensors (norms, biases)
qgZ leaves to a reduce-scatter (well under 0.1% of a layer's elements), qwZ's and qgZ's
transient int8/int4 buffers beside the 16-bit ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simcluster.errors import UserError
from simcluster.layout import Layout
from simcluster.model import ModelSpec
from simcluster.parallelism.data import param_bytes, unit_params
from simcluster.placement import Chunk
from simcluster.scenario import Scenario

#: CUDAQuantizer.target_group_size (partition_parameters.py): qwZ's elements per fp32 scale
QWZ_GROUP = 8000
SCALE_BYTES = 4.0  # fp32 scales, qwZ's and qgZ's
INT8 = 1.0
INT4 = 0.5


def active(scenario: Scenario) -> bool:
    """Whether any ZeRO++ part is switched on."""
    z = scenario.zero3
    return z.hpz_partition_size > 1 or z.quantized_weights or z.quantized_gradients


@dataclass(frozen=True)
class WeightGather:
    """One qwZ all-gather of ``elements`` gathered parameters over ``ranks`` ranks: bytes of
    its two collectives and of its two kernel passes."""

    elements: float
    ranks: int

    @property
    def data_bytes(self) -> float:
        """The int8 all-gather's output buffer."""
        return self.elements * INT8

    @property
    def scale_bytes(self) -> float:
        """The scales' all-gather: one fp32 per group of at most 8000 elements of each shard."""
        return self.ranks * math.ceil(self.elements / self.ranks / QWZ_GROUP) * SCALE_BYTES

    def quantize_bytes(self, width: float) -> float:
        """HBM bytes of quantizing the rank's shard: read at ``width``, int8 and scales written."""
        shard = self.elements / self.ranks
        return shard * (width + INT8) + self.scale_bytes / self.ranks

    def dequantize_bytes(self, width: float) -> float:
        """HBM bytes of dequantizing the gathered buffer: int8 and scales read, ``width`` written."""
        return self.elements * (INT8 + width) + self.scale_bytes


@dataclass(frozen=True)
class GradientAllToAll:
    """qgZ's reduction of ``elements`` gradient elements over ``local`` ranks per node and
    ``nodes`` nodes; ``group``: elements per quantization group (a matrix's shorter side,
    ``max(rows, cols)`` groups: the hidden size for a transformer's matrices)."""

    elements: float
    local: int
    nodes: int
    group: float

    @property
    def intra_bytes(self) -> tuple[float, float]:
        """(data, scales) bytes of each rank's all-to-all inside the node: the whole gradient in int4."""
        return self.elements * INT4, self.elements / self.group * SCALE_BYTES

    @property
    def inter_bytes(self) -> tuple[float, float]:
        """(data, scales) of the all-to-all across nodes: the 1/local the node reduced, int4."""
        data, scales = self.intra_bytes
        return data / self.local, scales / self.local

    def pass_bytes(self, width: float) -> tuple[float, float, float]:
        """HBM bytes of its kernels, in the order they run around the two all-to-alls: the int4
        quantization of the gradient (read at ``width``, ``swizzle_quant``); the reduction and
        requantization of what the node's ranks sent (``quantized_reduction``: 1/local
        written); the dequantization and the sum of the nodes' chunks (1/world written)."""
        n, part = self.elements, self.elements / self.local
        data, scales = self.intra_bytes
        quantize = n * width + data + scales
        reduce = data + scales + part * INT4 + scales / self.local
        finish = part * INT4 + scales / self.local + part * width + part * width + part / self.nodes * width
        return quantize, reduce, finish


def secondary_bytes(scenario: Scenario, model: ModelSpec, layout: Layout, chunks: list[Chunk], persistent: float) -> float:
    """hpZ's secondary partition on a GPU: the stage's dense parameters that are gathered (all
    but the ``persistent`` bytes' elements), 16-bit, over the hpZ group (``_partition_param_sec``:
    ``aligned_size // num_ranks_in_param_group`` elements each, in ``param.dtype``, kept from a
    unit's first release to the optimizer step, so through every backward)."""
    if layout.zero != 3 or layout.hpz <= 1:
        return 0.0
    width = param_bytes(scenario)
    dense = sum(
        unit_params(model, layout, ch, layer)[0]
        for ch in chunks
        for layer in ([-1] if ch.embedding else []) + list(ch.layer_indices) + ([-2] if ch.head else [])
    )
    return max(0.0, dense * width - persistent) / layout.hpz


def _check_hpz(layout: Layout, hpz: int, group: int) -> None:
    """One-line errors for an hpZ partition of ``hpz`` ranks (above 1) that does not divide the
    ZeRO ``group`` or does not stay inside one node."""
    if group % hpz:
        raise UserError(
            "zero3.hpz_partition_size",
            f"{hpz} does not divide the ZeRO group of {group} ranks; use a divisor of it such as the "
            "data-parallel ranks in one node",
        )
    for members in layout.groups("dph"):
        if len({r // layout.gpus_per_node for r in members}) > 1:
            raise UserError(
                "zero3.hpz_partition_size",
                f"{hpz} consecutive ZeRO ranks span more than one node ({layout.gpus_per_node} GPUs per "
                f"node, tp={layout.tp}); use at most the data-parallel ranks of one node",
            )


def check(scenario: Scenario, layout: Layout, coordinated: bool) -> None:
    """One-line errors for ZeRO++ settings DeepSpeed cannot run (``coordinated``: ZeRO-3 runs
    DeepSpeed's coordinator)."""
    z = scenario.zero3
    if layout.zero != 3 or not active(scenario):
        return  # below ZeRO-3 the settings are inert notes
    if not coordinated or layout.zero3_pipelined:
        raise UserError(
            "zero3",
            "ZeRO++ (hpz_partition_size, quantized_weights, quantized_gradients) is DeepSpeed's ZeRO-3 "
            "without a pipeline; set framework: deepspeed and pp 1, or drop them",
        )
    hpz, group = z.hpz_partition_size, layout.zero_group
    if hpz > 1:
        _check_hpz(layout, hpz, group)
    if z.quantized_gradients:
        if group != layout.world or layout.ep > 1:
            raise UserError(
                "zero3.quantized_gradients",
                "qgZ's all-to-all groups are the whole world's ranks by node (all_to_all_quant_reduce), so "
                "it needs pure data parallelism (tp, cp, ep 1, no zero_shard); drop it or those degrees",
            )
        if layout.world > layout.gpus_per_node and layout.world % layout.gpus_per_node:
            raise UserError("zero3.quantized_gradients", "qgZ needs whole nodes; use a multiple of the GPUs per node")
