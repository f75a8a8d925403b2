"""Kernel time model: calibrated (measured) tables first, roofline with efficiency tables fallback.

GEMM time = max(FLOPs / (peak x efficiency(FLOPs) x shape factor), bytes / (HBM x hbm
efficiency)). The efficiency curve comes from the profile's ``efficiency.gemm`` (GEMM
microbenchmarks) or, when the profile was calibrated, from its measured GEMM table (same curve,
built from real timings); the shape factor from its ``efficiency.gemm_shapes``
(:mod:`simcluster.gemm_shape_table`).
Attention uses the FlashAttention FLOP count (causal halves it) over the kernel's throughput at
that head dimension and sequence length (published or measured curves), or a scalar efficiency.
Memory-bound kernels use effective HBM bandwidth.
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from simcluster.attention_kernels import BWD_FLOPS_FACTOR, MEASURED, kernel_tflops
from simcluster.gemm_roles import TimedGemms
from simcluster.gemm_shape_table import shape_table
from simcluster.hardware import PEAK_KEYS, HardwareProfile
from simcluster.interp import interp
from simcluster.memory_rate import streaming_rate
from simcluster.moe_kernels import MoeKernels, of_profile

if TYPE_CHECKING:
    from simcluster.scenario.training import TrainingSection

#: bytes per GEMM operand element; NVFP4 is 4 bits plus an E4M3 scale per 16 values
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "nvfp4": 0.5 + 1 / 16}

#: precisions whose GEMMs take quantised operands while activations and attention stay 16-bit
QUANTISED = ("fp8", "nvfp4")

#: HBM bytes per element TransformerEngine moves to quantise one 16-bit NVFP4 GEMM operand
#: for both of its uses (NVFP4BlockScaling; transformer_engine/pytorch/csrc/quantizer.cpp
#: NVFP4Quantizer::quantize_impl): one read for the amaxes of the tensor and of its random
#: Hadamard transform (nvte_hadamard_transform_amax), then the rowwise cast (read 2, write
#: 0.5 + 1/16) and the fused Hadamard-transform-and-cast of the columnwise copy the
#: weight-gradient GEMM reads (read 2, write 0.5 + 1/16)
NVFP4_QUANTISE_BYTES = 2.0 + 2 * (2.0 + 0.5 + 1 / 16)

#: the same without the Hadamard transform: a weight (the recipe's fp4_quant_fwd_weight never
#: takes one) or any operand under NVTE_NVFP4_DISABLE_RHT=1. quantize_impl's branch without RHT
#: reads the tensor once for its amax (nvte_compute_amax_with_config), then one nvte_quantize_v2
#: reads it again and writes the rowwise and the columnwise copy (read 2, write 2 x (0.5 + 1/16))
NVFP4_PLAIN_QUANTISE_BYTES = 2.0 + 2.0 + 2 * (0.5 + 1 / 16)

#: the rowwise copy alone (a frozen linear's input, whose weight-gradient GEMM never runs, and its
#: output gradient under TransformerEngine's op fuser): the
#: amax read, then one read and the 4-bit write with its scales; the Hadamard transform is the
#: columnwise copy's only, so it is not run
NVFP4_ROWWISE_QUANTISE_BYTES = 2.0 + 2.0 + 0.5 + 1 / 16

#: how much longer an NVFP4 cast takes with stochastic rounding, which the recipe applies to
#: gradients: TransformerEngine pull request 2412 ('Tuned NVFP4 cast kernel', Blackwell) measures
#: the same rowwise + columnwise cast at 6.4 TB/s rounding to nearest and 4.5 TB/s rounding
#: stochastically (its random bits drawn per element)
NVFP4_SR_SLOWDOWN = 6.4 / 4.5

#: kernels TransformerEngine launches to quantise one tensor to FP8, by recipe
#: (transformer_engine/pytorch/csrc/quantizer.cpp): Float8CurrentScalingQuantizer::quantize_impl
#: runs nvte_compute_amax, nvte_compute_scale_from_amax and nvte_quantize_v2 one after the other;
#: delayed scaling takes its scale from the amax history and block scaling finds each tile's
#: inside the cast, one kernel each
FP8_CAST_KERNELS = {"delayed": 1, "current": 3, "block": 1}


def non_tn_fp8_gemms(compute_capability: float | None) -> bool:
    """Whether cuBLASLt runs per-tensor-scaled FP8 GEMMs in every layout on this GPU, so that
    TransformerEngine keeps no transposed FP8 copy: datacenter Blackwell (compute capability
    10.x) and 13.x on, not Hopper, Ada or consumer Blackwell (12.x), whose FP8 tensor cores
    take only TN operands (``nvte_is_non_tn_fp8_gemm_supported``). Unknown: Hopper's rule."""
    if compute_capability is None:
        return False
    return 10.0 <= compute_capability < 12.0 or compute_capability >= 13.0


def keeps_fp8_transpose(recipe: str, compute_capability: float | None) -> bool:
    """Whether TransformerEngine's FP8 copy of a tensor has a second, transposed direction:
    block scales always (each direction scaled along itself), a per-tensor scale only where FP8
    GEMMs take K-major operands alone (:func:`non_tn_fp8_gemms` false: Hopper)."""
    return recipe == "block" or not non_tn_fp8_gemms(compute_capability)


def median_curve(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(FLOPs, efficiency) of timed GEMMs -> one point per FLOP count, in size order: the median
    of the shapes timed at it, the centre a shape table's factors are taken against
    (gemm_shape_table.py)."""
    by_flops: dict[float, list[float]] = {}
    for flops, eff in points:
        by_flops.setdefault(flops, []).append(eff)
    return [(flops, statistics.median(effs)) for flops, effs in sorted(by_flops.items())]


@dataclass(frozen=True)
class GemmBreakdown:
    """How :meth:`KernelModel.gemm_breakdown` times a GEMM (efficiencies are fractions of
    ``peak``)."""

    dtype: str
    flops: float
    seconds: float
    peak: float
    #: the size curve's efficiency at the GEMM's FLOPs (1 when the shape was timed)
    curve: float
    #: the shape table's rate at M x N x K over its FLOP count's median (1 without a table)
    shape_factor: float
    #: a benchmark curve's plateau times tile/wave quantisation, the most it may reach
    cap: float | None
    #: a calibrated profile timed this exact shape
    timed: bool
    #: HBM traffic, not tensor-core time, sets it
    memory_bound: bool

    @property
    def tflops(self) -> float:
        """Achieved TFLOP/s, launch gap included."""
        return self.flops / self.seconds / 1e12


@dataclass
class KernelModel:
    """Times of GEMM, attention and memory-bound kernels on one GPU of a profile."""

    profile: HardwareProfile
    precision: str
    attention_kernel: str | None = None
    fp8_recipe: str = "delayed"
    # tensor-core time of the job's slowest GPU over a typical one (simcluster/variability.py)
    slowdown: float = 1.0
    #: NVFP4BlockScaling's random Hadamard transform of activations and gradients (its default)
    nvfp4_hadamard: bool = True
    #: NVFP4BlockScaling's stochastic rounding of gradients (its default)
    nvfp4_stochastic_rounding: bool = True
    _gemm_curves: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    _sustained_curves: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    # seconds of the calibrated profile's timed shapes, by role (simcluster/gemm_roles.py)
    _timed: TimedGemms = field(default_factory=TimedGemms)
    # attention_spread's shares by (units, sequence, head dim): the plan asks for the same few
    _spread: dict[tuple[float, float, float], float] = field(default_factory=dict)
    #: the profile's measured MoE kernels (simcluster/moe_kernels.py), None without them
    moe: MoeKernels | None = field(default=None, init=False)

    @classmethod
    def of_training(
        cls, profile: HardwareProfile, training: TrainingSection, slowdown: float = 1.0
    ) -> KernelModel:
        """The kernel model of ``profile`` for the kernels ``training`` asks for: its precision,
        attention kernel, FP8 recipe and NVFP4 recipe options."""
        return cls(
            profile, training.precision, training.attention_kernel, training.fp8_recipe, slowdown,
            nvfp4_hadamard=training.nvfp4_hadamard,
            nvfp4_stochastic_rounding=training.nvfp4_stochastic_rounding,
        )

    def __post_init__(self) -> None:
        self.moe = of_profile(self.profile)
        self._attention_curves = self.profile.attention_curves(self.attention_kernel)
        # the curves are the stock GPU's TFLOP/s: a scenario's patched peak scales them
        act = self.act_dtype
        self._attention_scale = self._peak(act) / self._peak(act, self.profile.as_measured)
        # published curves timed at the boost clock run at the power-limited one in a step; a
        # calibrated profile's own kernel was timed on the user's GPUs as they run
        in_use = self.profile.attention_kernel_in_use(self.attention_kernel)
        measured = self._attention_curves is not None and in_use == MEASURED
        self._attention_sustained = 1.0 if measured else self.profile.efficiency.attention_sustained
        self._shapes = shape_table(self.profile.efficiency.gemm_shapes)
        rows = self.profile.measured.get("gemm", []) or []
        for row in rows:
            dtype = str(row["dtype"])
            flops = 2.0 * row["m"] * row["n"] * row["k"]
            # a fraction of the peak of the GPU it was timed on, carried to a patched peak
            peak = self._peak(dtype, self.profile.as_measured)
            self._gemm_curves.setdefault(dtype, []).append((flops, flops / row["time_s"] / peak))
        self._timed = TimedGemms.of_rows(rows)
        for dtype, rows in self._gemm_curves.items():
            self._gemm_curves[dtype] = median_curve(rows)

    # --- peaks ------------------------------------------------------------------------
    def _peak(self, dtype: str, profile: HardwareProfile | None = None) -> float:
        table = (profile or self.profile).gpu.peak_tflops
        dtype = PEAK_KEYS.get(dtype, dtype)
        if dtype in table:
            return table[dtype] * 1e12
        if dtype == "fp8" and "bf16" in table:
            return table["bf16"] * 1e12
        return table.get("fp32", next(iter(table.values()))) * 1e12

    @property
    def gemm_dtype(self) -> str:
        """The dtype of the training GEMMs (fp32 training uses TF32 tensor cores, as PyTorch allows)."""
        if self.precision == "fp32":
            return "tf32" if "tf32" in self.profile.gpu.peak_tflops else "fp32"
        if self.precision == "fp8" and "fp8" not in self.profile.gpu.peak_tflops:
            return "bf16"
        return self.precision

    @property
    def act_dtype(self) -> str:
        """Dtype of attention and activations (FP8 and NVFP4 recipes keep attention in bf16)."""
        return "bf16" if self.precision in QUANTISED else self.gemm_dtype

    # --- kernels ----------------------------------------------------------------------
    def _benchmark_curve(self, dtype: str) -> list[tuple[float, float]]:
        """The profile's GEMM size curve for ``dtype`` (FP8 and NVFP4 have their own where
        measured) at the rate the GPU sustains: the BF16 and FP8 curves' points times
        ``efficiency.sustained`` (``sustained_fp8`` for an FP8 curve measured otherwise), since a
        step at the power limit runs every GEMM at the throttled clock, not only the largest
        (the NVFP4 curves are built from sustained runs)."""
        curve = self._sustained_curves.get(dtype)
        if curve is None:
            eff = self.profile.efficiency
            if dtype == "nvfp4" and eff.gemm_fp4:
                curve = list(eff.gemm_fp4)
            else:
                fp8_curve = eff.gemm_fp8 if dtype == "fp8" else None
                kept = eff.sustained_fp8 if fp8_curve and eff.sustained_fp8 is not None else eff.sustained
                curve = [(flops, share * kept) for flops, share in fp8_curve or eff.gemm]
            self._sustained_curves[dtype] = curve
        return curve

    def gemm_efficiency(self, flops: float, dtype: str | None = None) -> float:
        """Share of the peak a GEMM of ``flops`` runs at by the size curve: linear in
        log(flops) between its points, but never so high that the GEMM would finish sooner
        than the curve's point below it. Between two points of about the same time (a kernel's
        launch-bound floor: Hopper's 1e6 and 3.4e7 FLOP both take ~5 us) the interpolated
        efficiency alone would run a GEMM up to 3.7 times faster than either."""
        dtype = dtype or self.gemm_dtype
        curve = self._gemm_curves.get(dtype) or self._benchmark_curve(dtype)
        eff = interp(curve, flops, log_x=True)
        i = bisect.bisect_right(curve, flops, key=lambda point: point[0])
        if i:
            f_lo, e_lo = curve[i - 1]
            eff = min(eff, e_lo * flops / f_lo)  # the time at the point below, at least
        return max(eff, 1e-4)

    def quantisation(self, m: float, n: float, count: float = 1) -> float:
        """Useful share of the tiles and waves a large GEMM occupies (NVIDIA, 'Matrix
        Multiplication Background User's Guide': tile and wave quantisation).

        Applies once the GEMM fills at least one wave of the largest tile; smaller GEMMs are in
        the size curve's ramp, where cuBLAS picks smaller tiles or split-K. cuBLAS also picks
        the tile (either orientation, or half of it) that quantises best. 1.0 without an SM count.
        """
        sms = self.profile.gpu.sm_count
        if not sms:
            return 1.0
        big_m, big_n = self.profile.efficiency.gemm_tile
        groups = max(1, round(count))
        if math.ceil(m / big_m) * math.ceil(n / big_n) * groups < sms:
            return 1.0
        best = 0.0
        for tm, tn in ((big_m, big_n), (big_n, big_m), (big_m, big_n // 2), (big_n // 2, big_m)):
            tiles_m, tiles_n = math.ceil(m / tm), math.ceil(n / tn)
            tile_util = (m * n) / (tiles_m * tm * tiles_n * tn)
            tiles = tiles_m * tiles_n * groups  # a grouped GEMM fills the waves together
            wave_util = tiles / (math.ceil(tiles / sms) * sms)
            best = max(best, tile_util * wave_util)
        return best

    @property
    def launch_s(self) -> float:
        """Per-kernel launch/drain gap on a stream."""
        return self.profile.efficiency.kernel_launch_us * 1e-6

    def gemm(
        self, m: float, n: float, k: float, dtype: str | None = None, count: float = 1, role: str | None = None
    ) -> float:
        """Seconds for ``count`` GEMMs of (m x k) @ (k x n) (one kernel; grouped when count > 1)
        playing ``role`` in the step (:mod:`simcluster.gemm_roles`); :meth:`gemm_breakdown`
        says how they come about."""
        if m <= 0 or n <= 0 or k <= 0 or count <= 0:
            return 0.0
        return self.gemm_breakdown(m, n, k, dtype, count, role).seconds

    def gemm_breakdown(
        self, m: float, n: float, k: float, dtype: str | None = None, count: float = 1, role: str | None = None
    ) -> GemmBreakdown:
        """The time of ``count`` GEMMs of (m x k) @ (k x n) and its parts.

        Efficiency = the size curve (GEMM microbenchmarks, or the calibrated table's median per
        FLOP count) times the profile's shape factor (``efficiency.gemm_shapes``: short-K GEMMs
        run slower than the median shape of their FLOPs); a benchmark curve is also capped by its
        plateau times tile/wave quantisation of this shape on the GPU's SMs, which a measured
        table already holds. A shape the calibrated table timed (``calibrate --scenario`` times
        the step's own, each in its role's operand layout) runs at its own time.
        """
        dtype = dtype or self.gemm_dtype
        flops = 2.0 * m * n * k
        timed = self._timed.seconds(dtype, m, n, k, role)
        curve = factor = 1.0
        cap = None
        if timed:
            # a scenario's patched peak speeds a timed shape up in proportion (1 unpatched)
            timed *= self._peak(dtype, self.profile.as_measured) / self._peak(dtype)
            eff = flops / timed / self._peak(dtype)
        else:
            curve = eff = self.gemm_efficiency(flops, dtype)
            if self._shapes is not None:
                factor = self._shapes.factor(m, n, k, dtype)
                eff *= factor
            if dtype not in self._gemm_curves:
                plateau = max(e for _, e in self._benchmark_curve(dtype))
                cap = plateau * self.quantisation(m, n, count)
                eff = min(eff, cap)
            if dtype == "fp8" and self.fp8_recipe == "block":
                # block-scaled kernels against the per-tensor ones the curve holds
                eff *= self.profile.efficiency.block_fp8_gemm
        # a timed shape takes its measured time, however far below the peak (a CPU's GEMMs)
        one = timed if timed else flops / (self._peak(dtype) * max(eff, 1e-4))
        compute = count * one * self.slowdown
        elt = DTYPE_BYTES.get(dtype, 2)
        out = 2 if dtype in QUANTISED else elt  # FP8 and NVFP4 GEMMs write 16-bit outputs
        memory = count * ((m * k + k * n) * elt + m * n * out) / self.hbm_bytes_per_s
        return GemmBreakdown(
            dtype=dtype, flops=count * flops, seconds=max(compute, memory) + self.launch_s,
            peak=self._peak(dtype), curve=curve, shape_factor=factor, cap=cap,
            timed=timed is not None, memory_bound=memory > compute,
        )  # fmt: skip

    @property
    def hbm_bytes_per_s(self) -> float:
        measured = self.profile.measured.get("memory") or []
        if measured:
            patched = self.profile.gpu.hbm_tbps / self.profile.as_measured.gpu.hbm_tbps
            return streaming_rate(measured) * patched
        return self.profile.hbm_bytes_per_s * self.profile.efficiency.hbm

    def memory(self, nbytes: float) -> float:
        """Seconds for a memory-bound kernel moving ``nbytes`` through HBM."""
        return nbytes / self.hbm_bytes_per_s + self.launch_s if nbytes > 0 else 0.0

    def quantise(
        self,
        elements: float,
        dtype: str | None = None,
        gradient: bool = False,
        splits: float = 1,
        weight: bool = False,
        columnwise: bool = True,
    ) -> float:
        """Seconds to quantise one 16-bit GEMM operand of ``elements`` values for an FP8 or
        NVFP4 GEMM; zero unless the GEMM runs in one of them. ``splits``: the operand is a
        grouped GEMM's, quantised per expert (:meth:`cast_kernels`: a launch gap per kernel).
        ``weight``: the operand is a linear's weight. ``columnwise`` False: only the rowwise
        copy the GEMM itself reads is written, as TransformerEngine quantises a frozen linear's
        input (``backward_needs_input = is_grad_enabled and weight.requires_grad``; the input
        quantizer's ``set_usage(rowwise=True, columnwise=backward_needs_input)``): no transpose,
        no Hadamard-transformed copy, one amax read (:data:`NVFP4_ROWWISE_QUANTISE_BYTES`); and
        as the op fuser's ``BasicLinear`` quantises a frozen linear's output gradient
        (``grad_output_quantizer.set_usage(columnwise=weight_requires_grad)``).

        NVFP4 (TransformerEngine's NVFP4BlockScaling): activations and gradients take
        :data:`NVFP4_QUANTISE_BYTES` per element, the amaxes, the rowwise cast and the
        Hadamard-transformed columnwise cast; a weight (2-D 16 x 16 blocks, never transformed),
        or any operand with the transform off (``nvfp4_hadamard``), takes
        :data:`NVFP4_PLAIN_QUANTISE_BYTES`. A ``gradient`` is rounded stochastically unless
        ``nvfp4_stochastic_rounding`` is off, which the measured cast kernel runs
        :data:`NVFP4_SR_SLOWDOWN` times slower.

        TransformerEngine casts each activation entering an FP8 GEMM in the forward, and each
        output gradient in the backward, with a fused cast-transpose kernel: it reads the 16-bit
        tensor and writes the FP8 copy plus an FP8 transposed copy, because Hopper's FP8 tensor
        cores take only K-major operands and the weight-gradient GEMM needs the transpose
        (TE docs, 'Using FP8 with Transformer Engine'; ``tex.fp8_cast_transpose_fused``):
        2 + 1 + 1 bytes per element through HBM. On datacenter Blackwell a per-tensor scale
        (delayed or current) needs no transpose: the GEMMs read the one FP8 copy in any layout
        and the quantizer writes only it (``Float8Quantizer`` / ``Float8CurrentScalingQuantizer``
        ``create_tensor``: a transpose ``columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported()``;
        :func:`non_tn_fp8_gemms`), 2 + 1 bytes; block scaling keeps its two copies everywhere,
        each scaled along its own direction (MXFP8 on Blackwell, 1 x 128 tiles on Hopper). A
        weight's cast is this kernel too, charged by ``parallelism/fp8_weights.py`` (once per
        step where TransformerEngine caches it). The scale: delayed scaling (TE's DelayedScaling)
        and block scaling (DeepSeek-V3 1x128 tiles, MXFP8) take it inside the cast kernel;
        current scaling (TE's Float8CurrentScaling) first reduces the tensor's amax, one more
        16-bit read (2 bytes per element), and turns it into the scale in a kernel of its own:
        three kernels, each with its launch gap (:data:`FP8_CAST_KERNELS`).
        """
        dtype = dtype or self.gemm_dtype
        if dtype not in QUANTISED or elements <= 0:
            return 0.0
        if dtype == "nvfp4":
            if not columnwise:
                nbytes = NVFP4_ROWWISE_QUANTISE_BYTES
            elif self.nvfp4_hadamard and not weight:
                nbytes = NVFP4_QUANTISE_BYTES
            else:
                nbytes = NVFP4_PLAIN_QUANTISE_BYTES
            slowdown = NVFP4_SR_SLOWDOWN if gradient and self.nvfp4_stochastic_rounding else 1.0
            return self.memory(nbytes * elements * slowdown)
        amax_pass = 2.0 if self.fp8_recipe == "current" else 0.0
        two_way = columnwise and keeps_fp8_transpose(self.fp8_recipe, self.profile.gpu.compute_capability)
        transpose = 1.0 if two_way else 0.0
        nbytes = (3.0 + transpose + amax_pass) * elements
        return nbytes / self.hbm_bytes_per_s + self.cast_kernels(splits, dtype) * self.launch_s

    def cast_kernels(self, splits: float = 1, dtype: str | None = None) -> float:
        """Kernels that quantise one FP8 GEMM operand split into ``splits`` parts (a grouped
        GEMM's per-expert inputs); 0 outside FP8 (NVFP4's cast is costed as one kernel).

        TransformerEngine's ``GroupedLinear`` quantises its input with ``tex.split_quantize``,
        which has one fused kernel for every split only under delayed scaling
        (``nvte_multi_cast_transpose``; transformer_engine/pytorch/csrc/extensions/cast.cpp,
        ``multi_tensor_quantize_impl``: "only have fused kernel for FP8 delayed scaling") and
        otherwise quantises split by split, each with its recipe's kernels
        (:data:`FP8_CAST_KERNELS`). The fused kernel writes transposes: where the GPU keeps none
        (:func:`non_tn_fp8_gemms`, datacenter Blackwell) the outputs have no column-wise data
        and delayed scaling too casts split by split (``fused_multi_quantize``'s fallback).
        """
        if (dtype or self.gemm_dtype) != "fp8":
            return 0.0
        per_split = FP8_CAST_KERNELS[self.fp8_recipe]
        fused = self.fp8_recipe == "delayed" and not non_tn_fp8_gemms(self.profile.gpu.compute_capability)
        return float(per_split if fused else per_split * splits)

    def attention_spread(self, units: float, seq: float, head_dim: float) -> float:
        """The published curves' rate share a call over ``units`` (batch x heads per GPU) pairs
        of ``seq`` query tokens keeps (``efficiency.attention_grid``,
        :mod:`simcluster.attention_grid`); 1 without the table or for a calibrated profile's own
        kernel, whose curves were timed at the user's shapes. The forward table's share is
        applied to the backward too (ASSUMPTION: its CTAs are (batch x head, 128-row key
        tile) pairs, as many as the forward's). :meth:`attention` asks only for calls whose
        queries attend over as many keys, the table's: a context-parallel ring's blocks give
        each CTA a different amount of work (cudnn-frontend's chunked prefill rows: 8 heads of
        256 queries over 128K keys, 16 CTAs, run at 80 TFLOP/s, but of 2,048 queries, 128 CTAs,
        at 632, the full rate), which a share measured at equal lengths does not describe; they
        keep the curve. A sliding window's query tiles each attend to about as many keys as the
        window, so its caller takes the share of an equal-length call of its queries
        (``attention_time.py``; before, windows kept the curve, and packed documents as long as
        the window, equal-length calls, ran slower than the window's whole sequence at a
        third fewer FLOPs: metamorphic seed 9945)."""
        grid = self.profile.efficiency.attention_grid
        if grid is None or self.profile.attention_kernel_in_use(self.attention_kernel) == MEASURED:
            return 1.0
        key = (units, seq, head_dim)
        share = self._spread.get(key)
        if share is None:
            share = self._spread[key] = grid.factor(units, seq, head_dim)
        return share

    def attention(
        self, batch: float, seq_q: float, seq_kv: float, heads: float, head_dim: float, v_dim: float,
        causal: bool, backward: bool,
    ) -> float:
        """Fused (flash) attention; forward FLOPs 2*b*h*sq*skv*(d + dv), x0.5 causal, x2.5 backward.

        Rate: the curve of the kernel in use at this head dimension and sequence length (the
        scenario's kernel, else a calibrated profile's measured one, else the profile's
        default), times the share :meth:`attention_spread` keeps for this call's (batch x
        heads) pairs; else the scalar efficiency.
        """
        flops = 2.0 * batch * heads * seq_q * seq_kv * (head_dim + v_dim)
        if causal:
            flops *= 0.5
        if backward:
            flops *= BWD_FLOPS_FACTOR  # dQ, dK, dV and the recomputed scores: 5 matmuls against 2
        if self._attention_curves is not None:
            d = (head_dim + v_dim) / 2
            rate = kernel_tflops(self._attention_curves, d, seq_kv, causal, backward) * 1e12
            rate *= self._attention_scale * self._attention_sustained
            if seq_q == seq_kv:  # the table's calls; other key ranges keep the curve (attention_spread)
                rate *= self.attention_spread(batch * heads, seq_q, d)
        else:
            eff = self.profile.efficiency.attention_bwd if backward else self.profile.efficiency.attention_fwd
            rate = self._peak(self.act_dtype) * eff
        return flops / rate * self.slowdown + self.launch_s
