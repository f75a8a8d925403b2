"""Checkpointed layer inputs split over the TP ranks (``training.recompute_partitioned``).

Sources: Korthikanti et al. 2022 (arXiv 2205.05198): with full recomputation each layer keeps
only its input, 2sbh bytes (2sbhL for L layers), 2sbh/t when that input is stored split over
the t tensor-parallel ranks; Megatron-LM ``tensor_parallel/random.py`` ``CheckpointFunction``
(``split_tensor_into_1d_equal_chunks`` after the forward, ``gather_split_1d_tensor`` before
the recompute, blocking) and DeepSpeed ``activation_checkpointing/checkpointing.py``
(``partition_activations`` / ``gather_partitioned_activations``). The all-gather's size is
nccl-tests' definition: the gathered output, 2sbh bytes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.fit_hints import fitting_changes
from simcluster.importers import ImportOptions, import_config
from simcluster.memory import layer_activation_bytes
from simcluster.memory_report import memory_summary
from simcluster.network import collective_time
from simcluster.scenario import scenario_from_dict
from simcluster.topology import build_cluster
from tests.conftest import make_scenario
from tests.engine_helpers import run

S, B, H = 2048, 2, 1024  # seq_len, micro_batch, make_scenario's GPT_LIKE hidden
LAYERS, MICROBATCHES = 8, 2


def _sections(tp: int, partitioned: bool, sp: bool = False, recompute: str = "full") -> dict:
    # tp GPUs and no data parallelism: nothing else competes with the gathers
    return make_scenario(
        cluster={"hardware": "dgx-h100", "gpus": tp},
        parallel={"tp": tp, "sequence_parallel": sp},
        training={"seq_len": S, "micro_batch": B, "global_batch": B * MICROBATCHES,
                  "precision": "bf16", "recompute": recompute, "recompute_partitioned": partitioned},
    )  # fmt: skip


def _gather_alone(tp: int) -> float:
    """One TP all-gather of 2sbh bytes on an idle node (the network model's own time)."""
    ctx = build_context(scenario_from_dict(_sections(tp, True)))
    return collective_time("all_gather", 2 * S * B * H, build_cluster(ctx.profile, tp), list(range(tp)))


def _checkpoint_bytes(data: dict) -> float:
    sc = scenario_from_dict(data)
    ctx = build_context(sc)
    return layer_activation_bytes(ctx.model, ctx.layout, sc.training, 0)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_a_checkpoint_is_2sbh_or_2sbh_over_t(tp):
    # Korthikanti 2022: full recomputation keeps 2sbh per layer; split over t ranks, 2sbh/t
    assert _checkpoint_bytes(_sections(tp, False)) == 2 * S * B * H
    assert _checkpoint_bytes(_sections(tp, True)) == 2 * S * B * H / tp


def test_sequence_parallelism_already_splits_it():
    # Megatron's block: distribute_saved_activations and not sequence_parallel
    assert _checkpoint_bytes(_sections(4, True, sp=True)) == 2 * S * B * H / 4
    assert _checkpoint_bytes(_sections(4, False, sp=True)) == 2 * S * B * H / 4


def test_the_peak_falls_by_the_stash_of_checkpoints_saved():
    # one microbatch's stash at a time without a pipeline: L layers x 2sbh x (1 - 1/t)
    whole = run(_sections(4, False)).summary["peak_memory_bytes"]["max"]
    split = run(_sections(4, True)).summary["peak_memory_bytes"]["max"]
    assert whole - split == pytest.approx(LAYERS * 2 * S * B * H * (1 - 1 / 4), rel=1e-9)


def test_each_recompute_waits_for_its_inputs_all_gather():
    tp = 4
    result = run(_sections(tp, True))
    ev = result.events[result.events["rank"] == 0]
    gathers = ev[ev["name"] == "checkpoint_tp_ag"].sort_values("start_s")
    assert len(gathers) == LAYERS * MICROBATCHES
    assert (gathers["bytes"] == 2 * S * B * H).all()  # nccl-tests size: the gathered 2sbh
    alone = _gather_alone(tp)
    assert (gathers["end_s"] - gathers["start_s"]).to_numpy() == pytest.approx(alone, rel=1e-6)
    # blocking (the current stream): the layer's recomputed forward starts after it
    compute = ev[ev["stream"] == "compute"].sort_values("start_s")
    for layer, start, end in zip(gathers["layer"], gathers["start_s"], gathers["end_s"], strict=True):
        after = compute[compute["start_s"] >= end - 1e-12].iloc[0]
        assert (after["kind"], after["layer"]) == ("recompute", layer)
        during = compute[(compute["start_s"] < end - 1e-12) & (compute["end_s"] > start + 1e-12)]
        assert during.empty


def test_the_step_grows_by_the_gathers_and_nothing_else():
    tp = 4
    whole, split = run(_sections(tp, False)).summary, run(_sections(tp, True)).summary
    alone = _gather_alone(tp)
    added = LAYERS * MICROBATCHES * alone
    assert split["step_time_s"] - whole["step_time_s"] == pytest.approx(added, rel=1e-6)
    assert split["exposed_comm_s"]["tp"] - whole["exposed_comm_s"]["tp"] == pytest.approx(added, rel=1e-6)


@pytest.mark.parametrize(("tp", "sp"), [(1, False), (4, True)])
def test_no_tp_group_or_sequence_parallelism_same_step(tp, sp):
    a, b = run(_sections(tp, False, sp)).summary, run(_sections(tp, True, sp)).summary
    assert a["step_time_s"] == b["step_time_s"]
    assert a["peak_memory_bytes"] == b["peak_memory_bytes"]


def test_megatron_flags_import_as_the_field(tmp_path: Path):
    base = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
            "--micro-batch-size 1 --bf16 --vocab-size 32000 --tensor-model-parallel-size 2 ")  # fmt: skip
    opts = ImportOptions(cluster="dgx-h100", nodes=1)
    for flags in (
        "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 "
        "--distribute-saved-activations",
        "--checkpoint-activations --distribute-checkpointed-activations",  # Megatron-LM 2021, metaseq
    ):
        path = tmp_path / "train.args"
        path.write_text(base + flags + "\n")
        out = import_config("megatron", path, opts)
        assert out.scenario["training"]["recompute_partitioned"] is True
        assert not any("distribute" in s for s in out.skipped)
        build_context(scenario_from_dict(out.scenario))
    # arguments.py validate_args: distributing needs full recomputation and a TP group
    path.write_text(base + "--distribute-saved-activations\n")
    with pytest.raises(UserError, match="--distribute-saved-activations: Megatron requires full"):
        import_config("megatron", path, opts)
    one = base.replace("--tensor-model-parallel-size 2", "--tensor-model-parallel-size 1")
    path.write_text(one + "--recompute-granularity full --recompute-method uniform "
                    "--recompute-num-layers 1 --distribute-saved-activations\n")  # fmt: skip
    with pytest.raises(UserError, match="only over a tensor-parallel group"):
        import_config("megatron", path, opts)


def test_deepspeed_partition_activations_imports_as_the_field(tmp_path: Path):
    path = tmp_path / "ds.json"
    path.write_text('{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, '
                    '"activation_checkpointing": {"partition_activations": true}}')  # fmt: skip
    opts = ImportOptions(cluster="dgx-h100", nodes=1, model="llama3-8b", seq_len=2048)
    out = import_config("deepspeed", path, opts)
    assert out.scenario["training"]["recompute_partitioned"] is True
    build_context(scenario_from_dict(out.scenario))


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved", "zb-h1", "zbv"])
def test_every_schedule_gathers_once_per_recomputed_layer_and_microbatch(schedule):
    # a pipeline stage reruns its own layers: 8 layers over pp 2 leave 4 per GPU, each
    # gathered once per microbatch before its rerun, also where B and W are split
    data = _sections(2, True)
    data["cluster"]["gpus"] = 4
    data["parallel"].update({"pp": 2, "schedule": schedule})
    if schedule == "interleaved":
        data["parallel"]["vpp"] = 2
    data["training"]["global_batch"] = B * 4
    ev = run(data).events
    gathers = ev[(ev["rank"] == 0) & (ev["name"] == "checkpoint_tp_ag")]
    assert len(gathers) == (LAYERS // 2) * 4
    assert (gathers["bytes"] == 2 * S * B * H).all()


def test_megatron_deepspeed_partition_activations_needs_deepspeeds_checkpointing(tmp_path: Path):
    # Megatron-DeepSpeed passes --partition-activations to deepspeed.checkpointing.configure,
    # which is called only with --deepspeed-activation-checkpointing
    base = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
            "--micro-batch-size 1 --bf16 --vocab-size 32000 --tensor-model-parallel-size 2 "
            "--checkpoint-activations --partition-activations ")  # fmt: skip
    opts = ImportOptions(cluster="dgx-h100", nodes=1)
    path = tmp_path / "train.args"
    path.write_text(base + "--deepspeed-activation-checkpointing\n")
    assert import_config("megatron", path, opts).scenario["training"]["recompute_partitioned"] is True
    path.write_text(base + "\n")
    out = import_config("megatron", path, opts)
    assert "recompute_partitioned" not in out.scenario["training"]
    assert any(s.startswith("--partition-activations") for s in out.skipped)


def test_opt_175b_fits_only_with_its_checkpoints_split():
    # metaseq's OPT-175B (Zhang et al. 2022; opt_baselines.py: model-parallel 8, FSDP without
    # resharding after forward, full checkpointing with --distribute-checkpointed-activations,
    # 8 sequences of 2,048 per rank) on 992 A100 80GB: 96 whole checkpoints of
    # 2 x 2048 x 8 x 12288 B = 403 MB are 38.7 GB; split 8 ways, 4.8 GB
    data = {
        "name": "opt-175b", "framework": "pytorch-fsdp", "model": "opt-175b",
        "cluster": {"hardware": "dgx-a100", "gpus": 992},
        "parallel": {"tp": 8, "zero": 3}, "zero3": {"reshard_after_forward": False},
        "training": {"seq_len": 2048, "micro_batch": 8, "global_batch": 992, "precision": "fp16",
                     "recompute": "full", "flash_attention": False},
    }  # fmt: skip
    sc = scenario_from_dict(data)
    whole = memory_summary(build_context(sc))
    split = memory_summary(build_context(scenario_from_dict(data, [("training.recompute_partitioned", True)])))
    assert not whole["fits"] and split["fits"]
    assert whole["total_bytes"] - split["total_bytes"] == pytest.approx(96 * 2 * 2048 * 8 * 12288 * 7 / 8, rel=1e-9)
    assert "training.recompute_partitioned=true" in [h.change for h in fitting_changes(sc)]
