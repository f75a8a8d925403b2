"""DeepSeek-V3's multi-token prediction modules (``model.mtp_layers``).

Reference: DeepSeek-V3 technical report (arXiv 2412.19437) Sec. 2.2: module k combines
RMSNorm(h^(k-1)) and RMSNorm(Emb(t_(i+k))) through a projection M_k in R^(d x 2d), runs one
Transformer block, and predicts through the output head; "the embedding layer and the output
head are shared with the main model". Sec. 3.2.1: the shallowest (embedding) and deepest
(output head) layers sit on the same pipeline rank so the MTP module shares them physically.
"""

from __future__ import annotations

import pytest
from conftest import make_scenario
from engine_helpers import compute_seconds, layer_builder, run

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.flops import token_flops
from simcluster.memory import stage_params
from simcluster.model import build_model
from simcluster.parallelism.tied import tied_sync_params
from simcluster.scenario import scenario_from_dict

MOE = {
    "name": "moe-mtp", "layers": 4, "hidden": 1024, "heads": 8, "kv_heads": 8, "ffn": 2816,
    "vocab": 4096, "experts": 8, "top_k": 2, "expert_ffn": 704, "dense_layers": 1,
    "mlp": "swiglu", "norm": "rmsnorm", "bias": False, "dropout": False, "position": "rope",
    "tied_embeddings": False,
}  # fmt: skip


def _model(mtp: int):
    return build_model({**MOE, "mtp_layers": mtp})


def test_one_module_adds_a_projection_norms_and_one_moe_layer():
    base, mtp = _model(0), _model(1)
    h = MOE["hidden"]
    moe_layer = base.layer_params(MOE["layers"] - 1)  # a MoE layer of the main model
    assert mtp.params_total() - base.params_total() == 2 * h * h + 3 * h + moe_layer


def test_flops_count_the_module_and_its_pass_through_the_head():
    base, mtp = _model(0), _model(1)
    seq = 2048
    h, v = MOE["hidden"], MOE["vocab"]
    layer_active = base.layer_params(MOE["layers"] - 1, active=True) - 2 * h  # minus its norms
    attention = 2.0 * seq * MOE["heads"] * 2 * (h // MOE["heads"])
    extra = 2.0 * (2 * h * h + layer_active + v * h) + attention
    assert token_flops(mtp, seq).forward - token_flops(base, seq).forward == pytest.approx(extra)


def _scenario(mtp: int, pp: int = 1, **parallel):
    return make_scenario(
        model={**MOE, "mtp_layers": mtp},
        cluster={"hardware": "dgx-h100", "gpus": pp},
        parallel={"tp": 1, "pp": pp, **parallel},
        training={"seq_len": 2048, "micro_batch": 1, "global_batch": 4},
    )


def test_head_runs_the_module_after_the_main_loss():
    b = layer_builder(_scenario(1))
    last = MOE["layers"]  # the module's layer index follows the main model's layers
    fwd = b.head_and_mtp("F")
    names = [s.name for s in fwd if hasattr(s, "seconds")]
    assert names[0] == "lm_head" and names[1] == "mtp_input" and names[-1] == "lm_head"
    expected = compute_seconds(b.head("F")) * 2 + compute_seconds(b.layer(last, "F"))
    assert compute_seconds(fwd) == pytest.approx(expected + next(s.seconds for s in fwd if s.name == "mtp_input"))
    # backward: the module first (its loss is the later one), the main head last
    bwd = [s.name for s in b.head_and_mtp("B") if hasattr(s, "seconds")]
    assert bwd[0] == "lm_head" and bwd[-1] == "lm_head" and "mtp_input" in bwd


def test_last_stage_holds_the_module_and_an_embedding_copy_it_syncs():
    ctx0 = build_context(scenario_from_dict(_scenario(0, pp=2)))
    ctx1 = build_context(scenario_from_dict(_scenario(1, pp=2)))
    m = ctx1.model
    last0 = stage_params(ctx0.model, ctx0.layout, ctx0.chunks[1])
    last1 = stage_params(m, ctx1.layout, ctx1.chunks[1])
    extra = (last1.dense + last1.expert) - (last0.dense + last0.expert)
    assert extra == pytest.approx(m.mtp_params() + m.vocab * m.hidden)  # tp 1, ep 1
    # untied, yet the embedding gradient is all-reduced between the first and last stage
    assert tied_sync_params(ctx0.model, ctx0.layout, ctx0.chunks) == [0.0, 0.0]
    assert tied_sync_params(m, ctx1.layout, ctx1.chunks) == [m.vocab * m.hidden] * 2


def test_simulated_step_is_longer_and_fits_the_extra_activations():
    without, with_mtp = run(_scenario(0)), run(_scenario(1))
    assert with_mtp.summary["step_time_s"] > without.summary["step_time_s"]
    assert with_mtp.summary["peak_memory_bytes"]["max"] > without.summary["peak_memory_bytes"]["max"]
    assert with_mtp.summary["model_flops_per_step"] > without.summary["model_flops_per_step"]


def test_explicit_split_may_leave_the_end_stages_without_layers():
    ok = build_context(scenario_from_dict(_scenario(1, pp=2, layers_per_stage=[4, 0])))
    assert [len(c.layer_indices) for cs in ok.chunks for c in cs] == [4, 0]
    with pytest.raises(UserError, match="positive except the first and last"):
        build_context(scenario_from_dict(_scenario(1, pp=4, layers_per_stage=[2, 0, 2, 0])))


def test_negative_depth_names_the_field():
    with pytest.raises(UserError) as err:
        build_model({**MOE, "mtp_layers": -1})
    assert err.value.field == "model.mtp_layers"
