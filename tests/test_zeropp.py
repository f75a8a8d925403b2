"""ZeRO++ under DeepSpeed's ZeRO-3 (``simcluster/parallelism/zeropp.py``).

References:

- Wang et al., "ZeRO++: Extremely Efficient Collective Communication for Giant Model Training"
  (arXiv 2306.10209): ZeRO-3 moves 3M across nodes per step (forward all-gather M, backward
  all-gather M, gradient reduce-scatter M; M the model's 16-bit bytes), ZeRO++ 0.75M (qwZ's int8
  forward gather 0.5M, hpZ's backward gather inside the node 0, qgZ's int4 gradients 0.25M);
- microsoft/DeepSpeed ``runtime/zero/partition_parameters.py``: ``CUDAQuantizer.target_group_size
  = 8000`` (int8, one fp32 scale per group), ``all_gather_coalesced`` gathering the int8 data and
  the scales in two all-gathers, over ``zero_param_process_group`` whenever
  ``ds_secondary_tensor`` exists; ``_partition_param_sec``: the secondary partition is
  ``aligned_size // num_ranks_in_param_group`` elements of ``param.dtype``; ``stage3.py
  _post_step`` invalidates it after the optimizer step;
- ``runtime/comm/coalesced_collectives.py all_to_all_quant_reduce``: int4 all-to-all over the
  node's ranks (``local_``), reduction to 1/local, int4 all-to-all across nodes (``global_``).
"""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.parallelism.data import zero3_working_bytes
from simcluster.parallelism.zeropp import QWZ_GROUP, GradientAllToAll, WeightGather
from simcluster.scenario import scenario_from_dict
from tests.engine_helpers import gpt_model, run

H = 1024
LAYERS = 4
GPUS, PER_NODE = 16, 8


def _doc(zero3=None, gpus=GPUS, **sections):
    doc = {
        "framework": "deepspeed",
        "model": gpt_model(LAYERS, H, 512, bias=True),
        "cluster": {"hardware": "dgx-h100", "gpus": gpus},
        "parallel": {"zero": 3},
        # one microbatch per rank; nothing kept gathered for the backward (a model beyond
        # stage3_max_reuse_distance, as the paper's), so the backward gathers again
        "training": {"seq_len": 1024, "micro_batch": 1, "global_batch": gpus, "flash_attention": True},
        "zero3": {"max_reuse_distance": 0, **(zero3 or {})},
    }
    for key, value in sections.items():
        doc[key] = {**doc.get(key, {}), **value}
    return doc


ZEROPP = {"zero_hpz_partition_size": PER_NODE, "zero_quantized_weights": True, "zero_quantized_gradients": True}


def _cross_node_bytes(doc) -> tuple[float, float]:
    """(bytes leaving one node per step over the data-parallel collectives, the model's 16-bit
    bytes M) from rank 0's collectives: one over n nodes sends (n-1)/n of its buffer out of each
    node (a ring over all its rails, or each rank's all-to-all share), once per collective the
    node's ranks run (the ZeRO group's ring once, qgZ's groups across nodes once per local
    rank); a group inside one node sends nothing across."""
    res = run(doc)
    ctx = build_context(scenario_from_dict(doc))
    lay = ctx.layout
    ev = res.events[(res.events["rank"] == 0) & (res.events["group"] == "dp")]
    groups = {
        "zero3_param_all_gather": "dps", "zero3_param_scales_all_gather": "dps",
        "hpz_param_all_gather": "dph", "hpz_param_scales_all_gather": "dph",
        "zero3_grad_reduce_scatter": "dps",
        "qgz_intra_all_to_all": "dpl", "qgz_intra_all_to_all_scales": "dpl",
        "qgz_inter_all_to_all": "dpx", "qgz_inter_all_to_all_scales": "dpx",
    }  # fmt: skip
    out = 0.0
    for name, nbytes in zip(ev["name"], ev["bytes"], strict=True):
        members = lay.group(groups[name], 0)
        nodes = len({r // PER_NODE for r in members})
        if nodes == 1:
            continue
        # the node's ranks each run such a collective over their own group (one for a ring over
        # the whole ZeRO group, one per local rank for qgZ's groups across nodes)
        per_node = PER_NODE // (len(members) // nodes)
        out += nbytes * per_node * (nodes - 1) / nodes
    m = 2.0 * ctx.model.params_total()
    return out, m


def test_cross_node_volume_is_the_papers_3m_and_0_75m():
    """ZeRO++ (Wang et al. 2023, section 3 and abstract): ZeRO-3's 3M across nodes per step
    becomes 0.75M (qwZ 0.5M + hpZ 0 + qgZ 0.25M), here on two 8-GPU nodes, where each node's
    share leaving it is (n-1)/n = 1/2 of every buffer. The scales add 4 B per 8000 weights and
    4 B per h gradient elements (well under 1%)."""
    half = (2 - 1) / 2
    base, m = _cross_node_bytes(_doc())
    plus, _ = _cross_node_bytes(_doc(ZEROPP))
    assert base == pytest.approx(3 * m * half, rel=0.01)
    assert plus == pytest.approx(0.75 * m * half, rel=0.01)
    assert base / plus == pytest.approx(4.0, rel=0.01)


def test_qwz_gathers_int8_and_a_scale_per_8000_weights():
    """CUDAQuantizer: int8 data (1 B per weight) and an fp32 scale per group of at most 8000
    elements of each rank's shard, gathered in a second all-gather."""
    q = WeightGather(16 * 80_000, 16)
    assert q.data_bytes == 16 * 80_000
    assert q.scale_bytes == 16 * (80_000 // QWZ_GROUP) * 4
    ev = run(_doc({"zero_quantized_weights": True})).events
    ev = ev[ev["rank"] == 0]
    data = ev[ev["name"] == "zero3_param_all_gather"]["bytes"].sum()
    plain = run(_doc()).events
    plain = plain[(plain["rank"] == 0) & (plain["name"] == "zero3_param_all_gather")]["bytes"].sum()
    assert data == pytest.approx(plain / 2)  # int8 instead of bf16
    assert (ev["name"] == "zero3_param_scales_all_gather").sum() == (ev["name"] == "zero3_param_all_gather").sum()
    assert (ev["name"] == "qwz_dequantize").sum() > 0  # on the compute stream, once per gather


def test_qgz_sends_int4_inside_the_node_then_a_local_share_across():
    """all_to_all_quant_reduce: the whole gradient in int4 (0.5 B per element) over the node's
    ranks, then 1/local of it in int4 across nodes."""
    q = GradientAllToAll(8e6, local=8, nodes=2, group=1024.0)
    assert q.intra_bytes == (4e6, 8e6 / 1024 * 4)
    assert q.inter_bytes == (0.5e6, 8e6 / 1024 * 4 / 8)
    ev = run(_doc({"zero_quantized_gradients": True})).events
    ev = ev[ev["rank"] == 0]
    intra = ev[ev["name"] == "qgz_intra_all_to_all"]["bytes"].sum()
    inter = ev[ev["name"] == "qgz_inter_all_to_all"]["bytes"].sum()
    assert inter == pytest.approx(intra / PER_NODE)
    assert not (ev["name"] == "zero3_grad_reduce_scatter").any()


def test_hpz_gathers_after_the_first_forward_stay_in_the_node_and_cost_a_secondary_copy():
    """hpZ: the first forward of the step gathers over all 16 ranks, the backward over the 8 of
    the node; the secondary partition holds the gathered parameters' 16-bit bytes / hpz."""
    doc = _doc({"zero_hpz_partition_size": PER_NODE})
    ev = run(doc).events
    ev = ev[ev["rank"] == 0]
    assert (ev["name"] == "zero3_param_all_gather").any() and (ev["name"] == "hpz_param_all_gather").any()
    ctx = build_context(scenario_from_dict(doc))
    assert ctx.layout.group("dph", 0) == list(range(PER_NODE))
    base_ctx = build_context(scenario_from_dict(_doc()))
    chunks = ctx.chunks[0]
    with_p = zero3_working_bytes(ctx.scenario, ctx.model, ctx.layout, chunks)[0]
    without = zero3_working_bytes(base_ctx.scenario, base_ctx.model, base_ctx.layout, chunks)[0]
    persistent_small = 13 * H * LAYERS + 2 * H  # biases and LayerNorms under DeepSpeed's 1e5 threshold
    gathered = ctx.model.params_total() - persistent_small
    assert with_p - without == pytest.approx(2 * gathered / PER_NODE, rel=1e-3)


def test_zeropp_speeds_a_slow_network_more_than_a_fast_one():
    """The paper's claim in its direction only (its gains are largest at low bandwidth):
    ZeRO++ shortens the step more with 100 Gb/s NICs than with 400 Gb/s."""

    def gain(nic):
        doc = _doc(cluster={"nic_gbps": nic})
        plus = _doc(ZEROPP, cluster={"nic_gbps": nic})
        return run(doc).summary["step_time_s"] / run(plus).summary["step_time_s"]

    slow, fast = gain(100), gain(400)
    assert slow > fast >= 1.0


@pytest.mark.parametrize(
    ("zero3", "extra", "field"),
    [
        ({"zero_hpz_partition_size": 3}, {}, "zero3.hpz_partition_size"),  # does not divide 16
        ({"zero_hpz_partition_size": 16}, {}, "zero3.hpz_partition_size"),  # spans two nodes
        ({"zero_quantized_gradients": True}, {"parallel": {"tp": 2}}, "zero3.quantized_gradients"),
        ({"zero_quantized_weights": True}, {"framework": "torchtitan"}, "zero3"),  # FSDP2 has none
    ],
)
def test_what_deepspeed_cannot_run_is_a_one_line_error(zero3, extra, field):
    doc = _doc(zero3)
    for key, value in extra.items():
        doc[key] = {**doc[key], **value} if isinstance(value, dict) else value
    if doc["framework"] == "torchtitan":
        doc["zero3"] = {"quantized_weights": True}
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(doc))
    assert err.value.field == field


def test_deepspeed_config_names_are_aliases():
    z = scenario_from_dict(_doc(ZEROPP)).zero3
    assert (z.hpz_partition_size, z.quantized_weights, z.quantized_gradients) == (8, True, True)
