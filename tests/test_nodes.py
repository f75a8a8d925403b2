"""``cluster.nodes`` (simcluster/nodes.py): a job size in nodes."""

import pytest

from simcluster.errors import UserError
from simcluster.scenario import scenario_from_dict

BASE = {"model": "llama3-8b", "training": {"seq_len": 4096, "global_batch": 64}}


def _cluster(**cluster):
    return scenario_from_dict({**BASE, "cluster": cluster}).cluster


def test_nodes_times_the_profiles_gpus_per_node():
    # the profiles' node.gpus_per_node: DGX H100 8, DGX-2 16; or the scenario's own
    assert _cluster(hardware="dgx-h100", nodes=8).gpus == 64
    assert _cluster(hardware="dgx-2-v100", nodes=2).gpus == 32  # DGX-2: 16 V100s per node
    assert _cluster(hardware="dgx-h100", nodes=2, gpus_per_node=4).gpus == 8


def test_nodes_and_gpus_must_agree():
    assert _cluster(hardware="dgx-h100", nodes=2, gpus=16).gpus == 16
    with pytest.raises(UserError, match="2 nodes x 8 GPUs = 16, but cluster.gpus is 8"):
        _cluster(hardware="dgx-h100", nodes=2, gpus=8)


@pytest.mark.parametrize("nodes", [0, -1, 1.5, "two", True])
def test_bad_node_counts_name_the_field(nodes):
    with pytest.raises(UserError) as err:
        _cluster(hardware="dgx-h100", nodes=nodes)
    assert err.value.field == "cluster.nodes"
