"""Published measurements as validation cases: load, simulate, compare (the summaries are
:mod:`simcluster.validate_report`'s).

A cases file (YAML) has a top-level ``cases:`` list; each case is
``{name, source, scenario, measured: {METRIC: value}}`` plus optional ``family`` (a label for
per-family tables; default: the file's stem), ``published`` (the raw figures the measured value
was derived from, kept for audit) and ``compare: {group, label}`` (cases of one group are
checked for a schedule ordering, e.g. the Zero Bubble table rows), ``slow: true`` (the
simulation takes more than ~30 s; ``quick`` runs skip it) and ``peak_memory_gib`` (the
per-GPU peak memory the source published, compared with the simulated peak on the side: it
is not part of the metric's error). METRIC is one of :data:`METRICS` (other spellings and
units are read by :mod:`simcluster.measured`); the error is ``(predicted - measured) / measured``.

A case that is malformed, whose scenario is invalid or whose simulation fails is reported with
its error and counted in ``failed``; the others still run. Keys a case does not know (notes, a
URL) are named in its note and otherwise ignored (a close misspelling of ``set``, ``flops``,
``scenario`` or ``measured`` fails the case: it would score another comparison); only ``scenario`` and ``measured`` are
required. A file that is not YAML or has no ``cases:`` list raises :class:`UserError`.
"""

from __future__ import annotations

import difflib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from simcluster import yamlio
from simcluster.cost_hint import cost_hint
from simcluster.data import data_dir
from simcluster.errors import UserError
from simcluster.executors import Executor
from simcluster.key_aliases import normalise_keys
from simcluster.measured import METRICS, Measured, positive_number, read_measured, split_memory
from simcluster.nodes import expand_nodes
from simcluster.paths import anchor_paths
from simcluster.scenario.loading import drop_nulls, value_at
from simcluster.scenario.misplaced import relocate
from simcluster.token_counts import expand_seq_len

__all__ = ["METRICS"]

_CASE_KEYS = {
    "name", "source", "family", "published", "compare", "slow", "scenario", "measured",
    "peak_memory_gib", "flops", "set",
}
#: optional case keys that change what is simulated or how it is scored: a close misspelling of
#: one is an error, where one of the others (peak_memory_gib, family, ...) is noted and the case
#: runs (scenario and measured are required: a misspelling of them fails the required check)
_SCORING_KEYS = {"set", "flops"}
#: metrics counted in model FLOPs, which a case's ``flops:`` convention rescales
_FLOP_METRICS = ("mfu", "model_tflops_per_gpu")


@dataclass(frozen=True)
class Case:
    """One published measurement and the scenario that reproduces its setup."""

    name: str
    source: str
    family: str
    metric: str
    measured: float
    scenario: dict[str, Any]
    published: dict[str, Any] = field(default_factory=dict)
    group: str = ""
    label: str = ""
    slow: bool = False
    peak_memory_gib: float | None = None
    #: how the source counts FLOPs (flops.FLOP_CONVENTIONS, or ``hardware``: recomputation
    #: included): an MFU or TFLOP/s case is compared in the source's own count
    flops: str = "megatron"
    note: str = ""  # how ``measured:`` was read when it was not one canonical figure
    problem: str = ""  # why a malformed case cannot run (it fails alone)
    #: keys its scenario (or set:) writes as null and nothing sets again: unwritten, as
    #: scenario_from_dict reads a null, and named as nulled if one of them has no default
    unset: tuple[str, ...] = ()


@dataclass(frozen=True)
class CaseResult:
    """The prediction for one case (``predicted`` is None when the case failed)."""

    case: Case
    predicted: float | None
    error: str | None
    wall_s: float
    predicted_memory_gib: float | None = None
    # the simulated step's largest part after the GEMMs (engine/breakdown.py): key and share
    largest_after_gemm: tuple[str, float] | None = None
    #: whether the simulated step fits in the GPUs' memory (None when the case failed): a
    #: published run did, so a case that does not is missing a setting (recompute, ZeRO, ...)
    fits_in_memory: bool | None = None
    #: the framework preset the case's scenario names (None: simcluster's defaults)
    framework: str | None = None
    #: settings the case's scenario wrote that do nothing in its layout (``inert.py``)
    inert: tuple[str, ...] = ()
    #: microbatch counts whose steps the prediction was extrapolated from (``steady_state.py``;
    #: empty: the whole step was simulated)
    extrapolated_from: tuple[int, ...] = ()

    @property
    def error_pct(self) -> float | None:
        """Signed error of the prediction in percent of the measurement."""
        if self.predicted is None:
            return None
        return 100.0 * (self.predicted - self.case.measured) / self.case.measured

    @property
    def speed_error_pct(self) -> float | None:
        """How much faster (+) or slower (-) the simulated step is than the measured one, in
        percent, whatever the metric: a step time's error is inverted, a throughput's kept."""
        if self.predicted is None or self.predicted <= 0:
            return None
        if self.case.metric == "step_time_s":
            return 100.0 * (self.case.measured / self.predicted - 1.0)
        return self.error_pct

    @property
    def memory_error_pct(self) -> float | None:
        """Signed error of the simulated peak memory against the published one (if any)."""
        published = self.case.peak_memory_gib
        if published is None or self.predicted_memory_gib is None:
            return None
        return 100.0 * (self.predicted_memory_gib - published) / published

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.case.name,
            "family": self.case.family,
            "metric": self.case.metric,
            "predicted": self.predicted,
            "measured": None if math.isnan(self.case.measured) else self.case.measured,
            "error_pct": self.error_pct,
            "error": self.error,
            **({"note": self.case.note} if self.case.note else {}),
            **({"flops": self.case.flops} if self.case.flops != "megatron" else {}),
            "wall_s": self.wall_s,
            "fits_in_memory": self.fits_in_memory,
            "framework": self.framework,
            **({"inert_settings": list(self.inert)} if self.inert else {}),
            **({"extrapolated_from_microbatches": list(self.extrapolated_from)} if self.extrapolated_from else {}),
            "peak_memory_gib": {
                "predicted": self.predicted_memory_gib,
                "published": self.case.peak_memory_gib,
                "error_pct": self.memory_error_pct,
            },
            "largest_after_gemm": (
                None
                if self.largest_after_gemm is None
                else {"part": self.largest_after_gemm[0], "share": self.largest_after_gemm[1]}
            ),
        }


# --- loading ----------------------------------------------------------------------------
def validation_dir() -> Path:
    """The shipped validation/ folder: inside the wheel, or the repository checkout."""
    return data_dir("validation")


def shipped_case_files() -> list[Path]:
    """The shipped cases files, sorted by name."""
    return sorted(validation_dir().glob("*.yaml"))


def _parse_case(raw: Any, where: str, family: str) -> Case:
    """One item of a cases file (``where`` names it in errors; ``family`` is the file's
    unless the case gives its own)."""
    if not isinstance(raw, dict):
        raise UserError(where, "must be a mapping with name, source, scenario, measured")
    for key in ("scenario", "measured"):
        if key not in raw:
            near = difflib.get_close_matches(key, [str(k) for k in raw if k not in _CASE_KEYS], n=1)
            hint = f" ('{near[0]}' looks like a misspelling of it)" if near else ""
            raise UserError(f"{where}.{key}", f"is required; add it to the case{hint}")
    scenario, unset = _case_scenario(raw, where)
    figures, memory_figure = split_memory(raw["measured"])
    # samples per second become tokens by the sequence length, which may be written '8K'
    measured = read_measured(figures, f"{where}.measured", expand_seq_len(scenario))
    memory = raw.get("peak_memory_gib")
    if memory is not None:
        memory = positive_number(memory, f"{where}.peak_memory_gib")
    elif memory_figure is not None:
        memory = positive_number(memory_figure[1], f"{where}.measured.{memory_figure[0]}")
    compare = raw.get("compare") or {}
    if not isinstance(compare, dict) or (compare and not {"group", "label"} <= set(compare)):
        raise UserError(f"{where}.compare", "must be a mapping with group and label")
    notes = [measured.note] if measured.note else []
    flops = _case_flops(raw, where, measured, scenario, notes)
    notes += _unknown_keys(raw, where)
    return Case(
        name=str(raw.get("name") or where),
        source=str(raw.get("source") or ""),
        family=str(raw.get("family") or family),
        metric=measured.metric,
        measured=measured.value,
        note="; ".join(notes),
        scenario=scenario,
        published=dict(raw.get("published") or {}),
        group=str(compare.get("group", "")),
        label=str(compare.get("label", "")),
        slow=bool(raw.get("slow", False)),
        peak_memory_gib=memory,
        flops=flops,
        unset=unset,
    )


def _case_scenario(raw: dict[str, Any], where: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The case's scenario as the simulator reads it (canonical keys, nodes expanded, its
    ``set:`` applied), and the keys a null left unset."""
    if not isinstance(raw["scenario"], dict):
        raise UserError(
            f"{where}.scenario",
            "must be a scenario mapping (model, cluster, parallel, training) or a scenario's name or file",
        )
    # canonical keys and cluster.gpus before anything reads them (tokens per GPU needs the count)
    # (a key written one level off too: model.seq_len is the seq_len samples/s are read by)
    # (a null is dropped first, as scenario_from_dict reads it: as if unwritten)
    unwritten, nulled = drop_nulls(raw["scenario"])
    scenario = expand_nodes(relocate(normalise_keys(unwritten)))
    overrides = raw.get("set")
    if overrides is not None:
        if not isinstance(overrides, dict) or not overrides:
            raise UserError(f"{where}.set", "must map dotted scenario keys to values, e.g. {training.global_batch: 512}")
        from simcluster.scenario import apply_overrides

        scenario = apply_overrides(scenario, [(str(k), v) for k, v in overrides.items()])
        nulled += drop_nulls({str(k): v for k, v in overrides.items() if v is None})[1]
    # the nulls still unwritten once set: is applied go to run_case, so that a key without a
    # default says it was nulled, as a scenario's null does (not a bare 'is required')
    unset = tuple(dict.fromkeys(k for k in nulled if value_at(scenario, k.split(".")) is None))
    return scenario, unset


def _case_flops(
    raw: dict[str, Any], where: str, measured: Measured, scenario: dict[str, Any], notes: list[str]
) -> str:
    """The FLOP count a TFLOP/s or MFU figure is compared in (``flops:``, else what the source
    and the figure imply); the choices a reader should know of are added to ``notes``."""
    flops = _flop_convention(raw.get("flops", "megatron"), f"{where}.flops")
    if "flops" not in raw and measured.metric in _FLOP_METRICS and _names_megatron_bridge(scenario):
        # Megatron-Bridge's performance summaries print model TFLOP/s with attention's causal
        # half (its flop_utils: core_attn_seq_factor / 2: Llama 3 8B at 8K, 14,079 tokens/s/GPU =
        # 725 TFLOP/s); NeMo's own summaries up to 25.07 count it whole (33,099 = 1,917)
        flops = "causal"
        notes.append("flops: causal (Megatron-Bridge counts attention's causal half); give flops: to change it")
    if measured.hardware_flops:
        if "flops" in raw and flops != "hardware":
            raise UserError(f"{where}.flops", f"'{raw['flops']}' contradicts a figure in hardware "
                            "FLOPs (hfu, hardware_tflops_per_gpu); drop flops: or use hardware")
        flops = "hardware"
    if flops != "megatron" and measured.metric not in _FLOP_METRICS:
        notes.append(f"flops: {flops} does not change a {measured.metric} comparison")
    recompute = _raw_recompute(scenario)
    if "flops" not in raw and measured.bare_tflops and recompute == "full":
        flops = "hardware"
        notes.append(
            "a TFLOP/s figure of a fully recomputed run, not headed as model FLOPs, is compared in "
            "hardware FLOPs (Narayanan et al. 2021, MT-NLG and Megatron-DeepSpeed count the "
            "recomputed forward); write model_tflops_per_gpu or flops: megatron for model FLOPs"
        )
    if flops == "megatron" and measured.metric in _FLOP_METRICS and recompute in ("full", "selective"):
        notes.append(
            f"{measured.metric} counts model FLOPs, without the forward that recompute {recompute} "
            "reruns; a source that counts it (Narayanan et al. 2021's 96*B*s*l*h^2, "
            "Megatron-DeepSpeed's printed TFLOPs) needs flops: hardware, a key of the case beside "
            "measured: (or the figure written as hardware_tflops_per_gpu / hfu)"
        )
    return flops


def _unknown_keys(raw: dict[str, Any], where: str) -> list[str]:
    """A key the case format does not have: an error where it looks like a misspelt scoring
    key, else a note (metadata such as a URL must not stop a run)."""
    unknown = sorted(str(k) for k in set(raw) - _CASE_KEYS)
    nearest = {k: difflib.get_close_matches(k, sorted(_CASE_KEYS - set(raw)), n=1, cutoff=0.8) for k in unknown}
    for key, close in nearest.items():  # a misspelt set: or flops: would score another comparison
        if close and close[0] in _SCORING_KEYS:
            raise UserError(f"{where}.{key}", f"unknown key (did you mean '{close[0]}'?); fix its spelling")
    if not unknown:
        return []
    # metadata such as notes or a URL must not stop a run; it is shown
    hints = "".join(f" ('{k}': did you mean '{c[0]}'?)" for k, c in nearest.items() if c)
    return [f"unknown key {', '.join(unknown)} ignored{hints} (a case has {', '.join(sorted(_CASE_KEYS))})"]


#: FLOP counts a case may name: the model-FLOP conventions, and ``hardware`` (also ``hfu``):
#: the FLOPs the GPUs execute, recomputation included (HFU, Narayanan et al. 2021's TFLOP/s)
_HARDWARE_ALIASES = ("hardware", "hfu")


def _flop_convention(value: Any, field: str) -> str:
    from simcluster.flops import FLOP_CONVENTIONS

    text = str(value).strip().lower()
    if text in _HARDWARE_ALIASES:
        return "hardware"
    if text not in FLOP_CONVENTIONS:
        names = ", ".join((*FLOP_CONVENTIONS, "hardware"))
        raise UserError(field, f"'{value}' is not a FLOP count; use one of {names}")
    return text


def _names_megatron_bridge(scenario: Any) -> bool:
    """Whether a raw scenario names Megatron-Bridge as its framework (whose FLOP counter differs
    from NeMo's: see the caller)."""
    from simcluster.frameworks import get_framework

    name = scenario.get("framework") if isinstance(scenario, dict) else None
    try:
        return name is not None and get_framework(name).name == "megatron-bridge"
    except UserError:
        return False  # the scenario's own validation names the unknown framework


def _raw_recompute(scenario: Any) -> str | None:
    from simcluster.spellings import normalise_spellings

    training = scenario.get("training") if isinstance(scenario, dict) else None
    if not isinstance(training, dict):
        return None
    value = normalise_spellings({"training": training})["training"].get("recompute")
    return value if isinstance(value, str) else None


def load_cases_file(path: str | Path) -> list[Case]:
    """All cases of one YAML file."""
    path = Path(path)
    if path.is_dir():
        raise UserError("CASES", f"'{path}' is a directory; give a cases YAML file")
    if not path.is_file():
        raise UserError(
            "CASES",
            f"file '{path}' not found; give a cases YAML or no argument for the shipped set",
        )
    doc = yamlio.load_user_file(path, "CASES", "cases file")
    if isinstance(doc, list):  # a bare list of cases reads as the 'cases:' list
        doc = {"cases": doc}
    elif isinstance(doc, dict) and "cases" not in doc and {"scenario", "measured"} <= set(doc):
        doc = {"cases": [doc]}  # one case on its own
    if isinstance(doc, dict) and "cases" in doc and doc["cases"] is None:  # 'cases:' and nothing under it
        raise UserError("CASES", f"{path} has no cases; add items to its cases: list")
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
        raise UserError("CASES", f"{path} needs a top-level 'cases:' list (or a bare list of cases, or one case)")
    cases = [
        _case_or_problem(raw, f"{path.name}: cases[{i}]", path.stem, path.parent) for i, raw in enumerate(doc["cases"])
    ]
    # a relative hf_config or hardware path in a case is read from the cases file's folder
    return [replace(c, scenario=anchor_paths(c.scenario, path.parent)) for c in cases]


def _named_scenario(raw: Any, where: str, folder: Path) -> Any:
    """``raw`` with a ``scenario:`` given by name (a shipped scenario, or a file relative to the
    cases file) replaced by that scenario's mapping."""
    if not isinstance(raw, dict) or not isinstance(raw.get("scenario"), str):
        return raw
    from simcluster.scenario import resolve_scenario_path

    name = raw["scenario"]
    local = folder / name
    try:
        path = local if local.is_file() else resolve_scenario_path(name)
    except UserError as exc:
        raise UserError(f"{where}.scenario", exc.message) from None
    data = anchor_paths(yamlio.load_user_file(path, f"{where}.scenario", "scenario file"), path.parent)
    return {**raw, "scenario": data}


def _case_or_problem(raw: Any, where: str, family: str, folder: Path | None = None) -> Case:
    """The case, or one that reports why it cannot run (a malformed case fails alone: it is
    listed with its error and counted in ``failed`` while the others run)."""
    try:
        return _parse_case(_named_scenario(raw, where, folder or Path(".")), where, family)
    except UserError as exc:
        fields = raw if isinstance(raw, dict) else {}
        measured = fields.get("measured")
        metric = next(iter(measured), "") if isinstance(measured, dict) and measured else ""
        return Case(
            name=str(fields.get("name") or where),
            source=str(fields.get("source") or ""),
            family=str(fields.get("family") or family),
            metric=str(metric),
            measured=float("nan"),
            scenario=fields["scenario"] if isinstance(fields.get("scenario"), dict) else {},
            problem=exc.one_line(),
        )


def load_cases(
    paths: Sequence[str | Path] | None = None, contains: str | None = None, quick: bool = False
) -> list[Case]:
    """Cases of the given files (default: every shipped file) whose name or family contains
    ``contains`` (any case); ``quick`` leaves out the cases marked slow."""
    files = [Path(p) for p in paths] if paths else shipped_case_files()
    placed = [(c, f) for f in files for c in load_cases_file(f)]
    cases = [c for c, _ in placed]
    where: dict[str, list[str]] = {}
    for case, file in placed:
        where.setdefault(case.name, []).append(str(file))
    dup = sorted(n for n, in_files in where.items() if len(in_files) > 1)
    if dup:
        in_files = where[dup[0]]
        place = f"in {in_files[0]}" if len(set(in_files)) == 1 else f"in {' and '.join(in_files)}"
        raise UserError(
            "CASES", f"case name '{dup[0]}' appears twice ({place}); names must be unique: rename one"
        )
    if contains:
        needle = contains.lower()
        cases = [c for c in cases if needle in c.name.lower() or needle in c.family.lower()]
    if quick:
        cases = [c for c in cases if not c.slow]
    return cases


# --- running ----------------------------------------------------------------------------
def _convention_factor(scenario: Any, convention: str) -> float:
    """The simulated MFU/TFLOP/s in a source's FLOP count: same tokens/s, other FLOPs per token."""
    from simcluster.flops import convention_factor
    from simcluster.model import build_model

    model = build_model(scenario.model.model_dump(exclude_none=True))
    return convention_factor(model, scenario.training.attended_tokens, convention)


def run_case(case: Case, extrapolate: bool = True) -> CaseResult:
    """Simulate one case; any failure is captured in the result, never raised.
    ``extrapolate``: a long step may come from shorter ones (``steady_state.py``)."""
    from simcluster.context import build_context
    from simcluster.engine.breakdown import largest_besides_gemm
    from simcluster.inert import inert_settings
    from simcluster.scenario import scenario_from_dict
    from simcluster.steady_state import step_summary

    if case.problem:
        return CaseResult(case, None, case.problem, 0.0, None, None)
    wall = time.perf_counter()
    memory = largest = fits = framework = None
    inert: tuple[str, ...] = ()
    folded: tuple[int, ...] = ()
    try:
        data = dict(case.scenario)
        data.setdefault("name", case.name.replace("/", "_"))
        scenario = scenario_from_dict(data, [(key, None) for key in case.unset])
        ctx = build_context(scenario)
        inert = tuple(n.text for n in inert_settings(ctx))
        summary = step_summary(scenario, ctx, extrapolate=extrapolate)
        predicted, error = float(summary[case.metric]), None
        if case.flops == "hardware" and case.metric in _FLOP_METRICS:
            predicted *= summary["hardware_flops_per_step"] / summary["model_flops_per_step"]
        elif case.flops != "megatron" and case.metric in _FLOP_METRICS:
            predicted *= _convention_factor(scenario, case.flops)
        memory = float(summary["peak_memory_bytes"]["max"]) / 2**30
        largest = largest_besides_gemm(summary)
        fits, framework = bool(summary["fits_in_memory"]), summary.get("framework")
        folded = tuple(summary.get("extrapolated_from_microbatches", ()))
    except UserError as exc:
        predicted, error = None, exc.one_line()
    except Exception as exc:  # noqa: BLE001 - a broken case must not stop the others
        predicted, error = None, f"{type(exc).__name__}: {exc}"
    return CaseResult(
        case, predicted, error, time.perf_counter() - wall, memory, largest, fits, framework, inert, folded
    )


def run_cases(
    cases: Sequence[Case],
    jobs: int = 1,
    progress: Callable[[CaseResult], None] | None = None,
    executor: Executor | None = None,
    extrapolate: bool = True,
) -> list[CaseResult]:
    """Simulate every case (``jobs`` > 1: in worker processes; ``executor``: wherever it runs
    them); results in case order. ``extrapolate``: as :func:`run_case`."""
    results: dict[int, CaseResult] = {}
    order = list(range(len(cases)))  # one at a time: in the files' order
    if not ((executor is None or executor.kind == "processes") and min(jobs, len(cases)) <= 1):
        # longest first so the slow cases do not end up alone at the tail
        order.sort(key=lambda i: -cost_hint(cases[i].scenario, extrapolate))
    work = [(i, cases[i], extrapolate) for i in order]
    for i, result in (executor or Executor("processes", jobs)).map_unordered(_run_indexed, work):
        results[i] = result
        if progress:
            progress(result)
    return [results[i] for i in range(len(cases))]


def _run_indexed(job: tuple[int, Case, bool]) -> tuple[int, CaseResult]:
    return job[0], run_case(job[1], job[2])

