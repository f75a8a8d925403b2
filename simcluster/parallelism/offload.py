"""An optimizer held and stepped on the host CPU (``training.optimizer_offload``).

The offloaded share of each GPU's optimizer shard (fp32 master weights and moments) lives in
host memory. After the backward (and the data-parallel reduction) its gradients are copied to
the host, the CPU runs the update there, streaming the master weights, the moments and the
gradient through host DRAM, and the new 16-bit weights are copied back for the next forward:
Megatron-Core's ``HybridDeviceOptimizer`` (``--optimizer-cpu-offload``,
``--optimizer-offload-fraction``), DeepSpeed's ZeRO-Offload (``offload_optimizer: cpu``).

Costs, each from the hardware profile: the two copies at ``node.host_link_GBps`` per GPU per
direction (every GPU has its own PCIe or NVLink-C2C link, measured one GPU at a time; contention
on shared host bridges is not modelled); the CPU update at the node's host DRAM bandwidth
``node.host_memory_GBps`` shared by its GPUs, all of which step at once (the update is
memory-bound on the host as on the GPU: a vectorised CPU Adam such as DeepSpeed's; PyTorch's
plain CPU Adam is slower, so this is a lower bound there). Serial by default, or pipelined
group by group with ``overlap.optimizer_offload`` (the slowest of the three then sets the time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simcluster.errors import UserError
from simcluster.memory import OPTIMIZER_MOMENTS, moment_bytes

if TYPE_CHECKING:
    from simcluster.context import Context
    from simcluster.hardware import NodeSpec
    from simcluster.layout import Layout
    from simcluster.scenario import TrainingSection

#: GPU-side HBM traffic per offloaded parameter: the gradient-norm read before the copy (fp32)
#: and the write of the 16-bit weight that comes back
GPU_BYTES_PER_OFFLOADED_PARAM = 4.0 + 2.0


def missing_host_figures(node: NodeSpec, optimizer: bool) -> list[str]:
    """The profile's ``node`` figures an offload needs and lacks: the host link for either
    kind, the host DRAM bandwidth for the optimizer's CPU update as well."""
    need = ("host_link_GBps", "host_memory_GBps") if optimizer else ("host_link_GBps",)
    return [f"node.{key}" for key in need if getattr(node, key) is None]


def local_optimizer_params(layout: Layout, dense: float, expert: float) -> float:
    """Parameters whose optimizer state one GPU steps: its dense and expert parameters, each
    divided over its ZeRO group from ZeRO-1 up."""
    if layout.zero < 1:
        return dense + expert
    return dense / layout.zero_group + expert / layout.expert_zero_group


def host_update_bytes_per_param(training: TrainingSection) -> float:
    """Host DRAM traffic of one CPU update per parameter: the fp32 gradient read, the fp32 master
    read and written, each moment read and written."""
    moments = OPTIMIZER_MOMENTS[training.optimizer]
    return 4.0 + 8.0 + moments * 2 * moment_bytes(training)


def offload_seconds(ctx: Context, params: float) -> float:
    """Seconds the host side of the step takes for ``params`` offloaded parameters of one GPU."""
    if params <= 0:
        return 0.0
    node = ctx.profile.node
    if missing_host_figures(node, optimizer=True):
        raise UserError(
            "training.optimizer_offload",
            f"hardware profile '{ctx.profile.name}' gives no node.host_link_GBps or "
            "node.host_memory_GBps (GPU-to-host bandwidth per GPU, host DRAM bandwidth per node); "
            "add them to the profile (cluster.profile overrides work too) or set optimizer_offload: 0",
        )
    # missing_host_figures above raised unless both figures are set
    assert node.host_link_GBps is not None and node.host_memory_GBps is not None
    tr = ctx.scenario.training
    low = tr.precision != "fp32"
    grad_bytes = 4.0 if (tr.fp32_grad_accum or not low) else 2.0  # the main gradients as kept
    weight_bytes = 2.0 if low else 4.0  # the compute copy of the weights that comes back
    link = node.host_link_GBps * 1e9
    to_host = params * grad_bytes / link
    to_gpu = params * weight_bytes / link
    per_gpu_dram = node.host_memory_GBps * 1e9 / node.gpus_per_node
    update = params * host_update_bytes_per_param(tr) / per_gpu_dram
    if ctx.scenario.overlap.optimizer_offload:
        return max(to_host, update, to_gpu)
    return to_host + update + to_gpu
