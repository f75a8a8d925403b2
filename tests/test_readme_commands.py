"""Every ``simcluster`` command in README.md's code blocks still parses, and each scenario it
names (with its ``--set`` and ``NAME@key=value`` overrides) loads and passes the layout checks.

Nothing is simulated (the sweeps and validations would take minutes); the test catches a README
that drifts from the CLI: a renamed flag, a dropped scenario, an override the schema refuses.
Placeholders (``my-scenario.yaml``, ``my-runs.yaml``, ``S``) are skipped.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from simcluster.cli import build_parser
from simcluster.commands.compare_variants import split_variant, variant_overrides
from simcluster.context import build_context
from simcluster.scenario import load_scenario, parse_set, shipped_scenarios

README = Path(__file__).parent.parent / "README.md"
PLACEHOLDERS = ("my-", "S@", "S ")


def readme_commands() -> list[str]:
    """The ``simcluster ...`` lines of the README's fenced code blocks, comments dropped."""
    lines, fenced = [], False
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        text = line.strip()
        if fenced and text.startswith("simcluster "):
            lines.append(" ".join(shlex.split(text, comments=True)))
    return lines


COMMANDS = readme_commands()


def test_the_readme_shows_commands():
    assert len(COMMANDS) >= 20  # the parse of the fences found them (a guard for this test itself)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_readme_command_parses_and_its_scenarios_load(command):
    argv = shlex.split(command)[1:]
    if any(p in " ".join(argv) + " " for p in PLACEHOLDERS):
        pytest.skip("a placeholder of the user's own file")
    args = build_parser().parse_args(argv)  # argparse exits (SystemExit 2) on a flag it does not know
    shipped = set(shipped_scenarios())
    if args.command in ("run", "memory", "sweep"):
        assert args.scenario in shipped, f"{args.scenario} is not a shipped scenario"
        scenario = load_scenario(args.scenario, parse_set(args.overrides))
        # a sweep's comma list is an axis: each of its profiles must load
        for hardware in (args.hardware or "").split(",") if args.hardware else [None]:
            build_context(scenario, hardware)
    elif args.command == "compare":
        for text in args.scenarios:
            name, _ = split_variant(text)
            assert name in shipped, f"{name} is not a shipped scenario"
            build_context(load_scenario(name, parse_set(args.overrides) + variant_overrides(text)))


def test_the_quoted_commands_are_in_the_code_blocks():
    # inline `simcluster sweep NAME --flag` mentions in the prose name shipped scenarios too
    shipped = set(shipped_scenarios())
    for name in re.findall(r"`simcluster (?:run|memory|sweep|compare) ([a-z0-9.-]+)", README.read_text()):
        assert name in shipped, f"README names '{name}', which is not a shipped scenario"


def _inline_commands() -> list[str]:
    """The ``simcluster run|memory|compare ...`` commands quoted in the README's prose."""
    return re.findall(r"`(simcluster (?:run|memory|compare) [^`]+)`", README.read_text())


@pytest.mark.parametrize("command", [c for c in COMMANDS + _inline_commands() if c.split()[1] in ("run", "memory", "compare")])
def test_a_readme_example_layout_fits_in_gpu_memory(command):
    """An example a user copies runs a layout that fits, by the memory walk ``simcluster
    memory`` prints (no simulation): the README's context-parallel compare once ran cp 2 at 64K
    tokens, 191 GiB on an 80 GiB GPU, 'simulated anyway'."""
    from simcluster.memory_report import memory_summary

    argv = shlex.split(command)[1:]
    if any(p in " ".join(argv) + " " for p in PLACEHOLDERS):
        pytest.skip("a placeholder of the user's own file")
    args = build_parser().parse_args(argv)
    texts = args.scenarios if args.command == "compare" else [args.scenario]
    for text in texts:
        name, _ = split_variant(text)
        ctx = build_context(load_scenario(name, parse_set(args.overrides) + variant_overrides(text)), args.hardware)
        doc = memory_summary(ctx)
        assert doc["fits"], f"{text}: peak {doc['total_bytes'] / 2**30:.1f} GiB does not fit"


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.split()[1] == "sweep"])
def test_a_readme_sweep_has_a_layout_that_fits(command):
    """A README sweep shows a trade-off among layouts that can run: at least one of its layouts
    fits by the memory walk (its GPipe example once swept only layouts of 119 to 395 GiB)."""
    from simcluster.sweep import AXES, candidates, check, parse_axis

    argv = shlex.split(command)[1:]
    args = build_parser().parse_args(argv)
    scenario = load_scenario(args.scenario, parse_set(args.overrides))
    base = scenario.model_dump(exclude_unset=True)
    base["name"] = scenario.name
    texts = {axis: getattr(args, f"axis_{axis}", None) for axis in AXES}
    hardware = args.hardware
    if hardware and "," in hardware:
        texts["hardware"], hardware = hardware, None
    gpus = max(parse_axis("gpus", texts["gpus"], 1)) if texts["gpus"] else scenario.cluster.gpus
    axes = {axis: parse_axis(axis, text, gpus) for axis, text in texts.items() if text is not None}
    assert any(check(cand, hardware, fitting_only=True) is None for cand in candidates(base, axes)), command


def test_every_subcommand_the_docs_name_exists():
    """`simcluster WORD` quoted in README.md or docs/*.md names a command of the CLI (and
    `python -m calibrate SUB` a calibrate subcommand): docs/accuracy.md once sent users to
    `simcluster calibrate`, which is `python -m calibrate`."""
    from calibrate.cli import SUBCOMMANDS
    from simcluster.cli import COMMANDS

    texts = [README.read_text(), *(p.read_text() for p in sorted((README.parent / "docs").glob("*.md")))]
    named = {m for text in texts for m in re.findall(r"`simcluster ([a-z][a-z-]*)", text)}
    assert named and named <= set(COMMANDS), named - set(COMMANDS)
    subs = {m for text in texts for m in re.findall(r"python -m calibrate ([a-z][a-z-]*)", text)}
    assert subs <= set(SUBCOMMANDS), subs - set(SUBCOMMANDS)
