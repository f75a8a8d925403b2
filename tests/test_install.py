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
