"""The parallel attention + MLP block, y = x + Attn(LN1(x)) + MLP(LN2(x)) (``model.parallel_block``).

Checked against the code that runs it:

- collectives per layer, ``parallel.parallel_block_comm``: ``separate`` is the sequential
  block's (NeMo's FalconTransformerLayer on Megatron-Core's SelfAttention and MLP, each
  row-parallel linear reducing its own output; Korthikanti et al. 2022 Fig. 5: an all-reduce per
  block each way, or with sequence parallelism an all-gather and a reduce-scatter per block);
  ``gpt-neox`` is EleutherAI/gpt-neox megatron/model/transformer.py with gpt_j_residual (row
  linears parallel_output=True, one reduce_from_model_parallel_region of the sum forward; each
  ColumnParallelLinear's copy_to_model_parallel_region all-reduces its input gradient
  backward); ``fused`` is one set around the block, as PaLM's shared input allows (its Sec. 2: the
  input matmuls fused; MegaScale NSDI'24 Sec. 3.1 trains its 175B with the block);
- parameters and FLOPs: the same weights (transformers' GPTJBlock has one ``ln_1``,
  GPTNeoXLayer two norms), so model FLOPs are equal;
- activations (Korthikanti et al. 2022 Sec. 4.2's count): the MLP's norm input is the layer
  input the attention keeps already (2sbh), and one shared norm's output is the input of both
  QKV and fc1 (2sbh more);
- the Hugging Face config fields each modelling code reads.
"""

from __future__ import annotations

import json

import pytest
from engine_helpers import compute_seconds, layer_builder, pipeline_scenario, run

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.flops import token_flops
from simcluster.memory import layer_activation_bytes
from simcluster.model import build_model, from_hf_config, load_preset
from simcluster.parallelism.segments import Comm
from simcluster.scenario import scenario_from_dict

SEQ, HIDDEN = 1024, 4096  # engine_helpers.pipeline_scenario: micro-batch 1, bf16
BLOCK_BYTES = SEQ * HIDDEN * 2  # one [s, b, h] bf16 activation, what each TP collective moves


def _scenario(comm: str | None, sp: bool, parallel: bool = True, norms: int = 1, tp: int = 2) -> dict:
    data = pipeline_scenario(1, 2, "1f1b", layers=2)
    data["model"].update({"parallel_block": parallel, "parallel_norms": norms})
    data["cluster"].update({"gpus": tp, "gpus_per_node": 8})
    data["parallel"].update({"tp": tp, "sequence_parallel": sp})
    if comm is not None:
        data["parallel"]["parallel_block_comm"] = comm
    return data


def _collectives(data: dict, phase: str) -> list[tuple[str, float]]:
    """(operation, bytes) of layer 0's TP collectives in ``phase``, in order."""
    return [(s.op, s.nbytes) for s in layer_builder(data).layer(0, phase) if isinstance(s, Comm)]


AR, AG, RS = "all_reduce", "all_gather", "reduce_scatter"


@pytest.mark.parametrize(
    ("comm", "sp", "forward", "backward"),
    [
        # sequential / separate: Megatron's f and g per block (Korthikanti Fig. 5)
        (None, False, [AR, AR], [AR, AR]),
        ("separate", True, [AG, RS, AG, RS], [AG, AG, RS, AG, AG, RS]),
        # GPT-NeoX: one all-reduce of the summed row-parallel outputs; backward one per branch
        ("gpt-neox", False, [AR], [AR, AR]),
        # fused: one all-reduce each way; with SP one gather and one scatter forward, and
        # backward the output gradient's gather, the input's re-gather and one scatter
        ("fused", False, [AR], [AR]),
        ("fused", True, [AG, RS], [AG, AG, RS]),
    ],
)
def test_tp_collectives_per_layer_follow_each_implementation(comm, sp, forward, backward):
    fwd, bwd = _collectives(_scenario(comm, sp), "F"), _collectives(_scenario(comm, sp), "B")
    assert [op for op, _ in fwd] == forward
    assert [op for op, _ in bwd] == backward
    # every collective moves one whole [s, b, h] activation's bytes (the gather's output, the
    # reduce-scatter's input), as the sequential block's do
    assert {size for _, size in fwd + bwd} == {BLOCK_BYTES}


@pytest.mark.parametrize("sp", [False, True])
def test_separate_collectives_are_the_sequential_blocks(sp):
    """NeMo's Falcon layer runs Megatron-Core's modules unchanged: the same collectives as a
    sequential layer, in the same places."""
    for phase in ("F", "B", "BW"):
        par = [(s.name, s.op, s.nbytes) for s in layer_builder(_scenario(None, sp)).layer(0, phase) if isinstance(s, Comm)]
        seq = [(s.name, s.op, s.nbytes) for s in layer_builder(_scenario(None, sp, parallel=False)).layer(0, phase)
               if isinstance(s, Comm)]  # fmt: skip
        assert par == seq


def test_parallel_block_keeps_the_model_flops_and_weights():
    """Same matrices, same FLOPs; one shared norm is one LayerNorm (2h) fewer per layer."""
    base = pipeline_scenario(1, 2, "1f1b", layers=4)["model"]
    seq = build_model(dict(base))
    two = build_model({**base, "parallel_block": True, "parallel_norms": 2})
    one = build_model({**base, "parallel_block": True, "parallel_norms": 1})
    assert token_flops(seq, SEQ) == token_flops(two, SEQ) == token_flops(one, SEQ)
    assert two.params_total() == seq.params_total()
    assert seq.params_total() - one.params_total() == 4 * 2 * HIDDEN


def test_a_shared_norm_runs_one_norm_fewer():
    """The layer's forward memory-bound work loses exactly one norm's bytes (the MLP's norm,
    activation and residual run as one fused group, so its launch stays)."""
    seq = layer_builder(_scenario(None, False, parallel=False, tp=1))
    par = layer_builder(_scenario(None, False, tp=1))
    two = layer_builder(_scenario(None, False, norms=2, tp=1))
    ops = seq.ops
    rest = ops.activation(16384) + ops.residual()  # the MLP's other memory-bound work (ffn 4h)
    one_norm = seq._elementwise(ops.norm() + rest, "F").total - seq._elementwise(rest, "F").total
    assert one_norm > 0
    assert compute_seconds(seq.layer(0, "F")) - compute_seconds(par.layer(0, "F")) == pytest.approx(one_norm)
    assert compute_seconds(two.layer(0, "F")) == pytest.approx(compute_seconds(seq.layer(0, "F")))


def test_fused_backward_sums_the_branch_gradients_over_the_whole_sequence():
    """With sequence parallelism the two input gradients are added before the one
    reduce-scatter, h wide per token where the residual terms count h/t: 3 x 2 bytes x h x
    (1 - 1/t) more traffic; nothing without sequence parallelism."""
    assert layer_builder(_scenario("fused", True, tp=4)).ops.branch_gradient_sum().bytes_per_token == 3 * 2 * HIDDEN * 3 / 4
    assert layer_builder(_scenario("fused", False, tp=4)).ops.branch_gradient_sum().bytes_per_token == 0


def _stash(data: dict) -> float:
    sc = scenario_from_dict(data)
    ctx = build_context(sc)
    return layer_activation_bytes(ctx.model, ctx.layout, sc.training, 0)


@pytest.mark.parametrize(("tp", "sp"), [(1, False), (2, True)])
def test_activation_memory_saved_by_a_parallel_block(tp, sp):
    """Korthikanti's per-layer count keeps the MLP norm's input (2sbh) and the fc1 input (2sbh,
    the norm's output): in a parallel block the first is the layer input, kept by the attention
    already; with one norm the second is the QKV input. /t with sequence parallelism."""
    sbh = SEQ * 1 * HIDDEN / (tp if sp else 1)
    seq = _stash(_scenario(None, sp, parallel=False, tp=tp))
    assert seq - _stash(_scenario(None, sp, norms=2, tp=tp)) == 2 * sbh
    assert seq - _stash(_scenario(None, sp, norms=1, tp=tp)) == 4 * sbh


def test_fp8_linears_keep_their_own_input_copies():
    """TransformerEngine's FP8 linears each keep their own cast of the shared norm output, so
    with one norm only the layer input's 2sbh is saved."""
    def fp8(parallel: bool) -> float:
        data = _scenario(None, False, parallel=parallel, tp=1)
        data["training"]["precision"] = "fp8"
        return _stash(data)

    assert fp8(False) - fp8(True) == 2 * SEQ * HIDDEN


def test_fewer_collectives_shorten_the_step():
    """On a simulated NVLink node the fused block's one collective per direction beats the
    separate block's two; GPT-NeoX's saves only the forward one."""
    steps = {}
    for comm in ("separate", "gpt-neox", "fused"):
        data = _scenario(comm, False, tp=4)
        data["cluster"]["network"] = "simulated"
        steps[comm] = run(data).summary["step_time_s"]
    assert steps["fused"] < steps["gpt-neox"] < steps["separate"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"parallel": {"parallel_block_comm": "gpt-neox", "sequence_parallel": True}}, "parallel.parallel_block_comm"),
        ({"parallel": {"parallel_block_comm": "fused", "sequence_parallel": True}, "model": {"parallel_norms": 2}},
         "parallel.parallel_block_comm"),
        ({"model": {"parallel_block": False}, "parallel": {"parallel_block_comm": "fused"}},
         "parallel.parallel_block_comm"),
        ({"model": {"experts": 8, "top_k": 2, "expert_ffn": 1024}}, "model.parallel_block"),
        ({"model": {"parallel_norms": 3}}, "model.parallel_norms"),
        ({"model": {"parallel_block": False, "parallel_norms": 2}}, "model.parallel_norms"),
    ],
)  # fmt: skip
def test_what_no_implementation_runs_is_refused_naming_the_field(change, field):
    data = _scenario(None, False, tp=2)
    for section, values in change.items():
        data[section].update(values)
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(data))
    assert err.value.field == field


def test_hugging_face_and_gpt_neox_names_are_read():
    """use_parallel_residual (GPT-NeoX, StableLM config.json), gpt_j_residual (gpt-neox's own
    configs), parallel_attn (Falcon), num_ln_in_parallel_attn; parallel_block_comm spelt as
    the code is named."""
    for key in ("use_parallel_residual", "gpt_j_residual", "parallel_attn"):
        data = _scenario(None, False)
        del data["model"]["parallel_block"], data["model"]["parallel_norms"]
        data["model"].update({key: True, "num_ln_in_parallel_attn": 2})
        model = build_context(scenario_from_dict(data)).model
        assert (model.parallel_block, model.parallel_norms) == (True, 2)
    data = _scenario("GPT_NeoX", False)
    assert build_context(scenario_from_dict(data)).layout.parallel_block_comm == "gpt-neox"


# minimal config.json contents with the real field names; expected (parallel_block, norms)
HF_CONFIGS = {
    # GPTNeoXConfig.use_parallel_residual defaults to true; GPTNeoXLayer: input_layernorm for
    # the attention, post_attention_layernorm for the MLP, both of x
    "gpt-neox-20b": ({"model_type": "gpt_neox", "use_parallel_residual": True}, (True, 2)),
    "gpt-neox default": ({"model_type": "gpt_neox"}, (True, 2)),
    "gpt-neox sequential": ({"model_type": "gpt_neox", "use_parallel_residual": False}, (False, 1)),
    # GPTJBlock: ln_1 feeds attention and MLP
    "gpt-j-6b": ({"model_type": "gptj"}, (True, 1)),
    # FalconConfig: parallel_attn true (7B), new_decoder_architecture with
    # num_ln_in_parallel_attn None read as 2 (40B/180B: ln_attn, ln_mlp), 1 (Falcon2-11B)
    "falcon-7b": ({"model_type": "falcon", "parallel_attn": True, "new_decoder_architecture": False}, (True, 1)),
    "falcon-40b": ({"model_type": "falcon", "new_decoder_architecture": True, "parallel_attn": True}, (True, 2)),
    "falcon2-11b": ({"model_type": "falcon", "new_decoder_architecture": True, "num_ln_in_parallel_attn": 1},
                    (True, 1)),
    "falcon-rw-1b": ({"model_type": "falcon", "parallel_attn": False, "alibi": True}, (False, 1)),
    # before transformers 4.33: RefinedWeb (40B) ran ln_attn and ln_mlp, RefinedWebModel (7B) one
    "falcon-40b RefinedWeb": ({"model_type": "RefinedWeb", "parallel_attn": True}, (True, 2)),
    "falcon-7b RefinedWebModel": ({"model_type": "RefinedWebModel", "parallel_attn": True}, (True, 1)),
    # CohereDecoderLayer / PhiDecoderLayer: one input_layernorm, residual + attention + mlp
    "command-r": ({"model_type": "cohere", "hidden_act": "silu"}, (True, 1)),
    "phi-2": ({"model_type": "phi", "hidden_act": "gelu_new"}, (True, 1)),
    # StableLmDecoderLayer: post_attention_layernorm is None with use_parallel_residual
    "stablelm": ({"model_type": "stablelm", "use_parallel_residual": True, "hidden_act": "silu"}, (True, 1)),
    "stablelm-2": ({"model_type": "stablelm", "hidden_act": "silu"}, (False, 1)),
    "llama": ({"model_type": "llama", "hidden_act": "silu"}, (False, 1)),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_hf_import_reads_the_parallel_block(tmp_path, name):
    fields, expected = HF_CONFIGS[name]
    shape = {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1000,
             "intermediate_size": 1024}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**shape, **fields}))
    model = from_hf_config(path)
    assert (model.parallel_block, model.parallel_norms) == expected


def test_gpt_neox_20b_preset_is_a_parallel_block_with_two_norms():
    """EleutherAI/gpt-neox-20b config.json use_parallel_residual; configs/20B.yml gpt_j_residual
    with gpt_j_tied unset (two LayerNorms); Black et al. 2022: 20,554,567,680 parameters."""
    model = load_preset("gpt-neox-20b")
    assert (model.parallel_block, model.parallel_norms) == (True, 2)
    assert model.params_total() == 20_554_567_680


def test_measure_step_refuses_to_build_a_parallel_block():
    """calibrate measure-step builds the Llama reference code's sequential layer; timing it
    against a parallel block's simulation would compare two different models."""
    pytest.importorskip("torch")
    from calibrate.step_model import check_buildable

    with pytest.raises(UserError) as err:
        check_buildable(load_preset("gpt-neox-20b"), 2048, "none")
    assert err.value.field == "model.parallel_block"


def test_nanotrons_async_mlp_block_has_no_norm_of_its_own_with_a_shared_norm():
    """nanotron's async TP linears keep each branch's collectives (``separate``); with one
    norm for both branches its MLP block runs none (the attention's still does)."""
    def norms(parallel: bool) -> dict[str, float]:
        data = _scenario(None, True, parallel=parallel, tp=4)
        data["overlap"].update({"tp_async": True, "tp_grad_async": False})
        segs = layer_builder(data).layer(0, "F")
        return {s.name: s.seconds for s in segs if s.name in ("attn_norm", "mlp_norm")}

    seq, par = norms(False), norms(True)
    assert seq["mlp_norm"] > 0 and par.get("mlp_norm", 0.0) == 0
    assert par["attn_norm"] == seq["attn_norm"]


@pytest.mark.parametrize("schedule", ["zb-h1", "dualpipev"])
def test_split_and_paired_schedules_run_a_merged_block(schedule):
    """The merged block's W (zero bubble) and its F&B pairs (DualPipeV) run through the engine;
    the fused block, one collective per direction, beats the separate one with SP."""
    steps = {}
    for comm in ("separate", "fused"):
        data = pipeline_scenario(2, 8, schedule, layers=8)
        data["model"].update({"parallel_block": True, "parallel_norms": 1})
        data["cluster"].update({"gpus": 4, "gpus_per_node": 8, "network": "simulated"})
        data["parallel"].update({"tp": 2, "sequence_parallel": True, "parallel_block_comm": comm})
        steps[comm] = run(data).summary["step_time_s"]
    assert steps["fused"] < steps["separate"]


def test_gpt_neox_adds_the_attention_bias_on_its_own():
    """gpt-neox's gpt_j_residual path: bias_dropout_fn(attention_output, bias, residual=None),
    a read and a write of h per token the sequential block fuses into its residual add; its
    forward body is otherwise the fused block's."""
    def forward(comm: str, bias: bool) -> float:
        data = _scenario(comm, False)
        data["model"]["bias"] = bias
        return compute_seconds(layer_builder(data).layer(0, "F"))

    ops = layer_builder(_scenario("gpt-neox", False)).ops
    assert ops.branch_bias_add().bytes_per_token == 0  # no biases, nothing to add
    data = _scenario("gpt-neox", False)
    data["model"]["bias"] = True
    neox = layer_builder(data)
    assert neox.ops.branch_bias_add().bytes_per_token == 2 * 2 * HIDDEN
    extra = neox._elementwise(neox.ops.branch_bias_add(), "F").total
    assert forward("gpt-neox", True) - forward("fused", True) == pytest.approx(extra)
    assert forward("gpt-neox", False) == pytest.approx(forward("fused", False))


@pytest.mark.parametrize("cp_comm", ["p2p", "a2a", "a2a+p2p"])
def test_a_fused_block_holds_context_parallel_attention_inside_its_tp_collectives(cp_comm):
    """With cp the attention branch's CP exchanges run between the fused block's one gather
    and one scatter (the ring's sends, Ulysses' all-to-alls, or both under a2a+p2p on their
    own groups), and every rank simulated meets them as the representative does."""
    data = _scenario("fused", True, tp=2)
    data["cluster"].update({"gpus": 8, "network": "simulated"})
    data["parallel"].update({"cp": 4, "cp_comm": cp_comm, **({"cp_a2a": 2} if cp_comm == "a2a+p2p" else {})})
    data["training"]["global_batch"] = 2
    comms = [(s.group, s.op) for s in layer_builder(data).layer(0, "F") if isinstance(s, Comm)]
    cp = {"p2p": [("cp", "send_recv")] * 3, "a2a": [("cp", "all_to_all")] * 2,
          "a2a+p2p": [("cpa", "all_to_all"), ("cpr", "send_recv"), ("cpa", "all_to_all")]}[cp_comm]  # fmt: skip
    assert comms == [("tp", AG), *cp, ("tp", RS)]
    step = run(data).summary["step_time_s"]
    assert run(data, all_ranks=True).summary["step_time_s"] == pytest.approx(step, rel=1e-9)
