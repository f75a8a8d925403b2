"""nanotron's asynchronous TP linears (``overlap.tp_async``; huggingface/nanotron
``parallel/tensor_parallel/functional.py``, set by its ``scripts/scaling_benchmarks.py``).

Checked against the code's order: a column linear all-gathers its input under the GEMM of its
own 1/tp of the tokens and reduce-scatters its input gradient under its weight-gradient GEMM;
a row linear all-gathers its output gradient under its own shard's input-gradient GEMM; the
forward reduce-scatter stays blocking; weight gradients run inside the backward."""

from __future__ import annotations

import pytest
from engine_helpers import compute_seconds, layer_builder, pipeline_scenario, run

from simcluster.errors import UserError
from simcluster.parallelism import tp_async
from simcluster.parallelism.segments import Comm, Compute
from simcluster.scenario import scenario_from_dict


def _scenario(tp_async_on: bool, tp: int = 4, **overlap) -> dict:
    data = pipeline_scenario(1, 2, "1f1b", layers=2)
    data["cluster"].update({"gpus": tp, "gpus_per_node": 8, "network": "simulated"})
    data["parallel"].update({"tp": tp, "sequence_parallel": True})
    data["training"]["seq_len"] = 4096
    # off: nanotron's synchronous linears (no async input-gradient reduce-scatter either)
    data["overlap"].update({"tp_async": tp_async_on, "tp_grad_async": False, **overlap})
    return data


@pytest.mark.parametrize("tp", [2, 3, 4, 8, 16])
def test_the_split_gemms_cover_every_token_once(tp):
    """The own shard, then the rows before and after it: fractions 1/tp + r/tp + (tp-1-r)/tp."""
    local, rest = tp_async.row_pieces(tp)
    assert local == (1 / tp,)
    assert sum(local) + sum(rest) == pytest.approx(1.0)
    assert len(rest) == (1 if tp == 2 else 2)


def test_forward_block_order_follows_the_column_and_row_linears():
    b = layer_builder(_scenario(True))
    mlp = [s for s in b.layer(0, "F") if s.name.startswith("mlp")]
    kinds = [(s.name, s.overlap) if isinstance(s, Comm) else s.name for s in mlp]
    assert kinds == [
        "mlp_norm", ("mlp_tp_ag", True), "mlp_column_local", "mlp_column", "mlp_act", "mlp_row",
        ("mlp_tp_rs", False),
    ]
    ag = next(s for s in mlp if isinstance(s, Comm))
    assert ag.holds_sms  # an NCCL kernel next to the GEMM


def test_backward_hides_the_reduce_scatter_under_the_weight_gradient():
    b = layer_builder(_scenario(True))
    mlp = [s for s in b.layer(0, "B") if s.name.startswith("mlp")]
    names = [s.name for s in mlp]
    assert names == [
        "mlp_tp_ag", "mlp_row_local", "mlp_row", "mlp_row_wgrad", "mlp_act",
        "mlp_tp_ag_input", "mlp_column", "mlp_tp_rs", "mlp_column_wgrad", "mlp_norm",
    ]
    rs = mlp[names.index("mlp_tp_rs")]
    assert rs.overlap and rs.holds_sms
    assert b.layer(0, "W") == []  # nothing left for a separate weight-gradient pass


def test_the_same_work_is_done_with_and_without_async():
    """Splitting the GEMMs changes only their kernel sizes: forward + backward + weight-gradient
    compute agrees within the small-slice inefficiency (1/tp of the tokens per piece)."""
    on, off = layer_builder(_scenario(True)), layer_builder(_scenario(False))
    total_on = sum(compute_seconds(on.layer(0, p)) for p in "FBW")
    total_off = sum(compute_seconds(off.layer(0, p)) for p in "FBW")
    assert total_off <= total_on < 1.05 * total_off
    tp_comms = [s for s in off.layer(0, "F") + off.layer(0, "B") if isinstance(s, Comm)]
    assert len(tp_comms) == len([s for s in on.layer(0, "F") + on.layer(0, "B") if isinstance(s, Comm)])
    assert all(isinstance(s, Compute) or s.group == "tp" for s in on.layer(0, "B"))


def test_async_hides_tp_communication_in_a_run():
    off = run(_scenario(False)).summary
    on = run(_scenario(True)).summary
    assert on["exposed_comm_s"]["tp"] < 0.8 * off["exposed_comm_s"]["tp"]
    assert on["step_time_s"] < off["step_time_s"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"overlap": {"tp_comm": True}}, "keep one"),
        ({"parallel": {"sequence_parallel": False}}, "sequence_parallel"),
        ({"parallel": {"schedule": "zb-h1"}}, "zb-h1"),
    ],
)
def test_impossible_combinations_are_one_line_errors(change, words):
    from simcluster.context import build_context

    data = _scenario(True)
    for section, values in change.items():
        data[section].update(values)
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(data))
    assert err.value.field == "overlap.tp_async"
    assert words in str(err.value)


def test_tp_1_ignores_the_flag():
    data = _scenario(True, tp=1)
    data["parallel"]["sequence_parallel"] = False
    b = layer_builder(data)
    assert not b.tp_async
    assert b.layer(0, "W")  # weight gradients stay in W


def test_framework_nanotron_turns_it_on_with_sequence_parallelism():
    data = _scenario(False)
    del data["overlap"]["tp_async"]
    data["framework"] = "nanotron"
    assert scenario_from_dict(data).overlap.tp_async
    data["parallel"]["sequence_parallel"] = False
    assert not scenario_from_dict(data).overlap.tp_async


def test_the_lm_head_is_an_async_column_linear_too():
    """nanotron's lm_head is a TensorParallelColumnLinear with the same async flag."""
    b = layer_builder(_scenario(True))
    forward = [s.name for s in b.head("F")]
    backward = b.head("B")
    # then the sharded loss's three all-reduces (nanotron's _ShardedCrossEntropy)
    assert forward == [
        "lm_head_tp", "lm_head_local", "lm_head", "loss_tp_max", "loss_tp_target", "loss_tp_sum_exp",
    ]
    assert [s.name for s in backward] == [
        "lm_head_loss", "lm_head_tp_ag_input", "lm_head", "lm_head_tp", "lm_head_wgrad",
    ]
    assert all(s.overlap for s in backward if isinstance(s, Comm))
    assert b.head("W") == []


@pytest.mark.parametrize("userbuffers", [False, True])
def test_the_backward_re_gather_holds_sms_unless_userbuffers_carry_it(userbuffers):
    """Megatron's LinearWithGradAccumulationAndAsyncCommunication re-gathers the input with an async
    torch.distributed all-gather (an NCCL kernel next to the input-gradient GEMM); with
    --tp-comm-overlap TransformerEngine's userbuffers carry it on 2-4 SMs (no SM share modelled)."""
    data = _scenario(False, tp_comm=userbuffers)
    regathers = [s for s in layer_builder(data).layer(0, "B") if getattr(s, "name", "").endswith("_tp_ag_input")]
    assert len(regathers) == 2 and all(r.overlap for r in regathers)
    assert all(r.holds_sms is (not userbuffers) for r in regathers)
