"""dp.grad_collective: which collective reduces the gradient buckets (issue 8).

Sources: PyTorch DDP and Megatron DDP all-reduce gradients (ZeRO-0); Megatron's distributed
optimizer / ZeRO-1 reduce-scatters them; DeepSpeed's ZeRO-2 all-reduces each bucket whole by
default (``use_multi_rank_bucket_allreduce``, tests/test_deepspeed_zero2.py); nanotron's ZeRO-1 (optim/zero.py,
``sync_gradients_across_dp(reduce_scatter=False)``) all-reduces the whole fp32 gradient buffer,
steps the optimizer on its shard and all-gathers the bf16 parameters. Wire bytes of a ring
(nccl-tests PERFORMANCE.md): all-reduce moves 2(n-1)/n of the buffer per rank, reduce-scatter
(n-1)/n, so a bandwidth-bound all-reduce takes twice as long.
"""

import pytest

from simcluster.errors import UserError
from simcluster.scenario import scenario_from_dict
from tests.engine_helpers import gpt_model, merge_sections, run

H, L, V, P = 2048, 4, 1024, 2048


def scenario(**kw):
    data = {
        "model": gpt_model(
            L, H, V, bias=True, position="learned", max_positions=P, tied_embeddings=True
        ),
        "cluster": {"hardware": "dgx-h100", "gpus": 16},
        "parallel": {"zero": 1},
        "training": {"seq_len": 1024, "micro_batch": 1, "global_batch": 16},
    }
    return merge_sections(data, **kw)


def grad_events(res):
    ev = res.events
    return ev[(ev["group"] == "dp") & ev["name"].str.startswith("grad_")]


@pytest.mark.parametrize("zero, kind", [(0, "all_reduce"), (1, "reduce_scatter")])
def test_auto_follows_the_zero_stage(zero, kind):
    res = run(scenario(parallel={"zero": zero}))
    assert set(grad_events(res)["kind"]) == {kind}


def test_nanotron_zero1_all_reduces_the_whole_fp32_gradient():
    """Every gradient element crosses the wire once per step in fp32 (4 B): the GPT parameter
    count h(V+P) + L(12h^2+13h) + 2h (Ultra-Scale Playbook), all-reduced, then the bf16 params
    are all-gathered (2 B each)."""
    res = run(
        scenario(
            dp={"grad_collective": "all_reduce"},
            overlap={"dp_grad_reduce": False, "param_gather": False},
        )
    )
    params = H * (V + P) + L * (12 * H * H + 13 * H) + 2 * H
    grads = grad_events(res)
    assert set(grads["kind"]) == {"all_reduce"}
    assert grads["bytes"].sum() == pytest.approx(4 * params)
    ev = res.events
    gathers = ev[ev["name"] == "param_all_gather"]
    assert gathers["bytes"].sum() == pytest.approx(2 * params)
    # blocking: gradients after the last backward, gathers after the optimizer
    opt = ev[ev["kind"] == "optimizer"]
    assert grads["end_s"].max() <= opt["start_s"].min() + 1e-12
    assert gathers["start_s"].min() >= opt["end_s"].max() - 1e-12


def test_all_reduce_costs_twice_a_reduce_scatter_when_bandwidth_bound():
    """Ring wire bytes 2(n-1)/n vs (n-1)/n of the buffer: 2x, give or take the latency terms
    (NCCL's ring all-reduce has 2(n-1) steps, 2(nodes-1) of them across the network, the
    reduce-scatter n-1 and nodes-1, nvidia/nccl src/tuning/ring.cc: a latency ratio just under
    2, so the whole just under 2 too). Without NVLS, so that NCCL's NVLS_TREE (which beats the
    ring's all-reduce on two nodes) is not a choice."""
    blocking = {"dp_grad_reduce": False, "param_gather": False}
    times = {}
    for op in ("all_reduce", "reduce_scatter"):
        sc = scenario(dp={"grad_collective": op}, overlap=blocking)
        sc["cluster"]["nvls"] = False
        g = grad_events(run(sc))
        times[op] = (g["end_s"] - g["start_s"]).sum()
    assert 1.9 < times["all_reduce"] / times["reduce_scatter"] <= 2.0


@pytest.mark.parametrize("zero, op", [(0, "reduce_scatter"), (3, "all_reduce")])
def test_collective_that_does_not_fit_the_zero_stage_is_an_error(zero, op):
    with pytest.raises(UserError) as err:
        run(scenario(parallel={"zero": zero}, dp={"grad_collective": op}))
    assert "dp.grad_collective" in str(err.value)


def test_unknown_collective_is_an_error():
    with pytest.raises(UserError) as err:
        scenario_from_dict(scenario(dp={"grad_collective": "allreduce"}))
    assert "dp.grad_collective" in str(err.value)
