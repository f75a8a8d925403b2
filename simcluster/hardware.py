"""Hardware profiles: YAML data files in ``hardware/`` (or any path), loaded and validated.

A profile is data, not code: a new system is a new file. Every number carries a source in the
profile's ``sources:`` map (dotted field path -> where the number comes from). Calibrated
profiles (written by ``calibrate/``) add ``measured:`` tables and ``provenance:``; the
simulator prefers measured tables over datasheet efficiencies.

Units in YAML follow the vendors' sheets: memory in GiB, HBM in TB/s, peak in TFLOP/s,
NVLink in GB/s per GPU per direction, NICs in Gbit/s per direction, latencies in microseconds.
The :class:`HardwareProfile` accessors convert to SI (bytes, bytes/s, FLOP/s, s).
"""

from __future__ import annotations

import contextlib
import copy
import re
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveInt,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from simcluster import yamlio
from simcluster.attention_grid import AttentionGrid
from simcluster.attention_kernels import MEASURED, AttentionCurve, curves_from_rows
from simcluster.data import data_dir
from simcluster.ep_kernel_rates import DISPATCH_SMS
from simcluster.errors import UserError, did_you_mean, did_you_mean_choice
from simcluster.fp8_attention import SUFFIX as FP8_SUFFIX
from simcluster.gemm_shape_table import shape_table
from simcluster.gpu_names import reference_node
from simcluster.limits import addressable_gib
from simcluster.nccl_ctas import MAX_CHANNELS
from simcluster.paths import anchor_path
from simcluster.profile_keys import unknown_key_message, unknown_source
from simcluster.profile_sources import unsourced
from simcluster.rate_bounds import HBM, HOST_MEMORY, LATENCY, LINK, NIC, PEAK, SHARE
from simcluster.strict_numbers import BOOLEAN_NUMBER, NumbersNotBooleans

Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4"]

#: the peak_tflops key a training precision's GEMMs run at (NVFP4 on the FP4 tensor cores)
PEAK_KEYS = {"nvfp4": "fp4"}


def _check_ranks_increase(table: list[tuple[int, float]]) -> None:
    """A rate table by EP size is read between its points, so its ranks must rise."""
    if any(b[0] <= a[0] for a, b in zip(table, table[1:], strict=False)):
        raise ValueError("the EP ranks must increase")


class _Strict(NumbersNotBooleans):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


PositiveFloat = Annotated[float, Field(gt=0)]
# one point of an efficiency curve: (GEMM FLOPs per call > 0, fraction of peak in (0, 1])
CurvePoint = tuple[PositiveFloat, Annotated[float, Field(gt=0, le=1)]]
#: [EP ranks, fraction of a bandwidth]: a measured rate by group size
RankPoint = tuple[PositiveInt, Annotated[float, Field(gt=0, le=1)]]


class GpuSpec(_Strict):
    """One GPU's datasheet figures."""

    name: str
    memory_gib: Annotated[float, AfterValidator(addressable_gib)] = Field(gt=0)
    hbm_tbps: Annotated[float, HBM] = Field(gt=0, description="HBM bandwidth, TB/s (1e12 B/s)")
    peak_tflops: dict[str, Annotated[float, Field(gt=0), PEAK]] = Field(
        min_length=1, description="dense peak per precision, TFLOP/s"
    )
    sm_count: int | None = Field(default=None, gt=0, description="streaming multiprocessors (wave quantisation)")
    compute_capability: float | None = Field(
        default=None,
        ge=1.0,
        description="NVIDIA CUDA compute capability (9.0 Hopper, 10.0 Blackwell): picks NCCL's "
        "per-generation protocol caps (network/nccl_caps.py); default: read from the GPU's name "
        "for the GPUs simcluster ships; none (an AMD GPU): NCCL <= 2.19's protocol fractions",
    )
    speed_spread: float = Field(
        default=0.0,
        ge=0.0,
        le=0.2,
        description="per-GPU spread (sigma, a fraction) of sustained tensor-core throughput across "
        "GPUs of this SKU; a synchronous step waits for the slowest (simcluster/variability.py)",
    )

    @field_validator("compute_capability")
    @classmethod
    def _major_minor(cls, value: float | None) -> float | None:
        if value is not None and value >= 20:
            # NCCL's own code writes 90 for 9.0 (comm->minCompCap)
            raise ValueError(
                f"{value:g} is not a compute capability; write major.minor "
                "(9.0 for an H100, 10.0 for a B200), not NCCL's 90 / 100"
            )
        return value

    @model_validator(mode="after")
    def _derive_compute_capability(self) -> GpuSpec:
        if self.compute_capability is None:
            self.compute_capability = compute_capability_of(self.name)
        return self


# GPU name -> compute capability (NVIDIA's CUDA GPUs table), for profiles that do not state it;
# longest names first so 'gb200' is not read as 'b200' (a GH200's GPU is an H100: 9.0)
# NVIDIA's CUDA GPUs table (developer.nvidia.com/cuda-gpus): data-centre parts a training or
# calibration run names; a name it cannot tell apart (RTX 6000 is Turing, Ada or Blackwell) is
# left out, and such a profile writes gpu.compute_capability itself
_COMPUTE_CAPABILITY = {
    "gb300": 10.3, "b300": 10.3, "gb200": 10.0, "b200": 10.0, "b100": 10.0, "gh200": 9.0,
    "h100": 9.0, "h200": 9.0, "h800": 9.0, "h20": 9.0, "l40s": 8.9, "l40": 8.9, "l4": 8.9,
    "a100": 8.0, "a800": 8.0, "a30": 8.0, "a40": 8.6, "a10g": 8.6, "a10": 8.6, "t4": 7.5, "v100": 7.0,
}  # fmt: skip
_CC_NAME = re.compile(r"(?<![a-z0-9])(" + "|".join(sorted(_COMPUTE_CAPABILITY, key=len, reverse=True)) + r")(?!\d)")


def compute_capability_of(name: str) -> float | None:
    """The compute capability a GPU name implies (``NVIDIA H100 SXM5 80GB`` -> 9.0), or None."""
    m = _CC_NAME.search(name.lower())
    return _COMPUTE_CAPABILITY[m.group(1)] if m else None


class NodeSpec(_Strict):
    """One node (server): GPUs, their scale-up domain (NVLink/NVSwitch or a direct mesh) and
    NICs."""

    gpus_per_node: int = Field(gt=0)
    nvlink_GBps: Annotated[float, LINK] = Field(
        gt=0,
        description="scale-up (NVLink, xGMI) bandwidth per GPU per direction, GB/s; on a mesh the "
        "sum over the GPU's links, each link carrying an equal part",
    )
    scale_up: Literal["switch", "mesh"] = Field(
        default="switch",
        description="how a node's GPUs are joined: 'switch' (NVSwitch: every GPU one port of "
        "nvlink_GBps) or 'mesh' (AMD Infinity Fabric: a direct link between every pair)",
    )
    nvlink_latency_us: Annotated[float, LATENCY] = Field(ge=0)
    nvlink_domain: int | None = Field(
        default=None, description="GPUs sharing one NVLink switch domain (NVL72: 72); None = a node"
    )
    nvls: bool = Field(default=False, description="NVSwitch in-network reduction (NVLink SHARP)")
    nics_per_node: int = Field(gt=0)
    nic_gbps: Annotated[float, NIC] = Field(gt=0, description="per NIC per direction, Gbit/s")
    nic_latency_us: Annotated[float, LATENCY] = Field(ge=0)
    host_cpu: Literal["intel", "amd", "arm"] | None = Field(
        default=None,
        description="host CPU vendor/architecture (Grace is arm): NCCL's multi-node LL cap "
        "(AMD hosts get their own row of llMaxBws) and network overhead floor (2 us on AMD x86, "
        "1 us otherwise); none: unknown, which NCCL treats as a non-AMD host",
    )
    host_link_GBps: Annotated[float, LINK] | None = Field(
        default=None,
        gt=0,
        description="GPU <-> host memory bandwidth per GPU per direction (PCIe or NVLink-C2C), "
        "achievable GB/s; used by training.optimizer_offload",
    )
    host_memory_GBps: Annotated[float, HOST_MEMORY] | None = Field(
        default=None,
        gt=0,
        description="host DRAM bandwidth per node that a CPU optimizer streams through, "
        "achievable GB/s; used by training.optimizer_offload",
    )
    host_memory_gib: float | None = Field(
        default=None,
        gt=0,
        description="host DRAM per node, GiB: what offloaded optimizer state and activations may fill",
    )


class FabricSpec(_Strict):
    """The scale-out network between nodes."""

    topology: str = "rail_fat_tree"
    oversubscription: float = Field(default=1.0, ge=1.0)
    nodes_per_leaf: int = Field(default=32, gt=0)
    switch_latency_us: Annotated[float, LATENCY] = Field(default=0.6, ge=0)
    segment_nodes: int | None = Field(
        default=None,
        gt=0,
        description="a job larger than one NVLink domain takes this many nodes of each domain "
        "(Slurm's --segment on NVL72 racks: 16 trays = 64 GPUs per rack); None = domains filled",
    )


class EfficiencySpec(_Strict):
    """Datasheet-to-achieved factors, from microbenchmarks (cuBLAS, FlashAttention, nccl-tests)."""

    gemm: list[CurvePoint] = Field(
        min_length=1, description="[[GEMM FLOPs per call, fraction of peak], ...], log-interpolated"
    )
    gemm_fp8: list[CurvePoint] | None = Field(
        min_length=1,
        default=None,
        description="the same curve for FP8 GEMMs (fraction of the FP8 peak); default: gemm's",
    )
    gemm_fp4: list[CurvePoint] | None = Field(
        min_length=1,
        default=None,
        description="the same curve for NVFP4 GEMMs (fraction of the FP4 peak); required for nvfp4",
    )
    sustained: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description=(
            "share of the gemm and gemm_fp8 curves' rates a GPU keeps over a training step at its "
            "power limit: 1 when the curves were measured sustained, below 1 when they are burst "
            "figures (a GPU idle between timed calls runs at its boost clock); a calibrated "
            "profile's measured GEMM table is used as timed"
        ),
    )
    sustained_fp8: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description=(
            "the same share for the gemm_fp8 curve where it was measured otherwise than the gemm "
            "curve (1 for an FP8 table timed at the settled clock beside a burst BF16 table); "
            "default: sustained"
        ),
    )
    gemm_shapes: str | dict[str, Any] | None = Field(
        default=None,
        description=(
            "GEMM shape table (a name in hardware/gemm_shapes, a YAML path, or the table inline: "
            "{grid, tflops: {dtype: [m][n][k]}}, as calibrate writes it): a GEMM runs at the "
            "size curve times the table's rate at its M x N x K over the median rate of the same "
            "FLOPs (simcluster/gemm_shape_table.py); none: the size curve alone"
        ),
    )
    attention_fwd: Annotated[float, SHARE] = Field(gt=0, le=1)
    attention_bwd: Annotated[float, SHARE] = Field(gt=0, le=1)
    hbm: Annotated[float, SHARE] = Field(gt=0, le=1, description="achievable fraction of HBM bandwidth")
    nvlink: Annotated[float, SHARE] = Field(gt=0, le=1, description="achievable fraction of NVLink bandwidth")
    nic: Annotated[float, SHARE] = Field(gt=0, le=1, description="achievable fraction of NIC bandwidth")
    nvls: Annotated[float, SHARE] | None = Field(
        default=None,
        gt=0,
        le=1,
        description="NVLS all-reduce algbw as a fraction of NVLink bandwidth",
    )
    deepep_nvlink: list[RankPoint] | None = Field(
        default=None,
        description=(
            "[[EP ranks, fraction of node.nvlink_GBps], ...]: the rate DeepEP's normal dispatch "
            "and combine kernels reach inside one NVLink domain (moe.dispatcher deepep, at "
            "Megatron-Core's 20 SMs), counted as its tests count it (a rank's received bytes, its "
            "own share included, over the call's time), linear between points and held beyond; "
            "none: efficiency.nvlink, a rank's own share charged at the link rate "
            "(parallelism/expert.py deepep_link_factor)"
        ),
    )
    hybridep_nvlink: list[RankPoint] | None = Field(
        default=None,
        description=(
            "the same for NVIDIA's HybridEP kernels (moe.dispatcher hybridep, at 16 SMs, "
            "Megatron-Core's default): [[EP ranks, fraction of node.nvlink_GBps], ...]; none: "
            "efficiency.nvlink as for deepep"
        ),
    )
    deepep_nvlink_by_sms: dict[PositiveInt, list[RankPoint]] | None = Field(
        default=None,
        description=(
            "{SMs: [[EP ranks, fraction of node.nvlink_GBps], ...]}: deepep_nvlink measured at SM "
            "counts other than Megatron-Core's 20 (moe.dispatch_sms), linear in SMs between them "
            "and the default's, held above the largest, in proportion to the SMs below the "
            "smallest (ep_kernel_rates.py); none: deepep_nvlink at every count"
        ),
    )
    hybridep_nvlink_by_sms: dict[PositiveInt, list[RankPoint]] | None = Field(
        default=None,
        description="the same for hybridep_nvlink, whose default count is 16 SMs",
    )
    deepep_token_sm_ns: dict[PositiveInt, NonNegativeFloat] | None = Field(
        default=None,
        description=(
            "{SMs: SM-nanoseconds}: the fixed work DeepEP's intranode kernels spend on each token "
            "besides moving its bytes (from the same test's FP8 and BF16 dispatch times at that SM "
            "count), linear in SMs between counts and held beyond; a token other than "
            "deepep_nvlink's (hidden 7,168 in BF16) then moves at its own rate "
            "(ep_kernel_rates.py token_size_ratio); none: deepep_nvlink's rate at every token size"
        ),
    )
    hybridep_token_sm_ns: dict[PositiveInt, NonNegativeFloat] | None = Field(
        default=None,
        description="the same for hybridep_nvlink",
    )
    kernel_launch_us: Annotated[float, LATENCY] = Field(
        default=4.0,
        ge=0,
        description=(
            "per-kernel launch/drain gap on a stream (calibrate: a one-element add); also the host "
            "time of a launch issued from C++ (parallelism/host.py) and of one of the bare tensor "
            "ops nanotron's per-tensor unpack issues (dp.param_unpack)"
        ),
    )
    host_op_us: Annotated[float, LATENCY] = Field(
        default=13.48,
        ge=0,
        description=(
            "host CPU time of one PyTorch op issued from Python with its launch (the unit of "
            "parallelism/host.py; calibrate: a small torch.nn.Linear forward timed on the host). "
            "Default: TransformerEngine issue 2053, torch.nn.Linear forward on a DGX H100's Xeon "
            "Platinum 8480C, 13.48 us"
        ),
    )
    gemm_tile: tuple[int, int] = Field(
        default=(128, 256), description="output tile of large cuBLAS GEMMs (M x N), for tile/wave quantisation"
    )
    collective_sms: int = Field(
        default=0,
        ge=0,
        description=(
            "SMs an NCCL collective occupies while in flight (one CTA per channel, never shared "
            "with compute); overlapped compute runs at (sm_count - collective_sms) / sm_count. "
            "0 = no interference"
        ),
    )
    nvls_sms: int | None = Field(
        default=None,
        ge=0,
        description=(
            "SMs an NVLS or NVLS_TREE collective occupies while in flight (NCCL_NVLS_NCHANNELS' "
            "default, one CTA per channel), in place of collective_sms for those algorithms; "
            "unset = collective_sms"
        ),
    )
    channel_busbw: list[tuple[Annotated[int, Field(gt=0, le=MAX_CHANNELS)], Annotated[float, LINK]]] = Field(
        default_factory=list,
        description=(
            "[[NCCL channels (CTAs), bus bandwidth GB/s], ...] a collective reaches when its "
            "communicator is limited to that many (maxCTAs), increasing; caps the calls of a "
            "group with fewer channels than collective_sms (simcluster/nccl_ctas.py). "
            "Empty = unknown: no cap"
        ),
    )
    attention_kernels: dict[str, list[AttentionCurve]] = Field(
        default_factory=dict,
        description=(
            "published fused-attention benchmark curves per kernel (e.g. fa2, cudnn, fa3) by head "
            "dimension and sequence length; replace attention_fwd/bwd for the kernel in use"
        ),
    )
    block_fp8_gemm: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description=(
            "share of the gemm_fp8 curve's rate a block-scaled FP8 GEMM runs at "
            "(training.fp8_recipe block: MXFP8 on Blackwell, 1x128 / 128x128 blocks on Hopper, "
            "their scale factors read beside each tile); 1: as fast as the per-tensor FP8 GEMMs "
            "the curve was timed on"
        ),
    )
    attention_sustained: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description=(
            "share of the attention_kernels curves' rates a GPU keeps over a training step at its "
            "power limit: 1 when the curves were timed at that clock, below 1 when the benchmark "
            "let the GPU cool to its boost clock before each timed call; a calibrated profile's "
            "own (measured) kernel is used as timed"
        ),
    )
    attention_grid: AttentionGrid | None = Field(
        default=None,
        description=(
            "fused attention's measured rate at batch 1 by sequence length and query heads, and "
            "the tokens and width the published attention_kernels curves were measured at: a "
            "call spread over fewer (batch x head) pairs than the curves' runs slower "
            "(simcluster/attention_grid.py); none: the curves as published"
        ),
    )
    attention_kernel: str | None = Field(
        default=None, description="the kernel of attention_kernels a scenario uses unless it names one"
    )

    @field_validator("deepep_nvlink", "hybridep_nvlink")
    @classmethod
    def _ranks_increase(cls, v: list[tuple[int, float]] | None) -> list[tuple[int, float]] | None:
        _check_ranks_increase(v or [])
        return v

    @field_validator("deepep_nvlink_by_sms", "hybridep_nvlink_by_sms")
    @classmethod
    def _tables_ranks_increase(cls, v: dict[int, list[tuple[int, float]]] | None) -> dict[int, list[tuple[int, float]]] | None:
        for table in (v or {}).values():
            _check_ranks_increase(table)
        return v

    @model_validator(mode="after")
    def _by_sms_beside_its_default(self) -> EfficiencySpec:
        for dispatcher, default in DISPATCH_SMS.items():
            by_sms = getattr(self, f"{dispatcher}_nvlink_by_sms")
            if not by_sms:
                continue
            if getattr(self, f"{dispatcher}_nvlink") is None:
                raise ValueError(
                    f"{dispatcher}_nvlink_by_sms needs {dispatcher}_nvlink, the rate at the default {default} SMs"
                )
            if default in by_sms:
                raise ValueError(
                    f"{dispatcher}_nvlink_by_sms: the rate at the default {default} SMs is {dispatcher}_nvlink's; "
                    f"drop the {default} entry"
                )
        for dispatcher in DISPATCH_SMS:
            if getattr(self, f"{dispatcher}_token_sm_ns") and getattr(self, f"{dispatcher}_nvlink") is None:
                raise ValueError(
                    f"{dispatcher}_token_sm_ns needs {dispatcher}_nvlink, the measured rate it carries to other token sizes"
                )
        return self

    @field_validator("channel_busbw")
    @classmethod
    def _channels_increase(cls, v: list[tuple[int, float]]) -> list[tuple[int, float]]:
        if any(b[0] <= a[0] or b[1] < a[1] for a, b in zip(v, v[1:], strict=False)):
            raise ValueError("channel_busbw's channels must increase and its bandwidths not fall")
        return v

    @model_validator(mode="after")
    def _fp8_share_has_its_curve(self) -> EfficiencySpec:
        if self.sustained_fp8 is not None and self.gemm_fp8 is None:
            raise ValueError(
                "sustained_fp8 scales the gemm_fp8 curve, which this profile does not have: add "
                "gemm_fp8 or drop sustained_fp8 (sustained scales the gemm curve FP8 falls back to)"
            )
        return self

    @model_validator(mode="after")
    def _default_kernel_listed(self) -> EfficiencySpec:
        if self.attention_kernel is not None and self.attention_kernel not in self.attention_kernels:
            raise ValueError(
                f"attention_kernel '{self.attention_kernel}' is not one of attention_kernels "
                f"({', '.join(sorted(self.attention_kernels)) or 'none listed'})"
            )
        return self


SCHEMA_VERSION = 1


class HardwareProfile(_Strict):
    """A validated hardware profile."""

    schema_version: int = Field(
        default=SCHEMA_VERSION, ge=SCHEMA_VERSION, le=SCHEMA_VERSION,
        description=f"profile format version; this simcluster reads {SCHEMA_VERSION}",
    )
    name: str
    description: str = ""
    gpu: GpuSpec
    node: NodeSpec
    fabric: FabricSpec = FabricSpec()
    efficiency: EfficiencySpec
    measured: dict[str, Any] = Field(default_factory=dict)
    provenance: dict[str, Any] = Field(default_factory=dict)
    sources: dict[str, str] = Field(default_factory=dict)
    # the profile before a scenario's overrides and patch: the machine ``measured`` was taken on
    _as_measured: HardwareProfile | None = PrivateAttr(default=None)
    # numeric fields the file wrote without a sources: entry (simcluster.profile_sources)
    _unsourced: tuple[str, ...] = PrivateAttr(default=())

    @property
    def unsourced(self) -> tuple[str, ...]:
        """The numeric fields this profile's file (and the scenario's changes to it) wrote
        without a ``sources:`` entry, in file order; () for every shipped profile."""
        return self._unsourced

    @property
    def as_measured(self) -> HardwareProfile:
        """The machine its measurements describe (``measured`` tables, attention curves in
        TFLOP/s): itself, unless a scenario changed its fields (``cluster.nic_gbps``, a
        ``cluster.profile`` patch), in which case the profile as loaded. A measurement is the
        stock machine's: the model carries it to a changed field by the ratio of the two
        machines (a collective table's measured/modelled time is taken against the stock
        machine's model; a timed GEMM scales with the patched peak), or the change would cancel
        out (half the NIC bandwidth would leave a measured all-reduce as fast as before)."""
        return self._as_measured or self

    # --- SI accessors -------------------------------------------------------------------
    @property
    def memory_bytes(self) -> float:
        """HBM capacity per GPU in bytes."""
        return self.gpu.memory_gib * 2**30

    @property
    def hbm_bytes_per_s(self) -> float:
        """HBM bandwidth in bytes/s (datasheet)."""
        return self.gpu.hbm_tbps * 1e12

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s for a precision; fp32 math on tensor cores uses tf32 if listed."""
        table = self.gpu.peak_tflops
        key = PEAK_KEYS.get(precision, precision)
        if key not in table:
            raise UserError(
                "training.precision",
                f"hardware '{self.name}' lists no peak for '{key}' "
                f"(has {', '.join(sorted(table))}); pick one of those or add it to the profile",
            )
        return table[key] * 1e12

    def training_peak_flops(self, precision: str) -> float:
        """The peak a run in ``precision`` is measured against (MFU): the precision's own, fp32
        training at TF32 where the GPU lists it (PyTorch allows TF32 matmuls)."""
        fp32_key = "tf32" if "tf32" in self.gpu.peak_tflops else "fp32"
        return self.peak_flops(fp32_key if precision == "fp32" else precision)

    def gemm_rate_missing(self, dtype: str) -> str | None:
        """What the profile lacks to time GEMMs of ``dtype`` on tensor cores ('no FP4 peak',
        'no efficiency.gemm_fp4'), or None: the dtype's peak, and for NVFP4 a rate curve or
        measured NVFP4 GEMMs (its rate is not a fraction of another's)."""
        key = PEAK_KEYS.get(dtype, dtype)
        if key not in self.gpu.peak_tflops:
            return f"no {key.upper()} peak"
        measured = any(str(r.get("dtype")) == dtype for r in self.measured.get("gemm", []) or [])
        if dtype == "nvfp4" and not (self.efficiency.gemm_fp4 or measured):
            return "no efficiency.gemm_fp4"
        return None

    def attention_kernel_in_use(self, kernel: str | None) -> str | None:
        """The fused-attention kernel a scenario runs: the one it names, else the profile's own
        measurements (``measured``), else the profile's default; None = scalar efficiencies."""
        if kernel:
            return kernel
        return MEASURED if MEASURED in self.attention_kernels else self.efficiency.attention_kernel

    def attention_curves(self, kernel: str | None) -> list[AttentionCurve] | None:
        """Curves of the fused-attention kernel a scenario names; without a name, the profile's
        own measurements (a calibrated profile: kernel ``measured``) or else its default kernel.
        None = use the scalar attention_fwd / attention_bwd efficiencies."""
        kernels = self.attention_kernels
        name = self.attention_kernel_in_use(kernel)
        if name is None:
            return None
        if name not in kernels:
            # an FP8 kernel is asked for through training.fp8_attention, not by name
            plain = [k for k in sorted(kernels) if not k.endswith(FP8_SUFFIX)]
            fp8 = " (and FP8 ones through training.fp8_attention)" if len(plain) < len(kernels) else ""
            raise UserError(
                "training.attention_kernel",
                f"hardware '{self.name}' has no attention curves for '{name}'{did_you_mean(name, plain)}; "
                f"pick one it has ({', '.join(plain) or 'none'}){fp8}, or drop the key to use the profile's default",
            )
        return kernels[name]

    @cached_property
    def attention_kernels(self) -> dict[str, list[AttentionCurve]]:
        """Every kernel with curves: the published ones of ``efficiency.attention_kernels`` and,
        when the profile holds ``measured.attention`` rows, :data:`MEASURED` built from them
        (unless the profile already lists it)."""
        kernels = dict(self.efficiency.attention_kernels)
        rows = self.measured.get("attention") or []
        if MEASURED not in kernels and rows:
            curves = curves_from_rows(rows)
            if curves:
                kernels[MEASURED] = curves
        return kernels

    @property
    def nvlink_bytes_per_s(self) -> float:
        """NVLink bandwidth per GPU per direction, bytes/s."""
        return self.node.nvlink_GBps * 1e9

    @property
    def nic_bytes_per_s(self) -> float:
        """One NIC's bandwidth per direction, bytes/s."""
        return self.node.nic_gbps * 1e9 / 8

    @cached_property
    def gpus_per_node(self) -> int:
        return self.node.gpus_per_node


# Scenario keys under ``cluster:`` that override a profile field (public; used by --set).
CLUSTER_OVERRIDES: dict[str, str] = {
    "nic_gbps": "node.nic_gbps",
    "nics_per_node": "node.nics_per_node",
    "nic_latency_us": "node.nic_latency_us",
    "nvlink_GBps": "node.nvlink_GBps",
    "nvlink_latency_us": "node.nvlink_latency_us",
    "nvlink_domain": "node.nvlink_domain",
    "nvls": "node.nvls",
    "oversubscription": "fabric.oversubscription",
    "nodes_per_leaf": "fabric.nodes_per_leaf",
    "segment_nodes": "fabric.segment_nodes",
    "topology": "fabric.topology",
    "memory_gib": "gpu.memory_gib",
    "hbm_tbps": "gpu.hbm_tbps",
    "speed_spread": "gpu.speed_spread",
}


def _data_dir() -> Path:
    """The shipped hardware/ folder: inside the wheel, or the repository checkout."""
    return data_dir("hardware")


def shipped_profiles() -> list[str]:
    """Names of the profiles shipped in hardware/."""
    return sorted(p.stem for p in _data_dir().glob("*.yaml"))


def resolve_profile_path(name_or_path: str | Path, field: str = "cluster.hardware") -> Path:
    """A profile name ('dgx-h100') or a path to a YAML file -> an existing path."""
    text = str(name_or_path)
    path = Path(text)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if path.is_dir():
            raise UserError(field, f"'{text}' is a directory; give a hardware profile YAML file")
        if not path.is_file() and path.parent == Path(".") and (_data_dir() / path.name).is_file():
            # a shipped profile by its file name (dgx-h100.yaml), as a shipped scenario resolves
            return _data_dir() / path.name
        if not path.exists():  # a pipe (`--hardware <(sed ... mine.yaml)`) exists: read it
            raise UserError(
                field,
                f"hardware profile file '{text}' not found{did_you_mean(path.stem, shipped_profiles())}; "
                "check the path (in a scenario a relative "
                "path is read from the scenario's folder) or name a shipped profile (simcluster list hardware)",
            )
        return path
    candidate = _data_dir() / f"{text}.yaml"
    if candidate.is_file():
        return candidate
    names = shipped_profiles()
    key = text.strip().lower()
    alias = key if key in names else reference_node(text, field)
    if alias:
        return _data_dir() / f"{alias}.yaml"
    raise UserError(
        field,
        f"unknown hardware '{text}'{did_you_mean(text, names)}; "
        f"shipped profiles: {', '.join(names)}, or give a path to a profile YAML (`calibrate` "
        "writes one for your GPUs: README, 'Calibrating on your cluster')",
    )


def _set_path(data: dict[str, Any], dotted: str, value: Any, field: str) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise UserError(field, f"cannot set inside '{key}', which is not a section of the profile")
    node[keys[-1]] = value


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'efficiency': {'nic': 0.8}} -> {'efficiency.nic': 0.8} (lists and scalars are leaves)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


def load_profile(
    name_or_path: str | Path,
    overrides: dict[str, Any] | None = None,
    field: str = "cluster.hardware",
    patch: dict[str, Any] | None = None,
) -> HardwareProfile:
    """Load and validate a profile, applying scenario overrides (keys of CLUSTER_OVERRIDES) and a
    ``patch`` of any profile fields (the scenario's ``cluster.profile`` mapping)."""
    path = resolve_profile_path(name_or_path, field)
    raw = yamlio.load_user_file(path, field, "hardware profile")
    if not isinstance(raw, dict):
        raise UserError(field, f"profile {path} must be a YAML mapping")
    if raw.get("partial") is True:
        raise _unfinished(path, raw, field)
    return profile_from_dict(raw, overrides, field=field, origin=str(path), patch=patch)


def _unfinished(path: Path, raw: dict[str, Any], field: str) -> UserError:
    """A calibration's ``OUT.partial.yaml`` (raw measurements so far, no profile) given as one."""
    stem = path.stem.removesuffix(".partial")
    final = path.with_name(stem + path.suffix)
    error = " ".join(str(raw.get("error") or "").split())
    why = f"it stopped: {error[:160]}" if error else "it is still running or stopped unreported"
    use = f"give '{final}' if it finished since, or " if final.is_file() else ""
    return UserError(
        field,
        f"'{path}' is an unfinished calibration, raw measurements only, not a profile ({why}); "
        f"{use}rerun the calibration (python -m calibrate ... --out {final}) and give the "
        "profile it writes",
    )


def profile_from_dict(
    raw: dict[str, Any],
    overrides: dict[str, Any] | None = None,
    field: str = "cluster.hardware",
    origin: str = "<dict>",
    patch: dict[str, Any] | None = None,
) -> HardwareProfile:
    """Validate a profile given as a dict (e.g. built by calibrate/)."""
    data = copy.deepcopy(raw)
    _anchor_shape_table(data, origin)
    changes = {CLUSTER_OVERRIDES[k]: v for k, v in (overrides or {}).items() if v is not None}
    patched = _flatten(patch or {})
    changes.update(patched)
    for path, value in changes.items():
        _set_path(data, path, value, f"cluster.profile.{path}" if path in patched else field)
        data.setdefault("sources", {})[path] = "scenario override"
    try:
        profile = HardwareProfile.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc, patched, field, origin) from None
    if bad := unknown_source(HardwareProfile, profile.sources):
        raise UserError(field, f"profile {origin} field 'sources.{bad[0]}' {bad[1]}")
    profile._unsourced = tuple(unsourced(data))
    _check_sms_taken(profile, "collective_sms", field, origin, _flatten(patch or {}))
    _check_shape_table(profile, field, origin, _flatten(patch or {}))
    _check_moe_tables(profile, field, origin)
    _check_nvls_rate(profile, field, origin, _flatten(patch or {}), overrides or {})
    if changes and not any(p.split(".")[0] == "measured" for p in changes):
        # a patch that brings its own measurements describes the changed machine itself
        with contextlib.suppress(UserError):  # a profile completed by its patch is its own
            profile._as_measured = profile_from_dict(raw, field=field, origin=origin)
    return profile


def _validation_error(
    exc: ValidationError, patched: dict[str, Any], field: str, origin: str
) -> UserError:
    """The one-line error for a profile the schema rejects: named after the patched key
    (``cluster.profile.<key>``) when a ``patch`` value is what failed, else after ``field``."""
    err = _first_error(exc.errors())
    err["msg"] = err["msg"].removeprefix("Value error, ")  # a validator's own message
    loc = ".".join(str(p) for p in err["loc"])
    if any(loc == c or loc.startswith(c + ".") or _patched_boolean(err, loc, c, v) for c, v in patched.items()):
        if err["type"] == "extra_forbidden":
            return UserError(f"cluster.profile.{loc}", unknown_key_message(HardwareProfile, err["loc"]))
        return UserError(f"cluster.profile.{loc}", f"{err['msg']}; see the fields of hardware/dgx-h100.yaml")
    if err["type"] == "extra_forbidden":
        msg = f"profile {origin} {unknown_key_message(HardwareProfile, err['loc'])}"
    elif err["type"] == "missing":
        msg = f"profile {origin} is missing field '{loc}'; add it (see hardware/dgx-h100.yaml)"
    else:
        hint = did_you_mean_choice(err.get("input"), err.get("ctx", {}).get("expected", ""))
        if not hint and err["type"] != BOOLEAN_NUMBER:  # the value given and the fix
            got = err.get("input")
            # a section's own validator names what is wrong; its whole mapping would bury it
            shown = "" if isinstance(got, dict) else f" (got {'null' if got is None else repr(got)})"
            hint = f"{shown}; fix it (hardware/dgx-h100.yaml shows every field)"
        msg = f"profile {origin} field '{loc}': {err['msg']}{hint}"
    return UserError(field, msg)


def _first_error(errors: list[Any]) -> Any:
    """The error to report: a key the schema does not know before a required field missing
    from the same section, since a misspelt key is both (``gpu.memry_gib`` was reported as
    'missing field gpu.memory_gib', the typo itself unnamed)."""
    first = errors[0]
    if first["type"] == "missing":
        for err in errors:
            if err["type"] == "extra_forbidden" and tuple(err["loc"][:-1]) == tuple(first["loc"][:-1]):
                return err
    return first


def _patched_boolean(err: Any, loc: str, path: str, value: Any) -> bool:
    """Whether a boolean patched into a mapping or list of numbers is what failed: that check
    names the whole field (``gpu.peak_tflops``), not the patched key inside it."""
    return err["type"] == BOOLEAN_NUMBER and path.startswith(loc + ".") and isinstance(value, bool)


def _anchor_shape_table(data: dict[str, Any], origin: str) -> None:
    """A shape table given as a relative path is read beside the profile that names it."""
    eff = data.get("efficiency")
    if not isinstance(eff, dict):
        return
    name = eff.get("gemm_shapes")
    if isinstance(name, str) and name.endswith((".yaml", ".yml")):  # a table's name is not a path
        eff["gemm_shapes"] = anchor_path(name, Path(origin).parent)


def _check_moe_tables(profile: HardwareProfile, field: str, origin: str) -> None:
    """The profile's ``measured`` tables read (simcluster/moe_kernels.py for ``measured.moe``,
    simcluster/measured_tables.py for the others): a malformed row is a one-line error at
    load, not a traceback or a nonsense time mid-simulation."""
    from simcluster.measured_tables import check_measured_tables
    from simcluster.moe_kernels import moe_tables

    try:
        check_measured_tables(profile.measured)
        moe_tables(profile.measured)
    except UserError as exc:
        raise UserError(field, f"profile {origin} field '{exc.field}': {exc.message}") from None


def _check_shape_table(profile: HardwareProfile, field: str, origin: str, patched: dict[str, Any]) -> None:
    """The profile's GEMM shape table loads (a one-line error at load, not mid-simulation)."""
    spec = profile.efficiency.gemm_shapes
    if spec is None:
        return
    try:
        shape_table(spec)
    except UserError as exc:
        key = "efficiency.gemm_shapes"
        if key in patched:
            raise UserError(f"cluster.profile.{key}", exc.message) from None
        raise UserError(field, f"profile {origin} field '{key}': {exc.message}") from None


def _check_nvls_rate(
    profile: HardwareProfile, field: str, origin: str, patched: dict[str, Any], overridden: dict[str, Any]
) -> None:
    """A profile with NVLS has its measured rate: the NVLS algorithms time the switch by it.
    The error names what turned NVLS on or took the rate away: a patch, an override, the file."""
    if not profile.node.nvls or profile.efficiency.nvls is not None:
        return
    msg = "node.nvls is true but efficiency.nvls (NVLS all-reduce algbw over NVLink) is not set"
    fix = {"efficiency.nvls": "patch node.nvls: false with it", "node.nvls": "patch efficiency.nvls with it"}
    for key, what in fix.items():
        if key in patched:
            raise UserError(f"cluster.profile.{key}", f"{msg}; {what}")
    if overridden.get("nvls"):
        raise UserError("cluster.nvls", f"{msg} in {origin}; set cluster.profile.efficiency.nvls too (nccl-tests' NVLS algbw over NVLink)")
    raise UserError(field, f"profile {origin}: {msg}; add it or set node.nvls false")


def _check_sms_taken(
    profile: HardwareProfile, name: str, field: str, origin: str, patched: dict[str, Any]
) -> None:
    """SMs taken by communication need the SM count and must leave compute at least one SM."""
    sms, taken = profile.gpu.sm_count, getattr(profile.efficiency, name)
    if taken == 0 or (sms is not None and taken < sms):
        return
    key = f"efficiency.{name}"
    where = f"cluster.profile.{key}" if key in patched or "gpu.sm_count" in patched else field
    if sms is None:
        raise UserError(
            where,
            f"profile {origin} sets {key}={taken} but no gpu.sm_count; "
            "add gpu.sm_count or set it to 0",
        )
    raise UserError(
        where,
        f"profile {origin}: {key}={taken} must be below gpu.sm_count={sms} "
        "(compute needs at least one SM)",
    )
