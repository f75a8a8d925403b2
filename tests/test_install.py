"""The installed package (as `pip install .` leaves it) finds its shipped data by name."""

import os
import subprocess
import sys

import pytest


def test_installed_package_finds_shipped_data(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run(
        [sys.executable, "-c", "import simcluster, sys; print(simcluster.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    if probe.returncode != 0:
        pytest.skip("simcluster is not installed in this interpreter (running from a checkout)")
    code = "from simcluster.cli import main; raise SystemExit(main(['memory', 'llama3-8b-8xh100', '--json']))"
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert '"hardware": "dgx-h100"' in res.stdout
    listing = subprocess.run(
        [sys.executable, "-c", "from simcluster.cli import main; main(['list'])"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    assert "llama3-8b-8xh100" in listing.stdout and "dgx-a100" in listing.stdout


def test_every_code_package_is_listed_for_the_wheel():
    # pyproject lists its packages by hand (the data folders are mapped into simcluster.data),
    # so a new sub-package left out would import from a checkout and fail once installed
    tomllib = pytest.importorskip("tomllib")
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    for top in ("simcluster", "calibrate"):
        for init in (root / top).rglob("__init__.py"):
            package = ".".join(init.parent.relative_to(root).parts)
            assert package in listed, f"{package} is missing from [tool.setuptools] packages"
