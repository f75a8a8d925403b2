"""Physical monotonicity on shipped scenarios, the relations of tools/metamorphic.py.

Faster hardware (tensor-core peaks, HBM, NVLink, NIC bandwidth x1.5, NIC latency x0.5) never
lengthens a step; more recomputation never raises the peak memory nor shortens the step; the
next ZeRO stage, twice the TP, DP, CP or EP, sequence parallelism and offloading never raise the
peak memory; twice the sequences per step never lengthens the time per sequence; twice the
replicas and sequences without ZeRO (weak scaling) never shorten the step; twice the sequence
length or the layers never shortens the step; a slow GPU or a degraded NIC never shortens it;
uniform routing in place of a model's group-limited routing never shortens it either.
The Llama scenarios run on profiles with measured collective tables (dgx-h100 in a node,
alps-gh200 across nodes), where a patched NVLink once made a step slower
(tests/test_patched_measurements.py); a Mixtral baseline with expert parallelism 4 runs them
with experts, and again with Megatron-Core's expert-parallel overlap (F&B pairs).
"""

import sys
from pathlib import Path

import pytest
import yaml

from simcluster.scenario.loading import resolve_scenario_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
metamorphic = pytest.importorskip("metamorphic")

TOLERANCE = 0.005  # the tool's default: a step may move this much the wrong way


def _on_two_nodes(doc):
    """Its ZeRO-2 data parallelism over two nodes, so a degraded NIC is on its path."""
    doc["cluster"]["gpus"] = 16
    doc["parallel"]["tp"] = 2
    return doc


def _ddp_on_two_nodes(doc):
    """Plain data parallelism (no ZeRO) over two nodes: weak scaling then only adds replicas."""
    doc = _on_two_nodes(doc)
    doc["parallel"]["zero"] = 0
    return doc


def _moe_short(doc):
    """Mixtral with expert parallelism 4 (so it can double to its 8 experts), two microbatches
    per replica (so its relations run in seconds)."""
    doc["parallel"]["ep"] = 4
    doc["training"]["global_batch"] = 32
    return doc


def _moe_paired(doc):
    """The Mixtral baseline with Megatron-Core's expert-parallel overlap: every steady step is
    an F&B pair taking the compute stream in turns (engine/pair_stream.py)."""
    doc = _moe_short(doc)
    doc["framework"] = "megatron-core"
    doc["overlap"] = {**doc.get("overlap", {}), "ep_comm": True}
    return doc


@pytest.fixture(
    scope="module",
    params=[("llama3-8b-8xh100", None), ("llama3-8b-8xh100", _on_two_nodes), ("llama3-8b-256xgh200", None),
            ("llama3-8b-8xh100", _ddp_on_two_nodes), ("mixtral-8x7b-32xh100", _moe_short),
            ("mixtral-8x7b-32xh100", _moe_paired)],  # fmt: skip
    ids=["llama3-8b-8xh100", "llama3-8b-16xh100-tp2", "llama3-8b-256xgh200", "llama3-8b-16xh100-tp2-ddp",
         "mixtral-8x7b-32xh100", "mixtral-8x7b-32xh100-ep-overlap"],
)
def baseline(request):
    name, edit = request.param
    doc = yaml.safe_load(resolve_scenario_path(name).read_text())
    doc = edit(doc) if edit else doc
    result = metamorphic._simulate(doc, timeout_s=120)
    assert result is not None, f"{name} should simulate"
    return doc, result


@pytest.mark.parametrize("relation", metamorphic.RELATIONS, ids=lambda r: r.name)
def test_relation_holds(baseline, relation):
    doc, (base, profile) = baseline
    variant = relation.variant(doc, profile)
    if variant is None:
        pytest.skip(f"{relation.name} does not apply to this scenario")
    result = metamorphic._simulate(variant, timeout_s=120)
    if result is None:
        pytest.skip(f"{relation.name}: the variant is refused (e.g. it no longer fits the cluster)")
    assert metamorphic.broken(relation, base, result[0], TOLERANCE) is None


@pytest.mark.parametrize(
    ("schedule", "global_batch", "held"),
    [("zbv-fixed", 32, True), ("zbv-fixed", 16, False), ("1f1b", 16, True), ("1f1b", 8, False), ("afab", 32, False)],
)
def test_double_micro_batch_counts_a_schedules_chunks(schedule, global_batch, held):
    """The micro-batch relation needs a pipeline's worth of microbatches after the doubling:
    pp x the schedule's chunks per stage, two for a V schedule whatever ``parallel.vpp`` says
    (seed 7801, draw 21: zbv-fixed at pp 4, 8 -> 4 microbatches, is below the 2p - 1 its order
    is built for, and its peak fell 23.9%). Here pp 4 on 8 GPUs (dp 2): 32 sequences double to
    8 microbatches a replica, 16 to 4. AFAB keeps every microbatch in flight at any count, as
    the baseline already does (seed 9604, draw 4), so it is never held to the relation."""
    doc = yaml.safe_load(resolve_scenario_path("llama3-8b-8xh100").read_text())
    doc["parallel"].update(pp=4, zero=1, schedule=schedule)
    doc["training"]["global_batch"] = global_batch
    relation = next(r for r in metamorphic.RELATIONS if r.name == "micro-batch x2 memory")
    assert (relation.variant(doc, None) is not None) is held


def test_selective_recompute_under_fp8_attention_is_no_memory_relation():
    """Megatron-Core checkpoints the core attention on its 16-bit Q, K and V, where FP8 attention
    unrecomputed keeps 1-byte copies of them and of its output (TransformerEngine's FusedAttnFunc
    with NVTE_FP8_DPA_BWD=1), so none -> selective may raise the peak there (metamorphic seed 8501,
    Gemma 3 12B: +2.2%); the memory relation skips that step, the time relation keeps it."""
    (memory,) = [r for r in metamorphic.RELATIONS if r.name == "recompute memory"]
    (time,) = [r for r in metamorphic.RELATIONS if r.name == "recompute time"]
    doc = {"parallel": {}, "training": {"recompute": "none", "fp8_attention": True}}
    assert memory.variant(doc, None) is None
    assert time.variant(doc, None)["training"]["recompute"] == "selective"
    doc["training"]["recompute"] = "selective"
    assert memory.variant(doc, None)["training"]["recompute"] == "full"
    doc["training"].update(recompute="none", fp8_attention=False)
    assert memory.variant(doc, None)["training"]["recompute"] == "selective"


def test_selective_recompute_of_an_offloaded_attention_is_no_memory_relation():
    """Megatron-Core offloads core_attn only where the core attention is not checkpointed
    (attention.py: ``if self.checkpoint_core_attention and self.training`` comes before the
    offload), so none -> selective keeps on the GPU the Q, K and V the offload had moved
    (metamorphic seed 9953: Qwen2.5 7B at 32K tokens on p5, core_attn and attn_norm offloaded,
    +4.0%); the memory relation skips that step, and keeps it with other modules offloaded."""
    (memory,) = [r for r in metamorphic.RELATIONS if r.name == "recompute memory"]
    doc = {"parallel": {}, "training": {"recompute": "none", "offload_modules": ["attn_norm", "core_attn"]}}
    assert memory.variant(doc, None) is None
    doc["training"]["offload_modules"] = ["expert_fc1", "moe_act"]
    assert memory.variant(doc, None)["training"]["recompute"] == "selective"


@pytest.mark.parametrize(("gpus", "dispatcher"), [(16, "deepep"), (8, "hybridep"), (16, "alltoall")])
def test_uniform_routing_never_shortens_a_group_limited_step(gpus, dispatcher):
    """``no router groups time`` on a two-layer DeepSeek-V3-like model (8 groups of which 4):
    DeepEP across two DGX H100 nodes and HybridEP inside one send a token to more GPUs or nodes
    without the groups, so the step lengthens; the all-to-all dispatcher's top_k copies do not
    change, so its step stays."""
    doc = {
        "model": {"preset": "deepseek-v3", "layers": 2, "dense_layers": 1, "mtp_layers": 0},
        "cluster": {"hardware": "dgx-h100", "gpus": gpus},
        "parallel": {"ep": gpus},
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": gpus, "precision": "fp8",
                     "fp8_recipe": "block", "recompute": "full"},
        "moe": {"dispatcher": dispatcher},
    }  # fmt: skip
    (relation,) = [r for r in metamorphic.RELATIONS if r.name == "no router groups time"]
    base, profile = metamorphic._simulate(doc, timeout_s=120)
    variant = relation.variant(doc, profile)
    assert variant is not None and variant["model"]["router_groups"] == 0
    longer = metamorphic._simulate(variant, timeout_s=120)[0]
    assert metamorphic.broken(relation, base, longer, TOLERANCE) is None
    if dispatcher == "alltoall":
        assert longer.step_s == base.step_s
    else:
        assert longer.step_s > base.step_s


def test_weak_scaling_is_not_held_on_a_switchless_mesh():
    """Seed 9923: GPT-3 175B at pp 8 on MI355X (a fully connected Infinity Fabric mesh), dp 2 ->
    4 inside each node: each replica pair had one direct link, the group of four three, so the
    data-parallel all-reduce is faster and the step 1.9% shorter. The relation applies on a
    switched node (dgx-h100), where a larger group shares the same NVSwitch links."""
    (relation,) = [r for r in metamorphic.RELATIONS if r.name == "weak scaling x2"]
    doc = yaml.safe_load(resolve_scenario_path("llama3-8b-8xh100").read_text())
    doc["parallel"]["zero"] = 0
    _, h100 = metamorphic._simulate(doc, timeout_s=120)
    assert relation.variant(doc, h100)["cluster"]["gpus"] == 2 * doc["cluster"]["gpus"]
    mesh = {**doc, "cluster": {**doc["cluster"], "hardware": "amd-mi355x"}}
    _, mi355x = metamorphic._simulate(mesh, timeout_s=120)
    assert mi355x.node.scale_up == "mesh" and relation.variant(mesh, mi355x) is None


def test_recompute_time_is_not_held_under_activation_offload():
    """Seed 9933: OLMo 2 7B at 32K tokens (no flash attention under DeepSpeed), four layers'
    activations offloaded on GB200: selective recomputation drops the attention scores from the
    copies, the host copies stop binding and the step is 25% shorter, physically. The time
    relation skips offloading scenarios; the memory relation keeps them."""
    (time,) = [r for r in metamorphic.RELATIONS if r.name == "recompute time"]
    (memory,) = [r for r in metamorphic.RELATIONS if r.name == "recompute memory"]
    doc = {
        "framework": "deepspeed", "model": {"preset": "olmo2-7b", "layers": 4},
        "cluster": {"hardware": "gb200-nvl72", "gpus": 2}, "parallel": {"tp": 2},
        "training": {"seq_len": 32768, "micro_batch": 1, "global_batch": 2, "recompute": "none",
                     "activation_offload_layers": 3},
    }  # fmt: skip
    base = metamorphic._simulate(doc, timeout_s=120)[0]
    doc_sel = {**doc, "training": {**doc["training"], "recompute": "selective"}}
    assert metamorphic._simulate(doc_sel, timeout_s=120)[0].step_s < base.step_s
    assert time.variant(doc, None) is None
    assert memory.variant(doc, None)["training"]["recompute"] == "selective"
    doc["training"]["activation_offload_layers"] = 0
    assert time.variant(doc, None)["training"]["recompute"] == "selective"


def test_a_finding_of_a_relation_named_with_a_slash_is_one_file(tmp_path):
    """Seed 9945 crashed writing "documents /2 time"'s finding into a folder that did not exist."""
    doc = {"training": {"seq_len": 4096}}
    metamorphic._write_finding(tmp_path, 9945, 1, "documents /2 time", "a line", doc, doc)
    (written,) = tmp_path.iterdir()
    assert written.name == "seed9945-1-documents_2_time.yaml" and written.read_text().startswith("# a line")


def test_lifting_the_offload_cap_never_slows_the_step():
    """Megatron-Core's fine_grained_offloading_max_inflight_offloads 0 over a 1 GB/s host link:
    each layer's forward waits for its own copy; without the cap the same copies run on the same
    link in the same order and the forward does not wait (tests/test_module_offload.py's layout)."""
    from test_module_offload import _raw

    doc = _raw(["expert_fc1", "moe_act"], link_gbps=1.0, training={"offload_max_inflight": 0})
    (relation,) = [r for r in metamorphic.RELATIONS if r.name == "no offload cap time"]
    base, profile = metamorphic._simulate(doc, timeout_s=120)
    variant = metamorphic._simulate(relation.variant(doc, profile), timeout_s=120)
    assert variant is not None
    assert variant[0].step_s < base.step_s  # the waits cost time over so slow a link
    assert metamorphic.broken(relation, base, variant[0], TOLERANCE) is None


def test_first_reduction_group_with_bucket_copies_is_no_memory_relation():
    """PyTorch DDP's buckets copy every gradient only where there is a group to reduce over
    (parallelism/data.py bucket_buffer_bytes; nanotron wraps its model in DDP only then), so dp
    or cp 1 -> 2 under nanotron's preset (dp.bucket_copies) adds the gradients' size and may
    raise the peak (metamorphic seed 9969, Mixtral 8x7B on 8 GB200 at tp 8: +8.1% at cp 2,
    +9.7% at dp 2); both memory relations skip that doubling and keep the next one."""
    doc = yaml.safe_load(resolve_scenario_path("llama3-8b-8xh100").read_text())
    doc["framework"] = "nanotron"
    doc["parallel"].update(tp=8, zero=0)
    relations = {r.name: r for r in metamorphic.RELATIONS}
    for name in ("dp x2 memory", "cp x2 memory"):
        assert relations[name].variant(doc, None) is None
    doc["cluster"]["gpus"] = 16  # dp 2: the group exists, doubling it keeps the relation
    assert relations["dp x2 memory"].variant(doc, None)["cluster"]["gpus"] == 32
    assert relations["cp x2 memory"].variant(doc, None)["parallel"]["cp"] == 2
    doc["cluster"]["gpus"] = 8
    doc["framework"] = "megatron-core"  # no bucket copies: held from dp 1 on
    assert relations["dp x2 memory"].variant(doc, None)["cluster"]["gpus"] == 16
