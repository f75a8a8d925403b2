"""Tied word embeddings over pipeline stages: the first/last-stage gradient all-reduce (issue 8).

Sources: Megatron-LM ``_allreduce_embedding_grads`` (2021) and Megatron-Core
``finalize_model_grads`` all-reduce the word-embedding gradient over the embedding group
{first stage, last stage} after the DP gradient sync and before the optimizer; nanotron
``tied_parameters.py`` does the same after its DP sync. Size: V*h/tp elements in the gradient
wire precision (fp32 with fp32 accumulation). A 2-rank ring all-reduce moves 2(n-1)/n = 1 x the
buffer per rank (nccl-tests PERFORMANCE.md), so across nodes it takes bytes / NIC bandwidth.
"""

import pytest

from simcluster.context import build_context
from simcluster.hardware import load_profile
from simcluster.scenario import scenario_from_dict
from tests.engine_helpers import gpt_model, merge_sections, run

H, V = 1024, 131072


def scenario(tp=2, pp=4, **kw):
    data = {
        "model": gpt_model(8, H, V, tied_embeddings=True),
        "cluster": {"hardware": "dgx-h100", "gpus": 2 * tp * pp},
        "parallel": {"tp": tp, "pp": pp},
        "training": {"seq_len": 1024, "micro_batch": 1, "global_batch": 8},
    }
    return merge_sections(data, **kw)


def tied(res):
    ev = res.events
    return ev[ev["group"] == "embd"]


def test_first_and_last_stage_all_reduce_v_h_over_tp_fp32():
    res = run(scenario())
    ev = tied(res)
    assert sorted(ev["stage"]) == [0, 3]  # one simulated GPU per stage; middle stages take no part
    assert set(ev["kind"]) == {"all_reduce"}
    assert set(ev["name"]) == {"embedding_grad_all_reduce"}
    assert set(ev["bytes"]) == {V * H / 2 * 4}
    assert res.summary["exposed_comm_s"]["embd"] > 0


def test_after_the_dp_reduction_and_before_the_optimizer():
    res = run(scenario())
    ev = res.events
    for stage in (0, 3):
        mine = ev[ev["stage"] == stage]
        sync = mine[mine["group"] == "embd"]
        dp = mine[mine["group"] == "dp"]
        opt = mine[mine["kind"] == "optimizer"]
        assert sync["start_s"].min() >= dp["end_s"].max() - 1e-12
        assert opt["start_s"].min() >= sync["end_s"].max() - 1e-12


def test_every_rank_simulated_agrees_and_pairs_equal_coordinates():
    sym = run(scenario())
    every = run(scenario(), all_ranks=True)
    assert every.summary["step_time_s"] == pytest.approx(sym.summary["step_time_s"], rel=1e-9)
    assert every.summary["exposed_comm_s"] == pytest.approx(sym.summary["exposed_comm_s"], rel=1e-9)
    ev = tied(every)
    assert len(ev) == 2 * 2 * 2  # (first + last stage) x tp 2 x dp 2
    lay = build_context(scenario_from_dict(scenario())).layout
    for rank in ev["rank"]:
        c = lay.coords(int(rank))
        pair = lay.group("embd", int(rank))
        assert pair == [
            lay.rank(c["tp"], c["cp"], c["dp"], 0),
            lay.rank(c["tp"], c["cp"], c["dp"], 3),
        ]


def test_cross_node_time_is_bytes_over_the_nic():
    """tp 8, pp 2: stage 0 fills node 0, stage 1 node 1; each pair owns one rail (NIC)."""
    res = run(scenario(tp=8, pp=2, cluster={"gpus": 16}))
    ev = tied(res)
    nbytes = V * H / 8 * 4
    prof = load_profile("dgx-h100")
    nic = prof.node.nic_gbps * 1e9 / 8 * prof.efficiency.nic
    seconds = (ev["end_s"] - ev["start_s"]).iloc[0]
    assert seconds == pytest.approx(nbytes / nic, rel=0.05)


@pytest.mark.parametrize(
    "changes",
    [
        {"model": {"tied_embeddings": False}},
        {"parallel": {"pp": 1}, "cluster": {"gpus": 4}},
        {"parallel": {"pp": 2, "schedule": "zbv"}, "cluster": {"gpus": 8}},  # V: both on stage 0
    ],
)
def test_no_sync_when_nothing_is_split(changes):
    assert tied(run(scenario(**changes))).empty
