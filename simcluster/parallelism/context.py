"""Context parallelism: how the cp ranks of a sequence share keys and values in attention.

Every algorithm keeps the load-balanced causal split (rank i holds sequence chunks i and 2cp-1-i
of 2cp), so each rank does 1/cp of the causal attention work. They differ in what crosses the cp
group and whether it hides behind attention (``parallel.cp_comm``; Megatron-Core's
``--cp-comm-type`` names, TransformerEngine's implementations):

- ``p2p``: ring attention (Liu et al. 2023; TE ``AttnFuncWithCPAndKVP2P``). KV blocks travel
  around the ring in cp-1 steps, each overlapped with the attention of the block already present.
  TE's kernels per step: first the rank's own two chunks attend to each other (causal, 2c
  tokens, c = s/2cp), then each visiting block without a mask (2c queries against the sender's
  first chunk if it comes from an earlier rank, else the second chunk's c queries against both
  of its chunks): all but 1/cp of the work runs at a kernel's non-causal rate. The backward runs
  the steps in reverse (the local pair last) and sends the other way at every one of its cp
  steps: the first passes the KV block on, the middle ones the block and the dK/dV accumulated
  for its owner, the last only that dK/dV, home, under the local pair's kernel (2(cp-1) blocks
  in all, twice the forward's).
- ``all_gather``: Llama 3's method (Grattafiori et al. 2024, arXiv 2407.21783 Sec. 3.3.2; TE
  ``AttnFuncWithCPAndKVAllGather``, whose docstring says the gather is exposed). Forward
  all-gathers K and V, then attends the local queries to them; backward gathers K and V again
  (only the local ones are saved) and reduce-scatters dK and dV. Cheap with GQA, whose K and V
  are a fraction of Q. TE runs one kernel per local chunk, its c queries against the keys up to
  the chunk's end with a bottom-right causal mask: all of it unmasked but the c x c diagonal
  block, so most of the work runs at a kernel's non-causal rate.
- ``a2a``: DeepSpeed-Ulysses (Jacobs et al. 2023, arXiv 2309.14509; TE
  ``AttnFuncWithCPAndQKVOA2A``, DeepSpeed ``DistributedAttention``). An all-to-all turns Q, K
  and V from sequence-sharded into head-sharded, attention runs on the whole sequence with
  heads/cp heads, and a second all-to-all returns the output; backward all-to-alls the output's
  gradient (TE: the output and its gradient, ``parallel.cp_a2a_impl``) in and dQ, dK, dV out.
  Nothing overlaps the exchanges.
- ``a2a+p2p``: Megatron-Core's hierarchical CP (``hierarchical_context_parallel_sizes``; TE's
  ring given a pair of groups): the all-to-all inside runs of ``parallel.cp_a2a`` consecutive
  cp ranks, the ring across the runs.

Each algorithm also registers its working memory (:func:`register_working`): the buffers TE
holds beyond the stash while one layer's attention runs, which the memory timeline adds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simcluster.errors import UserError, did_you_mean
from simcluster.parallelism.segments import Comm, Compute, Segment, Work

if TYPE_CHECKING:  # shapes imports the layout, which checks cp_comm against this registry
    from simcluster.parallelism.shapes import Shapes


@dataclass(frozen=True)
class CoreTimes:
    """Seconds of one layer's attention core on one rank, as the cp algorithms run it."""

    #: the rank's share (1/cp of the causal work) as kernels over the whole sequence
    total: float
    #: ring attention's kernels: the rank's own chunk pair (causal) and one visiting KV block
    #: (no mask); zero where the ring is not costed by its own kernels (unfused attention)
    diagonal: float = 0.0
    block: float = 0.0
    #: the all-gather algorithm's kernels: each local chunk against the gathered keys up to its
    #: own end, averaged over the ranks; zero where not costed by its own kernels
    prefix: float = 0.0
    #: DeepSpeed-Ulysses' layout copies around its all-to-alls: seconds of one copy (a read and a
    #: write through HBM) of Q, K, V and the output (or their gradients); zeros elsewhere
    relayout: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)


CpAttention = Callable[["Shapes", CoreTimes, bool, int], list[Segment]]
CpWorking = Callable[["Shapes", bool], float]
_ALGORITHMS: dict[str, CpAttention] = {}
_WORKING: dict[str, CpWorking] = {}
FIELD = "parallel.cp_comm"


def register(name: str) -> Callable[[CpAttention], CpAttention]:
    """Add a context-parallel attention algorithm under ``name``."""

    def add(fn: CpAttention) -> CpAttention:
        _ALGORITHMS[name] = fn
        return fn

    return add


def register_working(name: str) -> Callable[[CpWorking], CpWorking]:
    """Add the working memory of algorithm ``name``: bytes one layer's attention holds beyond
    the stash at its largest moment, forward (False) or backward (True)."""

    def add(fn: CpWorking) -> CpWorking:
        _WORKING[name] = fn
        return fn

    return add


def algorithms() -> tuple[str, ...]:
    """Names accepted by ``parallel.cp_comm``."""
    return tuple(_ALGORITHMS)


def describe(name: str) -> str:
    """The first line of algorithm ``name``'s docstring."""
    doc = (_ALGORITHMS[check_algorithm(name)].__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""


def check_algorithm(name: str) -> str:
    """``name``, or a UserError naming the field and the choices."""
    if name not in _ALGORITHMS:
        raise UserError(
            FIELD, f"unknown '{name}'{did_you_mean(name, algorithms())}; one of {', '.join(algorithms())}"
        )
    return name


def kv_bytes(shapes: Shapes) -> float:
    """K and V of this rank's tokens as the attention kernel reads them, sharded by tp: GQA's
    kv_heads wide; MLA's decompressed to every head (TE's ring concatenates the flattened K and
    V when their head dims differ, ``enable_mla``: the latent is up-projected before attention,
    so the exchange carries heads x (qk_nope + qk_rope + v_head) per token, not the latent)."""
    _, k_dim, v_dim, _ = shapes.attention_widths
    return shapes.tokens * (k_dim + v_dim) * shapes.elt / shapes.layout.tp


def qkvo_bytes(shapes: Shapes) -> tuple[float, float, float, float]:
    """Q, K, V and the attention output of this rank's tokens, each on its own, sharded by tp."""
    widths = shapes.attention_widths
    return tuple(shapes.tokens * w * shapes.elt / shapes.layout.tp for w in widths)  # type: ignore[return-value]


def q_bytes(shapes: Shapes) -> float:
    """Q of this rank's tokens, sharded by tp."""
    return shapes.tokens * shapes.attention_widths[0] * shapes.elt / shapes.layout.tp


def o_bytes(shapes: Shapes) -> float:
    """The attention output (or its gradient) of this rank's tokens, sharded by tp."""
    return shapes.tokens * shapes.attention_widths[3] * shapes.elt / shapes.layout.tp


def lse_bytes(shapes: Shapes) -> float:
    """The fp32 softmax log-sum-exp of this rank's tokens, one per head (sharded by tp)."""
    return shapes.tokens * shapes.model.heads / shapes.layout.tp * 4.0


def working_bytes(shapes: Shapes, backward: bool, recomputed: bool = False) -> float:
    """Bytes one layer's context-parallel attention holds beyond the stash while it runs (0
    without cp). A backward whose attention is ``recomputed`` first reruns the forward."""
    if shapes.layout.cp == 1:
        return 0.0
    fn = _WORKING[shapes.layout.cp_comm]
    forward = fn(shapes, False)
    if not backward:
        return forward
    return max(fn(shapes, True), forward if recomputed else 0.0)


def cp_attention(shapes: Shapes, core: CoreTimes, backward: bool, layer: int) -> list[Segment]:
    """The attention core of one layer under the layout's ``cp_comm`` algorithm."""
    if shapes.layout.cp == 1:
        return [Compute.of("attn_core", Work.of(attention=core.total), layer)]
    return _ALGORITHMS[shapes.layout.cp_comm](shapes, core, backward, layer)


@register("p2p")
def ring_attention(shapes: Shapes, core: CoreTimes, backward: bool, layer: int) -> list[Segment]:
    """Ring attention: cp-1 KV exchanges, each under the attention of the block before it.

    Forward (TE ``AttnFuncWithCPAndKVP2P.forward``): step i sends the block it holds on while
    attending to it, the local pair first, no send at the last step. Backward (``.backward``,
    "in reversed order of fwd"): the visiting blocks first and the local pair last; step 0 sends
    the KV block only, steps 1..cp-2 the KV block and the accumulated dK/dV together, step cp-1
    the dK/dV only, each under that step's kernel and waited for before the next step."""
    return _ring(shapes, core, backward, layer, shapes.layout.cp, "cp")


def _ring(shapes: Shapes, core: CoreTimes, backward: bool, layer: int, n: int, group: str) -> list[Segment]:
    """The ring's steps over ``n`` ranks of ``group`` (see :func:`ring_attention`)."""
    kv = kv_bytes(shapes)
    if core.block > 0:
        pair, block = Work.of(attention=core.diagonal), Work.of(attention=core.block)
    else:
        pair = block = Work.of(attention=core.total / n)
    if backward:
        kernels = [block] * (n - 1) + [pair]
        sends = [("cp_kv", kv)] + [("cp_kv_dkv", 2 * kv)] * (n - 2) + [("cp_dkv", kv)]
    else:
        kernels = [pair] + [block] * (n - 1)
        sends = [("cp_kv", kv)] * (n - 1)
    out: list[Segment] = []
    for step, work in enumerate(kernels):
        if step < len(sends):
            name, nbytes = sends[step]
            out.append(Comm(name, group, "send_recv", nbytes, True, layer))
        out.append(Compute.of("attn_core", work, layer))
    return out


@register_working("p2p")
def ring_working(shapes: Shapes, backward: bool) -> float:
    """TE ``AttnFuncWithCPAndKVP2P``. Forward: ``p2p_comm_buffers`` keeps every step's KV
    block (the local copy and the cp-1 received; a new ``empty_like`` per step) and
    ``out_per_step`` / ``softmax_lse_per_step`` every step's partial output and fp32
    log-sum-exp until the correction after the last step; rank cp-1 attends both its chunks at
    every step, so it holds cp x (KV + O + LSE), the whole sequence's for its heads. Backward:
    two ``[KV, dKV]`` send/receive buffers, the step's dK/dV and dQ, the dQ accumulator:
    5 KV + 2 Q."""
    if backward:
        return 5 * kv_bytes(shapes) + 2 * q_bytes(shapes)
    return shapes.layout.cp * (kv_bytes(shapes) + o_bytes(shapes) + lse_bytes(shapes))


@register("all_gather")
def all_gather_attention(shapes: Shapes, core: CoreTimes, backward: bool, layer: int) -> list[Segment]:
    """Llama 3: K and V all-gathered, exposed (again in backward), dK and dV reduce-scattered.

    Sizes are the gathered buffers (nccl-tests' size)."""
    gathered = kv_bytes(shapes) * shapes.layout.cp
    attend = Compute.of("attn_core", Work.of(attention=core.prefix or core.total), layer)
    out: list[Segment] = [Comm("cp_kv_ag", "cp", "all_gather", gathered, False, layer), attend]
    if backward:
        out.append(Comm("cp_dkv_rs", "cp", "reduce_scatter", gathered, False, layer))
    return out


@register_working("all_gather")
def gather_working(shapes: Shapes, backward: bool) -> float:
    """TE ``AttnFuncWithCPAndKVAllGather``. Forward: the gathered K and V in chunk order
    (``gather_along_first_dim`` then ``index_select``: cp KV) and each local chunk's contiguous
    slice of them up to its end (chunks i and 2cp-1-i run at once on two streams: (2cp+1)c
    tokens, cp + 1/2 local KV), and the two chunks' outputs (O). Backward: the same gather and
    slices, full-length zeroed dK and dV for the reduce-scatter (cp KV), each chunk's dK/dV over
    its slice (cp + 1/2 KV), dQ and its per-chunk parts (2 Q)."""
    kv = kv_bytes(shapes)
    cp = shapes.layout.cp
    if backward:
        return (4 * cp + 1) * kv + 2 * q_bytes(shapes)
    return (2 * cp + 0.5) * kv + o_bytes(shapes)


@register("a2a")
def ulysses_attention(shapes: Shapes, core: CoreTimes, backward: bool, layer: int) -> list[Segment]:
    """DeepSpeed-Ulysses: all-to-all over heads in and out of attention, exposed.

    Forward: Q, K, V in, attention on heads/cp heads of the whole sequence, the output out.
    Backward, :func:`ulysses_backward_in` in, then dQ, dK, dV out. Sizes are each rank's send
    buffer (nccl-tests' all-to-all size)."""
    if shapes.layout.cp_a2a_impl == "deepspeed":
        return deepspeed_ulysses(shapes, core, backward, layer)
    qkv, o = q_bytes(shapes) + kv_bytes(shapes), o_bytes(shapes)
    before, after = (ulysses_backward_in(shapes), qkv) if backward else (qkv, o)
    return [
        Comm("cp_a2a_in", "cp", "all_to_all", before, False, layer),
        Compute.of("attn_core", Work.of(attention=core.total), layer),
        Comm("cp_a2a_out", "cp", "all_to_all", after, False, layer),
    ]


def deepspeed_ulysses(shapes: Shapes, core: CoreTimes, backward: bool, layer: int) -> list[Segment]:
    """DeepSpeed's ``DistributedAttention`` (``deepspeed/sequence/layer.py``): one
    ``_SeqAllToAll`` per tensor, Q, K and V one after another ("TODO Merge three alltoall calls
    into one"), the local attention, then the output's; the backward runs each one's backward,
    the output gradient's before the kernel and dQ, dK, dV's after it. Each all-to-all goes
    through ``single_all_to_all``, which makes one contiguous copy on the compute stream:
    before the exchange when it scatters heads (Q, K, V forward, the output's gradient
    backward: ``reshape(...).transpose(0, 1).contiguous()``), after it when it scatters the
    sequence (the output forward, dQ, dK, dV backward: ``output.transpose(0, 1).contiguous()``);
    ``core.relayout`` holds each copy's seconds. As read in DeepSpeed 0.12.4; 0.10's
    ``tensor_split``/``torch.cat`` path copied head-scattered tensors twice (not modelled)."""
    q, k, v, o = qkvo_bytes(shapes)
    cq, ck, cv, co = core.relayout
    if backward:
        out: list[Segment] = [
            _relayout("cp_relayout_do", co, layer),
            Comm("cp_a2a_do", "cp", "all_to_all", o, False, layer),
            Compute.of("attn_core", Work.of(attention=core.total), layer),
        ]
        for name, size, copy in (("dq", q, cq), ("dk", k, ck), ("dv", v, cv)):
            out += [Comm(f"cp_a2a_{name}", "cp", "all_to_all", size, False, layer),
                    _relayout(f"cp_relayout_{name}", copy, layer)]  # fmt: skip
    else:
        out = []
        for name, size, copy in (("q", q, cq), ("k", k, ck), ("v", v, cv)):
            out += [_relayout(f"cp_relayout_{name}", copy, layer),
                    Comm(f"cp_a2a_{name}", "cp", "all_to_all", size, False, layer)]  # fmt: skip
        out += [
            Compute.of("attn_core", Work.of(attention=core.total), layer),
            Comm("cp_a2a_o", "cp", "all_to_all", o, False, layer),
            _relayout("cp_relayout_o", co, layer),
        ]
    # a copy of zero seconds (no kernel model gave its rate) is left out
    return [seg for seg in out if isinstance(seg, Comm) or seg.seconds > 0]


def _relayout(name: str, seconds: float, layer: int) -> Compute:
    """A memory-bound contiguous copy on the compute stream."""
    return Compute.of(name, Work.of(memory=seconds), layer)


def ulysses_backward_in(shapes: Shapes) -> float:
    """Bytes a rank all-to-alls into a Ulysses attention's backward, by whose code runs it
    (``parallel.cp_a2a_impl``). TE (``AttnFuncWithCPAndQKVOA2A.backward``): the output and its
    gradient, 2 O, since its forward saved the output sequence-sharded, after the all-to-all
    back. DeepSpeed (``deepspeed/sequence/layer.py``: ``_SeqAllToAll.backward`` is the same
    all-to-all applied to the incoming gradient with scatter and gather swapped, and
    ``DistributedAttention`` wraps the local attention, which saved its own head-sharded
    output): the output's gradient only, 1 O."""
    o = o_bytes(shapes)
    return o if shapes.layout.cp_a2a_impl == "deepspeed" else 2 * o


@register_working("a2a")
def ulysses_working(shapes: Shapes, backward: bool) -> float:
    """TE ``flash_attn_a2a_communicate``: each tensor is copied into the send layout
    (``movedim(...).contiguous()``) and received into a new buffer; DeepSpeed's
    ``single_all_to_all`` likewise (``reshape(...).contiguous()`` in, ``empty_like`` out).
    Forward: Q, K, V's copies and receives (the received ones are what the kernel reads and
    saves, standing in for the stash's). Backward: what comes in received
    (:func:`ulysses_backward_in`: TE's out and dout, DeepSpeed's dout) while the kernel's dQ,
    dK, dV are copied and received (3 QKV)."""
    qkv = q_bytes(shapes) + kv_bytes(shapes)
    if backward:
        return ulysses_backward_in(shapes) + 3 * qkv
    return 2 * qkv


@register("a2a+p2p")
def hierarchical_attention(shapes: Shapes, core: CoreTimes, backward: bool, layer: int) -> list[Segment]:
    """Hierarchical: all-to-all over heads inside cp_a2a ranks, the ring across the groups.

    TE ``AttnFuncWithCPAndKVP2P`` given a pair of groups (Megatron-Core's ``a2a+p2p`` with
    ``hierarchical_context_parallel_sizes``; USP, Fang and Zhao 2024, arXiv 2405.07719):
    ``flash_attn_a2a_communicate`` turns Q, K and V into cp_a2a times the tokens on 1/cp_a2a of
    the heads, exposed, the ring runs over the cp/cp_a2a groups (``group`` cpr: each step's
    block is as large as a rank's own K and V), and the output goes back; the backward
    all-to-alls the output and its gradient in and dQ, dK, dV out around the ring's backward."""
    qkv, o = q_bytes(shapes) + kv_bytes(shapes), o_bytes(shapes)
    before, after = (2 * o, qkv) if backward else (qkv, o)
    ring = _ring(shapes, core, backward, layer, shapes.layout.cp // shapes.layout.cp_a2a, "cpr")
    return [
        Comm("cp_a2a_in", "cpa", "all_to_all", before, False, layer),
        *ring,
        Comm("cp_a2a_out", "cpa", "all_to_all", after, False, layer),
    ]


@register_working("a2a+p2p")
def hierarchical_working(shapes: Shapes, backward: bool) -> float:
    """The ring's working memory over its cp/cp_a2a ranks (its blocks as large as the rank's
    own K and V) beside the all-to-alls' received tensors: Q, K, V forward (the original
    sequence-sharded ones are still held by the caller), the output and its gradient backward."""
    if backward:
        return 5 * kv_bytes(shapes) + 2 * q_bytes(shapes) + 2 * o_bytes(shapes)
    ring = shapes.layout.cp // shapes.layout.cp_a2a
    return ring * (kv_bytes(shapes) + o_bytes(shapes) + lse_bytes(shapes)) + q_bytes(shapes) + kv_bytes(shapes)
