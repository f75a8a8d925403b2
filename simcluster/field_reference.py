"""The scenario's field reference, read from the schema itself: every key a scenario may write,
its type, its default, what it means and the other names it is read under.

``simcluster list fields`` prints it and ``docs/scenario-fields.md`` is written from it
(``tools/write_field_reference.py``; a test keeps the two the same), so the reference cannot
drift from what ``Scenario`` validates."""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from simcluster.errors import UserError
from simcluster.key_aliases import KEY_ALIASES


@dataclass(frozen=True)
class FieldDoc:
    """One scenario key as the schema defines it."""

    key: str  #: dotted, as ``--set`` takes it: ``parallel.tp``
    kind: str  #: the values it takes: ``int > 0``, ``te | deepspeed``
    default: str  #: ``1``, ``unset`` (derived or the framework's), ``required``
    description: str
    aliases: tuple[str, ...] = ()  #: other names read as this key (launch flags, config.json)

    @property
    def section(self) -> str:
        """The top-level section (``parallel``), or ``scenario`` for a top-level key."""
        return self.key.split(".", 1)[0] if "." in self.key else "scenario"


def _bounds(metadata: list[Any]) -> str:
    """The numeric bounds pydantic enforces (``Field(gt=0, le=3)``: its Gt / Le metadata) as
    ``> 0, <= 3``; validators and other metadata have no such attribute and are skipped."""
    parts = []
    for item in metadata:
        for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            value = getattr(item, attr, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                parts.append(f"{sign} {value}")
    return ", ".join(parts)


def _kind(annotation: Any) -> str:
    """An annotation as a reader would say it: ``int``, ``list of int``, ``a or b``."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *metadata = get_args(annotation)
        bounds = _bounds([m for info in metadata for m in getattr(info, "metadata", [info])])
        return f"{_kind(inner)} {bounds}".strip()
    if origin is Literal:
        return " | ".join(str(v) for v in get_args(annotation))
    if origin in (Union, types.UnionType):
        return " | ".join(_kind(a) for a in get_args(annotation) if a is not type(None))
    if origin is list:
        (item,) = get_args(annotation)
        return f"list of {_kind(item)}"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    return getattr(annotation, "__name__", str(annotation))


def _default(info: FieldInfo) -> str:
    """The default as a scenario would write it; ``unset`` where the field is derived from the
    rest of the scenario or left to its framework, ``required`` where there is none."""
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, list):
        return "[]" if not value else str(value)
    return str(value)


def _aliases(section: str, name: str) -> tuple[str, ...]:
    return tuple(sorted(alias for alias, key in KEY_ALIASES.get(section, {}).items() if key == name))


def _shorthands() -> list[FieldDoc]:
    """Keys read before validation and expanded into the schema's (``nodes.py``,
    ``global_batch.py``, ``fsdp_column.py``): a quantity as papers and tables state it."""
    from simcluster.fsdp_column import STRATEGIES

    rows = (
        ("cluster.nodes", "int > 0",
         "the job size in nodes: nodes x the profile's GPUs per node (or cluster.gpus_per_node) "
         "is cluster.gpus; given with gpus, the two must agree"),
        ("training.global_batch_tokens", "int | str",
         "the global batch in tokens (Llama 3's 16M): global_batch sequences of seq_len tokens, "
         "written exactly or with a binary suffix as papers round them (16M = 16 x 2^20, 4Mi, "
         "512K); given with global_batch, the two must agree"),
        ("parallel.fsdp", "bool | int > 0 | " + " | ".join(STRATEGIES),
         "fully sharded data parallelism as performance tables write it: true or 1 is zero 3, a "
         "degree above 1 zero 3 with zero_shard of that many ranks, false or 0 leaves zero as it "
         "is; PyTorch FSDP1's sharding_strategy names: FULL_SHARD zero 3, SHARD_GRAD_OP also "
         "zero3.reshard_after_forward false, HYBRID_SHARD zero_shard node, _HYBRID_SHARD_ZERO2 "
         "both; NO_SHARD is zero 0 (an error says so)"),
    )  # fmt: skip
    return [FieldDoc(key, kind, "unset", text, _aliases(*key.split("."))) for key, kind, text in rows]


def field_docs() -> list[FieldDoc]:
    """Every key of the scenario schema, sections in the schema's order, then their keys, with
    the shorthand keys that stand for schema fields after their section's."""
    docs = _schema_docs()
    for shorthand in _shorthands():
        last = max(i for i, doc in enumerate(docs) if doc.section == shorthand.section)
        docs.insert(last + 1, shorthand)
    return docs


def _schema_docs() -> list[FieldDoc]:
    from simcluster.scenario import Scenario

    docs: list[FieldDoc] = []
    for name, info in Scenario.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            for key, sub in annotation.model_fields.items():
                docs.append(
                    FieldDoc(f"{name}.{key}", _kind(sub.annotation) + _bound_suffix(sub), _default(sub),
                             _text(sub), _aliases(name, key))
                )  # fmt: skip
        else:
            docs.append(FieldDoc(name, _kind(annotation) + _bound_suffix(info), _default(info), _text(info)))
    return docs


def _bound_suffix(info: FieldInfo) -> str:
    bounds = _bounds(list(info.metadata))
    return f" {bounds}" if bounds else ""


def _text(info: FieldInfo) -> str:
    return " ".join((info.description or "").split())


def select(docs: list[FieldDoc], wanted: list[str]) -> list[FieldDoc]:
    """The docs whose section or key is among ``wanted`` (``parallel``, ``dp.bucket_mb``); all
    for none. An unknown name is a one-line error naming the sections."""
    if not wanted:
        return docs
    sections = sorted({d.section for d in docs})
    picked = [d for d in docs if d.section in wanted or d.key in wanted]
    unknown = [w for w in wanted if w not in sections and all(d.key != w for d in docs)]
    if unknown:
        raise UserError(
            "SECTION",
            f"no scenario section or key {unknown[0]!r}; sections: {', '.join(sections)} "
            "(or a dotted key such as parallel.tp)",
        )
    return picked


def markdown(docs: list[FieldDoc]) -> str:
    """The reference as docs/scenario-fields.md holds it: a table per section."""
    lines = [
        "# Scenario fields",
        "",
        "Every key a scenario YAML (or `--set`) may write, generated from the schema by",
        "`tools/write_field_reference.py`; `simcluster list fields [SECTION ...]` prints the same.",
        "`unset` means the value is derived from the rest of the scenario or filled in by its",
        "`framework:` (`simcluster list frameworks`). Other names a key is read under (launch flags,",
        "`config.json` keys) are listed with it, and the shorthands (`cluster.nodes`,",
        "`training.global_batch_tokens`, `parallel.fsdp`) with the fields they stand for. Do not",
        "edit by hand.",
    ]
    section = None
    for doc in docs:
        if doc.section != section:
            section = doc.section
            lines += ["", f"## `{section}`", "", "| key | values | default | meaning |", "|---|---|---|---|"]
        also = f"; also read as: {', '.join(doc.aliases)}" if doc.aliases else ""
        cells = (f"`{doc.key}`", doc.kind, f"`{doc.default}`", f"{doc.description}{also}")
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"
