"""GPU names as people write them, read as the shipped reference node for that GPU.

``H100``, ``NVIDIA H100 SXM5 80GB``, ``h100_sxm``, ``A100-SXM4-40GB``, ``8xA100 80GB``, ``DGX H100``,
an AWS instance type (``p5.48xlarge``) or one of NVIDIA's clusters (``Selene``, ``Eos``) all
name a GPU; ``cluster.hardware`` takes them and means NVIDIA's (or AMD's) reference node for
it: the 8-GPU DGX/HGX board with NVSwitch and a NIC per GPU, or the NVL72 rack for Grace-Blackwell. A memory size picks between parts (A100 40 GB
or 80 GB; no size means the larger). A board the shipped profiles do not describe (a PCIe or
NVL card, a converged accelerator (CNX, A100X), a memory size no shipped part has) is refused with what to use instead, rather than
silently read as the SXM part, whose power, clocks and NVLink differ.
"""

from __future__ import annotations

import re

from simcluster.errors import UserError

#: GPU -> {memory in GB (None: unstated) -> shipped profile}
REFERENCE_NODES: dict[str, dict[int | None, str]] = {
    "a100": {None: "dgx-a100", 80: "dgx-a100", 40: "dgx-a100-40gb"},
    "h100": {None: "dgx-h100", 80: "dgx-h100"},
    "h200": {None: "dgx-h200", 141: "dgx-h200"},
    "h800": {None: "hgx-h800", 80: "hgx-h800"},
    # DGX B200 lists 180 GB per GPU; early B200 material says 192
    "b200": {None: "dgx-b200", 180: "dgx-b200", 192: "dgx-b200"},
    "gb200": {None: "gb200-nvl72", 186: "gb200-nvl72", 192: "gb200-nvl72"},
    "gb300": {None: "gb300-nvl72", 288: "gb300-nvl72"},
    "b300": {None: "dgx-b300", 288: "dgx-b300"},
    # a GH200 board of four modules as on CSCS Alps; nvidia-smi names it by its 120 GB of LPDDR5X
    "gh200": {None: "alps-gh200", 96: "alps-gh200", 120: "alps-gh200"},
    "mi300x": {None: "amd-mi300x", 192: "amd-mi300x"},
    "mi325x": {None: "amd-mi325x", 256: "amd-mi325x"},
    "mi355x": {None: "amd-mi355x", 288: "amd-mi355x"},
    "v100": {None: "dgx-2-v100", 32: "dgx-2-v100"},
}

#: NVIDIA's own clusters, named in its papers and benchmark tables, -> their node's profile:
#: Selene is a DGX SuperPOD of DGX A100 (Narayanan et al. 2021 Sec. 5: 80 GB A100s, eight 200 Gb/s
#: HDR HCAs per node), Eos one of 576 DGX H100 (NVIDIA's Eos announcement, 2023)
SYSTEMS = {"selene": "dgx-a100", "eos": "dgx-h100"}
_SYSTEM = re.compile(r"(?<![a-z0-9])(" + "|".join(SYSTEMS) + r")(?![a-z0-9])")

#: AWS instance families -> shipped profile (p5: 8x H100 SXM with 32x 100 Gb/s EFA)
INSTANCE_TYPES = {"p5": "aws-p5"}

#: AWS instance families without a shipped profile, and the nearest thing to run instead
_UNSHIPPED_INSTANCES = {
    "p4d": "8x A100 40GB with 4x 100 Gb/s EFA: use hardware dgx-a100-40gb with cluster.nics_per_node: 4 "
    "and cluster.nic_gbps: 100",
    "p4de": "8x A100 80GB with 4x 100 Gb/s EFA: use hardware dgx-a100 with cluster.nics_per_node: 4 "
    "and cluster.nic_gbps: 100",
    "p5e": "8x H200 with 3,200 Gb/s EFA: use hardware dgx-h200 (InfiniBand) and, for EFA's per-step "
    "latency, cluster.nic_latency_us from aws-p5",
    "p5en": "8x H200 with 3,200 Gb/s EFA: use hardware dgx-h200 (InfiniBand) and, for EFA's per-step "
    "latency, cluster.nic_latency_us from aws-p5",
}

#: export variants of shipped GPUs with no profile of their own, and what to run instead
_UNSHIPPED_GPUS = {
    "a800": "an A100 with NVLink cut to 400 GB/s bidirectional (NVIDIA A800 datasheet): use hardware "
    "dgx-a100 (or dgx-a100-40gb) with cluster.nvlink_GBps: 200 and your cluster's NICs",
    "mi350x": "the MI355X's die at 2.2 GHz and 1,000 W (air-cooled) against 2.4 GHz and 1,400 W: hardware "
    "amd-mi355x is an upper bound (AMD's MLPerf Training v5.1 Llama 3.1 8B step is 1.23x longer on MI350X); "
    "give a profile YAML for it, e.g. from simcluster's calibrate",
    "h20": "a Hopper with far fewer tensor-core FLOP/s than the H100 (148 TFLOP/s dense BF16): give a "
    "profile YAML for it, e.g. from simcluster's calibrate",
}
_UNSHIPPED_GPU = re.compile(r"(?<![a-z0-9])(" + "|".join(_UNSHIPPED_GPUS) + r")(?![0-9])")

# longest names first, so 'gb200' is not read as 'b200'; the name ends at a separator or a board
# suffix run on ('H100SXM5', 'GB200NVL72', 'h100nvl', read below), not at other letters: 'A100X'
# is another card (a PCIe converged accelerator, refused by name) and 'h200x' a typo, neither the
# shipped node
_GPU = re.compile(
    r"(?<![a-z0-9])(" + "|".join(sorted(REFERENCE_NODES, key=len, reverse=True)) + r")(?=sxm|nvl|pcie|cnx|[^a-z0-9]|$)"
)
_MEMORY = re.compile(r"(\d+)\s*gi?b(?![a-z])")
_INSTANCE = re.compile(r"^(p\d+[a-z]*)(?:\.\d*x?large)?$")
# a PCIe card or an NVL (two-card NVLink bridge) board, not the NVL72 rack
_OTHER_BOARD = re.compile(r"pcie|nvl(?!\d)")
# a converged accelerator: the GPU and a ConnectX-7 on one PCIe card (NVIDIA H100 CNX product
# brief), not the SXM part of a DGX
_CONVERGED = re.compile(r"cnx")
#: converged accelerators named by a letter glued to the GPU's name -> (the GPU, what shares its
#: PCIe card): the A100X carries an A100 and a BlueField-2 DPU (NVIDIA A100X product brief)
_CONVERGED_CARDS = {"a100x": ("a100", "a BlueField-2 DPU")}
_CONVERGED_CARD = re.compile(r"(?<![a-z0-9])(" + "|".join(_CONVERGED_CARDS) + r")(?![a-z])")


def _converged_refusal(field: str, card: str, gpu: str, partner: str) -> UserError:
    """The refusal of a converged accelerator ``card`` (the ``gpu`` and ``partner`` on one PCIe
    card): not the SXM part the shipped profile of ``gpu`` describes."""
    return UserError(
        field,
        f"no shipped profile for the {card}, a PCIe converged accelerator (the GPU and {partner} on one "
        f"card; the shipped {gpu.upper()} is the SXM part of {REFERENCE_NODES[gpu][None]}, with other power, "
        "clocks and NVLink); give a profile YAML for that card, e.g. from simcluster's calibrate",
    )


def reference_node(text: str, field: str = "cluster.hardware") -> str | None:
    """The shipped profile a GPU name means, or None if ``text`` names no known GPU.

    Raises :class:`UserError` for a known GPU on a board or with a memory size that no shipped
    profile describes.
    """
    # '8x H100', '8xA100 80GB': the count is the node's, not part of the name
    key = re.sub(r"^\d+\s*x\s*", "", text.strip().lower())
    instance = _INSTANCE.match(key)
    if instance:
        return _instance_profile(instance.group(1), field)
    _check_one_machine(text, key, field)
    match = _GPU.search(key)
    if not match:
        return _without_gpu(key, field)
    return _sized_profile(match.group(1), key[match.end() :], field)


def _instance_profile(family: str, field: str) -> str | None:
    """The shipped profile of an AWS instance family; refused for a known unshipped one."""
    if family in INSTANCE_TYPES:
        return INSTANCE_TYPES[family]
    if family in _UNSHIPPED_INSTANCES:
        raise UserError(field, f"no shipped profile for AWS {family} ({_UNSHIPPED_INSTANCES[family]})")
    return None


def _check_one_machine(text: str, key: str, field: str) -> None:
    """Refuse a name of several machines: 'dgx-h100,dgx-b200' read as its first GPU would run
    the job on one of them silently (a GPU and the system built of it, 'Selene (DGX A100)',
    are one machine)."""
    named = {m.group(1): REFERENCE_NODES[m.group(1)][None] for m in _GPU.finditer(key)}
    named |= {m.group(1): SYSTEMS[m.group(1)] for m in _SYSTEM.finditer(key)}
    if len(set(named.values())) > 1:
        raise UserError(
            field,
            f"'{text}' names more than one machine ({', '.join(sorted(named))}); give one profile "
            "(a comma list is sweep's --hardware axis)",
        )


def _without_gpu(key: str, field: str) -> str | None:
    """A name with no shipped GPU in it: a system's profile, a refusal for a converged card or
    a known unshipped GPU, else None."""
    system = _SYSTEM.search(key)
    if system:
        return SYSTEMS[system.group(1)]
    converged = _CONVERGED_CARD.search(key)
    if converged:
        gpu, partner = _CONVERGED_CARDS[converged.group(1)]
        raise _converged_refusal(field, converged.group(1).upper(), gpu, partner)
    unshipped = _UNSHIPPED_GPU.search(key)
    if unshipped:
        gpu = unshipped.group(1)
        raise UserError(field, f"no shipped profile for the {gpu.upper()}, {_UNSHIPPED_GPUS[gpu]}")
    return None


def _sized_profile(gpu: str, rest: str, field: str) -> str:
    """The profile of shipped GPU ``gpu`` by what follows its name (``rest``): refused on
    another board or at a memory size no profile has."""
    if _CONVERGED.search(rest):
        raise _converged_refusal(field, f"{gpu.upper()} CNX", gpu, "a ConnectX-7")
    if _OTHER_BOARD.search(rest):
        raise UserError(
            field,
            f"no shipped profile for the {gpu.upper()} PCIe/NVL card (the shipped {gpu.upper()} is the "
            f"SXM part of {REFERENCE_NODES[gpu][None]}, with other power, clocks and NVLink); "
            "give a profile YAML for that card, e.g. from simcluster's calibrate",
        )
    sizes = REFERENCE_NODES[gpu]
    memory = _MEMORY.search(rest)
    if memory is None:
        return sizes[None]
    gb = int(memory.group(1))
    if gb not in sizes:
        shipped = ", ".join(f"{size} GB" for size in sizes if size is not None)
        raise UserError(
            field,
            f"no shipped profile for a {gb} GB {gpu.upper()} (shipped: {shipped}); "
            "give a profile YAML, or set cluster.memory_gib on the nearest one",
        )
    return sizes[gb]
