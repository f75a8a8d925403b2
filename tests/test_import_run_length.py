"""An imported launch config's run length as tokens (a note naming `simcluster run --tokens`):
Megatron-LM's --train-samples x --seq-length, or --train-iters x --global-batch-size x
--seq-length; torchtitan's [training] steps x global batch x seq_len. The flags themselves stay
listed as not imported: the scenario is one step."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcluster.budget import parse_tokens, tokens_argument
from simcluster.cli import main
from simcluster.importers import ImportOptions, import_config
from simcluster.importers.run_length import ramp_clause, run_tokens, whole

LAUNCH = Path(__file__).parent / "fixtures" / "launch"
LLAMA2_DS = LAUNCH / "megatron-deepspeed" / "pretrain_llama2_distributed.sh"


def test_tokens_from_samples_or_iterations():
    assert run_tokens(2048, 32, iters=250_000) == (16_384_000_000, "steps 250,000 x global batch 32 x sequence 2,048")
    # samples-based runs: Megatron-LM's arguments.py accepts one of the two, never both
    assert run_tokens("4096", 1536, samples="1000", iters="9") == (4_096_000, "samples 1,000 x sequence 4,096")
    for unresolved in ("${TRAIN_STEPS}", "", None, "0", True):
        assert run_tokens(2048, 32, iters=unresolved) is None  # a note, never a refusal
    assert run_tokens(None, 32, iters=10) is None and run_tokens(2048, None, iters=10) is None


def test_the_run_length_reads_back_exactly():
    # 250,000 x 32 x 2,048 = 16,384,000,000: written 16.384B, not the display's 16.38B (249,939 steps)
    for tokens in (16_384_000_000, 15 * 10**12, 1_572_864_000_000, 123_456_789_012_345, 286_720):
        assert parse_tokens(tokens_argument(tokens)) == tokens
    assert tokens_argument(16_384_000_000) == "16.384B"


def test_megatron_script_notes_its_run_and_keeps_the_flag_unimported(tmp_path, capsys):
    out = tmp_path / "llama2.yaml"
    argv = ["import", "megatron", str(LLAMA2_DS), "--cluster", "dgx-a100", "--nodes", "4", "--set", "model.vocab=32000"]
    assert main([*argv, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    # the script's TRAIN_STEPS=250000, GLOBAL_BATCH_SIZE=32, SEQ_LENGTH=2048
    assert f"the run trains 16.38B tokens (--train-iters 250,000 x global batch 32 x sequence 2,048): simcluster run {out} --tokens 16.384B" in err
    text = out.read_text()
    assert "# note: the run trains 16.38B tokens" in text and "--train-iters" in text.split("# not imported:", 1)[1]
    # an unset run length is no error, and gives no note
    assert main([*argv, "--var", "TRAIN_STEPS=${UNSET}", "--out", "-"]) == 0
    assert "the run trains" not in capsys.readouterr().err


def test_a_batch_ramp_over_iterations_leaves_the_run_length_out():
    # GPT-3 175B's script ramps the batch from 16 with --train-iters: iterations x the final batch
    # would overstate the run, and Megatron-LM's arguments.py refuses the pair ("expected no
    # batch-size rampup for iteration-based training")
    result = import_config("megatron", str(LAUNCH / "train_gpt3_175b_distributed.sh"), ImportOptions(cluster="dgx-h100", nodes=16))
    assert result.run_tokens is None


def test_a_batch_ramp_over_samples_keeps_the_tokens_and_says_so():
    # BigScience tr11-176B-ml.slurm: TRAIN_SAMPLES=220_000_000 ("450B tokens" in its comment) at
    # SEQ_LEN=2048, --rampup-batch-size 192 16 9_765_625; underscores read as Python's int() does
    assert whole("220_000_000") == 220_000_000 and whole("220__000") is None and whole("_1") is None
    result = import_config("megatron", str(LAUNCH / "tr11-176B-ml.slurm"), ImportOptions(cluster="dgx-a100", nodes=48))
    assert result.run_tokens is not None
    tokens, how = result.run_tokens
    assert tokens == 220_000_000 * 2048 == 450_560_000_000
    # 9,765,625 / 220,000,000 = 4.44%
    assert how.endswith("the first 9,765,625 samples, 4.4%, ramp the batch up from 192: counted here at the full batch's step")
    assert ramp_clause(["192", "16"], 1000) is None and ramp_clause(["a", "16", "10"], 1000) is None


@pytest.mark.parametrize(
    ("toml", "tokens"),
    # 64 GPUs at tp 8: dp 8 (data_parallel_shard_degree -1); the 70B TOML's batch_size 8 and
    # 1,000 steps, the 405B's 2 and 3,000, both at seq_len 8,192
    [("llama3_70b.toml", 1000 * (8 * 8) * 8192), ("llama3_405b.toml", 3000 * (2 * 8) * 8192)],
)
def test_torchtitan_steps_are_the_run(toml, tokens):
    result = import_config("torchtitan", str(LAUNCH / "torchtitan" / toml), ImportOptions(cluster="dgx-h100", nodes=8))
    assert result.run_tokens is not None and result.run_tokens[0] == tokens
    assert any("steps" in line for line in result.skipped)  # still not imported: one step


def test_iterations_without_a_global_batch_take_micro_batch_x_dp(tmp_path, capsys):
    # arguments.py: no --global-batch-size means micro_batch_size x data_parallel_size; on 4
    # DGX H100 nodes (32 GPUs) at tp 2 and pp 2 dp is 8, so a step is 4 x 8 = 32 sequences of
    # 2,048 tokens and 1,000 iterations train 65,536,000 tokens
    args = tmp_path / "train.args"
    args.write_text(
        "--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --bf16 "
        "--vocab-size 32000 --micro-batch-size 4 --tensor-model-parallel-size 2 "
        "--pipeline-model-parallel-size 2 --train-iters 1000\n"
    )
    assert main(["import", "megatron", str(args), "--cluster", "dgx-h100", "--nodes", "4", "--out", "-"]) == 0
    err = capsys.readouterr().err
    assert "the run trains 65.54M tokens (--train-iters 1,000 x global batch 32 (micro-batch x dp, as no batch is given) x sequence 2,048)" in err
    assert "--tokens 65.536M" in err
