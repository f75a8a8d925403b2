"""Other spellings of choice fields (simcluster/spellings.py)."""

import pytest

from simcluster.errors import UserError
from simcluster.scenario import scenario_from_dict

BASE = {"model": "llama3-8b", "cluster": {"gpus": 8},
        "training": {"seq_len": 4096, "global_batch": 16}}


def _with(section, **values):
    data = {**BASE, section: {**BASE.get(section, {}), **values}}
    return scenario_from_dict(data)


@pytest.mark.parametrize(
    ("section", "key", "written", "name"),
    [
        ("training", "precision", "BF16", "bf16"),
        ("training", "precision", "bfloat16", "bf16"),
        ("training", "precision", "float16", "fp16"),
        ("training", "recompute", "Full", "full"),
        ("parallel", "schedule", "1F1B", "1f1b"),
        ("parallel", "schedule", "GPipe", "afab"),  # GPipe: all forwards, then all backwards
        ("training", "attention_kernel", "flash-attn", "fa2"),
        # PyTorch SDPA's default backend on A100/H100 is its FlashAttention-2 kernel
        ("training", "attention_kernel", "sdpa", "fa2"),
        ("training", "attention_kernel", "flash_attention_3", "fa3"),
        ("training", "optimizer", "AdamW", "adam"),  # the same two moments and traffic
        ("training", "precision", "bf16-mixed", "bf16"),  # Lightning's name
        ("training", "precision", "fp8-hybrid", "fp8"),  # TransformerEngine's HYBRID format
        ("parallel", "schedule", "1F1B-I", "interleaved"),  # the Zero Bubble paper's name
        ("parallel", "schedule", "ZBH1", "zb-h1"),
        # spaces and underscores read as dashes: a paper's table cell as written
        ("training", "precision", "fp16 mixed", "fp16"),  # Narayanan et al. 2021's "fp16 mixed"
        ("parallel", "schedule", "interleaved 1F1B", "interleaved"),
        ("parallel", "cp_comm", "all gather", "all_gather"),
        # a remark in parentheses after the value, as published.yaml-style tables carry it
        ("training", "recompute", "full (--activations-checkpoint-method uniform)", "full"),
        ("training", "precision", "BF16 (mixed)", "bf16"),
        # activation checkpointing as a switch (Hugging Face, llm-foundry) recomputes whole layers
        ("training", "recompute", True, "full"),
        ("training", "recompute", False, "none"),
        # Megatron's distributed optimizer shards the optimizer state: ZeRO-1; FSDP FULL_SHARD: ZeRO-3
        ("parallel", "zero", "distributed optimizer", 1),
        ("parallel", "zero", "ZeRO-1", 1),
        ("parallel", "zero", "FSDP", 3),
        ("parallel", "zero", "ZeRO stage 1", 1),
        # Composer's (llm-foundry's) precision names, as its benchmark tables print them
        ("training", "precision", "amp_bf16", "bf16"),
        ("training", "precision", "amp_fp8", "fp8"),
        # the switch as a word, as true and false read
        ("training", "recompute", "yes", "full"),
        ("training", "recompute", "false", "none"),
    ],
)
def test_spellings_read_as_the_schemas_names(section, key, written, name):
    assert getattr(getattr(_with(section, **{key: written}), section), key) == name


def test_an_unknown_spelling_is_still_the_schemas_error():
    with pytest.raises(UserError) as err:
        _with("training", precision="int4")
    assert err.value.field == "training.precision" and "bf16" in str(err.value)


def test_the_deepspeed_preset_sees_the_normalised_precision():
    # framework deepspeed keeps fp16 gradients in fp16 (training.fp32_grad_accum false)
    data = {**BASE, "framework": "deepspeed", "training": {**BASE["training"], "precision": "FP16"}}
    assert scenario_from_dict(data).training.fp32_grad_accum is False


@pytest.mark.parametrize(
    ("written", "recipe"),
    # NVIDIA's performance tables head their FP8 columns with the scaling recipe
    [("FP8-CS", "current"), ("FP8-MX", "block"), ("MXFP8", "block"), ("fp8_delayed", "delayed"),
     ("FP8 CS (per-tensor current scaling)", "current")],
)
def test_a_precision_written_with_its_fp8_recipe_sets_both(written, recipe):
    training = _with("training", precision=written).training
    assert (training.precision, training.fp8_recipe) == ("fp8", recipe)


def test_a_recipe_given_beside_it_wins_and_nvfp4_reads_as_itself():
    assert _with("training", precision="FP8-CS", fp8_recipe="delayed").training.fp8_recipe == "delayed"
    assert _with("training", precision="NVFP4").training.precision == "nvfp4"
    assert _with("training", precision="fp4").training.precision == "nvfp4"


def test_a_two_matrix_mlp_activation_reads_as_gelu():
    # OPT's ReLU and GPT-2's tanh GeLU: two matrices and one elementwise pass, as gelu
    for written in ("relu", "gelu_new", "ReLU"):
        data = {**BASE, "model": {"preset": "llama3-8b", "mlp": written}}
        assert scenario_from_dict(data).model.mlp == "gelu"


def test_dispatcher_spellings():
    for written, name in (("DeepEP", "deepep"), ("all-to-all", "alltoall"), ("A2A", "alltoall")):
        data = {**BASE, "model": {"preset": "mixtral-8x7b"}, "moe": {"dispatcher": written}}
        assert scenario_from_dict(data).moe.dispatcher == name


@pytest.mark.parametrize(
    ("fsdp", "zero", "shard"),
    # NeMo's performance tables: "FSDP = 1: use FSDP, FSDP = 0: use DDP"; NeMo AutoModel's
    # column is the sharding degree (FSDP 32 with CP 2 on 64 GPUs)
    [(1, 3, None), (True, 3, None), (4, 3, 4), (0, 0, None)],
)
def test_an_fsdp_column_reads_as_zero_3(fsdp, zero, shard):
    parallel = _with("parallel", fsdp=fsdp).parallel
    assert (parallel.zero, parallel.zero_shard) == (zero, shard)


def test_an_fsdp_column_against_another_zero_stage_is_one_error():
    with pytest.raises(UserError) as err:
        _with("parallel", fsdp=1, zero=1)
    assert err.value.field == "parallel.fsdp"


@pytest.mark.parametrize(
    ("key", "value", "zero"),
    # Megatron's --use-distributed-optimizer shards the optimizer state: ZeRO-1
    [("use_distributed_optimizer", True, 1), ("use_distributed_optimizer", False, 0),
     ("optimizer_sharding", "none", 0), ("distributed_optimizer", "yes", None)],
)  # fmt: skip
def test_the_distributed_optimizer_flag_is_zero_1(key, value, zero):
    if zero is None:  # not a stage or a switch: the schema's error, naming zero
        with pytest.raises(UserError) as err:
            _with("parallel", **{key: value})
        assert err.value.field == "parallel.zero"
        return
    assert _with("parallel", **{key: value}).parallel.zero == zero


def test_a_zero_stage_written_as_the_data_parallel_degree_is_the_stage():
    # DeepSeek-V3's report gives its data parallelism as "ZeRO-1"; the degree is the GPUs left
    s = _with("parallel", tp=2, dp="ZeRO-1")
    assert (s.parallel.zero, s.parallel.dp) == (1, None)
    with pytest.raises(UserError, match="parallel.dp"):
        _with("parallel", tp=2, dp="ZeRO-1", zero=3)
