"""The host's share of a layer: CPU time to issue each block's kernels from Python.

A training step is issued by one Python thread per GPU. It normally runs ahead of the GPU, so
its cost is hidden, until something makes it wait for the GPU: a dropless MoE dispatcher reads
the per-expert token counts back to the host once per MoE layer forward (Megatron-Core
``MoEAlltoAllTokenDispatcher``: non-blocking device-to-host copies, then
``d2h_event.synchronize()`` at its ``cuda_sync_point``, ``before_ep_alltoall`` with expert
parallelism, ``before_finish`` without; the all-to-all's split sizes and TransformerEngine's
``GroupedLinear`` ``m_splits`` must be Python lists; DeepEP's normal dispatch spins on a mapped
counter likewise). After such a sync the GPU queue is empty and every kernel waits for the host
to issue it, so a layer of many small kernels runs at the host's pace (``engine/worker.py``).
Backward needs no sync (the split sizes are saved), but a host that fell behind stays behind.

Costs are counted per compute segment in two units, both hardware profile fields:

- a *Python op*: one PyTorch op issued from Python with its launch
  (``efficiency.host_op_us``, measured as a small ``torch.nn.Linear`` forward: a module call, so
  a bare functional op such as a softmax or a sum costs somewhat less and the counts below are
  an upper bound); a TransformerEngine module call costs ``TE_MODULE_OPS`` of them
  (TransformerEngine issue 2053: a BF16 ``te.Linear`` forward takes 99.66 µs of CPU on GB200
  and 90.53 on GH200 against 37.08 and 33.17 for ``torch.nn.Linear``: 2.7 times);
- a *C++ launch*: a kernel launched by C++ without Python (the autograd engine's nodes in
  backward, TransformerEngine's per-expert cuBLAS loop), at ``efficiency.kernel_launch_us``.

The counts are read from Megatron-Core's MoE path (router ``TopKRouter`` with its auxiliary
loss, unfused: about 25 ops; the dispatcher's preprocess about 10 ops and 5 device-to-host
copies; fused permute, chunk sort and unpermute a few Triton launches each; two all-to-alls per
direction, tokens and probabilities) and TransformerEngine's ``GroupedLinear``, which without
CUTLASS grouped GEMM (opt-in, Hopper only: ``NVTE_USE_CUTLASS_GROUPED_GEMM``) launches one
cuBLASLt GEMM per local expert round-robin on its side streams, with an event record and wait per
stream around them; in FP8 its ``tex.split_quantize`` launches the recipe's cast kernels per
expert from C++ (one fused kernel under delayed scaling: ``KernelModel.cast_kernels``). The
Python objects it builds per split are not counted, so that part is a lower bound. They are
approximate (a few ops either way); the unit costs are measured.
Dense blocks are costed as Megatron-Core's TransformerEngine modules (the attention's input side by
kind: :class:`AttentionInputs`); ``tools/measure_megatron_host.py`` times the router's and the
dispatcher's Python of Megatron-Core itself in the same unit (about 40 ops where these counts
charge about 55: docs/accuracy.md); segments of other shapes
(nanotron's async TP linears) carry no host cost, which only matters where a sync exposes it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simcluster.full_iteration import captures_iteration
from simcluster.parallelism.segments import Comm, Compute, Segment, Work

#: a TransformerEngine module call (Linear, LayerNormLinear, DotProductAttention, GroupedLinear,
#: RMSNorm) in Python ops: TE issue 2053's te.Linear / torch.nn.Linear CPU-time ratio
TE_MODULE_OPS = 2.7
#: TransformerEngine's multi-stream GEMM fallback: an event record and a stream wait around
#: its side streams (4 in its header) before and after the per-expert GEMMs
_STREAM_EVENTS = 9


@dataclass(frozen=True)
class HostCost:
    """Python ops and C++ launches the host issues for one compute segment."""

    python_ops: float = 0.0
    launches: float = 0.0

    def seconds(self, python_op_s: float, launch_s: float) -> float:
        """Host seconds at the profile's per-op costs."""
        return self.python_ops * python_op_s + self.launches * launch_s


def _te(modules: float, ops: float = 0.0, launches: float = 0.0) -> HostCost:
    return HostCost(modules * TE_MODULE_OPS + ops, launches)


#: Python ops per parameter tensor per microbatch of DeepSpeed's BF16_Optimizer.update_hp_grads
#: (runtime/bf16_optimizer.py, 0.6.5: ``hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype)
#: .view(hp_grad.shape))`` in a Python loop over the stage's parameters after each backward):
#: the cast and the add, each one kernel
HP_GRAD_OPS = 2.0
#: forward Python ops of the MoE router segment by part: the router (gating GEMM, top-k,
#: scores, auxiliary loss), the dispatcher's preprocess (token counts, their all-gather, five
#: device-to-host copies) and the fused permute
ROUTER_OPS = {"moe_router": 25.0, "moe_preprocess": 15.0, "permute": 4.0}
#: a captured part replays as one graph launch, issued from Python
GRAPH = HostCost(1.0)


@dataclass(frozen=True)
class AttentionInputs:
    """The host's share of the attention's input side (segment ``attn_qkv``): TransformerEngine
    module calls, plain Python ops forward, C++ launches backward."""

    modules: float = 1.0  # LayerNormLinear over q, k and v
    ops: float = 2.0  # rotary embedding on q and k (fused: one call each)
    launches: float = 4.0  # LayerNormLinear's backward: the norm's and the GEMM's kernels

    @classmethod
    def of(cls, mla: bool, q_lora: bool, qk_norm: bool) -> AttentionInputs:
        """Megatron-Core's TransformerEngine layer spec (``gpt_layer_specs.py``, read at 0.16.1).

        Standard attention: one ``TELayerNormColumnParallelLinear`` for q, k and v, and with a
        q/k norm its two norm modules (``q_layernorm``, ``k_layernorm``), each one module call
        forward and a kernel or two backward. Multi-latent attention (``MLASelfAttention``)
        keeps the input norm apart (``input_layernorm``: a norm module) because two linears read
        it: ``linear_q_down_proj`` and ``linear_kv_down_proj`` (``TELinear``), then the
        up-projections ``linear_q_up_proj`` and ``linear_kv_up_proj`` with the latents' norms
        fused in (``TELayerNormColumnParallelLinear``; without a q LoRA rank one
        ``linear_q_proj`` replaces the q pair), i.e. five modules (four); its glue is the
        latent's split, two views and an unsqueeze around the fused MLA rotary calls
        (``fused_apply_mla_rope_for_q`` / ``_for_kv``: rope fusion on, Megatron's default)."""
        if mla:
            modules = 5.0 if q_lora else 4.0
            # TELinear backward: dgrad GEMM and its glue; LayerNormLinear: GEMM, norm and add;
            # the norm module: its kernel and the add; the two rotary backward kernels and the
            # split's concatenation
            linears = 2.0 if q_lora else 1.0
            return cls(modules, ops=6.0, launches=2.0 * linears + 4.0 * 2 + 2.0 + 3.0)
        if qk_norm:
            return cls(3.0, launches=4.0 + 2 * 2.0)
        return cls()


def segment_cost(
    name: str,
    phase: str,
    local_experts: float,
    graphs: frozenset[str] = frozenset(),
    expert_casts: float = 0.0,
    attention: AttentionInputs = AttentionInputs(),
) -> HostCost:
    """Host cost of the compute segment ``name`` of one layer in phase F, B or W.

    Names are the layer builder's (``parallelism/layer.py``, ``expert.py``); a segment not listed
    costs nothing here (its kernels are few and large). ``graphs`` = the parts captured in CUDA
    graphs (``training.cuda_graphs``): their ops become one graph launch per phase
    (``full_iteration``: :func:`charge` charges nothing at all).
    ``expert_casts``: the kernels that quantise one grouped GEMM operand for FP8
    (``KernelModel.cast_kernels``), launched from C++ by ``tex.split_quantize`` for fc1's and
    fc2's inputs in the forward and their output gradients in the backward. ``attention``:
    the input side's modules by attention kind (:meth:`AttentionInputs.of`).
    """
    if "attn" in graphs and name in ("attn_qkv", "attn_core", "attn_out") and phase != "W":
        return GRAPH if name == "attn_qkv" else HostCost()
    if "mlp" in graphs and name == "mlp" and phase != "W":
        return GRAPH
    if name == "router" and phase == "F":
        ops = sum(1.0 if part in graphs else n for part, n in ROUTER_OPS.items())
        return HostCost(ops)
    if name == "router" and phase == "B" and "moe_router" in graphs:
        return GRAPH
    grouped = 2 * (local_experts + _STREAM_EVENTS)  # fc1 and fc2, one GEMM per expert
    casts = 2 * expert_casts  # fc1's and fc2's FP8 operands, per expert unless fused
    if phase == "F":
        table = {
            "attn_qkv": _te(attention.modules, ops=attention.ops),
            "attn_core": _te(1),  # DotProductAttention
            "attn_out": _te(1, ops=4),  # Linear; bias-dropout-add, residual glue
            "mlp": _te(1, ops=4),  # LayerNormMLP; bias-dropout-add, glue
            "moe_norm": _te(1),  # pre-MLP RMSNorm
            # chunk sort, fc1 and fc2 GroupedLinear, activation, chunk unsort
            "experts": _te(2, ops=8, launches=grouped + casts),
            "unpermute": HostCost(7.0),  # fused unpermute, probability scaling, glue
            # the shared experts (both halves together under moe.shared_expert_overlap): the fc1
            # and fc2 Linear modules, the activation and glue (the overlap's input copy, stream
            # switches and output wait)
            "shared_experts": _te(2, ops=4),
        }
    elif phase == "B":
        table = {
            "attn_qkv": _te(attention.modules, launches=attention.launches),
            "attn_core": _te(1),
            "attn_out": _te(1, launches=4),
            "mlp": _te(1, launches=6),
            "moe_norm": _te(1),
            # the router's autograd nodes (C++) and the aux-loss scaler / permute Functions
            "router": HostCost(2.0, 20.0),
            # GroupedLinear backward (Python) and the per-expert input-gradient GEMMs
            "experts": _te(2, ops=4, launches=grouped + casts),
            "unpermute": HostCost(1.0, 4.0),
            "shared_experts": _te(2, launches=4),  # the two Linear modules' backward
        }
    else:
        # split weight gradients: the per-expert wgrad GEMMs
        table = {"experts": HostCost(0.0, grouped)}
    return table.get(name, HostCost())


@dataclass(frozen=True)
class LayerIssue:
    """What a layer's host counts depend on (:func:`segment_cost`'s arguments past the phase)."""

    local_experts: float = 0.0
    graphs: frozenset[str] = frozenset()
    expert_casts: float = 0.0
    attention: AttentionInputs = AttentionInputs()


def charge(segments: list[Segment], phase: str, layer: LayerIssue, python_op_s: float, launch_s: float) -> list[Segment]:
    """``segments`` with each compute segment's host seconds set from :func:`segment_cost`; a
    cost is shared evenly by the segments of one name (a context-parallel ring's steps)."""
    if captures_iteration(layer.graphs):
        return segments  # one graph replays the step's forward and backward: no op is issued
    counts: dict[str, int] = {}
    for s in segments:
        if isinstance(s, Compute):
            counts[s.name] = counts.get(s.name, 0) + 1
    out: list[Segment] = []
    for s in segments:
        if isinstance(s, Comm) and s.group == "ep":
            # the all-to-all's autograd Function: tokens and probabilities forward, one backward
            s = replace(s, host=s.host + (2.0 if phase == "F" else 1.0) * python_op_s)
        elif isinstance(s, Compute):
            need = segment_cost(s.name, phase, layer.local_experts, layer.graphs, layer.expert_casts, layer.attention)
            cost = need.seconds(python_op_s, launch_s)
            if cost > 0:
                s = replace(s, host=s.host + cost / counts[s.name])
        out.append(s)
    return out


def blocking(segments: list[Segment], extra_host: float = 0.0) -> list[Segment]:
    """``segments`` as they run under ``CUDA_LAUNCH_BLOCKING=1`` (``training.launch_blocking``).

    The CUDA Programming Guide (Asynchronous Concurrent Execution): kernel launches return to
    the host before the kernel completes, unless "the CUDA_LAUNCH_BLOCKING environment variable
    [is set] to 1", which makes every launch synchronous. The host then issues a layer's next op
    only after the previous kernel has finished, so the time it spends issuing each op (the
    compute segment's ``host`` seconds, :func:`charge`) is no longer hidden under the GPU's work
    but added to it: each compute segment takes its GPU seconds plus its host seconds, the
    latter recorded as ``host`` work. ``extra_host`` (seconds) goes to the first compute segment
    (the BF16_Optimizer's per-parameter ops, :data:`HP_GRAD_OPS`, on a weight-gradient segment).
    A collective's issue is already serial in a framework whose collectives block the host, so
    its ``host`` is left on the host clock."""
    out: list[Segment] = []
    for s in segments:
        if isinstance(s, Compute):
            host, extra_host = s.host + extra_host, 0.0
            if host > 0:
                s = replace(s, seconds=s.seconds + host, work=s.work + Work.of(host=host), host=0.0)
        out.append(s)
    return out
