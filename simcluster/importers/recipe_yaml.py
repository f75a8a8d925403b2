"""Megatron-LM's YAML launch configs as the words of a launch line.

Two layouts are read, both a mapping of Megatron-LM arguments beside the environment the run
gets:

- a recipe of ``examples/moe_recipes/`` (``DEPENDENCIES``, ``ENV_VARS``, ``ARGS``; keys spelled
  with underscores, ``num_layers: 48``), what NVIDIA publishes its MoE runs' settings in;
- a functional-test ``model_config.yaml`` of ``tests/functional_tests/`` (``ENV_VARS``,
  ``MODEL_ARGS``; keys spelled as flags, ``--num-layers: 12``).

A value becomes the flag's words as Megatron's launchers write them: ``true`` the bare flag,
``false`` or an empty value no flag at all (argparse's ``store_true`` flags default to off; the
ones that default on are spelled ``--no-...``), a list the flag followed by its items, anything
else the flag and the value's words (the launch line is a shell command, so a value such as the
recipes' ``recompute_modules: moe_act layernorm`` is two words).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from simcluster.errors import UserError
from simcluster.importers.shell import ScriptArgs

#: the keys holding the arguments, by layout
ARGUMENT_KEYS = ("ARGS", "MODEL_ARGS")
SUFFIXES = (".yaml", ".yml")


def recipe_args(path: Path, variables: dict[str, str], field_name: str = "FILE") -> ScriptArgs | None:
    """The launch words and environment of the Megatron-LM YAML config at ``path``; None when
    ``path`` is not named as YAML (a launch script or args file). ``variables`` (``--var``) are
    set over the config's ``ENV_VARS``."""
    if path.suffix.lower() not in SUFFIXES:
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8", errors="replace"))
    except yaml.YAMLError as exc:
        raise UserError(field_name, f"{path.name} is not valid YAML ({str(exc).splitlines()[0]})") from None
    key = next((k for k in ARGUMENT_KEYS if isinstance(data, dict) and isinstance(data.get(k), dict)), None)
    if key is None:
        raise UserError(
            field_name,
            f"{path.name} holds no ARGS mapping (a Megatron-LM recipe, examples/moe_recipes) nor "
            "MODEL_ARGS (a functional-test model_config.yaml); a launch script or args file is "
            "read as shell, under a name that does not end in .yaml",
        )
    words: list[str] = []
    notes: list[str] = []
    for name, value in data[key].items():
        words.extend(_words(str(name), value, key, notes))
    env = data.get("ENV_VARS")
    environment = {str(k): _text(v) for k, v in env.items()} if isinstance(env, dict) else {}
    environment.update(variables)
    return ScriptArgs(words, f"its {key} mapping (Megatron-LM YAML)", notes, environment)


def _words(name: str, value: Any, key: str, notes: list[str]) -> list[str]:
    """The launch words of one argument (see the module's rules)."""
    flag = "--" + name.lstrip("-").replace("_", "-")
    if value is True:
        return [flag]
    if value is False or value is None or value == "":
        return []
    if isinstance(value, list):
        return [flag, *(_text(v) for v in value)]
    if isinstance(value, dict):
        notes.append(f"{key}.{name} is a mapping, not an argument's value: not read")
        return []
    return [flag, *_text(value).split()]


def _text(value: Any) -> str:
    """A YAML scalar as a launch line writes it (YAML's booleans as Python's argparse reads
    environment text: lower case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
