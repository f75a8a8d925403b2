"""Interval arithmetic behind exposed communication and bubble."""

import numpy as np

from simcluster.engine.metrics import uncovered, union_length


def test_union_length_merges_overlaps():
    assert union_length(np.array([[0.0, 2.0], [1.0, 3.0], [5.0, 6.0]])) == 4.0


def test_uncovered_by_hand():
    comm = np.array([[0.0, 4.0], [6.0, 10.0]])
    compute = np.array([[1.0, 2.0], [3.0, 7.0], [9.0, 9.5]])
    # [0,4] minus [1,2],[3,4] -> 2; [6,10] minus [6,7],[9,9.5] -> 2.5
    assert uncovered(comm, compute) == 4.5


def test_uncovered_against_sampling():
    rng = np.random.default_rng(0)
    comm = np.sort(rng.uniform(0, 100, (20, 2)), axis=1)
    compute = np.sort(rng.uniform(0, 100, (20, 2)), axis=1)
    t = np.arange(0, 100, 1e-3) + 5e-4
    in_comm = np.zeros_like(t, bool)
    in_compute = np.zeros_like(t, bool)
    for a, b in comm:
        in_comm |= (t >= a) & (t < b)
    for a, b in compute:
        in_compute |= (t >= a) & (t < b)
    assert abs(uncovered(comm, compute) - (in_comm & ~in_compute).sum() * 1e-3) < 0.01
