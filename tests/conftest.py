"""Shared fixtures: the CLI runner and small scenario builders."""

from __future__ import annotations

import copy
import io
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from simcluster.cli import main
from simcluster.data import data_dir


def pytest_collection_modifyitems(config, items):
    """Run the quick-set ratchet first, then the other tests marked slow: with ``-n 2``
    (pytest-xdist, ``--dist worksteal``) the ratchet, a third of the suite's CPU, then runs
    beside the rest instead of alone at its end, and the idle worker takes queued tests from
    the busy one. A stable sort, so the order is the same in every worker, as xdist requires."""
    items.sort(key=lambda item: (item.name != "test_ratchet_all_quick_cases", item.get_closest_marker("slow") is None))

@pytest.fixture(scope="session", autouse=True)
def _child_tmpdir(tmp_path_factory):
    """Processes the suite starts (torchrun above all, whose elastic agent makes a
    ``torchelastic_*`` log directory per launch and leaves it) keep their temporary files under
    pytest's own base temp, which pytest prunes, not in the machine's /tmp."""
    path = tmp_path_factory.mktemp("child-tmp")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(path))
        yield path


GPT_LIKE = {
    # A GPT-3-style layer (LayerNorm, GeLU, 4h MLP, MHA, dropout) as in Korthikanti et al. 2022.
    "name": "gpt-like",
    "layers": 8,
    "hidden": 1024,
    "heads": 16,
    "ffn": 4096,
    "vocab": 1024,
    "mlp": "gelu",
    "norm": "layernorm",
    "bias": True,
    "dropout": True,
    "position": "learned",
    "max_positions": 2048,
    "tied_embeddings": True,
}


def write_profile(directory: Path, efficiency: dict[str, Any], base: str = "dgx-h100") -> Path:
    """A shipped profile with ``efficiency`` fields changed, written as ``directory/mine.yaml``."""
    data = yaml.safe_load((data_dir("hardware") / f"{base}.yaml").read_text())
    data["efficiency"].update(efficiency)
    path = directory / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def make_scenario(**sections: Any) -> dict[str, Any]:
    """A minimal valid raw scenario dict, with sections merged over the defaults."""
    base: dict[str, Any] = {
        "name": "test",
        "model": dict(GPT_LIKE),
        "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "parallel": {"tp": 1, "pp": 1},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 8},
    }
    out = copy.deepcopy(base)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key].update(value)
        else:
            out[key] = value
    return out


class CliResult:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err


def in_process(entry: Callable[[list[str]], int]) -> Callable[..., CliResult]:
    """A runner of a CLI ``entry(argv)`` in this process, its output captured; argparse's
    SystemExit becomes the exit code."""

    def run(*argv: str) -> CliResult:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = entry(list(argv))
            except SystemExit as exc:  # argparse
                code = int(exc.code or 0)
        return CliResult(code, out.getvalue(), err.getvalue())

    return run


@pytest.fixture
def cli():
    """Run the simcluster CLI in-process; returns CliResult(code, out, err)."""
    return in_process(main)
