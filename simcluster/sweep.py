"""Layout sweeps: simulate every combination of a few layout axes and rank the results.

A sweep starts from one scenario and varies *axes* (``hardware``, ``gpus``, ``tp``, ``pp``,
``cp``, ``ep``, ``vpp``, ``zero``, ``schedule``, ``activation_limit`` (v-auto's),
``micro_batch``, ``recompute``, ``precision``, ``sequence_parallel``); every other field keeps
the scenario's value. The data-parallel degree is derived from the GPU count (dp = gpus / (tp x
pp x cp)), so a swept scenario's
``parallel.dp`` is dropped, and so is ``parallel.layers_per_stage`` when ``pp`` or ``vpp`` is
swept (a split written for one pipeline depth does not fit another). Sweeping ``hardware`` and
``gpus`` compares clusters one might buy: the global batch stays, so more GPUs mean more data
parallelism or fewer microbatches each.

Each combination is checked the way ``simcluster run`` checks a scenario; one that cannot run
(tp not dividing the heads, dp x tp x pp x cp != GPUs, a batch that does not divide, ...) is
*skipped* with that one-line reason. The others are simulated, also those that do not fit in
memory: they are ranked after every layout that fits, each group by tokens/s per GPU (or, with
``fitting_only``, skipped unsimulated by the memory walk, field :data:`MEMORY_FIELD`).
Sweeping ``vpp`` without ``schedule`` moves a 1F1B scenario to the interleaved schedule for
vpp > 1 (and an interleaved one to 1F1B for vpp = 1), as Megatron does; sweeping both runs a
schedule without virtual stages once, at vpp = 1.
"""

from __future__ import annotations

import copy
import itertools
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from simcluster.budget import training_budget
from simcluster.cost import Prices, usd_per_million_tokens
from simcluster.cost_hint import cost_hint
from simcluster.engine.breakdown import largest_besides_gemm
from simcluster.errors import InternalError, UserError, one_line
from simcluster.executors import Executor

# axis -> (scenario section, field, value type)
AXES: dict[str, tuple[str, str, type]] = {
    "hardware": ("cluster", "hardware", str),
    "gpus": ("cluster", "gpus", int),
    "tp": ("parallel", "tp", int),
    "pp": ("parallel", "pp", int),
    "cp": ("parallel", "cp", int),
    "ep": ("parallel", "ep", int),
    "etp": ("parallel", "etp", int),
    "vpp": ("parallel", "vpp", int),
    "zero": ("parallel", "zero", int),
    "zero_shard": ("parallel", "zero_shard", int),
    "schedule": ("parallel", "schedule", str),
    "activation_limit": ("parallel", "activation_limit", float),
    "sequence_parallel": ("parallel", "sequence_parallel", bool),
    "micro_batch": ("training", "micro_batch", int),
    "recompute": ("training", "recompute", str),
    "precision": ("training", "precision", str),
    "ep_comm": ("overlap", "ep_comm", bool),
    "dispatcher": ("moe", "dispatcher", str),
    "dispatch_sms": ("moe", "dispatch_sms", int),
    "optimizer_offload": ("training", "optimizer_offload", float),
    "activation_offload_layers": ("training", "activation_offload_layers", int),
    "pipeline_flushes": ("training", "pipeline_flushes", int),
}
# axes whose "auto" means powers of two up to the GPU count
_AUTO_AXES = ("tp", "pp", "cp", "ep")
_DP_AXES = ("gpus", "tp", "pp", "cp")
_STAGE_AXES = ("pp", "vpp")
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def parse_axis(axis: str, text: str, gpus: int) -> list[Any]:
    """Values of one axis from its command-line text: a comma-separated list (duplicates
    dropped, order kept) or ``auto`` for tp/pp/cp/ep (1, 2, 4, ... up to ``gpus``)."""
    flag = "--" + axis.replace("_", "-")
    _, _, kind = AXES[axis]
    text = text.strip()
    if text == "auto":
        if axis not in _AUTO_AXES:
            raise UserError(flag, "'auto' is only for --tp, --pp, --cp and --ep; list the values")
        return [2**k for k in range(gpus.bit_length()) if 2**k <= gpus]
    values: list[Any] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            raise UserError(flag, f"'{text}' has an empty item; give a list like 1,2,4")
        words = WORDS.get(axis, ())
        value = item.lower() if item.lower() in words else _convert(flag, item, kind, words)
        if axis in _CHOICE_AXES:
            _check_choice(flag, axis, item)
        if value not in values:
            values.append(value)
    return values


#: the words a numeric axis takes besides its numbers, as its scenario field does (written as
#: given, lower-case): parallel.zero_shard's node, PyTorch FSDP1's HYBRID_SHARD default (the
#: data-parallel ranks of one node). tests/test_sweep.py holds this to the scenario schema.
WORDS: dict[str, tuple[str, ...]] = {"zero_shard": ("node",)}


def _convert(flag: str, item: str, kind: type, words: tuple[str, ...] = ()) -> Any:
    """``item`` as the axis's number (``words``: the words the axis also takes, named when an
    item is neither)."""
    alike = "".join(f" or {w}" for w in words)
    if kind is int:
        try:
            value = int(item)
        except ValueError:
            like = ",".join(["1", "2", "4", *words])
            raise UserError(flag, f"'{item}' is not a whole number{alike}; give a list like {like}") from None
        if value < 0 or (value == 0 and flag not in ("--zero", "--activation-offload-layers")):
            raise UserError(flag, f"{value} is out of range; give positive values")
        return value
    if kind is float:
        try:
            share = float(item)
        except ValueError:
            like = ",".join(["0", "0.5", "1", *words])
            raise UserError(flag, f"'{item}' is not a number{alike}; give a list like {like}") from None
        if not 0.0 <= share <= 1.0:
            raise UserError(flag, f"{share} is out of range; give shares from 0 to 1")
        return share
    if kind is bool:
        low = item.lower()
        if low in _TRUE or low in _FALSE:
            return low in _TRUE
        raise UserError(flag, f"'{item}' is not true or false")
    return item


#: the choice axes whose values are names: a misspelt one is an error before anything runs,
#: not a row skipped as 'cannot run' among layouts that merely do not fit the cluster
_CHOICE_AXES = ("schedule", "recompute", "precision", "dispatcher")


def _check_choice(flag: str, axis: str, item: str) -> None:
    """Refuse a value the scenario schema does not know (after its spellings, ``FP8-CS`` is
    fp8), naming the flag, a close spelling and the choices."""
    from typing import get_args

    from pydantic import BaseModel

    from simcluster.errors import did_you_mean
    from simcluster.scenario import Scenario
    from simcluster.schedules import SCHEDULES
    from simcluster.spellings import normalise_spellings

    section, field, _ = AXES[axis]
    value = normalise_spellings({section: {field: item}})[section][field]
    if axis == "schedule":
        choices: tuple[str, ...] = tuple(sorted(SCHEDULES))
    else:  # the field's Literal in its section's model, whichever section the axis sets
        model = Scenario.model_fields[section].annotation
        assert isinstance(model, type) and issubclass(model, BaseModel), section
        choices = get_args(model.model_fields[field].annotation)
    if value not in choices:
        raise UserError(
            flag, f"unknown value '{item}'{did_you_mean(item, choices)}; choose from {', '.join(choices)}"
        )


@dataclass(frozen=True)
class Candidate:
    """One combination of axis values and the scenario mapping it gives."""

    settings: tuple[tuple[str, Any], ...]
    scenario: dict[str, Any]

    @property
    def label(self) -> str:
        """The swept settings, e.g. ``tp=2 pp=4 micro_batch=1``."""
        return " ".join(f"{axis}={show_value(value)}" for axis, value in self.settings)


def show_value(value: Any) -> str:
    """An axis value as typed on the command line (booleans lower-case; '-' for a setting the
    row's schedule does not take)."""
    if value is None:
        return "-"
    if isinstance(value, list):
        return "[" + ",".join(show_value(v) for v in value) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def candidates(base: dict[str, Any], axes: dict[str, list[Any]]) -> list[Candidate]:
    """Every combination of ``axes`` applied to the scenario mapping ``base``, in the order of
    :data:`AXES` with each axis's values in the order given."""
    unknown = sorted(set(axes) - set(AXES))
    if unknown:
        raise UserError(unknown[0], f"not a sweep axis; use one of {', '.join(AXES)}")
    names = [a for a in AXES if a in axes]
    if not names:
        raise UserError("sweep", "no axis to sweep; give at least one, e.g. --tp 1,2,4,8")
    out, seen = [], set()
    for values in itertools.product(*(axes[a] for a in names)):
        if "schedule" in names and ("vpp" in names or "activation_limit" in names):
            if "vpp" in names:
                values = _one_chunk_where_no_vpp(names, values)
            if "activation_limit" in names:
                values = _no_limit_but_v_auto(names, values)
            if values in seen:
                continue  # 1F1B at vpp 1 (and without a limit) once, not once per swept value
            seen.add(values)
        data = _with_settings(base, names, values)
        settings = tuple(zip(names, values, strict=True))
        cand = Candidate(settings, data)
        data["name"] = f"{base.get('name', 'scenario')} [{cand.label}]"
        out.append(cand)
    return out


def _with_settings(base: dict[str, Any], names: list[str], values: tuple[Any, ...]) -> dict[str, Any]:
    """A copy of the scenario mapping ``base`` with one combination of the swept axes written
    in, and the settings they replace (a fixed dp, a stage split, grad_accum) taken out."""
    data = copy.deepcopy(base)
    # the global batch stays; gradient accumulation steps follow from it per layout
    data.get("training", {}).pop("grad_accum", None)
    parallel = data.setdefault("parallel", {})
    if any(a in names for a in _DP_AXES):
        parallel.pop("dp", None)
    if any(a in names for a in _STAGE_AXES):
        parallel.pop("layers_per_stage", None)
    for axis, value in zip(names, values, strict=True):
        section, key, _ = AXES[axis]
        if value is None:  # not a setting of this row's schedule (_no_limit_but_v_auto)
            data.get(section, {}).pop(key, None)
            continue
        data.setdefault(section, {})[key] = value
    if "vpp" in names and "schedule" not in names:
        _schedule_for_vpp(data["parallel"])
    return data


def _one_chunk_where_no_vpp(names: list[str], values: tuple[Any, ...]) -> tuple[Any, ...]:
    """With both swept, vpp is a setting of the schedules that take it: a schedule with a fixed
    chunk count (1F1B, ZB, the V schedules) runs at vpp 1 whatever vpp the row came with, so
    ``--schedule 1f1b,interleaved --vpp 2,4`` gives 1F1B once beside interleaved at 2 and 4
    instead of skipping 1F1B as 'vpp > 1 needs interleaved'."""
    from simcluster.schedules import get_schedule
    from simcluster.spellings import schedule_spelled

    row = dict(zip(names, values, strict=True))
    name = schedule_spelled(row["schedule"])
    try:
        uses_vpp = get_schedule(name).uses_vpp
    except UserError:
        return values  # an unknown schedule is the candidate's own error
    return values if uses_vpp else tuple(1 if a == "vpp" else v for a, v in row.items())


def _no_limit_but_v_auto(names: list[str], values: tuple[Any, ...]) -> tuple[Any, ...]:
    """With both swept, activation_limit is a setting of v-auto alone (the only schedule that
    reads it: inert.py's rule): another schedule's row carries none (None: the key unwritten,
    the base scenario's too), so ``--schedule 1f1b,v-auto --activation-limit 0.5,1`` runs 1F1B
    once instead of once per limit."""
    from simcluster.spellings import schedule_spelled

    row = dict(zip(names, values, strict=True))
    name = schedule_spelled(row["schedule"])
    return values if name == "v-auto" else tuple(None if a == "activation_limit" else v for a, v in row.items())


def _schedule_for_vpp(parallel: dict[str, Any]) -> None:
    """Virtual stages swept over a one-chunk schedule run Megatron's interleaved 1F1B, and one
    chunk over the interleaved schedule runs 1F1B (what each vpp means there); a schedule that
    takes vpp as it is (looped-bfs, the V schedules' fixed two) is left alone."""
    from simcluster.schedules import get_schedule
    from simcluster.spellings import schedule_spelled

    name = schedule_spelled(parallel.get("schedule", "1f1b"))
    try:
        uses_vpp = get_schedule(name).uses_vpp
    except UserError:
        return  # an unknown schedule is the candidate's own error
    vpp = parallel.get("vpp", 1)
    if vpp > 1 and not uses_vpp and name == "1f1b":
        parallel["schedule"] = "interleaved"
    elif vpp == 1 and name == "interleaved":
        parallel["schedule"] = "1f1b"


@dataclass(frozen=True)
class SweepRow:
    """The outcome of one candidate: its simulated figures, or why it was skipped."""

    candidate: Candidate
    summary: dict[str, Any] | None
    skipped: str | None = None
    wall_s: float = 0.0  # the simulation's; 0 for a layout the checks skipped unsimulated

    @property
    def ran(self) -> bool:
        return self.summary is not None

    @property
    def fits(self) -> bool:
        return bool(self.summary and self.summary["fits_in_memory"])

    def to_dict(self, prices: Prices | None = None, tokens: float | None = None) -> dict[str, Any]:
        """One flat record (the CSV/JSON row); with ``prices``, also dollars per 1M tokens, and
        with ``tokens`` the training run's days, GPU-hours (and dollars), ``run_*``."""
        rec: dict[str, Any] = {axis: value for axis, value in self.candidate.settings}
        rec["label"] = self.candidate.label
        rec["skipped"] = self.skipped
        s = self.summary
        if s is None:
            return rec
        rec.update(
            layout=s["layout"],
            dp=s["parallel"]["dp"],
            step_time_s=s["step_time_s"],
            tokens_per_s=s["tokens_per_s"],
            tokens_per_s_per_gpu=s["tokens_per_s_per_gpu"],
            model_tflops_per_gpu=s["model_tflops_per_gpu"],
            mfu=s["mfu"],
            bubble_fraction=s["bubble_fraction"],
            microbatches=s["microbatches"],
            exposed_comm_s=sum(s["exposed_comm_s"].values()),
            peak_memory_bytes=s["peak_memory_bytes"]["max"],
            capacity_bytes=s["capacity_bytes"],
            fits_in_memory=s["fits_in_memory"],
            # the shorter steps the figures were read off (steady_state.py), as validate's JSON
            # lists them; None: simulated whole
            extrapolated_from_microbatches=s.get("extrapolated_from_microbatches"),
        )
        for kind, seconds in sorted(s["exposed_comm_s"].items()):
            rec[f"exposed_{kind}_s"] = seconds
        rec["largest_besides_gemm"], rec["largest_besides_gemm_share"] = largest_besides_gemm(s)
        if prices is not None:
            rec["usd_per_gpu_hour"] = prices.of(s["hardware"])  # the price the cost was taken at
            rec["usd_per_million_tokens"] = usd_per_million_tokens(s, prices)
        if tokens is not None:
            rec.update({f"run_{k}": v for k, v in training_budget(s, tokens, prices).record().items()})
        return rec


#: the field a layout left out by ``fitting_only`` is reported under
MEMORY_FIELD = "memory"


def check(cand: Candidate, hardware: str | None, fitting_only: bool = False) -> str | None:
    """Why ``cand`` cannot run (the one-line error ``simcluster run`` would print), or None.
    With ``fitting_only``, also a layout that the memory walk (``simcluster memory``) puts over
    the GPU's memory: the walk over the schedule's op order is the simulated peak, except with
    F&B pairs, where it is an upper bound (``memory_report.timeline_fault``), so a layout with
    pairs is simulated whatever the walk says; nothing that would fit is left out."""
    from simcluster.context import build_context
    from simcluster.scenario import scenario_from_dict

    try:
        ctx = build_context(scenario_from_dict(cand.scenario), hardware)
        return _over_memory(ctx) if fitting_only else None
    except UserError as exc:
        return exc.one_line()


def _over_memory(ctx: Any) -> str | None:
    from simcluster.engine.plan import planned_orders
    from simcluster.memory_report import memory_by_stage
    from simcluster.units import format_bytes

    peak = max(m.total_bytes for m in memory_by_stage(ctx))
    # pairs asked about only for a layout over memory: a cost-aware schedule plans again
    if peak <= ctx.capacity_bytes or any(op.overlap for ops in planned_orders(ctx) for op in ops):
        return None
    return (
        f"{MEMORY_FIELD}: peak {format_bytes(peak)} per GPU exceeds {format_bytes(ctx.capacity_bytes)} "
        "(simcluster memory; --fitting-only)"
    )


def simulate_candidate(job: tuple[Candidate, str | None, bool]) -> SweepRow:
    """Simulate one (already checked) candidate; a worker-process entry point. A step of many
    microbatches comes from a few shorter ones where that is exact (``steady_state.py``)."""
    from simcluster.scenario import scenario_from_dict
    from simcluster.steady_state import step_summary

    cand, hardware, extrapolate = job
    wall = time.perf_counter()
    try:
        summary = step_summary(scenario_from_dict(cand.scenario), hardware=hardware, extrapolate=extrapolate)
    except UserError as exc:  # a check that only the engine makes
        return SweepRow(cand, None, exc.one_line(), time.perf_counter() - wall)
    except InternalError as exc:  # one layout's engine fault must not end the sweep
        return SweepRow(cand, None, f"internal: {one_line(exc)}", time.perf_counter() - wall)
    return SweepRow(cand, summary, None, time.perf_counter() - wall)


def run_sweep(
    cands: Sequence[Candidate],
    hardware: str | None = None,
    jobs: int = 1,
    progress: Callable[[SweepRow], None] | None = None,
    prices: Prices | None = None,
    executor: Executor | None = None,
    fitting_only: bool = False,
    extrapolate: bool = True,
) -> list[SweepRow]:
    """Check every candidate, simulate the runnable ones (``jobs`` > 1: in worker processes;
    ``executor``: wherever it runs them, a Dask cluster say) and return all rows ranked by
    :func:`rank` (by cost per token with ``prices``). ``fitting_only`` skips, unsimulated, the
    layouts the memory walk puts over the GPU's memory (:func:`check`). ``extrapolate``: a long
    step may come from shorter ones (``steady_state.py``)."""
    rows: list[SweepRow] = []
    runnable = []
    for cand in cands:
        reason = check(cand, hardware, fitting_only)
        if reason is None:
            runnable.append(cand)
        else:
            rows.append(SweepRow(cand, None, reason))
            if progress:
                progress(rows[-1])
    executor = executor or Executor("processes", jobs)
    if executor.kind != "processes" or executor.workers > 1:
        # longest first (as validate runs its cases), so a slow layout does not end up alone at
        # the tail and the first estimates of the time left err long, not short
        runnable.sort(key=lambda c: -cost_hint(c.scenario, extrapolate))
    work = [(c, hardware, extrapolate) for c in runnable]
    for row in executor.map_unordered(simulate_candidate, work):
        rows.append(row)
        if progress:
            progress(row)
    return rank(rows, prices)


def rank(rows: Sequence[SweepRow], prices: Prices | None = None) -> list[SweepRow]:
    """Layouts that fit first, then those that do not, each by tokens/s per GPU (highest
    first: the fewest GPU-seconds per token, also across cluster sizes and hardware) or, with
    ``prices``, by dollars per million tokens (cheapest first; unpriced rows after the priced
    ones); skipped candidates last. Ties break on the label, so the order is deterministic."""

    def key(row: SweepRow) -> tuple[int, int, float, str]:
        if row.summary is None:
            return (2, 0, 0.0, row.candidate.label)
        fit = 0 if row.fits else 1
        if prices is not None:
            usd = usd_per_million_tokens(row.summary, prices)
            if usd is not None:
                return (fit, 0, usd, row.candidate.label)
            return (fit, 1, -row.summary["tokens_per_s_per_gpu"], row.candidate.label)
        return (fit, 0, -row.summary["tokens_per_s_per_gpu"], row.candidate.label)

    return sorted(rows, key=key)


def skip_reasons(rows: Sequence[SweepRow]) -> list[tuple[str, int, str]]:
    """(field, count, first message) per reason that made candidates skip, most common first.

    A reason is its field and its message with the numbers taken out: 'not divisible by
    dp*micro_batch = 3*1 = 3' and '= 6*1 = 6' are one reason, 'needs microbatches divisible by
    pp=3' under the same field another (grouped by field alone, one example hid the other)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        if row.skipped:
            field = row.skipped.split(":", 1)[0]
            shape = re.sub(r"\d+(\.\d+)?", "#", row.skipped)
            groups.setdefault((field, shape), []).append(row.skipped)
    return sorted(
        ((f, len(msgs), msgs[0]) for (f, _), msgs in groups.items()), key=lambda t: (-t[1], t[0])
    )
