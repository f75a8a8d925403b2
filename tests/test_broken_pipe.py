"""Output piped into a reader that stops early (``simcluster run X | head``) ends the command
quietly with status 0, as ripgrep does ("a broken pipe means graceful termination",
BurntSushi/ripgrep crates/core/main.rs): no traceback, and not Rich's status 1, which fails a
``set -o pipefail`` script. Real subprocesses and real pipes: the behaviour lives in how the
interpreter, Rich and the CLI meet a closed descriptor."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.parametrize(
    "args",
    [["list"], ["run", "llama3-8b-8xh100"], ["run", "llama3-8b-8xh100", "--json"], ["memory", "llama3-8b-8xh100"]],
)
def test_a_reader_that_closed_its_end_ends_the_command_quietly(args):
    """The read end closed before the command writes anything: its first write meets EPIPE
    (Python ignores SIGPIPE, so as an exception), every time, not by a race with ``head``.
    Before: ``list`` and ``--json`` printed a BrokenPipeError traceback, the table status 1."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "simcluster", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err


def test_piped_into_head_in_a_shell():
    """The pipeline as users type it, under pipefail: its status is simcluster's, and 0."""
    command = f"{shlex.quote(sys.executable)} -m simcluster run llama3-8b-8xh100 | head -n 1 >/dev/null"
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, env=_env(), timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
