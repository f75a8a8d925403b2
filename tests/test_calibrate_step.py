"""``calibrate measure-step``: the scenario's model built in PyTorch, real DDP steps on CPU
(torchrun, 2 gloo ranks), their simulation beside them, and the validate case it writes."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

from calibrate.cli import main  # noqa: E402
from calibrate.kineto import load_trace  # noqa: E402
from calibrate.step_model import Transformer  # noqa: E402
from simcluster.cli import main as simcluster_main  # noqa: E402
from simcluster.model import build_model  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
TINY = {
    "model": {"layers": 2, "hidden": 128, "heads": 4, "vocab": 512},
    "cluster": {"hardware": "dgx-h100", "gpus": 2},
    "parallel": {"tp": 1, "pp": 1},
    "training": {"seq_len": 64, "micro_batch": 2, "global_batch": 8, "precision": "fp32"},
}


def _scenario(tmp_path: Path, **changes: dict) -> Path:
    data = {key: {**value, **changes.get(key, {})} for key, value in TINY.items()}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    "shape",
    [
        {},  # Llama-style: RMSNorm, SwiGLU, RoPE, untied
        {"heads": 8, "kv_heads": 2, "qk_norm": True, "tied_embeddings": True},
        {"mlp": "gelu", "norm": "layernorm", "bias": True, "position": "learned",
         "max_positions": 128, "dropout": True},  # GPT-2/3-style
        {"mlp": "relu2", "head_dim": 64, "ffn": 320},
    ],
)  # fmt: skip
def test_the_torch_model_has_the_simulators_parameter_count(shape):
    """Every weight and bias the simulator counts (ModelSpec.params_total: per layer
    h*a*d + 2*h*kv*d + a*d*h for attention, 3*h*ffn for SwiGLU, 2*h*ffn for GeLU, norms, the
    embedding and an untied head) exists in the module, and nothing else."""
    spec = build_model({**TINY["model"], **shape})
    module = Transformer(spec, 64)
    assert sum(p.numel() for p in module.parameters()) == spec.params_total()
    logits = module(torch.randint(spec.vocab, (2, 64)))
    assert logits.shape == (2, 64, spec.vocab)


def test_full_recomputation_gives_the_same_gradients():
    """Checkpointing every layer reruns its forward in the backward: same gradients, to fp32
    rounding."""
    spec = build_model(TINY["model"])
    tokens = torch.randint(spec.vocab, (2, 64))
    grads = []
    for recompute in ("none", "full"):
        torch.manual_seed(0)
        module = Transformer(spec, 64, recompute)
        module(tokens).float().square().mean().backward()
        grads.append(torch.cat([p.grad.flatten() for p in module.parameters()]))
    torch.testing.assert_close(grads[0], grads[1])


def _refused(tmp_path, capsys, changes, field):
    """measure-step on the changed tiny scenario exits 2 with one line naming ``field``."""
    path = _scenario(tmp_path, **changes)
    assert main(["measure-step", str(path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err, err


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"model": {"experts": 4, "top_k": 2, "expert_ffn": 256}}, "model.experts"),
        ({"training": {"precision": "fp8"}}, "training.precision"),
        ({"training": {"recompute": "selective"}}, "training.recompute"),
        ({"parallel": {"cp": 2}}, "framework"),  # no context parallelism in the loop
        ({"parallel": {"zero": 1}}, "parallel.zero"),  # DDP (0) or FSDP2 (3) only
        ({"parallel": {"zero": 3, "zero_shard": 1}}, "parallel.zero_shard"),
        ({}, "cluster.gpus"),  # 2 GPUs in the scenario, one process launched
    ],
)
def test_what_it_cannot_run_is_a_one_line_error(tmp_path, capsys, changes, field):
    _refused(tmp_path, capsys, changes, field)


@pytest.mark.parametrize(
    ("changes", "loop"),
    [({"parallel": {"tp": 2}}, "DTensor tensor parallelism over 2 (sequence parallel)"),  # dp 1: no DDP
     ({"parallel": {"pp": 2}, "model": {"layers": 4}}, "torch.distributed.pipelining Schedule1F1B over 2 stages"),
     ({"cluster": {"gpus": 1}}, "one process, no parallelism"),
     ({"cluster": {"gpus": 4}, "parallel": {"tp": 2, "zero": 3}},
      "FSDP2, DTensor tensor parallelism over 2 (sequence parallel)")],
)  # fmt: skip
def test_the_loop_named_is_the_one_that_ran(tmp_path, changes, loop):
    """wrap_data_parallel leaves the model unwrapped at dp 1, so the printed loop (and the
    --case-out source) names DDP or FSDP2 only where dp > 1."""
    from calibrate.step_run import _as_run, _loop
    from simcluster.context import build_context
    from simcluster.scenario import scenario_from_dict

    raw = yaml.safe_load(_scenario(tmp_path, **changes).read_text())
    assert _loop(build_context(scenario_from_dict(_as_run(raw, None)))) == loop


def test_a_step_larger_than_the_machine_is_refused_before_a_byte_is_allocated(tmp_path, capsys):
    """200 layers of hidden 16384 in fp32: terabytes per rank by the memory model, more than any
    host's memory; one line naming both, not the out-of-memory killer mid-build."""
    path = _scenario(tmp_path, model={"layers": 200, "hidden": 16384, "heads": 128}, cluster={"gpus": 1})
    assert main(["measure-step", str(path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "TiB per rank by the memory model (simcluster memory), more than the" in err


def test_a_bad_hardware_flag_is_named_as_the_flag(tmp_path, capsys):
    """--hardware replaces the scenario's cluster.hardware; a profile that does not load is
    reported under the flag the user typed, not the scenario field it was written into."""
    path = _scenario(tmp_path)
    assert main(["measure-step", str(path), "--hardware", "no-such-profile"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --hardware: unknown hardware 'no-such-profile'") and err.count("\n") == 1


def test_another_framework_is_refused(tmp_path, capsys):
    data = yaml.safe_load(_scenario(tmp_path).read_text())
    data["framework"] = "megatron-core"
    path = tmp_path / "mc.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["measure-step", str(path)]) == 2
    assert "measure-step runs a PyTorch DDP loop, not megatron-core" in capsys.readouterr().err
    data["parallel"]["zero"], data["framework"] = 3, "pytorch-ddp"
    path.write_text(yaml.safe_dump(data))
    assert main(["measure-step", str(path)]) == 2
    assert "FSDP2 loop, not pytorch-ddp; set framework: torchtitan" in capsys.readouterr().err


def _torchrun_json(args: list[str]) -> dict:
    """measure-step's --json result from a 2-rank torchrun launch of ``args``."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    errors = []
    # one relaunch: --standalone picks its rendezvous port before binding it, so two launches at
    # once (pytest-xdist workers) can race for it; a second failure is the run's own
    for _attempt in range(2):
        proc = subprocess.run(TORCHRUN + args, env=env, capture_output=True, text=True, timeout=300)
        if proc.returncode == 0:
            break
        errors.append(proc.stderr[-3000:])
    assert proc.returncode == 0, "\n---\n".join(errors)
    result: dict = json.loads(proc.stdout)
    return result


@pytest.mark.parametrize(("zero", "framework"), [(0, "pytorch-ddp"), (3, "torchtitan")])
def test_two_gloo_ranks_train_time_and_simulate(tmp_path, capsys, zero, framework):
    """Real steps on 2 CPU ranks, under DDP (zero 0) or FSDP2 (zero 3): 8 sequences of 64
    tokens, 2 per microbatch on each of 2 ranks, so 2 microbatches a step; the step is the
    median of the timed ones; the simulation is of the same scenario under the framework entry
    of that loop, and the case it writes validates to the same prediction."""
    path = _scenario(tmp_path, parallel={"zero": zero})
    case, trace = tmp_path / "case.yaml", tmp_path / "trace.json"
    args = ["-m", "calibrate", "measure-step", str(path), "--device", "cpu", "--steps", "3",
            "--warmup", "1", "--json", "--case-out", str(case), "--trace-out", str(trace)]  # fmt: skip
    r = _torchrun_json(args)
    assert r["ranks"] == 2 and r["microbatches"] == 2 and len(r["steps_s"]) == 3
    assert r["framework"] == framework
    assert r["params"] == build_model(TINY["model"]).params_total()
    assert r["measured_step_s"] == statistics.median(r["steps_s"]) > 0
    assert r["error_pct"] == pytest.approx(100 * (r["simulated_step_s"] / r["measured_step_s"] - 1))
    assert r["measured_tokens_per_s"] == pytest.approx(8 * 64 / r["measured_step_s"])
    written = yaml.safe_load(case.read_text())["cases"][0]
    assert written["scenario"]["framework"] == framework
    assert written["source"].endswith("under FSDP2" if zero else "under DistributedDataParallel")
    assert written["measured"] == {"step_time_s": r["measured_step_s"]}
    # the layout in the name: two layouts of one scenario are two cases for validate
    assert written["name"] == f"{r['scenario']}/measure-step {r['layout']}" and ("zero3" in r["layout"]) == (zero == 3)
    assert simcluster_main(["validate", str(case), "--json", "--jobs", "1"]) == 0
    validated = json.loads(capsys.readouterr().out)["cases"][0]
    assert validated["predicted"] == r["simulated_step_s"]
    assert validated["error_pct"] == pytest.approx(r["error_pct"])
    # the profiled step (after the timed ones) is a CPU trace whose matmuls read as GEMMs
    profiled = load_trace(trace)
    assert profiled.level == "cpu_op" and profiled.seconds["gemm"] > 0


def test_the_pipeline_chunks_are_the_simulators_cut_of_the_model():
    """With pp 2 and 2 virtual chunks per stage each rank builds the layers Context.chunks
    gives it (the embedding with the first virtual stage, the final norm and head with the
    last); together the chunks hold every parameter the simulator counts, once."""
    from calibrate.step_model import ModelChunk
    from simcluster.context import build_context
    from simcluster.scenario import scenario_from_dict

    data = {**TINY, "model": {**TINY["model"], "layers": 8},
            "parallel": {"tp": 1, "pp": 2, "vpp": 2, "schedule": "interleaved-zb"}}  # fmt: skip
    ctx = build_context(scenario_from_dict(data))
    chunks = [c for stage in ctx.chunks for c in stage]
    modules = [ModelChunk(ctx.model, 64, c.layer_indices, c.embedding, c.head) for c in chunks]
    assert [len(m.blocks) for m in modules] == [2, 2, 2, 2]
    assert sum(p.numel() for m in modules for p in m.parameters()) == ctx.model.params_total()
    first = next(m for m, c in zip(modules, chunks, strict=True) if c.virtual_stage == 0)
    hidden = first(torch.randint(ctx.model.vocab, (2, 64)))
    assert hidden.shape == (2, 64, ctx.model.hidden)  # hidden states on to the next stage


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"parallel": {"pp": 2, "schedule": "zb-h1"}}, "parallel.schedule"),  # no PyTorch class
        ({"parallel": {"pp": 2}, "model": {"tied_embeddings": True}}, "model.tied_embeddings"),
        ({"parallel": {"pp": 2, "zero": 3}}, "parallel.zero"),  # FSDP2 over one rank
    ],
)
def test_what_the_pipelined_loop_cannot_run_is_a_one_line_error(tmp_path, capsys, changes, field):
    _refused(tmp_path, capsys, changes, field)


def _launch(args: list[str], ranks: int = 2) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    command = TORCHRUN[:-1] + [str(ranks)] + ["-m", "calibrate", "measure-step", *args]
    errors = []
    for _attempt in range(2):  # --standalone's rendezvous port can race under xdist (above)
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        if proc.returncode == 0:
            return json.loads(proc.stdout)
        errors.append(proc.stderr[-3000:])
    raise AssertionError("\n---\n".join(errors))


@pytest.mark.parametrize(("schedule", "vpp"), [("1f1b", 1), ("interleaved-zb", 2), ("zbv-fixed", 1)])
def test_two_gloo_ranks_run_a_pytorch_pipeline_schedule(tmp_path, schedule, vpp):
    """pp 2 on 2 CPU ranks: the chunks as PipelineStages under torch.distributed.pipelining's
    Schedule1F1B, ScheduleInterleavedZeroBubble (four chunks, split backward) and
    ScheduleZBVZeroBubble (the V: rank 0 holds the first and the last chunk); 8 sequences in
    4 microbatches of 2, all on the one pipeline; simulated as framework pytorch-ddp."""
    path = _scenario(tmp_path, model={"layers": 4}, parallel={"pp": 2, "vpp": vpp, "schedule": schedule})
    r = _launch([str(path), "--device", "cpu", "--steps", "2", "--warmup", "1", "--json"])
    assert r["ranks"] == 2 and r["microbatches"] == 4 and len(r["steps_s"]) == 2
    assert r["framework"] == "pytorch-ddp" and r["measured_step_s"] > 0 and r["simulated_step_s"] > 0
    torch_class = {"1f1b": "Schedule1F1B", "interleaved-zb": "ScheduleInterleavedZeroBubble",
                   "zbv-fixed": "ScheduleZBVZeroBubble"}[schedule]  # fmt: skip
    assert r["loop"] == f"torch.distributed.pipelining {torch_class} over 2 stages"  # dp 1: no DDP


def test_four_gloo_ranks_run_fsdp2_under_a_pipeline(tmp_path):
    """pp 2 x dp 2 with zero 3: each stage's chunk fully_shard-ed over its data-parallel pair
    (a DeviceMesh of that group), as torchtitan composes FSDP2 with pipelining; simulated as
    framework torchtitan."""
    path = _scenario(
        tmp_path, model={"layers": 4}, cluster={"gpus": 4}, parallel={"pp": 2, "zero": 3},
        training={"global_batch": 16},
    )  # fmt: skip
    r = _launch([str(path), "--device", "cpu", "--steps", "2", "--warmup", "1", "--json"], ranks=4)
    assert r["ranks"] == 4 and r["microbatches"] == 4 and r["framework"] == "torchtitan"
    assert r["measured_step_s"] > 0


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"parallel": {"tp": 2, "sequence_parallel": False}}, "parallel.sequence_parallel"),
        ({"parallel": {"tp": 2}, "model": {"qk_norm": True}}, "model.qk_norm"),
        ({"parallel": {"tp": 2}, "model": {"tied_embeddings": True}}, "model.tied_embeddings"),
        ({"parallel": {"tp": 2}, "model": {"vocab": 511}}, "model.vocab"),  # row-parallel embedding
        ({"parallel": {"tp": 2}, "cluster": {"gpus": 4}}, "parallel.zero"),  # DDP of DTensors
    ],
)
def test_what_the_tensor_parallel_plan_cannot_run_is_a_one_line_error(tmp_path, capsys, changes, field):
    _refused(tmp_path, capsys, changes, field)


@pytest.mark.parametrize(
    ("ranks", "changes", "framework"),
    [
        (2, {"parallel": {"tp": 2}}, "pytorch-ddp"),
        (4, {"parallel": {"tp": 2, "pp": 2}, "model": {"layers": 4}, "cluster": {"gpus": 4},
             "training": {"global_batch": 16}}, "pytorch-ddp"),
        (4, {"parallel": {"tp": 2, "zero": 3}, "cluster": {"gpus": 4}, "training": {"precision": "bf16"}},
         "torchtitan"),
    ],
)  # fmt: skip
def test_gloo_ranks_run_torchtitans_tensor_parallel_plan(tmp_path, ranks, changes, framework):
    """DTensor TP with sequence parallelism and the vocabulary-parallel loss on 2 CPU ranks;
    with a pipeline (tp 2 x pp 2) and under FSDP2 (tp 2 x dp 2, bf16 autocast) on 4."""
    path = _scenario(tmp_path, **changes)
    r = _launch([str(path), "--device", "cpu", "--steps", "2", "--warmup", "1", "--json"], ranks=ranks)
    assert r["ranks"] == ranks and r["framework"] == framework and r["measured_step_s"] > 0


def test_a_launch_across_nodes_must_place_ranks_as_the_scenario_does(tmp_path):
    """16 ranks as 2 nodes x 8 match a DGX H100 scenario of 16 GPUs; as 4 nodes x 4 they do
    not (the simulation would put 8 in one NVLink domain): one line naming the fix."""
    from calibrate.step_run import check_launch
    from simcluster.context import build_context
    from simcluster.errors import UserError
    from simcluster.scenario import load_scenario

    ctx = build_context(load_scenario(_scenario(tmp_path, cluster={"gpus": 16}, training={"global_batch": 32})))
    check_launch(ctx, 16, 8)
    with pytest.raises(UserError, match="set cluster.gpus_per_node: 4"):
        check_launch(ctx, 16, 4)
    with pytest.raises(UserError, match="the scenario trains on 16 GPUs but 8 rank"):
        check_launch(ctx, 8, 8)


def test_a_case_reads_its_profile_from_any_folder(tmp_path, monkeypatch, capsys):
    """The case measure-step writes names the scenario's profile file as validate reads it
    from the case file's folder (the scenario here names it relative to itself, and is given
    relative to the working directory), into folders it makes."""
    (tmp_path / "step").mkdir()
    (tmp_path / "my-cluster.yaml").write_text((ROOT / "hardware" / "dgx-h100.yaml").read_text())
    data = {**TINY, "cluster": {"hardware": "../my-cluster.yaml", "gpus": 1}}
    (tmp_path / "step" / "tiny.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path)
    quick = ["--device", "cpu", "--steps", "1", "--warmup", "0", "--json"]
    for case, written in (
        (Path("val/sub/case.yaml"), str(tmp_path.resolve() / "my-cluster.yaml")),  # not under it
        (Path("beside.yaml"), "my-cluster.yaml"),  # under the case file's folder: relative
    ):
        assert main(["measure-step", "step/tiny.yaml", *quick, "--case-out", str(case)]) == 0, capsys.readouterr().err
        capsys.readouterr()
        scenario = yaml.safe_load(case.read_text())["cases"][0]["scenario"]
        assert scenario["cluster"]["hardware"] == written
        monkeypatch.chdir("/")
        assert simcluster_main(["validate", str(tmp_path / case), "--json", "--jobs", "1"]) == 0
        assert json.loads(capsys.readouterr().out)["cases"][0]["predicted"] > 0
        monkeypatch.chdir(tmp_path)


def test_the_report_keeps_each_cell_on_one_line_when_piped(capsys, monkeypatch):
    """Under torchrun stdout is a pipe, where Rich's own default is 80 columns: the step time's
    cell with its spread broke over two lines. The report prints on the subcommands' console
    (200 columns on a pipe), so each cell reads whole."""
    from calibrate.step_run import _print

    monkeypatch.delenv("COLUMNS", raising=False)
    _print({"scenario": "tiny-ddp", "ranks": 2, "device": "AMD EPYC", "torch": "2.13.0+cpu",
            "hardware": "calibrated-amd-epyc", "framework": "pytorch-ddp", "steps_s": [0.37108, 0.68988, 0.78165],
            "measured_step_s": 0.68988, "simulated_step_s": 0.17217, "measured_tokens_per_s": 742.0,
            "simulated_tokens_per_s": 2974.0, "error_pct": -75.0, "microbatches": 4, "params": 2032896,
            "loop": "DTensor tensor parallelism over 2 (sequence parallel)"})  # fmt: skip
    out = capsys.readouterr().out
    assert "689.88 ms  (371.08 ms–781.65 ms)" in out
    assert "under DTensor tensor parallelism over 2 (sequence parallel)" in out


def test_lora_freezes_all_but_the_adapters():
    """LoRA (Hu et al. 2021) on the torch model: each targeted Linear k -> n gains A (k x r) and
    B (r x n), the only parameters left trainable; the tiny model (hidden 128, 4 heads, SwiGLU
    FFN 384 (the preset rule 8h/3 rounded), 2 layers) with rank 4 on QKV (128 -> 384) and the
    output projection (128 -> 128): 2 x (4 x (128 + 384) + 4 x (128 + 128)) = 6,144."""
    from calibrate.step_lora import apply_lora, trained
    from simcluster.lora import Adapters, layer_adapter_params

    spec = build_model(TINY["model"])
    adapters = Adapters(rank=4, targets=("qkv", "proj"), dropout=0.1)
    module = apply_lora(Transformer(spec, 64), adapters)
    k_qkv, n_qkv = 128, (spec.heads + 2 * spec.kv_heads) * spec.d_head
    expected = 2 * (4 * (k_qkv + n_qkv) + 4 * (128 + 128))
    assert sum(p.numel() for p in trained(module)) == expected == 2 * layer_adapter_params(spec, adapters, 1)
    # the frozen model is still all there, and a backward fills only the adapters' gradients
    assert sum(p.numel() for p in module.parameters()) == spec.params_total() + expected
    module(torch.randint(512, (1, 64))).sum().backward()
    assert all((p.grad is not None) == p.requires_grad for p in module.parameters())


def test_two_gloo_ranks_train_lora_adapters(tmp_path):
    """Real LoRA steps on 2 CPU ranks under DDP: the adapters are what the optimizer steps and
    DDP reduces; the simulation is of the same scenario with its ``lora:``."""
    data = {key: dict(value) for key, value in TINY.items()}
    data["parallel"] = {**data["parallel"], "zero": 0}
    data["lora"] = {"rank": 4, "targets": ["qkv", "proj", "fc1"], "dropout": 0.1}
    path = tmp_path / "lora.yaml"
    path.write_text(yaml.safe_dump(data))
    args = ["-m", "calibrate", "measure-step", str(path), "--device", "cpu", "--steps", "2", "--warmup", "1", "--json"]
    r = _torchrun_json(args)
    spec = build_model(TINY["model"])
    fc1 = 4 * (128 + spec.up_width(spec.ffn))
    assert r["trained_params"] == 2 * (4 * (128 + 384) + 4 * (128 + 128) + fc1)
    assert r["params"] == spec.params_total() and r["simulated_step_s"] > 0 and r["measured_step_s"] > 0


def test_lora_with_tensor_parallelism_is_refused(tmp_path, capsys):
    data = {key: dict(value) for key, value in TINY.items()}
    # tp 2 on the 2 GPUs: dp 1, which the tensor-parallel plan runs without FSDP2
    data["parallel"] = {"tp": 2, "pp": 1, "zero": 0, "sequence_parallel": True}
    data["lora"] = {"rank": 4}
    path = tmp_path / "lora-tp.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["measure-step", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: lora.rank:") and "without tensor parallelism" in err
