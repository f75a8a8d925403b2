"""ZeRO-3 / FSDP with routed experts: the experts are gathered and reduced over the group that
shards them (the expert-data-parallel group), apart from the layer's dense parameters.

Reference: pytorch/torchtitan ``torchtitan/models/llama4/infra/parallelize.py`` ``apply_fsdp``:
with expert parallelism each block's ``moe.experts`` gets a ``fully_shard`` of its own on the
dp-mod-ep mesh (the ranks that hold the same experts), the rest of the block on the dp mesh, so
an expert's all-gather and reduce-scatter run over dp x cp x tp / (ep x etp) ranks, each
holding 1/(ep x etp) of the routed experts: the sharding ``memory.static_memory`` counts.
"""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import make_scenario
from engine_helpers import run

from simcluster.context import build_context
from simcluster.engine import comms as comms_module
from simcluster.engine.plan import build_plans, kernel_model
from simcluster.scenario import scenario_from_dict

H, E, FFN, VOCAB, LAYERS = 1024, 8, 512, 1024, 3
MICROBATCHES = 2


def _scenario(ep: int = 4) -> dict:
    return make_scenario(
        model={
            "layers": LAYERS, "hidden": H, "heads": 8, "ffn": 4 * H, "vocab": VOCAB, "mlp": "swiglu",
            "norm": "rmsnorm", "bias": False, "experts": E, "top_k": 2, "expert_ffn": FFN,
        },  # fmt: skip
        cluster={"hardware": "dgx-h100", "gpus": 16},
        parallel={"tp": 1, "pp": 1, "ep": ep, "zero": 3},
        training={"seq_len": 1024, "micro_batch": 1, "global_batch": 16 * MICROBATCHES},
    )


def test_a_moe_unit_splits_into_dense_and_expert_shards():
    """Mixtral-style layer: E experts of 3 h x expert_ffn (SwiGLU) split over ep ranks; the
    attention, norms and router stay dense."""
    ctx = build_context(scenario_from_dict(_scenario()))
    plans = build_plans(ctx, kernel_model(ctx))
    unit = next(u for u in plans[0].chunks[0].phases["F"] if u.layers == (1,))
    routed = E * 3 * H * FFN / 4  # ep = 4, etp = 1
    assert unit.expert_params == pytest.approx(routed)
    groups = {g: p for g, p, _ in unit.shards()}
    assert set(groups) == {"dp", "edp"}
    assert groups["edp"] == pytest.approx(routed)
    assert groups["dp"] + groups["edp"] == pytest.approx(unit.params)
    first = next(u for u in plans[0].chunks[0].phases["F"] if -1 in u.layers)  # embedding + layer 0
    assert first.expert_params == pytest.approx(routed)  # layer 0 is a MoE layer too
    assert first.params - first.expert_params > groups["dp"]  # with the embedding's V x h


def test_expert_gathers_and_reduce_scatters_run_over_the_expert_data_parallel_group(monkeypatch):
    """Each microbatch: every unit gathered for the forward and again for the backward, but for
    the last one, still gathered when the backward starts (torchtitan's apply_fsdp does not
    reshard the last block after its forward: "FSDP would prefetch it immediately"), and its
    gradients reduce-scattered (ZeRO paper Sec. 7: 3 x the parameters per step with
    resharding); the experts' bytes on the edp group (16 / ep = 4 ranks), the rest on dp."""
    seen: list[tuple[str, str, float]] = []
    original = comms_module.Comms.collective

    def spy(self, rank, stage, group, op, nbytes, name, *args, **kwargs):
        if rank == 0 and name.startswith("zero3_"):
            seen.append((group, op, nbytes))
        return original(self, rank, stage, group, op, nbytes, name, *args, **kwargs)

    monkeypatch.setattr(comms_module.Comms, "collective", spy)
    run(_scenario())
    layer_bytes = E * 3 * H * FFN / 4 * 2  # bf16 gathers; ep = 4
    by: Counter[tuple[str, str]] = Counter()
    for group, op, nbytes in seen:
        by[(group, op)] += nbytes
    gathered = MICROBATCHES * (2 * LAYERS - 1)
    assert by[("edp", "all_gather")] == pytest.approx(gathered * layer_bytes)
    # gradients reduced in fp32 (fp32_grad_accum, simcluster's default)
    assert by[("edp", "reduce_scatter")] == pytest.approx(MICROBATCHES * LAYERS * layer_bytes * 2)
    assert by[("dp", "all_gather")] > 0 and by[("dp", "reduce_scatter")] > 0
    ctx = build_context(scenario_from_dict(_scenario()))
    assert len(ctx.layout.group("edp", 0)) == 16 // 4

