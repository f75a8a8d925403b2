"""Megatron-Core's fine-grained activation offloading (training.offload_modules;
simcluster/module_offload.py, engine/offload.py).

The named modules' saved tensors go to pinned host memory after their forward, the compute not
waiting; the backward brings them back one layer ahead and waits for its own; each chunk's last
layer stays on the GPU (NVIDIA/Megatron-LM fine_grained_activation_offload.py, read by a research
helper in session 97).
"""

from __future__ import annotations

import pytest
import yaml

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.errors import UserError
from simcluster.memory import chunk_activation_bytes, offloaded_layer_bytes
from simcluster.module_offload import layer_module_bytes
from simcluster.scenario import scenario_from_dict
from simcluster.validate import load_cases
from tests.conftest import GPT_LIKE, make_scenario

#: 8 experts of 1,024 (SwiGLU: fc1 2 x 1,024 wide), top-2, one per GPU at ep 8
MOE = {**GPT_LIKE, "mlp": "swiglu", "experts": 8, "top_k": 2, "expert_ffn": 1024}
GLOBAL_BATCH = 32  # 4 microbatches of one 2,048-token sequence per data-parallel rank of 8


def _scenario(modules: list[str], link_gbps: float | None = None, **extra):
    return scenario_from_dict(_raw(modules, link_gbps, **extra))


def _raw(modules: list[str], link_gbps: float | None = None, **extra) -> dict:
    cluster = {"hardware": "dgx-h100", "gpus": 8}
    if link_gbps is not None:
        cluster["profile"] = {"node": {"host_link_GBps": link_gbps}}
    training = {"seq_len": 2048, "micro_batch": 1, "global_batch": GLOBAL_BATCH, "offload_modules": modules,
                **extra.pop("training", {})}
    framework = extra.pop("framework", "megatron-core")
    sections = {"model": MOE, "parallel": {"ep": 8}, "cluster": cluster, "training": training, **extra}
    return make_scenario(framework=framework, **sections)


def test_the_expert_modules_move_their_inputs_by_hand():
    """BF16, one 2,048-token sequence, top-2 over experts of 1,024: the experts' input is
    2,048 x 2 rows of 1,024 at 2 B = 8,388,608 B; their SwiGLU input 2,048 x 2 rows of 2 x 1,024
    at 2 B = 16,777,216 B; a MoE layer's pre-MLP norm input 2,048 x 1,024 x 2 B = 4,194,304 B."""
    sc = _scenario(["expert_fc1", "moe_act", "mlp_norm"])
    ctx = build_context(sc)
    parts = layer_module_bytes(ctx.model, ctx.layout, sc.training, 0, 0)
    assert parts == {"expert_fc1": 8_388_608, "moe_act": 16_777_216, "mlp_norm": 4_194_304}


def test_tensors_below_the_floor_stay_on_the_gpu():
    """Megatron-Core offloads a saved tensor only from min_offloaded_tensor_size elements (default
    1,048,576; ``tensor.numel() < min`` stays). One 2,048-token sequence, hidden 1,024 with 4 of
    16 heads for K and V (width 256): Q is 2,048 x 1,024 = 2,097,152 elements, K and V 2,048 x
    256 = 524,288 each, below the floor: core_attn moves Q alone, 4,194,304 B in BF16; with the
    floor at 0 all three, 4,194,304 + 2 x 1,048,576 B."""
    model = {**MOE, "kv_heads": 4}
    sc = _scenario(["core_attn"], model=model)
    ctx = build_context(sc)
    assert layer_module_bytes(ctx.model, ctx.layout, sc.training, 0, 0) == {"core_attn": 4_194_304}
    sc = _scenario(["core_attn"], model=model, training={"offload_min_elements": 0})
    assert layer_module_bytes(ctx.model, ctx.layout, sc.training, 0, 0) == {"core_attn": 4_194_304 + 2 * 1_048_576}
    # a floor above every tensor moves nothing, as no offload at all
    sc = _scenario(["core_attn"], model=model, training={"offload_min_elements": 10**8})
    assert layer_module_bytes(ctx.model, ctx.layout, sc.training, 0, 0) == {"core_attn": 0}


def test_the_zoo_rows_layer_moves_a_gigabyte():
    """Qwen3-235B-A22B on 256 GB200 (the Megatron-MoE model zoo's MXFP8 row, EP 64, micro-batch 3 of
    4,096 tokens): 12,288 tokens x top-8 = 98,304 rows a GPU; expert_fc1 keeps their FP8 input,
    98,304 x 4,096 x 1 B = 402,653,184 B, moe_act the 16-bit SwiGLU input, 98,304 x 2 x 1,536 x 2 B
    = 603,979,776 B: 1,006,632,960 B a layer and microbatch."""
    (case,) = [c for c in load_cases() if c.name.endswith("zoo/qwen3-235b-a22b-gb200-mxfp8-256gpu")]
    ctx = build_context(scenario_from_dict(case.scenario))
    chunk = ctx.chunks[0][0]
    moved = offloaded_layer_bytes(ctx.model, ctx.layout, ctx.scenario.training, chunk)
    assert set(moved) == set(chunk.layer_indices[:-1])  # the chunk's last layer stays
    assert set(moved.values()) == {402_653_184 + 603_979_776}


def test_the_moved_bytes_leave_the_gpu_but_one_layers_in_flight():
    base, off = _scenario([]), _scenario(["expert_fc1", "moe_act"])
    ctx0, ctx1 = build_context(base), build_context(off)
    chunk = ctx0.chunks[0][0]
    moved = offloaded_layer_bytes(ctx1.model, ctx1.layout, off.training, chunk)
    assert len(moved) == chunk.layers - 1
    whole = chunk_activation_bytes(ctx0.model, ctx0.layout, base.training, chunk)
    kept = chunk_activation_bytes(ctx1.model, ctx1.layout, off.training, chunk)
    assert kept == pytest.approx(whole - sum(moved.values()) + max(moved.values()))
    peaks = [simulate(sc).summary["peak_memory_bytes"]["max"] for sc in (base, off)]
    assert peaks[1] < peaks[0]


def test_a_fast_link_hides_the_copies():
    base = simulate(_scenario([])).summary["step_time_s"]
    fast = simulate(_scenario(["expert_fc1", "moe_act"], link_gbps=1e6))
    assert fast.summary["step_time_s"] == pytest.approx(base, rel=1e-6)
    events = fast.events
    d2h, h2d = events[events["stream"] == "copy_d2h"], events[events["stream"] == "copy_h2d"]
    microbatches = GLOBAL_BATCH // 8
    assert len(d2h) == len(h2d) == (MOE["layers"] - 1) * microbatches


def test_the_forward_never_waits_for_a_copy_but_the_backward_does():
    """Over a 1 GB/s link a layer's 25 MB take 25 ms, far beyond its forward: the first
    microbatch's forward ends when it would without offloading (the copies run behind it), and
    the step grows by the copies the backward waits for."""
    slow = simulate(_scenario(["expert_fc1", "moe_act"], link_gbps=1.0))
    base = simulate(_scenario([]))

    def first_forward_end(result) -> float:
        ev = result.events
        ev = ev[(ev["rank"] == 0) & (ev["stream"] == "compute") & (ev["kind"] == "forward") & (ev["microbatch"] == 0)]
        return float(ev["end_s"].max())

    assert first_forward_end(slow) == pytest.approx(first_forward_end(base), rel=1e-9)
    assert slow.summary["step_time_s"] > base.summary["step_time_s"] + 0.1


#: one layer's moved bytes: expert_fc1 8,388,608 + moe_act 16,777,216 (test above)
MOVED = 25_165_824
#: the loss's transient logits, 2,048 tokens x the 1,024-word vocabulary x 2 B, at the walk's peak
LOGITS = 4_194_304


def test_copies_that_fall_behind_leave_their_tensors_on_the_gpu():
    """PyTorch frees a saved tensor once its copy to the host is done (record_stream), and a copy
    back holds its GPU buffer from its start until the layer's backward is done. Over a 1 GB/s
    link a layer's copy takes 25 ms against a forward of a few ms, so when a microbatch's
    backward starts all seven offloaded layers' copies out are still running and the next
    layer's copy back is issued: 8 layers' moved bytes on the GPU, of which the memory walk
    counts one in flight, while the walk stands only the loss's logits below its peak (taken at
    the forward's end): 7 x 25,165,824 - 4,194,304 = 171,966,464 B above the walked peak. Over
    the profile's own link (PCIe 5) the copies keep up: nothing."""
    slow = simulate(_scenario(["expert_fc1", "moe_act"], link_gbps=1.0)).summary
    assert slow["offload_backlog_bytes"] == pytest.approx(7 * MOVED - LOGITS, rel=1e-12)
    assert slow["offload_backlog_per_stage"] == [slow["offload_backlog_bytes"]]  # one stage
    assert simulate(_scenario(["expert_fc1", "moe_act"])).summary["offload_backlog_bytes"] == 0.0
    assert "offload_backlog_bytes" not in simulate(_scenario([])).summary


@pytest.mark.parametrize("cap", [0, 1, 3])
def test_the_inflight_cap_bounds_the_backlog(cap):
    """Megatron-Core's fine_grained_offloading_max_inflight_offloads N: after each commit the
    compute stream waits for the copy N layers back, so at the backward's start N copies out are
    still running beside the next layer's copy back: N layers beyond the walk's in-flight one,
    less the logits the walk's peak holds (none above the peak at 0)."""
    run = simulate(_scenario(["expert_fc1", "moe_act"], link_gbps=1.0, training={"offload_max_inflight": cap}))
    assert run.summary["offload_backlog_bytes"] == pytest.approx(max(0, cap * MOVED - LOGITS), rel=1e-12)


def test_a_zero_cap_makes_the_forward_wait_for_every_copy():
    """Over 1 GB/s a layer's 25,165,824 B take 25.17 ms: with the cap at 0 the first microbatch's
    forward cannot end before its seven copies are done, one after another."""
    run = simulate(_scenario(["expert_fc1", "moe_act"], link_gbps=1.0, training={"offload_max_inflight": 0}))
    ev = run.events
    d2h = ev[(ev["rank"] == 0) & (ev["stream"] == "copy_d2h") & (ev["microbatch"] == 0)]
    fwd = ev[(ev["rank"] == 0) & (ev["stream"] == "compute") & (ev["kind"] == "forward") & (ev["microbatch"] == 0)]
    assert len(d2h) == 7
    assert float(fwd["end_s"].max()) > 7 * 25_165_824 / 1e9
    # each copy starts when the layer that saves it ends; a layer after it starts once it is done
    assert float(d2h["start_s"].diff().min()) == pytest.approx(25_165_824 / 1e9, rel=0.2)


def test_transformer_engines_double_buffer_stays_below_the_peak():
    """TransformerEngine's whole-layer offload waits, before a layer's forward, for the copy out
    of the layer two back: over a slow link the fourth offloaded layer ends with its own saved
    tensors and the third's on the GPU, one layer more than the walk's in-flight one, but that is
    while the stash is still four layers short of the forward's end, and the copies are done
    before the fifth layer's forward: nothing above the walked peak."""
    sc = _scenario([], link_gbps=1.0, training={"activation_offload_layers": 4})
    ctx = build_context(sc)
    assert len(offloaded_layer_bytes(ctx.model, ctx.layout, sc.training, ctx.chunks[0][0])) == 4
    assert simulate(sc).summary["offload_backlog_bytes"] == 0.0


def test_run_says_how_high_a_backlog_can_take_the_peak(cli, tmp_path):
    path = tmp_path / "slow-link.yaml"
    path.write_text(yaml.safe_dump(_raw(["expert_fc1", "moe_act"], link_gbps=1.0)))
    result = cli("run", str(path))
    assert result.code == 0, result.err
    text = " ".join(result.out.split())
    assert "offload backlog: the copies to host memory fall behind" in text
    assert "take the memory 164.00 MiB above the peak shown" in text


@pytest.mark.parametrize(
    ("modules", "extra", "words"),
    [
        (["attn_proj"], {}, "add core_attn"),
        (["expert_fc1"], {"training": {"activation_offload_layers": 1}}, "cannot run with its CPU offloading"),
        # (where a framework runs split weight gradients)
        (["expert_fc1"], {"framework": "zero-bubble", "parallel": {"ep": 8, "pp": 2, "schedule": "zb-h1"},
                          "cluster": {"gpus": 16}, "training": {"precision": "bf16"}}, "is modelled on the 1f1b"),
    ],
)
def test_impossible_offloads_are_one_line_errors(modules, extra, words):
    with pytest.raises(UserError, match=words) as err:
        simulate(_scenario(modules, **extra))
    assert err.value.field == "training.offload_modules"


def test_a_profile_without_a_host_link_is_refused():
    data = make_scenario(
        model=MOE,
        parallel={"ep": 8},
        cluster={"hardware": "amd-mi300x", "gpus": 8},
        training={"seq_len": 2048, "micro_batch": 1, "global_batch": 8, "offload_modules": ["moe_act"]},
    )
    with pytest.raises(UserError, match="no node.host_link_GBps") as err:
        simulate(scenario_from_dict(data))
    assert err.value.field == "training.offload_modules"


def test_a_moe_layout_that_does_not_fit_is_offered_the_expert_offload_first():
    """The model zoo's Qwen3-235B-A22B MXFP8 run on 256 GB200 without its offload needs more than
    the GPU's 185 GiB; the expert inputs' offload, whose copies hide, is the cheapest way in
    (its readme: "activation offloading required")."""
    from simcluster.fit_hints import fitting_changes

    (case,) = [c for c in load_cases() if c.name.endswith("zoo/qwen3-235b-a22b-gb200-mxfp8-256gpu")]
    raw = {**case.scenario, "training": {**case.scenario["training"], "offload_modules": []}}
    hints = fitting_changes(scenario_from_dict(raw))
    assert hints[0].change == "training.offload_modules=[expert_fc1,moe_act]"
    # a scenario naming no framework runs Megatron-Core's rules (frameworks/stacks.py), so it is
    # offered the same offload, which its simulation runs
    bare = {k: v for k, v in raw.items() if k != "framework"}
    assert fitting_changes(scenario_from_dict(bare))[0].change == hints[0].change


def test_memory_png_draws_where_the_backlog_takes_each_stage(tmp_path):
    """The memory plot keeps the walked timeline and marks each stage's peak with its backlog
    (the summary's per-stage list) with a dotted line, and its headline says how high it goes:
    the walked peak plus 171,966,464 B on the one stage over a 1 GB/s link."""
    from matplotlib.figure import Figure

    from simcluster.output.memory_plot import draw_memory

    run = simulate(_scenario(["expert_fc1", "moe_act"], link_gbps=1.0))
    data = run.plot_memory(tmp_path / "memory.png")
    (stage,) = data.stages
    assert stage.peak_bytes == pytest.approx(run.summary["peak_memory_bytes"]["max"], rel=1e-12)
    assert stage.backlog_bytes == pytest.approx(7 * MOVED - LOGITS, rel=1e-12)
    assert data.backlogged_peak is stage
    fig = draw_memory(data, "t")
    assert isinstance(fig, Figure)
    assert "the offload backlog takes stage 0 to" in fig._suptitle.get_text()
    dotted = [line for line in fig.axes[0].get_lines() if line.get_label() == "peak with offload backlog"]
    assert len(dotted) == 1 and dotted[0].get_ydata()[0] * 2**30 == pytest.approx(stage.backlogged_peak_bytes)
    # over the profile's own link the copies keep up: no line, no words
    quick = simulate(_scenario(["expert_fc1", "moe_act"])).plot_memory(tmp_path / "quick.png")
    assert quick.backlogged_peak is None
