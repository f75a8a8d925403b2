"""Expert parallelism: router, dispatch all-to-all, grouped expert GEMMs, combine all-to-all.

Each rank routes its tokens' top_k copies to the experts' owners in its EP group (dispatch), the
owners run their local experts (grouped GEMM; the busiest expert sets the time, hence the
``moe.load_imbalance`` factor = max/mean tokens per expert, cut or padded to
``moe.capacity_factor`` with token dropping), and the results return (combine).
Backward mirrors both all-to-alls. Shared experts run on the local tokens.

With expert tensor parallelism (``parallel.etp`` > 1) each expert's matrices are split over an
ETP group, as Megatron-Core's ``MoEAlltoAllTokenDispatcher`` runs it: after the dispatch
all-to-all the ETP group all-gathers the tokens it received (each rank then runs every gathered
token through its 1/etp of the hidden width: fc1 column-parallel, fc2 row-parallel), and before
the combine all-to-all it reduce-scatters the partial outputs (``gather_from_sequence_parallel_
region`` / ``reduce_scatter_to_sequence_parallel_region`` on the expert TP group). Backward runs
the conjugates: all-gather of the output gradients, reduce-scatter of the input gradients.
"""

from __future__ import annotations

import math

from simcluster.activation_widths import act_bytes
from simcluster.compute import QUANTISED, KernelModel
from simcluster.ep_kernel_rates import (
    DISPATCH_SMS,
    MEASURED_TOKEN_BYTES,
    kernel_fraction,
    token_size_ratio,
)
from simcluster.fp8_store import fp8_swiglu_store
from simcluster.gemm_roles import PHASE_ROLES
from simcluster.hardware import HardwareProfile
from simcluster.layout import Layout
from simcluster.model import ModelSpec
from simcluster.moe_kernels import DEFAULT_GROUPED
from simcluster.parallelism import autocast_casts, fp8_weights, wgrad
from simcluster.parallelism.expert_holders import holders_per_token
from simcluster.parallelism.segments import Comm, Compute, Segment, Work
from simcluster.parallelism.shapes import Shapes
from simcluster.scenario import MoeSection, TrainingSection

# FP8 dispatch sends 1 byte per element plus one fp32 scale per 128 (DeepSeek-V3 Sec 3.3.2:
# fine-grained 1x128 tile quantisation of activations)
FP8_WIRE_BYTES = 1.0 + 4.0 / 128


def ep_nodes(lay: Layout) -> int:
    """NVLink domains the EP group of rank 0 spans: DeepEP's "nodes", the ranks its intranode
    kernels reach over NVLink. One node each on 8-GPU servers; on an NVL72 rack a domain holds
    18 four-GPU trays, and HybridEP (the backend that runs there: DeepEP's own normal kernels
    stop at 8 GPUs a node, deepseek-ai/DeepEP issue 392) takes the NVLink domain as its node
    (issue 596: its ``num_of_nodes`` "really means the number of NVL domains"; the domain's size
    is ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN``)."""
    return len({r // lay.domain_size for r in lay.group("ep", 0)})


def deepep_copies(model: ModelSpec, layout: Layout, moe: MoeSection) -> float:
    """Copies of a token DeepEP's normal dispatch sends, one per destination holding any of its
    experts (the receiver expands it to its local experts; the combine returns one row per
    destination likewise).

    Across nodes: one per distinct node (RDMA), which then forwards it to the experts' GPUs over
    NVLink (DeepSeek-V3 Sec 3.2.2, ``internode::dispatch``); that forwarding runs concurrently
    with the inter-node transfer and is not timed separately (an ASSUMPTION: NVLink is 3-4x the
    NIC). The distinct nodes are ``max_nodes_per_token`` when routing is node-limited (the gate
    fills its M nodes), else the nodes a token's experts lie on
    (:func:`~simcluster.parallelism.expert_holders.holders_per_token`: uniform routing, or the
    model's group-limited routing). Inside one node: one per distinct GPU
    (``Buffer.get_dispatch_layout`` returns ``num_tokens_per_rank`` and ``is_token_in_rank``,
    "whether a token be sent to a rank", which ``intranode::dispatch`` sends each token by), the
    GPUs of the EP group a token's experts lie on; top_k only when each GPU holds one expert.
    """
    nodes = ep_nodes(layout)
    if layout.ep <= 1:
        return float(model.top_k)
    if nodes > 1:
        if moe.max_nodes_per_token:
            return float(min(moe.max_nodes_per_token, model.top_k, nodes))
        return holders_per_token(model, nodes)
    return holders_per_token(model, layout.ep)


def _within_one_domain(layout: Layout, moe: MoeSection) -> bool:
    """Whether a DeepEP-family dispatch (deepep, hybridep) runs its intranode kernels: expert
    parallelism inside one NVLink domain."""
    return moe.per_destination and layout.ep > 1 and ep_nodes(layout) == 1


def deepep_link_factor(
    layout: Layout, moe: MoeSection, profile: HardwareProfile, token_bytes: float = MEASURED_TOKEN_BYTES
) -> float:
    """How much longer DeepEP's kernels hold the links inside one NVLink domain than an
    all-to-all that copies a rank's own share locally: ep / (ep - 1), as if the own share
    crossed NVLink too, and the measured kernel rate where the profile has one.

    DeepEP's README (H800, NVLink "~160 GB/s maximum", EP 8, the DeepSeek-V3 pretraining
    setting) measures its intranode dispatch at 153 GB/s and its combine at 158 GB/s of
    received bytes, a rank's own tokens included (``tests/test_intranode.py``:
    ``recv_x.numel()``): the SMs that copy each destination's rows copy the own rows the same
    way. An all-to-all that moves only the other ranks' share over links running at 160 GB/s
    would reach 183 GB/s by that measure; charging the own share at the link rate gives 160,
    within 4% of both. Across nodes the RDMA transfer sets the pace (1.0 there), as does NCCL's
    all-to-all everywhere (nccl-tests' bus bandwidth excludes the own share).

    Where the profile has measured the kernels' rate (``efficiency.deepep_nvlink``, by EP size)
    the links are held so that the received bytes move at that rate instead of at the links'
    ``efficiency.nvlink``: on NVLink 5 HybridEP's copy SMs, not the 900 GB/s links, set the
    pace (GB200, EP 16, HybridEP at 16 SMs: 473 GB/s dispatch, 474 combine, where the links give
    680), read at the kernels' SM count (``moe.dispatch_sms``; :mod:`simcluster.ep_kernel_rates`)
    and carried to tokens of ``token_bytes`` (a row of the all-to-all: hidden x bytes) where the
    profile has the kernels' fixed work per token (``efficiency.deepep_token_sm_ns``)."""
    if not _within_one_domain(layout, moe):
        return 1.0
    own = layout.ep / (layout.ep - 1)
    measured = _measured_rates(profile, moe.dispatcher)
    if not measured:
        return own
    rate = _kernel_rate(profile, layout, moe, dispatch_sms(moe), token_bytes)
    return own * profile.efficiency.nvlink / rate


def _kernel_rate(profile: HardwareProfile, layout: Layout, moe: MoeSection, sms: int, token_bytes: float) -> float:
    """The measured kernels' rate as a fraction of the links at this EP size on ``sms`` SMs, for
    rows of ``token_bytes`` (the profile's rate tables and per-token work; the caller has
    checked that the profile measured the dispatcher)."""
    measured = _measured_rates(profile, moe.dispatcher) or []
    fraction = kernel_fraction(
        measured, _measured_by_sms(profile, moe.dispatcher), DISPATCH_SMS[moe.dispatcher], layout.ep, sms
    )
    per_token = _token_work(profile, moe.dispatcher)
    return fraction * token_size_ratio(fraction * profile.node.nvlink_GBps, per_token, sms, token_bytes)


def dispatch_sms(moe: MoeSection) -> int:
    """SMs the DeepEP-family kernels run on: ``moe.dispatch_sms``, else Megatron-Core's default
    for the dispatcher; 0 for the alltoall dispatcher (NCCL's channels instead, whatever
    ``moe.dispatch_sms`` says: inert there)."""
    if not moe.per_destination:
        return 0
    return moe.dispatch_sms or DISPATCH_SMS[moe.dispatcher]


def faster_sm_count(
    profile: HardwareProfile, layout: Layout, moe: MoeSection, token_bytes: float = MEASURED_TOKEN_BYTES
) -> tuple[int, float] | None:
    """The measured SM count at which the DeepEP-family kernels inside one NVLink domain run
    fastest at this EP size for tokens of ``token_bytes``, with its rate over the current
    count's, where that gain is at least :data:`SM_HINT_GAIN`; the fewest SMs among equal
    rates. None elsewhere (across domains, unmeasured, or already there)."""
    measured = _measured_rates(profile, moe.dispatcher) if _within_one_domain(layout, moe) else None
    by_sms = _measured_by_sms(profile, moe.dispatcher) if measured else None
    if not measured or not by_sms:
        return None
    default = DISPATCH_SMS[moe.dispatcher]

    def rate(sms: int) -> float:
        return _kernel_rate(profile, layout, moe, sms, token_bytes)

    now = rate(dispatch_sms(moe))
    best = max(sorted({default, *by_sms}), key=rate)  # max keeps the first, the fewest SMs
    gain = rate(best) / now
    return (best, gain) if gain >= SM_HINT_GAIN else None


#: the kernel-rate gain from which ``run`` offers a larger dispatch SM count
SM_HINT_GAIN = 1.05


def _measured_rates(profile: HardwareProfile, dispatcher: str) -> list[tuple[int, float]] | None:
    """The profile's measured intranode rates of ``dispatcher``'s kernels at its default SM
    count, None unmeasured."""
    rates: list[tuple[int, float]] | None = getattr(profile.efficiency, f"{dispatcher}_nvlink")
    return rates


def _measured_by_sms(profile: HardwareProfile, dispatcher: str) -> dict[int, list[tuple[int, float]]] | None:
    """The same at the other SM counts the profile measured, None where it measured none."""
    tables: dict[int, list[tuple[int, float]]] | None = getattr(profile.efficiency, f"{dispatcher}_nvlink_by_sms")
    return tables


def _token_work(profile: HardwareProfile, dispatcher: str) -> dict[int, float] | None:
    """The kernels' fixed SM work a token by SM count, None where the profile has none."""
    work: dict[int, float] | None = getattr(profile.efficiency, f"{dispatcher}_token_sm_ns")
    return work


def hidden_row_bytes(model: ModelSpec, precision: str) -> float:
    """Bytes of a token's hidden state in the activations' dtype: a combine's row."""
    return model.hidden * act_bytes(precision)


def unmeasured_rate_note(
    profile: HardwareProfile, layout: Layout, moe: MoeSection, token_bytes: float = MEASURED_TOKEN_BYTES
) -> str | None:
    """A note where a DeepEP-family dispatch inside one NVLink domain runs at the links' rate
    because the profile has not measured its kernels (``efficiency.deepep_nvlink`` /
    ``hybridep_nvlink``): on NVLink 5 the measured kernels reach 0.49-0.62 of the links and
    DeepEP's on NVLink 4 (H200) 0.70, so the all-to-alls may be optimistic there; where
    ``moe.dispatch_sms`` asks for an SM count the profile has no rate at (held at the default's);
    and where rows of ``token_bytes`` run at the rate measured for another size because the
    profile has no per-token work (``*_token_sm_ns``). None elsewhere."""
    if not _within_one_domain(layout, moe):
        return None
    field = f"efficiency.{moe.dispatcher}_nvlink"
    if _measured_rates(profile, moe.dispatcher):
        notes = [_held_sms_note(profile, moe, field), _held_size_note(profile, moe, token_bytes)]
        return "; ".join(n for n in notes if n) or None
    return (
        f"moe.dispatcher {moe.dispatcher}: '{profile.name}' has no measured rate of its kernels "
        f"({field}), so its all-to-alls run at the links' (efficiency.nvlink "
        f"{profile.efficiency.nvlink:g}); on NVLink 5 the measured ones reach 0.49-0.62 of the links, "
        "DeepEP's on NVLink 4 0.70"
    )


def _held_sms_note(profile: HardwareProfile, moe: MoeSection, field: str) -> str | None:
    """The kernels on an SM count the profile has no rate at: held at the default's."""
    sms, default = dispatch_sms(moe), DISPATCH_SMS[moe.dispatcher]
    if sms == default or _measured_by_sms(profile, moe.dispatcher):
        return None
    return (
        f"moe.dispatch_sms {sms}: '{profile.name}' rates {moe.dispatcher}'s kernels at one SM count, "
        f"the default {default} ({field}; no {field}_by_sms), so they run at that rate on {sms}"
    )


#: how far a row may differ from the measured token before the held rate is noted
TOKEN_SIZE_NOTE = 0.1


def _held_size_note(profile: HardwareProfile, moe: MoeSection, token_bytes: float) -> str | None:
    """Rows of another size at the measured token's rate, the profile having no per-token work."""
    name = f"{moe.dispatcher}_token_sm_ns"
    if _token_work(profile, moe.dispatcher) is not None:
        return None
    if abs(token_bytes / MEASURED_TOKEN_BYTES - 1.0) <= TOKEN_SIZE_NOTE:
        return None
    return (
        f"{moe.dispatcher}'s rows are {token_bytes:,.0f} bytes where '{profile.name}' measured its kernels "
        f"with hidden-7,168 tokens ({MEASURED_TOKEN_BYTES:,} bytes in BF16), and with no efficiency.{name} they "
        "run at that rate; "
        "on Blackwell a 4,096-byte row moves at 0.47-0.65 of it"
    )


def copies_per_token(shapes: Shapes, moe: MoeSection) -> float:
    """Copies of a token one all-to-all sends: ``alltoall`` one per routed expert (top_k, as
    Megatron-Core's alltoall dispatcher permutes every copy before it), ``deepep`` one per
    destination (:func:`deepep_copies`)."""
    if not moe.per_destination:
        return float(shapes.model.top_k)
    return deepep_copies(shapes.model, shapes.layout, moe)


def row_bytes(shapes: Shapes, fp8: bool = False) -> float:
    """Bytes of one row of an all-to-all: a token's hidden state (FP8 with its scales on the wire)."""
    return shapes.model.hidden * (FP8_WIRE_BYTES if fp8 else shapes.elt)


def a2a_bytes(shapes: Shapes, moe: MoeSection, fp8: bool = False) -> float:
    """Send buffer of one all-to-all per rank: tokens x copies per token x hidden x bytes
    (with token dropping, the copies kept or the padded capacity: ``MoeSection.wire_share``)."""
    copies = copies_per_token(shapes, moe) * moe.wire_share
    return shapes.moe_tokens * copies * row_bytes(shapes, fp8)


def _routed_load(shapes: Shapes, load: float) -> tuple[float, float]:
    """(tokens of the busiest local expert, local experts) for one microbatch on this rank:
    the EP group's routed copies spread over the experts, the busiest at ``load`` times the
    mean share (``MoeSection.expert_load``); with
    expert TP every rank of the ETP group runs all of its group's tokens (on 1/etp of the width)."""
    m = shapes.model
    lay = shapes.layout
    routed_tokens = shapes.moe_tokens * m.top_k * lay.ep * lay.etp  # received, then gathered
    return routed_tokens / m.experts * load, m.experts / lay.ep


def _widths(shapes: Shapes) -> tuple[float, float]:
    """(fc1 output width, fc2 input width) of one expert on this rank: its 1/etp share."""
    m = shapes.model
    ffn = m.expert_ffn / shapes.layout.etp
    return m.up_width(ffn), ffn


def expert_seconds(shapes: Shapes, km: KernelModel, moe: MoeSection, phase: str, grouped: str = DEFAULT_GROUPED) -> float:
    """Seconds of :func:`expert_work`."""
    return expert_work(shapes, km, moe, phase, grouped).total


def expert_work(shapes: Shapes, km: KernelModel, moe: MoeSection, phase: str, grouped: str = DEFAULT_GROUPED) -> Work:
    """Grouped expert GEMMs of this rank for one microbatch (forward, dgrad or wgrad).

    ``grouped`` names the grouped-GEMM implementation the framework runs (``loop`` or
    ``grouped_mm``, :data:`~simcluster.moe_kernels.GROUPED_BY_FRAMEWORK`): where the profile
    measured it (``measured.moe.grouped_gemm``), the local experts' GEMMs take the per-GEMM
    model's time of each, times the measured ratio of a grouped call to its GEMMs timed singly
    at the mean tokens per expert (the busiest expert still sets each GEMM's rows).

    In FP8 each GEMM's 16-bit operand is quantised as for dense layers (``quantise``): the
    forward casts fc1's and fc2's inputs, the backward their output gradients, counted per
    routed copy (with ``moe.fp8_dispatch`` the sender casts once per token instead: an upper
    bound there), split by local expert as ``GroupedLinear`` quantises them
    (``KernelModel.cast_kernels``: one fused kernel under delayed scaling, the recipe's kernels
    per expert otherwise).
    """
    m = shapes.model
    per_expert, local_experts = _routed_load(shapes, moe.expert_load)
    up, ffn = _widths(shapes)
    h = m.hidden
    rows = per_expert * local_experts

    mean_tokens = _routed_load(shapes, 1.0)[0]
    ratio = km.moe.grouped_ratio(grouped, mean_tokens, local_experts, up, h, km.gemm_dtype) if km.moe else None

    def gemm(m_: float, n_: float, k_: float) -> float:
        role = PHASE_ROLES[phase]
        if ratio is not None and m_ > 0 and n_ > 0 and k_ > 0:
            return ratio * local_experts * km.gemm(m_, n_, k_, role=role)
        return km.gemm(m_, n_, k_, count=local_experts, role=role)

    def cast(elements: float, gradient: bool = False) -> float:
        return km.quantise(elements, gradient=gradient, splits=local_experts)

    if phase == "F":
        t = gemm(per_expert, up, h) + gemm(per_expert, h, ffn)
        casts = cast(rows * h) + cast(rows * ffn) + padding_seconds(shapes, km, moe, rows)
        # GroupedLinear quantises each local expert's fc1 and fc2 weight on its own
        weights = local_experts * fp8_weights.forward_cast_seconds(km, shapes.training, shapes.layout, [h * up, ffn * h])
        act = activation_seconds(shapes, km, moe.expert_load) + fp8_store_seconds(shapes, km, moe.expert_load)
        return Work.of(gemm=t, memory=casts + weights + act)
    if phase == "B":
        t = gemm(per_expert, h, up) + gemm(per_expert, ffn, h)
        casts = cast(rows * h, gradient=True) + cast(rows * up, gradient=True) + padding_seconds(shapes, km, moe, rows)
        # Megatron FSDP's gathered FP8 expert weights, transposed for the input gradients
        weights = local_experts * fp8_weights.backward_transpose_seconds(
            km, shapes.training, shapes.layout, [h * up, ffn * h]
        )
        act = 2 * activation_seconds(shapes, km, moe.expert_load) + fp8_store_seconds(shapes, km, moe.expert_load)
        return Work.of(gemm=t, memory=casts + weights + act)
    wgrad_t = gemm(h, up, per_expert) + gemm(ffn, h, per_expert)
    return Work.of(gemm=wgrad_t)


def quantisation_alignment(training: TrainingSection, profile: HardwareProfile) -> int:
    """Rows TransformerEngine's ``Fp8Padding`` rounds each local expert's split up to, as
    Megatron-Core sizes it (``moe_utils.get_align_size_for_quantization``): 16 under FP8
    (``fp8_utils.get_fp8_align_size``; 32 for MXFP8, the block recipe on Blackwell and later)
    and 128 under NVFP4 (``fp4_utils.get_fp4_align_size`` on Megatron-LM main; its docstring
    derives 32 from TMA's 16-byte rule and pads to 128 for the grouped Hadamard quantise)."""
    if training.precision == "nvfp4":
        return 128
    block = training.fp8_recipe == "block"
    blackwell = (profile.gpu.compute_capability or 0.0) >= 10.0
    return 32 if block and blackwell else 16


def padded_expert_rows(moe_tokens: float, model: ModelSpec, layout: Layout, moe: MoeSection) -> int:
    """Rows each local expert runs when its input is padded to capacity, as Megatron-Core
    counts them: ``moe_utils.get_capacity`` ceil(tokens x top_k / experts x capacity_factor)
    per source rank (``topk_softmax_with_capacity`` passes its tokens times topk), received
    from each of the EP group's ranks and gathered over the expert-TP group (the alltoall
    dispatcher's drop-and-pad ``num_tokens_per_local_expert``: capacity x tp_size x ep_size).
    ``moe_tokens``: the tokens one rank routes (``Shapes.moe_tokens``)."""
    assert moe.capacity_factor is not None  # padded implies a capacity factor
    capacity = math.ceil(round(moe_tokens) * model.top_k / model.experts * moe.capacity_factor)
    return capacity * layout.ep * layout.etp


def padding_seconds(shapes: Shapes, km: KernelModel, moe: MoeSection, rows: float) -> float:
    """Copies that align each local expert's rows for its quantised GEMMs, one phase's worth.

    Megatron-Core's ``TEGroupedMLP.forward`` (FP8 and FP4) runs the experts' input and their
    routing probabilities through TransformerEngine's ``Fp8Padding`` before fc1 and the fc2
    output through ``Fp8Unpadding``: every split is rounded up to the recipe's alignment (16
    rows, 32 for MXFP8, 128 for NVFP4: :func:`quantisation_alignment`). ``Fp8Padding`` returns
    its input untouched when every split is aligned already, which a drop-and-pad capacity is
    when it is a multiple of that (:func:`padded_expert_rows`: Megatron-Core rounds the capacity
    up to a whole row, not to the alignment, so a capacity factor of 1.1 on 1,024 rows leaves
    1,127 per source rank and the copy runs); dropless (and dropping without padding) the
    per-expert counts are arbitrary, so it copies the whole tensor
    (``tex.fused_multi_row_padding``, read and write), and the backward runs the conjugate
    copies (``fused_multi_row_unpadding``). Per phase: the hidden-wide input and output, and
    the fp32 probabilities.

    Whichever dispatcher runs: in every Megatron-Core release from core_r0.12.0 to 0.16.1
    (the NeMo 25.04 to 26.02 containers) ``TEGroupedMLP.forward`` pads whenever
    ``config.fp8`` (0.16: or ``config.fp4``) is set (0.12 pads the input only, from 0.13 the
    probabilities too), and the flex dispatcher's DeepEP
    backend calls ``Buffer.dispatch`` without ``expert_alignment`` (fused_a2a.py
    ``FusedDispatch.forward``), whose default of 1 leaves the received counts unaligned;
    NeMo AutoModel's TE experts pad behind DeepEP the same way. Nothing is copied where the
    counts arrive aligned (``moe.aligned_dispatch``): DeepEP asked for ``expert_alignment``
    (DeepSeek's stack, whose DeepGEMM grouped GEMM wants aligned segments), Megatron-Core
    0.16's hybridep backend (``pad_multiple``) or ``moe_router_padding_for_fp8`` (0.13+,
    padding the routing map). ASSUMPTION there: the at most alignment - 1 extra rows per
    expert those run are not timed.
    """
    if shapes.training.precision not in QUANTISED or moe.aligned_dispatch or rows <= 0:
        return 0.0
    if moe.padded:
        rows_per_expert = padded_expert_rows(shapes.moe_tokens, shapes.model, shapes.layout, moe)
        if rows_per_expert % quantisation_alignment(shapes.training, km.profile) == 0:
            return 0.0
    hidden = rows * shapes.model.hidden * shapes.elt
    return 2 * km.memory(2 * hidden) + km.memory(2 * rows * 4)


def activation_seconds(shapes: Shapes, km: KernelModel, load: float) -> float:
    """The experts' activation (SwiGLU/GeLU) forward on this rank: reads the up-projection
    output, writes the down-projection input (also what ``moe_act`` recomputation reruns)."""
    per_expert, local_experts = _routed_load(shapes, load)
    up, ffn = _widths(shapes)
    return km.memory(per_expert * local_experts * (up + ffn) * shapes.elt)


def fp8_store_seconds(shapes: Shapes, km: KernelModel, load: float) -> float:
    """The experts' SwiGLU input cast to FP8 after fc1 (forward) or back before the SwiGLU
    gradient (backward), once per pass, under ``training.activation_fp8_store``
    (:mod:`simcluster.fp8_store`); zero without it."""
    if not fp8_swiglu_store(shapes.model, shapes.training):
        return 0.0
    per_expert, local_experts = _routed_load(shapes, load)
    up, _ = _widths(shapes)
    return km.memory(per_expert * local_experts * up * (shapes.elt + 1.0))


def chunk_sort_seconds(shapes: Shapes, km: KernelModel, moe: MoeSection, phase: str) -> float:
    """Megatron-Core's "Permutation 2" and its inverse, one phase's worth: the alltoall
    dispatcher receives its tokens ordered by source rank (and, after the expert-TP all-gather,
    by ETP rank), then expert, so with more than one local expert it copies them into expert
    order before the grouped GEMM and back into rank order after it
    (``MoEAlltoAllTokenDispatcher.dispatch_postprocess``: ``sort_chunks_by_idxs`` dropless,
    ``.view(tp*ep, local_experts, capacity, h).transpose(0, 1).contiguous()`` with drop-and-pad;
    ``combine_preprocess``: the unsort). Each is a read and a write of every received row; the
    backward runs the two conjugate copies. None with one local expert (the README's "if EP
    size increased to the number of expert, the local token permutation ... are omitted"), nor
    behind DeepEP here (its own post-dispatch permute is not timed)."""
    m = shapes.model
    lay = shapes.layout
    if phase == "W" or moe.dispatcher != "alltoall" or m.experts // lay.ep <= 1 or lay.expert_shard <= 1:
        return 0.0
    rows = shapes.moe_tokens * m.top_k * moe.wire_share * lay.etp
    return 2 * km.memory(2 * rows * m.hidden * shapes.elt)


def _weights(shapes: Shapes) -> tuple[float, float]:
    """(routed, dense) weight elements of a MoE block on this GPU: its local experts', and its
    shared experts' and router's."""
    m = shapes.model
    up = m.up_width(m.expert_ffn)
    per_expert = m.hidden * (up + m.expert_ffn)
    lay = shapes.layout
    routed = per_expert * m.experts / lay.expert_shard
    # shared experts and the router (and Qwen2-MoE's shared-expert gate) are tensor-parallel
    # like a dense MLP (memory.py's count)
    gate = m.hidden if m.shared_expert_gate else 0
    dense = (per_expert * m.shared_experts + m.hidden * m.experts + gate) / lay.tp
    return routed, dense


def _shared_weights(shapes: Shapes) -> list[float]:
    """Elements of the shared experts' fc1 and fc2 weights on this GPU (one MLP of their
    summed width, tensor-parallel, as :func:`shared_expert_gemms` runs it): the FP8 linears of
    a MoE block beside the routed experts; none without shared experts."""
    m = shapes.model
    if not m.shared_experts:
        return []
    width, t = m.expert_ffn * m.shared_experts, shapes.layout.tp
    return [m.hidden * m.up_width(width) / t, width * m.hidden / t]


def _accumulate(shapes: Shapes, km: KernelModel) -> float:
    """Adding the local experts', shared experts' and router's gradients into fp32 main grads."""
    routed, dense = _weights(shapes)
    lay = shapes.layout
    # routed experts' gradients are sharded over the expert-data-parallel group (its replica's
    # part under hybrid sharding), not dp x cp
    return wgrad.accumulation_seconds(
        km, shapes.training, lay, routed, shard_group=lay.expert_zero_group
    ) + wgrad.accumulation_seconds(km, shapes.training, lay, dense)


def router_gemm_dtype(km: KernelModel) -> str:
    """The dtype the router's gating GEMM (tokens x hidden @ hidden x experts) runs in: the
    16-bit activation dtype even where the experts' and the dense layers' GEMMs are FP8 or
    NVFP4, since no framework quantises it. Megatron-Core's ``TopKRouter.gating`` is a plain
    matmul (``moe_utils.router_gating_linear``), not a TransformerEngine module, so
    ``fp8_autocast`` does not reach it; torchtitan's float8 configs for DeepSeek-V3 leave
    ``router.gate`` out (``filter_fqns``); DeepSeek-V3 (arXiv 2412.19437 Sec. 3.3.1) keeps "MoE
    gating modules" in BF16 or FP32 under its FP8 framework. ``moe.router_dtype: fp32`` keeps
    this forward dtype and changes the backward (:func:`router_gemm_seconds`)."""
    return km.act_dtype


def fp32_gemm_dtype(km: KernelModel) -> str:
    """The dtype an FP32 x FP32 GEMM issued through TransformerEngine runs at: TF32 tensor
    cores (``cublaslt_gemm.cu``: "Use TF32 only for pure FP32 GEMM",
    ``CUBLAS_COMPUTE_32F_FAST_TF32``), FP32 on a profile without a TF32 peak."""
    return "tf32" if "tf32" in km.profile.gpu.peak_tflops else "fp32"


def router_gemm_seconds(shapes: Shapes, km: KernelModel, moe: MoeSection, phase: str) -> float:
    """The router's gating GEMM in ``phase``: the logits forward, the input gradient in B,
    the weight gradient in W.

    Unset ``moe.router_dtype``: all three in the 16-bit activation dtype
    (:func:`router_gemm_dtype`). ``fp32`` (Megatron-Core's ``--moe-router-dtype fp32``, read
    from ``moe_utils.RouterGatingLinearFunction``): the forward calls TransformerEngine's
    ``general_gemm(weight, inp, float32)`` on the 16-bit input and weight, a 16-bit GEMM that
    writes FP32 logits; the backward casts the weight (and, for the weight gradient, the
    saved input) to FP32 and multiplies them with the FP32 logit gradient in two FP32 GEMMs
    (:func:`fp32_gemm_dtype`: TF32), then casts the input gradient back to 16 bits. The casts
    are memory-bound passes (read one width, write the other). Without TransformerEngine
    (and in FP64) Megatron-Core runs ``torch.mm`` on FP32 copies instead: not modelled; nor
    core 0.12's unpermute in the router dtype (its CHANGELOG: "FP32/FP64 routing and
    unpermutation"; from 0.13 the probabilities multiply in the experts' activation and the
    unpermute stays 16-bit)."""
    m = shapes.model
    tokens, h, experts = shapes.moe_tokens, m.hidden, m.experts
    act = router_gemm_dtype(km)
    fp32 = moe.router_dtype == "fp32"
    if phase == "F":
        return km.gemm(tokens, experts, h, dtype=act, role="fwd")
    if not fp32:
        if phase == "W":
            return km.gemm(h, experts, tokens, dtype=act, role="wgrad")
        return km.gemm(tokens, h, experts, dtype=act, role="dgrad")
    wide = fp32_gemm_dtype(km)
    elt = shapes.elt
    weight_cast = km.memory(experts * h * (elt + 4))  # weight.to(float32)
    if phase == "W":
        input_cast = km.memory(tokens * h * (elt + 4))  # the saved input .to(float32)
        return weight_cast + input_cast + km.gemm(h, experts, tokens, dtype=wide, role="wgrad")
    grad_cast = km.memory(tokens * h * (4 + elt))  # the input gradient back to 16 bits
    return weight_cast + km.gemm(tokens, h, experts, dtype=wide, role="dgrad") + grad_cast


def _shared_gate_seconds(shapes: Shapes, km: KernelModel, phase: str) -> float:
    """Qwen2-MoE's shared-expert gate (``model.shared_expert_gate``: transformers'
    Qwen2MoeSparseMoeBlock, ``sigmoid(shared_expert_gate(x)) * shared_expert(x)``): a dot
    product of one h-wide row per token, memory-bound (it reads the block's input once), and
    the scaling of the shared experts' output (a read and a write); the backward twice the
    forward's bytes, as the other memory-bound work (elementwise.py)."""
    m = shapes.model
    if not m.shared_expert_gate or phase == "W":
        return 0.0
    forward = 3 * shapes.moe_tokens * m.hidden * shapes.elt
    return km.memory(forward * (2 if phase == "B" else 1))


def shared_expert_gemms(shapes: Shapes, km: KernelModel, phase: str) -> tuple[float, float]:
    """The shared experts' GEMMs in ``phase`` as (under the phase's first all-to-all, under
    its second), the order Megatron-Core's overlap issues them: forward fc1 then fc2, the
    input gradients fc2's then fc1's; W (both weight gradients) all first. (0, 0) without
    shared experts."""
    m = shapes.model
    if not m.shared_experts:
        return 0.0, 0.0
    tokens, h = shapes.moe_tokens, m.hidden
    width = m.expert_ffn * m.shared_experts
    up = m.up_width(width)
    if phase == "W":
        return km.gemm(h, up, tokens, role="wgrad") + km.gemm(width, h, tokens, role="wgrad"), 0.0
    if phase == "B":
        return km.gemm(tokens, width, h, role="dgrad"), km.gemm(tokens, h, up, role="dgrad")
    return km.gemm(tokens, up, h, role="fwd"), km.gemm(tokens, h, width, role="fwd")


def overlaps_shared_experts(shapes: Shapes, moe: MoeSection, ep_pairs: bool = False) -> bool:
    """Whether the shared experts run under the expert-parallel all-to-alls
    (``moe.shared_expert_overlap``): Megatron-Core's ``SharedExpertMLP`` puts them on a side
    stream (``shared_experts.py``: ``pre_forward_comm``, ``linear_fc1_forward_and_act``,
    ``linear_fc2_forward``, ``post_forward_comm``, ``get_output``), which the alltoall
    dispatcher calls after issuing each all-to-all (``token_dispatcher.py``
    ``dispatch_postprocess`` and ``combine_postprocess``). Needs shared experts and an
    all-to-all to hide under (ep > 1); not under ``overlap.ep_comm``'s F&B pairs
    (``ep_pairs``), whose other op fills the all-to-alls already and whose turns pass at the
    blocking all-to-alls (engine/worker.py ``_turn_points``): there the shared experts stay
    in the op's own compute."""
    return (
        moe.shared_expert_overlap and bool(shapes.model.shared_experts) and shapes.layout.ep > 1 and not ep_pairs
    )


def _block_weight_casts(shapes: Shapes, km: KernelModel, phase: str) -> float:
    """Seconds the block's weight casts take in ``phase``, charged with the router: forward,
    torch.autocast's casts of its fp32 weights (training.autocast) and the shared experts' FP8
    quantisation; backward, the shared experts' FP8 weights transposed as Megatron FSDP gathers
    them (parallelism/fp8_weights.py)."""
    training, layout = shapes.training, shapes.layout
    if phase == "F":
        return autocast_casts.forward_cast_seconds(
            km, training, layout, list(_weights(shapes))
        ) + fp8_weights.forward_cast_seconds(km, training, layout, _shared_weights(shapes))
    if phase == "B":
        return fp8_weights.backward_transpose_seconds(km, training, layout, _shared_weights(shapes))
    return 0.0


def moe_block(
    shapes: Shapes, km: KernelModel, moe: MoeSection, phase: str, layer: int, grouped: str = DEFAULT_GROUPED,
    ep_pairs: bool = False,
) -> list[Segment]:
    """Segments of one MoE MLP (after the attention block) for phase F, B or W.

    A profile's measured MoE kernels (``measured.moe``, simcluster/moe_kernels.py) time the
    router's softmax and top-k, the permute (a gather: forward before the dispatch, backward
    the unpermute's gradient) and the unpermute (a scatter-add: forward after the combine,
    backward the permute's gradient), the counts' read-back, and the all-to-alls' unevenness
    (:meth:`~simcluster.moe_kernels.MoeKernels.all_to_all_ratio`); the router's softmax and
    top-k backward is charged as its forward (an ASSUMPTION: softmax backward reads and writes
    as much), its gating GEMM's gradients by :func:`router_gemm_seconds`.

    With ``moe.shared_expert_overlap`` (:func:`overlaps_shared_experts`) each all-to-all is
    issued as an overlapped collective with the shared experts' GEMMs of
    :func:`shared_expert_gemms` as the compute under it (forward: fc1 and the gate under the
    dispatch, fc2 under the combine; backward: the input gradients, fc2's under the combine's
    gradient, fc1's under the dispatch's, as autograd runs a backward op on its forward op's
    stream and ``set_tensor_grad_fn_sequence_sr`` schedules them first); the expert GEMMs
    wait for the all-to-all as before. The weight gradients stay where they were.
    """
    m = shapes.model
    tokens = shapes.moe_tokens
    h = m.hidden
    routed = expert_work(shapes, km, moe, phase, grouped)
    shared_first, shared_second = shared_expert_gemms(shapes, km, phase)
    shared = shared_first + shared_second
    # the router's gating GEMM stays 16-bit under FP8/NVFP4 training (router_gemm_dtype); its
    # gradients run in FP32 with moe.router_dtype fp32 (router_gemm_seconds)
    gating = router_gemm_seconds(shapes, km, moe, phase)
    if phase == "W":
        extra = Work.of(gemm=shared + gating, grad_accum=_accumulate(shapes, km))
        return [Compute.of("experts", routed + extra, layer)]
    # router: logits GEMM, then softmax / top-k over fp32 scores (memory-bound)
    timed_router = km.moe.router_seconds(tokens, m.experts, m.top_k) if km.moe else None
    scores = km.memory(tokens * m.experts * 4 * 3) if timed_router is None else timed_router
    router = Work.of(gemm=gating, memory=scores + _block_weight_casts(shapes, km, phase))
    moved = 2 * tokens * m.top_k * h * shapes.elt
    permute = unpermute = Work.of(memory=km.memory(moved))
    if km.moe:
        gather_s, scatter_s = km.moe.permute_seconds(moved, False), km.moe.permute_seconds(moved, True)
        permute = Work.of(memory=gather_s) if gather_s is not None else permute
        unpermute = Work.of(memory=scatter_s) if scatter_s is not None else unpermute
    shared_w = Work.of(gemm=shared, memory=_shared_gate_seconds(shapes, km, phase))
    ep = shapes.layout.ep
    name_in, name_out = ("dispatch", "combine") if phase == "F" else ("combine_grad", "dispatch_grad")
    # a dropless dispatcher reads the per-expert token counts back to the host once per forward
    # (before the all-to-all; without expert parallelism before the experts): parallelism/host.py
    sync = phase == "F" and moe.reads_counts
    read_s = km.moe.count_read_s if km.moe else None
    # the first all-to-all of each phase carries what the expert GEMMs read first (tokens
    # forward, output gradients backward): the FP8-quantised ones; the second stays 16-bit
    size_in = a2a_bytes(shapes, moe, fp8=moe.fp8_dispatch and ep > 1)
    size_out = a2a_bytes(shapes, moe)
    etp = shapes.layout.etp
    gather: list[Segment] = []
    scatter: list[Segment] = []
    if etp > 1:
        # the ETP group gathers what each rank received (all_gather: total output) before the
        # expert GEMMs and reduce-scatters their partial sums (total input) after them
        gather = [Comm(f"etp_{name_in}_ag", "etp", "all_gather", etp * size_in, False, layer)]
        scatter = [Comm(f"etp_{name_out}_rs", "etp", "reduce_scatter", etp * size_out, False, layer)]
    # the shared experts in a block of their own before the router (Megatron-Core's
    # MoELayer.shared_experts_compute runs before route and dispatch), so the host's issue of
    # their two TE Linear modules is charged (parallelism/host.py)
    shared_block = [Compute.of("shared_experts", shared_w, layer)] if m.shared_experts else []
    # forward: the router and the permute (a gather) before the dispatch, the unpermute (a
    # scatter-add) after the combine, the shared experts first. The backward runs them in
    # reverse: the unpermute's gradient (a gather) first; the permute's (a scatter-add), the
    # router's and the shared experts' last, as autograd reaches the block's oldest nodes last
    # and as Megatron-Core's combined 1F1B runs the router in its attention node (after
    # moe_dispatch.backward)
    if phase == "F":
        head = Compute.of("router", router + permute, layer, sync=sync, sync_s=read_s)
        tail = Compute.of("unpermute", unpermute, layer)
        first, last = shared_block, []
    else:
        head = Compute.of("unpermute", permute, layer)
        tail = Compute.of("router", router + unpermute, layer)
        first, last = [], shared_block
    if ep == 1 and not gather:
        if phase == "F":
            return [*first, head, Compute.of("experts", unpermute + routed, layer)]
        return [Compute.of("experts", permute + routed, layer), tail, *last]
    # a measured uneven all-to-all (routing's splits) over an even one of the same bytes
    uneven_in = km.moe.all_to_all_ratio(size_in, ep) if km.moe and ep > 1 else None
    uneven_out = km.moe.all_to_all_ratio(size_out, ep) if km.moe and ep > 1 else None
    # DeepEP's intranode kernels copy a rank's own rows as they copy the others', at their own
    # measured rate where the profile has one (deepep_link_factor), for the rows each carries
    # (an FP8 dispatch's are smaller)
    link_in = deepep_link_factor(shapes.layout, moe, km.profile, row_bytes(shapes, moe.fp8_dispatch and ep > 1))
    link_out = deepep_link_factor(shapes.layout, moe, km.profile, row_bytes(shapes))
    side = overlaps_shared_experts(shapes, moe, ep_pairs)
    sms = dispatch_sms(moe)
    dispatch = [Comm(f"ep_{name_in}", "ep", "all_to_all", size_in, side, layer, sms=sms, uneven=(uneven_in or 1.0) * link_in)] if ep > 1 else []
    combine = [Comm(f"ep_{name_out}", "ep", "all_to_all", size_out, side, layer, sms=sms, uneven=(uneven_out or 1.0) * link_out)] if ep > 1 else []
    sorted_experts = Compute.of("experts", routed + Work.of(memory=chunk_sort_seconds(shapes, km, moe, phase)), layer)
    if side:
        # the shared experts' side stream under each all-to-all (overlaps_shared_experts); the
        # gate's scaling comes with the output, after fc2 (get_output)
        gate = _shared_gate_seconds(shapes, km, phase)
        under_in = Work.of(gemm=shared_first, memory=gate if phase == "B" else 0.0)
        under_out = Work.of(gemm=shared_second, memory=gate if phase == "F" else 0.0)
        return [
            head,
            *dispatch,
            Compute.of("shared_experts", under_in, layer),
            *gather,
            sorted_experts,
            *scatter,
            *combine,
            Compute.of("shared_experts", under_out, layer),
            tail,
        ]
    return [*first, head, *dispatch, *gather, sorted_experts, *scatter, *combine, tail, *last]
