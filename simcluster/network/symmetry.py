"""The symmetry shortcut: simulate only the representative group's flows.

Groups of one call (e.g. the DP groups of every TP rank of a stage) are translates of each
other, and an algorithm expands them into transfers in the same order, so transfer j of every
group is a "twin" of the representative's transfer j and moves at the same rate. On each link of
the representative's paths we count how many twins of each j cross it; the representative's flow
j then loads that link with that count. The count table is built once per distinct group set
and cached, so a call costs O(representative transfers), not O(groups).
"""

from __future__ import annotations

from dataclasses import dataclass

from simcluster.network.algorithms import Plan


@dataclass(frozen=True)
class FlowSpec:
    """A representative flow: bytes = fraction x S; per-link copy counts."""

    fraction: float
    links: tuple[int, ...]
    coeffs: tuple[float, ...]


def explicit_specs(plan: Plan) -> list[FlowSpec]:
    """One spec per transfer of one group (identical transfers merged into a count)."""
    merged: dict[tuple[tuple[int, ...], float], int] = {}
    for t in plan.transfers:
        if t.links and t.fraction > 0:
            key = (t.links, t.fraction)
            merged[key] = merged.get(key, 0) + 1
    return [FlowSpec(frac, links, (float(m),) * len(links)) for (links, frac), m in merged.items()]


def symmetric_specs(plans: list[Plan]) -> list[FlowSpec]:
    """Representative flows (plans[0]) loaded with the twins of every plan on their links."""
    rep = plans[0].transfers
    counts = _twin_counts(plans)
    # Identical representative transfers are merged; their twins' counts add up.
    merged: dict[tuple[tuple[int, ...], float], dict[int, int]] = {}
    for j, t in enumerate(rep):
        if not t.links or t.fraction <= 0:
            continue
        acc = merged.setdefault((t.links, t.fraction), {})
        for link, c in counts[j].items():
            acc[link] = acc.get(link, 0) + c
    out = []
    for (_, frac), acc in merged.items():
        links = tuple(sorted(acc))
        out.append(FlowSpec(frac, links, tuple(float(acc[k]) for k in links)))
    return out


def _twin_counts(plans: list[Plan]) -> list[dict[int, int]]:
    """Per representative transfer j (plans[0]'s), how many twins j of every plan cross each
    link of the representative's paths."""
    rep = plans[0].transfers
    rep_links = {link for t in rep for link in t.links}
    counts: list[dict[int, int]] = [{} for _ in rep]
    for plan in plans:
        if len(plan.transfers) != len(rep):
            # a group of another shape (planner._shapes): its transfers do not pair with the
            # representative's one to one, so its load on shared links is not counted
            continue
        for j, t in enumerate(plan.transfers):
            cj = counts[j]
            for link in t.links:
                if link in rep_links:
                    cj[link] = cj.get(link, 0) + 1
    return counts


def lockstep(specs: list[FlowSpec] | tuple[FlowSpec, ...]) -> tuple[FlowSpec, ...]:
    """Merge one group's transfers into a single flow that progresses in lockstep.

    NCCL moves a collective in chunked steps that wait for the slowest peer, so its transfers
    advance together and the collective ends at its bottleneck. One flow whose per-link load is
    the sum of fraction x copies of its transfers models exactly that (same bytes on every
    link, same time alone), and costs one event per collective instead of one per transfer.
    """
    if len(specs) <= 1:
        return tuple(specs)
    load: dict[int, float] = {}
    for s in specs:
        for link, c in zip(s.links, s.coeffs, strict=True):
            load[link] = load.get(link, 0.0) + c * s.fraction
    links = tuple(sorted(load))
    return (FlowSpec(1.0, links, tuple(load[lk] for lk in links)),)
