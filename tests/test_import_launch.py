"""`simcluster import`: scenarios from the launch configs users already have.

The imported scenarios of the published launch scripts that validation cases transcribe must
simulate the cases' step times: Narayanan et al.'s SC'21 Table 1 scripts (Megatron-LM
examples/sc21, fixtures under tests/fixtures/launch/sc21 with their source and commit) against
validation/narayanan2021-a100.yaml, BigScience's BLOOM-176B Slurm script (Megatron-DeepSpeed)
against validation/bigscience-a100.yaml, and torchtitan's Llama 3 8B TOML (the config behind
docs/performance.md's 64 x A100 rows) against validation/torchtitan-a100.yaml.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simcluster.cli import main
from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.errors import UserError
from simcluster.importers import ImportOptions, import_config
from simcluster.importers.flags import Flags
from simcluster.importers.shell import read_script
from simcluster.scenario import load_scenario, scenario_from_dict
from simcluster.scenario.loading import apply_overrides
from simcluster.validate import load_cases_file

LAUNCH = Path(__file__).parent / "fixtures" / "launch"
SC21 = LAUNCH / "sc21" / "run_table_1.sh"
ROOT = Path(__file__).resolve().parent.parent


def _case(file: str, name: str) -> dict:
    return {c.name: c for c in load_cases_file(ROOT / "validation" / file)}[name].scenario


def _step(raw: dict) -> float:
    return float(simulate(build_context(scenario_from_dict(dict(raw)))).summary["step_time_s"])


def _dump(raw: dict) -> dict:
    """The scenario as the simulator reads it (virtual stages counted from the layers per
    virtual stage) without the fields that only name it, nor the framework's name, which the
    cases spell out field by field instead."""
    doc = build_context(scenario_from_dict(dict(raw))).scenario.model_dump()
    for key in ("name", "description", "framework"):
        doc.pop(key)
    doc["model"].pop("name")
    doc["parallel"].pop("layers_per_virtual_stage")
    return doc


def _sc21(size: str, nodes: int) -> dict:
    return import_config(
        "megatron",
        SC21,
        ImportOptions(cluster="dgx-a100", nodes=nodes, variables={"MODEL_SIZE": size}),
    ).scenario


# run_table_1.sh's NNODES for each row; its MODEL_SIZE names; the cases' names
@pytest.mark.parametrize(
    ("size", "nodes", "case"),
    [
        ("18B", 32, "narayanan2021/18.4B-256gpu"),  # PyTorch DDP, tp 8
        ("39B", 64, "narayanan2021/39.1B-512gpu"),  # Megatron's local DDP, pp 2
        ("76B", 128, "narayanan2021/76.1B-1024gpu"),  # interleaved, 5 layers per virtual stage
    ],
)
def test_sc21_script_simulates_the_transcribed_case_bit_for_bit(size, nodes, case):
    imported, transcribed = _sc21(size, nodes), _case("narayanan2021-a100.yaml", case)
    assert _dump(imported) == _dump(transcribed)
    assert _step(imported) == _step(transcribed)


def test_sc21_small_rows_differ_from_the_case_only_in_the_padded_vocabulary():
    # at tp 1 Megatron pads GPT-2's 50,257 tokens to a multiple of 128 (tokenizer.py
    # _vocab_size_with_padding): 50,304; the case takes the paper's V = 51,200 (eq. 3), which is
    # the padding at tp 8 only
    imported, transcribed = (
        _sc21("1.7B", 4),
        _case("narayanan2021-a100.yaml", "narayanan2021/1.7B-32gpu"),
    )
    assert imported["model"]["vocab"] == 50304
    mine, theirs = _dump(imported), _dump(transcribed)
    assert mine["model"].pop("vocab") == 50304 and theirs["model"].pop("vocab") == 51200
    assert mine == theirs
    imported["model"]["vocab"] = 51200
    assert _step(imported) == _step(transcribed)


def test_sc21_script_choices_and_refusals():
    # MODEL_SIZE defaults to the script's own 1.7B; an unknown size takes its `exit 1` branch
    assert _sc21("145B", 192)["parallel"] == {
        "tp": 8, "pp": 8, "layers_per_virtual_stage": 5, "zero": 0, "sequence_parallel": False,
        "schedule": "interleaved",
    }  # fmt: skip
    default = import_config("megatron", SC21, ImportOptions(cluster="dgx-a100", nodes=4))
    assert default.scenario["model"]["layers"] == 24
    with pytest.raises(UserError, match="exits with status 1"):
        _sc21("2T", 4)
    skipped = " ".join(default.skipped)
    for flag in ("--lr ", "--data-path", "--loss-scale", "--split", "--eval-iters"):
        assert flag in skipped


def test_torchtitan_llama3_8b_toml_simulates_the_transcribed_case_bit_for_bit():
    imported = import_config(
        "torchtitan",
        LAUNCH / "torchtitan" / "llama3_8b.toml",
        ImportOptions(cluster="dgx-a100", nodes=8),
    )
    transcribed = _case("torchtitan-a100.yaml", "torchtitan/llama3-8b-selective-op-64xa100")
    assert imported.scenario["parallel"] == {"tp": 1, "pp": 1, "cp": 1, "dp": 64, "zero": 3}
    assert _step(imported.scenario) == _step(transcribed)
    assert (
        "[optimizer] (optimizer hyperparameters: AdamW's step is costed whatever they are)"
        in imported.skipped
    )


def test_torchtitan_llama3_70b_toml_is_tp8_not_the_published_fsdp_row():
    # the shipped 70B TOML runs 8-way TP with local batch 8 (its tensor_parallel_degree and
    # batch_size); docs/performance.md's 70B row ran FSDP alone at local batch 1, so the case
    # differs in layout (listed here, not simulated against it)
    scenario = import_config(
        "torchtitan",
        LAUNCH / "torchtitan" / "llama3_70b.toml",
        ImportOptions(cluster="dgx-a100", nodes=8),
    ).scenario
    assert scenario["parallel"] == {
        "tp": 8,
        "pp": 1,
        "cp": 1,
        "dp": 8,
        "zero": 3,
        "sequence_parallel": True,
    }
    assert scenario["training"] == {
        "seq_len": 8192,
        "micro_batch": 8,
        "global_batch": 64,
        "precision": "bf16",
        "recompute": "full",
    }
    case = _case("torchtitan-a100.yaml", "torchtitan/llama3-70b-full-64xa100")
    assert (case["parallel"], case["training"]["micro_batch"]) == ({"dp": 64, "zero": 3}, 1)


def test_torchtitan_keys_map_as_torchtitan_reads_them(tmp_path):
    toml = tmp_path / "job.toml"
    toml.write_text(
        '[model]\nname = "llama3"\nflavor = "8B"\nconverters = ["float8"]\n'
        "[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = -1\n"
        'tensor_parallel_degree = 2\npipeline_parallel_degree = 2\npipeline_parallel_schedule = "Interleaved1F1B"\n'
        "enable_async_tensor_parallel = true\n"
        "[training]\nlocal_batch_size = 4\nglobal_batch_size = 64\nseq_len = 4096\n"
        '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "2"\n'
        "[compile]\nenable = true\n[float8]\nenable_fsdp_float8_all_gather = true\n"
    )
    s = import_config("torchtitan", toml, ImportOptions(cluster="dgx-h100", nodes=4)).scenario
    # 32 GPUs / (tp 2 x pp 2) = dp 8 = 2 replicas x 4 shards (HSDP); two stages per rank for a
    # multi-stage schedule (pipeline_module_split); micro-batch 1 (pipeline_parallel_microbatch_size);
    # every 2nd block checkpointed: 4 of each chunk's 32 / (2 x 2) = 8 layers
    assert s["parallel"] == {
        "tp": 2, "pp": 2, "cp": 1, "dp": 8, "zero": 3, "zero_shard": 4, "sequence_parallel": True,
        "schedule": "interleaved", "vpp": 2,
    }  # fmt: skip
    assert s["training"] == {
        "micro_batch": 1, "seq_len": 4096, "global_batch": 64, "precision": "fp8", "fp8_recipe": "current",
        "fp8_param_gather": True, "recompute": "full", "recompute_num_layers": 4, "elementwise": "fused",
    }  # fmt: skip
    assert s["overlap"] == {"tp_comm": True}
    build_context(scenario_from_dict(s))


@pytest.mark.parametrize(("policy", "written"), [("always", True), ("never", False), ("default", None)])
def test_torchtitan_fsdp_reshard_after_forward(tmp_path, policy, written):
    """[parallelism] fsdp_reshard_after_forward: "always" / "never" reshard each layer's FSDP2
    parameters after its forward or keep them for the backward (zero3.reshard_after_forward);
    "default" is torchtitan's own policy (not with a pipeline), the field's default."""
    toml = tmp_path / "job.toml"
    toml.write_text(
        '[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\ndata_parallel_shard_degree = -1\n'
        f'fsdp_reshard_after_forward = "{policy}"\n[training]\nlocal_batch_size = 1\nseq_len = 4096\n'
    )
    out = import_config("torchtitan", toml, ImportOptions(cluster="dgx-h100", nodes=1))
    assert out.scenario.get("zero3", {}).get("reshard_after_forward") is written
    assert not [k for k in out.skipped if "reshard" in k]
    build_context(scenario_from_dict(out.scenario))


@pytest.mark.parametrize(
    ("shard", "reduce", "accumulated_fp32"),
    [(-1, "float32", None), (-1, "bfloat16", False), (1, "bfloat16", None)],
)
def test_torchtitan_mixed_precision_reduce(tmp_path, shard, reduce, accumulated_fp32):
    """[training] mixed_precision_reduce is FSDP2's reduce dtype (torchtitan's help: it "only
    takes effect when data_parallel_shard_degree > 1"): float32, its default, is
    training.fp32_grad_accum's default; bfloat16 reduces in 16 bits (fp32_grad_accum false; the
    sharded gradient stays fp32 in FSDP2's memory either way); without FSDP2 nothing changes."""
    toml = tmp_path / "job.toml"
    toml.write_text(
        '[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\n'
        f"data_parallel_shard_degree = {shard}\ndata_parallel_replicate_degree = {8 if shard == 1 else 1}\n"
        f'[training]\nlocal_batch_size = 1\nseq_len = 4096\nmixed_precision_reduce = "{reduce}"\n'
    )
    out = import_config("torchtitan", toml, ImportOptions(cluster="dgx-h100", nodes=1))
    assert out.scenario["training"].get("fp32_grad_accum") is accumulated_fp32
    assert not [k for k in out.skipped if "reduce" in k]
    build_context(scenario_from_dict(out.scenario))


def test_torchtitan_unknown_reduce_dtype_is_refused(tmp_path):
    toml = tmp_path / "job.toml"
    toml.write_text(
        '[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\ndata_parallel_shard_degree = -1\n'
        '[training]\nlocal_batch_size = 1\nseq_len = 4096\nmixed_precision_reduce = "float16"\n'
    )
    with pytest.raises(UserError, match="mixed_precision_reduce.*float16"):
        import_config("torchtitan", toml, ImportOptions(cluster="dgx-h100", nodes=1))


def _args_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "args.txt"
    path.write_text(text)
    return path


MODERN = """
--num-layers 32 --hidden-size 4096 --num-attention-heads 32
--group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm
--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear
--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 256
--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 4
--sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --bf16
--recompute-granularity=selective --recompute-modules core_attn mlp
--tokenizer-type GPT2BPETokenizer --hidden-dropout 0 --attention-dropout 0 --lr 3e-4 --foo-bar 3
"""


def test_megatron_flags_map_with_megatrons_own_defaults(tmp_path):
    out = import_config(
        "megatron", _args_file(tmp_path, MODERN), ImportOptions(cluster="dgx-h100", nodes=4)
    )
    s = out.scenario
    assert s["framework"] == "megatron-core"
    # arguments.py: SwiGLU's ffn int(4h * 2/3 / 64) * 64 = 10880; GPT-2 BPE 50,257 padded to a
    # multiple of 128 x tp 2 = 256: 50,432
    assert s["model"] == {
        "layers": 32, "hidden": 4096, "heads": 32, "mlp": "swiglu", "ffn": 10880, "kv_heads": 8, "norm": "rmsnorm",
        "bias": False, "position": "rope", "tied_embeddings": False, "dropout": False, "vocab": 50432,
    }  # fmt: skip
    assert s["parallel"] == {
        "tp": 2, "pp": 2, "vpp": 4, "sequence_parallel": True, "zero": 1, "schedule": "interleaved",
    }  # fmt: skip
    # absent overlap flags are off in Megatron-LM, written so megatron-core's preset does not fill them
    assert s["overlap"] == {"dp_grad_reduce": True, "param_gather": False, "tp_comm": False}
    assert s["training"] == {
        "micro_batch": 1, "global_batch": 256, "seq_len": 4096, "precision": "bf16", "fp32_grad_accum": True,
        "recompute": "selective", "recompute_modules": ["core_attn", "mlp"],
    }  # fmt: skip
    assert "--foo-bar (no scenario field for it)" in out.skipped
    assert (
        "--max-position-embeddings (sizes the rotary table only, which is not costed)"
        in out.skipped
    )
    assert any(s.startswith("--lr (a training hyperparameter") for s in out.skipped)
    build_context(scenario_from_dict(s))


@pytest.mark.parametrize("extra", ["--qk-l2-norm", "--qk-l2-norm --qk-layernorm"])
def test_megatron_qk_l2_norm_is_llama4s_weightless_norm(tmp_path, extra):
    """--qk-l2-norm: Megatron-Core's layer specs put L2Norm in place of the q/k layernorms
    (``L2Norm if qk_l2_norm else (qk_norm if qk_layernorm else IdentityOp)``), Llama 4's
    weightless norm: model.qk_norm weightless, with --qk-layernorm too."""
    out = import_config(
        "megatron", _args_file(tmp_path, MODERN + extra), ImportOptions(cluster="dgx-h100", nodes=4)
    )
    assert out.scenario["model"]["qk_norm"] == "weightless"
    assert not [k for k in out.skipped if "qk-" in k]
    build_context(scenario_from_dict(out.scenario))


def test_megatron_qk_l2_norm_with_mla_is_refused(tmp_path):
    with pytest.raises(UserError, match="--qk-l2-norm: Megatron-Core refuses it with --multi-latent-attention"):
        import_config(
            "megatron", _args_file(tmp_path, MODERN + "--qk-l2-norm --multi-latent-attention"),
            ImportOptions(cluster="dgx-h100", nodes=4),
        )


def test_megatron_tp_only_amax_red_imports(tmp_path):
    """--tp-only-amax-red (Megatron-LM arguments.py, TransformerConfig.tp_only_amax_red): FP8's
    amax all-reduce over the tp-cp group only (parallelism/fp8_amax.py)."""
    text = MODERN + "--fp8-format hybrid --tp-only-amax-red\n"
    out = import_config("megatron", _args_file(tmp_path, text), ImportOptions(cluster="dgx-h100", nodes=4))
    assert out.scenario["training"]["tp_only_amax_red"] is True
    assert not any(s.startswith("--tp-only-amax-red") for s in out.skipped)


def test_megatron_refuses_values_it_cannot_map(tmp_path):
    with pytest.raises(UserError, match="--fp8-recipe: 'weird' cannot be imported"):
        import_config(
            "megatron",
            _args_file(tmp_path, MODERN + "--fp8-format hybrid --fp8-recipe weird\n"),
            ImportOptions(cluster="dgx-h100", nodes=4),
        )
    with pytest.raises(UserError, match="--recompute-modules: 'shared_experts'"):
        import_config(
            "megatron",
            _args_file(tmp_path, MODERN + "--recompute-modules shared_experts\n"),
            ImportOptions(cluster="dgx-h100", nodes=4),
        )
    with pytest.raises(UserError, match="--tensor-model-parallel-size: 'x' is not a whole number"):
        import_config(
            "megatron",
            _args_file(tmp_path, MODERN + "--tensor-model-parallel-size=x\n"),
            ImportOptions(cluster="dgx-h100", nodes=4),
        )


def test_shell_reader_follows_a_launch_script(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text(
        "#!/bin/bash\nGPUS_PER_NODE=8\nNNODES=${NNODES:-2}\nTP=2\n"
        'if [[ $NNODES -ge 4 ]]; then PP=4; elif [ "$NNODES" == 2 ]; then PP=2; else PP=1; fi\n'
        "DP=$(( GPUS_PER_NODE * NNODES / TP / PP ))\n"
        'GPT_ARGS="--tensor-model-parallel-size $TP --pipeline-model-parallel-size ${PP}"  # comment\n'
        "python preprocess.py --input x\n"
        "CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc_per_node $GPUS_PER_NODE pretrain_gpt.py \\\n"
        "    $GPT_ARGS \\\n    --micro-batch-size=$DP --bf16 # trailing\n"
    )
    assert read_script(script, {}).words == [
        "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--micro-batch-size=4", "--bf16",
    ]  # fmt: skip
    # a --var keeps its value over the script's own default and picks the other branch
    words = read_script(script, {"NNODES": "4"}).words
    assert words[3] == "4" and words[4] == "--micro-batch-size=4"
    flags = Flags.parse(words)
    assert (
        flags.integer("micro-batch-size") == 4
        and flags.has("bf16")
        and flags.left() == ["tensor-model-parallel-size", "pipeline-model-parallel-size"]
    )


def test_cli_writes_a_scenario_that_loads_and_says_what_it_left_out(tmp_path, capsys):
    out = tmp_path / "s.yaml"
    argv = [
        "import",
        "megatron",
        str(SC21),
        "--var",
        "MODEL_SIZE=39B",
        "--cluster",
        "dgx-a100",
        "--nodes",
        "64",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "wrote" in err
    # one line per reason, the flags of that reason listed on it
    hyper = [line for line in err.splitlines() if "a training hyperparameter" in line]
    assert len(hyper) == 1 and "--lr" in hyper[0] and "--clip-grad" in hyper[0]
    text = out.read_text()
    hyper = [line for line in text.splitlines() if "a training hyperparameter" in line]
    assert len(hyper) == 1 and hyper[0].startswith("# not imported: ") and "--clip-grad" in hyper[0]
    scenario = load_scenario(str(out))
    assert (scenario.parallel.tp, scenario.parallel.pp, scenario.cluster.gpus) == (8, 2, 512)
    assert main([*argv[:-2], "--out", "-", "--set", "training.global_batch=768"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["training"]["global_batch"] == 768


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["import", "megatron", str(SC21), "--nodes", "4"],
            "error: --cluster: a launch config does not name the hardware",
        ),
        (
            ["import", "megatron", str(SC21), "--cluster", "dgx-a100"],
            "error: --nodes: give the job's size",
        ),
        (
            [
                "import",
                "deepspeed",
                str(LAUNCH / "ds_zero3.json"),
                "--cluster",
                "dgx-h100",
                "--nodes",
                "4",
                "--seq-len",
                "4096",
            ],
            "error: --model: the config does not describe the model",
        ),
        (
            [
                "import",
                "deepspeed",
                str(LAUNCH / "ds_zero3.json"),
                "--cluster",
                "dgx-h100",
                "--nodes",
                "4",
                "--model",
                "llama3-8b",
            ],
            "error: --seq-len:",
        ),
        (
            [
                "import",
                "megatron",
                str(SC21),
                "--cluster",
                "dgx-a100",
                "--nodes",
                "4",
                "--var",
                "MODEL_SIZE",
            ],
            "error: --var: 'MODEL_SIZE' must look like NAME=VALUE",
        ),
    ],
)
def test_cli_bad_inputs_are_one_line_errors(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err


def test_deepspeed_config_maps_its_zero_keys(tmp_path):
    out = import_config(
        "deepspeed",
        LAUNCH / "ds_zero3.json",
        ImportOptions(cluster="dgx-h100", nodes=4, model="llama3-8b", seq_len=4096),
    )
    s = out.scenario
    assert s["parallel"] == {"zero": 3}
    assert s["training"] == {
        "seq_len": 4096,
        "micro_batch": 2,
        "grad_accum": 4,
        "precision": "bf16",
        "recompute_partitioned": True,  # its activation_checkpointing.partition_activations
    }
    assert s["zero3"] == {
        "reduce_bucket_size": 500000000, "prefetch_bucket_size": 50000000, "param_persistence_threshold": 100000,
        "max_live_parameters": 1000000000, "max_reuse_distance": 1000000000, "hpz_partition_size": 8,
        "quantized_weights": True, "quantized_gradients": True,
    }  # fmt: skip
    assert any(x.startswith("activation_checkpointing (") for x in out.skipped)
    build_context(scenario_from_dict(s))
    # ZeRO-2: reduce_bucket_size is dp.bucket_mb, 16-bit elements in MB (zero3.reduce_bucket_size's doc)
    two = tmp_path / "z2.json"
    two.write_text(
        '{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": true}, "zero_optimization": {"stage": 2, "reduce_bucket_size": 2e8, "overlap_comm": true}}'
    )
    s2 = import_config(
        "deepspeed",
        two,
        ImportOptions(cluster="dgx-h100", nodes=4, model="llama3-8b", seq_len=2048),
    ).scenario
    assert (s2["dp"], s2["overlap"], s2["training"]["global_batch"]) == (
        {"bucket_mb": 400.0},
        {"dp_grad_reduce": True},
        64,
    )
    auto = tmp_path / "auto.json"
    auto.write_text('{"train_micro_batch_size_per_gpu": "auto"}')
    with pytest.raises(UserError, match="train_micro_batch_size_per_gpu: 'auto' is filled in"):
        import_config(
            "deepspeed",
            auto,
            ImportOptions(cluster="dgx-h100", nodes=4, model="llama3-8b", seq_len=2048),
        )


def test_megatron_example_script_with_bash_arrays():
    # Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh: flags in bash arrays expanded as
    # ${ARGS[@]} on the torchrun line (one array holds a comment with brackets in it)
    out = import_config(
        "megatron",
        LAUNCH / "train_gpt3_175b_distributed.sh",
        ImportOptions(cluster="dgx-a100", nodes=128),
    )
    s = out.scenario
    assert (s["model"]["layers"], s["model"]["hidden"], s["model"]["heads"], s["model"]["ffn"]) == (
        96,
        12288,
        96,
        49152,
    )
    # GPT-2 BPE (--vocab-file/--merge-file) padded to a multiple of 128 x tp 8: 51,200
    assert s["model"]["vocab"] == 51200
    assert s["parallel"] == {"tp": 8, "pp": 16, "zero": 0, "sequence_parallel": False}
    # no distributed optimizer: no parameter all-gather to overlap (overlap.param_gather unwritten)
    assert s["overlap"] == {"dp_grad_reduce": False, "tp_comm": False}
    assert s["training"] == {
        "micro_batch": 1, "global_batch": 1536, "seq_len": 2048, "precision": "fp16", "fp32_grad_accum": False,
        "recompute": "none",
    }  # fmt: skip
    # torchrun's own flags come before the .py file and are not the program's
    assert not any(x.startswith("--nproc_per_node") for x in out.skipped)
    build_context(scenario_from_dict(s))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("A=$((1/0))\n", r"\$\(\(1/0\)\) cannot be evaluated"),
        ("A=$(pwd\n", "opens an expansion it does not close"),
        ("A=${B\n", "opens an expansion it does not close"),
        ("A=$((X + 1))\n", None),  # X unset: 0, as bash counts it
        ("B=${10}\n", None),  # a script argument: empty here
        ("source self.sh\n", "sources files 8 deep"),
    ],
)
def test_shell_reader_refuses_in_one_line(tmp_path, text, message):
    script = tmp_path / "self.sh"
    script.write_text(text + "python train.py --bf16\n")
    if message is None:
        assert read_script(script, {}).words == ["--bf16"]
    else:
        with pytest.raises(UserError, match=message):
            read_script(script, {})


def test_megatron_mirrors_its_argument_checks(tmp_path, capsys):
    base = "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 --micro-batch-size 1 --bf16 "
    # arguments.py: --overlap-param-gather needs the distributed optimizer, --tp-comm-overlap
    # sequence parallelism; sequence parallelism is turned off at tp 1
    with pytest.raises(
        UserError, match="--overlap-param-gather: Megatron requires --use-distributed-optimizer"
    ):
        import_config(
            "megatron",
            _args_file(tmp_path, base + "--vocab-size 32000 --overlap-param-gather"),
            ImportOptions(cluster="dgx-h100", nodes=1),
        )
    with pytest.raises(UserError, match="--tp-comm-overlap: Megatron requires --sequence-parallel"):
        import_config(
            "megatron",
            _args_file(
                tmp_path,
                base + "--vocab-size 32000 --tensor-model-parallel-size 2 --tp-comm-overlap",
            ),
            ImportOptions(cluster="dgx-h100", nodes=1),
        )
    out = import_config(
        "megatron",
        _args_file(tmp_path, base + "--vocab-size 32000 --sequence-parallel"),
        ImportOptions(cluster="dgx-h100", nodes=1),
    )
    assert out.scenario["parallel"]["sequence_parallel"] is False
    # a tokenizer that keeps its size in its files: a one-line error naming --set, unless given
    path = _args_file(tmp_path, base + "--tokenizer-type HuggingFaceTokenizer --tokenizer-model x")
    argv = ["import", "megatron", str(path), "--cluster", "dgx-h100", "--nodes", "1"]
    assert main(argv) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .startswith("error: model.vocab: HuggingFaceTokenizer keeps its vocabulary size")
    )
    assert main([*argv, "--set", "model.vocab=128256"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["model"]["vocab"] == 128256


def test_torchtitan_older_releases_spellings(tmp_path):
    # degrees under [training] (data_parallel_degree: FSDP's), batch_size, [float8]
    # enable_float8_linear, [training] compile
    toml = tmp_path / "old.toml"
    toml.write_text(
        '[model]\nname = "llama2"\nflavor = "13B"\n'
        "[training]\nbatch_size = 2\nseq_len = 4096\ntensor_parallel_degree = 2\ndata_parallel_degree = -1\ncompile = true\n"
        "[float8]\nenable_float8_linear = true\n"
        '[activation_checkpoint]\nmode = "none"\n'
    )
    out = import_config("torchtitan", toml, ImportOptions(cluster="dgx-h100", nodes=2))
    assert out.scenario["model"] == {"preset": "llama2-13b"}
    assert out.scenario["parallel"] == {
        "tp": 2,
        "pp": 1,
        "cp": 1,
        "dp": 8,
        "zero": 3,
        "sequence_parallel": True,
    }
    assert out.scenario["training"] == {
        "seq_len": 4096, "micro_batch": 2, "global_batch": 16, "precision": "fp8", "fp8_recipe": "current",
        "recompute": "none", "elementwise": "fused",
    }  # fmt: skip
    assert out.skipped == []


@pytest.mark.slow
def test_bloom_slurm_script_simulates_the_transcribed_case_bit_for_bit():
    # BigScience's tr11-176B-ml.slurm (Megatron-DeepSpeed): --deepspeed selects framework
    # deepspeed; bf16 at --zero-stage 0 is DeepSpeed's BF16_Optimizer (zero 1, as the case);
    # --pad-vocab-size-to 250880; 'type:transformer|embedding' over 12 stages: 72 items (two tied
    # embeddings), 6 a stage, so the first and last stage hold 5 blocks. Jean Zay's 4 x 100 Gb/s
    # Omni-Path links per node are not in the script: given with --set, as the case states them
    out = import_config(
        "megatron", LAUNCH / "tr11-176B-ml.slurm", ImportOptions(cluster="dgx-a100", nodes=48)
    )
    raw = apply_overrides(out.scenario, [("cluster.nics_per_node", 4), ("cluster.nic_gbps", 100)])
    transcribed = _case("bigscience-a100.yaml", "bloom/176B-48node-tp4pp12dp8-mbs2")
    assert raw["parallel"]["layers_per_stage"] == [5, *[6] * 10, 5]
    mine, theirs = _dump(raw), _dump(transcribed)
    assert mine == theirs
    assert _step(raw) == _step(transcribed)


def test_flags_outside_a_step_are_told_apart_from_unknown_ones():
    from simcluster.importers.flags import not_step_reason

    assert not_step_reason("lr-warmup-iters").startswith("a training hyperparameter")
    assert not_step_reason("data-cache-path").startswith("data, tokenizer or checkpoint")
    assert not_step_reason("eval-interval").startswith("logging")
    # Megatron-FSDP's sharding strategy is not data input/output: it stays "no scenario field"
    assert not_step_reason("data-parallel-sharding-strategy") is None


def test_megatron_optimizer_and_bucket_flags(tmp_path):
    # the flags scenarios/apertus-70b-4096xgh200.yaml transcribes from Swiss AI's script:
    # --ddp-bucket-size 1e10 parameters of fp32 main gradients is bucket_mb 40000
    text = MODERN + (
        "--no-check-for-nan-in-loss-and-grad --ddp-bucket-size 1e10 --optimizer ademamix "
        "--cross-entropy-loss-fusion --optimizer-cpu-offload --optimizer-offload-fraction 0.5\n"
    )
    s = import_config(
        "megatron", _args_file(tmp_path, text), ImportOptions(cluster="dgx-h100", nodes=4)
    ).scenario
    assert s["dp"] == {"nan_check": False, "bucket_mb": 40000.0}
    assert (s["training"]["optimizer"], s["training"]["fused_cross_entropy"], s["training"]["optimizer_offload"]) == (
        "ademamix", "native", 0.5,
    )  # fmt: skip


def test_megatron_cross_entropy_fusion_impl(tmp_path):
    """--cross-entropy-loss-fusion runs Megatron-Core's native compiled loss unless
    --cross-entropy-fusion-impl te picks TransformerEngine's (Megatron-LM arguments.py, its
    default 'native'; language_module.py compute_language_model_loss)."""
    for extra, expected in (("", "native"), (" --cross-entropy-fusion-impl te", "te"),
                            (" --cross-entropy-fusion-impl native", "native")):
        text = MODERN + f"--cross-entropy-loss-fusion{extra}\n"
        s = import_config(
            "megatron", _args_file(tmp_path, text), ImportOptions(cluster="dgx-h100", nodes=4)
        ).scenario
        assert s["training"]["fused_cross_entropy"] == expected, extra


def test_megatron_average_in_collective_asks_nccl_for_avg(tmp_path):
    # Megatron-Core start_grad_sync: with ddp_config.average_in_collective (the flag
    # --ddp-average-in-collective) no 1/dp pass, and reduce_op = torch.distributed.ReduceOp.AVG
    text = MODERN + "--ddp-average-in-collective\n"
    s = import_config(
        "megatron", _args_file(tmp_path, text), ImportOptions(cluster="dgx-h100", nodes=4)
    ).scenario
    assert s["dp"]["prescale"] is False and s["dp"]["reduce_op"] == "avg"
    plain = import_config(
        "megatron", _args_file(tmp_path, MODERN), ImportOptions(cluster="dgx-h100", nodes=4)
    ).scenario
    assert "reduce_op" not in plain.get("dp", {})  # ReduceOp.SUM, the schema's default


def test_options_a_kind_has_no_use_for_are_refused():
    with pytest.raises(UserError, match="--model: not used with a megatron config"):
        import_config(
            "megatron", SC21, ImportOptions(cluster="dgx-a100", nodes=4, model="llama3-8b")
        )
    with pytest.raises(UserError, match="--var: not used with a torchtitan config"):
        import_config(
            "torchtitan",
            LAUNCH / "torchtitan" / "llama3_8b.toml",
            ImportOptions(cluster="dgx-a100", nodes=8, variables={"A": "1"}),
        )


@pytest.mark.parametrize(
    ("value", "sinks", "skipped"),
    [("learnable", True, False), ("vanilla", None, False), ("off-by-one", None, True)],
)
def test_megatron_softmax_type_reads_learned_sinks_only(tmp_path, value, sinks, skipped):
    # Megatron-LM arguments.py: --softmax-type {vanilla, learnable, off-by-one}; 'learnable' is
    # gpt-oss's per-head sink logit (model.attention_sinks), 'off-by-one' a fixed one without
    # a parameter, listed as not imported
    out = import_config(
        "megatron",
        _args_file(tmp_path, MODERN + f"--softmax-type {value}\n"),
        ImportOptions(cluster="dgx-h100", nodes=4),
    )
    assert out.scenario["model"].get("attention_sinks") is sinks
    assert any(s.startswith("--softmax-type off-by-one") for s in out.skipped) is skipped
    assert not any(s.startswith("--softmax-type (") for s in out.skipped)


@pytest.mark.parametrize(
    ("precision", "zero", "wire", "expected"),
    [
        ("bf16", 2, "fp32", "fp32"),
        ("bf16", 1, "bf16", "16bit"),
        ("fp16", 0, "fp16", "16bit"),
        ("bf16", 3, "fp32", None),  # listed as not imported: dp.reduce_dtype is ZeRO 0-2's
    ],
)
def test_deepspeed_communication_data_type_is_dp_reduce_dtype(
    tmp_path, precision, zero, wire, expected
):
    # DeepSpeed engine.py / stage_1_and_2.py: each bucket cast to communication_data_type
    # before its reduction (dp.reduce_dtype's definition)
    path = tmp_path / "ds.json"
    path.write_text(
        f'{{"train_micro_batch_size_per_gpu": 1, "{precision}": {{"enabled": true}}, '
        f'"zero_optimization": {{"stage": {zero}}}, "communication_data_type": "{wire}"}}'
    )
    opts = ImportOptions(cluster="dgx-h100", nodes=1, model="llama3-8b", seq_len=2048)
    out = import_config("deepspeed", path, opts)
    assert out.scenario.get("dp", {}).get("reduce_dtype") == expected
    assert any(s.startswith("communication_data_type (") for s in out.skipped) is (expected is None)
    build_context(scenario_from_dict(out.scenario))


def test_deepspeed_fp16_wire_under_bf16_is_refused(tmp_path):
    # releases up to 0.8.3 sent bf16 gradients as fp16: a same-width cast dp.reduce_dtype cannot say
    path = tmp_path / "ds.json"
    path.write_text(
        '{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, '
        '"zero_optimization": {"stage": 1}, "communication_data_type": "fp16"}'
    )
    opts = ImportOptions(cluster="dgx-h100", nodes=1, model="llama3-8b", seq_len=2048)
    with pytest.raises(UserError, match="communication_data_type: fp16 on the wire under bf16"):
        import_config("deepspeed", path, opts)


@pytest.mark.parametrize(
    ("kind", "file", "reader"),
    [
        ("torchtitan", LAUNCH / "ds_zero3.json", "deepspeed"),
        ("megatron", LAUNCH / "ds_zero3.json", "deepspeed"),
        ("deepspeed", LAUNCH / "torchtitan" / "llama3_8b.toml", "torchtitan"),
        ("torchtitan", SC21, "megatron"),
    ],
)
def test_a_file_given_to_another_kind_names_the_kind_that_reads_it(kind, file, reader, capsys):
    """A DeepSpeed JSON given to `import torchtitan` fails to parse as TOML; the one line says
    so and which kind reads a file of its suffix."""
    argv = ["import", kind, str(file), "--cluster", "dgx-h100", "--nodes", "1"]
    assert main(argv + (["--model", "llama3-8b", "--seq-len", "4096"] if kind == "deepspeed" else [])) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: FILE: ") and "\n" not in err
    assert err.endswith(f"; a {file.suffix} file is read by: simcluster import {reader}")


def test_a_bad_out_path_is_the_one_line_printed(tmp_path, capsys):
    """--out is checked before the import, whose 'not imported' notes would otherwise come
    first; a folder for --out is named as one, with a file name to give instead."""
    argv = ["import", "deepspeed", str(LAUNCH / "ds_zero3.json"), "--model", "llama3-8b", "--seq-len", "4096",
            "--cluster", "dgx-h100", "--nodes", "4", "--out"]  # fmt: skip
    assert main(argv + [str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: --out: '{tmp_path}' is a directory; name a file")
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(argv + [str(blocker / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --out: cannot make folder")


@pytest.mark.parametrize(
    "kind, name, reads",
    [
        ("megatron", "nosuch.sh", "a Megatron launch script (.sh) or arguments file"),
        ("torchtitan", "nosuch.toml", "a torchtitan TOML job config (.toml)"),
        ("deepspeed", "nosuch.json", "a DeepSpeed JSON config (.json)"),
    ],
)
def test_a_missing_file_says_so_and_what_to_give(tmp_path, capsys, kind, name, reads):
    """'FILE: 'nosuch.sh' is not a file' gave no fix; as a missing scenario or CASES file is
    told, the line says the file is not found and what the kind reads."""
    argv = ["import", kind, "FILE", "--cluster", "dgx-h100", "--nodes", "1"]
    for path, wrong in ((name, f"file '{name}' not found"), (str(tmp_path), f"'{tmp_path}' is a folder")):
        assert main([*argv[:2], path, *argv[3:]]) == 2
        assert capsys.readouterr().err == f"error: FILE: {wrong}; give the path of {reads}\n"


def test_a_missing_hf_config_is_the_options_error(capsys):
    """It was model.hf_config's, whose fix speaks of a scenario's folder the user never wrote."""
    argv = ["import", "deepspeed", str(LAUNCH / "ds_zero3.json"), "--seq-len", "4096", "--cluster", "dgx-h100",
            "--nodes", "4", "--hf-config", "nosuch.json"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --hf-config: file 'nosuch.json' not found; give the path")
    assert "scenario" not in err


def test_out_does_not_replace_a_file_the_importer_did_not_write(tmp_path, capsys):
    """--out overwrote any file, a hand-edited scenario too; it replaces only what the importer
    wrote (its first line IMPORTED_MARK: a re-import) or an empty file, and --force anything.
    The refused file is left as it was."""
    argv = ["import", "deepspeed", str(LAUNCH / "ds_zero3.json"), "--model", "llama3-8b", "--seq-len", "4096",
            "--cluster", "dgx-h100", "--nodes", "4", "--out"]  # fmt: skip
    mine = tmp_path / "mine.yaml"
    mine.write_text("name: mine  # tuned by hand\n")
    assert main(argv + [str(mine)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: --out: '{mine}' exists and was not written by simcluster import; "
        "give another path, or --force to overwrite it\n"
    )
    assert mine.read_text() == "name: mine  # tuned by hand\n"
    # a new path, then the same path again: the importer's own file is replaced
    out = tmp_path / "s.yaml"
    assert main(argv + [str(out)]) == 0
    assert out.read_text().startswith("# imported by `simcluster import` from ")
    assert main(argv[:-1] + ["--set", "training.global_batch=64", "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["training"]["global_batch"] == 64
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert main(argv + [str(empty)]) == 0
    assert main(argv + [str(mine), "--force"]) == 0
    assert load_scenario(str(mine)).name == "ds_zero3"
    capsys.readouterr()


@pytest.mark.parametrize(
    "extra, style",
    [
        # [training] compile: the loss compiled too since pytorch/torchtitan#1033 (not between
        # #755 and it, which a TOML does not say: the import notes it)
        ("compile = true\n", "fused"),
        ("[compile]\nenable = true\n", "fused"),  # components default ["model", "loss"]
        ('[compile]\nenable = true\ncomponents = ["model"]\n', "compiled-blocks"),
        ('[compile]\nenable = true\ncomponents = ["loss"]\n', None),  # the blocks stay eager
        ("[compile]\nenable = false\n", None),
    ],
)
def test_torchtitan_compile_switches_name_what_they_compile(tmp_path, extra, style):
    # torchtitan job_config.Compile (components "model" and "loss", both by default) and
    # BaseLoss._maybe_compile ("loss" in components); a blocks-only compile (apply_compile) is
    # compiled-blocks, its loss eager
    toml = tmp_path / "job.toml"
    toml.write_text(
        '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\nseq_len = 2048\n' + extra
    )
    s = import_config("torchtitan", toml, ImportOptions(cluster="dgx-h100", nodes=1)).scenario
    assert s["training"].get("elementwise") == style


@pytest.mark.parametrize("rotate, cp_comm", [(None, None), ("allgather", "all_gather"), ("alltoall", "p2p")])
def test_torchtitan_context_parallel_rotate_method(tmp_path, rotate, cp_comm):
    # torchtitan job_config: context_parallel_rotate_method "allgather" (the default: every K/V
    # shard gathered after the first sub-SDPA) or "alltoall" (passed on step by step, a ring);
    # unset, framework torchtitan's own default (all_gather) applies
    toml = tmp_path / "cp.toml"
    extra = "" if rotate is None else f'context_parallel_rotate_method = "{rotate}"\n'
    toml.write_text(
        '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\nseq_len = 65536\n'
        "[parallelism]\ncontext_parallel_degree = 2\n" + extra
    )
    s = import_config("torchtitan", toml, ImportOptions(cluster="dgx-h100", nodes=1)).scenario
    assert s["parallel"].get("cp_comm") == cp_comm
    bad = tmp_path / "bad.toml"
    bad.write_text(toml.read_text() + ('context_parallel_rotate_method = "ring"\n' if rotate is None else ""))
    if rotate is None:
        with pytest.raises(UserError, match="context_parallel_rotate_method: 'ring' cannot be imported"):
            import_config("torchtitan", bad, ImportOptions(cluster="dgx-h100", nodes=1))


@pytest.mark.parametrize("backend, dispatcher", [("standard", None), ("deepep", "deepep"), ("hybridep", "hybridep")])
def test_torchtitan_expert_parallel_comm_backend(tmp_path, backend, dispatcher):
    # torchtitan job_config: parallelism.expert_parallel_comm_backend "standard" (its default
    # ExpertParallel all-to-all), "deepep" or "hybridep" (torchtitan/distributed/deepep)
    toml = tmp_path / "moe.toml"
    toml.write_text(
        '[model]\nname = "deepseek_v3"\nflavor = "671B"\n[training]\nlocal_batch_size = 1\nseq_len = 4096\n'
        f'[parallelism]\nexpert_parallel_degree = 8\nexpert_parallel_comm_backend = "{backend}"\n'
    )
    out = import_config("torchtitan", toml, ImportOptions(cluster="dgx-h100", nodes=8))
    assert out.scenario.get("moe", {}).get("dispatcher") == dispatcher
    assert not any("expert_parallel_comm_backend" in x for x in out.skipped)
    bad = tmp_path / "bad.toml"
    bad.write_text(toml.read_text().replace(f'"{backend}"', '"nccl"'))
    with pytest.raises(UserError, match="expert_parallel_comm_backend: 'nccl' cannot be imported; known: standard"):
        import_config("torchtitan", bad, ImportOptions(cluster="dgx-h100", nodes=8))


def test_an_imported_scenario_that_does_not_check_says_it_was_imported(capsys):
    # SC'21's run_table_1.sh runs its 1.7B case (GBS 512, MBS 16) on 4 nodes; on --nodes 64 its
    # dp is 512 and the batch no longer divides. Before, the error named only
    # training.global_batch, a key the user never wrote, and asked for a 8192-sequence batch
    assert main(["import", "megatron", str(SC21), "--cluster", "dgx-a100", "--nodes", "64"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: training.global_batch: 512 is not divisible by dp*micro_batch = 512*16 = 8192")
    assert "or training.micro_batch=1" in err
    assert err.endswith("(in the scenario imported from run_table_1.sh on --nodes 64; --var, --nodes/--gpus or --set change it)")
    assert main(["import", "megatron", str(SC21), "--cluster", "dgx-a100", "--nodes", "4"]) == 0  # its own size


def test_an_imported_scenario_error_names_the_size_given_even_when_it_is_zero(capsys):
    # '--nodes 0' is refused by the scenario's cluster.nodes check; the import's note read
    # 'on --gpus None' (a truthiness test took nodes=0 for no --nodes at all)
    assert main(["import", "megatron", str(SC21), "--cluster", "dgx-a100", "--nodes", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cluster.nodes:") and "--gpus None" not in err
    assert "(in the scenario imported from run_table_1.sh on --nodes 0;" in err


def test_out_does_not_replace_an_imported_file_edited_by_hand(tmp_path):
    """The mark line records a SHA-256 of the lines below it: the importer's own file is
    replaced, the same file tuned by hand afterwards is refused as a hand-made one is (--force
    overwrites it), and a mark line recording no digest cannot vouch for the file."""
    import hashlib

    from simcluster.commands.importing import check_out_free
    from simcluster.importers import Imported

    text = Imported({"name": "s", "training": {"global_batch": 64}}, "job.json", notes=["n"]).yaml_text()
    first, body = text.split("\n", 1)
    assert first.endswith(f"(sha256 of the lines below: {hashlib.sha256(body.encode()).hexdigest()[:16]})")
    out = tmp_path / "s.yaml"
    out.write_text(text)
    check_out_free(str(out), force=False)  # a re-import
    out.write_text(text.replace("global_batch: 64", "global_batch: 128"))
    with pytest.raises(UserError, match=r"^--out: '.*s\.yaml' exists and was edited after simcluster import wrote "
                       r"it; give another path, or --force to overwrite it$"):  # fmt: skip
        check_out_free(str(out), force=False)
    check_out_free(str(out), force=True)
    out.write_text(first.split(" (sha256")[0] + "\n" + body)
    with pytest.raises(UserError, match="by an older simcluster import, whose first line records no digest"):
        check_out_free(str(out), force=False)


def test_the_hf_config_is_read_once(monkeypatch, tmp_path):
    """`import --hf-config` read the file for its own error, again for torchtitan's layer count
    (its pipeline split) and again to check the scenario: three reads of one file, which could
    change between them. It is read once and what was read is passed on."""
    import simcluster.hf_import as hf_import

    reads: list[str] = []
    real = hf_import.read_text

    def counted(path, *rest):
        reads.append(str(path))
        return real(path, *rest)

    monkeypatch.setattr(hf_import, "read_text", counted)
    hf = Path(__file__).parent / "fixtures" / "hf" / "olmo-2-7b.json"
    argv = ["import", "torchtitan", str(LAUNCH / "torchtitan" / "llama3_8b.toml"), "--cluster", "dgx-h100",
            "--nodes", "4", "--hf-config", str(hf), "--out", str(tmp_path / "s.yaml")]  # fmt: skip
    assert main(argv) == 0
    assert reads == [str(hf)]
    assert yaml.safe_load((tmp_path / "s.yaml").read_text(encoding="utf-8"))["model"] == {
        "hf_config": str(hf.resolve())
    }


@pytest.mark.parametrize(
    ("name", "schedule"),
    [
        ("1F1B", "1f1b"), ("GPipe", "afab"), ("Interleaved1F1B", "interleaved"), ("LoopedBFS", "looped-bfs"),
        ("InterleavedZeroBubble", "interleaved-zb"), ("ZBVZeroBubble", "zbv-fixed"), ("DualPipeV", "dualpipev"),
    ],
)  # fmt: skip
def test_each_torchtitan_schedule_imports_to_one_torchtitan_runs(tmp_path, name, schedule):
    """torchtitan's pipeline_parallel_schedule names torch.distributed.pipelining's classes;
    ZBVZeroBubble is PyTorch's fixed V order (zbv-fixed), not sail-sg's cost-aware ZB-V."""
    toml = tmp_path / "job.toml"
    toml.write_text(
        '[model]\nname = "llama3"\nflavor = "8B"\n'
        f'[parallelism]\ndata_parallel_shard_degree = -1\npipeline_parallel_degree = 4\npipeline_parallel_schedule = "{name}"\n'
        "[training]\nlocal_batch_size = 8\nglobal_batch_size = 64\nseq_len = 4096\n"
        '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "2"\n'
    )
    s = import_config("torchtitan", toml, ImportOptions(cluster="dgx-h100", nodes=1)).scenario
    assert s["parallel"]["schedule"] == schedule
    # every 2nd of a chunk's blocks checkpointed: 32 layers in 4 one-chunk stages, or 8 chunks
    assert s["training"]["recompute_num_layers"] == (4 if schedule in ("1f1b", "afab") else 2)
    build_context(scenario_from_dict(s))
