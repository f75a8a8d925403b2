"""gpt-oss's learned attention sinks (``model.attention_sinks``, simcluster/attention_sinks.py):
read from config.json, counted as transformers' GptOssAttention holds them (one logit per query
head and layer), no modelled time, and refused on a fused kernel that cannot train them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import make_scenario
from test_scenario_errors import assert_one_line_error, write

from simcluster import attention_sinks
from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.flops import matmul_weights_per_token
from simcluster.hardware import load_profile
from simcluster.model import build_model, from_hf_config, load_preset
from simcluster.scenario import scenario_from_dict

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


@pytest.mark.parametrize(("name", "layers", "heads"), [("gpt-oss-20b", 24, 64), ("gpt-oss-120b", 36, 64)])
def test_sinks_are_one_logit_per_query_head_and_layer(name, layers, heads):
    """GptOssAttention: ``self.sinks = nn.Parameter(torch.empty(config.num_attention_heads))``
    in each of num_hidden_layers layers: 24 x 64 = 1,536 (20b) and 36 x 64 = 2,304 (120b)."""
    m = from_hf_config(FIXTURES / f"{name}.json")
    assert m.attention_sinks and load_preset(name).attention_sinks
    without = build_model({**m.to_dict(), "mla": None, "attention_sinks": False})
    assert m.params_total() - without.params_total() == layers * heads
    assert m.params_total() == load_preset(name).params_total()
    # added to a softmax denominator, never multiplied by a token: no model FLOPs
    assert matmul_weights_per_token(m) == matmul_weights_per_token(without)


def test_other_types_have_none_and_use_sinks_turns_them_on(tmp_path):
    cfg = json.loads((FIXTURES / "llama-3-8b.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert not from_hf_config(path).attention_sinks
    path.write_text(json.dumps({**cfg, "use_sinks": True}))  # an OLMo 3 draft's Olmo3Config.use_sinks
    assert from_hf_config(path).attention_sinks


def test_kernel_support_follows_the_kernels_code():
    """TransformerEngine >= 2.8 runs softmax_type learnable on cuDNN's fused attention
    (NVIDIA/TransformerEngine#2148) and disables FlashAttention for it; flash-attn 2 has no sink
    input (Dao-AILab/flash-attention#1797); FA3's is in vLLM's forward-only fork."""
    assert attention_sinks.support("cudnn").runs
    assert not attention_sinks.support("fa2").runs and not attention_sinks.support("fa3").runs
    # a calibrated profile's own kernel, and a profile without curves, are not second-guessed
    assert attention_sinks.support("measured").runs and attention_sinks.support(None).runs


def _gpt_oss(**training):
    data = make_scenario(
        parallel={"tp": 1, "pp": 1, "ep": 8},
        training={"seq_len": 4096, "micro_batch": 1, "global_batch": 8, **training},
    )
    data["model"] = {"preset": "gpt-oss-20b"}
    return data


@pytest.mark.parametrize("kernel", ["fa2", "fa3"])
def test_a_kernel_without_sinks_is_refused_in_one_line(cli, tmp_path, kernel):
    res = cli("memory", write(tmp_path, _gpt_oss(attention_kernel=kernel)))
    assert_one_line_error(res, "model.attention_sinks", f"kernel '{kernel}'", "cudnn", "flash_attention: false")


def test_cudnn_and_unfused_attention_run_them():
    for training in ({"attention_kernel": "cudnn"}, {"attention_kernel": "fa2", "flash_attention": False}, {}):
        build_context(scenario_from_dict(_gpt_oss(**training)))  # dgx-h100's default kernel: cudnn


def test_a_profile_without_a_sink_kernel_says_so():
    """dgx-a100 has curves for fa2 only: the fix left is the unfused path."""
    data = _gpt_oss()
    data["cluster"] = {"hardware": "dgx-a100", "gpus": 8}
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(data))
    assert "model.attention_sinks" in str(err.value) and "no kernel that does" in str(err.value)
    assert load_profile("dgx-a100").efficiency.attention_kernel == "fa2"


def test_context_parallelism_with_sinks_needs_the_all_to_all(cli, tmp_path):
    """TransformerEngine#2148: sinks under context parallelism only with cp_comm_type a2a."""
    data = _gpt_oss(attention_kernel="cudnn")
    data["model"] = {"preset": "gpt-oss-20b", "sliding_window": 0, "global_every": 0}
    data["parallel"] = {"tp": 1, "pp": 1, "cp": 2, "ep": 4, "cp_comm": "p2p"}
    assert_one_line_error(cli("memory", write(tmp_path, data)), "parallel.cp_comm", "a2a")
