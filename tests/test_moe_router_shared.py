"""Megatron-Core's ``--moe-router-dtype fp32`` and ``--moe-shared-expert-overlap``.

References:
- Megatron-Core ``moe/moe_utils.py`` ``RouterGatingLinearFunction``: forward
  ``te_general_gemm(weight, inp, router_dtype, layout="TN")`` on the 16-bit input and weight
  (FP32 logits out); backward ``te_general_gemm(weight.to(router_dtype), grad_output, ...)``
  and ``te_general_gemm(inp.to(router_dtype), grad_output, ...)``, the input gradient cast
  back ``.to(ctx.input_dtype)``. TransformerEngine ``cublaslt_gemm.cu``: "Use TF32 only for
  pure FP32 GEMM". H100 SXM datasheet: TF32 494.7 dense TFLOP/s, half of BF16's 989.4.
- Megatron-Core ``moe/shared_experts.py`` (``SharedExpertMLP``: a side CUDA stream,
  ``linear_fc1_forward_and_act`` / ``linear_fc2_forward``) and ``token_dispatcher.py``
  (``MoEAlltoAllTokenDispatcher.dispatch_postprocess`` calls fc1 after the dispatch
  all-to-all is issued, ``combine_postprocess`` fc2 after the combine's);
  ``transformer_config.py``: "moe_shared_expert_overlap only works with alltoall token
  dispatcher."
"""

from __future__ import annotations

import pytest
from engine_helpers import layer_builder

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.errors import UserError
from simcluster.parallelism import expert
from simcluster.parallelism.segments import Comm, Compute
from simcluster.scenario import scenario_from_dict

MOE = {
    "name": "small-moe", "layers": 2, "hidden": 2048, "heads": 16, "kv_heads": 4, "ffn": 4096,
    "vocab": 1024, "experts": 8, "top_k": 2, "expert_ffn": 1024, "position": "rope",
}  # fmt: skip


def _raw(ep: int = 8, moe: dict | None = None, shared: int = 0, **training: object) -> dict:
    return {
        "model": {**MOE, "shared_experts": shared},
        "cluster": {"hardware": "dgx-h100", "gpus": ep},
        "parallel": {"ep": ep},
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": ep * 4, **training},
        "moe": moe or {},
    }


def test_fp32_router_gradients_run_on_tf32_with_their_casts():
    """4,096 tokens, hidden 2,048, 8 experts: with fp32 the forward is the same 16-bit GEMM;
    the input gradient is the FP32 GEMM (tokens x 2,048, K = 8) at TF32's rate plus the
    weight's cast to FP32 (8 x 2,048 x 6 bytes) and the gradient's cast back (4,096 x 2,048 x
    6 bytes); the weight gradient the FP32 GEMM (2,048 x 8, K = 4,096) plus the weight's and
    the saved input's casts."""
    bf16 = layer_builder(_raw())
    fp32 = layer_builder(_raw(moe={"router_dtype": "fp32"}))
    km = fp32.km
    tokens, h, e = 4096, 2048, 8
    assert km.profile.gpu.peak_tflops["tf32"] * 2 == pytest.approx(km.profile.gpu.peak_tflops["bf16"])

    def gating(b: object, phase: str) -> float:
        return expert.router_gemm_seconds(b.shapes, b.km, b.scenario.moe, phase)  # type: ignore[attr-defined]

    assert gating(fp32, "F") == gating(bf16, "F") == km.gemm(tokens, e, h, dtype="bf16", role="fwd")
    weight_cast = km.memory(e * h * 6)
    want_b = weight_cast + km.gemm(tokens, h, e, dtype="tf32", role="dgrad") + km.memory(tokens * h * 6)
    want_w = weight_cast + km.memory(tokens * h * 6) + km.gemm(h, e, tokens, dtype="tf32", role="wgrad")
    assert gating(fp32, "B") == pytest.approx(want_b, rel=1e-12)
    assert gating(fp32, "W") == pytest.approx(want_w, rel=1e-12)
    assert gating(bf16, "B") == km.gemm(tokens, h, e, dtype="bf16", role="dgrad")
    for phase in ("B", "W"):
        assert gating(fp32, phase) > gating(bf16, phase)


def test_fp32_router_slows_the_step_and_is_refused_in_other_spellings():
    """The fp32 router's backward costs more, so the step is longer; fp64 (torch.mm in FP64,
    no profile peak) is refused by the schema."""
    base = simulate(build_context(scenario_from_dict(_raw()))).summary["step_time_s"]
    fp32 = simulate(build_context(scenario_from_dict(_raw(moe={"router_dtype": "fp32"})))).summary["step_time_s"]
    assert fp32 > base
    with pytest.raises(Exception, match="router_dtype"):
        scenario_from_dict(_raw(moe={"router_dtype": "fp64"}))


def test_shared_overlap_puts_the_shared_experts_under_each_all_to_all():
    """Forward: router, dispatch (overlapped), shared fc1, experts, combine (overlapped),
    shared fc2, unpermute; the two halves are fc1's and fc2's GEMMs (4,096 x 2,048 x 2,048
    and 4,096 x 2,048 x 1,024 for one SwiGLU shared expert of 1,024). Without the setting the
    all-to-alls block and the shared experts run in one block before the router (Megatron-Core's
    ``MoELayer.shared_experts_compute`` before ``route`` and ``dispatch``)."""
    b = layer_builder(_raw(shared=1, moe={"shared_expert_overlap": True}))
    km = b.km
    segs = expert.moe_block(b.shapes, km, b.scenario.moe, "F", 0)
    names = [s.name for s in segs]
    assert names == ["router", "ep_dispatch", "shared_experts", "experts", "ep_combine", "shared_experts", "unpermute"]
    comms = [s for s in segs if isinstance(s, Comm)]
    assert all(c.overlap for c in comms)
    fc1, fc2 = (s for s in segs if isinstance(s, Compute) and s.name == "shared_experts")
    assert fc1.seconds == pytest.approx(km.gemm(4096, 2048, 2048, role="fwd"))
    assert fc2.seconds == pytest.approx(km.gemm(4096, 2048, 1024, role="fwd"))
    back = [s.name for s in expert.moe_block(b.shapes, km, b.scenario.moe, "B", 0)]
    # backward in reverse: the unpermute's gradient first, the router's (with the permute's) last
    assert back == ["unpermute", "ep_combine_grad", "shared_experts", "experts", "ep_dispatch_grad", "shared_experts", "router"]
    plain = layer_builder(_raw(shared=1))
    segs = expert.moe_block(plain.shapes, plain.km, plain.scenario.moe, "F", 0)
    assert [s.name for s in segs] == ["shared_experts", "router", "ep_dispatch", "experts", "ep_combine", "unpermute"]
    back = [s.name for s in expert.moe_block(plain.shapes, plain.km, plain.scenario.moe, "B", 0)]
    assert back == ["unpermute", "ep_combine_grad", "experts", "ep_dispatch_grad", "router", "shared_experts"]
    assert segs[0].seconds == pytest.approx(fc1.seconds + fc2.seconds)
    assert not any(s.overlap for s in segs if isinstance(s, Comm))


def test_shared_overlap_hides_at_most_the_shared_experts():
    """The step gets shorter, by less than the shared experts' forward and input-gradient GEMMs
    over every layer and microbatch (what the side stream can hide at most)."""
    plain = build_context(scenario_from_dict(_raw(shared=1)))
    side = build_context(scenario_from_dict(_raw(shared=1, moe={"shared_expert_overlap": True})))
    t0 = simulate(plain).summary["step_time_s"]
    t1 = simulate(side).summary["step_time_s"]
    b = layer_builder(_raw(shared=1))
    hidden_max = sum(sum(expert.shared_expert_gemms(b.shapes, b.km, p)) for p in ("F", "B")) * 2 * 4  # 2 layers, 4 mbs
    assert t1 < t0
    assert t0 - t1 < hidden_max


def test_shared_overlap_only_behind_the_alltoall_dispatcher():
    """Megatron-Core's TransformerConfig refuses the overlap with the flex (DeepEP) dispatcher."""
    with pytest.raises(UserError, match="moe.shared_expert_overlap"):
        build_context(scenario_from_dict(_raw(shared=1, moe={"shared_expert_overlap": True, "dispatcher": "deepep"})))


def test_the_shared_experts_host_issue_is_charged_in_both_modes():
    """The shared experts' two TransformerEngine Linear modules are issued by the host whether
    they run before the router or on the side stream: per layer and phase the same host seconds
    (parallelism/host.py ``shared_experts``: two TE module calls and four ops forward at
    ``efficiency.host_op_us``), split over the overlap's two blocks."""
    from simcluster.parallelism.host import segment_cost

    for moe in ({}, {"shared_expert_overlap": True}):
        b = layer_builder(_raw(shared=1, moe=moe))
        eff = b.km.profile.efficiency
        want = segment_cost("shared_experts", "F", 1).seconds(eff.host_op_us * 1e-6, eff.kernel_launch_us * 1e-6)
        assert want == pytest.approx((2 * 2.7 + 4) * eff.host_op_us * 1e-6)
        blocks = [s for s in b.layer(0, "F") if isinstance(s, Compute) and s.name == "shared_experts"]
        assert len(blocks) == (2 if moe else 1)
        assert sum(s.host for s in blocks) == pytest.approx(want)
