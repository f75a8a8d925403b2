"""Selective recomputation by module, as Megatron-Core's ``--recompute-modules`` lists them:
what each one stops storing (Korthikanti-style byte counts per token of one layer) and what it
reruns before the backward."""

from __future__ import annotations

import pytest
from engine_helpers import layer_builder

from simcluster.context import build_context
from simcluster.memory import layer_activation_bytes
from simcluster.scenario import scenario_from_dict
from tests.conftest import make_scenario

S, H, FFN = 2048, 1024, 4096


def _data(*modules: str, **model):
    training = {"seq_len": S, "micro_batch": 1, "global_batch": 8, "recompute": "selective"}
    if modules:
        training["recompute_modules"] = list(modules)
    return make_scenario(training=training, model=model or {})


def _act(data, layer: int = 0) -> float:
    ctx = build_context(scenario_from_dict(data))
    return layer_activation_bytes(ctx.model, ctx.layout, ctx.scenario.training, layer)


def _recompute_seconds(data, layer: int = 0) -> float:
    b = layer_builder(data)
    return sum(seg.seconds for seg in b.layer(layer, "B") if getattr(seg, "kind", "") == "recompute")


def test_default_selective_is_core_attention():
    assert _act(_data()) == _act(_data("core_attn"))
    assert _recompute_seconds(_data()) == pytest.approx(_recompute_seconds(_data("core_attn")))


def test_layernorm_drops_both_norm_outputs():
    # the inputs of the QKV GEMM and of fc1 (2 B each per hidden element, per token)
    assert _act(_data("core_attn")) - _act(_data("core_attn", "layernorm")) == pytest.approx(2 * 2 * S * H)
    assert _recompute_seconds(_data("core_attn", "layernorm")) > _recompute_seconds(_data("core_attn"))


def test_mlp_keeps_only_its_input():
    # GeLU 4h MLP: fc1 input h + GeLU input ffn + fc2 input ffn, all 2 B -> only the input h stays
    assert _act(_data("core_attn")) - _act(_data("core_attn", "mlp")) == pytest.approx(2 * S * 2 * FFN)
    b = layer_builder(_data("core_attn", "mlp"))
    gemms = b.mlp_gemms(FFN)
    assert _recompute_seconds(_data("core_attn", "mlp")) - _recompute_seconds(_data("core_attn")) > b._gemms(gemms, "F").total


MOE = {"experts": 8, "top_k": 2, "expert_ffn": 2 * H}


def test_moe_act_drops_the_expert_activation_outputs():
    # per routed copy the activation output (fc2 input, expert_ffn wide) is no longer kept
    with_moe = {**MOE}
    delta = _act(_data("core_attn", **with_moe)) - _act(_data("core_attn", "moe_act", **with_moe))
    assert delta == pytest.approx(2 * S * 2 * (2 * H))


def test_mla_up_proj_keeps_the_latents_instead_of_q_k_v():
    data = make_scenario(
        cluster={"hardware": "dgx-h100", "gpus": 8},
        training={"seq_len": 1024, "micro_batch": 1, "global_batch": 8, "recompute": "selective",
                  "recompute_modules": ["mla_up_proj"]},
    )
    data["model"] = {"preset": "deepseek-v3", "layers": 4, "dense_layers": 3}
    plain = {**data, "training": {**data["training"], "recompute_modules": ["core_attn"]}}
    # DeepSeek-V3: Q 128 x 192, K 128 x 192 (decompressed, the rotary key broadcast to every
    # head: Megatron-Core's MLA concatenates k_pos_emb onto each head's key), V 128 x 128, 2 B each
    assert _act(plain) - _act(data) == pytest.approx(2 * 1024 * (2 * 128 * 192 + 128 * 128))


@pytest.mark.parametrize("training, message", [
    ({"recompute": "none", "recompute_modules": ["layernorm"]}, "recompute: selective"),
    ({"recompute": "selective", "recompute_modules": ["mla_up_proj"]}, "MLA"),
])
def test_bad_recompute_modules_are_one_line_errors(cli, tmp_path, training, message):
    import yaml

    data = make_scenario(training={"seq_len": 1024, "micro_batch": 1, "global_batch": 8, **training})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    res = cli("run", str(path))
    assert res.code == 2 and "training.recompute_modules" in res.err and message in res.err
    assert res.err.count("\n") == 1
