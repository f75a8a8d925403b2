"""The host (CPU) side: Python issuing each block's kernels, and the MoE dispatcher's sync.

Sources: Megatron-Core ``MoEAlltoAllTokenDispatcher`` (per-expert token counts copied to the
host and ``d2h_event.synchronize()`` before the expert-parallel all-to-all, once per MoE layer
forward; none in backward, whose split sizes are saved); TransformerEngine ``GroupedLinear``
(one cuBLASLt GEMM per local expert on its side streams when CUTLASS grouped GEMM is off);
TransformerEngine issue 2053 (host CPU time of a BF16 Linear forward: torch 37.08 µs and TE
99.66 µs on GB200, torch 13.48 µs on a DGX H100's Xeon 8480C).
"""

from __future__ import annotations

import pytest
from conftest import make_scenario
from engine_helpers import layer_builder, run

from simcluster.hardware import load_profile
from simcluster.parallelism.host import TE_MODULE_OPS, AttentionInputs, segment_cost
from simcluster.parallelism.segments import Comm, Compute

MOE = {
    "name": "small-moe", "layers": 2, "hidden": 1024, "heads": 8, "kv_heads": 8, "ffn": 2816,
    "vocab": 1024, "experts": 16, "top_k": 4, "expert_ffn": 512, "position": "rope",
}  # fmt: skip


def _moe(host_op_us: float | None = None, sync: bool = True, m: int = 2, ep: int = 8) -> dict:
    cluster = {"hardware": "dgx-h100", "gpus": 8}
    if host_op_us is not None:
        cluster["profile"] = {"efficiency": {"host_op_us": host_op_us}}
    return make_scenario(
        model=MOE,
        cluster=cluster,
        parallel={"tp": 1, "pp": 1, "ep": ep},
        training={"seq_len": 2048, "micro_batch": 1, "global_batch": 8 * m, "fused_cross_entropy": True},
        moe={"host_sync": sync},
    )


def test_te_module_is_its_measured_multiple_of_a_torch_linear():
    # TE issue 2053: 99.66 / 37.08 (GB200) and 90.53 / 33.17 (GH200)
    assert TE_MODULE_OPS == pytest.approx(99.66 / 37.08, abs=0.03)
    assert TE_MODULE_OPS == pytest.approx(90.53 / 33.17, abs=0.03)


def test_grouped_linear_launches_one_gemm_per_local_expert():
    # fc1 and fc2, each: one GEMM per local expert plus the side streams' events
    f16, f32 = segment_cost("experts", "F", 16), segment_cost("experts", "F", 32)
    assert f32.launches - f16.launches == 2 * 16
    assert f16.python_ops == pytest.approx(2 * TE_MODULE_OPS + 8)
    # split weight gradients: only the per-expert wgrad GEMMs, no Python
    assert segment_cost("experts", "W", 16).python_ops == 0
    assert segment_cost("experts", "W", 16).launches == f16.launches


def test_per_expert_fp8_casts_are_host_launches():
    # tex.split_quantize launches each split's cast kernels from C++ (TE cast.cpp): fc1's and
    # fc2's inputs forward, their output gradients backward; none in the weight-gradient phase
    for phase in ("F", "B"):
        plain, cast = segment_cost("experts", phase, 16), segment_cost("experts", phase, 16, expert_casts=48)
        assert cast.launches - plain.launches == 2 * 48
        assert cast.python_ops == plain.python_ops
    assert segment_cost("experts", "W", 16, expert_casts=48) == segment_cost("experts", "W", 16)


def test_only_the_forward_router_syncs():
    lb = layer_builder(_moe())
    syncs = {ph: [s.name for s in lb.layer(0, ph) if isinstance(s, Compute) and s.sync] for ph in ("F", "B", "W")}
    assert syncs == {"F": ["router"], "B": [], "W": []}
    off = layer_builder(_moe(sync=False))
    assert not [s for s in off.layer(0, "F") if isinstance(s, Compute) and s.sync]
    # without expert parallelism the sync comes before the experts (Megatron's before_finish)
    one = layer_builder(_moe(ep=1))
    names = [s.name for s in one.layer(0, "F") if isinstance(s, Compute)]
    assert names.index("router") < names.index("experts")
    assert [s.name for s in one.layer(0, "F") if isinstance(s, Compute) and s.sync] == ["router"]


def test_host_seconds_follow_the_profile_unit():
    lb = layer_builder(_moe())
    eff = load_profile("dgx-h100").efficiency
    (router,) = [s for s in lb.layer(0, "F") if isinstance(s, Compute) and s.name == "router"]
    assert router.host == pytest.approx(segment_cost("router", "F", 2).seconds(eff.host_op_us * 1e-6, eff.kernel_launch_us * 1e-6))
    dispatch = [s for s in lb.layer(0, "F") if isinstance(s, Comm) and s.group == "ep"]
    assert dispatch and all(c.host == pytest.approx(2 * eff.host_op_us * 1e-6) for c in dispatch)


def test_the_layer_charges_its_recipes_expert_casts():
    # 16 experts over ep 8: 2 local experts, each operand 2 x 3 kernels under current scaling
    eff = load_profile("dgx-h100").efficiency

    def experts_host(training: dict) -> float:
        data = _moe()
        data["training"].update(training)
        (seg,) = [s for s in layer_builder(data).layer(0, "F") if isinstance(s, Compute) and s.name == "experts"]
        return seg.host

    current = experts_host({"precision": "fp8", "fp8_recipe": "current"})
    assert current - experts_host({}) == pytest.approx(2 * 2 * 3 * eff.kernel_launch_us * 1e-6)


def _step_host_seconds(data: dict, m: int) -> float:
    """Host seconds of every segment one rank issues in a step (layers only; the embedding,
    head and optimizer are issued without a host cost)."""
    lb = layer_builder(data)
    per_mb = 0.0
    for i in range(MOE["layers"]):
        for phase in ("F", "BW"):
            per_mb += sum(s.host for s in lb.layer(i, phase))
    return per_mb * m


def test_a_slow_enough_host_sets_the_step():
    # 20 ms per Python op: every kernel waits for the host, so the step is the host's issue
    # time plus at most the GPU work after the last issue
    m = 2
    data = _moe(host_op_us=20_000.0, m=m)
    # the layers' issue alone: the optimizer step's eager Python (training.step_tail, at the
    # same 20 ms an op) is tests/test_step_tail.py's
    data["training"]["step_tail"] = "none"
    host = _step_host_seconds(data, m)
    step = run(data).summary["step_time_s"]
    assert host <= step <= 1.02 * host


def test_a_fast_host_stays_hidden_on_a_dense_model():
    # no sync inside the step: the host runs ahead of the GPU and only the first kernel
    # waits for its issue (a 4096-wide layer's kernels outlast their issue)
    def dense(host_op_us: float | None) -> dict:
        cluster: dict = {"hardware": "dgx-h100", "gpus": 8}
        if host_op_us is not None:
            cluster["profile"] = {"efficiency": {"host_op_us": host_op_us}}
        model = {"layers": 2, "hidden": 4096, "heads": 32, "ffn": 16384, "vocab": 1024, "position": "rope"}
        return make_scenario(model=model, cluster=cluster, training={"seq_len": 4096, "micro_batch": 1, "global_batch": 16})

    quick = run(dense(0.0)).summary["step_time_s"]
    default = run(dense(None)).summary["step_time_s"]
    assert 0.0 <= default - quick <= 2 * 13.48e-6


def test_the_sync_exposes_the_host_after_each_moe_forward():
    # at 300 µs per Python op the host is slower than this small model's GPU work per layer
    with_sync = run(_moe(host_op_us=300.0))
    without = run(_moe(host_op_us=300.0, sync=False))
    assert with_sync.summary["step_time_s"] > without.summary["step_time_s"]
    ev = with_sync.events
    assert ((ev["kind"] == "host") & (ev["name"] == "host_issue")).any()


def test_captured_parts_replay_as_one_launch():
    # Megatron-Core's cuda_graph_scope: attn, moe_router, moe_preprocess (TE partial capture)
    both = frozenset({"moe_router", "moe_preprocess"})
    assert segment_cost("router", "F", 16).python_ops == 25 + 15 + 4
    assert segment_cost("router", "F", 16, both).python_ops == 1 + 1 + 4  # the permute stays eager
    assert segment_cost("router", "B", 16, both).python_ops == 1
    graphed = layer_builder(make_scenario(
        model=MOE, parallel={"tp": 1, "pp": 1, "ep": 8},
        training={"seq_len": 2048, "global_batch": 16, "cuda_graphs": ["attn"]},
    ))  # fmt: skip
    eff = load_profile("dgx-h100").efficiency
    attn = [s for s in graphed.layer(0, "F") if isinstance(s, Compute) and s.name.startswith("attn_")]
    assert sum(s.host for s in attn) == pytest.approx(eff.host_op_us * 1e-6)
    # the dispatcher still reads its token counts back: the sync stays
    assert [s.name for s in graphed.layer(0, "F") if isinstance(s, Compute) and s.sync] == ["router"]


def test_graphs_speed_up_a_host_bound_moe_step():
    slow = _moe(host_op_us=300.0)
    graphed = _moe(host_op_us=300.0)
    graphed["training"]["cuda_graphs"] = ["attn", "moe_router", "moe_preprocess"]
    assert run(graphed).summary["step_time_s"] < run(slow).summary["step_time_s"]


def test_moe_graph_scopes_on_a_dense_model_name_the_field():
    from simcluster.context import build_context
    from simcluster.errors import UserError
    from simcluster.scenario import scenario_from_dict

    data = make_scenario(training={"seq_len": 2048, "global_batch": 8, "cuda_graphs": ["moe_router"]})
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(data))
    assert err.value.field == "training.cuda_graphs" and "dense" in str(err.value)


def test_run_says_what_hides_a_host_bound_step(cli, tmp_path):
    import yaml

    path = tmp_path / "tiny-moe.yaml"
    path.write_text(yaml.safe_dump(_moe()))
    res = cli("run", str(path))
    assert res.code == 0, res.err
    assert "host-bound" in res.out and "training.cuda_graphs" in res.out
    # a GPU-bound shipped scenario says nothing of the host
    assert "training.cuda_graphs" not in cli("run", "llama3-8b-8xh100").out


def test_megatrons_bucket_nan_check_stops_the_host():
    # Megatron-Core Bucket.start_grad_sync: `norm = grad_data.norm(p=2); assert not
    # norm.isnan()` reads the norm back before the reduction is issued, so the backward after
    # each bucket is issued from a standstill
    def dense(nan_check: bool) -> dict:
        model = {"layers": 4, "hidden": 4096, "heads": 32, "ffn": 16384, "vocab": 1024, "position": "rope"}
        return make_scenario(
            model=model,
            parallel={"tp": 1, "pp": 1, "zero": 1},
            training={"seq_len": 4096, "micro_batch": 1, "global_batch": 16},
            dp={"nan_check": nan_check, "bucket_mb": 100.0},
        )

    def host_waits(data: dict) -> int:
        ev = run(data).events
        return int(((ev["rank"] == 0) & (ev["name"] == "host_issue") & (ev["start_s"] > 0)).sum())

    assert host_waits(dense(False)) == 0
    assert host_waits(dense(True)) > 0


def test_megatrons_loss_nan_check_syncs_after_the_reduced_loss():
    # Megatron-LM pretrain_gpt loss_func under --check-for-nan-in-loss-and-grad:
    # `assert not loss.isnan()` on the host, after the vocab-parallel loss's reductions
    data = make_scenario(parallel={"tp": 2, "pp": 1}, training={"seq_len": 2048, "global_batch": 8},
                         dp={"nan_check": True})  # fmt: skip
    head = layer_builder(data).head("F")
    assert isinstance(head[-1], Compute) and head[-1].sync and head[-1].seconds == 0
    assert any(isinstance(s, Comm) and s.group == "tp" for s in head[:-1])
    data["dp"]["nan_check"] = False
    assert not any(isinstance(s, Compute) and s.sync for s in layer_builder(data).head("F"))


def test_attention_inputs_count_megatron_core_te_spec_modules():
    # Megatron-Core gpt_layer_specs.py (0.16.1), TransformerEngine spec: standard attention is
    # one LayerNormLinear for q, k, v (plus q_layernorm and k_layernorm with a q/k norm);
    # MLASelfAttention runs input_layernorm, linear_q_down_proj, linear_kv_down_proj and the
    # two LayerNorm up-projections: five modules, four without a q LoRA rank (linear_q_proj)
    assert AttentionInputs.of(mla=False, q_lora=False, qk_norm=False) == AttentionInputs()
    assert AttentionInputs.of(mla=False, q_lora=False, qk_norm=True).modules == 3
    assert AttentionInputs.of(mla=True, q_lora=True, qk_norm=False).modules == 5
    assert AttentionInputs.of(mla=True, q_lora=False, qk_norm=False).modules == 4
    mla = AttentionInputs.of(mla=True, q_lora=True, qk_norm=False)
    forward = segment_cost("attn_qkv", "F", 0, attention=mla)
    assert forward.python_ops == pytest.approx(5 * TE_MODULE_OPS + 6)
    assert segment_cost("attn_qkv", "B", 0, attention=mla).python_ops == pytest.approx(5 * TE_MODULE_OPS)
    # captured attention replays as one launch whatever its modules
    assert segment_cost("attn_qkv", "F", 0, frozenset({"attn"}), attention=mla).python_ops == 1


def test_mla_layer_issues_more_host_work_than_standard_attention():
    # the same layer with MLA (DeepSeek-V3's latent ranks) against grouped-query attention
    def host_of(model: dict) -> float:
        b = layer_builder(make_scenario(model=model, parallel={"tp": 1, "pp": 1, "ep": 8},
                                        training={"seq_len": 2048, "global_batch": 16}))  # fmt: skip
        return next(s.host for s in b.layer(0, "F") if isinstance(s, Compute) and s.name == "attn_qkv")

    mla = {**MOE, "mla": {"q_lora_rank": 384, "kv_lora_rank": 128, "qk_nope_head_dim": 64,
                          "qk_rope_head_dim": 32, "v_head_dim": 64}}  # fmt: skip
    op_s = load_profile("dgx-h100").efficiency.host_op_us * 1e-6
    assert host_of(MOE) == pytest.approx((TE_MODULE_OPS + 2) * op_s)
    assert host_of(mla) == pytest.approx((5 * TE_MODULE_OPS + 6) * op_s)
