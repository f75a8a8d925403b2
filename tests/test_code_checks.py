"""The code stays lint-clean (ruff) and type-clean (mypy), as the project's style asks.

Both tools come with the ``test`` extra; their settings are in pyproject.toml.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[test]')")
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_finds_nothing():
    proc = _run("ruff", "check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_finds_nothing_in_the_simulator_or_calibrate(tmp_path):
    # a fresh cache: a stale one from another mypy version would be read otherwise
    proc = _run("mypy", "--cache-dir", str(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
