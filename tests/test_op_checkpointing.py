"""torchtitan's op-level selective activation checkpointing (``training.recompute: op``).

References: torchtitan ``apply_ac`` (``selective_ac_option = "op"``): the saved ops are
``aten.mm`` and the SDPA kernels, and its policy recomputes every second ``mm`` of a block;
torchtitan docs/performance.md (A100 table, footnote 1): "Since the 70B training with local
batch size 2 will cause an OOM error when selective activation checkpointing is used, we report
the local batch size 1 case instead" (Llama 2 70B, FSDP2 on 64 A100 80GB).
"""

from __future__ import annotations

import copy

import pytest
from conftest import make_scenario
from engine_helpers import compute_seconds, layer_builder

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.memory import layer_activation_bytes
from simcluster.memory_report import memory_summary
from simcluster.parallelism.segments import Compute
from simcluster.scenario import scenario_from_dict
from simcluster.validate import load_cases

LLAMA = {
    "name": "llama-like", "layers": 4, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336,
    "vocab": 32000, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "bias": False,
    "dropout": False, "tied_embeddings": False,
}  # fmt: skip


def _data(recompute: str) -> dict:
    return make_scenario(
        model=LLAMA,
        cluster={"hardware": "dgx-a100", "gpus": 1},
        training={"seq_len": 4096, "micro_batch": 1, "global_batch": 2, "recompute": recompute,
                  "elementwise": "eager"},
    )  # fmt: skip


def test_keeps_less_than_megatron_selective_and_more_than_full():
    def kept(recompute):
        sc = scenario_from_dict(_data(recompute))
        ctx = build_context(sc)
        return layer_activation_bytes(ctx.model, ctx.layout, sc.training, 0)

    # with FlashAttention Megatron's selective (core attention) keeps what no recomputation keeps
    assert kept("full") < kept("op") < kept("selective") == kept("none")


def test_reruns_half_the_matmuls_and_every_memory_bound_op():
    op = layer_builder(_data("op"))
    plain = layer_builder(_data("none"))
    (redo,) = [s for s in op.layer(0, "B") if isinstance(s, Compute) and s.kind == "recompute"]
    gemms = dict(redo.work.parts)["gemm"]
    forward_gemms = sum(dict(s.work.parts).get("gemm", 0.0) for s in plain.layer(0, "F") if isinstance(s, Compute))
    assert gemms == pytest.approx(0.5 * forward_gemms)
    # the attention kernel's output is kept: no attention in the rerun
    assert "attention" not in dict(redo.work.parts)
    assert redo.seconds < compute_seconds(plain.layer(0, "F"))
    assert compute_seconds(op.layer(0, "B")) == pytest.approx(compute_seconds(plain.layer(0, "B")) + redo.seconds)


def test_torchtitan_llama2_70b_runs_out_of_memory_at_local_batch_2():
    (case,) = [c for c in load_cases() if c.name == "torchtitan/llama2-70b-selective-op-64xa100"]
    data = copy.deepcopy(case.scenario)
    one = memory_summary(build_context(scenario_from_dict(data)))
    data["training"].update(micro_batch=2, global_batch=128)
    two = memory_summary(build_context(scenario_from_dict(data)))
    assert one["fits"] and not two["fits"]


def test_mixture_of_experts_is_refused_with_the_field():
    data = _data("op")
    data["model"].update(experts=8, top_k=2, expert_ffn=1024)
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(data))
    assert err.value.field == "training.recompute"
