"""The ``simcluster`` command: a thin dispatcher over ``simcluster/commands/*``.

Each command module exposes ``NAME``, ``add_arguments(parser)`` and ``run(args) -> int``; its
one-line help lives in the registry here, so that ``simcluster --help`` imports no command and a
command imports only its own module (``simcluster list`` does not load the engine).
Any :class:`UserError` becomes one line on stderr and exit status 2, never a traceback; output
whose reader has gone (``| head``) ends the command quietly with status 0.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Sequence

from simcluster import __version__
from simcluster.errors import did_you_mean, exit_code_of

DESCRIPTION = (
    "Simulate a distributed LLM training step on a GPU cluster (DP/ZeRO, TP+SP, CP, PP "
    "schedules, EP) from a scenario YAML: step time, tokens/s, MFU, bubble, exposed "
    "communication, memory, and why. Start with: simcluster list; simcluster run NAME --out DIR. "
    "Measure your own GPUs into a profile with `python -m calibrate --help`"
)

# Words a user types for the calibration, which is its own program (calibrate/__main__.py) and
# not a subcommand: argparse's nearest choice for them is 'validate', which runs something else.
CALIBRATE_WORDS = frozenset({"calibrate", "calibration", "calibrate-profile"})
CALIBRATE_HINT = (
    "error: calibrate is its own program, not a simcluster command: run `python -m calibrate --help` "
    "(pip install '.[calibrate]'; README, 'Calibrating on your cluster')"
)

# Registry of subcommands: name -> module path. Order is the order shown in --help.
COMMANDS: dict[str, str] = {
    "run": "simcluster.commands.run",
    "memory": "simcluster.commands.memory",
    "collective": "simcluster.commands.collective",
    "gemm": "simcluster.commands.gemm",
    "sweep": "simcluster.commands.sweep",
    "compare": "simcluster.commands.compare",
    "import": "simcluster.commands.importing",
    "validate": "simcluster.commands.validate",
    "list": "simcluster.commands.listing",
}

# Each subcommand's one line for --help (and its own description).
HELP: dict[str, str] = {
    "run": "simulate one training step of a scenario (step time, tokens/s, MFU, bubble, exposed comm, memory)",
    "memory": "per-GPU memory of a scenario: params, grads, optimizer state, activations",
    "collective": "time one collective alone on the cluster (nccl-tests style time, algbw, busbw)",
    "gemm": "time GEMMs of given shapes on a hardware profile (rate, size curve, shape factor)",
    "sweep": (
        "simulate every combination of layout axes (tp, pp, vpp, zero, micro-batch, ...; also GPU "
        "count and hardware) and rank them"
    ),
    "compare": "simulate two or more scenarios (or variants: NAME@key=value) and put them side by side",
    "import": (
        "write a scenario from a launch config: a Megatron-LM launch script, args file or YAML recipe, a "
        "torchtitan TOML, a DeepSpeed JSON (with --model); the cluster from --cluster and --nodes"
    ),
    "validate": "simulate published measurements (shipped or given cases) and report the error per case and overall",
    "list": (
        "list shipped scenarios, hardware profiles, model presets, pipeline schedules, frameworks, "
        "elementwise styles, context-parallel algorithms, userbuffers presets, precisions and "
        "every scenario field"
    ),
}


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad arguments in one line with exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        extra = message.removeprefix("unrecognized arguments: ").split() if message.startswith("unrecognized") else []
        hint = _close_choice(message) or _close_option(extra, self)
        self.exit(2, f"error: {self.prog}: {message}{hint}\n")


_INVALID_CHOICE = re.compile(r"invalid choice: '?([^'(]*?)'? \(choose from (.*)\)")


def _close_choice(message: str) -> str:
    """' (did you mean X?)' for argparse's 'invalid choice' (``simcluster runn``), else ''."""
    found = _INVALID_CHOICE.search(message)
    if not found:
        return ""
    choices = [c.strip().strip("'\"") for c in found.group(2).split(",")]
    return did_you_mean(found.group(1), choices)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with every subcommand; with ``only``, the arguments of that one
    command alone, the others named with their help (their modules, and what they import,
    are not loaded)."""
    parser = _Parser(prog="simcluster", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"simcluster {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module_path in COMMANDS.items():
        cmd = sub.add_parser(name, help=HELP[name], description=HELP[name])
        if only is None or name == only:
            module = importlib.import_module(module_path)
            module.add_arguments(cmd)
            cmd.set_defaults(_run=module.run, _parser=cmd)
    return parser


def _close_option(extra: Sequence[str], parser: argparse.ArgumentParser | None) -> str:
    """' (did you mean --X?)' for the first misspelt option among ``extra`` (``sweep --tpp 2``:
    '--tp'), from the options ``parser`` takes; else ''. A ``KEY=VALUE`` word the command
    could take is named as it would: an option of its own (``sweep --axis tp=1,2``: '--tp
    1,2'; the spelling of a misspelt flag is no guide then) or an override without its
    ``--set`` (``memory NAME parallel.tp=2``)."""
    if parser is None:
        return ""
    options = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
    for word in extra:
        key, sep, value = word.partition("=")
        if not sep or word.startswith("-") or not key:
            continue
        option = "--" + key.split(".")[-1].replace("_", "-")
        if option in options and option != "--set":
            return f" (did you mean {option} {value}?)"
        if "--set" in options and "." in key:
            return f" (an override takes --set: --set {word})"
    at = next((i for i, w in enumerate(extra) if w.startswith("--")), None)
    if at is None:
        return ""
    flag, sep, value = extra[at].partition("=")
    if not sep and at + 1 < len(extra) and not extra[at + 1].startswith("-"):
        value = extra[at + 1]
    if "--set" in options and (path := _scenario_path(flag)):
        return f" (a scenario setting: --set {path}={value or _bare_value(path)})"
    return did_you_mean(flag, options)


def _bare_value(path: str) -> str:
    """What a flag given without a value means for ``path``: 'true' for a switch (``--sp``)."""
    from simcluster.scenario.document import _SECTIONS

    section, _, key = path.partition(".")
    field = _SECTIONS[section].model_fields.get(key) if section in _SECTIONS else None
    return "true" if field is not None and field.annotation is bool else "VALUE"


def _scenario_path(flag: str) -> str | None:
    """The ``--set`` path of a scenario key written as an option (``--tp``: 'parallel.tp',
    ``--micro-batch-size``: 'training.micro_batch', ``--framework``: 'framework'), or None
    when ``flag`` names no key of exactly one section: layout flags are what a user types
    first on a command that changes the scenario only through ``--set``."""
    from simcluster.scenario.misplaced import TOP_SCALARS, home_of  # the schema, only here

    key = flag.lstrip("-").replace("-", "_").lower()
    # the top-level settings that take one value ('model' takes a preset's name in place of
    # the section); the others are sections
    if key in (*TOP_SCALARS, "model"):
        return key
    home = home_of(key, None) if key else None
    return ".".join(home) if home else None


def _unrecognized(extra: Sequence[str], command: argparse.ArgumentParser | None) -> str:
    """The one-line error for arguments a command does not take, naming the command (argparse
    names only the top parser, which reports its subcommands' leftovers)."""
    prog = command.prog if command else "simcluster"
    return f"error: {prog}: unrecognized arguments: {' '.join(extra)}{_close_option(extra, command)}"


def _no_command(parser: argparse.ArgumentParser) -> None:
    """Bare ``simcluster``: the help on stdout (what to type next) and the one-line error on
    stderr, so scripts see a failure and the error is the last line a terminal shows."""
    parser.print_help()
    sys.stdout.flush()  # the help before the error when both go to one terminal
    print(f"error: choose a command ({', '.join(COMMANDS)}); e.g. simcluster list", file=sys.stderr)


def _set_without_value(argv: Sequence[str]) -> str | None:
    """The one-line error for ``--set KEY VALUE`` (a space for the '='): argparse would take
    KEY as the override and refuse VALUE as an 'unrecognized argument', naming neither."""
    for flag, key in zip(argv, argv[1:], strict=False):
        if flag == "--set" and "=" not in key and not key.startswith("-"):
            return f"error: --set: '{key}' has no '=VALUE'; write the override as one word: --set {key}=VALUE"
    return None


#: a value that starts with a minus and a digit or point ('-1,0.5', '-.5'): argparse takes a
#: negative number alone ('-1') as a value but a list of them as an unknown option, so
#: ``--window -1,0.5`` failed with "expected one argument" while ``--window=-1,0.5`` reached
#: the option's own check
_DASH_VALUE = re.compile(r"-\.?\d")


def _joined_dash_values(words: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``words`` with ``--OPT -1,0.5`` written ``--OPT=-1,0.5`` where ``--OPT`` takes one value
    of the command parsed: the value reaches the command's check (which names the option and
    its range) instead of argparse's 'expected one argument'. Words after ``--`` are left as
    they are."""
    command = next(
        (a.choices.get(words[0]) for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None
    ) if words else None
    if command is None:
        return words
    takes_one = {o for a in command._actions if a.nargs is None for o in a.option_strings if o.startswith("--")}
    out: list[str] = []
    for word in words:
        if word == "--" and "--" not in out:
            out.append(word)
            continue
        if "--" not in out and out and out[-1] in takes_one and _DASH_VALUE.match(word):
            out[-1] = f"{out[-1]}={word}"
        else:
            out.append(word)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words and words[0].lower() in CALIBRATE_WORDS:
        print(CALIBRATE_HINT, file=sys.stderr)
        return 2
    # the command is the first word: the top level takes no option but --help and --version
    parser = build_parser(only=words[0] if words and words[0] in COMMANDS else "")
    if "--" not in words and (message := _set_without_value(words)):
        print(message, file=sys.stderr)
        return 2
    args, extra = parser.parse_known_args(_joined_dash_values(words, parser))
    if extra:
        print(_unrecognized(extra, getattr(args, "_parser", None)), file=sys.stderr)
        return 2
    if not getattr(args, "_run", None):
        _no_command(parser)
        return 2
    try:
        return exit_code_of(lambda: args._run(args))
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """Status 0, silently, when the reader of the output closed it (``simcluster list | head``):
    as ripgrep does (crates/core/main.rs: "a broken pipe means graceful termination"), not
    Rich's status 1 or Python's traceback. The standard streams are pointed at /dev/null so
    that the interpreter's last flush of the unread output does not fail again at exit
    (https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):  # a stream replaced in-process (tests) has no descriptor
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
