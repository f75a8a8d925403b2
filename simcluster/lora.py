"""LoRA adapters on a frozen model (Hu et al. 2021, arXiv 2106.09685): their shapes per GPU.

A targeted linear y = x W (k x n, frozen) becomes y = x W + s · dropout(x) A B with A (k x r) and
B (r x n) the only trained weights. Under tensor parallelism each adapter is split as NeMo's
``ParallelLinearAdapter`` splits it beside its base linear: beside a column-parallel one (qkv,
fc1) A is column-parallel over its r outputs and B over the base's n outputs (r/t and n/t per
GPU); beside a row-parallel one (proj, fc2) A is row-parallel over the base's k inputs and B
column-parallel over its n outputs (k/t and n/t). Either way an adapter holds r (k + n) / t
weights per GPU. The frozen base weights take no weight gradient, gradient buffer, optimizer
state or data-parallel reduction; nor do the frozen embedding and LM head.

With tp > 1 each adapter adds the collectives of NeMo's ``ParallelLinearAdapter`` (whose own
linears run without sequence parallelism): beside a column-parallel base, A's r-wide output is
all-gathered and, backward, B's input gradient all-reduced (without sequence parallelism A's input
gradient too, over the whole hidden width; with it that partial sum rides on the base linear's
reduce-scatter: TransformerEngine's ``return_layernorm_output_gathered``, whose gather is then a
16-bit NCCL call; where the base linear's gather is a userbuffers overlap instead, the adapter
gathers its sequence shard itself and reduce-scatters its input gradient); beside a row-parallel
base, A's partial output is all-reduced, B's hidden-split output all-gathered whole and then cut
to the sequence shard (backward: the shard's gradient all-gathered, B's input gradient
all-reduced), or, with ``lora.a2a`` (``a2a_experimental``), moved by one all-to-all each way
(``parallelism/lora_blocks.py``). A frozen column-parallel linear also skips its backward
re-gather of the input under sequence parallelism: it has no weight gradient to read it, and
its input gradient's collective is exposed (no weight-gradient GEMM of its own to hide under;
TransformerEngine turns its bulk overlap off and waits right away) unless
``overlap.tp_comm_rs_dgrad`` runs it beside the input-gradient GEMM.
Not modelled: the first layer's input gradient, which autograd skips below a frozen embedding,
is still computed.
"""

from __future__ import annotations

from dataclasses import dataclass

from simcluster.model import ModelSpec
from simcluster.parallelism.linears import Gemm

#: each block's targets, in forward order
BLOCK_TARGETS = {"attn": ("qkv", "proj"), "mlp": ("fc1", "fc2")}
#: the block each target belongs to
BLOCK = {target: block for block, targets in BLOCK_TARGETS.items() for target in targets}
#: the targets in the order the backward reaches their gradients (the MLP's down projection
#: first, the fused QKV last)
BACKWARD_ORDER = ("fc2", "fc1", "proj", "qkv")
#: the linears whose input is split over the TP ranks (row-parallel)
ROW_PARALLEL = frozenset({"proj", "fc2"})


@dataclass(frozen=True)
class Adapters:
    """The LoRA adapters a run trains: their rank, the linears they sit beside, and the
    dropout probability on their input."""

    rank: int
    targets: tuple[str, ...]
    dropout: float = 0.0
    a2a: bool = False
    #: TransformerEngine's op fuser around each adapter (``lora.op_fuser``; NeMo: tp 1 only)
    op_fuser: bool = False


def base_widths(model: ModelSpec, target: str) -> tuple[float, float]:
    """(k, n): the whole (unsplit) input and output widths of the base linear ``target``."""
    h, d = model.hidden, model.d_head
    return {
        "qkv": (h, (model.heads + 2 * model.kv_heads) * d),
        "proj": (model.heads * d, h),
        "fc1": (h, model.up_width(model.ffn)),
        "fc2": (model.ffn, h),
    }[target]


def adapter_gemms(model: ModelSpec, adapters: Adapters, target: str, tp: int) -> list[Gemm]:
    """The two GEMMs of ``target``'s adapter on one GPU, A then B (see the module's split)."""
    k, n = base_widths(model, target)
    r = adapters.rank
    if target in ROW_PARALLEL:
        return [Gemm(k / tp, r), Gemm(r, n / tp)]
    return [Gemm(k, r / tp), Gemm(r, n / tp)]


def adapter_pairs(model: ModelSpec, adapters: Adapters, targets: tuple[str, ...], tp: int) -> list[list[Gemm]]:
    """The (A, B) GEMMs on one GPU of the adapters of ``targets`` that the run has."""
    return [adapter_gemms(model, adapters, t, tp) for t in targets if t in adapters.targets]


def layer_adapter_params(model: ModelSpec, adapters: Adapters, tp: int) -> float:
    """Trained parameters of one transformer layer on one GPU: r (k + n) / tp per adapter."""
    return sum(g.k * g.n for pair in adapter_pairs(model, adapters, adapters.targets, tp) for g in pair)


def adapter_widths(model: ModelSpec, adapters: Adapters, targets: tuple[str, ...], tp: int) -> tuple[float, float]:
    """Elements per token on one GPU of the inputs (each first GEMM's k: what the dropout
    reads and masks) and of the outputs (each second GEMM's n: what the scale and the add into
    the base output pass over) of the adapters of ``targets`` that the run has."""
    pairs = adapter_pairs(model, adapters, targets, tp)
    return sum(a.k for a, _ in pairs), sum(b.n for _, b in pairs)



@dataclass(frozen=True)
class FrozenInputs:
    """Bytes a layer's linears keep of their inputs for their weight gradients when trained
    (one microbatch, one GPU): what a frozen linear no longer keeps."""

    qkv: float
    proj: float
    fc1: float
    fc2: float


#: bytes per element of a dropout mask: PyTorch's ``native_dropout`` keeps a bool tensor (NeMo's
#: ``ParallelLinearAdapter``, an ``nn.Dropout``); TransformerEngine's fused dropout, which its op
#: fuser's ``Dropout`` runs on 16-bit inputs of a multiple of 16 elements, packs one bit per element
#: (``tex.dropout_fwd`` allocates numel / 8 bytes)
TORCH_DROPOUT_MASK_BYTES = 1.0
TE_FUSED_DROPOUT_MASK_BYTES = 1.0 / 8.0


def dropout_mask_bytes(adapters: Adapters) -> float:
    """Bytes per input element of the mask an adapter's dropout keeps (0 without dropout)."""
    if adapters.dropout <= 0:
        return 0.0
    return TE_FUSED_DROPOUT_MASK_BYTES if adapters.op_fuser else TORCH_DROPOUT_MASK_BYTES


def lora_kept_bytes(model: ModelSpec, adapters: Adapters, targets: tuple[str, ...], tp: int, rows: float, e: float) -> float:
    """Activation bytes one microbatch of ``rows`` tokens keeps on one GPU for the adapters of
    ``targets``: each adapter's input (``e`` bytes; with dropout the masked copy and its mask,
    :func:`dropout_mask_bytes`) and its r-wide intermediate x A."""
    mask = dropout_mask_bytes(adapters)
    return sum(rows * (a.k * (e + mask) + a.n * e) for a, _ in adapter_pairs(model, adapters, targets, tp))


def lora_activation_change(
    model: ModelSpec, adapters: Adapters, frozen: FrozenInputs, tp: int, rows: float, e: float, mlp_rerun: bool
) -> float:
    """How a LoRA layer's kept activations differ from a trained one's: the frozen linears keep
    no input of their own (TransformerEngine saves a linear's input only for a weight that needs
    a gradient) and the adapters keep theirs (:func:`lora_kept_bytes`). An MLP rerun from its
    input (selective ``mlp`` recomputation) keeps neither."""
    change = lora_kept_bytes(model, adapters, BLOCK_TARGETS["attn"], tp, rows, e) - frozen.qkv - frozen.proj
    if not mlp_rerun:
        change += lora_kept_bytes(model, adapters, BLOCK_TARGETS["mlp"], tp, rows, e) - frozen.fc1 - frozen.fc2
    return change
