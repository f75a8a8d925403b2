"""`simcluster import megatron`: flags read as Megatron-LM's ``megatron/training/arguments.py``
and Megatron-Core read them (defaults, ``validate_args``' checks), and the shell reader's bash.
Each test names the code it follows."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcluster.cli import main
from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.importers import ImportOptions, import_config
from simcluster.importers.shell import read_script
from simcluster.scenario import load_scenario, scenario_from_dict

BASE = (
    "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
    "--micro-batch-size 1 --bf16 --vocab-size 32000 "
)
MOE = "--num-experts 8 --pipeline-model-parallel-size 4 "
LLAMA3 = Path(__file__).parent / "fixtures" / "launch" / "megatron" / "train_llama3_8b_h100_fp8.sh"


def _import(tmp_path: Path, flags: str, nodes: int = 4) -> tuple[dict, list[str], list[str]]:
    args = tmp_path / "train.args"
    args.write_text(BASE + flags + "\n")
    out = import_config("megatron", args, ImportOptions(cluster="dgx-h100", nodes=nodes))
    return out.scenario, out.skipped, out.notes


def test_null_tokenizer_counts_its_eod_before_padding(tmp_path):
    # megatron/training/tokenizer/tokenizer.py _NullTokenizer.vocab_size = vocab_size + 1;
    # _vocab_size_with_padding then rounds up to 128 x tp: 32,001 -> 32,128 at tp 1, 32,256 at tp 2
    s, _, _ = _import(tmp_path, "--tokenizer-type NullTokenizer")
    assert s["model"]["vocab"] == 32128
    s, _, _ = _import(tmp_path, "--tokenizer-type NullTokenizer --tensor-model-parallel-size 2")
    assert s["model"]["vocab"] == 32256
    # build_tokenizer: the others count their files' entries and ignore --vocab-size: asked for
    args = tmp_path / "hf.args"
    args.write_text(BASE + "--tokenizer-type HuggingFaceTokenizer\n")
    out = import_config("megatron", args, ImportOptions(cluster="dgx-h100", nodes=4))
    assert "vocab" not in out.scenario["model"] and "model.vocab" in out.needs
    assert any(
        x.startswith("--vocab-size (HuggingFaceTokenizer takes its size") for x in out.skipped
    )


def test_moe_defaults_follow_arguments_py(tmp_path):
    # arguments.py: --moe-router-topk defaults to 2; validate_args sets moe_ffn_hidden_size to
    # ffn_hidden_size when it is not given; --moe-token-dispatcher-type defaults to allgather,
    # which simcluster does not model: listed, not silently swapped
    s, skipped, _ = _import(tmp_path, MOE + "--ffn-hidden-size 14336")
    assert (s["model"]["top_k"], s["model"]["expert_ffn"]) == (2, 14336)
    assert any(x.startswith("--moe-token-dispatcher-type allgather (its default)") for x in skipped)
    build_context(scenario_from_dict(s))
    s, _, _ = _import(tmp_path, MOE + "--moe-token-dispatcher-type flex --moe-ffn-hidden-size 2048")
    assert (s["moe"]["dispatcher"], s["model"]["expert_ffn"]) == ("deepep", 2048)
    # --moe-flex-dispatcher-backend (arguments.py choices deepep, the default, and hybridep)
    s, _, _ = _import(tmp_path, MOE + "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep")
    assert s["moe"]["dispatcher"] == "hybridep"


def test_moe_router_dtype_and_shared_expert_overlap(tmp_path):
    # arguments.py: --moe-router-dtype {fp32, fp64}, --moe-shared-expert-overlap store_true;
    # fp64 (torch.mm in FP64 in moe_utils.RouterGatingLinearFunction) is listed, not modelled
    flags = MOE + "--moe-token-dispatcher-type alltoall --moe-shared-expert-intermediate-size 4096 "
    s, _, _ = _import(tmp_path, flags + "--ffn-hidden-size 4096 --moe-router-dtype fp32 --moe-shared-expert-overlap")
    assert s["moe"] == {"dispatcher": "alltoall", "router_dtype": "fp32", "shared_expert_overlap": True}
    build_context(scenario_from_dict(s))
    s, skipped, _ = _import(tmp_path, flags + "--ffn-hidden-size 4096 --moe-router-dtype fp64")
    assert "router_dtype" not in s["moe"]
    assert any(x.startswith("--moe-router-dtype fp64 (only fp32 is modelled") for x in skipped)


@pytest.mark.parametrize(
    ("value", "fields"),
    [
        # DeepSeek-V3's Megatron scripts: '([0]*3+[1]*58)', three dense layers then all MoE
        ("([0]*3+[1]*29)", {"dense_layers": 3}),
        ("[0]+[1]*31", {"dense_layers": 1}),
        # every second layer MoE from layer 1 on: simcluster's moe_every 2 ((i + 1) % 2 == 0)
        ("[0,1]*16", {"dense_layers": 1, "moe_every": 2}),
        # an integer N: Megatron-Core's i % N == 0 (layers 0, 2, ...): moe_every with a note
        ("2", {"moe_every": 2}),
        ("1", {}),
    ],
)
def test_moe_layer_freq_patterns(tmp_path, value, fields):
    s, _, notes = _import(tmp_path, MOE + f"--moe-layer-freq {value}")
    got = {k: s["model"][k] for k in ("dense_layers", "moe_every") if k in s["model"]}
    assert got == fields
    assert any("Megatron puts experts on layers 0, 2, 4" in n for n in notes) == (value == "2")
    build_context(scenario_from_dict(s))


def test_moe_layer_freq_refusals(tmp_path):
    with pytest.raises(UserError, match="gives 4 layers, --num-layers 32"):
        _import(tmp_path, MOE + "--moe-layer-freq [0]+[1]*3")
    with pytest.raises(UserError, match="is not leading dense layers then every N-th"):
        _import(tmp_path, MOE + "--moe-layer-freq [1,0]*16")
    with pytest.raises(UserError, match="neither a whole number nor a list"):
        _import(tmp_path, MOE + "--moe-layer-freq __import__('os')")


def test_mla_flags_with_arguments_py_defaults(tmp_path):
    # _add_mla_args: --kv-lora-rank 32, --qk-head-dim 128, --qk-pos-emb-head-dim 64,
    # --v-head-dim 128 by default; --q-lora-rank absent: queries not compressed (0)
    s, _, _ = _import(tmp_path, "--multi-latent-attention --kv-channels 128")
    assert s["model"]["mla"] == {
        "q_lora_rank": 0, "kv_lora_rank": 32, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128,
    }  # fmt: skip
    assert "head_dim" not in s["model"]
    s, _, _ = _import(
        tmp_path,
        "--multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-pos-emb-head-dim 64",
    )
    assert (s["model"]["mla"]["q_lora_rank"], s["model"]["mla"]["kv_lora_rank"]) == (1536, 512)
    build_context(scenario_from_dict(s))


@pytest.mark.parametrize(
    ("flags", "stages"),
    [
        # validate_args: the layers the first and last stage do not take split evenly: 18 / 2
        ("--decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 7", [7, 9, 9, 7]),
        ("--decoder-last-pipeline-num-layers 5", [9, 9, 9, 5]),
        # the embedding and the loss count as a layer each: (30 + 2) / 4 = 8 a stage
        ("--num-layers 30 --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split", [7, 8, 8, 7]),
        # one of them: (31 + 1) / 4 = 8, and the stage one short is the one holding it --
        # get_num_layers_to_build builds one fewer on the first stage for the embedding
        # (is_first_pp_stage), on the last for the loss (is_last_pp_stage)
        ("--num-layers 31 --account-for-embedding-in-pipeline-split", [7, 8, 8, 8]),
        ("--num-layers 31 --account-for-loss-in-pipeline-split", [8, 8, 8, 7]),
    ],
)  # fmt: skip
def test_uneven_pipeline_splits(tmp_path, flags, stages):
    s, _, _ = _import(tmp_path, "--pipeline-model-parallel-size 4 " + flags)
    assert s["parallel"]["layers_per_stage"] == stages
    build_context(scenario_from_dict(s))


def test_uneven_pipeline_refusals_and_virtual_stages(tmp_path):
    with pytest.raises(UserError, match="the other 26 layers do not split evenly over 3 stages"):
        _import(tmp_path, "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 6")
    with pytest.raises(UserError, match="34 do not split evenly over pp 4"):
        _import(
            tmp_path,
            "--pipeline-model-parallel-size 4 --account-for-embedding-in-pipeline-split "
            "--account-for-loss-in-pipeline-split",
        )


@pytest.mark.parametrize(
    ("flags", "stages"),
    [
        # 32 layers, pp 4, vpp 2: rank 0 holds 2, the three others (32 - 2) / 3 = 10, each rank's
        # layers split over its 2 chunks, chunk c of rank r is virtual stage c*4 + r
        # (transformer_block.get_num_layers_to_build; transformer_layer.get_transformer_layer_offset:
        # offsets 0, 1, 6, 11 | 16, 17, 22, 27 = c*(1 + 30//2) + 1 + (r-1)*(15//3))
        ("--decoder-first-pipeline-num-layers 2", [1, 5, 5, 5] * 2),
        # first 2, last 6: the middle two ranks (32 - 8) / 2 = 12; offsets 0, 1, 7, 13 | 16, ...
        ("--decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 6", [1, 6, 6, 3] * 2),
    ],
)  # fmt: skip
def test_uneven_first_last_stages_under_virtual_stages(tmp_path, flags, stages):
    s, skipped, _ = _import(
        tmp_path, "--pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 2 --global-batch-size 64 " + flags
    )
    assert s["parallel"]["layers_per_stage"] == stages and s["parallel"]["vpp"] == 2
    assert not any(x.startswith("--decoder-") for x in skipped)
    ctx = build_context(scenario_from_dict(s))
    assert [c.layers for c in sorted((c for st in ctx.chunks for c in st), key=lambda c: c.first_layer)] == stages


@pytest.mark.parametrize(
    ("flags", "field", "needle"),
    [
        # TransformerConfig.__post_init__: "number of layers at first stage: 5 must be divisible
        # by virtual pipeline parallel degree 2" (the middle ranks' (32 - 5) / 3 = 9 neither)
        ("--num-virtual-stages-per-pipeline-rank 2 --decoder-first-pipeline-num-layers 5",
         "--decoder-first-pipeline-num-layers", "[5, 9, 9, 9] do not each divide over vpp 2"),
        # validate_args: with first/last, vpp only as --num-virtual-stages-per-pipeline-rank
        ("--num-layers-per-virtual-pipeline-stage 4 --decoder-last-pipeline-num-layers 2",
         "--decoder-last-pipeline-num-layers", "--num-virtual-stages-per-pipeline-rank"),
    ],
)  # fmt: skip
def test_uneven_first_last_stages_refused_as_megatron_refuses_them(tmp_path, flags, field, needle):
    with pytest.raises(UserError) as err:
        _import(tmp_path, "--pipeline-model-parallel-size 4 " + flags)
    assert err.value.field == field and needle in str(err.value)


@pytest.mark.parametrize(
    ("flags", "stages"),
    [
        # 31 + embedding = 32 over 4 ranks x 2 chunks: 4 a virtual stage, and the embedding's
        # slot is on the first virtual stage in model order, rank 0's first chunk
        # (transformer_block.get_num_layers_to_build: is_vp_first_stage and is_first_pp_stage;
        # transformer_layer.get_transformer_layer_offset moves every later chunk back one)
        ("--num-layers 31 --account-for-embedding-in-pipeline-split --num-virtual-stages-per-pipeline-rank 2",
         [3] + [4] * 7),
        # the loss's on the last: the last rank's last chunk (is_vp_last_stage, is_last_pp_stage)
        ("--num-layers 31 --account-for-loss-in-pipeline-split --num-virtual-stages-per-pipeline-rank 2",
         [4] * 7 + [3]),
        # validate_args derives vpp from the layers a rank holds with the embedding counted:
        # (31 + 1) / 4 / 4 = 2, not (31 // 4) // 4 = 1
        ("--num-layers 31 --account-for-embedding-in-pipeline-split --num-layers-per-virtual-pipeline-stage 4",
         [3] + [4] * 7),
        ("--num-layers 30 --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split "
         "--num-virtual-stages-per-pipeline-rank 2", [3] + [4] * 6 + [3]),
    ],
)  # fmt: skip
def test_accounted_embedding_or_loss_under_virtual_stages(tmp_path, flags, stages):
    s, skipped, _ = _import(tmp_path, "--pipeline-model-parallel-size 4 --global-batch-size 64 " + flags)
    assert s["parallel"]["layers_per_stage"] == stages and s["parallel"]["vpp"] == 2
    assert not any("account-for" in x for x in skipped)
    ctx = build_context(scenario_from_dict(s))
    assert [c.layers for c in sorted((c for st in ctx.chunks for c in st), key=lambda c: c.first_layer)] == stages


def test_overlap_param_gather_needs_the_grad_reduce_overlap(tmp_path):
    # validate_args: '--overlap-grad-reduce should be turned on when using --overlap-param-gather'
    with pytest.raises(UserError, match="requires --overlap-grad-reduce"):
        _import(tmp_path, "--use-distributed-optimizer --overlap-param-gather")


def test_attention_backend_fused_is_cudnn_where_the_profile_has_it(tmp_path):
    s, _, _ = _import(tmp_path, "--attention-backend fused")
    assert s["training"]["attention_kernel"] == "cudnn"
    s, _, _ = _import(tmp_path, "--attention-backend flash")
    assert "attention_kernel" not in s["training"] and s["training"]["flash_attention"] is True


def test_shell_appends_chains_and_script_arguments(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text(
        "#!/bin/bash\n"
        'OUT=${1:-"ckpt"}\n'  # a script argument: unknown, so its default
        "ARGS=(\n  --bf16\n)\n"
        'DTYPE="fp8"\n'
        'if [[ "$DTYPE" == "fp8" ]]; then\n  ARGS+=(\n    "--fp8-format hybrid"\n  )\nfi\n'
        "MORE=(--use-distributed-optimizer)\n"
        'ARGS+=("${MORE[@]}")\n'
        'V=""; [ -z "$V" ] && V=7\n'
        "cd /nowhere || exit 1\n"  # taken to succeed: the exit does not run
        '[ -f "$OUT" ] || exit 1\n'  # a test not read here: neither side runs
        'if [[ "$X" == "a" ]] || [[ "$DTYPE" == "fp8" ]]; then EXTRA=--tp-comm-overlap; fi\n'
        "python pretrain_gpt.py ${ARGS[@]} --save $OUT --micro-batch-size $V $EXTRA $2\n"
    )
    assert read_script(script, {}).words == [
        "--bf16", "--fp8-format", "hybrid", "--use-distributed-optimizer", "--save", "ckpt",
        "--micro-batch-size", "7", "--tp-comm-overlap",
    ]  # fmt: skip


def test_cli_import_then_run_end_to_end(tmp_path, capsys):
    out = tmp_path / "llama3.yaml"
    argv = ["import", "megatron", str(LLAMA3), "--cluster", "dgx-h100", "--nodes", "1"]
    assert main([*argv, "--out", str(out)]) == 0
    assert load_scenario(str(out)).training.precision == "fp8"
    assert main(["run", str(out), "--out", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run").is_dir() and any((tmp_path / "run").iterdir())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["import", "megatorn", str(LLAMA3)], "did you mean 'megatron'?"),
        (["import", "megatron", "/no/such.sh", "--cluster", "dgx-h100", "--nodes", "1"], "FILE: file '/no/such.sh' not found;"),
        (["import", "megatron", str(LLAMA3), "--cluster", "dgx-h10", "--nodes", "1"], "dgx-h100"),
    ],
)  # fmt: skip
def test_cli_kind_file_and_cluster_errors_are_one_line(argv, message, capsys):
    try:
        status = main(argv)
    except SystemExit as stop:  # argparse's own refusal of a KIND outside its choices
        status = stop.code
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and err.startswith("error:")


def test_distributed_optimizer_instances_shard_within_each_instance(tmp_path):
    # Megatron-Core's --num-distributed-optimizer-instances: the optimizer is sharded over
    # dp x cp / N ranks; 32 GPUs / tp 2 = 16 data-parallel ranks in 2 instances: shards of 8
    s, _, _ = _import(
        tmp_path,
        "--tensor-model-parallel-size 2 --use-distributed-optimizer "
        "--num-distributed-optimizer-instances 2",
    )
    assert (s["parallel"]["zero"], s["parallel"]["zero_shard"]) == (1, 8)
    build_context(scenario_from_dict(s))
    with pytest.raises(UserError, match="requires --use-distributed-optimizer"):
        _import(tmp_path, "--num-distributed-optimizer-instances 2")
    with pytest.raises(UserError, match="3 does not divide the 32"):
        _import(tmp_path, "--use-distributed-optimizer --num-distributed-optimizer-instances 3")


def test_flags_without_a_field_say_what_to_set(tmp_path):
    _, skipped, _ = _import(
        tmp_path,
        "--use-mcore-models --calculate-per-token-loss --use-torch-fsdp2 --use-megatron-fsdp "
        "--data-parallel-sharding-strategy optim_grads_params --moe-use-legacy-grouped-gemm "
        "--moe-single-grouped-weight",
    )
    text = " ".join(skipped)
    # Megatron-Core experts.py: GroupedMLP (legacy) vs TEGroupedMLP, whose GroupedLinear
    # registers weight0 .. weight{n-1}; step_tail.stage_tensor_split counts the latter
    assert "--moe-use-legacy-grouped-gemm (the legacy GroupedMLP" in text
    assert "--moe-single-grouped-weight (TransformerEngine's single grouped weight" in text
    assert "--use-torch-fsdp2 (Megatron's PyTorch FSDP2" in text and "parallel.zero=3" in text
    assert "--data-parallel-sharding-strategy (Megatron-FSDP's sharding" in text
    assert "--use-mcore-models (a no-op today" in text
    assert "no scenario field for it" not in text


def test_recompute_flags_checked_as_megatron_checks_them(tmp_path):
    # megatron/core/transformer/transformer_config.py: "Using recompute_granularity: full so
    # recompute_method must be "block" or "uniform"", and recompute_num_layers must be given
    with pytest.raises(UserError, match="--recompute-method: Megatron requires"):
        _import(tmp_path, "--recompute-granularity full --recompute-num-layers 1")
    with pytest.raises(UserError, match="--recompute-num-layers: Megatron requires"):
        _import(tmp_path, "--recompute-granularity full --recompute-method uniform")
    with pytest.raises(UserError, match="refuses a recompute method with selective"):
        _import(tmp_path, "--recompute-granularity selective --recompute-method block")
    s, _, _ = _import(
        tmp_path, "--recompute-granularity full --recompute-method block --recompute-num-layers 4"
    )
    assert (s["training"]["recompute"], s["training"]["recompute_num_layers"]) == ("full", 4)


def test_virtual_stage_flags_are_one_or_the_other(tmp_path):
    # arguments.py validate_args: --num-layers-per-virtual-pipeline-stage and
    # --num-virtual-stages-per-pipeline-rank cannot be set at the same time
    s, _, _ = _import(
        tmp_path, "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 2"
    )
    assert (s["parallel"]["layers_per_virtual_stage"], s["parallel"]["schedule"]) == (
        2,
        "interleaved",
    )
    with pytest.raises(UserError, match="refuses it beside --num-layers-per-virtual"):
        _import(
            tmp_path,
            "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 2 "
            "--num-virtual-stages-per-pipeline-rank 4",
        )


def test_shell_skips_here_documents(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text(
        "cat <<EOF > args.txt\n--num-layers 2\nexit 1\nEOF\n"
        "cat <<-'END' > x\n\t--fp16\n\tEND\n"
        "python pretrain_gpt.py --bf16\n"
    )
    assert read_script(script, {}).words == ["--bf16"]
    script.write_text("cat <<EOF > x\n--bf16\n")
    with pytest.raises(UserError, match="here-document '<<EOF' has no closing 'EOF' line"):
        read_script(script, {})


@pytest.mark.parametrize(
    ("flags", "aligned"),
    [
        # TEGroupedMLP's Fp8Padding copies unless the splits arrive aligned: the router pads its
        # routing map (--moe-router-padding-for-fp8; core 0.16: _for_quantization) or the flex
        # dispatcher's hybridep backend aligns inside its dispatch
        ("--moe-token-dispatcher-type alltoall --moe-router-padding-for-fp8", True),
        ("--moe-token-dispatcher-type flex --moe-router-padding-for-quantization", True),
        ("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep", True),
        ("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep", False),
        ("--moe-token-dispatcher-type alltoall", False),
    ],
)
def test_router_padding_and_hybridep_are_aligned_dispatch(tmp_path, flags, aligned):
    s, skipped, _ = _import(tmp_path, MOE + "--fp8-format hybrid " + flags)
    assert s["moe"].get("aligned_dispatch", False) is aligned
    assert not any(x.startswith(("--moe-router-padding", "--moe-flex-dispatcher-backend")) for x in skipped)
    build_context(scenario_from_dict(s))


@pytest.mark.parametrize(
    ("flags", "parallel"),
    [
        ("--num-layers 31 --account-for-embedding-in-pipeline-split --num-layers-per-virtual-pipeline-stage 4",
         {"layers_per_virtual_stage": 4, "embedding_in_split": True}),
        ("--num-layers 30 --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split "
         "--num-virtual-stages-per-pipeline-rank 2", {"vpp": 2, "embedding_in_split": True, "loss_in_split": True}),
        ("--num-layers 31 --account-for-loss-in-pipeline-split", {"loss_in_split": True}),
    ],
)  # fmt: skip
def test_the_scenarios_accounted_split_is_the_importers(tmp_path, flags, parallel):
    """parallel.embedding_in_split / loss_in_split (with layers_per_virtual_stage) resolve through
    the importer's functions (partition.megatron_vpp, megatron_accounted): the same vpp and the
    same virtual stages as the imported launch line's explicit layers_per_stage."""
    s, _, _ = _import(tmp_path, "--pipeline-model-parallel-size 4 --global-batch-size 64 " + flags)
    mine = {**s, "parallel": {k: v for k, v in s["parallel"].items() if k not in ("layers_per_stage", "vpp")} | parallel}

    def split(ctx):
        return ctx.scenario.parallel.vpp, [c.layers for c in sorted((c for st in ctx.chunks for c in st), key=lambda c: c.first_layer)]

    assert split(build_context(scenario_from_dict(mine))) == split(build_context(scenario_from_dict(s)))


@pytest.mark.parametrize(
    "flags",
    [
        "--num-virtual-stages-per-pipeline-rank 1",
        # 32 layers / pp 4 = 8 a rank: one chunk of 8
        "--num-layers-per-virtual-pipeline-stage 8",
        # (31 + the embedding) / pp 4 = 8 a rank: one chunk, the first stage one layer short
        "--num-layers 31 --account-for-embedding-in-pipeline-split --num-layers-per-virtual-pipeline-stage 8",
    ],
)
def test_one_virtual_stage_per_rank_is_megatrons_1f1b(tmp_path, flags):
    # megatron/training/arguments.py validate_args: "if args.virtual_pipeline_model_parallel_size
    # == 1: args.virtual_pipeline_model_parallel_size = None", so get_forward_backward_func picks
    # the non-interleaved 1F1B; the import once wrote vpp 1 with the interleaved schedule
    s, _, notes = _import(tmp_path, "--pipeline-model-parallel-size 4 --global-batch-size 64 " + flags)
    written = s["parallel"]
    assert not {"vpp", "layers_per_virtual_stage", "schedule"} & set(written)
    assert any("one virtual stage per pipeline rank" in n and "1f1b" in n for n in notes)
    par = build_context(scenario_from_dict(s)).scenario.parallel
    assert (par.schedule, par.vpp) == ("1f1b", 1)


def test_one_virtual_stage_stays_interleaved_under_megatron_lm_2021(tmp_path):
    # Megatron-LM 2021's megatron/arguments.py parse_args kept the derived vpp of 1 (no None),
    # and its training.py then ran forward_backward_pipelining_with_interleaving
    args = tmp_path / "train.args"
    args.write_text(BASE + "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 8\n")
    options = ImportOptions(cluster="dgx-h100", nodes=4, framework="megatron-lm-2021")
    parallel = import_config("megatron", args, options).scenario["parallel"]
    assert (parallel["layers_per_virtual_stage"], parallel["schedule"]) == (8, "interleaved")


@pytest.mark.parametrize(
    ("flags", "field", "needle"),
    [
        # megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__
        # (NVIDIA/Megatron-LM 002526d): "Ensure you either have middle pp stages and layers or
        # none of them" -- 32 - 16 - 16 = 0 layers for the two middle ranks
        ("--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 16 --decoder-last-pipeline-num-layers 16",
         "--decoder-first-pipeline-num-layers", '"Mismatch: 0 middle layers remaining but 2 middle PP stages available"'),
        # and 32 - 10 - 10 = 12 layers with no middle rank (Megatron-Bridge #5581's pp 2 override)
        ("--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 10 --decoder-last-pipeline-num-layers 10",
         "--decoder-first-pipeline-num-layers", "make first + last = 32"),
        # "num_layers_in_last_pipeline_stage must be larger than 0"
        ("--pipeline-model-parallel-size 4 --decoder-last-pipeline-num-layers 0",
         "--decoder-last-pipeline-num-layers", "must be larger than 0"),
        ("--pipeline-model-parallel-size 3 --decoder-first-pipeline-num-layers 40",
         "--decoder-first-pipeline-num-layers", "40 layers, more than the model's 32"),
    ],
)  # fmt: skip
def test_uneven_split_leaving_a_rank_empty_is_refused_up_front(tmp_path, flags, field, needle):
    # the import once wrote layers_per_stage [16, 0, 0, 16], refused later under that field
    with pytest.raises(UserError) as err:
        _import(tmp_path, flags)
    assert err.value.field == field and needle in str(err.value) and "\n" not in str(err.value)


def test_uneven_split_leaving_a_rank_empty_exits_2_on_one_line(tmp_path, capsys):
    args = tmp_path / "train.args"
    args.write_text(BASE + "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 16 --decoder-last-pipeline-num-layers 16\n")
    assert main(["import", "megatron", str(args), "--cluster", "dgx-h100", "--nodes", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --decoder-first-pipeline-num-layers:") and "\n" not in err
    assert "make first + last at most 30" in err


def test_fp8_attention_and_the_swiglu_fp8_store_flags(tmp_path):
    # megatron/training/arguments.py: --fp8-dot-product-attention (TransformerConfig
    # fp8_dot_product_attention, read by TEDotProductAttention inside the FP8 autocast) and
    # --activation-func-fp8-input-store (activation_func_fp8_input_store, the fused SwiGLU's)
    fp8 = "--fp8-format hybrid --fp8-dot-product-attention --activation-func-fp8-input-store --swiglu"
    args = tmp_path / "train.args"
    args.write_text(BASE + fp8 + "\n")
    out = import_config("megatron", args, ImportOptions(cluster="dgx-b200", nodes=1))
    tr = out.scenario["training"]
    assert tr["fp8_attention"] is True and tr["activation_fp8_store"] is True
    assert not [x for x in out.skipped if "fp8-dot-product" in x or "fp8-input-store" in x]
    build_context(scenario_from_dict(out.scenario))  # runs on dgx-b200's cudnn-fp8 curves
    # amd-mi300x has no FP8 attention curves: imported 16-bit, said in a note
    mi300x = import_config("megatron", args, ImportOptions(cluster="amd-mi300x", nodes=1))
    assert "fp8_attention" not in mi300x.scenario["training"]
    assert any("no FP8 attention curves" in n for n in mi300x.notes)


def test_the_running_backends_sm_count_is_imported_and_the_other_left(tmp_path):
    # Megatron-Core reads --moe-hybridep-num-sms for the flex dispatcher's hybridep backend and
    # --moe-deepep-num-sms for its deepep one (moe.dispatch_sms); the other flag does nothing
    flex = "--moe-token-dispatcher-type flex --moe-hybridep-num-sms 32 --moe-deepep-num-sms 24 "
    s, skipped, _ = _import(tmp_path, MOE + flex + "--moe-flex-dispatcher-backend hybridep")
    assert s["moe"]["dispatch_sms"] == 32
    assert any(x.startswith("--moe-deepep-num-sms (read only with the flex dispatcher's deepep backend") for x in skipped)
    s, skipped, _ = _import(tmp_path, MOE + flex)
    assert s["moe"]["dispatcher"] == "deepep" and s["moe"]["dispatch_sms"] == 24
    assert any(x.startswith("--moe-hybridep-num-sms (read only with the flex dispatcher's hybridep backend") for x in skipped)
    # later Megatron-Core's one flag for every backend (the two above forwarded to it) wins
    s, _, _ = _import(tmp_path, MOE + flex + "--moe-flex-dispatcher-num-sms 48")
    assert s["moe"]["dispatch_sms"] == 48


def test_activation_offload_flags(tmp_path):
    """Megatron-LM arguments.py: --cpu-offloading-num-layers N (validate_args: N > 0 sets
    cpu_offloading); TransformerConfig's fine_grained_activation_offloading, offload_modules (its
    __post_init__ asserts a non-empty list of known names) and
    fine_grained_offloading_max_inflight_offloads, the flags generated from those fields."""
    s, _, _ = _import(tmp_path, "--cpu-offloading-num-layers 20")
    assert s["training"]["activation_offload_layers"] == 20
    s, skipped, notes = _import(tmp_path, "--cpu-offloading")
    assert "activation_offload_layers" not in s["training"] and not skipped
    assert any("no layer offloaded" in n for n in notes)
    fine = "--fine-grained-activation-offloading --offload-modules expert_fc1 moe_act "
    s, skipped, _ = _import(
        tmp_path, MOE + fine + "--fine-grained-offloading-max-inflight-offloads 2 --min-offloaded-tensor-size 350000000"
    )
    assert s["training"]["offload_modules"] == ["expert_fc1", "moe_act"]
    assert s["training"]["offload_max_inflight"] == 2
    assert s["training"]["offload_min_elements"] == 350_000_000
    assert not [x for x in skipped if "offload" in x]
    build_context(scenario_from_dict(s))
    _, _, notes = _import(tmp_path, MOE + "--offload-modules expert_fc1")
    assert any("nothing offloaded" in n for n in notes)
    with pytest.raises(UserError, match="requires it") as err:
        _import(tmp_path, MOE + "--fine-grained-activation-offloading")
    assert err.value.field == "--offload-modules"
    with pytest.raises(UserError, match="'fused_group_mlp' cannot be imported"):
        _import(tmp_path, MOE + "--fine-grained-activation-offloading --offload-modules fused_group_mlp")


def test_the_older_p2p_overlap_switch(tmp_path):
    """Megatron-LM's arguments.py of 2023 had --overlap-p2p-communication (store_true, dest
    overlap_p2p_comm, off by default) where today's has --no-overlap-p2p-communication (on by
    default): the older switch given is the overlap on, read rather than listed as unknown."""
    s, skipped, _ = _import(tmp_path, "--pipeline-model-parallel-size 4 --overlap-p2p-communication")
    assert s["overlap"]["pp_comm"] is True
    assert not [x for x in skipped if "p2p" in x]
    s, _, _ = _import(tmp_path, "--pipeline-model-parallel-size 4 --no-overlap-p2p-communication")
    assert s["overlap"]["pp_comm"] is False


@pytest.mark.parametrize(
    ("program", "extra", "named"),
    [
        # Megatron-LM examples/mamba: pretrain_mamba.py with the hybrid pattern and mixer shape
        ("pretrain_mamba.py", "--hybrid-override-pattern M-M*-M- --mamba-state-dim 128", "--hybrid-override-pattern"),
        ("pretrain_gpt.py", "--mamba-num-heads 128", "--mamba-num-heads"),
        ("pretrain_gpt.py", "--is-hybrid-model", "--is-hybrid-model"),
        # a pure Mamba stack: no hybrid flag, its program says so
        ("pretrain_mamba.py", "", "pretrain_mamba.py"),
        # Qwen3-Next / Qwen3.5 launches: Gated DeltaNet on three layers in four
        ("pretrain_gpt.py", "--experimental-attention-variant gated_delta_net --linear-attention-freq 4",
         "--experimental-attention-variant"),
        ("pretrain_gpt.py", "--experimental-attention-variant dsa --dsa-indexer-topk 2048", "--experimental-attention-variant"),
        ("pretrain_gpt.py", "--heterogeneous-layers-config-path blocks.json", "--heterogeneous-layers-config-path"),
        ("pretrain_gpt.py", "--hybrid-attention-ratio 0.1", "--hybrid-attention-ratio"),
    ],
)
def test_layers_other_than_softmax_attention_are_refused(tmp_path, program, extra, named):
    """Megatron-Core's MambaModel (Mamba-2 mixers beside attention and MLP layers), its experimental
    attention variants and per-layer block configurations would import flag by flag as a
    transformer with softmax attention in every layer; refused by the flag or program."""
    script = tmp_path / "train.sh"
    script.write_text(
        f"torchrun {program} --num-layers 8 --hidden-size 4096 --num-attention-heads 32 "
        f"--seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 {extra}\n"
    )
    with pytest.raises(UserError) as err:
        import_config("megatron", script, ImportOptions(cluster="dgx-h100", nodes=1))
    assert err.value.field == named and "is not modelled" in str(err.value)


@pytest.mark.parametrize(
    ("flags", "fields"),
    [
        # Megatron-Bridge's gpt-oss provider: window_size (128, 0), window_attn_skip_freq 2;
        # is_layer_window_attention (layers from 1): layer_number % 2 != 0 windowed, so layers 2, 4, ...
        # global, simcluster's (i + 1) % 2 == 0 from 0; a query sees its 128 predecessors and itself
        ("--window-size 128,0 --window-attn-skip-freq 2", {"sliding_window": 129, "global_every": 2}),
        ("--window-size 4096,0", {"sliding_window": 4097}),  # every layer windowed (Mistral)
        ("--window-size 4096,-1 --window-attn-skip-freq ([1]*3+[0])*8", {"sliding_window": 4097, "global_every": 4}),
        ("--window-size 4096,0 --window-attn-skip-freq [1]*32", {"sliding_window": 4097}),
        ("--window-size 4096,0 --window-attn-skip-freq 1", {}),  # every layer global
        ("--window-size -1,0", {}),  # -1: no bound
        ("--window-attn-skip-freq 2", {}),  # no window to skip
    ],
)
def test_window_flags_as_sliding_window_and_global_every(tmp_path, flags, fields):
    assert _mapped(tmp_path, flags, "model", ("sliding_window", "global_every"), ("window",)) == fields


def _mapped(tmp_path: Path, flags: str, section: str, keys: tuple[str, ...], named: tuple[str, ...]) -> dict:
    """The ``keys`` of ``section`` the flags import to; none of the flags ``named`` left unimported,
    and the scenario builds."""
    s, skipped, _ = _import(tmp_path, flags)
    assert not [f for f in skipped if any(word in f for word in named)]
    build_context(scenario_from_dict(s))
    return {k: s[section][k] for k in keys if k in s[section]}


def test_window_flag_refusals(tmp_path):
    with pytest.raises(UserError, match="attend 5 keys after it"):
        _import(tmp_path, "--window-size 128,5")
    with pytest.raises(UserError, match="is not LEFT,RIGHT"):
        _import(tmp_path, "--window-size 128")
    with pytest.raises(UserError, match="not every N-th layer global"):
        _import(tmp_path, "--window-size 128,0 --window-attn-skip-freq [1,0,0,1]*8")
    with pytest.raises(UserError, match="gives 4 layers, --num-layers 32"):
        _import(tmp_path, "--window-size 128,0 --window-attn-skip-freq [1,1,1,0]")


@pytest.mark.parametrize(
    ("flags", "fields"),
    [
        # arguments.py --cp-comm-type, passed to TransformerEngine as cp_comm_type; its help spells
        # "allgather", TransformerEngine takes "all_gather"
        ("--cp-comm-type a2a", {"cp_comm": "a2a"}),
        ("--cp-comm-type allgather", {"cp_comm": "all_gather"}),
        ("--cp-comm-type all_gather all_gather", {"cp_comm": "all_gather"}),  # one per layer, all alike
        ("--cp-comm-type p2p", {"cp_comm": "p2p"}),
        # every two adjacent CP ranks an all-to-all group, the ring across the two groups
        ("--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 2", {"cp_comm": "a2a+p2p", "cp_a2a": 2}),
    ],
)
def test_context_parallel_comm_type(tmp_path, flags, fields):
    got = _mapped(
        tmp_path, f"--context-parallel-size 4 {flags}", "parallel", ("cp_comm", "cp_a2a"), ("cp-comm-type", "hierarchical")
    )
    assert got == fields


def test_context_parallel_comm_type_refusals(tmp_path):
    with pytest.raises(UserError, match="different kinds"):
        _import(tmp_path, "--context-parallel-size 4 --cp-comm-type p2p a2a")
    with pytest.raises(UserError, match="give both sizes"):
        _import(tmp_path, "--context-parallel-size 4 --cp-comm-type a2a+p2p")
    with pytest.raises(UserError, match="2 x 4 is not the context parallel size 4"):
        _import(tmp_path, "--context-parallel-size 4 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 4")
    with pytest.raises(UserError, match="'ring' is not one of"):
        _import(tmp_path, "--context-parallel-size 4 --cp-comm-type ring")
    s, _, notes = _import(tmp_path, "--cp-comm-type a2a")  # no context parallelism: nothing written
    assert "cp_comm" not in s["parallel"] and any("no effect" in n for n in notes)


def test_deepspeed_ulysses_sequence_parallel_as_context_parallel_a2a(tmp_path):
    """Megatron-DeepSpeed's --ds-sequence-parallel-size (DeepSpeed-Ulysses: the sequence split,
    all-to-all over heads around attention in DeepSpeed's DistributedAttention) is context
    parallelism of the a2a kind; framework deepspeed runs DeepSpeed's implementation of it."""
    s, skipped, notes = _import(tmp_path, "--deepspeed --ds-sequence-parallel-size 4")
    assert (s["framework"], s["parallel"]["cp"], s["parallel"]["cp_comm"]) == ("deepspeed", 4, "a2a")
    assert not [f for f in skipped if "ds-sequence-parallel-size" in f]
    ctx = build_context(scenario_from_dict(s))
    assert (ctx.layout.cp, ctx.layout.dp, ctx.scenario.parallel.cp_a2a_impl) == (4, 8, "deepspeed")
    s, _, _ = _import(tmp_path, "--deepspeed --ds-sequence-parallel-size 1")
    assert "cp" not in s["parallel"]


def test_schedule_and_bucket_flags_to_their_fields(tmp_path):
    """arguments.py flags whose scenario fields name them: the interleaved schedule's microbatch
    group, the LM head's deferred weight gradients (pipeline only), the NaN check's 2023 on-switch,
    and overlap_param_gather_with_optimizer_step's one bucket a chunk (get_model's
    disable_bucketing)."""
    s, skipped, _ = _import(
        tmp_path,
        "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 2 "
        "--microbatch-group-size-per-virtual-pipeline-stage 8 --global-batch-size 64 "
        "--defer-embedding-wgrad-compute --wgrad-deferral-limit 22 --check-for-nan-in-loss-and-grad "
        "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --overlap-param-gather-with-optimizer-step",
    )
    par = s["parallel"]
    assert (par["schedule"], par["microbatch_group"]) == ("interleaved", 8)
    assert (par["defer_head_wgrad"], par["head_wgrad_deferral_limit"]) == (True, 22)
    assert (s["dp"]["nan_check"], s["dp"]["bucket_stages"]) == (True, "none")
    assert not skipped
    build_context(scenario_from_dict(s))
    s, _, notes = _import(tmp_path, "--defer-embedding-wgrad-compute --microbatch-group-size-per-virtual-pipeline-stage 8")
    assert "defer_head_wgrad" not in s["parallel"] and "microbatch_group" not in s["parallel"]
    assert any("without a pipeline" in n for n in notes) and any("interleaved schedule only" in n for n in notes)


def test_hybrid_context_parallel_is_not_a_hybrid_mamba_model(tmp_path):
    """Only MambaModel's layer-allocation flags mark a hybrid Mamba model: --hybrid-context-parallel
    (context parallelism for packed sequences) is listed as not imported, not refused."""
    _, skipped, _ = _import(tmp_path, "--hybrid-context-parallel")
    assert any("--hybrid-context-parallel" in f for f in skipped)
