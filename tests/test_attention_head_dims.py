"""A fused-attention kernel is costed only for head dimensions it trains (simcluster/
attention_head_dims.py): flash-attn 2 and FlashAttention-3 stop at 256 (flash_api.cpp's "only
supports head dimension at most 256"), cuDNN's fused attention at 128 except 256 on Hopper and
192/128 or 256/256 on Blackwell (TransformerEngine fused_attn.cpp, nvte_get_fused_attn_backend).
A kernel the scenario names is refused beyond; a default one falls back as TransformerEngine's
get_attention_backend does, to its other fused backend or to unfused attention, with a note."""

from __future__ import annotations

import json

import pytest

from simcluster.attention_head_dims import choose, runs
from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.model import build_model
from simcluster.scenario import load_scenario
from tests.test_scenario_errors import assert_one_line_error

BASE = "llama3-8b-8xh100"  # hidden 4096: 8 heads are 512 wide
WIDE = ("--set", "model.heads=8", "--set", "model.kv_heads=8", "--set", "model.layers=2")


def _model(heads: int, hidden: int = 4096):
    return build_model({"layers": 2, "hidden": hidden, "heads": heads, "ffn": 4 * hidden, "vocab": 32000})


@pytest.mark.parametrize(
    "kernel, d_qk, d_v, cc, ok",
    [("fa2", 256, 256, 9.0, True), ("fa2", 264, 264, 9.0, False),
     ("fa2", 224, 224, 8.6, False),  # above 192 only on sm80/90/100/120 (TE's filter)
     ("fa2", 192, 192, 8.6, True),
     ("fa3", 256, 256, 9.0, True), ("fa3", 320, 320, 9.0, False),
     ("cudnn", 128, 128, 8.0, True), ("cudnn", 256, 256, 8.0, False),
     ("cudnn", 256, 256, 9.0, True), ("cudnn", 320, 320, 9.0, False),
     ("cudnn", 192, 128, 9.0, True), ("cudnn", 256, 128, 9.0, False),  # TE's cuDNN >= 9.11 MLA fence
     ("cudnn", 192, 192, 10.0, False), ("cudnn", 192, 128, 10.0, True), ("cudnn", 256, 256, 10.0, True),
     ("cudnn", 100, 100, 9.0, False),  # not a multiple of 8
     ("measured", 1024, 1024, 9.0, True)],  # a calibrated profile's own timings are not judged
)  # fmt: skip
def test_kernel_limits(kernel, d_qk, d_v, cc, ok):
    assert runs(kernel, d_qk, d_v, cc) is ok


def test_no_fused_kernel_falls_back_to_unfused_with_a_note():
    choice = choose(_model(8), "cudnn", False, ["cudnn", "fa2", "fa3"], 9.0, cp_ring=False)
    assert (choice.kernel, choice.fused) == (None, False)
    assert choice.note is not None and "head dim 512" in choice.note and "UnfusedDotProductAttention" in choice.note


def test_the_other_fused_backend_takes_over_where_it_can():
    # head dim 192 on a B200: cuDNN trains only 192/128 and 256/256 above 128; flash-attn 2 runs it on sm100
    choice = choose(_model(21, 4032), "cudnn", False, ["cudnn", "fa2"], 10.0, cp_ring=False)
    assert (choice.kernel, choice.fused) == ("fa2", True)
    # on an A100 TransformerEngine prefers flash-attn 2 anyway; cuDNN stops at 128 there
    assert choose(_model(16), "cudnn", False, ["cudnn", "fa2"], 8.0, cp_ring=False).kernel == "fa2"


def test_a_shape_every_kernel_runs_is_left_alone():
    choice = choose(_model(32), "cudnn", False, ["cudnn"], 9.0, cp_ring=True)
    assert (choice.kernel, choice.fused, choice.note) == ("cudnn", True, None)


def test_context_parallel_ring_needs_a_fused_kernel():
    with pytest.raises(UserError) as got:
        choose(_model(8), "cudnn", False, ["cudnn", "fa2"], 9.0, cp_ring=True)
    assert got.value.field == "parallel.cp_comm"


def test_unfused_fallback_costs_what_flash_attention_false_costs():
    """The fallback is the unfused path itself: same step as asking for it."""
    from simcluster.engine import simulate

    sets: list[tuple[str, object]] = [("model.heads", 8), ("model.kv_heads", 8), ("model.layers", 2)]
    fallback = build_context(load_scenario(BASE, list(sets)))
    assert fallback.scenario.training.flash_attention is False and len(fallback.notes) == 1
    asked = build_context(load_scenario(BASE, [*sets, ("training.flash_attention", False)]))
    assert asked.notes == ()
    assert simulate(fallback).summary["step_time_s"] == simulate(asked).summary["step_time_s"]


def test_run_says_so_on_stderr_and_in_the_summary(cli):
    res = cli("run", BASE, *WIDE, "--json")
    assert res.code == 0, res.err
    assert "note: attention: no fused kernel trains head dim 512" in res.err
    assert any("UnfusedDotProductAttention" in n for n in json.loads(res.out)["notes"])


def test_a_pinned_kernel_that_cannot_run_the_heads_is_refused(cli):
    res = cli("run", BASE, *WIDE, "--set", "training.attention_kernel=fa3")
    assert_one_line_error(res, "training.attention_kernel", "'fa3' cannot train head dim 512", "up to 256")


def test_a_framework_calling_flash_attn_itself_is_refused():
    """nanotron's CoreAttention calls flash_attn_varlen_func: no other path past 256."""
    with pytest.raises(UserError) as got:
        choose(_model(8), "fa2", False, ["cudnn", "fa2"], 9.0, cp_ring=False, framework="nanotron")
    assert got.value.field == "framework" and "flash-attn package itself" in got.value.message
    # within flash-attn 2's limits it runs whatever the profile's default kernel was
    assert choose(_model(21, 4032), "cudnn", False, ["cudnn"], 10.0, cp_ring=False, framework="nanotron").fused


def test_pytorch_sdpa_falls_back_to_its_math_backend():
    choice = choose(_model(8), "fa2", False, ["cudnn", "fa2"], 9.0, cp_ring=False, framework="torchtitan")
    assert (choice.kernel, choice.fused) == (None, False)
    assert choice.note is not None and "SDPA" in choice.note and "upper bound" in choice.note
    with pytest.raises(UserError) as got:
        choose(_model(8), "fa2", False, ["fa2"], 9.0, cp_ring=True, framework="torchtitan")
    assert got.value.field == "parallel.cp_comm"


@pytest.mark.parametrize("hardware", ["dgx-h100", "dgx-a100", "dgx-b200", "dgx-b300", "amd-mi300x", "dgx-2-v100"])
def test_every_head_dim_builds_or_is_refused_in_one_line(hardware):
    """Head dims around each limit, under the frameworks of each dispatch and with cp rings:
    a context (its kernel able to train the heads, or the unfused path) or a one-line refusal."""
    from simcluster.scenario import scenario_from_dict

    for d in (128, 192, 200, 256, 264, 512):
        for framework in (None, "megatron-core", "torchtitan", "nanotron"):
            for cp in (1, 2):
                doc = {"name": "grid", "model": {"layers": 2, "hidden": 8 * d, "heads": 8, "ffn": 32 * d, "vocab": 32000},
                       "cluster": {"hardware": hardware, "gpus": 8}, "parallel": {"cp": cp},
                       "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 16, "precision": "fp16"}}  # fmt: skip
                if framework:
                    doc["framework"] = framework
                try:
                    ctx = build_context(scenario_from_dict(doc))
                except UserError as exc:
                    assert "\n" not in exc.one_line()
                    continue
                kernel = ctx.profile.attention_kernel_in_use(ctx.scenario.training.attention_kernel)
                if ctx.scenario.training.flash_attention and kernel and framework != "nanotron":
                    assert runs(kernel, *ctx.model.qk_v_head_dims, ctx.profile.gpu.compute_capability), (d, framework)


def _mla(qk_nope: int = 128, qk_rope: int = 64, v: int = 128):
    """DeepSeek-V2/V3's multi-latent attention shape: query-key head dim 128 + 64 = 192, value 128."""
    mla = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": qk_nope, "qk_rope_head_dim": qk_rope,
           "v_head_dim": v}  # fmt: skip
    return build_model({"layers": 2, "hidden": 4096, "heads": 32, "ffn": 16384, "vocab": 32000, "head_dim": v,
                        "mla": mla})  # fmt: skip


def test_flash_attn_2_needs_equal_query_key_and_value_head_dims():
    """flash-attn 2 takes one head size for q, k and v (csrc/flash_attn/flash_api.cpp mha_fwd:
    CHECK_SHAPE(v, batch_size, seqlen_k, num_heads_k, head_size_og)), and TransformerEngine's
    get_attention_backend drops it for MLA ("Disabling FlashAttention as it does not support
    MLA." where head_dim_qk != head_dim_v). Before, max(192, 128) = 192 passed as within its
    limit, so DeepSeek's 192/128 heads were costed on flash-attn 2 on an A100."""
    assert runs("fa2", 192, 128, 9.0) is False
    assert runs("fa2", 192, 128, 8.0) is False
    # on an A100 cuDNN stops at 128 too: TransformerEngine's unfused attention runs MLA there
    choice = choose(_mla(), "fa2", False, ["cudnn", "fa2"], 8.0, cp_ring=False)
    assert (choice.kernel, choice.fused) == (None, False)
    assert choice.note is not None and "head dims 192/128" in choice.note
    # on an H100 cuDNN trains 192/128 (cuDNN >= 9.11's MLA shape): TE's other fused backend
    assert choose(_mla(), "fa2", False, ["cudnn", "fa2"], 9.0, cp_ring=False).kernel == "cudnn"


def test_flash_attention_3_takes_unequal_head_dims_only_in_its_mla_ranges():
    """FlashAttention-3 (hopper/flash_api.cpp): "If V headdim is different from Q/K dim, we only
    support Q/K headdim in (128, 192] and V headdim in (96, 128], or (Q/K <= 64 and V <= 512)",
    and "Only Hopper supports different V headdim". Before, any pair up to 256 passed."""
    assert runs("fa3", 192, 128, 9.0) is True  # DeepSeek-V3's MLA
    assert runs("fa3", 64, 512, 9.0) is True
    assert runs("fa3", 256, 128, 9.0) is False
    assert runs("fa3", 192, 64, 9.0) is False
    assert runs("fa3", 128, 64, 9.0) is False
    assert runs("fa3", 192, 128, 10.0) is False  # not Hopper
    assert runs("fa3", 256, 256, 9.0) is True  # equal dims: up to 256 as before
