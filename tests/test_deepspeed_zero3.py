"""DeepSpeed's ZeRO-3 (``framework: deepspeed``, ``parallel.zero: 3``): its parameter coordinator
and gradient bucket (``simcluster/parallelism/zero3_coordinator.py``).

Reference: microsoft/DeepSpeed

- ``runtime/zero/config.py`` ``DeepSpeedZeroConfig``: stage3_prefetch_bucket_size 5e7,
  stage3_param_persistence_threshold 1e5, stage3_max_live_parameters 1e9,
  stage3_max_reuse_distance 1e9, reduce_bucket_size 5e8 (all ``ge=0``);
- ``runtime/zero/parameter_offload.py`` ``mark_persistent_parameters``: a parameter with
  ``ds_numel <= param_threshold`` is persistent (never released, so never gathered again);
- ``runtime/zero/partitioned_param_coordinator.py``: ``fetch_sub_module`` prefetches whole
  parameters while ``numel_prefetching < min(max_live - available, prefetch_bucket_size)`` and
  not at all when ``prefetch_bucket_size`` is 0; ``__params_to_release`` keeps a parameter met
  again in the trace before ``max_reuse_distance`` elements have been walked;
- ``runtime/zero/stage3.py``: ``__ipg_bucket_flat_buffer = torch.empty(reduce_bucket_size)``
  with contiguous_gradients, and ``__add_grad_to_ipg_bucket`` reduces the bucket first when
  ``elements_in_ipg_bucket + numel > reduce_bucket_size`` and the bucket is not empty.
"""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.parallelism.data import zero3_working_bytes
from simcluster.parallelism.zero3_coordinator import (
    kept_units,
    persistent_params,
    prefetch_window,
    small_tensors,
)
from simcluster.scenario import scenario_from_dict
from tests.engine_helpers import gpt_model, run

H = 1024
LAYERS = 4
#: one GPT layer's parameters: 12h^2 weights, 13h biases and norms (4h MLP, LayerNorm)
LAYER = 12 * H * H + 13 * H
#: ZeRO-3 without DeepSpeed's coordinator: no framework, so none of its knobs is set (a null
#: knob under framework deepspeed would mean "as if unwritten", its default)
NO_COORDINATOR = {"param_persistence_threshold": 0}


def _doc(zero3=None, framework="deepspeed", **sections):
    doc = {
        "framework": framework,
        "model": gpt_model(LAYERS, H, 512, bias=True),
        "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "parallel": {"zero": 3},
        "training": {"seq_len": 1024, "micro_batch": 1, "global_batch": 8, "flash_attention": True},
        "zero3": zero3 or {},
    }
    for key, value in sections.items():
        doc[key] = {**doc.get(key, {}), **value}
    if framework is None:
        del doc["framework"]
    return doc


def _events(zero3=None, name="zero3_param_all_gather", framework="deepspeed", **sections):
    ev = run(_doc(zero3, framework, **sections)).events
    return ev[(ev["name"] == name) & (ev["rank"] == 0)]


def test_framework_deepspeed_sets_deepspeeds_zero3_defaults():
    z = scenario_from_dict(_doc()).zero3
    assert (z.prefetch_bucket_size, z.param_persistence_threshold) == (50_000_000, 100_000)
    assert (z.max_live_parameters, z.max_reuse_distance, z.reduce_bucket_size) == (10**9, 10**9, 500_000_000)
    plain = scenario_from_dict({**_doc(), "framework": "torchtitan"}).zero3
    assert plain.prefetch_bucket_size is None and plain.reduce_bucket_size is None


def test_deepspeed_config_names_and_numbers_as_its_json_writes_them():
    """A DeepSpeed config's ``stage3_*`` keys, with 5e7 as YAML reads it (a string) or as JSON
    does (a float)."""
    z = scenario_from_dict(_doc({"stage3_prefetch_bucket_size": "5e7", "stage3_max_reuse_distance": 1e9})).zero3
    assert z.prefetch_bucket_size == 50_000_000 and z.max_reuse_distance == 1_000_000_000


@pytest.mark.parametrize(
    ("zero3", "words"),
    [
        ({"reduce_bucket_size": -1}, "zero3.reduce_bucket_size: must be a number of elements, 0 or more"),
        ({"max_reuse_distance": -1}, "greater than or equal to 0"),
        ({"stage3_max_live_parameters": "auto"}, "zero3.max_live_parameters"),
        ({"stage3_param_persistence_threshold": -5}, "0 or more"),
        ({"max_live_parameters": 1.5}, "zero3.max_live_parameters"),
    ],
)
def test_impossible_values_are_one_line_errors(zero3, words):
    with pytest.raises(UserError) as err:
        scenario_from_dict(_doc(zero3))
    assert words in str(err.value) and "\n" not in str(err.value)


def test_auto_sizes_are_hugging_face_trainers():
    """A Hugging Face Trainer DeepSpeed config writes ``auto`` for three ZeRO-3 sizes, which
    transformers fills from the model's hidden size (integrations/deepspeed.py
    trainer_config_finalize): reduce_bucket_size h^2, stage3_prefetch_bucket_size 0.9 h^2,
    stage3_param_persistence_threshold 10 h."""
    auto = {"reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
            "stage3_param_persistence_threshold": "auto"}  # fmt: skip
    z = build_context(scenario_from_dict(_doc(auto))).scenario.zero3
    assert (z.reduce_bucket_size, z.prefetch_bucket_size, z.param_persistence_threshold) == (
        H * H, int(0.9 * H * H), 10 * H,
    )  # fmt: skip
    assert run(_doc(auto)).summary["step_time_s"] > 0


def test_small_tensors_of_a_layer_and_the_threshold():
    """LayerNorm weight and bias per norm (h each, whole on every TP rank), the fused QKV bias
    split over tp, the output projection's and fc2's biases whole, fc1's split."""
    ctx = build_context(scenario_from_dict(_doc(parallel={"tp": 2})))
    lay = ctx.layout
    assert sorted(small_tensors(ctx.model, lay, 0)) == sorted([H] * 4 + [3 * H / 2, H, 4 * H / 2, H])
    assert persistent_params(ctx.model, lay, 0, 100_000) == 4 * H + 1.5 * H + H + 2 * H + H
    assert persistent_params(ctx.model, lay, 0, H - 1) == 0  # every one is above it
    assert small_tensors(ctx.model, lay, -2) == [H, H]  # the final LayerNorm
    assert small_tensors(ctx.model, lay, -1) == []


@pytest.mark.parametrize("experts", [0, 4])
def test_small_tensors_are_the_layer_less_its_matrices(experts):
    """The small tensors of a layer with today's HF families are every parameter but its
    matrices: Gemma 2's four norms a layer (Gemma2DecoderLayer: input, post-attention,
    pre-feedforward and post-feedforward RMSNorms, model.post_norms), Qwen2's Q/K/V biases
    (Qwen2Attention: q_proj, k_proj, v_proj with bias=True, model.qkv_bias), per-head q/k
    norms; in an MoE layer with linear biases the router's weight and its bias (gpt-oss's
    GptOssTopKRouter). Before, the output norms, the Q/K/V biases and the router bias were
    left out, so DeepSpeed gathered them every time instead of keeping them whole."""
    h, heads, kv, d, ffn = H, 16, 4, H // 16, 2816
    model = {"layers": 2, "hidden": h, "heads": heads, "kv_heads": kv, "ffn": ffn, "vocab": 512,
             "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "qk_norm": True, "post_norms": True}  # fmt: skip
    if experts:
        model = {**model, "bias": True, "experts": experts, "top_k": 2, "expert_ffn": 512}
    else:
        model = {**model, "qkv_bias": True}
    ctx = build_context(scenario_from_dict({**_doc(), "model": model}))
    m = ctx.model
    matrices = h * heads * d + 2 * h * kv * d + heads * d * h
    if experts:
        matrices += experts * m.expert_params()  # routed experts: their own group, not small
    else:
        matrices += 3 * h * ffn
    assert sum(small_tensors(m, ctx.layout, 0)) == m.layer_params(0) - matrices
    # four norms, the q/k norms, the Q/K/V biases; with experts the output bias and the router
    router = h + experts * h + experts if experts else 0
    assert sum(small_tensors(m, ctx.layout, 0)) == 4 * h + 2 * d + (heads + 2 * kv) * d + router


def test_persistent_tensors_are_not_gathered():
    """The gathered bytes of each layer drop by its persistent tensors (13h: 2 LayerNorms of 2h,
    biases 3h + h + 4h + h), 2 bytes each."""
    kept = _events({"param_persistence_threshold": 100_000, "prefetch_bucket_size": 10**9})
    gathered = _events({"param_persistence_threshold": 0, "prefetch_bucket_size": 10**9})
    per_layer = gathered.groupby("layer")["bytes"].first() - kept.groupby("layer")["bytes"].first()
    assert per_layer.loc[1] == 13 * H * 2


def test_kept_units_follow_the_reuse_distance():
    """Units of 100 elements: the last is kept (its backward follows), the one before at 200
    elements of trace, the third at 400, the fourth at 600 (forward and backward of the three
    behind it), past a distance of 450."""
    assert kept_units([100.0] * 10, 450) == 3
    assert kept_units([100.0] * 10, 0) == 0
    assert kept_units([100.0] * 2, 10**9) == 2
    assert kept_units([100.0] * 10, None) == 1  # FSDP: the last unit only


def test_units_kept_for_the_backward_are_not_gathered_again():
    """Four layers of LAYER parameters, the embedding with the first and the LM head with the
    last: a reuse distance covering the whole trace keeps every unit, so each microbatch's
    backward gathers nothing; at 0 every unit is gathered again."""
    keep_all = {"max_reuse_distance": 10**9, "param_persistence_threshold": 0}
    ev = _events(keep_all)
    assert set(ev["kind"]) == {"all_gather"}
    assert len(ev) == LAYERS  # forward only, one microbatch per rank
    assert len(_events({"max_reuse_distance": 0})) == 2 * LAYERS


def test_no_prefetch_window_waits_for_each_gather():
    """stage3_prefetch_bucket_size 0: nothing is fetched ahead (``if prefetch_bucket_sz > 0``),
    so layer 1's gather starts only once layer 0's forward is done; with a window it runs
    under layer 0's forward, and the step is shorter (4K tokens, so that a layer's compute can
    hide the next one's gather)."""
    long = {"seq_len": 4096}

    def first_gather_after_layer0(window):
        ev = run(_doc({"prefetch_bucket_size": window}, training=long)).events
        ev = ev[(ev["rank"] == 0) & (ev["microbatch"] == 0)]
        fwd0 = ev[(ev["kind"] == "forward") & (ev["layer"] == 0)]["end_s"].max()
        gather1 = ev[(ev["name"] == "zero3_param_all_gather") & (ev["layer"] == 1)]["start_s"].min()
        return gather1 - fwd0

    assert first_gather_after_layer0(0) >= 0
    assert first_gather_after_layer0(10**9) < 0
    none = run(_doc({"prefetch_bucket_size": 0}, training=long)).summary["step_time_s"]
    ahead = run(_doc({"prefetch_bucket_size": 10**9}, training=long)).summary["step_time_s"]
    assert none > ahead


def test_prefetch_window_is_the_limit_plus_one_parameter():
    sc = scenario_from_dict(_doc({"prefetch_bucket_size": 1000, "max_live_parameters": 1500}))
    assert prefetch_window(sc, 400) == 1000 + 400  # min(1500 - 400, 1000), then a whole parameter
    assert prefetch_window(sc, 1200) == 300 + 1200  # the live limit leaves 300
    assert prefetch_window(sc, 1500) == 0.0  # no room: nothing prefetched


def test_gradients_are_reduce_scattered_in_buckets():
    """A bucket of 2.5 layers holds two: the LM head's unit (last layer + head) and the next
    layer, then the next two; one reduce-scatter per bucket instead of per unit."""
    cap = int(2.5 * LAYER)
    per_unit = _events(NO_COORDINATOR, name="zero3_grad_reduce_scatter", framework=None,
                       training={"fp32_grad_accum": False})  # fmt: skip
    bucketed = _events({"reduce_bucket_size": cap}, name="zero3_grad_reduce_scatter")
    assert len(per_unit) == LAYERS
    assert len(bucketed) == 2
    assert bucketed["bytes"].sum() == pytest.approx(per_unit["bytes"].sum(), rel=1e-12)


def test_the_contiguous_bucket_is_held_whole_whatever_the_model():
    """torch.empty(reduce_bucket_size) in the model's dtype: 5e8 elements are 1 GB of bf16 even
    for a model far smaller; beside it the largest tensor's gradient before its copy (here the
    fc1, 4h x h above the 512 x h embedding, with its bias and the MLP's LayerNorm, which the
    engine's unit tensors carry with it)."""
    ctx = build_context(scenario_from_dict(_doc()))
    _, grads = zero3_working_bytes(ctx.scenario, ctx.model, ctx.layout, ctx.chunks[0])
    largest = 4 * H * H + 4 * H + 3 * H
    assert grads == (500_000_000 + largest) * 2


@pytest.mark.parametrize("coordinator", [True, False])
def test_persistent_tensors_are_held_whole(coordinator):
    """Each layer's 13h of norms and biases and the final LayerNorm's 2h stay gathered beside
    their shards, 2 bytes each, under DeepSpeed's coordinator or with the threshold alone."""
    framework = "deepspeed" if coordinator else None
    held = []
    for threshold in (0, 100_000):
        ctx = build_context(scenario_from_dict(_doc({"param_persistence_threshold": threshold}, framework)))
        held.append(zero3_working_bytes(ctx.scenario, ctx.model, ctx.layout, ctx.chunks[0])[0])
    assert held[1] - held[0] == (LAYERS * 13 * H + 2 * H) * 2


def test_gathers_are_the_coordinators_prefetch_calls():
    """fetch_sub_module coalesces whole parameters into one all_gather_coalesced while fewer
    than the window are taken: with 5h^2 the QKV and output projections (4h^2, under it) take
    fc1 (4h^2) along, and fc2 goes alone; with 4h^2 the two projections already reach it, then
    fc1, then fc2; with none (no prefetch) each submodule's parameters alone: QKV, output, fc1,
    fc2. The forward's gathers of a middle layer (the 1e9 reuse distance keeps every unit of
    this small model for its backward, which gathers nothing); the bytes are the layer's
    whatever the split."""
    windows = (0, 4 * H * H, 5 * H * H, 10**9)
    events = [_events({"prefetch_bucket_size": w, "param_persistence_threshold": 0}) for w in windows]
    layer = 1  # a unit with no embedding or head in it
    assert [len(ev[ev["layer"] == layer]) for ev in events] == [4, 3, 2, 1]
    assert len({ev[ev["layer"] == layer]["bytes"].sum() for ev in events}) == 1


def test_zero3_prefetch_false_is_a_window_of_zero():
    """zero3.prefetch false under DeepSpeed's coordinator fetches nothing ahead, which is
    DeepSpeed's stage3_prefetch_bucket_size 0 (fetch_sub_module: ``if prefetch_bucket_sz > 0``):
    the same gathers (one call per submodule), step time and working memory. The memory once
    still counted the default 5e7-element window the engine never gathered."""
    off = _doc({"prefetch": False})
    zero = _doc({"prefetch_bucket_size": 0})
    held = []
    for doc in (off, zero):
        ctx = build_context(scenario_from_dict(doc))
        held.append(zero3_working_bytes(ctx.scenario, ctx.model, ctx.layout, ctx.chunks[0]))
    assert held[0] == held[1]
    a, b = run(off), run(zero)
    assert a.summary["step_time_s"] == b.summary["step_time_s"]
    assert a.summary["peak_memory_bytes"] == b.summary["peak_memory_bytes"]
    gathers = [r.events[r.events["name"] == "zero3_param_all_gather"] for r in (a, b)]
    assert len(gathers[0]) == len(gathers[1])


@pytest.mark.parametrize("prefetch", ["post", "none"])
def test_units_kept_for_the_backward_are_not_prefetched_again(prefetch):
    """Units the reuse distance keeps gathered (the 1e9 default keeps all of this small model)
    are never gathered in the backward, whichever moment the backward's prefetch goes out
    (zero3.backward_prefetch, which plays FSDP1's BACKWARD_POST after a unit's computation):
    the same gathers, bytes and step as with the default BACKWARD_PRE. The post-compute
    prefetch once ignored the kept units and gathered every one of them again."""
    pre, other = run(_doc()), run(_doc({"backward_prefetch": prefetch}))
    gathers = [r.events[(r.events["name"] == "zero3_param_all_gather") & (r.events["rank"] == 0)] for r in (pre, other)]
    assert len(gathers[0]) == LAYERS  # one microbatch: each unit gathered once, for its forward
    assert len(gathers[1]) == len(gathers[0]) and gathers[1]["bytes"].sum() == gathers[0]["bytes"].sum()
    assert other.summary["step_time_s"] == pre.summary["step_time_s"]


@pytest.mark.parametrize("parallel", [{"ep": 2}, {"ep": 2, "zero_shard": 8}, {"ep": 2, "tp": 2, "sequence_parallel": True}])
def test_the_coordinator_moves_the_same_bytes_with_experts_and_hybrid_sharding(parallel):
    """Conservation: DeepSpeed's coordinator only regroups a microbatch's collectives (its
    all_gather_coalesced calls, the contiguous gradient bucket), so with routed experts on
    their own expert-data-parallel group (Unit.shards) and with hybrid sharding's replica
    all-reduce, the gathered, reduce-scattered and replica-reduced bytes equal FSDP's one
    collective per unit and group (the persistent tensors left out of both's gathers). DeepSpeed's
    engine refuses its MoE layers under ZeRO-3, so the scenario names no framework and writes the
    coordinator's knobs (its prefetch window set: the coordinator runs)."""
    moe = gpt_model(4, H, 512, mlp="swiglu", norm="rmsnorm", ffn=2816, experts=8, top_k=2, expert_ffn=512)
    names = ("zero3_param_all_gather", "zero3_grad_reduce_scatter", "zero3_grad_reduce_scatter_replicas")

    def moved(zero3):
        doc = _doc(zero3, None, cluster={"gpus": 16}, parallel=parallel, training={"global_batch": 16})
        ev = run({**doc, "model": moe}).events
        ev = ev[(ev["rank"] == 0) & (ev["microbatch"] == 0)]
        return [(len(ev[ev["name"] == n]), ev[ev["name"] == n]["bytes"].sum()) for n in names]

    # persistent norms and routers (1e5, DeepSpeed's default) left out of the gathers alike
    # FSDP's grouping as near as the coordinator's knobs come: nothing prefetched, only the last
    # unit kept for its backward, every gradient tensor reduced on its own
    plain = moved({"prefetch_bucket_size": 0, "max_reuse_distance": 1, "param_persistence_threshold": 100_000,
                   "reduce_bucket_size": 1})  # fmt: skip
    coordinated = moved({"prefetch_bucket_size": 50_000_000, "max_live_parameters": 10**9, "max_reuse_distance": 1,
                         "param_persistence_threshold": 100_000, "reduce_bucket_size": 10**7})  # fmt: skip
    assert [b for _, b in coordinated] == pytest.approx([b for _, b in plain], rel=1e-12)
    assert plain[0][1] > 0 and plain[1][1] > 0
    assert (plain[2][1] > 0) == ("zero_shard" in parallel)


def test_deepspeeds_coordinator_and_pytorch_fsdps_buffers_are_not_written_together(cli):
    """DeepSpeed's ZeRO-3 (framework deepspeed sets its coordinator's prefetch window) keeps
    parameters as views of its own flat partitions; PyTorch FSDP's copy-out (FSDP2) and
    FlatParameter root (FSDP1) are another engine: one line naming zero3.buffers."""
    res = cli("memory", "llama3-8b-8xh100", "--set", "framework=deepspeed", "--set", "parallel.zero=3",
              "--set", "zero3.buffers=flat")  # fmt: skip
    assert res.code == 2 and "zero3.buffers" in res.err and "DeepSpeed" in res.err
    assert "Traceback" not in res.err and len(res.err.strip().splitlines()) == 1


def test_fsdp1_has_no_deferred_replica_all_reduce(cli):
    """FSDP1's HYBRID_SHARD all-reduces replicas at every synchronised microbatch: PyTorch's
    set_requires_all_reduce exists on FSDP2's FSDPModule only (torch/distributed/fsdp/
    _fully_shard/_fully_shard.py), so last_microbatch under zero3.buffers: flat is refused."""
    res = cli("memory", "llama3-8b-8xh100", "--set", "framework=pytorch-fsdp", "--set", "parallel.zero=3",
              "--set", "parallel.zero_shard=4",
              "--set", "zero3.replica_all_reduce=last_microbatch")  # fmt: skip
    assert res.code == 2 and "zero3.replica_all_reduce" in res.err and "FSDP2" in res.err
    assert len(res.err.strip().splitlines()) == 1
