"""NCCL's protocol bandwidth caps by GPU generation and host CPU, and its CPU-dependent
latency terms (NVIDIA/nccl master, 2026).

Sources, all in NVIDIA/nccl ``src/tuning/``:

* ``cost_model.cc`` ``ncclTunerConstantsDefaults``: ``llMaxBws`` (GB/s of bus bandwidth, rows
  Volta/Ampere/Hopper/Blackwell on one node; on several nodes only rows 0 and 1 are read, as
  "Intel" and "AMD" hosts), ``perChMaxRingLL128Bws``, ``perChMaxTreeLL128Bws``,
  ``perChMaxTreeBws`` (GB/s per channel), columns 1 node / 2 nodes / more.
* ``tuning_general.cc`` ``ncclTuningGetCompCapIndex`` (compute capability >= 10.0 Blackwell,
  >= 9.0 Hopper, >= 8.0 Ampere, else Volta) and ``ncclTuningGetConstantsIndexes`` (LL row: the
  GPU generation on one node, else 1 for an AMD or mixed host and 0 for any other).
* ``ring.cc`` ``ncclTuningRingModelInit``: ring LL = min(llMaxBw, busBw / 2), ring LL128 =
  min(0.92 busBw, nChannels perChMaxRingLL128Bw); ``getNetOverhead`` (1 us on Intel, 2 us on
  AMD x86, 1 us otherwise; x3 for Simple) floors every intra-node step of a multi-node ring
  (all ops but broadcast and reduce); ``ncclTuningRingModelSim``: a multi-node ring Simple
  all-reduce of >= 64 B per channel per rank takes its latency x1.4 (x1.9 before Ampere).
* ``tree.cc`` ``ncclTuningTreeModelInit``: tree = min(0.92 busBw, nChannels perChMaxTreeBw),
  then LL min(that / 3.8, llMaxBw), LL128 min(that x 7/9 (1 node) or 120/128,
  nChannels perChMaxTreeLL128Bw).

``busBw`` is the link rate the algorithm's graph runs at; here it is the modelled Simple rate of
the plan alone (see :func:`capped_fraction`). Channels: ``efficiency.collective_sms`` (one CTA
per channel); 0 = unknown, and the per-channel caps are then not applied.

A GPU without an NVIDIA compute capability (AMD: RCCL keeps ``llMaxBws`` and the per-channel
tables out of its AMD build, ``#if !defined(__HIP_PLATFORM_AMD__)`` in ROCm/rccl
``src/graph/tuning.cc``) keeps NCCL <= 2.19's fractions (:mod:`protocols`) and none of these.
"""

from __future__ import annotations

VOLTA, AMPERE, HOPPER, BLACKWELL = 0, 1, 2, 3

# rows: generation (one node) / host (several nodes: 0 Intel or other, 1 AMD); cols: N1, N2, N4+
_LL_MAX = (
    (39.0, 39.0, 20.4),
    (87.7, 22.5, 19.0),
    (141.0, 45.0, 35.0),
    (2 * 141.0, 2 * 45.0, 2 * 35.0),
)
_RING_LL128_PER_CH = (
    (20.0, 20.0, 20.0),
    (20.0, 20.0, 20.0),
    (36.7, 36.7, 36.7),
    (40.0, 40.0, 40.0),
)
_TREE_LL128_PER_CH = (
    (20.0, 20.0, 20.0),
    (20.0, 20.0, 20.0),
    (36.7, 36.7, 29.0),
    (55.6, 31.67, 20.0),
)
_TREE_PER_CH = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))

# getNetOverhead, us; Simple pays three times it
_NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}
_NET_OVERHEAD_OTHER_US = 1.0


def generation(compute_capability: float | None) -> int | None:
    """NCCL's compute-capability index, or None for a GPU NCCL's tables do not cover."""
    if compute_capability is None:
        return None
    if compute_capability >= 10.0:
        return BLACKWELL
    if compute_capability >= 9.0:
        return HOPPER
    if compute_capability >= 8.0:
        return AMPERE
    return VOLTA


def _column(nodes: int) -> int:
    """Index of the 1 node / 2 nodes / more column (``ncclTuningGetConstantsIndexes``)."""
    return min(max(nodes, 1), 3) - 1


def ll_max_GBps(gen: int, host_cpu: str | None, nodes: int) -> float:
    """``llMaxBws``: the GPU's row on one node, the host's row (AMD 1, else 0) across nodes."""
    row = gen if nodes <= 1 else (1 if host_cpu == "amd" else 0)
    return _LL_MAX[row][_column(nodes)]


def bus_GBps(family: str, proto: str, gen: int, host_cpu: str | None, nodes: int,
             channels: int, link_GBps: float) -> float:  # fmt: skip
    """NCCL's bus bandwidth for (family, protocol) on a graph of ``link_GBps`` (its busBw)."""
    col = _column(nodes)
    per_ch = channels if channels > 0 else float("inf")
    if family == "ring":
        if proto == "LL":
            return min(ll_max_GBps(gen, host_cpu, nodes), link_GBps * 0.5)
        if proto == "LL128":
            return min(link_GBps * 0.92, per_ch * _RING_LL128_PER_CH[gen][col])
        return link_GBps
    # tree all-reduce
    bw = min(link_GBps * 0.92, per_ch * _TREE_PER_CH[gen][col])
    if proto == "LL":
        return min(bw / 3.8, ll_max_GBps(gen, host_cpu, nodes))
    if proto == "LL128":
        return min(bw * (7.0 / 9.0 if nodes <= 1 else 120.0 / 128.0),
                   per_ch * _TREE_LL128_PER_CH[gen][col])  # fmt: skip
    return bw


def net_overhead_s(host_cpu: str | None, proto: str) -> float:
    """``getNetOverhead``: the floor of an intra-node step of a multi-node ring, seconds."""
    us = _NET_OVERHEAD_US.get(host_cpu or "", _NET_OVERHEAD_OTHER_US)
    return us * (3 if proto == "Simple" else 1) * 1e-6


def simple_plateau(compute_capability: float) -> float:
    """``ncclTuningRingModelSim``'s latency factor of a multi-node ring Simple all-reduce."""
    return 1.9 if compute_capability < 8.0 else 1.4
