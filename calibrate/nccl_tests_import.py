"""``calibrate import-nccl-tests``: nccl-tests output → ``measured.collectives`` → a profile.

Reads the text output of the ``*_perf`` binaries in both column layouts
(current: ``size count type redop root time algbw busbw #wrong ...``; 2021 releases: no ``root``,
``error`` instead of ``#wrong``; with the columns options add: ``cputime`` for ``time`` under
``-C``, a last ``timestamp`` column, per-iteration statistics after each placement's four) and
the ``-J`` JSON report (nccl-tests src/util.cu: ``args``,
``config.devices``, ``results[].out_of_place.{time,alg_bw,bus_bw}``). The out-of-place columns
are used (nccl-tests reports them first).

A text log is read as it is captured: NCCL's own ``NCCL_DEBUG`` lines are skipped, a task label
(``srun -l``, ``mpirun --tag-output``) is taken off, and a file may hold several runs (a Slurm
output that several binaries, or several attempts, wrote to), each with its own header, ``#  Rank``
lines and table. Runs of other ops or geometries are imported side by side; the same table
twice is read once; two different tables of one op and geometry are refused (which measurement
the profile should hold is the user's call). Text outside the runs (a job script's echo lines)
is skipped. A run of several data types, reductions or roots (``-d all``, ``-o all``, ``-r all``)
keeps nccl-tests' defaults, float and sum, with a note naming the rest.

The op comes from ``# Collective test starting: X_perf``, the binary name in ``args`` or in the
file name (or a file name stating one op, ``all_gather.log``), or ``--op``, which may not
contradict them; the GPU count from the ``#  Rank`` lines
(or ``--gpus`` without them). Each row's busbw is recomputed with the nccl-tests formula and must
agree with the log's, and the redop column must be a reduction exactly for all_reduce and
reduce_scatter (sendrecv_perf prints the ``-o`` reduction it does not run, ``sum`` by
default): together they check the op and GPU count. Without ``--base`` the base profile is
the shipped one of the GPU the log names (:mod:`simcluster.gpu_names`).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calibrate.busbw import bus_factor, busbw, collective_record
from calibrate.profile_writer import Measurements, build_profile, write_yaml_atomic
from simcluster.errors import UserError, read_text
from simcluster.gpu_names import reference_node
from simcluster.hardware import load_profile
from simcluster.network.ops import OPS

HELP = "import nccl-tests logs (text or -J JSON) into a hardware profile"

# nccl-tests binary stem -> our op name
BINARY_OPS: dict[str, str] = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "broadcast": "broadcast",
    "sendrecv": "send_recv",
}
_BINARY_RE = re.compile(r"(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|sendrecv)_perf")
# An op named by a file the user saved the output under ('all_gather.log', 'allreduce-2nodes.txt',
# 'all-to-all.out', as the README's own example names them), not only a binary's '*_perf' stem:
# the name with '_', '-' or nothing between its words, not inside a longer word.
_FILE_OP_RE = {
    op: re.compile(rf"(?<![a-z]){pattern}(?![a-z])")
    for op, pattern in (
        ("all_reduce", "all[_-]?reduce"),
        ("all_gather", "all[_-]?gather"),
        ("reduce_scatter", "reduce[_-]?scatter"),
        ("all_to_all", "all[_-]?to[_-]?all"),
        ("broadcast", "broadcast"),
        ("send_recv", "send[_-]?recv"),
    )
}
_RANK_RE = re.compile(
    r"^#\s+Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)$"
)
_VERSION_RE = re.compile(r"nccl-library=(\d+)")
# NCCL's own log lines (NCCL_DEBUG=INFO/WARN/TRACE; nccl src/debug.cc): an optional timestamp
# ('[%F %T] ', NCCL_DEBUG_TIMESTAMP_FORMAT), 'host:pid:tid ', then '[cudaDev] NCCL INFO msg',
# '[cudaDev] file.cc:line (func) NCCL WARN msg', ... ; the version line is printed bare.
_NCCL_DEBUG_RE = re.compile(
    r"^(?:\[[^\]]*\]\s*)?\S+:\d+:\d+\s.*?\bNCCL (?:INFO|WARN|TRACE|CALL|ABORT)\b|^NCCL version \d"
)
# A task label before every line: srun -l/--label ('%*d: ', the task number padded), Open MPI's
# mpirun --tag-output ('[jobid,rank]<stdout>:').
_LABEL_RE = re.compile(r"^\s*(\d+): |^\[\d+,(\d+)\]<std(?:out|err)>:\s?")
# Relative busbw disagreement tolerated: the log prints 2 decimals and rounds time.
_BUSBW_RTOL = 0.02


@dataclass
class NcclLog:
    """One nccl-tests run: op, ranks and (size B, out-of-place time s, log busbw GB/s, line) rows.

    ``start`` is the line the run's header starts on (1 for a -J report): a text log can hold
    several runs (several ``*_perf`` binaries, or a Slurm output appended to), each with its
    own header, ``#  Rank`` lines and table.
    """

    path: str
    start: int = 1
    op: str | None = None
    # where the op was read: the log's own words ("line 2 ('# Collective test starting: ...')",
    # "its -J args (...)"), "its file name", or "--op"
    op_from: str | None = None
    op_line: int | None = None
    hosts: list[str] = field(default_factory=list)
    device: str | None = None
    nccl: str | None = None
    rows: list[tuple[int, float, float, int]] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    trailing: int = 0  # columns from 'time' on: (time algbw busbw wrong) per placement
    closed: int = 0  # the line of '# Avg bus bandwidth' / '# Collective test concluded' (0: open)
    groups: set[str] = field(default_factory=set)  # the Rank lines' Group (NCCL_TESTS_SPLIT_MASK)
    columns: list[str] = field(default_factory=list)  # the table header's column names
    stamped: bool = False  # the table ends in a 'timestamp' column (two words a row)
    # each row's (type, redop, root) words, beside ``rows``: -d all, -o all and -r all time
    # every size once per data type, reduction or root (nccl-tests src/common.cu run loops)
    variants: list[tuple[str, ...]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the import left out of the run, why
    redop: tuple[str, int] | None = None  # the first row's redop ('none': no reduction), line
    opened: bool = False  # a header line seen (``start`` is the first)

    @property
    def gpus(self) -> int:
        return len(self.hosts)

    @property
    def nodes(self) -> int:
        return max(1, len(set(self.hosts)))

    @property
    def where(self) -> str:
        return f"{self.path}:{self.start}"

    def has_body(self) -> bool:
        return bool(self.ranks or self.trailing or self.rows)


def _bad(path: str, line: int, what: str) -> UserError:
    return UserError(f"{path}:{line}", what)


def _num(text: str, path: str, line: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise _bad(path, line, f"{column} '{text}' is not a number; is this nccl-tests output?")
    return value


def _nccl_version(code: int) -> str:
    """NCCL_VERSION_CODE 22105 -> '2.21.5' (major*10000 + minor*100 + patch since 2.9)."""
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


# nccl-tests' reduction names (src/common.cu test_opNames); 'none' for the ops that do not reduce
_REDUCTIONS = ("sum", "prod", "max", "min", "avg", "mulsum", "premulsum")
_REDUCING_OPS = ("all_reduce", "reduce_scatter")
# sendrecv_perf prints the -o reduction's name (sum by default) though it reduces nothing: its
# RunTest passes the op name on to TimeTest (nccl-tests src/sendrecv.cu), so its redop says
# nothing about the op
_ANY_REDOP_OPS = ("send_recv",)
# the table header's words for the columns nccl-tests can add or rename (src/util.cu
# writeResultHeader): -C reports 'cputime' in place of 'time'; with timestamps a last column
# 'timestamp' whose rows hold two words, strftime's '%Y-%m-%d %H:%M:%S'
_TIME_WORDS = ("time", "cputime")
_STAMP_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _redop(columns: list[str], leading: list[str]) -> str | None:
    """A row's redop ('none' for no reduction), or None where the row does not show it.

    The 2021 layout leaves the column blank for ops without a reduction (all_gather, ...)."""
    if "redop" not in columns:
        return None
    at, width = columns.index("redop"), columns.index("time")
    if len(leading) == width:
        token = leading[at].lower()
        return token if token == "none" or token in _REDUCTIONS else None
    if len(leading) == width - 1 and at == width - 1:
        return "none"
    return None


# The lines a run's header opens with (nccl-tests src/common.cu): a version line (2.10 on),
# '# Collective test starting: X_perf' (2.13 on), '# nThread ...', '# Using devices'.
_RUN_OPENERS = ("nccl-tests version", "Collective test starting", "nThread", "Using devices")


def _content(path: str, text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of the nccl-tests output in a captured log: NCCL's own INFO/WARN
    lines and blank lines left out, a task label (srun -l, mpirun --tag-output) taken off.

    nccl-tests prints from its first rank only, so in a labelled log its lines all carry one
    task's label (the label of its first '#' line); other tasks may print only NCCL's lines.
    """
    label: str | None = None  # the task whose lines are the nccl-tests output
    labelled: bool | None = None  # None: not known before the first '#' line
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line, task = raw.strip(), None
        tag = _LABEL_RE.match(raw) if labelled is not False else None
        if tag:
            task, line = tag.group(1) or tag.group(2), raw[tag.end() :].strip()
        if not line or _NCCL_DEBUG_RE.match(line):
            continue
        if labelled is None and line.startswith("#"):
            labelled, label = task is not None, task
        elif labelled and task != label:
            who = f"task {task}" if task else "a line without a task label"
            raise _bad(
                path,
                lineno,
                f"{who} among task {label}'s nccl-tests output: only NCCL INFO/WARN lines may "
                "come from other tasks (did each task run its own test, nccl-tests built "
                f"without MPI=1?); keep task {label}'s lines (grep '^ *{label}: ')",
            )
        yield lineno, line


def parse_text(path: str, text: str) -> list[NcclLog]:
    """Parse nccl-tests stdout (either header layout) into its runs, in file order.

    A run ends where the next header starts (or at a ``#  Rank`` line that repeats a rank, or at
    a second table header): the ``#  Rank`` lines of one run are never counted with another's.
    Text outside the runs' tables that is no table row (a job script's echo lines, srun's
    messages, the last NCCL error nccl-tests prints after its summary) is skipped.
    """
    runs = [NcclLog(path)]
    for lineno, line in _content(path, text):
        if line.startswith("#"):
            _header_line(runs, lineno, line)
        else:
            _table_row(runs[-1], lineno, line)
    return runs


def _header_line(runs: list[NcclLog], lineno: int, line: str) -> None:
    """Read one '#' line into the last run, or into a new run it starts (appended to ``runs``)."""
    run = runs[-1]
    body = line.lstrip("#").strip()
    rank = _RANK_RE.match(line)
    tokens = ["time" if t in _TIME_WORDS else t for t in body.split()]
    table = tokens[:2] == ["size", "count"] and "time" in tokens
    if (
        (body.startswith(_RUN_OPENERS) and (run.has_body() or run.closed))
        or (rank and (run.trailing or run.closed or int(rank.group(1)) in run.ranks))
        or (table and (run.rows or run.closed))
    ):
        run = NcclLog(run.path, start=lineno)
        runs.append(run)
    if not run.opened:
        run.start, run.opened = lineno, True
    if rank:
        _rank_line(run, lineno, rank)
    elif m := _BINARY_RE.search(line):
        if run.op is None:
            run.op, run.op_line = BINARY_OPS[m.group(1)], lineno
            run.op_from = f"line {lineno} ('{line}')"
    if m := _VERSION_RE.search(line):
        run.nccl = _nccl_version(int(m.group(1)))
    if table:
        run.stamped = tokens[-1] == "timestamp"
        columns = tokens[:-1] if run.stamped else tokens
        run.trailing, run.columns = len(columns) - columns.index("time"), columns
    if body.startswith(("Avg bus bandwidth", "Collective test concluded")) and run.trailing:
        run.closed = run.closed or lineno


def _rank_line(run: NcclLog, lineno: int, rank: re.Match[str]) -> None:
    """Record a ``#  Rank`` line's rank, host, group and device; refuse split or mixed runs."""
    run.ranks.add(int(rank.group(1)))
    run.hosts.append(rank.group(3))
    run.groups.add(rank.group(2) or "0")
    if len(run.groups) > 1:
        raise _bad(
            run.path,
            lineno,
            "the ranks form several groups (NCCL_TESTS_SPLIT_MASK), each its own "
            "communicator of fewer ranks; import a run without the split",
        )
    device = rank.group(4).strip()
    if device and run.device and device != run.device:
        raise _bad(
            run.path,
            lineno,
            f"rank {rank.group(1)} runs on '{device}', the run's first rank on "
            f"'{run.device}'; a profile describes one GPU: import a run of one kind",
        )
    run.device = device or run.device


def _table_row(run: NcclLog, lineno: int, line: str) -> None:
    """Read a line that is not a '#' line: a row of the run's table, or text outside it."""
    path = run.path
    tokens = line.split()
    if run.closed or not run.trailing:
        # outside a run's table: a job script's own text (echo, srun, module messages) is
        # skipped, but not a table row without its run's header
        if not (tokens[0].isdigit() and len(tokens) >= 4):
            return
        if run.closed:
            raise _bad(
                path,
                lineno,
                f"a table row after its run ended (line {run.closed}); is the header of the "
                "run it belongs to missing?",
            )
        raise _bad(path, lineno, "data before the '# size count ... time algbw busbw' header")
    if run.stamped and len(tokens) > 2 and _STAMP_RE.match(tokens[-2]):
        tokens = tokens[:-2]  # the row's timestamp, date and time
    if len(tokens) < 2 + run.trailing:
        raise _bad(path, lineno, f"expected at least {2 + run.trailing} columns, got {len(tokens)}")
    size = _num(tokens[0], path, lineno, "size")
    oop = tokens[-run.trailing :]
    time_us = _num(oop[0], path, lineno, "time")
    bus = _num(oop[2], path, lineno, "busbw")
    if time_us <= 0:
        return  # nccl-tests prints 0-byte rows with no time
    run.rows.append((int(size), time_us * 1e-6, bus, lineno))
    run.variants.append(tuple(tokens[2 : -run.trailing]))
    if run.redop is None and (redop := _redop(run.columns, tokens[: -run.trailing])) is not None:
        run.redop = (redop, lineno)


def parse_json(path: str, text: str) -> NcclLog:
    """Parse a ``-J`` report (JSON_FILE_VERSION 3 layout of nccl-tests src/util.cu)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(path, exc.lineno, f"invalid JSON: {exc.msg}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise _bad(path, 1, "no 'results' list; is this an nccl-tests -J report?")
    log = NcclLog(path)
    _json_header(doc, log)
    for i, row in enumerate(doc["results"]):
        _json_row(path, i, row, log)
    return log


def _json_header(doc: dict[str, Any], log: NcclLog) -> None:
    """The report's binary (from its ``args``), hosts, device and NCCL version."""
    args = doc.get("args")
    for arg in args if isinstance(args, list) else [args]:
        if m := _BINARY_RE.search(str(arg)):
            log.op, log.op_from = BINARY_OPS[m.group(1)], f"its -J args ('{arg}')"
            break
    config = doc.get("config")
    devices = config.get("devices") if isinstance(config, dict) else None
    if devices is not None and not isinstance(devices, list):
        raise _bad(log.path, 1, "config.devices is not a list; is this an nccl-tests -J report?")
    for i, dev in enumerate(devices or []):
        if not isinstance(dev, dict):
            raise _bad(log.path, 1, f"config.devices[{i}] is not an object; is this an nccl-tests -J report?")
        log.hosts.append(str(dev.get("hostname")))
        log.device = str(dev.get("device_info", "")).strip() or log.device
    if isinstance(doc.get("nccl_version"), int):
        log.nccl = _nccl_version(doc["nccl_version"])


def _json_row(path: str, i: int, row: Any, log: NcclLog) -> None:
    """``results[i]``'s out-of-place size, time and busbw (a row with no time is skipped, as
    nccl-tests times no 0-byte call)."""
    oop = row.get("out_of_place") if isinstance(row, dict) else None
    where = f"results[{i}]"
    if not isinstance(oop, dict) or "size" not in row:
        raise _bad(path, 1, f"{where} lacks 'size' or 'out_of_place'")
    size = row["size"]
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not 0 <= size < 2**63:
        raise _bad(path, 1, f"{where}.size {size!r} is not a byte count")
    time_us = oop.get("time", oop.get("cpu_time"))
    if not isinstance(time_us, (int, float)) or not isinstance(oop.get("bus_bw"), (int, float)):
        raise _bad(path, 1, f"{where}.out_of_place time/bus_bw are not numbers")
    if time_us > 0:
        log.rows.append((int(size), time_us * 1e-6, float(oop["bus_bw"]), i))
        log.variants.append(tuple(str(row.get(k, "")).strip() for k in ("type", "redop", "root")))


#: the data type kept of a run that timed several: nccl-tests' default (-d float), with its
#: default reduction (-o sum) where the op reduces
_DEFAULT_TYPE, _DEFAULT_REDOP = "float", "sum"


def _one_variant(run: NcclLog) -> None:
    """Keep one data type, reduction and root of a run that timed several (``-d all``, ``-o
    all``, ``-r all``): the simulator's table has one time per size, and rows of another type
    time the same bytes differently (half the elements of a float row for a bfloat16 one)."""
    kinds = list(dict.fromkeys(run.variants))
    if len(kinds) <= 1:
        return

    def default(kind: tuple[str, ...]) -> bool:  # (type, redop, root): the type comes first
        words = [w.lower() for w in kind]
        others = [w for w in words[1:] if w in _REDUCTIONS and w != _DEFAULT_REDOP]
        return bool(words) and words[0] == _DEFAULT_TYPE and not others

    keep = next((k for k in kinds if default(k)), kinds[0])
    rows = [row for row, kind in zip(run.rows, run.variants, strict=True) if kind == keep]
    dropped = ", ".join(" ".join(k) for k in kinds if k != keep)
    run.notes.append(
        f"{run.where}: the run times {len(kinds)} variants (-d/-o/-r all); kept "
        f"'{' '.join(keep)}' ({len(rows)} rows), left out {dropped}"
    )
    run.rows, run.variants = rows, [keep] * len(rows)


def parse_log(path: Path, op: str | None = None, gpus: int | None = None) -> list[NcclLog]:
    """Parse one file (JSON if it starts with '{') into its runs, apply ``--op``/``--gpus``,
    check each row's busbw. A run without rows (a header only: a run that failed) is returned
    as it is, for :func:`merge_runs` to leave out."""
    text = read_text(path, "LOG", "log")
    if text.lstrip().startswith("{"):
        runs = [parse_json(str(path), text)]
    else:
        runs = parse_text(str(path), text)
    if not any(run.rows for run in runs):
        raise UserError(
            str(path),
            "no result rows found; give the output of an nccl-tests binary (all_reduce_perf -b 8 -e 8G "
            "-f 2 ...), its table of size, count, type, time, algbw and busbw per row",
        )
    for run in runs:
        _one_variant(run)
    for run in runs:
        if run.rows:
            _check_run(run, path, op, gpus)
    return [run for run in runs if run.rows or run.opened]


def _op_of_file_name(name: str) -> tuple[str, str] | None:
    """(the words that say it, the op) when a file name states one collective: a binary's
    ``all_gather_perf`` first, else a single op's name (``all_gather.log``); two ops named, or
    none, tell nothing."""
    if m := _BINARY_RE.search(name):
        return m.group(0), BINARY_OPS[m.group(1)]
    found = {op: m.group(0) for op, rx in _FILE_OP_RE.items() if (m := rx.search(name.lower()))}
    if len(found) != 1:
        return None
    [(op, words)] = found.items()
    return words, op


def _settle_op(log: NcclLog, path: Path, op: str | None) -> str:
    """The run's collective: the log's own, else its file name's, else ``--op`` (recorded on
    ``log`` with where it came from, and returned); an ``--op`` either contradicts is refused,
    as is a run none of them names."""
    named = _op_of_file_name(path.name)
    if op and log.op and op != log.op:
        raise UserError(
            f"{log.path}:{log.op_line}" if log.op_line else log.path,
            f"the log is {_a(log.op)} run ({log.op_from}); --op {op} contradicts it: drop --op",
        )
    if op and log.op is None and named and named[1] != op:
        raise UserError(
            log.path,
            f"the file name says {named[0]} ({named[1]}); --op {op} "
            "contradicts it: drop --op, or rename the file if its name is wrong",
        )
    if log.op is None and named:
        log.op, log.op_from = named[1], "its file name"
    if log.op is None and op:
        log.op, log.op_from = op, "--op"
    if log.op is None:
        raise UserError(
            log.where,
            "cannot tell the collective (the log names no '*_perf' binary and the file name no "
            "single op such as all_gather); pass --op, or import this file on its own with it",
        )
    return log.op


def _check_run(log: NcclLog, path: Path, op: str | None, gpus: int | None) -> None:
    """Settle the run's op and rank count, refusing an ``--op``/``--gpus`` the log contradicts,
    and check each row's busbw against the nccl-tests formula."""
    settled = _settle_op(log, path, op)
    fix = _fix(log, gpus)
    if log.redop is not None:
        redop, line = log.redop
        if settled not in _ANY_REDOP_OPS and (redop != "none") != (settled in _REDUCING_OPS):
            said = (
                f"a reduction ('{redop}'): an all_reduce or reduce_scatter run"
                if redop != "none"
                else "no reduction (redop 'none'): not an all_reduce or reduce_scatter run"
            )
            raise _bad(log.path, line, f"the rows carry {said}, where the op is {settled} ({log.op_from}); {fix}")
    if gpus and log.hosts and gpus != len(log.hosts):
        raise UserError(
            log.where,
            f"the run's '#  Rank' lines list {len(log.hosts)} ranks; --gpus {gpus} contradicts "
            "them: drop --gpus",
        )
    if gpus and not log.hosts:
        log.hosts = ["?"] * gpus
    if log.gpus == 0:
        raise UserError(log.where, "no '#  Rank ...' device lines; pass --gpus N")
    for size, time_s, log_bus, line in log.rows:
        ours = busbw(settled, size, time_s, log.gpus) / 1e9
        if abs(ours - log_bus) > _BUSBW_RTOL * max(log_bus, 1e-9) + 0.01:
            ratio = log_bus / (size / time_s / 1e9)
            raise _bad(
                log.path,
                line,
                f"busbw {log_bus} GB/s disagrees with the nccl-tests {settled} formula for "
                f"{log.gpus} GPUs ({ours:.2f}): the log's busbw/algbw {ratio:.3f} is "
                f"{_factor_of(ratio, settled, log.gpus)}; {fix}",
            )


def _a(op: str) -> str:
    return ("an " if op[0] in "aeiou" else "a ") + op


def _fix(log: NcclLog, gpus: int | None) -> str:
    """What to change when the log's numbers contradict its op or rank count."""
    given = [flag for flag, on in (("--op", log.op_from == "--op"), ("--gpus", bool(gpus))) if on]
    if given:
        return "check " + " and ".join(given)
    if log.op_from == "its file name":
        return "the file name may be wrong: rename it or pass --op"
    return "the log contradicts itself: is it edited, or two logs pasted together without a header?"


def _factor_of(ratio: float, op: str, gpus: int) -> str:
    """Which op on the run's GPUs, or which GPU count for its op, has ``ratio`` as its nccl-tests
    busbw factor (doc/PERFORMANCE.md: 2(n-1)/n all_reduce, (n-1)/n all_gather, reduce_scatter
    and alltoall, 1 broadcast and sendrecv)."""

    def fits(o: str, n: int) -> bool:
        return abs(bus_factor(o, n) - ratio) <= _BUSBW_RTOL * ratio

    ops = [o for o in OPS if o != op and fits(o, gpus)]
    found = [f"the factor of {' or '.join(ops)} on {gpus} GPUs"] if ops else []
    if ratio < 2:
        n = round(2 / (2 - ratio)) if op == "all_reduce" else round(1 / (1 - ratio)) if ratio < 1 else 0
        if 2 <= n <= 100_000 and n != gpus and fits(op, n):
            found.append(f"{op}'s factor on {n} GPUs")
    return " or ".join(found) or f"no collective's factor on {gpus} GPUs"


def _geometry(log: NcclLog) -> tuple[str | None, int, int]:
    return log.op, log.gpus, log.nodes


def _describe(log: NcclLog) -> str:
    nodes = f"{log.nodes} node" + ("s" if log.nodes > 1 else "")
    return f"{log.op} on {log.gpus} GPUs ({nodes})"


def merge_runs(runs: list[NcclLog]) -> tuple[list[NcclLog], list[str]]:
    """The runs to import, and a note per run left out.

    Runs of the same op and geometry (GPUs, nodes) describe one table. A size both time
    identically is one measurement printed twice (the same output appended to a file again):
    it is kept once, and a run that adds nothing is left out. A size they time differently is
    two measurements of the same thing, and which one the profile should hold is the user's
    call: refused, naming where the second run starts. Sizes only one of them timed are kept
    (a sweep split over runs); runs of other ops or geometries are imported side by side.
    """
    seen: dict[tuple[str | None, int, int], dict[int, tuple[float, NcclLog]]] = {}
    kept: list[NcclLog] = []
    notes: list[str] = []
    for run in runs:
        notes += run.notes
        if not run.rows:
            notes.append(f"{run.where}: a run without result rows (it failed or was cut short?); left out")
            continue
        table = seen.setdefault(_geometry(run), {})
        fresh = []
        own: dict[int, int] = {}  # size -> line, in this run
        for row in run.rows:
            size, time_s, _, line = row
            if size in own:
                raise _bad(
                    run.path, line, f"a second {size} B row in one table (line {own[size]}); remove one of them"
                )
            own[size] = line
            if size not in table:
                fresh.append(row)
                continue
            first_time, first = table[size]
            if time_s != first_time:
                other = first.where if first.path != run.path else f"line {first.start}"
                raise UserError(
                    run.where,
                    f"a second {_describe(run)} run starts here and times {size} B in "
                    f"{time_s * 1e6:g} us (line {line}) where the run from {other} took "
                    f"{first_time * 1e6:g} us; keep the one run you trust in the file "
                    f"(e.g. sed -n '{run.start},$p') and import that",
                )
        for size, time_s, _, _ in fresh:
            table[size] = (time_s, run)
        if fresh:
            run.rows = fresh
            kept.append(run)
        else:
            first = table[run.rows[0][0]][1]
            notes.append(f"{run.where}: the same {_describe(run)} table as {first.where}; read once")
    return kept, notes


def to_measurements(logs: list[NcclLog]) -> Measurements:
    """Collective rows: one node → scope 'intra', several → 'world' (GB/s = 1e9 B/s)."""
    m = Measurements()
    for log in logs:
        assert log.op is not None  # parse_log refuses a log without one
        scope = "intra" if log.nodes == 1 else "world"
        for size, time_s, _, _ in log.rows:
            m.collectives.append(
                collective_record(
                    log.op, scope, size, time_s, log.gpus, log.gpus // log.nodes, log.nodes
                )
            )
    return m


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of the subcommand."""
    parser.add_argument(
        "logs",
        nargs="+",
        type=Path,
        metavar="LOG",
        help="nccl-tests output: the text a *_perf binary prints (any number of runs in one file; "
        "NCCL_DEBUG lines and srun -l / mpirun --tag-output labels are skipped) or its -J JSON "
        "report. The same table twice is read once; two different tables of one op on the same "
        "GPUs and nodes are refused",
    )
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="YAML",
        help="the profile to write (required; written atomically, replacing the file)",
    )
    parser.add_argument(
        "--base",
        metavar="PROFILE",
        help="profile to start from (a shipped name or a YAML path); it must describe the log's "
        "GPU. Default: the shipped profile of the GPU the log's '#  Rank' lines name (dgx-h100 "
        "for 'NVIDIA H100 80GB HBM3', dgx-a100 for 'NVIDIA A100-SXM4-80GB'); required when the "
        "log names none or one without a shipped profile",
    )
    parser.add_argument(
        "--allow-other-gpu",
        action="store_true",
        help="import into a --base whose GPU is not the log's (default: refused); the profile "
        "keeps the base's GPU and provenance.device names the log's",
    )
    parser.add_argument(
        "--op",
        choices=OPS,
        help="collective, when the log does not say (default: from its '# Collective test "
        "starting: X_perf' line, -J args or file name); refused if the log says otherwise",
    )
    parser.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="rank count, when the log has no '#  Rank' lines (default: counted from them); "
        "refused if they say otherwise",
    )


def _shipped(device: str) -> str | None:
    """The shipped profile of the GPU ``device`` names, or None (unknown or unshipped board)."""
    try:
        return reference_node(device, field="--base")
    except UserError:
        return None


def _same_gpu(a: str, b: str) -> bool:
    """Whether two device names are one GPU: the same shipped profile, or for GPUs no shipped
    profile describes, the same name (case, spaces and dashes aside)."""
    ours, theirs = _shipped(a), _shipped(b)
    if ours or theirs:
        return ours == theirs
    return re.sub(r"[\s_-]+", " ", a.lower()).strip() == re.sub(r"[\s_-]+", " ", b.lower()).strip()


def log_device(runs: list[NcclLog]) -> tuple[str, NcclLog] | None:
    """The GPU the runs name and the first run naming it; runs on different GPUs are refused."""
    found: tuple[str, NcclLog] | None = None
    for run in runs:
        if run.device is None:
            continue
        if found is None:
            found = (run.device, run)
        elif not _same_gpu(run.device, found[0]):
            raise UserError(
                run.where,
                f"this run is on '{run.device}', {found[1].where} on '{found[0]}'; a profile "
                "describes one GPU: import them into separate profiles",
            )
    return found


def choose_base(base: str | None, device: tuple[str, NcclLog] | None, allow_other: bool) -> tuple[str, str]:
    """The profile to start from and a line saying why; refuses a base of another GPU."""
    if base is None:
        if device is None:
            raise UserError(
                "--base",
                "the log does not name its GPU (no '#  Rank ... device' lines or config.devices); "
                "pass --base with the profile of the machine it ran on",
            )
        name, run = device
        try:
            shipped = reference_node(name, field="--base")
        except UserError as exc:
            raise UserError("--base", f"the log's GPU '{name}' ({run.where}): {exc.message}; pass it as --base") from None
        if shipped is None:
            raise UserError(
                "--base",
                f"no shipped profile for the log's GPU '{name}' ({run.where}); pass --base with a "
                "profile YAML of that machine",
            )
        return shipped, f"base: {shipped}, the shipped profile of the log's {name} (--base to choose another)"
    gpu = load_profile(base, field="--base").gpu.name
    if device is None:
        return base, f"base: {base} (the log does not name its GPU)"
    name, run = device
    if _same_gpu(name, gpu):
        return base, f"base: {base}"
    if not allow_other:
        shipped = _shipped(name)
        instead = f"use --base {shipped} (or omit it)" if shipped else "use a --base of that GPU"
        raise UserError(
            "--base",
            f"{base} describes '{gpu}', but the log ({run.where}) ran on '{name}': {instead}, or "
            "add --allow-other-gpu to keep the base's GPU",
        )
    return base, f"base: {base} ('{gpu}', not the log's '{name}': --allow-other-gpu)"


def run(args: argparse.Namespace) -> int:
    """Parse every log and write the profile."""
    if args.gpus is not None and args.gpus < 1:
        raise UserError("--gpus", f"must be >= 1, got {args.gpus}")
    logs, notes = merge_runs([run for p in args.logs for run in parse_log(p, args.op, args.gpus)])
    device = log_device(logs)
    base, why = choose_base(args.base, device, args.allow_other_gpu)
    first = logs[0]
    provenance: dict[str, Any] = {
        "device": device[0] if device else None,
        "device_count": max(log.gpus for log in logs),
        "nodes": max(log.nodes for log in logs),
        "hostnames": len({h for log in logs for h in log.hosts}),
        "nccl": first.nccl,
        "backend": "nccl",
        "source": "nccl-tests import: " + ", ".join(str(p) for p in args.logs),
    }
    data = build_profile(to_measurements(logs), provenance, base, machine=None, origin="nccl-tests logs")
    write_yaml_atomic(args.out, data)
    for note in [*notes, why]:
        print(note)
    print(f"wrote {args.out} ({sum(len(log.rows) for log in logs)} rows)")
    return 0
