"""Pipeline sends overlap the next op only with virtual stages, as Megatron runs them.

Megatron-LM megatron/training/arguments.py ``validate_args``: without virtual pipeline stages,
``virtual_pipeline_model_parallel_size = None`` and ``overlap_p2p_comm = False`` ("non-interleaved
schedule does not support overlapping p2p communication"); the 1F1B schedule
(``forward_backward_pipelining_without_interleaving``) waits on each ``send_forward_recv_backward``.
"""

import pytest

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.errors import UserError
from simcluster.scenario import scenario_from_dict
from tests.conftest import make_scenario


def _pp_comm(**sections) -> bool:
    return build_context(scenario_from_dict(make_scenario(**sections))).scenario.overlap.pp_comm


@pytest.mark.parametrize("framework", [None, "megatron-core", "nemo", "megatron-bridge"])
def test_a_megatron_1f1b_blocks_on_its_sends_and_the_interleaved_schedule_overlaps_them(framework):
    extra = {"framework": framework} if framework else {}
    assert _pp_comm(parallel={"pp": 2}, **extra) is False
    # 8 layers on pp 2 at vpp 2: two layers a chunk, Megatron's interleaved schedule
    interleaved = {"pp": 4, "vpp": 2, "schedule": "interleaved"}
    assert _pp_comm(parallel=interleaved, cluster={"hardware": "dgx-h100", "gpus": 8}, **extra) is True


def test_a_written_true_is_the_generic_pipelines_and_refused_for_megatron():
    assert _pp_comm(parallel={"pp": 2}, overlap={"pp_comm": True}) is True
    with pytest.raises(UserError) as err:
        _pp_comm(parallel={"pp": 2}, overlap={"pp_comm": True}, framework="megatron-core")
    assert err.value.field == "overlap.pp_comm" and "interleaved" in str(err.value)


def test_the_default_1f1b_step_is_the_blocking_one():
    """The default simulates what overlap.pp_comm: false writes out, and a step that differs
    from the overlapped one (the sends are on the step's path)."""

    def step(**overlap) -> float:
        sc = make_scenario(parallel={"pp": 2}, training={"seq_len": 2048, "micro_batch": 1, "global_batch": 16},
                           overlap=overlap)  # fmt: skip
        return simulate(scenario_from_dict(sc)).summary["step_time_s"]

    default = step()
    assert default == step(pp_comm=False)
    assert default != step(pp_comm=True)
