"""tools/fuzz_scenarios.py draws from every shipped hardware profile, so a new profile is fuzzed
(its mesh, NIC count or memory) from the day it ships."""

import sys
from pathlib import Path

import pytest

from simcluster.hardware import shipped_profiles

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
fuzz = pytest.importorskip("fuzz_scenarios")


def test_the_fuzzer_draws_every_shipped_profile():
    assert set(fuzz.HARDWARE) == set(shipped_profiles())
    assert len(fuzz.HARDWARE) == len(set(fuzz.HARDWARE))
