"""When a layout does not fit in GPU memory: which one-field changes would make it fit.

Each candidate is one setting a user would try first, applied alone to the scenario: full
recomputation (or, under it, its checkpoints split over the TP ranks), the next ZeRO stage, half the micro-batch, a fused cross-entropy, twice the
tensor- or pipeline-parallel degree (dp shrinks), BF16 optimizer moments, the optimizer on
the host CPU, and every layer's activations but the last's in host memory (the last two where
the hardware profile gives its host link and memory). Candidates the
layout checks refuse are skipped; the rest are priced by the static memory walk
(``memory_report``, no simulation), so the hints cost milliseconds. The ones that fit are
offered in the order of what they usually cost in step time (:data:`COST_ORDER`), cheapest
first, not by the memory they leave: a user short of 2 GiB wants ZeRO-1, not full
recomputation. The two host offloads are priced against full recomputation by the kernel model
(:mod:`simcluster.fit_prices`): each ranks before it where it costs the step less, after it
where not. How fast each is, ``simcluster sweep`` answers. Every change keeps the global
batch; one that changes the accumulation steps (a smaller micro-batch or dp) says so, with the
new ``training.grad_accum`` where the scenario wrote one (:func:`_batch_effect`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from simcluster.context import Context
from simcluster.errors import UserError
from simcluster.fit_prices import (
    activation_offload_beats_recompute,
    optimizer_offload_beats_recompute,
)
from simcluster.frameworks import get_framework
from simcluster.frameworks.stacks import runs_megatron_core
from simcluster.layout import Layout
from simcluster.parallelism.offload import missing_host_figures
from simcluster.scenario import Scenario, scenario_from_dict

#: the candidates' keys, cheapest in step time first. Sequence parallelism replaces each TP
#: all-reduce by a reduce-scatter and an all-gather of the same bytes and runs the norms and
#: dropouts on 1/tp of the tokens (Korthikanti et al. 2022), so it costs no time and splits
#: the activations outside the attention and MLP by tp. A fused cross-entropy only saves the
#: logits' copies; ZeRO-1/2 shard state at DDP's traffic (reduce-scatter + all-gather = one
#: all-reduce), ZeRO-3 adds a gather per layer in the backward; BF16 moments cost nothing in time
#: (a numerics choice); checkpoints split over the TP ranks add one TP all-gather of a layer's
#: input before each rerun (a sixth of the all-reduces a layer already runs without SP); a mixture
#: of experts' expert inputs sent to the host while the next modules compute (Megatron-Core's
#: fine-grained offload: its forward never waits, its backward fetches one layer ahead; "nearly
#: zero-overhead" by its docs); half the micro-batch runs smaller GEMMs; twice the tp adds TP
#: collectives, twice the pp the bubble; activation offload copies that mostly hide; full
#: recomputation adds a forward (a third more compute); the optimizer on the host runs Adam
#: on the CPU and copies every gradient and parameter over the host link. Each offload moves
#: to the other side of full recomputation where its price says so (:func:`_cost_rank`)

COST_ORDER = (
    "parallel.sequence_parallel",
    "training.fused_cross_entropy",
    "parallel.zero",
    "training.optimizer_moments",
    "training.recompute_partitioned",
    "training.offload_modules",
    "training.micro_batch",
    "parallel.tp",
    "parallel.pp",
    "training.activation_offload_layers",
    "training.recompute",
    "training.optimizer_offload",
)
#: the fine-grained offload a fit hint offers a mixture of experts on a Megatron-Core stack: the
#: routed experts' input and activation input, its largest stash (Megatron-MoE model zoo's
#: Qwen3-235B-A22B GB200 MXFP8 run, --offload-modules expert_fc1 moe_act)
EXPERT_OFFLOAD = ("expert_fc1", "moe_act")


#: the host offloads, each priced against full recomputation (:mod:`simcluster.fit_prices`)
PRICED = {
    "training.offload_modules": activation_offload_beats_recompute,
    "training.activation_offload_layers": activation_offload_beats_recompute,
    "training.optimizer_offload": optimizer_offload_beats_recompute,
}


def cheap_offloads(ctx: Context, keys: Iterable[str]) -> frozenset[str]:
    """Which of ``keys`` are host offloads that cost ``ctx``'s step less than full
    recomputation would."""
    return frozenset(k for k in keys if k in PRICED and PRICED[k](ctx))


def _cost_rank(key: str, value: Any, cheap: frozenset[str] = frozenset()) -> tuple[int, int]:
    """Where a change sits in :data:`COST_ORDER`; ZeRO-3 after the TP and PP changes (its gathers
    are a step's worth of parameters more traffic, where ZeRO-1/2 add none); a host offload
    by its price (``cheap``: :func:`cheap_offloads`): before full recomputation where it costs
    less, after it where not (activations first among the cheap, the optimizer first among the
    dear)."""
    if key == "parallel.zero" and value == 3:
        return COST_ORDER.index("parallel.pp"), 1
    if key in ("training.offload_modules", "training.activation_offload_layers") and key not in cheap:
        return COST_ORDER.index("training.optimizer_offload"), 1
    if key == "training.optimizer_offload" and key in cheap:
        return COST_ORDER.index("training.activation_offload_layers"), 1
    return COST_ORDER.index(key), 0


@dataclass(frozen=True)
class FitHint:
    """One change (``key=value``) and the peak memory per GPU it leads to; ``unset``: keys the
    scenario wrote that the change refuses beside it, unset with it (``--set KEY=null``);
    ``also``: the changes made together with it (:func:`fitting_combination`)."""

    change: str
    total_bytes: float
    unset: tuple[str, ...] = ()
    also: tuple[str, ...] = ()
    #: what the change does to the batch: the global batch kept and the accumulation steps it
    #: now takes (a smaller micro-batch, or dp shrunk by twice the tp or pp), or ""
    batch: str = ""

    @property
    def sets(self) -> list[str]:
        """The ``--set`` items that make the change: it and those made with it, then each unset
        key's null."""
        return [self.change, *self.also, *(f"{key}=null" for key in self.unset)]

    def record(self) -> dict[str, Any]:
        """The JSON record (``unset`` and ``also`` only where there are some)."""
        doc: dict[str, Any] = {"change": self.change, "total_bytes": self.total_bytes}
        if self.also:
            doc["also"] = list(self.also)
        if self.unset:
            doc["unset"] = list(self.unset)
        if self.batch:
            doc["batch"] = self.batch
        return doc


#: recomputation settings that name what one recomputation does, refused beside the others
#: (context.py _check_recompute): Megatron's --recompute-modules with selective only, its
#: --recompute-num-layers with full only
_RECOMPUTE_COMPANIONS = {"recompute_modules": "selective", "recompute_num_layers": "full"}


def _unset_beside(base: dict[str, Any], key: str, value: Any) -> tuple[str, ...]:
    """The keys the scenario wrote that a change of ``key`` to ``value`` leaves refused: a
    changed recomputation drops the companion of the one it replaces (a DeepSeek-V3 layout's
    recompute_modules under recompute none)."""
    if key != "training.recompute":
        return ()
    written = base.get("training") or {}
    return tuple(
        f"training.{name}" for name, needs in _RECOMPUTE_COMPANIONS.items() if name in written and value != needs
    )


def _batch_effect(sc: Scenario, before: Layout, after: Layout) -> tuple[tuple[str, ...], str]:
    """What a change does to the step's batch: the global batch stays (micro_batch x dp x
    accumulation steps, layout.py), so a smaller micro-batch or a smaller dp (twice the tp or pp
    on the same GPUs) takes more accumulation steps. Returns the ``training.grad_accum`` a
    scenario that wrote it must set with the change (else its GA x micro-batch x dp would change
    the global batch, or the layout check refuse the two), and the sentence saying so; nothing
    when the steps stay."""
    if after.microbatches == before.microbatches:
        return (), ""
    also = (f"training.grad_accum={after.microbatches}",) if "training.grad_accum" in sc.written else ()
    return also, (
        f"global batch {after.global_batch} kept: micro-batch {after.micro_batch} x dp {after.dp} "
        f"x {after.microbatches} accumulation steps, was {before.microbatches}"
    )


def _candidates(ctx: Context, chunk_layers: int) -> list[tuple[str, Any]]:
    sc = ctx.scenario
    tr, par = sc.training, sc.parallel
    out: list[tuple[str, Any]] = []
    if par.tp > 1 and not par.sequence_parallel:
        out.append(("parallel.sequence_parallel", True))
    if tr.recompute != "full":
        out.append(("training.recompute", "full"))
    # every later ZeRO stage; only the first that fits is offered (fitting_changes):
    # torchtitan has no ZeRO-1/2, and pipelines run no ZeRO-2
    out.extend(("parallel.zero", stage) for stage in range(par.zero + 1, 4))
    if tr.recompute == "full" and not tr.recompute_partitioned and par.tp > 1 and not par.sequence_parallel:
        out.append(("training.recompute_partitioned", True))
    if tr.micro_batch > 1 and tr.micro_batch % 2 == 0:
        out.append(("training.micro_batch", tr.micro_batch // 2))
    if tr.fused_cross_entropy in (False, "native"):  # those two keep fp32 copies of the logits
        # on a Megatron-Core stack the loss that keeps none is TransformerEngine's
        # (--cross-entropy-fusion-impl te); elsewhere a fused kernel such as Liger-Kernel's
        out.append(("training.fused_cross_entropy", "te" if runs_megatron_core(sc.framework) else True))
    out.append(("parallel.tp", par.tp * 2))
    out.append(("parallel.pp", par.pp * 2))
    if tr.optimizer_moments == "fp32" and tr.precision != "fp32":
        out.append(("training.optimizer_moments", "bf16"))
    return out + _offload_candidates(ctx, chunk_layers)


def _offload_candidates(ctx: Context, chunk_layers: int) -> list[tuple[str, Any]]:
    """The host offloads not yet taken: the whole optimizer, all layers of a chunk but the last
    (Megatron-Core offloads at most those), and on a Megatron-Core stack a mixture of experts'
    :data:`EXPERT_OFFLOAD` (each chunk's last layer stays there too)."""
    sc = ctx.scenario
    tr = sc.training
    out: list[tuple[str, Any]] = []
    if tr.optimizer_offload < 1.0:
        out.append(("training.optimizer_offload", 1.0))
    if tr.activation_offload_layers == 0 and chunk_layers > 1:
        out.append(("training.activation_offload_layers", chunk_layers - 1))
    if ctx.model.experts and not tr.offload_modules and chunk_layers > 1 and runs_megatron_core(sc.framework):
        out.append(("training.offload_modules", list(EXPERT_OFFLOAD)))
    return out


def host_fits(doc: dict[str, Any]) -> bool:
    """Whether a memory document's offloaded state fits its node's host memory (true where the
    profile does not give the host's): an offload hint must not trade the GPU's shortage for
    the host's."""
    capacity = doc.get("host_capacity_bytes")
    return not capacity or doc["host_bytes_per_node"] <= capacity


def fit_advice(sc: Scenario, hardware: str | None = None) -> dict[str, Any]:
    """What run's and memory's JSON say of a layout that does not fit: ``would_fit`` (the
    one-field changes), and where there is none ``would_fit_together`` (the fewest changes
    that fit together, or None: more GPUs or more memory per GPU)."""
    out: dict[str, Any] = {"would_fit": would_fit(sc, hardware)}
    if not out["would_fit"]:
        together = fitting_combination(sc, hardware)
        out["would_fit_together"] = together.record() if together else None
    return out


def would_fit(sc: Scenario, hardware: str | None = None) -> list[dict[str, Any]]:
    """:func:`fitting_changes` as the ``would_fit`` records of run's and memory's JSON."""
    return [h.record() for h in fitting_changes(sc, hardware)]


def fitting_changes(sc: Scenario, hardware: str | None = None, most: int = 3) -> list[FitHint]:
    """Up to ``most`` one-field changes that fit, the cheapest in step time first
    (:data:`COST_ORDER`)."""
    from simcluster.context import build_context
    from simcluster.sweep import show_value

    base = rewritable(sc)
    hints: list[tuple[tuple[int, int], FitHint]] = []
    before = build_context(sc, hardware)
    fewest = min(c.layers for stage in before.chunks for c in stage)
    # a ZeRO stage that fits was offered: the later, dearer ones are not (one that the layout
    # accepts but that does not fit does not stop them: ZeRO-3 may fit where ZeRO-1 does not)
    next_zero = False
    for key, value in _candidates(before, fewest):
        if key == "parallel.zero" and next_zero:
            continue
        if _host_unpriced(before, key):
            continue  # before walking it: no candidate changes the hardware
        unset = _unset_beside(base, key, value)
        walked = walk_changed(base, [(key, value), *((k, None) for k in unset)], hardware)
        if walked is None:
            continue  # refused (tp not dividing heads, say)
        ctx, doc = walked
        if doc["fits"] and host_fits(doc):
            next_zero = next_zero or key == "parallel.zero"
            also, batch = _batch_effect(sc, before.layout, ctx.layout)
            hint = FitHint(f"{key}={show_value(value)}", doc["total_bytes"], unset, also, batch)
            hints.append((_cost_rank(key, value, cheap_offloads(ctx, [key])), hint))
    return [hint for _, hint in sorted(hints, key=lambda pair: pair[0])[:most]]


def changed_context(base: dict[str, Any], overrides: list[tuple[str, Any]], hardware: str | None) -> Context | None:
    """The context of ``base`` (:func:`rewritable`) with ``overrides``; None where the layout
    checks refuse it."""
    from simcluster.context import build_context

    try:
        return build_context(scenario_from_dict(base, overrides), hardware)
    except UserError:
        return None


def walk_changed(base: dict[str, Any], overrides: list[tuple[str, Any]], hardware: str | None) -> tuple[Context, dict] | None:
    """The changed scenario's context and static memory walk; None where the layout checks or
    the schedule's planner refuse it (a zero-bubble order that no longer fits its activation
    limit under full recomputation, say), as its run would be refused."""
    from simcluster.memory_report import memory_summary

    ctx = changed_context(base, overrides, hardware)
    if ctx is None:
        return None
    try:
        return ctx, memory_summary(ctx)
    except UserError:
        return None


def _host_unpriced(ctx: Context, key: str) -> bool:
    """Whether ``key`` offloads to a host the profile cannot price (its run would be refused);
    asked of the unchanged scenario's context, as no candidate changes the hardware."""
    offload = key in ("training.optimizer_offload", "training.activation_offload_layers", "training.offload_modules")
    return offload and bool(missing_host_figures(ctx.profile.node, optimizer=key == "training.optimizer_offload"))


def rewritable(sc: Scenario) -> dict[str, Any]:
    """The scenario as written, ready for one changed field: each change gets its framework's
    preset for the layout it makes, dp and a hand-made stage split are derived again."""
    base = sc.as_written()
    base["name"] = sc.name
    if "parallel" in base:
        base["parallel"].pop("dp", None)  # re-derived from the GPU count
        base["parallel"].pop("layers_per_stage", None)  # a split for one depth only
    # the global batch (which a written grad_accum set, global_batch.py) is kept; the
    # accumulation steps follow from it for the changed micro-batch or dp (_batch_effect)
    base["training"].pop("grad_accum", None)
    return base


#: for each recomputation, the lighter ones, least recomputed first: none; Megatron's selective
#: (the attention core only, Korthikanti et al. 2022); torchtitan's op-level (every other
#: matmul output kept, the rest rerun)
LIGHTER_RECOMPUTE = {"full": ("none", "selective", "op"), "op": ("none", "selective"), "selective": ("none",)}


def lighter_recompute(sc: Scenario, hardware: str | None = None, spare_share: float = 0.02) -> FitHint | None:
    """The least recomputation that still fits with ``spare_share`` of the GPU free, by the same
    memory walk as :func:`fitting_changes`, for a run that recomputes more than its memory
    needs; None when none does (or nothing is recomputed). Only the modes the scenario's
    framework offers (``Framework.recompute``) are suggested."""

    base = rewritable(sc)
    offered = get_framework(sc.framework).recompute if sc.framework else None
    for value in LIGHTER_RECOMPUTE.get(sc.training.recompute, ()):
        if offered is not None and value not in offered:
            continue  # e.g. op-level checkpointing is PyTorch's, not Megatron-DeepSpeed's
        unset = _unset_beside(base, "training.recompute", value)
        walked = walk_changed(base, [("training.recompute", value), *((k, None) for k in unset)], hardware)
        if walked is None:
            continue  # op-level recomputation is for dense models only
        ctx, doc = walked
        if doc["total_bytes"] <= (1.0 - spare_share) * ctx.capacity_bytes:
            return FitHint(f"training.recompute={value}", doc["total_bytes"], unset)
    return None


#: how many of the least-memory changes of a round the search goes on from when none fits:
#: the least alone can lead nowhere (activations offloaded to the host, where the optimizer
#: then has no room, instead of full recomputation)
BRANCHES = 3


@dataclass(frozen=True)
class _Combination:
    """Changes made together (key -> value, in the order taken), the keys unset beside them,
    and what the memory walk gives for them."""

    taken: dict[str, Any]
    unset: tuple[str, ...]
    total_bytes: float
    layout: Layout
    cheap: frozenset[str]  # cheap_offloads of its scenario

    def cost(self) -> tuple[tuple[int, int], ...]:
        """Its changes' places in :data:`COST_ORDER`, the dearest first: of two combinations,
        the one whose dearest change is cheaper costs less (then the next dearest, ...)."""
        ranks = (_cost_rank(k, v, self.cheap) for k, v in self.taken.items())
        return tuple(sorted(ranks, reverse=True))


def fitting_combination(sc: Scenario, hardware: str | None = None, most: int = 3) -> FitHint | None:
    """When no single change fits: up to ``most`` of the same candidates together, by the same
    memory walk (GPU and host), the fewest changes that fit and among those the cheapest in step
    time (:meth:`_Combination.cost`). The search goes breadth first: each round tries every
    candidate on each combination of the round before, and goes on from each one's
    :data:`BRANCHES` least-memory results (at most 1 + 3 + 9 combinations tried, about ten
    walks each, ~25 ms a walk). Breadth first, since the first combination found depth first
    can be a dear one: tp 2 with activations offloaded and ZeRO-1 (13.7 s simulated) where full
    recomputation with ZeRO-2 fits too (7.5 s; Llama 3 8B at micro-batch 4 on 8 H100). None
    when no such combination fits: the model needs more GPUs or more memory per GPU."""
    from simcluster.context import build_context
    from simcluster.sweep import show_value

    base = rewritable(sc)
    start = build_context(sc, hardware)
    before = start.layout
    frontier = [_Combination({}, (), 0.0, before, frozenset())]
    for _ in range(most):
        grown = [_extended(base, combination, hardware) for combination in frontier]
        fitting = [c for round_ in grown for c in round_ if c.total_bytes <= start.capacity_bytes]
        if fitting:
            best = min(fitting, key=lambda c: (c.cost(), c.total_bytes))
            first, *rest = (f"{k}={show_value(v)}" for k, v in best.taken.items())
            accum, batch = _batch_effect(sc, before, best.layout)
            return FitHint(first, best.total_bytes, best.unset, (*rest, *accum), batch)
        frontier = _next_frontier(grown)
    return None


def _extended(base: dict[str, Any], combination: _Combination, hardware: str | None) -> list[_Combination]:
    """Each candidate change on top of ``combination`` that the layout checks accept and the
    host's memory holds (an offload past the host's memory is no way out)."""
    from simcluster.context import build_context

    taken, unset = combination.taken, combination.unset
    current = build_context(scenario_from_dict(base, [*taken.items(), *((k, None) for k in unset)]), hardware)
    fewest = min(c.layers for stage in current.chunks for c in stage)
    out = []
    for key, value in _candidates(current, fewest):
        if _host_unpriced(current, key):
            continue
        drop = tuple(dict.fromkeys((*unset, *_unset_beside(base, key, value))))
        walked = walk_changed(base, [*taken.items(), (key, value), *((k, None) for k in drop)], hardware)
        if walked is None:
            continue
        ctx, doc = walked
        if host_fits(doc):
            changes = {**taken, key: value}
            out.append(_Combination(changes, drop, doc["total_bytes"], ctx.layout, cheap_offloads(ctx, changes)))
    return out


def _next_frontier(grown: list[list[_Combination]]) -> list[_Combination]:
    """The next round's combinations: from each of this round's, its :data:`BRANCHES`
    least-memory extensions, each set of changes once (tp then ZeRO is ZeRO then tp)."""
    out: list[_Combination] = []
    seen: set[frozenset[tuple[str, str]]] = set()
    for extensions in grown:
        for c in sorted(extensions, key=lambda c: c.total_bytes)[:BRANCHES]:
            changes = frozenset((k, repr(v)) for k, v in c.taken.items())
            if changes not in seen:
                seen.add(changes)
                out.append(c)
    return out
