"""The CLI's parser, ``--help``, ``list`` and its error paths load neither pandas nor matplotlib
(nor networkx, which only a simulation's cluster graph needs): each is checked in a fresh
interpreter's ``sys.modules``, where an earlier test's imports cannot hide a regression."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "matplotlib", "networkx")

# run in a child interpreter: the statements, then the heavy modules it loaded, as JSON
PROBE = """
import contextlib, io, json, sys
from simcluster.cli import build_parser, main
{body}
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def _heavy_loaded(body: str) -> list[str]:
    code = PROBE.format(body=body, heavy=HEAVY)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


QUIET = "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n    "


@pytest.mark.parametrize(
    ("what", "body"),
    [
        ("import", "pass"),
        ("every command's parser", "build_parser()"),
        ("--help", QUIET + "try:\n        main(['--help'])\n    except SystemExit:\n        pass"),
        ("list", QUIET + "main(['list', 'schedules'])"),
        ("memory's error path", QUIET + "main(['memory', 'no-such-scenario'])"),
        ("run's error path", QUIET + "main(['run', 'llama3-8b-8xh100', '--set', 'parallel.tp=3'])"),
    ],
)
def test_cli_paths_do_not_load_pandas_or_matplotlib(what, body):
    assert _heavy_loaded(body) == [], what


def test_probe_sees_a_heavy_import():
    # the guard of the test above: the probe does report a module once something loads it
    assert _heavy_loaded("import pandas") == ["pandas"]


def test_lazy_parser_has_the_same_command_as_the_full_one():
    # main() builds only the named command's arguments; they are the ones the full parser has
    from simcluster.cli import COMMANDS, HELP, build_parser

    assert set(HELP) == set(COMMANDS)
    full = build_parser()
    for name in COMMANDS:
        lazy = build_parser(only=name)
        args_full = vars(full.parse_args(_minimal(name)))
        args_lazy = vars(lazy.parse_args(_minimal(name)))
        assert args_lazy.keys() == args_full.keys(), name
        assert args_lazy["_run"] is args_full["_run"], name


def _minimal(name: str) -> list[str]:
    """The shortest argument list each command parses."""
    return {
        "run": ["run", "x"],
        "memory": ["memory", "x"],
        "collective": ["collective", "all_reduce", "1GiB", "--gpus", "8"],
        "gemm": ["gemm", "1,1,1"],
        "sweep": ["sweep", "x"],
        "compare": ["compare", "x", "y"],
        "import": ["import", "megatron", "f"],
        "validate": ["validate"],
        "list": ["list"],
    }[name]
