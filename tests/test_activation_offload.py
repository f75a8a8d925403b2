"""Activations held in host memory between forward and backward (training.activation_offload_layers;
engine/offload.py, memory.offloaded_layer_bytes).

TransformerEngine's double-buffered CPU offload, as Megatron-Core's --cpu-offloading runs it: a
layer's saved tensors go to the host under the next layer's forward and come back one layer
ahead in the backward, each direction one copy at a time over the GPU's host link.
"""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.errors import UserError
from simcluster.memory import chunk_activation_bytes, layer_activation_bytes
from simcluster.scenario import scenario_from_dict
from tests.conftest import make_scenario

GLOBAL_BATCH = 32  # 4 microbatches per data-parallel rank of 8


def _scenario(layers: int, link_gbps: float | None = None, **extra):
    cluster = {"hardware": "dgx-h100", "gpus": 8}
    if link_gbps is not None:
        cluster["profile"] = {"node": {"host_link_GBps": link_gbps}}
    training = {"seq_len": 2048, "micro_batch": 1, "global_batch": GLOBAL_BATCH, "activation_offload_layers": layers}
    return scenario_from_dict(make_scenario(cluster=cluster, training=training, **extra))


def _offloaded_bytes(sc) -> list[float]:
    ctx = build_context(sc)
    chunk = ctx.chunks[0][0]
    n = sc.training.activation_offload_layers
    return [layer_activation_bytes(ctx.model, ctx.layout, sc.training, i, pos) for pos, i in enumerate(chunk.layer_indices[:n])]


def test_the_offloaded_layers_leave_the_gpu_but_one_in_flight():
    base, off = _scenario(0), _scenario(3)
    ctx0, ctx3 = build_context(base), build_context(off)
    chunk = ctx0.chunks[0][0]
    moved = _offloaded_bytes(off)
    whole = chunk_activation_bytes(ctx0.model, ctx0.layout, base.training, chunk)
    kept = chunk_activation_bytes(ctx3.model, ctx3.layout, off.training, chunk)
    assert kept == pytest.approx(whole - sum(moved) + max(moved))
    # what the host holds per microbatch: the rest of the offloaded layers (`simcluster memory`)
    from simcluster.memory_report import memory_summary

    assert memory_summary(ctx3)["host_activation_bytes_per_microbatch"] == pytest.approx(sum(moved) - max(moved))
    assert memory_summary(ctx0)["host_activation_bytes_per_microbatch"] == 0


def test_a_fast_link_hides_the_copies():
    base = simulate(_scenario(0)).summary["step_time_s"]
    fast = simulate(_scenario(3, link_gbps=1e6))
    assert fast.summary["step_time_s"] == pytest.approx(base, rel=1e-4)
    events = fast.events
    d2h, h2d = events[events["stream"] == "copy_d2h"], events[events["stream"] == "copy_h2d"]
    microbatches = GLOBAL_BATCH // 8
    assert len(d2h) == len(h2d) == 3 * microbatches  # every offloaded layer, every microbatch, each way
    assert (d2h["bytes"].sum()) == pytest.approx(microbatches * sum(_offloaded_bytes(_scenario(3))))


def test_a_slow_link_sets_the_step_by_its_copies():
    """With one pipeline stage the backward of microbatch k (which needs every copy back) ends
    before the forward of k + 1, so each microbatch's copies out and back run one after the
    other: the step is at least m x 2 x (offloaded bytes) / link, and at most that plus the
    step's own time."""
    link = 1.0  # GB/s
    sc = _scenario(3, link_gbps=link)
    result = simulate(sc)
    step = result.summary["step_time_s"]
    copies = (GLOBAL_BATCH // 8) * 2 * sum(_offloaded_bytes(sc)) / (link * 1e9)
    base = simulate(_scenario(0)).summary["step_time_s"]
    assert copies <= step <= copies + base
    assert result.summary["exposed_comm_s"]["host"] > 0.5 * copies


@pytest.mark.parametrize(
    ("extra", "layers", "words"),
    [
        ({}, 8, r"is not fewer than the 8 layer\(s\) of a pipeline chunk; offload at most 7"),
        # Megatron-Core's TransformerConfig refuses CPU offloading under any pipeline
        ({"parallel": {"tp": 1, "pp": 2}}, 1, "no support for Pipeline parallelism with CPU offloading"),
        # where a framework without that rule pipelines, the model covers 1F1B only
        ({"framework": "deepspeed", "parallel": {"tp": 1, "pp": 2, "schedule": "zb-h1-ds"}}, 1, "is modelled on the 1f1b"),
    ],
)
def test_impossible_offloads_are_one_line_errors(extra, layers, words):
    with pytest.raises(UserError, match=words) as err:
        simulate(_scenario(layers, **extra))
    assert err.value.field == "training.activation_offload_layers"


def test_a_profile_without_a_host_link_is_refused():
    data = make_scenario(
        cluster={"hardware": "amd-mi300x", "gpus": 8},
        training={"seq_len": 2048, "micro_batch": 1, "global_batch": 8, "activation_offload_layers": 2},
    )
    with pytest.raises(UserError, match="no node.host_link_GBps"):
        simulate(scenario_from_dict(data))


def test_memory_says_what_the_host_holds_and_when_it_is_short(cli):
    """Per node: every GPU's offloaded optimizer share and its offloaded activations of the
    microbatches in flight (up to pp x vpp on the first stage), against node.host_memory_gib."""
    from simcluster.memory_report import memory_summary

    sc = _scenario(3)
    ctx = build_context(sc)
    doc = memory_summary(ctx)
    in_flight = min(ctx.layout.microbatches, ctx.layout.pp * ctx.layout.vpp)
    per_gpu = doc["host_activation_bytes_per_microbatch"] * in_flight + doc["host_optimizer_bytes"]
    assert doc["host_bytes_per_node"] == pytest.approx(per_gpu * ctx.profile.node.gpus_per_node)
    assert doc["host_capacity_bytes"] == ctx.profile.node.host_memory_gib * 2**30
    # (without recomputation: Megatron-Core's CPU offloading refuses it)
    args = ["memory", "llama3-8b-8xh100", "--set", "training.recompute=none", "--set", "training.activation_offload_layers=16"]
    assert "HOST MEMORY SHORT" not in cli(*args).out
    short = cli(*args, "--set", "cluster.profile.node.host_memory_gib=1")
    assert short.code == 0 and "HOST MEMORY SHORT" in short.out
