"""Where a MoE block's weight gradients run in a backward that keeps them (BW).

References:
- Megatron-Core ``models/common/model_chunk_schedule_plan.py``,
  ``TransformerLayerSchedulePlan.run`` (the combined 1F1B of ``--overlap-moe-expert-parallel-comm``):
  the backward layer's ``mlp.backward(...)``, then ``mlp.backward_dw()``, then
  ``moe_dispatch.backward(...)``; its docstring draws the compute stream as
  ``mlp_bwd -> mlp_bwd_dw -> mlp_fwd`` beside ``dispatch_fwd -> dispatch_bwd`` on the
  communication stream.
- DeepSeek-V3 technical report (arXiv 2412.19437) Fig. 4: an overlapped chunk pair computes
  MLP(B), MLP(W), then the forward's MLP(F).
- Without the combined schedule autograd reaches each expert linear's weight gradient beside its
  input gradient, inside the experts' backward, before the dispatch's own backward (the
  all-to-all back to the tokens' ranks).

So the experts' W sits between the experts' input gradients and the expert-TP reduce-scatter /
dispatch all-to-all, whether or not the layer's TP collectives fuse with its weight gradients.
"""

from __future__ import annotations

import pytest
from engine_helpers import compute_seconds, layer_builder

from simcluster.context import build_context
from simcluster.engine.plan import build_plans, kernel_model
from simcluster.parallelism.segments import Comm, Compute

MOE = {
    "name": "small-moe", "layers": 2, "hidden": 2048, "heads": 16, "kv_heads": 4, "ffn": 4096,
    "vocab": 1024, "experts": 8, "top_k": 2, "expert_ffn": 1024, "position": "rope",
}  # fmt: skip


def _raw(tp: int, ep: int, etp: int) -> dict:
    gpus = max(tp, ep * etp)
    return {
        "model": MOE,
        "cluster": {"hardware": "dgx-h100", "gpus": gpus},
        "parallel": {"tp": tp, "ep": ep, "etp": etp, "sequence_parallel": tp > 1},
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 4 * gpus // tp},
    }


LAYOUTS = [(1, 8, 1), (2, 4, 1), (2, 4, 2)]  # (tp, ep, etp): TP 1 does not fuse, TP 2 with SP does


def _names(segments: list) -> list[str]:
    return [s.name for s in segments]


@pytest.mark.parametrize(("tp", "ep", "etp"), LAYOUTS)
def test_expert_weight_gradients_run_before_the_dispatch_gradient(tp: int, ep: int, etp: int) -> None:
    """BW of a MoE layer: the experts' input gradients, at once their weight gradients, then
    (with expert TP) the reduce-scatter and the all-to-all back; the work is B's and W's."""
    b = layer_builder(_raw(tp, ep, etp))
    assert b.fuses_wgrad == (tp > 1) and b.fuses_backward(0)
    bw = b.layer(0, "BW")
    names = _names(bw)
    first, second = (i for i, n in enumerate(names) if n == "experts")
    assert second == first + 1  # the W right behind the experts' input gradients
    back = names.index("ep_dispatch_grad")
    assert second < back
    if etp > 1:
        assert second < names.index("etp_dispatch_grad_rs") < back
    # nothing added or lost: the compute is B's plus W's
    plain = b.layer(0, "B") + b.layer(0, "W")
    if tp == 1:
        assert sorted(_names(bw)) == sorted(_names(plain))
        assert compute_seconds(bw) == pytest.approx(compute_seconds(plain), rel=1e-12)


def test_a_dense_layer_without_tp_keeps_its_b_then_its_w() -> None:
    """No MoE block and no TP collective to hide: BW stays B followed by W."""
    raw = _raw(1, 1, 1)
    raw["model"] = {k: v for k, v in MOE.items() if k not in ("experts", "top_k", "expert_ffn")}
    b = layer_builder(raw)
    assert not b.fuses_backward(0)


def test_the_plans_bw_units_carry_the_order() -> None:
    """The engine's BW units (what F&B pairs and 1F1B run) take the layer's BW, not B + W."""
    ctx = build_context(layer_builder(_raw(1, 8, 1)).scenario)
    plan = build_plans(ctx, kernel_model(ctx))[0].chunks[0]
    unit = next(u for u in plan.phases["BW"] if 1 in u.layers)
    names = _names(unit.segments)
    experts = [i for i, n in enumerate(names) if n == "experts"]
    assert len(experts) == 2 and experts[1] < names.index("ep_dispatch_grad")
    assert all(isinstance(s, (Comm, Compute)) for s in unit.segments)


@pytest.mark.parametrize(("tp", "ep", "etp"), LAYOUTS)
def test_the_backward_runs_the_block_in_reverse(tp: int, ep: int, etp: int) -> None:
    """Forward: pre-MLP norm, router (and permute), dispatch ... combine, unpermute. Backward:
    the unpermute's gradient first, then the all-to-alls and experts, the router's gradient
    (with the permute's), the norm's last: autograd reaches the block's oldest nodes last, and
    Megatron-Core's plan runs the router and the norm in its attention node, after
    ``moe_dispatch.backward``."""
    b = layer_builder(_raw(tp, ep, etp))
    forward = _names(b.layer(0, "F"))
    assert forward.index("moe_norm") < forward.index("router") < forward.index("ep_dispatch")
    assert forward.index("ep_combine") < forward.index("unpermute")
    backward = _names(b.layer(0, "B"))
    assert backward.index("unpermute") < backward.index("ep_combine_grad")
    assert backward.index("ep_dispatch_grad") < backward.index("router") < backward.index("moe_norm")
    # the attention's backward after the whole MoE block's
    assert backward.index("moe_norm") < backward.index("attn_out")
