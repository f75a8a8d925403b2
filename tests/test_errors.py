"""UserError survives the two places that rebuild an exception from its args."""

from __future__ import annotations

import pickle

import pytest
import simpy

from simcluster.errors import UserError


def test_a_user_error_inside_a_simpy_process_reaches_the_caller_as_itself():
    """SimPy re-raises a process's exception as ``type(exc)(*exc.args)`` (simpy/core.py
    Environment.step). With one formatted string as its args, a UserError raised while the
    step ran (a route the cluster could not build) became ``TypeError: missing 1 required
    positional argument: 'message'``, a traceback instead of the one-line error."""
    env = simpy.Environment()

    def process():
        yield env.timeout(1)
        raise UserError("cluster.nvlink_domain", "use a multiple of 4")

    env.process(process())
    with pytest.raises(UserError) as info:
        env.run()
    assert (info.value.field, info.value.message) == ("cluster.nvlink_domain", "use a multiple of 4")
    assert str(info.value) == "cluster.nvlink_domain: use a multiple of 4"


def test_a_user_error_pickles_with_its_field():
    """Sweep's worker processes send errors back pickled; pickle also rebuilds from args."""
    back = pickle.loads(pickle.dumps(UserError("parallel.tp", "must divide heads")))
    assert (back.field, back.message, str(back)) == ("parallel.tp", "must divide heads", "parallel.tp: must divide heads")
    assert str(pickle.loads(pickle.dumps(UserError("", "no field")))) == "no field"
