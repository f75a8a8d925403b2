"""Expert parallelism: router, dispatch all-to-all, grouped expert GEMMs, combine all-to-all.

Each rank routes its tokens' top_k copies to the experts' owners in its EP group (dispatch), the
owners run their local experts (grouped GEMM; the busiest expert sets the time, hence the
``moe.load_imbalance`` factor = max/mean tokens per expert), and the results return (combine).
Backward mirrors both all-to-alls. Shared experts run on the local tokens.
"""

from __future__ import annotations

from simcluster.compute import KernelModel
from simcluster.parallelism import wgrad
from simcluster.parallelism.segments import Comm, Compute, Segment
from simcluster.parallelism.shapes import Shapes


def a2a_bytes(shapes: Shapes) -> float:
    """Send buffer of one all-to-all per rank: tokens * top_k * hidden * bytes."""
    return shapes.moe_tokens * shapes.model.top_k * shapes.model.hidden * shapes.elt


def expert_seconds(shapes: Shapes, km: KernelModel, imbalance: float, phase: str) -> float:
    """Grouped expert GEMMs of this rank for one microbatch (forward, dgrad or wgrad)."""
    m = shapes.model
    local_experts = m.experts / shapes.layout.ep
    routed_tokens = shapes.moe_tokens * m.top_k * shapes.layout.ep  # received from the EP group
    per_expert = routed_tokens / m.experts * imbalance
    up = m.up_width(m.expert_ffn)
    h = m.hidden
    if phase == "F" or phase == "B":
        t = km.gemm(per_expert, up, h, count=local_experts) + km.gemm(per_expert, h, m.expert_ffn, count=local_experts)
        act = km.memory(per_expert * local_experts * (up + m.expert_ffn) * shapes.elt)
        return t + act * (2 if phase == "B" else 1)
    return km.gemm(h, up, per_expert, count=local_experts) + km.gemm(m.expert_ffn, h, per_expert, count=local_experts)


def _accumulate(shapes: Shapes, km: KernelModel) -> float:
    """Adding the local experts', shared experts' and router's gradients into fp32 main grads."""
    m = shapes.model
    up = m.up_width(m.expert_ffn)
    per_expert = m.hidden * (up + m.expert_ffn)
    params = per_expert * (m.experts / shapes.layout.ep + m.shared_experts) + m.hidden * m.experts
    return wgrad.accumulation_seconds(km, shapes.training, params)


def moe_block(shapes: Shapes, km: KernelModel, imbalance: float, phase: str, layer: int) -> list[Segment]:
    """Segments of one MoE MLP (after the attention block) for phase F, B or W."""
    m = shapes.model
    tokens = shapes.moe_tokens
    h = m.hidden
    routed = expert_seconds(shapes, km, imbalance, phase)
    shared = 0.0
    if m.shared_experts:
        width = m.expert_ffn * m.shared_experts
        up = m.up_width(width)
        if phase == "W":
            shared = km.gemm(h, up, tokens) + km.gemm(width, h, tokens)
        else:
            shared = km.gemm(tokens, up, h) + km.gemm(tokens, h, width)
    if phase == "W":
        router = km.gemm(h, m.experts, tokens)
        return [Compute("experts", routed + shared + router + _accumulate(shapes, km), layer)]
    router = km.gemm(tokens, m.experts, h) + km.memory(tokens * m.experts * 4 * 3)
    permute = km.memory(2 * tokens * m.top_k * h * shapes.elt)
    size = a2a_bytes(shapes)
    ep = shapes.layout.ep
    name_in, name_out = ("dispatch", "combine") if phase == "F" else ("combine_grad", "dispatch_grad")
    if ep == 1:
        return [Compute("moe", router + permute * 2 + routed + shared, layer)]
    return [
        Compute("router", router + permute + shared, layer),
        Comm(f"ep_{name_in}", "ep", "all_to_all", size, False, layer),
        Compute("experts", routed, layer),
        Comm(f"ep_{name_out}", "ep", "all_to_all", size, False, layer),
        Compute("unpermute", permute, layer),
    ]
