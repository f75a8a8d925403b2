"""TransformerEngine userbuffers: how each TP collective overlaps its GEMM, and the SMs it takes.

With ``overlap.tp_comm`` and sequence parallelism, Megatron-Core, NeMo and Megatron-Bridge run
TransformerEngine's comm+GEMM overlaps (``te.initialize_ub``), one per linear and pass:

* ``ring_exchange`` (qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad: the all-gathers before a
  GEMM): the GEMM runs in ``tp`` slices while copy engines pass the slices round the ring;
  no SMs move data;
* ``pipeline`` (proj_fprop, fc2_fprop: the forward reduce-scatters): the GEMM runs in
  ``num_splits`` slices and userbuffers kernels of ``num_sm`` CTAs reduce slice i while
  slice i + 1 computes; the forward reduce-scatters may instead run as a ring exchange
  (the FP8 presets' ``RingExchangeOverlapCfg``), in ``tp`` slices, which ends with a kernel
  summing the partials it moved (:func:`simcluster.userbuffers_traffic.ring_rs_reduce_bytes`);
* ``bulk`` (qkv_dgrad, fc1_dgrad: the all-gather of the input the weight gradient needs;
  qkv_wgrad, fc1_wgrad: the reduce-scatter of the input gradient): one whole collective of
  ``num_sm`` CTAs beside one whole GEMM.

PyTorch's async TP (``torch.compile``'s micro-pipelining pass, torchtitan's
``enable_async_tensor_parallel``) is the preset ``pytorch-async-tp``: its fused ops pull or push
the slices with the copy engine (``torch/distributed/_symmetric_memory``:
``_pipelined_all_gather_and_consume``, ``_pipelined_produce_and_all2all``), so every fused gather
and reduce-scatter is a ring exchange in ``tp`` slices; but ``fuse_matmul_reduce_scatter``
(``torch/_inductor/fx_passes/micro_pipeline_tp.py``) only fuses a reduce-scatter whose input is
one matmul with no other user, and the backward's reduce-scatter of a column-parallel input
gradient reduces the sum of the q/k/v (w1/w3) input gradients (one all-gather feeds those
linears: torchtitan's ``PrepareModuleInput`` on the attention and feed-forward modules), so it
stays a blocking NCCL call (``nccl``).

``set_sm_margin`` launches the GEMM on ``sm_count - num_sm`` SMs for its whole length
(TransformerEngine ``comm_gemm_overlap.cpp``: ``_math_sms``); without it the GEMM has every SM
and the communication kernels take ``num_sm`` of them while they run (the engine's
interference rule, ``Comm.sms``). A configuration is a preset of :data:`PRESETS` or a mapping
from overlap name to its settings; names a mapping leaves out take TransformerEngine 2.x's
defaults, as ``initialize_ub`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from simcluster.errors import UserError, did_you_mean

if TYPE_CHECKING:
    from simcluster.layout import Layout
    from simcluster.scenario import OverlapSection

Method = Literal["ring_exchange", "pipeline", "bulk", "nccl"]

#: the overlaps whose GEMM consumes a gathered input (only a ring exchange)
RING_ONLY = ("qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad")
#: the forward reduce-scatters after the row-parallel GEMMs
FORWARD_RS = ("proj_fprop", "fc2_fprop")
#: the backward overlaps of the column-parallel linears
BULK = ("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")
NAMES = RING_ONLY + FORWARD_RS + BULK


@dataclass(frozen=True)
class UbOverlap:
    """One overlap's settings, as TransformerEngine's ``ub_cfgs`` entry names them."""

    method: Method
    num_sm: int
    set_sm_margin: bool
    num_splits: int = 4  # pipeline only (a ring exchange runs in tp slices)
    #: an FP8 buffer for a forward reduce-scatter in an FP8 run (``ub_cfgs`` ``fp8_buf``: its
    #: bytes, simcluster.tp_overlap_buffers; what it moves, userbuffers_traffic.scatters_fp8)
    fp8_buf: bool = False
    #: a forward reduce-scatter's GEMM as one cuBLAS atomic-counter kernel (``ub_cfgs``
    #: ``atomic_gemm``: TransformerEngine's ``atomic_gemm_overlap_rs``, ``nvte_cublas_atomic_gemm``
    #: with ``m_split = num_splits``, each slice's tiles counted as they finish and its
    #: reduce-scatter started on that count): the GEMM runs whole, the reduce-scatter in slices
    atomic_gemm: bool = False

    def gemm_factor(self, sm_count: int | None) -> float:
        """Time factor of the overlapped GEMM: launched on ``sm_count - num_sm`` SMs under
        ``set_sm_margin``, on all of them otherwise."""
        if not self.set_sm_margin or not sm_count or self.num_sm <= 0:
            return 1.0
        return sm_count / max(sm_count - self.num_sm, 1)

    @property
    def comm_sms(self) -> int:
        """SMs its communication kernels take from the GEMM while they run: none for a copy
        engine ring exchange or under a margin (the GEMM already left them)."""
        if self.method == "ring_exchange" or self.set_sm_margin:
            return 0
        return self.num_sm

    def slices(self, tp: int) -> int:
        """Kernels the GEMM is cut into: ``tp`` for a ring exchange, ``num_splits`` for a
        pipeline, one for a bulk overlap or a blocking NCCL call."""
        return {"ring_exchange": tp, "pipeline": self.num_splits, "bulk": 1, "nccl": 1}[self.method]

    def gemm_slices(self, tp: int) -> int:
        """Kernels the overlapped GEMM runs as: one for an atomic GEMM, else :meth:`slices`."""
        return 1 if self.atomic_gemm else self.slices(tp)

    @property
    def blocking(self) -> bool:
        """Not overlapped at all: a blocking NCCL collective after its GEMMs (``nccl``)."""
        return self.method == "nccl"


def _ring(margin: bool = False) -> UbOverlap:
    return UbOverlap("ring_exchange", 1, margin)


def _pipe(sms: int, margin: bool = True) -> UbOverlap:
    return UbOverlap("pipeline", sms, margin)


def _bulk(sms: int, margin: bool = False) -> UbOverlap:
    return UbOverlap("bulk", sms, margin)


def _preset(dgrad_qkv: int, wgrad_qkv: int, dgrad_fc1: int, wgrad_fc1: int,
            proj: UbOverlap, fc2: UbOverlap) -> dict[str, UbOverlap]:  # fmt: skip
    """A NeMo / Megatron-Bridge preset: rings on the gathers, bulk overlaps without a margin,
    and the two forward reduce-scatters as given."""
    out = {name: _ring() for name in RING_ONLY}
    out.update(qkv_dgrad=_bulk(dgrad_qkv), qkv_wgrad=_bulk(wgrad_qkv), fc1_dgrad=_bulk(dgrad_fc1))
    # their PipelineOverlapCfg's fp8_buf defaults to (False,), a truthy tuple that
    # initialize_ub reads as true: a pipelined forward reduce-scatter gets an FP8 buffer
    proj, fc2 = (replace(o, fp8_buf=o.method == "pipeline") for o in (proj, fc2))
    out.update(fc1_wgrad=_bulk(wgrad_fc1), proj_fprop=proj, fc2_fprop=fc2)
    return out


#: TransformerEngine >= 2.0 ``initialize_ub`` ``get_default_config``: ring exchange 1 SM without a
#: margin; pipeline (4 splits) and bulk 16 SMs with ``set_sm_margin = not ring_exchange``
TE2 = {name: _ring() for name in RING_ONLY} | {name: _pipe(16) for name in FORWARD_RS} | {
    name: _bulk(16, margin=True) for name in BULK
}
#: TransformerEngine 1.x ``initialize_ub`` (``add_ub`` defaults): 16 SMs, no margin anywhere
TE1 = {name: _ring() for name in RING_ONLY} | {name: _pipe(16, margin=False) for name in FORWARD_RS} | {
    name: _bulk(16) for name in BULK
}

#: PyTorch's async TP (see the module docstring): copy-engine rings for every fused
#: collective, the input-gradient reduce-scatters blocking; its backward gathers no input again
#: (the fused op's gathered A is saved: parallel.sp_regather, parallelism/saved_gather.py), so
#: the bulk entries only act under an explicit ``sp_regather: true``, then without SMs
PYTORCH_ASYNC_TP = {name: _ring() for name in RING_ONLY + FORWARD_RS} | {
    "qkv_dgrad": UbOverlap("bulk", 0, False), "fc1_dgrad": UbOverlap("bulk", 0, False),
    "qkv_wgrad": UbOverlap("nccl", 0, False), "fc1_wgrad": UbOverlap("nccl", 0, False),
}  # fmt: skip


def _lora_preset(proj: UbOverlap, fc2: UbOverlap) -> dict[str, UbOverlap]:
    """A NeMo LoRA preset: rings with a margin on the gathers, qkv_dgrad bulk on 2 SMs, fc1_dgrad
    the pipelined reduce-scatter buffer of ``overlap.tp_comm_rs_dgrad`` (16 SMs, 4 splits, a
    margin, an FP8 buffer), the wgrad names left to TransformerEngine's
    defaults (NeMo: ``None``), and the two forward reduce-scatters as given. NeMo's performance
    scripts pair them with ``tp_comm_overlap_disable_qkv``, ``tp_comm_overlap_rs_dgrad`` and
    ``tp_comm_bulk_dgrad`` off."""
    out = dict(TE2) | {name: _ring(True) for name in RING_ONLY}
    out.update(qkv_dgrad=_bulk(2), fc1_dgrad=replace(_pipe(16), fp8_buf=True), proj_fprop=proj, fc2_fprop=fc2)
    return out


_NEMO = "NeMo nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py"
_BRIDGE = "Megatron-Bridge src/megatron/bridge/training/comm_overlap.py"

#: name -> (where it was read, its overlaps). The NeMo 2 / Megatron-Bridge preset names are
#: theirs; ``@nemo-2.0`` marks the earlier FP8 H100 values (forward reduce-scatters pipelined
#: with FP8 buffers, NVIDIA/NeMo@0594a700) that later releases replaced by ring exchanges.
PRESETS: dict[str, tuple[str, dict[str, UbOverlap]]] = {
    "te-2": ("TransformerEngine >= 2.0 defaults (transformer_engine/pytorch/module/base.py "
             "initialize_ub get_default_config)", TE2),
    "te-1": ("TransformerEngine 1.x defaults (initialize_ub add_ub: num_sm 16, set_sm_margin 0; "
             "TE 2.0 made the margin the default for pipeline and bulk)", TE1),
    "pytorch-async-tp": ("PyTorch's async TP (torch/_inductor/fx_passes/micro_pipeline_tp.py, "
                         "torch/distributed/_symmetric_memory), as torchtitan turns it on", PYTORCH_ASYNC_TP),
    "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192": (
        f"{_NEMO}; {_BRIDGE} (Llama 3 70B on H100)", _preset(4, 24, 2, 4, _pipe(24), _pipe(16))),
    "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192": (
        f"{_NEMO}; {_BRIDGE} (Llama 3 70B on H100, FP8)", _preset(4, 24, 2, 4, _ring(True), _ring(True))),
    "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192@nemo-2.0": (
        f"{_NEMO} at NVIDIA/NeMo@0594a700", _preset(4, 24, 2, 4, _pipe(24), _pipe(16))),
    "userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192": (
        f"{_NEMO}; {_BRIDGE} (Llama 3.1 405B on H100)", _preset(2, 24, 2, 2, _pipe(24), _pipe(8))),
    "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192": (
        f"{_NEMO}; {_BRIDGE} (Llama 3.1 405B on H100, FP8)", _preset(2, 24, 2, 2, _ring(True), _ring(True))),
    "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192@nemo-2.0": (
        f"{_NEMO} at NVIDIA/NeMo@0594a700", _preset(2, 24, 2, 2, _pipe(24), _pipe(8))),
    "userbuffers_bf16_h100_h6144_tp2_mbs2_seqlen2048": (
        f"{_NEMO}; {_BRIDGE} (GPT-3 20B on H100)", _preset(8, 16, 4, 16, _pipe(16), _pipe(24))),
    "userbuffers_fp8_h100_h6144_tp2_mbs2_seqlen2048": (
        f"{_NEMO}; {_BRIDGE} (GPT-3 20B on H100, FP8)", _preset(8, 16, 4, 16, _pipe(16), _pipe(24))),
    "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048": (
        f"{_NEMO}; {_BRIDGE} (GPT-3 175B on H100)", _preset(4, 4, 2, 4, _pipe(24), _ring(True))),
    "userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048": (
        f"{_NEMO}; {_BRIDGE} (GPT-3 175B on H100, FP8)", _preset(4, 4, 2, 4, _ring(True), _ring(True))),
    "userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048@nemo-2.0": (
        f"{_NEMO} at NVIDIA/NeMo@0594a700", _preset(4, 4, 2, 4, _pipe(24), _ring(True))),
    "userbuffers_fp8_h100_h8192_tp2_mbs1_seqlen4096_lora": (
        f"{_NEMO} (Llama 3 70B LoRA on H100, FP8; scripts/performance/llm/finetune_llama3_70b.py)",
        _lora_preset(_ring(True), _ring(True))),
    "userbuffers_fp8_h100_h16384_tp4_mbs1_seqlen2048_lora": (
        f"{_NEMO} (Llama 3.1 405B LoRA on H100, FP8; scripts/performance/llm/finetune_llama31_405b.py; its rings' "
        "aggregate not modelled)", _lora_preset(replace(_pipe(32), fp8_buf=True), replace(_pipe(16), fp8_buf=True))),
    "userbuffers_bf16_b200_h8192_tp2_mbs1_seqlen8192": (
        f"{_NEMO}; {_BRIDGE} (Llama 3 70B on B200/GB200)", _preset(16, 24, 2, 4, _pipe(32), _pipe(16))),
    "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192": (
        f"{_NEMO}; {_BRIDGE} (Llama 3 70B on B200/GB200, FP8)", _preset(4, 24, 2, 4, _ring(True), _ring(True))),
    "userbuffers_bf16_b200_h16384_tp4_cp2_mbs1_seqlen8192": (
        f"{_NEMO}; {_BRIDGE} (Llama 3.1 405B on B200/GB200)", _preset(8, 24, 2, 2, _pipe(32), _pipe(8))),
    "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192": (
        f"{_NEMO}; {_BRIDGE} (Llama 3.1 405B on B200/GB200, FP8)", _preset(8, 32, 2, 8, _ring(True), _ring(True))),
    "userbuffers_bf16_b200_h12288_tp4_mbs1_seqlen2048": (
        f"{_NEMO}; {_BRIDGE} (GPT-3 175B on B200)", _preset(4, 16, 2, 8, _ring(True), _ring(True))),
    "userbuffers_fp8_b200_h12288_tp4_mbs1_seqlen2048": (
        f"{_NEMO}; {_BRIDGE} (GPT-3 175B on B200, FP8)", _preset(4, 16, 2, 8, _ring(True), _ring(True))),
    "userbuffers_bf16_b200_h6144_tp2_mbs1_seqlen4096": (
        f"{_NEMO}; {_BRIDGE} (Nemotron-4 15B on B200)", _preset(8, 32, 2, 8, _ring(True), _ring(True))),
    "userbuffers_bf16_b200_h18432_tp8_mbs1_seqlen4096": (
        f"{_NEMO}; {_BRIDGE} (Nemotron-4 340B on B200)", _preset(8, 32, 2, 8, _ring(True), _pipe(24))),
    "userbuffers_fp8_b200_h18432_tp8_mbs1_seqlen4096": (
        f"{_NEMO}; {_BRIDGE} (Nemotron-4 340B on B200, FP8)", _preset(8, 32, 2, 8, _ring(True), _ring(True))),
}

FIELD = "overlap.tp_comm_cfg"
_KEYS = {"method", "num_sm", "set_sm_margin", "num_splits", "fp8_buf", "atomic_gemm"}
#: the column-parallel input-gradient buffers: bulk (the re-gather of the input), or, as a ring
#: exchange or a pipeline, the reduce-scatter buffer of overlap.tp_comm_rs_dgrad
#: (``initialize_ub`` moves a non-bulk qkv_dgrad / fc1_dgrad to its reduce-scatter list)
DGRAD = ("qkv_dgrad", "fc1_dgrad")
_METHODS: dict[str, tuple[str, ...]] = (
    {name: ("ring_exchange",) for name in RING_ONLY}
    | {name: ("pipeline", "ring_exchange") for name in FORWARD_RS}
    | {name: ("bulk", "ring_exchange", "pipeline") for name in DGRAD}
)
#: a blocking NCCL collective where a linear runs without userbuffers
#: (overlap.tp_comm_disable_qkv / _fc1)
NCCL = UbOverlap("nccl", 0, False)


def tp_overlaps_run(overlap: OverlapSection, layout: Layout) -> tuple[bool, bool]:
    """(userbuffers, nanotron's async linears): whether each TP overlap runs in ``layout``.
    Both wrap the sequence-parallel all-gather and reduce-scatter, so both need tp > 1 and
    sequence parallelism (``overlap.tp_comm``, ``overlap.tp_async``); the layer builder and
    the inert-setting notes ask this one test."""
    sharded = layout.tp > 1 and layout.sequence_parallel
    return overlap.tp_comm and sharded, overlap.tp_async and sharded


def resolve(cfg: str | Mapping[str, Any] | None) -> dict[str, UbOverlap]:
    """Every overlap's settings: a preset by name, or a mapping over TransformerEngine 2.x's
    defaults (``None``: those defaults)."""
    if cfg is None:
        return dict(TE2)
    if isinstance(cfg, str):
        if cfg not in PRESETS:
            raise UserError(FIELD, f"unknown preset '{cfg}'{did_you_mean(cfg, PRESETS)}")
        return dict(PRESETS[cfg][1])
    out = dict(TE2)
    for name, entry in cfg.items():
        out[name] = _entry(name, entry)
    return out


def _entry(name: str, entry: Any) -> UbOverlap:
    where = f"{FIELD}.{name}"
    if name not in NAMES:
        raise UserError(FIELD, f"has no overlap '{name}'{did_you_mean(name, NAMES)}; TransformerEngine's are {', '.join(NAMES)}")
    if not isinstance(entry, Mapping):
        raise UserError(where, "must be a mapping such as {num_sm: 16, set_sm_margin: false}")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise UserError(where, f"unknown key '{unknown[0]}'; use {', '.join(sorted(_KEYS))}")
    default = TE2[name]
    method = entry.get("method", default.method)
    allowed = _METHODS.get(name, ("bulk",))
    if method not in allowed:
        raise UserError(f"{where}.method", f"'{method}' is not one TransformerEngine runs here; use {' or '.join(allowed)}")
    base = default if method == default.method else (_ring() if method == "ring_exchange" else _pipe(16))
    num_sm = entry.get("num_sm", base.num_sm)
    splits = entry.get("num_splits", base.num_splits)
    for key, value in (("num_sm", num_sm), ("num_splits", splits)):
        if not isinstance(value, int) or isinstance(value, bool) or value < (0 if key == "num_sm" else 1):
            raise UserError(f"{where}.{key}", f"must be a whole number >= {0 if key == 'num_sm' else 1}, got {value!r}")
    fp8_buf, atomic = _flag(entry, where, "fp8_buf"), _flag(entry, where, "atomic_gemm")
    if atomic and name not in FORWARD_RS:
        raise UserError(f"{where}.atomic_gemm", f"is modelled for the forward reduce-scatters only ({', '.join(FORWARD_RS)}); drop it here")
    # initialize_ub honours fp8_buf only for a pipelined reduce-scatter: proj/fc2_fprop, or a
    # qkv/fc1_dgrad moved to its reduce-scatter list as a pipeline
    fp8_buf = fp8_buf and (name in FORWARD_RS or method == "pipeline")
    return UbOverlap(method, num_sm, _flag(entry, where, "set_sm_margin", base.set_sm_margin), splits, fp8_buf, atomic)


def _flag(entry: Mapping[str, Any], where: str, key: str, default: bool = False) -> bool:
    """A true/false setting of one ``tp_comm_cfg`` entry."""
    flag = entry.get(key, default)
    if not isinstance(flag, bool):
        raise UserError(f"{where}.{key}", f"must be true or false, got {flag!r}")
    return flag


@dataclass(frozen=True)
class BlockOverlaps:
    """The overlaps of one block (attention: qkv and proj; MLP: fc1 and fc2) by role, each
    beside its GEMM: the column-parallel forward, the row-parallel forward, the row-parallel
    input gradient, the column-parallel input gradient and its weight gradient."""

    gather: UbOverlap  # forward all-gather of the input (qkv_fprop, fc1_fprop)
    scatter: UbOverlap  # forward reduce-scatter of the output (proj_fprop, fc2_fprop)
    grad_gather: UbOverlap  # backward all-gather of the output gradient (proj_dgrad, fc2_dgrad)
    input_gather: UbOverlap  # backward re-gather of the input for the wgrad (qkv_dgrad, fc1_dgrad)
    grad_scatter: UbOverlap  # backward reduce-scatter of the input gradient (qkv_wgrad, fc1_wgrad)
    #: overlap.tp_comm_rs_dgrad: the input gradient's reduce-scatter beside its own GEMM, in
    #: slices (qkv_dgrad, fc1_dgrad as a ring exchange or pipeline); the re-gather is then an
    #: asynchronous NCCL call and nothing runs beside the weight-gradient GEMMs
    rs_dgrad: UbOverlap | None = None


def column_linear(block: str) -> str:
    """The column-parallel linear that opens ``block`` (attn: qkv; mlp or moe: fc1)."""
    return "qkv" if block == "attn" else "fc1"


def async_tp(overlap: OverlapSection) -> bool:
    """Whether ``overlap.tp_comm_cfg`` is PyTorch's async TP (symmetric memory, not
    TransformerEngine's userbuffers: no shard copy into a buffer, no per-linear switches)."""
    return overlap.tp_comm_cfg == "pytorch-async-tp"


def switches_act(overlap: OverlapSection) -> bool:
    """Whether Megatron-Core's per-linear switches (``overlap.tp_comm_rs_dgrad``,
    ``tp_comm_disable_qkv`` / ``_fc1``) act on ``overlap.tp_comm_cfg``: TransformerEngine's
    userbuffers do, PyTorch's async TP has no such switches."""
    return not async_tp(overlap)


def disabled(overlap: OverlapSection, column: str) -> bool:
    """Whether Megatron-Core builds the column-parallel linear ``column`` (qkv or fc1) without
    its forward gather's and its rs_dgrad overlap (``tp_comm_overlap_disable_qkv`` / ``_fc1``:
    ``TELayerNormColumnParallelLinear`` passes ``ub_overlap_ag`` and ``ub_overlap_rs_dgrad``
    false; the bulk overlaps stay)."""
    return overlap.tp_comm_disable_qkv if column == "qkv" else overlap.tp_comm_disable_fc1


def block_overlaps(cfg: Mapping[str, UbOverlap], block: str, overlap: OverlapSection | None = None) -> BlockOverlaps:
    """``block`` = attn or mlp (an MoE block's TP collectives take the MLP's), with
    Megatron-Core's per-linear switches of ``overlap`` (none: every overlap of ``cfg`` runs)."""
    col, row = column_linear(block), "proj" if block == "attn" else "fc2"
    gather, rs_dgrad = cfg[f"{col}_fprop"], None
    if overlap is not None and disabled(overlap, col):
        gather = NCCL
    elif overlap is not None and overlap.tp_comm_rs_dgrad:
        rs_dgrad = cfg[f"{col}_dgrad"]
    return BlockOverlaps(
        gather, cfg[f"{row}_fprop"], cfg[f"{row}_dgrad"], cfg[f"{col}_dgrad"], cfg[f"{col}_wgrad"], rs_dgrad
    )


def reduce_scatter_buffer(name: str, over: UbOverlap) -> bool:
    """Whether ``initialize_ub`` builds overlap ``name`` as the input gradient's reduce-scatter
    buffer of ``overlap.tp_comm_rs_dgrad``: a qkv_dgrad / fc1_dgrad whose method is not bulk
    (it moves it to its reduce-scatter list; a bulk one is the re-gather's all-gather buffer)."""
    return name in DGRAD and over.method != "bulk"


def check_rs_dgrad(cfg: Mapping[str, UbOverlap], raw: str | Mapping[str, Any] | None, overlap: OverlapSection) -> None:
    """A reduce-scatter buffer exactly where ``overlap.tp_comm_rs_dgrad`` uses one: TransformerEngine
    runs the overlap on the linear's ``*_dgrad`` buffer, which ``initialize_ub`` builds for a
    reduce-scatter only when its method is not bulk (and then refuses a ``*_wgrad`` entry beside
    it); a bulk one is the re-gather's all-gather buffer."""
    for col in ("qkv", "fc1"):
        name = f"{col}_dgrad"
        bulk = not reduce_scatter_buffer(name, cfg[name])
        if overlap.tp_comm_rs_dgrad and not disabled(overlap, col) and bulk:
            raise UserError(f"{FIELD}.{name}.method", f"is bulk, an all-gather buffer: set ring_exchange or pipeline for overlap.tp_comm_rs_dgrad, or overlap.tp_comm_disable_{col}: true")
        if not bulk and not overlap.tp_comm_rs_dgrad:
            raise UserError(f"{FIELD}.{name}.method", f"{cfg[name].method} makes it the input gradient's reduce-scatter buffer, used only with overlap.tp_comm_rs_dgrad: true; set that or method bulk")
        if not bulk and isinstance(raw, Mapping) and f"{col}_wgrad" in raw:
            raise UserError(f"{FIELD}.{col}_wgrad", f"cannot be set beside a {cfg[name].method} {name} (TransformerEngine's initialize_ub refuses it); drop it")


def check_sms(cfg: Mapping[str, UbOverlap], sm_count: int | None, gpu: str) -> None:
    """Every overlap leaves its GEMM at least one SM."""
    for name, over in cfg.items():
        if sm_count and over.num_sm >= sm_count:
            raise UserError(f"{FIELD}.{name}.num_sm", f"{over.num_sm} must be below the {sm_count} SMs of a {gpu}")
