"""Context parallelism's four ways of sharing K and V (``parallel.cp_comm``): the ring, the
all-gather, Ulysses' all-to-all, and Megatron-Core's hierarchical a2a+p2p (the last section).

Sources: Llama 3 (Grattafiori et al. 2024, arXiv 2407.21783, Sec. 3.3.2) and TransformerEngine's
``AttnFuncWithCPAndKVAllGather`` for all_gather: K and V gathered (exposed) forward and again
backward, dK and dV reduce-scattered. DeepSpeed-Ulysses (Jacobs et al. 2023, arXiv 2309.14509,
Sec. 3.2): an all-to-all of Q, K, V before attention and of the output after; per rank the four
tensors of its N/P tokens, so 4Nh/P per layer forward with multi-head attention. Ring attention
(Liu et al. 2023): cp-1 KV steps. Sizes follow nccl-tests: all_gather/reduce_scatter the whole
gathered buffer, all_to_all one rank's send buffer.
"""

from dataclasses import replace

import pytest

from simcluster.errors import UserError
from tests.engine_helpers import layer_builder, merge_sections, run

H, S, CP = 1024, 4096, 4
BF16 = 2
# a small multi-head latent attention (DeepSeek-V2's shape, scaled down)
MLA = {"head_dim": 48, "mla": {"q_lora_rank": 256, "kv_lora_rank": 128, "qk_nope_head_dim": 32,
                               "qk_rope_head_dim": 16, "v_head_dim": 48}}


def scenario(cp_comm, kv_heads=16, tp=1, **kw):
    data = {
        "model": {"layers": 2, "hidden": H, "heads": 16, "kv_heads": kv_heads, "ffn": 4 * H, "vocab": 1024,
                  "mlp": "gelu", "norm": "layernorm"},
        "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "parallel": {"cp": CP, "tp": tp, "cp_comm": cp_comm},
        "training": {"seq_len": S, "micro_batch": 1, "global_batch": 8 // (CP * tp)},
    }
    return merge_sections(data, **kw)


def cp_events(cp_comm, **kw):
    ev = run(scenario(cp_comm, **kw)).events
    return ev[(ev["group"] == "cp") & (ev["layer"] == 0) & (ev["microbatch"] == 0)]


def test_all_gather_gathers_kv_twice_and_reduce_scatters_dkv():
    ev = cp_events("all_gather", kv_heads=4)
    gathered = 2 * S * 4 * (H // 16) * BF16  # K and V of the whole sequence, 4 kv heads of 64
    assert sorted(ev["kind"]) == ["all_gather", "all_gather", "reduce_scatter"]
    assert set(ev["bytes"]) == {gathered}


def test_ulysses_moves_four_tensors_of_the_local_tokens_each_way():
    ev = cp_events("a2a")
    assert list(ev["kind"]) == ["all_to_all"] * 4
    fwd = ev[ev["name"].str.startswith("cp_a2a")].sort_values("start_s").head(2)
    assert fwd["bytes"].sum() == 4 * (S // CP) * H * BF16  # Q, K, V in; O out (Sec. 3.2: 4Nh/P)


def test_ulysses_backward_moves_the_output_and_its_gradient_in():
    """TransformerEngine ``AttnFuncWithCPAndQKVOA2A``: the forward saves the output after its
    all-to-all back (sequence-sharded), so the backward all-to-alls ``[out, dout]`` before the
    kernel and ``[dq, dk, dv]`` after it: 2Nh/P in, 3Nh/P out with multi-head attention."""
    ev = cp_events("a2a").sort_values("start_s")
    local = (S // CP) * H * BF16  # one tensor of the rank's tokens, all heads
    assert list(ev["bytes"]) == [3 * local, local, 2 * local, 3 * local]


def test_deepspeed_ulysses_backward_moves_only_the_output_gradient_in():
    """DeepSpeed ``deepspeed/sequence/layer.py``: ``_SeqAllToAll.backward`` applies the same
    all-to-all to the incoming gradient (scatter and gather swapped), and the local attention
    inside ``DistributedAttention`` saved its own head-sharded output, so the backward
    all-to-alls ``dout`` alone before the kernel (Nh/P) and dQ, dK, dV after it (3Nh/P)."""
    ev = cp_events("a2a", parallel={"cp_a2a_impl": "deepspeed"}).sort_values("start_s")
    local = (S // CP) * H * BF16
    # one all-to-all per tensor (DistributedAttention.forward: Q, K, V, then the output)
    assert list(ev["name"]) == ["cp_a2a_q", "cp_a2a_k", "cp_a2a_v", "cp_a2a_o",
                                "cp_a2a_do", "cp_a2a_dq", "cp_a2a_dk", "cp_a2a_dv"]  # fmt: skip
    assert list(ev["bytes"]) == [local] * 8
    forward, backward = ev["bytes"].iloc[:3].sum(), ev["bytes"].iloc[5:].sum()
    assert (forward, backward) == (3 * local, 3 * local)


def test_deepspeed_ulysses_copies_each_tensor_once_on_the_compute_stream():
    """DeepSpeed ``single_all_to_all`` (``deepspeed/sequence/layer.py``, 0.12.4): a tensor whose
    heads are scattered is made contiguous in its send layout before the exchange
    (``reshape(...).transpose(0, 1).contiguous()``: Q, K, V forward, the output's gradient
    backward); one whose sequence is scattered after it (``output.transpose(0, 1).contiguous()``:
    the output forward, dQ, dK, dV backward). Each copy reads and writes the rank's tensor once,
    a memory-bound kernel the compute stream runs between the exchanges."""
    from simcluster.context import build_context
    from simcluster.engine.plan import kernel_model
    from simcluster.scenario import scenario_from_dict

    # no SMs lent to NCCL (engine/interference.py), so each copy lasts exactly its bytes
    data = scenario("a2a", parallel={"cp_a2a_impl": "deepspeed"},
                    cluster={"profile": {"efficiency": {"collective_sms": 0}}})  # fmt: skip
    ev = run(data).events
    ev = ev[(ev["rank"] == 0) & (ev["layer"] == 0) & (ev["microbatch"] == 0)].sort_values("start_s")
    names = [n for n in ev["name"] if n.startswith(("cp_a2a", "cp_relayout", "attn_core"))]
    assert names == [
        "cp_relayout_q", "cp_a2a_q", "cp_relayout_k", "cp_a2a_k", "cp_relayout_v", "cp_a2a_v",
        "attn_core", "cp_a2a_o", "cp_relayout_o",
        "cp_relayout_do", "cp_a2a_do", "attn_core", "cp_a2a_dq", "cp_relayout_dq",
        "cp_a2a_dk", "cp_relayout_dk", "cp_a2a_dv", "cp_relayout_dv",
    ]  # fmt: skip
    km = kernel_model(build_context(scenario_from_dict(data)))
    local = (S // CP) * H * BF16  # one tensor of the rank's tokens, all heads
    copies = ev[ev["name"].str.startswith("cp_relayout")]
    assert (copies["stream"] == "compute").all()
    for dur in copies["end_s"] - copies["start_s"]:
        assert dur == pytest.approx(km.memory(2 * local), rel=1e-9)
    # TransformerEngine's all-to-all keeps its one call each way and no copy is timed
    te = run(scenario("a2a")).events
    assert not te["name"].str.startswith("cp_relayout").any()


def test_framework_deepspeed_runs_its_own_ulysses():
    from simcluster.context import build_context
    from simcluster.scenario import scenario_from_dict

    ctx = build_context(scenario_from_dict({**scenario("a2a"), "framework": "deepspeed"}))
    assert ctx.layout.cp_a2a_impl == "deepspeed"
    assert build_context(scenario_from_dict(scenario("a2a"))).layout.cp_a2a_impl == "te"


def test_all_gather_sends_what_the_ring_sends_but_exposes_it():
    """Each rank sends (cp-1) local KV blocks forward either way; only the ring hides them."""
    ring = cp_events("p2p").sort_values("start_s")
    fwd_ring = ring.head(CP - 1)  # the forward's steps come first
    assert set(fwd_ring["name"]) == {"cp_kv"}
    ag = cp_events("all_gather")
    one_gather = ag[ag["kind"] == "all_gather"]["bytes"].iloc[0]
    assert len(fwd_ring) == CP - 1
    assert fwd_ring["bytes"].sum() == pytest.approx(one_gather * (CP - 1) / CP)
    exposed = {c: run(scenario(c)).summary["exposed_comm_s"]["cp"] for c in ("p2p", "all_gather")}
    assert exposed["all_gather"] > exposed["p2p"]


def test_default_is_the_ring():
    data = scenario("p2p")
    del data["parallel"]["cp_comm"]
    ev = run(data).events
    assert set(ev[ev["group"] == "cp"]["kind"]) == {"send"}  # ring steps are point-to-point sends


@pytest.mark.parametrize(
    "cp_comm, kw, words",
    [
        ("torus", {}, "unknown 'torus'"),  # ('ring' reads as p2p: simcluster/spellings.py)
        ("a2a", {"kv_heads": 2}, "kv_heads (2/tp=2) over 4 ranks"),
        ("a2a", {"tp": 2, "kv_heads": 4}, "kv_heads (4/tp=2) over 4 ranks"),
        # TE's tests: "MLA CP currently only support KV P2P!"
        ("all_gather", {"model": MLA}, "'all_gather' does not run MLA attention"),
        ("a2a", {"model": MLA}, "'a2a' does not run MLA attention"),
    ],
)
def test_bad_cp_comm(cp_comm, kw, words):
    with pytest.raises(UserError) as err:
        run(scenario(cp_comm, **kw))
    assert err.value.field == "parallel.cp_comm" and words in str(err.value)


@pytest.mark.parametrize("cp_comm", ["p2p", "all_gather"])
def test_ring_and_gather_need_fused_attention(cp_comm):
    """Megatron-Core's unfused ``DotProductAttention`` asserts "Context parallelism is only
    supported by TEDotProductAttention!": the ring and the gather are TE's fused kernels."""
    with pytest.raises(UserError) as err:
        run(scenario(cp_comm, training={"flash_attention": False}))
    assert err.value.field == "training.flash_attention" and "cp_comm: a2a" in str(err.value)


def test_ulysses_wraps_unfused_attention():
    # DeepSpeed's DistributedAttention all-to-alls around any local attention
    ev = cp_events("a2a", training={"flash_attention": False})
    assert list(ev["kind"]) == ["all_to_all"] * 4


def test_mla_ring_sends_the_decompressed_keys_and_values():
    """TE ``AttnFuncWithCPAndKVP2P`` with MLA (``enable_mla``: K and V head dims differ) sends
    ``torch.cat((k.view(-1), v.view(-1)))``: Megatron-Core's MLA up-projects the latent before
    the core attention, so each token carries heads/tp x (qk_nope + qk_rope + v_head) values."""
    ev = cp_events("p2p", tp=2, model=MLA).sort_values("start_s")
    per_token = 16 / 2 * (32 + 16 + 48)  # heads/tp x (nope + rope + v)
    assert ev["bytes"].iloc[0] == (S // CP) * per_token * BF16


def test_list_cp_names_every_algorithm(capsys):
    from simcluster.cli import main

    assert main(["list", "cp"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["p2p", "all_gather", "a2a", "a2a+p2p"]
    assert "Llama 3" in lines[1] and "Ulysses" in lines[2] and "Hierarchical" in lines[3]


# TransformerEngine AttnFuncWithCPAndKVP2P with the load-balanced causal split (each rank holds
# chunks i and 2cp-1-i of c = s/2cp tokens): step 0 runs the local pair causally (2c x 2c),
# every later step one visiting block without a mask (2c queries x c keys from an earlier rank,
# c x 2c from a later one). FLOPs: 0.5 (2c)^2 + (cp-1) 2c^2 = 2 cp c^2, the rank's 1/cp of the
# causal s^2 / 2.


def _ring_builder(seq: int, cp: int, hardware: str = "dgx-h100", cp_comm: str = "p2p", **training):
    return layer_builder({
        "model": {"layers": 2, "hidden": 4096, "heads": 32, "ffn": 11008, "vocab": 32000, "mlp": "swiglu"},
        "cluster": {"hardware": hardware, "gpus": 8 * cp},
        "parallel": {"tp": 8, "cp": cp, "cp_comm": cp_comm},
        "training": {"seq_len": seq, "micro_batch": 1, "global_batch": 1, "attention_kernel": "fa2", **training},
    })  # fmt: skip


@pytest.mark.parametrize("phase", ["F", "B"])
def test_ring_kernels_hold_the_ranks_causal_share_of_flops(phase):
    # a profile without attention curves: one rate for every mask, so only the launches differ
    b = _ring_builder(65536, 8, hardware="amd-mi300x", attention_kernel=None)
    core = b.core_times(phase)
    launch = b.km.launch_s  # the ring launches 8 kernels; the share of one kernel, 1/8 of one
    assert core.diagonal + 7 * core.block == pytest.approx(core.total + (8 - 1 / 8) * launch, rel=1e-12)


def test_ring_runs_all_but_one_step_at_the_non_causal_rate():
    # 1M tokens over cp 32: chunks of 16K; FA2 head dim 128 on H100 (FlashAttention-3 paper
    # Fig. 5, the profile's curve): causal 335, non-causal 370 TFLOP/s at 16K (held beyond)
    seq, cp = 1 << 20, 32
    b = _ring_builder(seq, cp)
    core = b.core_times("F")
    c = seq / (2 * cp)
    heads = 32 / 8
    flops = lambda sq, skv: 2 * heads * sq * skv * (128 + 128)  # noqa: E731
    slow = b.km.slowdown
    diagonal = 0.5 * flops(2 * c, 2 * c) / 335e12 * slow + b.km.launch_s
    block = flops(2 * c, c) / 370e12 * slow + b.km.launch_s
    assert core.diagonal == pytest.approx(diagonal, rel=1e-9)
    assert core.block == pytest.approx(block, rel=1e-9)
    assert core.diagonal + (cp - 1) * core.block < 0.92 * core.total  # was: all at 335


def test_ring_steps_use_the_diagonal_kernel_first_forward_and_last_backward():
    # TE's backward runs the forward's steps "in reversed order of fwd": the local pair last
    for phase in ("F", "B"):
        segments = layer_builder(scenario("p2p")).layer(0, phase)
        cores = [seg.seconds for seg in segments if getattr(seg, "name", "") == "attn_core"]
        assert len(cores) == CP
        pair, blocks = (cores[0], cores[1:]) if phase == "F" else (cores[-1], cores[:-1])
        assert blocks == [blocks[0]] * (CP - 1)  # the visiting blocks alike
        assert pair != blocks[0]  # the local pair: causal, over twice the tokens


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_ring_backward_passes_kv_then_kv_and_dkv_then_dkv_home(cp):
    """TE ``AttnFuncWithCPAndKVP2P.backward``: cp steps, each sending under its own kernel
    (``send_tensor = p2p_comm_buffers[i % 2]``, ``[0]`` at i = 0, ``[1]`` at i = cp - 1): the KV
    block alone first, the block with the accumulated dK/dV in between, the dK/dV alone last,
    2(cp - 1) blocks in all; the forward sends cp - 1 blocks under its first cp - 1 kernels."""
    from simcluster.parallelism.context import CoreTimes, ring_attention
    from simcluster.parallelism.segments import Comm, Compute

    shapes = layer_builder(scenario("p2p")).shapes
    shapes = replace(shapes, layout=replace(shapes.layout, cp=cp))
    kv = 2 * S / cp * H * BF16  # K and V of the rank's tokens, 16 heads of 64
    core = CoreTimes(1.0, diagonal=0.3, block=0.1)
    for backward, names in (
        (False, ["cp_kv"] * (cp - 1)),
        (True, ["cp_kv"] + ["cp_kv_dkv"] * (cp - 2) + ["cp_dkv"]),
    ):
        segs = ring_attention(shapes, core, backward, 0)
        comms = [s for s in segs if isinstance(s, Comm)]
        assert [c.name for c in comms] == names
        assert all(c.overlap for c in comms)  # each under the kernel after it
        assert sum(c.nbytes for c in comms) == pytest.approx(kv * (cp - 1) * (2 if backward else 1))
        # every send sits right before a kernel: none is left exposed after the last one
        assert all(isinstance(segs[i + 1], Compute) for i, s in enumerate(segs) if isinstance(s, Comm))


def test_a_ring_step_across_nodes_waits_for_its_network_hop():
    """Ring attention over cp = 4 with tp = 4 on 8-GPU nodes: each ring has two NVLink hops
    (0 -> 4, 8 -> 12) and two network hops (4 -> 8, 12 -> 0). All sends of a step run at once
    and every rank's step waits for its receive, so the step takes as long as a network hop;
    timing it by the simulated rank's own send (an NVLink hop) was 7.6x too fast."""
    from simcluster.hardware import load_profile
    from simcluster.network import make_recipe, recipe_time_alone
    from simcluster.topology import build_cluster

    cluster = build_cluster(load_profile("dgx-h100"), 16)
    size = 64 * 2**20

    def alone(pairs):
        return recipe_time_alone(cluster, make_recipe(cluster, "send_recv", pairs, size))

    nvlink, network = alone([[0, 4]]), alone([[4, 8]])
    assert network > 5 * nvlink
    assert alone([[0, 4], [4, 8], [8, 12], [12, 0]]) == pytest.approx(network)


# TransformerEngine's AttnFuncWithCPAndKVAllGather runs one kernel per local chunk j (i and
# 2cp-1-i on rank i): its c queries against the (j+1)c gathered keys up to its end, bottom-right
# causal, so only the c x c diagonal block is masked. Pairs on rank i: c^2 (i + 1/2) +
# c^2 (2cp - 1 - i + 1/2) = 2 cp c^2, the rank's 1/cp of the causal s^2 / 2 (s = 2 cp c).


@pytest.mark.parametrize("cp", [2, 4, 16])
def test_gathered_prefix_kernels_hold_the_ranks_causal_share(cp):
    # a rate-free attend that returns (query, key) pairs: the pieces must sum to s^2 / (2 cp)
    c = 1000.0
    pairs = lambda sq, skv, causal: sq * skv * (0.5 if causal else 1.0)  # noqa: E731
    from simcluster.parallelism.layer import LayerBuilder

    s = 2 * cp * c
    assert LayerBuilder._prefix_attention(pairs, cp, c) == pytest.approx(s * s / 2 / cp)


def test_all_gather_attention_runs_mostly_at_the_non_causal_rate():
    # 128K tokens over cp 16: chunks of 4K; FA2 head dim 128 on H100 (FlashAttention-3 paper
    # Fig. 5/6, the profile's curves): the non-causal rate is above the causal one at every
    # length, so the per-chunk kernels beat the whole-sequence causal cost the model used before
    b = _ring_builder(1 << 17, 16, cp_comm="all_gather")
    for phase in ("F", "B"):
        core = b.core_times(phase)
        assert core.block == 0 and core.diagonal == 0
        assert 0.8 * core.total < core.prefix < 0.97 * core.total
        attn = [s for s in b.layer(0, phase) if getattr(s, "name", "") == "attn_core"]
        assert [s.seconds for s in attn] == [core.prefix]


# Working memory: the buffers TransformerEngine's context-parallel attention holds beyond the
# stash while one layer's attention runs (context.working_bytes).


def test_ring_forward_keeps_every_steps_block_and_partial_output():
    """TE ``AttnFuncWithCPAndKVP2P.forward``: ``p2p_comm_buffers[i + 1] =
    torch.empty_like(p2p_comm_buffers[i])`` at every step, and ``out_per_step[i]`` /
    ``softmax_lse_per_step[i]`` kept until the correction after the loop; rank cp-1 attends
    both its chunks at every step. So cp x (K and V, the output, the fp32 log-sum-exp) of the
    rank's tokens: the whole sequence's for its heads. Backward: two [KV, dKV] buffers, the
    step's dK/dV, dQ and its accumulator."""
    from simcluster.parallelism.context import working_bytes

    shapes = layer_builder(scenario("p2p", kv_heads=4)).shapes
    tokens = S // CP
    kv, o, lse = 2 * tokens * 4 * 64 * BF16, tokens * H * BF16, tokens * 16 * 4
    assert working_bytes(shapes, False) == CP * (kv + o + lse)
    assert working_bytes(shapes, True) == 5 * kv + 2 * o  # Q is as wide as O here
    # a backward that reruns the attention's forward first holds the larger of the two
    assert working_bytes(shapes, True, recomputed=True) == CP * (kv + o + lse)


def test_gather_holds_the_whole_sequences_keys_and_values():
    """TE ``AttnFuncWithCPAndKVAllGather``: forward the gathered K and V (cp KV) and each local
    chunk's contiguous prefix slice ((2cp + 1) c tokens: cp + 1/2 KV) and the chunks' outputs;
    backward adds full-length zeroed dK, dV and the chunks' dK/dV slices: (4cp + 1) KV + 2 Q."""
    from simcluster.parallelism.context import working_bytes

    shapes = layer_builder(scenario("all_gather", kv_heads=4)).shapes
    tokens = S // CP
    kv, o = 2 * tokens * 4 * 64 * BF16, tokens * H * BF16
    assert working_bytes(shapes, False) == (2 * CP + 0.5) * kv + o
    assert working_bytes(shapes, True) == (4 * CP + 1) * kv + 2 * o


def test_every_algorithm_has_its_working_memory():
    from simcluster.parallelism import context

    assert set(context._WORKING) == set(context.algorithms())


def test_the_simulated_peak_holds_the_working_memory_on_the_stash():
    """One microbatch, one stage: the stash peaks at the forward's end and the backward's start,
    where the layer's attention buffers come on top of it (and the loss's logit copies at the
    head, whichever is larger)."""
    from simcluster.context import build_context
    from simcluster.engine.plan import cp_working
    from simcluster.memory import chunk_activation_bytes, loss_transient_bytes
    from simcluster.scenario import scenario_from_dict

    for cp_comm, extra in (("p2p", {}), ("all_gather", {}), ("a2a", {}), ("a2a+p2p", {"cp_a2a": 2})):
        result = run(scenario(cp_comm, parallel=extra))  # dp 2, global batch 2: one microbatch
        ctx = build_context(scenario_from_dict(scenario(cp_comm, parallel=extra)))
        chunk = ctx.chunks[0][0]
        stash = chunk_activation_bytes(ctx.model, ctx.layout, ctx.scenario.training, chunk)
        fwd, bwd = cp_working(ctx, chunk)
        assert min(fwd, bwd) > 0
        loss = loss_transient_bytes(ctx.model, ctx.layout, ctx.scenario.training)
        peak = result.memory["activations"].max()
        assert peak == pytest.approx(stash + max(fwd, bwd, loss), rel=1e-12)


def test_sequence_must_split_into_two_chunks_per_rank():
    # TE's load-balanced split: "Sequence length per GPU needs to be divisible by 2!"
    with pytest.raises(UserError) as err:
        run(scenario("p2p", training={"seq_len": 4100}))
    assert err.value.field == "training.seq_len" and "2*cp=8" in str(err.value)


def test_sequence_parallelism_splits_each_cp_ranks_tokens_over_tp():
    # Megatron-Core mappings._split_along_first_dim: "First dimension of the tensor should be
    # divisible by tensor parallel size"; the first dimension is the rank's seq_len/cp tokens
    data = scenario("p2p", tp=4, cluster={"gpus": 16}, training={"seq_len": 8 * 3, "global_batch": 1},
                    parallel={"sequence_parallel": True})  # fmt: skip
    with pytest.raises(UserError) as err:
        run(data)
    assert err.value.field == "training.seq_len" and "seq_len/cp = 6 tokens" in str(err.value)
    data["training"]["seq_len"] = 8 * 4  # 8 tokens per cp rank, 2 per tp rank
    run(data)


@pytest.mark.parametrize("cp_comm", ["p2p", "all_gather", "a2a"])
def test_context_parallelism_does_not_change_the_model_flops(cp_comm):
    """The load-balanced split hands each (query, key) pair of the causal mask to one rank, so
    the step's model FLOPs are the sequence's, whatever cp: 2 sequences x S tokens x the FLOPs
    per token of the whole sequence (Narayanan et al. 2021 eq. 3 counts s, not s/cp)."""
    from simcluster.flops import token_flops

    flat = scenario(cp_comm, cluster={"gpus": 2}, parallel={"cp": 1}, training={"global_batch": 2})
    split = scenario(cp_comm)  # cp 4 on 8 GPUs: dp 2, the same two sequences per step
    a, b = run(flat).summary, run(split).summary
    assert a["model_flops_per_step"] == b["model_flops_per_step"]
    model = layer_builder(split).shapes.model
    assert b["model_flops_per_step"] == token_flops(model, S).total * 2 * S


def test_unfused_ulysses_multiplies_its_heads_scores_over_the_whole_sequence():
    """After DeepSpeed-Ulysses' all-to-all a rank's local attention sees the whole sequence on
    heads/cp heads (Jacobs et al. 2023, Sec. 3.2): its batched GEMMs are S x S per head over
    b x heads/(tp cp) matrices, not S/cp x S over every head."""
    b = layer_builder(scenario("a2a", training={"flash_attention": False}))
    for phase in ("F", "B"):
        whole = b._unfused_attention(1, S, S, 16 / CP, 64, 64, phase == "B")
        assert b.attention_core(phase) == whole
        assert whole != b._unfused_attention(1, S / CP, S, 16, 64, 64, phase == "B")  # GEMM shapes differ



# Hierarchical context parallelism (Megatron-Core cp_comm_type a2a+p2p with
# hierarchical_context_parallel_sizes [a, cp/a]; TE AttnFuncWithCPAndKVP2P with cp_size_a2a > 1).


def test_hierarchical_groups_are_consecutive_runs_and_the_ring_across_them():
    """Megatron-Core ``create_hierarchical_parallel_groups`` with sizes [2, 2] on 4 ranks: level-1
    groups [g0, g1], [g2, g3] (the all-to-all), level-2 [g0, g2], [g1, g3] (the ring)."""
    from simcluster.context import build_context
    from simcluster.scenario import scenario_from_dict

    lay = build_context(scenario_from_dict(scenario("a2a+p2p", parallel={"cp_a2a": 2}))).layout
    cp = lay.group("cp", 0)
    assert [lay.group("cpa", r) for r in cp] == [cp[:2], cp[:2], cp[2:], cp[2:]]
    assert [lay.group("cpr", r) for r in cp] == [cp[0::2], cp[1::2], cp[0::2], cp[1::2]]


def test_hierarchical_all_to_alls_around_a_ring_over_the_groups():
    """cp 4 as 2 x 2: Q, K, V all-to-all'd inside the pair (each rank's send buffer, 3 tensors of
    its S/4 tokens with MHA), a ring of 2 over the pairs (1 KV send forward; KV then dK/dV
    backward, each block as large as the rank's own K and V), the output back; backward the
    output and its gradient in, dQ, dK, dV out."""
    ev = cp_events("a2a+p2p", parallel={"cp_a2a": 2}).sort_values("start_s")
    local = (S // CP) * H * BF16
    assert set(ev["group"]) == {"cp"}  # shown as context-parallel communication
    assert list(zip(ev["kind"], ev["bytes"], strict=True)) == [
        ("all_to_all", 3 * local), ("send", 2 * local), ("all_to_all", local),
        ("all_to_all", 2 * local), ("send", 2 * local), ("send", 2 * local), ("all_to_all", 3 * local),
    ]  # fmt: skip


def test_hierarchical_ring_kernels_hold_the_ranks_causal_share():
    # the ring of cp/a ranks on a x the tokens and 1/a of the heads: chunks c = S/(2 cp/a);
    # the pair and the visiting block's FLOPs still sum to the rank's 1/cp of the causal work
    from simcluster.parallelism.layer import LayerBuilder

    b = layer_builder(scenario("a2a+p2p", parallel={"cp_a2a": 2}))
    calls = []

    def attend(bb, sq, skv, heads, dq, dv, causal, backward):
        calls.append((sq, skv, heads, causal))
        return sq * skv * heads * (0.5 if causal else 1.0)

    b.km = type("K", (), {"attention": staticmethod(attend)})()
    core = LayerBuilder.core_times(b, "F")
    c = S / (2 * 2)
    # the first call is the rank's share over the whole sequence (CoreTimes.total)
    assert calls[1:] == [(2 * c, 2 * c, 16 / 2, True), (2 * c, c, 8, False), (c, 2 * c, 8, False)]
    assert core.diagonal + (2 - 1) * core.block == pytest.approx(core.total) == S * S / 2 * 16 / CP


@pytest.mark.parametrize(
    "parallel, field, words",
    [
        ({"cp_comm": "a2a+p2p"}, "parallel.cp_a2a", "a divisor of cp=4 between 2 and cp/2 (got None)"),
        ({"cp_comm": "a2a+p2p", "cp_a2a": 4}, "parallel.cp_a2a", "(got 4)"),
        ({"cp_comm": "a2a+p2p", "cp_a2a": 3}, "parallel.cp_a2a", "(got 3)"),
        ({"cp_comm": "p2p", "cp_a2a": 2}, "parallel.cp_a2a", "cp_comm is 'p2p'"),
    ],
)
def test_bad_hierarchy(parallel, field, words):
    with pytest.raises(UserError) as err:
        run(scenario(parallel.get("cp_comm", "p2p"), parallel=parallel))
    assert err.value.field == field and words in str(err.value)


def test_hierarchical_groups_beside_hybrid_sharding_agree_in_all_ranks_mode():
    """cp 4 as 2 x 2 on 16 GPUs with ZeRO-3 sharded over replicas of 4 of the dp x cp ranks:
    the cpa/cpr groups cut the cp group and dps/dpr the dp x cp group, each rank in one group
    of each; every rank simulated meets them as the symmetric run's representative does."""
    data = scenario("a2a+p2p", cluster={"gpus": 16}, parallel={"cp_a2a": 2, "zero": 3, "zero_shard": 4},
                    training={"global_batch": 8})  # fmt: skip
    symmetric = run(data)
    ev = symmetric.events
    assert {"zero3_grad_reduce_scatter_replicas", "cp_a2a_in", "cp_kv"} <= set(ev["name"])
    every = run(data, all_ranks=True).summary["step_time_s"]
    assert every == pytest.approx(symmetric.summary["step_time_s"], rel=1e-9)
