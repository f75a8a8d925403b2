"""Scenario files: shipped names, YAML loading, ``--set a.b=c`` overrides and the errors that name the field."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from simcluster import yamlio
from simcluster.data import data_dir
from simcluster.errors import UserError, did_you_mean, did_you_mean_choice
from simcluster.frameworks import apply_framework
from simcluster.fsdp_column import expand_fsdp
from simcluster.global_batch import expand_global_batch
from simcluster.key_aliases import canonical_key, canonical_path, normalise_keys
from simcluster.nodes import expand_nodes
from simcluster.paths import anchor_paths
from simcluster.scenario.document import Scenario
from simcluster.scenario.misplaced import home_of, relocate
from simcluster.spellings import normalise_spellings
from simcluster.stated_params import expand_stated_params
from simcluster.strict_numbers import BOOLEAN_NUMBER
from simcluster.token_counts import expand_seq_len


def _scenarios_dir() -> Path:
    """The shipped scenarios/ folder."""
    return data_dir("scenarios")


def shipped_scenarios() -> list[str]:
    """Names of the scenarios shipped in scenarios/."""
    return sorted(p.stem for p in _scenarios_dir().glob("*.yaml"))


#: the README's set-up job, the example a model preset given as a scenario is pointed to
MAIN_SCENARIO = "llama3-8b-8xh100"


def resolve_scenario_path(name_or_path: str | Path) -> Path:
    """A scenario name ('llama3-8b-8xh100') or a path -> an existing file."""
    text = str(name_or_path)
    path = Path(text)
    if path.is_dir():
        raise UserError("scenario", f"'{text}' is a directory; give a scenario YAML file")
    if path.exists():
        # any other file that exists is read, not only a regular one: a shell's process
        # substitution (`simcluster run <(sed ... my.yaml)`) passes a pipe, /dev/fd/63, which
        # was reported "not found"
        return path
    names = shipped_scenarios()
    # a shipped name as people type it: any case, with its .yaml (the file names in scenarios/)
    stem = path.name.lower().removesuffix(".yaml").removesuffix(".yml")
    if "/" in text or (path.suffix in (".yaml", ".yml") and stem not in names):
        hint = f" (a shipped scenario is '{stem}')" if stem in names else ""
        raise UserError("scenario", f"file '{text}' not found{hint}")
    if stem in names:
        return _scenarios_dir() / f"{stem}.yaml"
    from simcluster.model import preset_names, resolve_preset_name

    preset = resolve_preset_name(text)
    if preset in preset_names():  # a model, as the README's headings name them, not a job
        # a scenario of that model as it ships, else the README's one-node job (dp 8 and no
        # model parallelism: any preset's layers divide, a large model says it does not fit)
        # (not a LoRA fine-tuning one: a model's name asks for training it, all its weights)
        with_it = [n for n in names if n.startswith(f"{preset}-") and "-lora-" not in n]
        if with_it:
            example = f"simcluster run {MAIN_SCENARIO if MAIN_SCENARIO in with_it else with_it[0]}"
        else:
            example = f"simcluster run {MAIN_SCENARIO} --set model={preset}"
        raise UserError(
            "scenario",
            f"'{text}' is a model preset, not a scenario (a scenario adds the cluster and the "
            f"layout): run one with it, e.g. {example}; simcluster list scenarios shows them",
        )
    raise UserError(
        "scenario",
        f"'{text}' is neither a file nor a shipped scenario{did_you_mean(stem, names)}; "
        f"shipped: {', '.join(names)}",
    )


def parse_set(items: list[str] | None) -> list[tuple[str, Any]]:
    """Parse ``--set a.b=c`` items; values are YAML scalars (numbers, booleans, lists)."""
    result = []
    for item in items or []:
        if "=" not in item:
            raise UserError("--set", f"'{item}' must look like key.path=value")
        key, _, raw = item.partition("=")
        key = key.strip()
        if not key:
            raise UserError("--set", f"'{item}' has an empty key")
        if any(not part.strip() for part in key.split(".")):
            raise UserError(
                "--set", f"'{item}': the key '{key}' has an empty part; write e.g. parallel.tp=4"
            )
        result.append((key, yamlio.parse_set_value(raw, item)))
    return result


def apply_overrides(data: dict[str, Any], overrides: list[tuple[str, Any]]) -> dict[str, Any]:
    """Apply dotted overrides to a raw scenario dict (unknown keys are caught by validation).

    A null value (``--set parallel.etp=null``) removes the key, whatever its section: the
    scenario then runs as if it had not written it, on the field's default or its framework's
    (a key with no default is then reported as required by :func:`scenario_from_dict`), as a
    null the scenario writes itself means (:func:`drop_nulls`)."""
    return _apply_overrides(data, overrides)[0]


def _apply_overrides(data: dict[str, Any], overrides: list[tuple[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """:func:`apply_overrides`, and the dotted paths that a null override removed."""
    out = copy.deepcopy(data)
    unset: list[str] = []
    pending = list(overrides)
    while pending:
        key, value = pending.pop(0)
        out = _expand_model_shorthand(out)  # an earlier `--set model=NAME`, then model.layers=4
        parts = _schema_path(key)
        if isinstance(value, dict) and value and isinstance(value_at(out, parts), dict):
            # a mapping over a section merges into it key by key ('parallel={tp: 2}' keeps the
            # scenario's zero); each key is then an override of its own, twins included
            pending[:0] = [(f"{key}.{k}", v) for k, v in value.items()]
            continue
        node = out
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise UserError(key, f"cannot set inside '{part}', which is not a section")
            node = child
        node[parts[-1]] = value
        if value is None:
            # null is "as if unwritten" for every key, as a null the file writes: kept until
            # the overrides are done, then dropped with those (drop_nulls); the key's twins
            # stay, being other keys
            unset.append(".".join(parts))
            continue
        # an override of a size given another way replaces it: --set cluster.nodes=16 on a
        # scenario that states gpus, --set training.global_batch_tokens=4M over global_batch
        for twin in _SAME_QUANTITY.get(".".join(parts), ()):
            node.pop(twin, None)
    return drop_nulls(out)[0], unset


def _schema_path(key: str) -> list[str]:
    """A dotted key as the schema names it: its canonical spelling, and a key written one level
    off ('training.tp', 'tp') where it belongs."""
    parts = canonical_path(key).split(".")
    if len(parts) <= 2:
        home = home_of(parts[-1], parts[0] if len(parts) == 2 else None)
        parts = list(home) if home is not None else parts
    return parts


def drop_nulls(data: dict[str, Any], prefix: str = "") -> tuple[dict[str, Any], list[str]]:
    """A raw scenario mapping without the keys it writes as null (``tp: null``, a bare ``tp:``,
    a section whose keys are all commented out), in any mapping but not inside lists, and
    those keys as the schema names them. Null means "as if unwritten" here as in
    ``--set KEY=null``: dropped before the keys' other names are read, a null does not clash
    with its twin written with a value; a mapping below a section left empty goes too (an
    empty ``cluster.profile.efficiency`` would patch the profile's whole table away)."""
    out: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            value, below = drop_nulls(value, f"{path}.")
            dropped += below
            if not value and prefix:  # a section stays, as an empty one (as --set leaves it)
                continue
        if value is None:
            dropped.append(".".join(_schema_path(path)))
            continue
        out[key] = value
    return out, dropped


def value_at(data: dict[str, Any], parts: list[str]) -> Any:
    """The value at ``parts`` in nested mappings, or None where the path stops."""
    node: Any = data
    for part in parts:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


#: keys that state one quantity two ways (the other ways expanded into the schema's before validation)
_SAME_QUANTITY = {
    "cluster.nodes": ("gpus",), "cluster.gpus": ("nodes",),
    "training.global_batch_tokens": ("global_batch", "grad_accum"),
    "training.global_batch": ("global_batch_tokens", "grad_accum"),
    "training.grad_accum": ("global_batch", "global_batch_tokens"),
    "parallel.fsdp": ("zero", "zero_shard"), "parallel.zero": ("fsdp",),
    # where the model's shape comes from: --set model.preset=... on an hf_config scenario
    "model.preset": ("hf_config",), "model.hf_config": ("preset",),
}  # fmt: skip


def _unknown_for_missing(errors: list[Any]) -> tuple[Any, str] | None:
    """An unknown key in the section where a required one is missing, and that required key:
    ``training: {context_length: 4096}`` is reported on context_length, which is likely the
    missing seq_len written another way, not only as 'seq_len is required'; a section's name
    misspelt (``trainig:``) likewise, not as 'training: is required'."""
    missing = [e for e in errors if e["type"] == "missing" and len(e["loc"]) in (1, 2)]
    for err in missing:
        extra = [e for e in errors if e["type"] == "extra_forbidden" and tuple(e["loc"][:-1]) == err["loc"][:-1]]
        if extra:
            return extra[0], str(err["loc"][-1])
    return None


def _format_error(exc: ValidationError, unset: list[str] | None = None) -> UserError:
    """The first problem pydantic found as one line; a missing required key or section goes
    first, whatever the order of the sections (a user fixing one thing at a time adds what
    the scenario cannot run without first), with an unknown key elsewhere named in the same
    line, so neither hides behind the other."""
    errors = exc.errors()
    err = next((e for e in errors if e["type"] == "missing"), errors[0])
    paired = _unknown_for_missing(errors) if err["type"] == "missing" else None
    if paired is not None:
        extra, required = paired
        section, key = (str(p) for p in ("", *extra["loc"])[-2:])
        if len(extra["loc"]) == 2 and sum(e["type"] == "extra_forbidden" and str(e["loc"][0]) == section for e in errors) == 1:
            return UserError(
                f"{section}.{key}",
                f"unknown key, and {section}.{required} is required: if '{key}' is that, write it as "
                f"{required}; otherwise remove it and add {required}",
            )
        return _format_one(extra, unset)  # several unknown keys: the first, with its own hint
    first = _format_one(err, unset)
    unknown = next((e for e in errors if e["type"] == "extra_forbidden"), None)
    if err["type"] != "missing" or unknown is None:
        return first
    also = _format_one(unknown, unset)
    return UserError(first.field, f"{first.message}; also {also.field}: {also.message}")


def _format_one(err: Any, unset: list[str] | None) -> UserError:
    """One pydantic error as the one-line error naming its field and the fix."""
    loc = [str(p) for p in err["loc"]]
    field = ".".join(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        return _unknown_key(loc)
    if kind == "missing":
        if field in (unset or ()):
            return UserError(
                field,
                "is null, which means unwritten, and it has no default; give it a value in the "
                f"scenario or --set {field}=VALUE",
            )
        return UserError(field, "is required; add it to the scenario")
    got = err.get("input")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return UserError(field, f"must be a mapping of keys (a section), got {got!r}")
    if kind == "literal_error":
        hint = did_you_mean_choice(got, err.get("ctx", {}).get("expected", ""))
        return UserError(field, f"got {got!r}{hint}; {err['msg'].lower()}")
    if kind == BOOLEAN_NUMBER:  # the message says what it got, as YAML spells it
        return UserError(field, err["msg"])
    if kind == "value_error":  # a validator's own message; a section's mapping would bury it
        shown = "" if isinstance(got, dict) else f" (got {got!r})"
        return UserError(field, f"{err['msg'].removeprefix('Value error, ')}{shown}")
    if field == "training.global_batch" and isinstance(got, str) and re.fullmatch(r"\s*[\d.]+\s*[kKmMgG]\s*", got):
        # '1M', '4M': a batch in tokens, as the Llama 3 and GPT-3 papers give it
        return UserError(
            field,
            f"counts sequences, and {got!r} reads as a token count; write training.global_batch_tokens={got.strip()} "
            "(tokens per step, 1M = 2^20) or a whole number of sequences",
        )
    return UserError(field, f"{err['msg'].lower()} (got {got!r})")


def _unknown_key(loc: list[str]) -> UserError:
    """An unknown key at ``loc``: the key it was likely meant to be, or the section it belongs
    in when it is another section's key written one level off."""
    field = ".".join(loc)
    model: type[BaseModel] = Scenario
    for part in loc[:-1]:
        sub = model.model_fields.get(part)
        if sub is None or not (isinstance(sub.annotation, type) and issubclass(sub.annotation, BaseModel)):
            break
        model = sub.annotation
    hint = did_you_mean(loc[-1], model.model_fields)
    home = _section_of(loc[-1], exclude=loc[0]) if len(loc) == 2 and not hint else None
    if home is not None:
        return UserError(field, f"belongs in {home.split('.')[0]}, not {loc[0]}; write it as {home}")
    return UserError(field, f"unknown key{hint}; remove it or fix the spelling")


def _section_of(key: str, exclude: str) -> str | None:
    """``section.key`` when ``key`` (or one of its other names) belongs to another top-level
    section than ``exclude``: ``model.seq_len`` is ``training.seq_len`` written one level off."""
    for name, field in Scenario.model_fields.items():
        section = field.annotation
        if name == exclude or not (isinstance(section, type) and issubclass(section, BaseModel)):
            continue
        canon = canonical_key(name, key)
        if canon in section.model_fields:
            return f"{name}.{canon}"
    return None


def _expand_model_shorthand(data: dict[str, Any]) -> dict[str, Any]:
    """``model: llama3-8b`` means ``model: {preset: llama3-8b}`` (``*.json``: ``hf_config``).

    Expanded before and between ``--set`` overrides, so that ``--set model.layers=4`` works on
    a shorthand, and after them, so that ``--set model=qwen3-8b`` is one too.
    """
    model = data.get("model")
    name = model.strip() if isinstance(model, str) else ""
    if not name:
        return data
    key = "hf_config" if name.endswith(".json") else "preset"
    return {**data, "model": {key: name}}


def scenario_from_dict(data: Any, overrides: list[tuple[str, Any]] | None = None) -> Scenario:
    """Validate a raw scenario mapping (after applying overrides)."""
    if not isinstance(data, dict):
        raise UserError(
            "scenario", "must be a YAML mapping with model, cluster, parallel, training"
        )
    data, nulled = drop_nulls(data)
    data, unset = _apply_overrides(relocate(normalise_keys(_expand_model_shorthand(data))), overrides or [])
    data = _expand_model_shorthand(data)  # a last `--set model=qwen3-8b` replaces the section by a name
    data = expand_global_batch(expand_seq_len(expand_nodes(expand_stated_params(expand_fsdp(data)))))
    data = normalise_spellings(data)
    # the keys the scenario states, in the schema's names (nodes as cluster.gpus, fsdp as
    # parallel.zero), before its framework's preset fills in others
    written = written_keys(data)
    data = blocking_overlaps(apply_framework(data), written)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise _format_error(exc, [*nulled, *unset]) from None
    return scenario.with_written(written)


#: the overlaps that hide a collective under compute by launching its NCCL kernel (or
#: TransformerEngine's userbuffers kernels) from the issuing thread and moving on
ASYNC_COMM_OVERLAPS = ("dp_grad_reduce", "param_gather", "tp_comm", "tp_grad_async", "tp_async", "pp_comm", "ep_comm")


def blocking_overlaps(data: dict[str, Any], written: frozenset[str]) -> dict[str, Any]:
    """``data`` with no collective overlapped under ``training.launch_blocking``.

    ``CUDA_LAUNCH_BLOCKING=1`` makes every kernel launch return only once the kernel has run
    (CUDA Programming Guide, Asynchronous Concurrent Execution), an NCCL collective's too: the
    thread that launches a gradient bucket's reduce-scatter, a parameter all-gather, a TP or
    pipeline transfer waits for it to finish before it issues the next compute kernel, so
    nothing runs beside it. The overlaps a framework preset (or the schema's default) turns on
    are turned off; one the scenario itself wrote true is refused, as it cannot happen."""
    training, overlap = data.get("training"), data.get("overlap")
    if not isinstance(training, dict) or training.get("launch_blocking") is not True:
        return data
    if overlap is not None and not isinstance(overlap, dict):
        return data  # the schema names the malformed section
    overlap = dict(overlap or {})
    for key in ASYNC_COMM_OVERLAPS:
        if f"overlap.{key}" in written and overlap.get(key) is True:
            raise UserError(
                f"overlap.{key}",
                "cannot hide its collective under compute with training.launch_blocking: "
                "CUDA_LAUNCH_BLOCKING=1 makes the collective's kernel launch wait until it has run, "
                f"so nothing is issued beside it; set overlap.{key} false or drop training.launch_blocking",
            )
        overlap[key] = False
    return {**data, "overlap": overlap}


def written_keys(data: dict[str, Any]) -> frozenset[str]:
    """The dotted keys a raw scenario mapping states: ``section.key`` inside each section, the
    key itself at the top level."""
    keys: set[str] = set()
    for name, value in data.items():
        if isinstance(value, dict):
            keys.update(f"{name}.{key}" for key in value)
        else:
            keys.add(str(name))
    return frozenset(keys)


def read_scenario_file(name_or_path: str | Path) -> tuple[Any, Path]:
    """A scenario file's parsed YAML (relative paths in it anchored to its folder), unvalidated,
    and the file's path."""
    path = resolve_scenario_path(name_or_path)
    return anchor_paths(yamlio.load_user_file(path, "scenario", "scenario file"), path.parent), path


def load_scenario(
    name_or_path: str | Path, overrides: list[tuple[str, Any]] | None = None
) -> Scenario:
    """Load a scenario by shipped name or path, apply ``--set`` overrides and validate."""
    data, path = read_scenario_file(name_or_path)
    scenario = scenario_from_dict(data, overrides)
    if scenario.name == "scenario":
        scenario = scenario.model_copy(update={"name": path.stem})
    return scenario
