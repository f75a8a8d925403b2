"""``framework:`` presets (simcluster/frameworks/).

The presets are checked against the shipped validation cases: every family whose runs used one
framework spells that framework's settings out field by field (each with its source in the
case), so a preset that disagrees with what was validated fails here.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.frameworks import FRAMEWORKS, apply_framework, framework_and_release, get_framework
from simcluster.hardware import load_profile
from simcluster.memory import stage_params, static_memory
from simcluster.scenario import scenario_from_dict
from simcluster.validate import load_cases

FAMILY_FRAMEWORK = {
    "bigscience-a100": "deepspeed",
    "megatron-core-h100": "megatron-core r0.8",
    # the release each source names (simcluster/framework_releases.py dates NeMo 1.x's settings)
    "nemo-fp8-h100": "nemo 24.07",
    "nemo-long-context-h100": "nemo 24.03.01",
    "nemo-long-context-b200": "nemo 25.04",
    "megatron-bridge-fp8-h100": "megatron-bridge",
    "megatron-bridge-fp8-blackwell": "megatron-bridge",
    "megatron-bridge-nvfp4-blackwell": "megatron-bridge",
    "narayanan2021-a100": "megatron-lm-2021",
    "korthikanti2022-a100": "megatron-lm-2021",
    "nanotron-h100": "nanotron",
    "torchtitan-a100": "torchtitan",
    "zero-bubble-a100": "zero-bubble",
    "zero-bubble-v-a100": "zero-bubble",
}

# Where a validated case deliberately departs from its framework's default, and why.
DEPARTURES = {
    # Narayanan et al.'s run_table_1.sh passes --DDP-impl torch for the models below 39B
    ("narayanan2021-a100", "overlap.dp_grad_reduce"): lambda case: "torch DDP" in case.source,
    # Korthikanti et al. Tables 3/5 run one data-parallel replica: nothing to reduce
    ("korthikanti2022-a100", "overlap.dp_grad_reduce"): lambda case: True,
    # the paper's 2022 Megatron reduces the input gradient asynchronously without SP too
    # (ColumnParallelLinearWithAsyncAllreduce); the preset reads a run without SP as SC'21 code
    ("korthikanti2022-a100", "overlap.tp_grad_async"): lambda case: "ColumnParallelLinearWithAsyncAllreduce" in case.source,
    # Megatron-Bridge's Llama 3 8B H100 config turns gradient_accumulation_fusion off with Megatron
    # FSDP (scripts/performance/configs/llama3/llama3_llm_pretrain.py llama3_8b_h100_config)
    **{(f, "training.grad_accum_fusion"): (lambda case: "Megatron FSDP" in case.source)
       for f in ("megatron-bridge-fp8-h100", "megatron-bridge-fp8-blackwell")},
    # Megatron-Bridge's Megatron FSDP rows shard everything (zero 3), not the distributed optimizer
    **{(f, "parallel.zero"): (lambda case: "Megatron FSDP" in case.source)
       for f in ("megatron-bridge-fp8-h100", "megatron-bridge-fp8-blackwell")},
    # torch DDP (Narayanan's runs below 39B): optimizer.zero_grad frees the gradients, no buffer,
    # its reducer buckets 25 MiB of gradients instead of all-reducing the whole buffer, and it
    # scales each gradient by 1/dp inside its copy into the bucket (dp.bucket_copies), not in a
    # pass of its own
    **{("narayanan2021-a100", key): (lambda case: "torch DDP" in case.source)
       for key in ("dp.zero_grad_buffer", "dp.bucket_mb", "dp.prescale")},
    # NeMo's launcher passes its own userbuffers presets for these models
    ("nemo-fp8-h100", "overlap.tp_comm_cfg"): lambda case: case.scenario["overlap"].get("tp_comm_cfg") != "te-1",
}


def _leaves(defaults: dict) -> list[tuple[str, str, object]]:
    return [(section, key, value) for section, values in defaults.items() for key, value in values.items()]


def _preset(written: str, raw: dict) -> tuple[dict, str | None]:
    """What ``framework: written`` fills (its release's settings over the current ones) and the
    attention kernel it calls, where the case's profile has curves for it (with_framework_kernel)."""
    framework, release = framework_and_release(written)
    return framework.preset(raw, release), framework.kernel(release, load_profile(raw["cluster"]["hardware"]).attention_kernels)


@pytest.mark.parametrize("family", sorted(FAMILY_FRAMEWORK))
def test_presets_match_the_validated_cases(family: str) -> None:
    cases = [c for c in load_cases() if c.family == family]
    assert cases
    for case in cases:
        validated = scenario_from_dict(case.scenario)
        defaults, kernel = _preset(FAMILY_FRAMEWORK[family], case.scenario)
        for section, key, value in _leaves(defaults):
            departs = DEPARTURES.get((family, f"{section}.{key}"))
            if departs and departs(case):
                continue
            if key == "tp_comm_cfg" and validated.parallel.tp == 1:
                continue  # no TP communication to overlap: a case leaves it unset
            got = getattr(getattr(validated, section), key)
            written = FAMILY_FRAMEWORK[family]
            assert got == value, f"{case.name}: {section}.{key} is {got!r}, {written} sets {value!r}"
        if kernel is not None:
            assert validated.training.attention_kernel == kernel, case.name


@pytest.mark.parametrize("family", sorted(FAMILY_FRAMEWORK))
def test_naming_the_framework_changes_no_validated_case(family: str) -> None:
    # The cases spell every framework field out, so adding `framework:` must be a no-op.
    framework = FAMILY_FRAMEWORK[family]
    for case in (c for c in load_cases() if c.family == family):
        plain = scenario_from_dict(case.scenario)
        named = scenario_from_dict({**case.scenario, "framework": framework})
        bare = {"framework": None, "framework_release": None}
        if plain.parallel.tp == 1:  # a userbuffers setting without TP communication is inert
            cfg = {"tp_comm_cfg": plain.overlap.tp_comm_cfg}
            named = named.model_copy(update={"overlap": named.overlap.model_copy(update=cfg)})
        assert named.model_copy(update=bare) == plain.model_copy(update=bare), case.name


def _small(**extra) -> dict:
    scenario = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"hardware": "dgx-h100", "gpus": 16},
        "parallel": {"tp": 2, "pp": 2, "zero": 1},
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 32},
    }
    scenario.update(extra)
    return scenario


def test_framework_fills_only_what_the_scenario_leaves_unset() -> None:
    sc = scenario_from_dict(_small(framework="deepspeed", overlap={"pp_comm": True}))
    assert sc.overlap.pp_comm is True  # explicit wins
    assert sc.overlap.dp_grad_reduce is False  # DeepSpeed: reduced after the last backward
    # the BF16_Optimizer's fp32 gradients go out as its flat buffers, one per parameter group,
    # never split (get_grads_for_reduction, engine.allreduce_no_retain): one bucket
    assert sc.dp.bucket_mb == 1e6
    assert sc.framework == "deepspeed"
    # fp16 (or bf16 gradients): DeepSpeedZeroOptimizer's ipg buckets, reduce_bucket_size 5e8
    # elements x 2 bytes
    fp16 = scenario_from_dict(_small(framework="deepspeed", training={**_small()["training"], "precision": "fp16"}))
    assert fp16.dp.bucket_mb == 1000.0 and fp16.dp.zero_grad_buffer is False


def test_deepspeed_zero1_all_reduces_and_fp16_accumulates_in_fp16() -> None:
    # DeepSpeed runtime/engine.py: under a pipeline ZeRO-1 runs without contiguous gradients, so
    # buffered_reduce_fallback all-reduces whole buckets; fp16 ZeRO-1 accumulates in .grad, the
    # BF16_Optimizer in an fp32 buffer
    bf16 = scenario_from_dict(_small(framework="deepspeed"))
    assert bf16.dp.grad_collective == "all_reduce" and bf16.training.fp32_grad_accum is True
    fp16 = _small(framework="deepspeed")
    fp16["training"] = {**fp16["training"], "precision": "fp16"}
    assert scenario_from_dict(fp16).training.fp32_grad_accum is False
    zero0 = {**_small(framework="deepspeed"), "parallel": {"tp": 2, "pp": 2}}
    assert scenario_from_dict(zero0).dp.grad_collective == "auto"
    # without a pipeline ZeRO-1 all-reduces too: contiguous gradients forced off at stage 1
    # (buffered_reduce_fallback) or, where kept, average_tensor with
    # use_multi_rank_bucket_allreduce (default true: allreduce_and_scatter, an all_reduce)
    no_pipe = {**_small(framework="deepspeed"), "parallel": {"tp": 2, "zero": 1}}
    assert scenario_from_dict(no_pipe).dp.grad_collective == "all_reduce"
    # every ZeRO 0-2 reduction divides by dp in a pass over the bucket (engine.allreduce_bucket,
    # gradient_reduction_w_predivide, average_tensor's div_); ZeRO-3's are left to stage3.py
    assert scenario_from_dict(no_pipe).dp.prescale is True
    assert scenario_from_dict(zero0).dp.prescale is True
    # ZeRO-3's overlap_comm defaults to true: the preset leaves its reduce overlapped
    zero3 = scenario_from_dict({**_small(framework="deepspeed"), "parallel": {"tp": 2, "zero": 3}})
    assert zero3.overlap.dp_grad_reduce is True


def test_deepspeed_bf16_zero1_with_bf16_gradients_runs_the_zero_optimizer() -> None:
    """engine._do_optimizer_sanity_check: bf16 at ZeRO-1 runs the BF16_Optimizer only with an
    fp32 grad_accum_dtype; with bf16 gradients (fp32_grad_accum false, current DeepSpeed's
    default under ZeRO: get_data_types) it is DeepSpeedZeroOptimizer's stage 1: gradients
    accumulated in .grad, freed after the reduction, reduced in 5e8-element ipg buckets."""
    raw = _small(framework="deepspeed", training={**_small()["training"], "fp32_grad_accum": False})
    sc = scenario_from_dict(raw)
    assert sc.training.grad_accum_cast is False and sc.dp.zero_grad_buffer is False
    assert sc.dp.bucket_mb == 1000.0


def test_deepspeed_zero2_and_3_keep_bf16_gradient_partitions() -> None:
    """DeepSpeed engine.get_data_types: without a data_types.grad_accum_dtype the gradients
    accumulate in the model's dtype whenever ZeRO is on, and the BF16_Optimizer (fp32
    accumulation, cast then add) is picked for ZeRO-1 only. So a bf16 ZeRO-3 run holds 2 B of
    weights, 2 B of gradients and 12 B of master and Adam moments per parameter, all over the
    data-parallel group: the ZeRO paper's 16 (Rajbhandari et al. 2020, Sec. 5)."""
    for zero in (2, 3):
        raw = {**_small(framework="deepspeed"), "parallel": {"tp": 2, "zero": zero}}
        sc = scenario_from_dict(raw)
        assert sc.training.fp32_grad_accum is False and sc.training.grad_accum_cast is False
    ctx = build_context(sc)  # ZeRO-3, dp 8
    params = stage_params(ctx.model, ctx.layout, ctx.chunks[0])
    total = sum(static_memory(ctx.model, ctx.layout, ctx.scenario.training, params))
    assert total == pytest.approx(params.total * 16 / ctx.layout.zero_group)
    # ZeRO-1 in bf16 stays the BF16_Optimizer's fp32 accumulation
    one = scenario_from_dict(_small(framework="deepspeed")).training
    assert one.fp32_grad_accum is True and one.grad_accum_cast is True


def test_torchtitan_splits_a_local_batch_into_pp_microbatches() -> None:
    # torchtitan's pipeline_parallel_microbatches defaults to the pipeline degree: its 405B 3D
    # runs (docs/performance.md Table 5: 512 GPUs, FSDP 8, TP 8, PP 8, global batch 256) split each
    # local batch of 32 into 8 microbatches of 4
    raw = {
        "framework": "torchtitan",
        "model": {"preset": "llama3.1-405b"},
        "cluster": {"hardware": "dgx-h100", "gpus": 512},
        "parallel": {"tp": 8, "pp": 8, "zero": 3},
        "training": {"seq_len": 8192, "global_batch": 256},
    }
    assert scenario_from_dict(raw).training.micro_batch == 4
    explicit = {**raw, "training": {**raw["training"], "micro_batch": 1}}
    assert scenario_from_dict(explicit).training.micro_batch == 1  # the scenario wins
    flat = {**raw, "parallel": {"tp": 8, "zero": 3}}
    assert scenario_from_dict(flat).training.micro_batch == 1  # no pipeline: the field's default


def test_torchtitan_interleaves_in_pytorchs_rounds() -> None:
    # torch.distributed.pipelining ScheduleInterleaved1F1B: m microbatches in max(1, m // pp)
    # rounds of m / rounds each (its docstring: pp 4 with 10 microbatches runs 2 rounds of 5),
    # where Megatron runs groups of pp and refuses 10 on 4 stages
    raw = {
        "framework": "torchtitan",
        "model": {"preset": "llama3-70b"},
        "cluster": {"hardware": "dgx-h100", "gpus": 64},
        "parallel": {"tp": 8, "pp": 4, "vpp": 2, "zero": 3, "schedule": "Interleaved1F1B"},
        "training": {"seq_len": 8192, "global_batch": 20, "micro_batch": 1},
    }
    sc = scenario_from_dict(raw)
    assert sc.parallel.schedule == "interleaved" and sc.parallel.microbatch_group == 5
    assert build_context(sc).layout.microbatches == 10
    # a multiple of pp is one group of pp per round either way: nothing set
    even = {**raw, "training": {**raw["training"], "global_batch": 16}}
    assert scenario_from_dict(even).parallel.microbatch_group is None
    # the scenario's own group wins; Megatron-Core's runs keep Megatron's rule
    own = {**raw, "parallel": {**raw["parallel"], "microbatch_group": 10}}
    assert scenario_from_dict(own).parallel.microbatch_group == 10
    megatron = {**raw, "framework": "megatron-core", "parallel": {**raw["parallel"], "zero": 1}}
    with pytest.raises(UserError, match="divisible by pp=4"):
        build_context(scenario_from_dict(megatron))
    # DDP per stage under the same PyTorch schedules (calibrate measure-step's pipelined loop)
    ddp = {**raw, "framework": "pytorch-ddp", "cluster": {"hardware": "dgx-h100", "gpus": 8},
           "parallel": {**raw["parallel"], "tp": 1, "zero": 0}}  # fmt: skip
    assert scenario_from_dict(ddp).parallel.microbatch_group == 5  # dp 2: 10 microbatches


def test_without_framework_the_scenario_is_untouched() -> None:
    raw = _small()
    assert apply_framework(raw) == raw
    assert scenario_from_dict(raw).framework is None


def test_nanotron_zero1_takes_the_blocking_all_reduce_path() -> None:
    # nanotron optim/zero.py: with ZeRO-1 the whole fp32 gradient buffer is all-reduced once after
    # the backward (no DDP buckets), then the bf16 parameters are all-gathered, neither overlapped
    sc = scenario_from_dict(_small(framework="nanotron"))
    assert sc.dp.grad_collective == "all_reduce" and sc.overlap.dp_grad_reduce is False
    sc0 = scenario_from_dict({**_small(framework="nanotron"), "parallel": {"tp": 2, "pp": 2}})
    assert sc0.dp.grad_collective == "auto" and sc0.overlap.dp_grad_reduce is True
    assert sc0.dp.bucket_mb == pytest.approx(25 * 2**20 * 2 / 1e6)  # 25 MiB of bf16 grads as fp32


def test_framework_kernel_is_used_only_where_the_profile_has_its_curves() -> None:
    h100 = build_context(scenario_from_dict(_small(framework="nanotron")))
    assert h100.scenario.training.attention_kernel == "fa2"
    mi300x = _small(framework="nanotron")  # a profile without attention curves
    mi300x["cluster"] = {"hardware": "amd-mi300x", "gpus": 16}
    assert build_context(scenario_from_dict(mi300x)).scenario.training.attention_kernel is None
    b200 = _small(framework="nanotron")  # B200 carries FA2 curves (cudnn-frontend's benchmark)
    b200["cluster"] = {"hardware": "dgx-b200", "gpus": 16}
    assert build_context(scenario_from_dict(b200)).scenario.training.attention_kernel == "fa2"
    explicit = _small(framework="nanotron")
    explicit["training"] = {**explicit["training"], "attention_kernel": "cudnn"}
    assert build_context(scenario_from_dict(explicit)).scenario.training.attention_kernel == "cudnn"


def test_unknown_framework_is_one_line_naming_the_field() -> None:
    with pytest.raises(UserError) as err:
        scenario_from_dict(_small(framework="megatron-cor"))
    assert err.value.field == "framework"
    assert "megatron-core" in str(err.value)


def test_cli_reports_a_bad_framework_with_exit_code_2(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "framework: deepspd\nmodel: {preset: llama3-8b}\ncluster: {gpus: 8}\n"
        "training: {seq_len: 4096, global_batch: 8}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "simcluster", "run", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "framework" in proc.stderr and "deepspeed" in proc.stderr


def test_list_frameworks_prints_one_line_each() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "simcluster", "list", "frameworks"], capture_output=True, text=True, check=True
    )
    lines = proc.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == sorted(FRAMEWORKS)


@pytest.mark.parametrize(
    ("written", "name"),
    [("Megatron-LM", "megatron-core"), ("megatron", "megatron-core"), ("NeMo", "nemo"),
     ("Megatron-Bridge", "megatron-bridge"), ("Megatron-DeepSpeed", "deepspeed"), ("DeepSpeed", "deepspeed"),
     ("NVIDIA NeMo", "nemo"), ("NeMo Framework", "nemo")],
)
def test_framework_aliases_read_as_the_entry(written: str, name: str) -> None:
    base = {"model": {"preset": "llama3-8b"}, "cluster": {"gpus": 8},
            "training": {"seq_len": 4096, "global_batch": 16}}
    assert scenario_from_dict({**base, "framework": written}) == scenario_from_dict({**base, "framework": name})
    assert scenario_from_dict({**base, "framework": written}).framework == name


def test_nemo_is_megatron_core_without_the_bucket_passes() -> None:
    # NeMo 2 / Megatron-Bridge performance recipes: check_for_nan_in_grad False and
    # average_in_collective True (no 1/dp pass; start_grad_sync's reduce_op ReduceOp.AVG); with
    # the distributed optimizer, buckets of 128 Mi parameters (NVIDIA/NeMo
    # lightning/pytorch/callbacks/megatron_comm_overlap.py and NVIDIA-NeMo/Megatron-Bridge
    # training/comm_overlap.py, _get_optimizer_overlap_cfgs: bucket_size = 128 * 1024 * 1024);
    # everything else as Megatron-Core
    raw = {"parallel": {"pp": 2}}
    core, nemo = FRAMEWORKS["megatron-core"].defaults(raw), FRAMEWORKS["nemo"].defaults(raw)
    assert nemo["dp"]["nan_check"] is False and nemo["dp"]["prescale"] is False
    assert nemo["dp"].pop("reduce_op") == "avg" and "reduce_op" not in core["dp"]
    assert (nemo["dp"]["bucket_mb"], core["dp"]["bucket_mb"]) == ("comm-overlap", "megatron-core")
    nemo["dp"].update(nan_check=True, prescale=True, bucket_mb="megatron-core")
    # and TransformerEngine's cross-entropy (GPTConfig's cross_entropy_loss_fusion, the performance
    # scripts' cross_entropy_fusion_impl "te"); Megatron-LM's default is the unfused loss
    assert nemo["training"].pop("fused_cross_entropy") == "te"
    assert "fused_cross_entropy" not in core.get("training", {})
    if not nemo["training"] and "training" not in core:
        del nemo["training"]
    assert nemo == core
    # without the distributed optimizer (zero 0) or under Megatron FSDP (zero 3) the callback
    # leaves bucket_size alone: Megatron-Core's default
    for zero in (0, 3):
        assert FRAMEWORKS["nemo"].defaults({"parallel": {"zero": zero}})["dp"]["bucket_mb"] == "megatron-core"


@pytest.mark.parametrize(
    ("parallel", "training", "stages"),
    [({"pp": 2, "vpp": 2}, {}, "none"), ({"pp": 2}, {}, "first"), ({"pp": 2, "vpp": 2, "zero": 0}, {}, "first"),
     ({"pp": 2, "vpp": 2}, {"precision": "nvfp4"}, "first"),
     ({"pp": 2, "vpp": 2}, {"precision": "fp8", "fp8_recipe": "block"}, "first"),
     ({"pp": 2, "vpp": 2}, {"precision": "fp8", "fp8_recipe": "current"}, "none")],
)
def test_nemo_interleaved_runs_gather_with_the_optimizer_step(parallel, training, stages) -> None:
    # NeMo 2's scripts/performance helpers.py set_primary_perf_configs and Megatron-Bridge's
    # scripts/performance overrides: overlap_param_gather_with_optimizer_step when dp, pp and vp
    # are all > 1 (Bridge's newest skips fp8_mx and nvfp4); Megatron-Core's get_model then passes
    # disable_bucketing to every chunk, the first stage's first one too (dp.bucket_stages none)
    raw = {"parallel": parallel, "training": training}
    for name in ("nemo", "megatron-bridge"):
        assert FRAMEWORKS[name].defaults(raw)["dp"]["bucket_stages"] == stages, name
    assert FRAMEWORKS["megatron-core"].defaults(raw)["dp"]["bucket_stages"] == "first"


@pytest.mark.parametrize("zero", [2, 3])
def test_nanotron_names_the_zero_stages_it_runs(zero: int) -> None:
    # nanotron's ZeroDistributedOptimizer shards optimizer states only (ZeRO-1)
    with pytest.raises(UserError) as err:
        scenario_from_dict(_small(framework="nanotron", parallel={"zero": zero}))
    assert err.value.field == "parallel.zero" and "nanotron" in str(err.value)


@pytest.mark.parametrize(("name", "zero"), [("torchtitan", 1), ("torchtitan", 2)])
def test_torchtitan_names_the_zero_stages_it_runs(name: str, zero: int) -> None:
    # torchtitan's data parallelism is DDP (data_parallel_replicate_degree) or FSDP2
    # (data_parallel_shard_degree, fully_shard): no optimizer-only or gradient-only sharding
    with pytest.raises(UserError) as err:
        scenario_from_dict(_small(framework=name, parallel={"zero": zero}))
    assert err.value.field == "parallel.zero" and name in str(err.value) and "zero 3" in str(err.value)
    assert "\n" not in err.value.one_line()
    for ok in (0, 3):
        scenario_from_dict(_small(framework=name, parallel={"tp": 2, "zero": ok}))


def test_framework_names_match_as_people_write_them():
    # spaces, hyphens, underscores and case do not matter; aliases too
    from simcluster.frameworks import get_framework

    for spelling, name in [("Megatron Core", "megatron-core"), ("megatron_core", "megatron-core"),
                           ("torch titan", "torchtitan"), ("NeMo 2", "nemo"), ("Megatron-LM", "megatron-core"),
                           ("MEGATRON-LM-2021", "megatron-lm-2021"), ("Megatron DeepSpeed", "deepspeed")]:  # fmt: skip
        assert get_framework(spelling).name == name, spelling


def test_megatron_lm_2021_keeps_an_fp16_runs_gradients_in_fp16():
    """Megatron-LM's arguments.py forces accumulate_allreduce_grads_in_fp32 for bf16 only (the
    flag is off by default), so an fp16 run's main_grad buffer is fp16: accumulated and
    all-reduced in 16 bits (the SC'21 scripts pass --fp16 without the flag)."""
    fp16 = FRAMEWORKS["megatron-lm-2021"].defaults({"training": {"precision": "fp16"}})
    bf16 = FRAMEWORKS["megatron-lm-2021"].defaults({"training": {"precision": "bf16"}})
    assert fp16["training"]["fp32_grad_accum"] is False
    assert "fp32_grad_accum" not in bf16["training"]  # the fp32 default


def test_automodel_is_torchtitans_fsdp2_with_te_kernels_and_deepep() -> None:
    # NeMo AutoModel's performance summary: FSDP2 with "TE + DeepEP" kernels for its MoE rows,
    # "TE + fsdp2_prefetch" for Llama 3 70B
    moe = {"parallel": {"ep": 8, "zero": 3}}
    titan, auto = FRAMEWORKS["torchtitan"].defaults(moe), FRAMEWORKS["automodel"].defaults(moe)
    assert auto["training"]["elementwise"] == "fused" and titan["training"]["elementwise"] == "eager"
    assert auto["moe"] == {"dispatcher": "deepep"} and auto["parallel"] == {"etp": 1}
    assert auto["zero3"] == titan["zero3"]
    assert "moe" not in FRAMEWORKS["automodel"].defaults({"parallel": {"zero": 3}})
    assert get_framework("NeMo-AutoModel").name == "automodel"


@pytest.mark.parametrize("name", ["megatron-core", "nemo"])
def test_megatron_core_runs_the_distributed_optimizer_and_sp_with_tp(name: str) -> None:
    # Megatron refuses --overlap-param-gather without --use-distributed-optimizer and
    # --tp-comm-overlap without --sequence-parallel (arguments.py), and both overlaps are on
    raw = _small(framework=name, parallel={"tp": 2, "pp": 2})
    sc = scenario_from_dict(raw)
    assert (sc.parallel.zero, sc.parallel.sequence_parallel) == (1, True)
    no_tp = scenario_from_dict(_small(framework=name, parallel={"tp": 1, "pp": 2}, cluster={"hardware": "dgx-h100", "gpus": 8}))
    assert (no_tp.parallel.zero, no_tp.parallel.sequence_parallel) == (1, False)
    # what the scenario states wins: Megatron FSDP (zero 3), SP off
    stated = scenario_from_dict(_small(framework=name, parallel={"tp": 2, "pp": 2, "zero": 3, "sequence_parallel": False}))
    assert (stated.parallel.zero, stated.parallel.sequence_parallel) == (3, False)


@pytest.mark.parametrize(
    ("schedule", "post_validation"),
    [("ZB-2p", True), ("zbv", True), ("1F1B-I", False), ("V-Half", False), ("v-min", False)],
)
def test_zero_bubble_is_the_forks_example_script(schedule, post_validation):
    # sail-sg examples/pretrain_zero_bubble.sh: no --use-flash-attn, --no-overlap-p2p-communication,
    # --enable-optimizer-post-validation with its zero-bubble schedules unless SYNC_OPTIMIZER is
    # set, as examples/test_all_schedules.sh sets it for zbv-half and zbv-min (V-Half, V-Min)
    raw = _small(framework="Zero Bubble", parallel={"pp": 4, "schedule": schedule, **({"vpp": 2} if "I" in schedule else {})},
                 cluster={"hardware": "dgx-a100", "gpus": 4})  # fmt: skip
    sc = scenario_from_dict(raw)
    assert sc.framework == "zero-bubble"
    assert (sc.training.flash_attention, sc.overlap.pp_comm) == (False, False)
    assert sc.training.optimizer_post_validation is post_validation
    # the script trains in fp16 (--fp16 unless FP32) without Megatron's DP overlaps (store_true
    # flags it does not pass); its validate_args post-validates in fp16 only
    assert (sc.training.precision, sc.overlap.dp_grad_reduce, sc.overlap.param_gather) == ("fp16", False, False)
    bf16 = scenario_from_dict({**raw, "training": {**raw["training"], "precision": "bf16"}})
    assert bf16.training.optimizer_post_validation is False


def test_deepspeed_runs_classic_attention_unless_a_flag_turns_flash_on() -> None:
    # Megatron-DeepSpeed's --use-flash-attn-v1/-v2/-triton are store_true flags (arguments.py):
    # without one its attention materialises the scores, as BLOOM's runs did
    assert scenario_from_dict(_small(framework="deepspeed")).training.flash_attention is False
    flagged = _small(framework="megatron-deepspeed")
    flagged["training"] = {**flagged["training"], "flash_attention": True}
    assert scenario_from_dict(flagged).training.flash_attention is True


def test_megatron_bridge_is_nemo_with_bf16_main_grads_and_fp8_weights() -> None:
    # Megatron-Bridge scripts/performance: grad_reduce_in_fp32 False; both frameworks' FP8
    # mixed-precision recipes set fp8_param_gather (NVIDIA/NeMo collections/llm/recipes/precision/
    # mixed_precision.py bf16_with_fp8_mixed, bf16_with_fp8_current_scaling_mixed; Megatron-Bridge
    # training/mixed_precision.py bf16_with_fp8_current_scaling_mixed); NeMo 1.x's did not
    fp8 = _small(framework="Megatron-Bridge")
    fp8["training"] = {**fp8["training"], "precision": "fp8"}
    bridge, nemo = scenario_from_dict(fp8), scenario_from_dict({**fp8, "framework": "nemo"})
    assert bridge.training.fp32_grad_accum is False and bridge.training.fp8_param_gather is True
    assert nemo.training.fp32_grad_accum is True and nemo.training.fp8_param_gather is True
    assert scenario_from_dict({**fp8, "framework": "nemo 24.07"}).training.fp8_param_gather is False
    zero_0 = {**fp8, "framework": "nemo", "parallel": {**fp8["parallel"], "zero": 0}}
    assert scenario_from_dict(zero_0).training.fp8_param_gather is False
    same = {"training": nemo.training, "framework": "nemo"}
    assert bridge.model_copy(update=same) == nemo
    bf16 = scenario_from_dict(_small(framework="megatron-bridge"))
    assert bf16.training.fp32_grad_accum is False and bf16.training.fp8_param_gather is False


def test_megatron_bridge_blockwise_fp8_on_hopper_keeps_16_bit_weights() -> None:
    # NVIDIA-NeMo/Megatron-Bridge training/mixed_precision.py bf16_with_fp8_subchannel_scaling_mixed
    # ("blockwise (for Hopper only)"): fp8_param_gather False; bf16_with_mxfp8_mixed (the block
    # recipe on Blackwell) keeps FP8 weights; a written value wins
    def weights(hardware: str, **training) -> bool:
        raw = _small(framework="megatron-bridge", cluster={"hardware": hardware, "gpus": 16})
        raw["training"] = {**raw["training"], "precision": "fp8", "fp8_recipe": "block", **training}
        return build_context(scenario_from_dict(raw)).scenario.training.fp8_param_gather

    assert weights("dgx-h100") is False and weights("dgx-b200") is True
    assert weights("dgx-h100", fp8_param_gather=True) is True
    assert weights("dgx-h100", fp8_recipe="current") is True


def test_torchtitan_context_parallel_all_gathers_k_and_v():
    """torchtitan's job_config ``context_parallel_rotate_method`` defaults to "allgather" (PyTorch's
    context_parallel all-gathers every K/V shard after the first sub-SDPA): framework torchtitan
    with cp > 1 runs ``cp_comm: all_gather`` unless the scenario says otherwise."""
    from simcluster.scenario import scenario_from_dict

    data = {
        "framework": "torchtitan",
        "model": {"preset": "llama3-8b"},
        "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "parallel": {"dp": 4, "cp": 2, "zero": 3},
        "training": {"seq_len": 16384, "micro_batch": 1, "global_batch": 4},
    }
    assert scenario_from_dict(data).parallel.cp_comm == "all_gather"
    data["parallel"]["cp_comm"] = "p2p"
    assert scenario_from_dict(data).parallel.cp_comm == "p2p"
    data["parallel"] = {"dp": 8, "zero": 3}
    data["training"]["global_batch"] = 8
    assert scenario_from_dict(data).parallel.cp_comm == "p2p"  # the field's default: no CP
