"""``simcluster import KIND FILE``: a scenario from a launch config the user already has."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simcluster.budget import format_count, tokens_argument
from simcluster.commands.common import out_path, print_notes
from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.hf_import import read_config
from simcluster.importers import IMPORTERS, Imported, ImportOptions, import_config
from simcluster.importers.result import IMPORTED_MARK, body_digest, recorded_digest
from simcluster.importers.run_length import run_tokens
from simcluster.scenario import parse_set, scenario_from_dict
from simcluster.scenario.loading import apply_overrides

NAME = "import"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "kind",
        metavar="KIND",
        choices=list(IMPORTERS),
        help="megatron (a Megatron-LM or Megatron-DeepSpeed launch script or args file, or a "
        "Megatron-LM YAML recipe), "
        "torchtitan (a TOML job config) or deepspeed (a DeepSpeed JSON config)",
    )
    parser.add_argument("file", metavar="FILE", help="the launch script, TOML or JSON config")
    parser.add_argument(
        "--cluster", metavar="PROFILE", help="hardware profile (simcluster list hardware)"
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--nodes", type=int, metavar="N", help="nodes in the job")
    size.add_argument("--gpus", type=int, metavar="N", help="GPUs in the job")
    parser.add_argument(
        "--gpus-per-node", type=int, metavar="N", help="GPUs per node, when not the profile's"
    )
    parser.add_argument(
        "--model",
        metavar="PRESET",
        help="the model, for configs that do not shape one (deepspeed; torchtitan instead of "
        "its [model] name and flavor)",
    )
    parser.add_argument(
        "--hf-config",
        metavar="PATH",
        help="a Hugging Face config.json as the model (deepspeed; torchtitan instead of its [model])",
    )
    parser.add_argument(
        "--seq-len",
        type=int,
        metavar="N",
        help="tokens per sequence, for configs without it (deepspeed)",
    )
    parser.add_argument(
        "--framework",
        metavar="NAME",
        help="the framework preset, instead of the one the config implies",
    )
    parser.add_argument(
        "--var", action="append", metavar="NAME=VALUE",
        help="a shell variable set before a launch script runs, e.g. --var MODEL_SIZE=39B (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--set", dest="overrides", action="append", metavar="KEY=VALUE",
        help="a scenario field set after the import, e.g. --set model.vocab=32000 (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--out", metavar="PATH", default="-", type=out_path, help="scenario YAML to write; - (default) prints it"
    )
    parser.add_argument(
        "--force", action="store_true",
        help="overwrite --out's file though the importer did not write it (a scenario of one's own)",
    )  # fmt: skip


def import_state(path: Path) -> str:
    """What the file at ``path`` is to the importer: ``"intact"``, a scenario it wrote and
    nobody changed since (one it may replace: a re-import); ``"edited"``, one it wrote whose
    lines below the first no longer match the digest the first records; ``"undigested"``, one
    an importer wrote before the digest (an edit cannot be ruled out); ``"other"``, a file it
    did not write."""
    try:
        data = path.read_bytes()
    except OSError:
        return "other"
    first, _, body = data.partition(b"\n")
    line = first.decode("utf-8", errors="replace")
    if not line.startswith(IMPORTED_MARK):
        return "other"
    recorded = recorded_digest(line)
    if recorded is None:
        return "undigested"
    return "intact" if recorded == body_digest(body) else "edited"


def check_out_free(out: str, force: bool) -> None:
    """Refuse to replace a file at ``out`` that the importer did not write, or wrote and the user
    then edited, unless ``force``: ``--out`` overwrote a hand-made scenario without a word, and
    a hand-tuned import too. An empty file (``mktemp``'s) holds nothing to lose."""
    target = Path(out)
    if force or not target.is_file() or target.stat().st_size == 0:
        return
    state = import_state(target)
    if state == "intact":
        return
    what = {
        "other": "was not written by simcluster import",
        "edited": "was edited after simcluster import wrote it",
        "undigested": "was written by an older simcluster import, whose first line records no digest to tell "
        "an edit by hand",
    }[state]
    raise UserError("--out", f"'{out}' exists and {what}; give another path, or --force to overwrite it")


def _variables(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        name, eq, value = item.partition("=")
        if not eq or not name.strip().isidentifier():
            raise UserError("--var", f"'{item}' must look like NAME=VALUE")
        out[name.strip()] = value
    return out


def imported_scenario(args: argparse.Namespace) -> Imported:
    """The import ``args`` ask for, with ``--set`` applied and the result validated (schema,
    model, hardware and layout: what ``simcluster run`` checks before simulating)."""
    hf_config = str(Path(args.hf_config).resolve()) if args.hf_config else None
    hf_parsed = None
    if args.hf_config:
        # read first, so that a bad one is --hf-config's error, not the scenario field's (whose
        # fix speaks of a path relative to a scenario's folder, or of model.preset); and once:
        # the importer and the check below take what was read
        if not Path(args.hf_config).exists():
            raise UserError(
                "--hf-config",
                f"file '{args.hf_config}' not found; give the path of a Hugging Face config.json (a Hub "
                "id is not fetched: download its config.json first), or a shipped model as --model",
            )
        hf_parsed = read_config(args.hf_config, "--hf-config")
    options = ImportOptions(
        cluster=args.cluster, nodes=args.nodes, gpus=args.gpus, gpus_per_node=args.gpus_per_node,
        model=args.model, hf_config=hf_config, seq_len=args.seq_len, framework=args.framework,
        variables=_variables(args.var), hf_parsed=hf_parsed,
    )  # fmt: skip
    result = import_config(args.kind, args.file, options)
    overrides = parse_set(args.overrides)
    if overrides:
        result.scenario = apply_overrides(result.scenario, overrides)
        result.notes.append(f"with --set {' '.join(args.overrides)}")
    result.check_needs()
    model = result.scenario.get("model")
    # what was read is the scenario's model only while --set has not pointed it elsewhere
    same = isinstance(model, dict) and hf_config is not None and model.get("hf_config") == hf_config
    try:
        ctx = build_context(scenario_from_dict(result.scenario), hf_parsed=hf_parsed if same else None)
    except UserError as exc:
        # the error is about a scenario the user never wrote: say where it came from, since the
        # fix is often the import's own options (SC'21's 1.7B case of run_table_1.sh is written
        # for 4 nodes: on --nodes 64 its batch no longer divides)
        size = f"--nodes {args.nodes}" if args.nodes is not None else f"--gpus {args.gpus}"
        raise UserError(
            exc.field,
            f"{exc.message} (in the scenario imported from {Path(args.file).name} on {size}; "
            "--var, --nodes/--gpus or --set change it)",
        ) from None
    if result.run_tokens is None and result.run_steps is not None:
        steps, flag = result.run_steps
        result.run_tokens = run_tokens(
            ctx.scenario.training.seq_len, ctx.layout.global_batch, iters=steps, names=("samples", flag),
            batch_note=" (micro-batch x dp, as no batch is given)",
        )  # fmt: skip
    return result


def run(args: argparse.Namespace) -> int:
    from simcluster.output.atomic import atomic_write_text, check_file_writable

    if args.out != "-":  # before the import's notes, so that a bad path is the one line printed
        check_file_writable(args.out, "--out", "scenario.yaml")
        check_out_free(args.out, args.force)
    result = imported_scenario(args)
    if result.run_tokens is not None:  # in the file's notes too: the scenario is one step
        tokens, how = result.run_tokens
        scenario = "SCENARIO.yaml" if args.out == "-" else args.out
        result.notes.append(
            f"the run trains {format_count(tokens)} tokens ({how}): simcluster run {scenario} "
            f"--tokens {tokens_argument(tokens)} says how long it takes on this layout"
        )
    print_notes(
        [f"note: {n}" for n in result.notes]
        + [f"not imported: {s}" for s in result.skipped_lines()]
    )
    text = result.yaml_text()
    if args.out == "-":
        sys.stdout.write(text)
        return 0
    atomic_write_text(args.out, text, "--out")
    print(
        f"wrote {args.out} ({len(result.skipped)} setting(s) not imported, listed in it)",
        file=sys.stderr,
    )
    return 0
