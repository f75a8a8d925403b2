"""YAML parsing through libyaml when PyYAML was built with it, and user files' errors.

The shipped validation cases are ~15 files of a few thousand lines, read by every validate run
and by many tests; libyaml's parser is about ten times faster than the pure-Python one and
builds the same documents (both resolve tags as YAML 1.1 safe_load does).

A key given twice in one mapping is refused: PyYAML keeps the last value without a word, so
``tp: 2`` and a forgotten ``tp: 4`` further down would run tp 4. Keys a ``<<:`` merge brings
in may still be overridden, as YAML's merge keys mean.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from simcluster.errors import UserError, read_text

_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A key repeated in one mapping: ``path`` is its dotted place in the document
    ('parallel.tp', 'cases[2].scenario.cluster.gpus'), ``line`` and ``first_line`` (1-based)
    where it is given again and first."""

    def __init__(self, mapping: yaml.MappingNode, key: yaml.Node, first: yaml.Node) -> None:
        super().__init__(None, None, f"found duplicate key {_label(key)!r}", key.start_mark)
        self.mapping, self.key = mapping, _label(key)
        self.line, self.first_line = key.start_mark.line + 1, first.start_mark.line + 1
        self.path = self.key  # the document's root, once known, puts the mapping's place before it

    def describe(self) -> str:
        """'parallel.tp is given twice (also at line 7); keep one'."""
        also = f" (also at line {self.first_line})" if self.first_line != self.line else ""
        return f"{self.path} is given twice{also}; keep one"


def _label(node: yaml.Node) -> str:
    return str(node.value) if isinstance(node, yaml.ScalarNode) else "?"


class _UniqueKeyLoader(_Base):  # type: ignore[misc]
    """The safe loader, refusing a key that one mapping gives twice."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=deep)  # cached: built once
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:
                    continue  # an unhashable key, which the constructor reports itself
                if first is not key_node:
                    raise DuplicateKeyError(node, key_node, first)
        return super().construct_mapping(node, deep=deep)


def _place(root: yaml.Node, target: yaml.Node) -> str | None:
    """The dotted path of ``target`` inside ``root`` ('' for the root itself)."""
    todo: list[tuple[yaml.Node, str]] = [(root, "")]
    seen: set[int] = set()
    while todo:
        node, path = todo.pop()
        if node is target:
            return path
        if id(node) in seen:
            continue  # an alias can make a document its own child
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            todo += [(v, f"{path}.{_label(k)}" if path else _label(k)) for k, v in node.value]
        elif isinstance(node, yaml.SequenceNode):
            todo += [(v, f"{path}[{i}]") for i, v in enumerate(node.value)]
    return None


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` with the C loader when available, refusing repeated keys; raises
    ``yaml.YAMLError`` (:class:`DuplicateKeyError` for a repeated key)."""
    loader = _UniqueKeyLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        try:
            return loader.construct_document(root)
        except DuplicateKeyError as exc:
            place = _place(root, exc.mapping)
            exc.path = f"{place}.{exc.key}" if place else exc.key
            raise
    finally:
        loader.dispose()


def load_user_file(path: str | Path, field: str, what: str) -> Any:
    """Parse a user-given YAML file (a scenario, profile or cases file). Unreadable bytes,
    syntax errors and repeated keys are one-line :class:`UserError` s naming ``field``; a
    syntax error says where (line and column, 1-based, as editors count) and what the parser
    expected, a repeated key its line and dotted path; a file with no document in it (empty,
    or comments only: every caller needs a mapping or a list) says so."""
    text = read_text(path, field, what)
    try:
        doc = safe_load(text)
    except DuplicateKeyError as exc:
        raise UserError(field, f"{what} {path} line {exc.line}: {exc.describe()}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        lines = text.splitlines()
        if mark and mark.line < len(lines) and "\t" in lines[mark.line][: mark.column + 1] and "tab" not in problem:
            # the parser says only 'found character that cannot start any token'
            problem += "; YAML indents with spaces, not tabs: replace the tab with spaces"
        raise UserError(
            field, f"{what} {path}{where}: not valid YAML ({problem}); fix the syntax"
        ) from None
    if doc is None:
        raise UserError(field, f"{what} {path} is empty (blank lines or comments only); give the file that holds it")
    return doc


def parse_set_value(raw: str, item: str) -> Any:
    """The value of a ``--set KEY=VALUE`` ``item`` as YAML reads it (a number, boolean, list or
    mapping); text that does not parse stays the string written, for the field's own check to
    name; a key given twice in it is a one-line error."""
    if not raw.strip():
        return ""
    try:
        return safe_load(raw)
    except DuplicateKeyError as exc:
        raise UserError("--set", f"'{item}': {exc.describe()}") from None
    except yaml.YAMLError:
        return raw
