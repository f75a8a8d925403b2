"""Check relations that hold physically on random scenarios (metamorphic testing).

    python tools/metamorphic.py --seed 1 --count 100 --out /tmp/meta

Each scenario is drawn as tools/fuzz_scenarios.py draws one (``--pairs``: made to run F&B
pairs, DualPipe or Megatron-Core's EP overlap; ``--simulable``: drawn again until its layout is
accepted, where most draws would be refused); those that simulate are simulated again as
variants whose result can only move one way:

- faster hardware, through the scenario's ``cluster.profile`` patch (every tensor-core peak,
  the HBM, NVLink, NIC or GPU-host link bandwidth x1.5, the NIC latency x0.5, the host's time
  per Python op and per kernel launch x0.5): the step is not slower;
- twice the global batch (twice the microbatches): the time per sequence is not longer, the
  pipeline's fill and drain and the gradient sync being spread over more work;
- the next ZeRO stage: the peak memory is not higher;
- more recomputation (none -> selective -> full): the peak memory is not higher and the step
  is not shorter;
- twice the micro-batch: the peak memory is not lower;
- twice the tensor, data or context parallelism (and the GPUs): the peak memory is not higher
  (data or context parallelism: not where it brings the gradients' first reduction group and,
  with ``dp.bucket_copies``, DDP's second copy of them);
- twice the expert parallelism on the same GPUs: the peak memory is not higher;
- twice the replicas and twice the global batch without ZeRO (weak scaling): the step is not
  shorter (not held on a switchless mesh, where a larger group uses more direct links);
- sequence parallelism, an offloaded optimizer, more layers' activations offloaded: the peak
  memory is not higher;
- sequences twice as long: the step is not shorter;
- twice the layers: the step is not shorter and the peak memory not lower;
- an ideal network (``cluster.network: ideal``, every transfer instant): the step is not longer;
- the fine-grained offload's cap on copies in flight lifted: the step is not longer;
- every GPU simulated (``simulation.all_ranks``, up to 64 GPUs): the same step as the
  one-rank-per-stage shortcut;
- a straggler (``simulation.stragglers``, up to 64 GPUs): the last GPU's kernels 1.3x longer,
  or the last node's NICs at half their rate: the step is not shorter.

The cost-aware schedules (ZB-1p/2p/auto, ZBV) are left out of the memory relations: how many
microbatches they hold follows the passes' times and the room left.

A variant that breaks its relation by more than ``--tolerance`` is a finding (an algorithm
chosen against its own cost, a schedule anomaly, a table read at the wrong point) and is
written to ``--out`` with both numbers; so is a baseline or variant whose events are not a
valid timeline (two events at once on one stream: ``run --out`` would write nothing). A
variant that is refused (say, ZeRO-3 with a schedule that cannot run it) is skipped. It takes
minutes, so it is a tool to run by hand.
"""

from __future__ import annotations

import argparse
import copy
import random
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from fuzz_scenarios import Timeout, draw_scenario, time_limit

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.engine.plan import planned_orders
from simcluster.errors import UserError
from simcluster.model import load_preset
from simcluster.output.events import validate_events
from simcluster.progress import progress_bar
from simcluster.scenario import scenario_from_dict
from simcluster.schedules.check import peak_inflight
from simcluster.schedules.registry import SCHEDULES

Doc = dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    """What a relation compares: the step, the time per sequence, the peak memory."""

    step_s: float
    per_sequence_s: float
    peak_bytes: float


@dataclass(frozen=True)
class Relation:
    """A variant of a scenario and the direction its outcome may move."""

    name: str
    variant: Callable[[Doc, Any], Doc | None]  # (scenario, its profile) -> variant, or None
    metric: str  # a field of Outcome
    may_grow: bool | None  # True: the metric may not fall; False: may not grow; None: equal


def _patched(patch: Callable[[Any], Doc]) -> Callable[[Doc, Any], Doc]:
    def variant(doc: Doc, profile: Any) -> Doc:
        out = copy.deepcopy(doc)
        out["cluster"]["profile"] = patch(profile)  # on top of the scenario's own overrides
        return out

    return variant


def _edit(edit: Callable[[Doc], bool]) -> Callable[[Doc, Any], Doc | None]:
    def variant(doc: Doc, _profile: Any) -> Doc | None:
        out = copy.deepcopy(doc)
        return out if edit(out) else None

    return variant


def _faster_host(profile: Any) -> Doc:
    """The host issues each Python op and C++ launch in half the time (a faster CPU)."""
    eff = profile.efficiency
    return {"efficiency": {"host_op_us": eff.host_op_us * 0.5, "kernel_launch_us": eff.kernel_launch_us * 0.5}}


def _host_link(doc: Doc, profile: Any) -> Doc | None:
    """The GPU-host link (activation and optimizer offload copies) 1.5x faster; only where the
    profile states one (without it the offloads are refused)."""
    if profile.node.host_link_GBps is None:
        return None
    return _patched(lambda p: {"node": {"host_link_GBps": p.node.host_link_GBps * 1.5}})(doc, profile)


def _no_offload_cap(doc: Doc) -> bool:
    """Megatron-Core's cap on fine-grained offload copies in flight lifted: the compute no longer
    waits for older copies, which run on the same link in the same order."""
    return doc["training"].pop("offload_max_inflight", None) is not None


def _adaptive_memory(doc: Doc) -> bool:
    """A cost-aware order (ZB-1p/2p/auto, ZBV) holds as many microbatches as its greedy finds
    worth it under its limit, and ZB-auto's limit is the room left in 85% of the GPU: a change
    that shortens a pass or frees memory may let it hold more, so no memory relation holds."""
    name = doc["parallel"].get("schedule")
    return name is not None and SCHEDULES[name].cost_aware


def _double_batch(doc: Doc) -> bool:
    doc["training"]["global_batch"] *= 2
    return True


def _next_zero(doc: Doc) -> bool:
    zero = doc["parallel"].get("zero", 0)
    doc["parallel"]["zero"] = zero + 1
    doc["parallel"].pop("zero_shard", None)
    return zero < 3 and not _adaptive_memory(doc)


def _double_micro_batch(doc: Doc) -> bool:
    """Twice the micro-batch, the global batch kept: the peak holds when the variant still has
    at least a pipeline's worth of microbatches (pp x vpp). With fewer, the whole batch is in
    flight either way, the same stash in total, and a larger microbatch's first backward frees
    a larger share of it before the first weight gradients land (seed 5454, draw 5: OPT-175B
    at pp 8, vpp 2 and 8 -> 4 microbatches, 2.3% lower, as the memory walk counts it). The
    count is a flush's (``training.pipeline_flushes`` splits the step's microbatches: seed 6801,
    draw 31, Mixtral at pp 4 in two flushes of 4 -> 2, 1.8% lower). A pipeline's worth is
    the schedule's chunks per stage, not ``parallel.vpp``: a V schedule runs two (seed 7801,
    draw 21: Mixtral 8x22B at pp 4 under zbv-fixed, 8 -> 4 microbatches, below the 2p - 1 its
    order is built for; at 8 the cool-down defers seven weight gradients, each holding its
    recomputed inputs under full recompute, at 4 one, 23.9% lower). A schedule that keeps a
    whole flush in flight (AFAB, GPipe) is in that case at any count (seed 9604, draw 4: GPT-NeoX
    20B under nanotron's AFAB on one stage, full recompute, 8 -> 4 microbatches, 1.1% lower: the
    16-bit weight gradients at the first backward's end sit on 7/8 of the stash, then on 3/4)."""
    # a cost-aware order is checked first: it plans with op times, costly to build twice
    if _adaptive_memory(doc) or _whole_flush_in_flight(doc):
        return False
    doc["training"]["micro_batch"] = doc["training"].get("micro_batch", 1) * 2
    try:
        ctx = build_context(scenario_from_dict(doc))
    except UserError:
        return True  # _simulate skips a refused variant
    return ctx.spec.m >= ctx.spec.p * ctx.schedule.chunks(ctx.spec)


def _whole_flush_in_flight(doc: Doc) -> bool:
    """Whether some stage of ``doc``'s schedule holds every microbatch of a flush at once."""
    try:
        ctx = build_context(scenario_from_dict(doc))
    except UserError:
        return False
    return max(peak_inflight(planned_orders(ctx))) >= ctx.spec.m * ctx.schedule.chunks(ctx.spec)


def _first_reduction_group(doc: Doc) -> bool:
    """Whether twice the data or context parallelism gives the gradients their first reduction
    group where the framework copies them into buckets (``dp.bucket_copies``: PyTorch DDP's
    buckets, a second copy of every gradient, exist only with a group to reduce over; nanotron
    wraps its model in DDP only then): the peak memory rises by design."""
    try:
        ctx = build_context(scenario_from_dict(doc))
    except UserError:
        return False
    return ctx.scenario.dp.bucket_copies and ctx.layout.dp * ctx.layout.cp == 1


def _double_degree(degree: str) -> Callable[[Doc], bool]:
    """Twice the tensor or context parallelism, on twice the GPUs (context parallelism: not
    where it gives the gradients their first reduction group, :func:`_first_reduction_group`)."""

    def edit(doc: Doc) -> bool:
        if degree == "cp" and _first_reduction_group(doc):
            return False
        doc["parallel"][degree] = doc["parallel"].get(degree, 1) * 2
        doc["cluster"]["gpus"] *= 2
        return not _adaptive_memory(doc)

    return edit


def _double_ep(doc: Doc) -> bool:
    """Twice the expert parallelism on the same GPUs: each rank holds half as many experts and
    routes as many tokens."""
    ep = doc["parallel"].get("ep", 1)
    if ep == 1 or _adaptive_memory(doc):  # a dense model, or experts whole on every rank
        return False
    doc["parallel"]["ep"] = 2 * ep
    return True


def _double_dp(doc: Doc) -> bool:
    """Twice the replicas, the same global batch: each holds half the microbatches and, under
    ZeRO, a smaller share of the states. (The step may well be shorter or longer.) Not where
    the replicas' first reduction group brings DDP's bucket copies (:func:`_first_reduction_group`)."""
    if _first_reduction_group(doc):
        return False
    doc["cluster"]["gpus"] *= 2
    return not _adaptive_memory(doc)


def _weak_scaling(doc: Doc, profile: Any) -> Doc | None:
    """Twice the replicas and twice the global batch: each GPU does the same work and, without
    ZeRO (whose optimizer step shrinks with the replicas), only its data-parallel reduction can
    change, over a group as large or larger. Not on a switchless mesh (AMD's Infinity Fabric,
    ``node.scale_up: mesh``): there a larger group inside a node runs its rings over more of
    each GPU's direct links (seed 9923: dp 2 -> 4 on MI355X, one link -> three, exposed DP
    1.64 -> 0.77 s), so the step may get shorter."""
    if doc["parallel"].get("zero", 0) != 0 or doc["parallel"].get("fsdp") or doc["parallel"].get("zero_shard"):
        return None
    if profile.node.scale_up == "mesh":
        return None
    out = copy.deepcopy(doc)
    out["cluster"]["gpus"] *= 2
    out["training"]["global_batch"] *= 2
    return out


def _sequence_parallel(doc: Doc) -> bool:
    """Megatron's sequence parallelism shards the norms' and dropouts' activations over TP.
    ``overlap.tp_comm``, inert without it, stays off: with it SP would also turn on
    TransformerEngine's userbuffers, 1-2 GiB that outweigh what it shards on a small stash
    (seed 5482: llama2-7b at tp 2, 14.09 GiB with them against 13.53 GiB without SP)."""
    if doc["parallel"].get("tp", 1) == 1 or doc["parallel"].get("sequence_parallel") or _adaptive_memory(doc):
        return False
    doc["parallel"]["sequence_parallel"] = True
    doc.setdefault("overlap", {})["tp_comm"] = False
    return True


def _offload_optimizer(doc: Doc) -> bool:
    if doc["training"].get("optimizer_offload") or _adaptive_memory(doc):
        return False
    doc["training"]["optimizer_offload"] = True
    return True


def _offload_more_activations(doc: Doc) -> bool:
    now = doc["training"].get("activation_offload_layers", 0)
    doc["training"]["activation_offload_layers"] = max(1, 2 * now)
    return not _adaptive_memory(doc)


def _longer_sequences(doc: Doc) -> bool:
    """Twice the sequence length, as many sequences: twice the tokens. (Half as many sequences
    may well be faster: larger GEMMs, fewer microbatches' fixed costs.)"""
    doc["training"]["seq_len"] *= 2
    return True


def _no_step_tail(doc: Doc) -> bool:
    """Without the host's eager end of the step (``training.step_tail: none``): a step can only
    get shorter, as the tail only ever waits beside the optimizer's kernels."""
    if doc["training"].get("step_tail") == "none":
        return False
    doc["training"]["step_tail"] = "none"
    return True


def _no_router_groups(doc: Doc) -> bool:
    """Uniform routing instead of group-limited (``model.router_groups`` / ``group_topk`` off): a
    DeepEP-family dispatch sends each token to at least as many GPUs or nodes, and the
    all-to-all dispatcher the same top_k copies, so a step can only get longer."""
    model = doc["model"] if isinstance(doc["model"], dict) else {"preset": doc["model"]}
    if "router_groups" in model:
        grouped = model["router_groups"]
    else:
        grouped = load_preset(model["preset"]).router_groups if "preset" in model else 0
    if not grouped:
        return False
    doc["model"] = {**model, "router_groups": 0, "group_topk": 0}
    return True


def _shorter_documents(doc: Doc) -> bool:
    """Packed documents half as long (``training.document_tokens``, from one document per
    sequence): each token attends over half the keys, so attention can only get cheaper. Only
    where packing runs (fused attention; a p2p ring under cp)."""
    training, parallel = doc["training"], doc["parallel"]
    if training.get("flash_attention") is False or parallel.get("cp", 1) > 1 and parallel.get("cp_comm", "p2p") != "p2p":
        return False
    now = training.get("document_tokens") or training["seq_len"]
    if now < 2:
        return False
    training["document_tokens"] = now // 2
    return True


def _double_layers(doc: Doc) -> bool:
    """Twice the transformer layers of the same model: every stage does more of the same work
    and keeps more of it."""
    model = doc["model"]
    section = dict(model) if isinstance(model, dict) else {"preset": model}
    if "preset" not in section:
        return False
    section["layers"] = 2 * (section.get("layers") or load_preset(section["preset"]).layers)
    doc["model"] = section
    return True


def _double_layers_memory(doc: Doc) -> bool:
    return _double_layers(doc) and not _adaptive_memory(doc)


def _ideal_network(doc: Doc) -> bool:
    doc["cluster"]["network"] = "ideal"
    return True


def _every_rank(doc: Doc) -> bool:
    """Every GPU simulated instead of one per stage (the symmetry shortcut), up to 64 GPUs."""
    doc.setdefault("simulation", {})["all_ranks"] = True
    return doc["cluster"]["gpus"] <= 64


def _with_straggler(doc: Doc, straggler: dict[str, Any]) -> Doc | None:
    """``doc`` with one known-slow part of the cluster; stragglers simulate every GPU, so only
    up to 64 GPUs."""
    if doc["cluster"]["gpus"] > 64:
        return None
    out = copy.deepcopy(doc)
    out.setdefault("simulation", {})["stragglers"] = [straggler]
    return out


def _slow_gpu(doc: Doc, _profile: Any) -> Doc | None:
    """The last GPU's kernels 1.3x longer."""
    return _with_straggler(doc, {"gpu": doc["cluster"]["gpus"] - 1, "compute": 1.3})


def _degraded_nic(doc: Doc, profile: Any) -> Doc | None:
    """The last node's NICs at half their rate (the profile as the scenario set it says how
    many GPUs a node holds); on one node no NIC is on any path."""
    per_node, gpus = profile.node.gpus_per_node, doc["cluster"]["gpus"]
    return _with_straggler(doc, {"node": gpus // per_node - 1, "nic": 0.5}) if gpus > per_node else None


_RECOMPUTE = ["none", "selective", "full"]


def _more_recompute(doc: Doc) -> bool:
    now = doc["training"].get("recompute", "none")
    if now not in _RECOMPUTE[:-1] or _adaptive_memory(doc):
        return False
    doc["training"]["recompute"] = _RECOMPUTE[_RECOMPUTE.index(now) + 1]
    doc["training"].pop("recompute_num_layers", None)
    return True


def _more_recompute_memory(doc: Doc) -> bool:
    """As :func:`_more_recompute`, but not from none to selective under FP8 attention: the
    checkpointed core attention keeps its 16-bit Q, K and V (Megatron-Core checkpoints the call
    on its inputs), where FP8 attention unrecomputed keeps 1-byte copies of them and of its
    output, so selective recomputation can keep more (metamorphic seed 8501: +2.2% on a GQA model);
    nor where the fine-grained offload moves the attention's tensors: Megatron-Core offloads
    ``core_attn`` only when the core attention is not checkpointed (``attention.py``: the
    checkpointed call comes first), so recomputing it keeps Q, K and V on the GPU that the
    offload had moved (metamorphic seed 9953: +4.0%, Qwen2.5 7B at 32K with core_attn offloaded)."""
    training = doc["training"]
    if training.get("recompute", "none") == "none":
        if training.get("fp8_attention") or {"core_attn", "attn_proj"} & set(training.get("offload_modules", ())):
            return False
    return _more_recompute(doc)


def _more_recompute_time(doc: Doc) -> bool:
    """As :func:`_more_recompute`, but not with activation offload (``training.
    activation_offload_layers``, ``offload_modules``): recomputation shrinks what the layers copy
    to the host, so where those copies bind it shortens the step (metamorphic seed 9933: OLMo 2
    7B at 32K tokens without flash attention, four layers offloaded on GB200, none -> selective
    drops the attention scores from the copies: 45 s of exposed host copies -> 0.03 s)."""
    training = doc["training"]
    if training.get("activation_offload_layers") or training.get("offload_modules"):
        return False
    return _more_recompute(doc)


RELATIONS = [
    Relation("compute x1.5", _patched(lambda p: {"gpu": {"peak_tflops": {k: v * 1.5 for k, v in p.gpu.peak_tflops.items()}}}), "step_s", False),  # noqa: E501
    Relation("hbm x1.5", _patched(lambda p: {"gpu": {"hbm_tbps": p.gpu.hbm_tbps * 1.5}}), "step_s", False),
    Relation("nvlink x1.5", _patched(lambda p: {"node": {"nvlink_GBps": p.node.nvlink_GBps * 1.5}}), "step_s", False),
    Relation("nic x1.5", _patched(lambda p: {"node": {"nic_gbps": p.node.nic_gbps * 1.5}}), "step_s", False),
    Relation("nic latency x0.5", _patched(lambda p: {"node": {"nic_latency_us": p.node.nic_latency_us * 0.5}}), "step_s", False),  # noqa: E501
    Relation("host x0.5", _patched(_faster_host), "step_s", False),
    Relation("host link x1.5", _host_link, "step_s", False),
    Relation("global batch x2", _edit(_double_batch), "per_sequence_s", False),
    Relation("zero +1", _edit(_next_zero), "peak_bytes", False),
    Relation("recompute memory", _edit(_more_recompute_memory), "peak_bytes", False),
    Relation("recompute time", _edit(_more_recompute_time), "step_s", True),
    Relation("micro-batch x2 memory", _edit(_double_micro_batch), "peak_bytes", True),
    Relation("tp x2 memory", _edit(_double_degree("tp")), "peak_bytes", False),
    Relation("dp x2 memory", _edit(_double_dp), "peak_bytes", False),
    Relation("weak scaling x2", _weak_scaling, "step_s", True),
    Relation("cp x2 memory", _edit(_double_degree("cp")), "peak_bytes", False),
    Relation("ep x2 memory", _edit(_double_ep), "peak_bytes", False),
    Relation("sequence parallel memory", _edit(_sequence_parallel), "peak_bytes", False),
    Relation("optimizer offload memory", _edit(_offload_optimizer), "peak_bytes", False),
    Relation("activation offload memory", _edit(_offload_more_activations), "peak_bytes", False),
    Relation("sequence x2 time", _edit(_longer_sequences), "step_s", True),
    Relation("layers x2 time", _edit(_double_layers), "step_s", True),
    Relation("documents /2 time", _edit(_shorter_documents), "step_s", False),
    Relation("no step tail time", _edit(_no_step_tail), "step_s", False),
    Relation("no offload cap time", _edit(_no_offload_cap), "step_s", False),
    Relation("no router groups time", _edit(_no_router_groups), "step_s", True),
    Relation("layers x2 memory", _edit(_double_layers_memory), "peak_bytes", True),
    Relation("ideal network", _edit(_ideal_network), "step_s", False),
    Relation("every rank", _edit(_every_rank), "step_s", None),
    Relation("slow gpu", _slow_gpu, "step_s", True),
    Relation("degraded nic", _degraded_nic, "step_s", True),
]


class InvalidTimeline(Exception):
    """A simulation's events break the timeline's rules (one event at a time per stream): what
    ``run --out`` refuses to write."""


def _simulate(doc: Doc, timeout_s: int) -> tuple[Outcome, Any] | None:
    """The outcome and the profile as the scenario changed it, or None when the scenario is
    refused or runs too long; :class:`InvalidTimeline` when its events are not a timeline."""
    try:
        with time_limit(timeout_s):
            ctx = build_context(scenario_from_dict(doc))
            result = simulate(ctx)
    except (UserError, Timeout):
        return None
    try:
        validate_events(result.events)
    except UserError as err:
        raise InvalidTimeline(err.one_line()) from None
    summary = result.summary
    step = float(summary["step_time_s"])
    outcome = Outcome(step, step / doc["training"]["global_batch"], float(summary["peak_memory_bytes"]["max"]))
    return outcome, ctx.profile


def broken(relation: Relation, base: Outcome, variant: Outcome, tolerance: float) -> str | None:
    """A one-line finding when ``variant`` moved against ``relation``, else None."""
    before, after = getattr(base, relation.metric), getattr(variant, relation.metric)
    fell, grew = after < before * (1 - tolerance), after > before * (1 + tolerance)
    wrong = {True: fell, False: grew, None: fell or grew}[relation.may_grow]
    if not wrong:
        return None
    return f"{relation.name}: {relation.metric} {before:.6g} -> {after:.6g} ({after / before - 1:+.1%})"


def _attempt(doc: Doc, timeout: int) -> tuple[tuple[Outcome, Any] | None, str | None]:
    """``_simulate(doc)``, or None and what went wrong: an invalid timeline or a crash (a
    traceback is a finding, not the end of the run)."""
    try:
        return _simulate(doc, timeout), None
    except InvalidTimeline as err:
        return None, f"invalid timeline: {err}"
    except Exception as err:  # noqa: BLE001 - a traceback is a finding, not the end
        return None, f"crashed: {type(err).__name__}: {err}"


def _write_finding(
    out: Path, seed: int, i: int, name: str, line: str, doc: Doc, variant: Doc | None
) -> None:
    """Write the scenario of a finding (a variant's with its baseline in a comment) into
    ``out``, named after the seed, the draw ``i`` and ``name``, and print where with ``line``."""
    out.mkdir(parents=True, exist_ok=True)
    # a relation's name may hold a slash ("documents /2 time"): one file name, no subfolder
    path = out / f"seed{seed}-{i}-{re.sub(r'[^A-Za-z0-9.+-]+', '_', name)}.yaml"
    body = f"# baseline:\n{''.join(f'#   {x}' + chr(10) for x in yaml.safe_dump(doc).splitlines())}" if variant else ""
    path.write_text(f"# {line}\n{body}{yaml.safe_dump(variant or doc)}")
    print(f"{path}: {line}", flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=50, help="random scenarios drawn (default 50)")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per simulation (default 60)")
    parser.add_argument("--tolerance", type=float, default=0.005, help="allowed move the wrong way (default 0.005)")
    parser.add_argument("--only", help="comma-separated: run only the relations whose name contains one")
    parser.add_argument("--out", type=Path, default=Path("metamorphic-findings"))
    parser.add_argument("--pairs", action="store_true", help="only layouts with F&B pairs (DualPipe, overlap.ep_comm)")
    parser.add_argument("--simulable", action="store_true", help="draw again until a layout is accepted (as fuzz_scenarios)")
    args = parser.parse_args(argv)
    wanted = args.only.split(",") if args.only else [""]
    relations = [r for r in RELATIONS if any(w in r.name for w in wanted)]
    rng = random.Random(args.seed)
    checked = variants = findings = 0
    finding = partial(_write_finding, args.out, args.seed)

    with progress_bar("metamorphic", args.count) as advance:
        for i in range(args.count):
            doc = draw_scenario(rng, args.pairs, args.simulable)
            baseline, problem = _attempt(doc, args.timeout)
            if problem:
                findings += 1
                finding(i, "baseline", problem, doc, None)
            if baseline is not None:
                checked += 1
                base, profile = baseline
                for relation in relations:
                    variant = relation.variant(doc, profile)
                    if variant is None:
                        continue
                    result, problem = _attempt(variant, args.timeout)
                    if problem:
                        findings += 1
                        finding(i, relation.name, f"{relation.name}: {problem}", doc, variant)
                    if result is None:  # refused, too long, or the problem above
                        continue
                    variants += 1
                    line = broken(relation, base, result[0], args.tolerance)
                    if line:
                        findings += 1
                        finding(i, relation.name, line, doc, variant)
            advance(f"{findings} findings")
    print(f"{args.count} drawn, {checked} simulated, {variants} variants checked, {findings} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
