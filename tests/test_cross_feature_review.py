"""Where today's features meet each other and older ones: properties checkable outside the
simulator (bytes conserved, a memory walk that agrees with the engine's timeline)."""

from __future__ import annotations

import pytest
from engine_helpers import gpt_model, run


def _doc(framework: str | None, zero: int, **sections: dict) -> dict:
    doc: dict = {
        "name": "cross",
        "model": gpt_model(4, 1024, 32000),
        "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "parallel": {"zero": zero},
        "training": {"seq_len": 1024, "micro_batch": 1, "global_batch": 16, "precision": "bf16"},
    }
    if framework:
        doc["framework"] = framework
    for key, value in sections.items():
        doc.setdefault(key, {}).update(value)
    return doc


@pytest.mark.parametrize("framework", [None, "deepspeed", "torchtitan"])
def test_zero3_reduces_each_gradient_once_whatever_overlap_dp_grad_reduce_says(framework):
    """ZeRO-3 reduce-scatters every unit's gradient as its backward ends (DeepSpeed stage3.py
    ``reduce_partition_and_remove_grads``, FSDP's post-backward hook), with or without
    DeepSpeed's ``overlap_comm`` (which picks the stream, not whether to reduce). So a step
    reduce-scatters each local gradient element once per microbatch: 2 bytes (bf16) x the
    parameters of one GPU's model copy x microbatches, with overlap.dp_grad_reduce false as
    with true. The engine once added ZeRO 0-1's bucket reduction after the backward at ZeRO-3
    too: every gradient reduced a second time (``simcluster import deepspeed`` writes
    overlap_comm false that way, DeepSpeedExamples' alpaca-lora ZeRO-3 config)."""
    per_mb = {}
    for overlap in (True, False):
        res = run(_doc(framework, 3, overlap={"dp_grad_reduce": overlap}))
        ev = res.events[(res.events["rank"] == 0) & (res.events["kind"] == "reduce_scatter")]
        assert set(ev["name"]) == {"zero3_grad_reduce_scatter"}
        per_mb[overlap] = ev.groupby("microbatch")["bytes"].sum().to_dict()
    assert per_mb[False] == per_mb[True]
    assert len(per_mb[True]) == 2  # 16 sequences on 8 GPUs at micro-batch 1: two microbatches


def _params_heavy(framework: str, zero: int, **sections: dict) -> dict:
    """Short sequences on a wide model: the step's end (gradients and a bucket's copies) is
    the memory peak, not the forward's stash."""
    doc = _doc(framework, zero, **sections)
    doc["model"] = gpt_model(8, 2048, 32000)
    doc["training"]["seq_len"] = 128
    return doc


def _walk_and_engine(doc: dict) -> tuple[float, float, object]:
    from simcluster.context import build_context
    from simcluster.memory_report import memory_summary
    from simcluster.scenario import scenario_from_dict

    ctx = build_context(scenario_from_dict(doc))
    walk = memory_summary(ctx)["total_bytes"]
    return walk, run(doc).summary["peak_memory_bytes"]["max"], ctx


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_memory_walk_counts_deepspeeds_bucket_copies_as_the_engine_does(precision):
    """DeepSpeed ZeRO-1 reduces after the backward (overlap_comm false), each bucket through a
    new tensor held until the reduction is copied back: under bf16 the BF16_Optimizer's fp32
    group cast to bf16 (engine.py allreduce_bucket: ``tensor.to(communication_data_type)``, 2 B
    an element), under fp16 the flattened .grad tensors (``self.flatten(bucket)``, 2 B an
    element). ``simcluster memory`` (and the fit hints and sweep --fitting-only built on it)
    walks to the same peak as the simulated timeline, which is the static memory plus the
    largest bucket's copy at the step's end; the walk once left the copy out (up to a whole
    stage's parameters x 2 B: BLOOM 176B's stage 0 walked 0.2 GiB under its timeline)."""
    from simcluster.engine.plan import chunk_reduction_copies
    from simcluster.memory import stage_params, static_memory
    from simcluster.parallelism.data import reduction_working_bytes

    walk, engine, ctx = _walk_and_engine(_params_heavy("deepspeed", 1, training={"precision": precision}))
    assert walk == pytest.approx(engine, rel=1e-12)
    chunks = ctx.chunks[0]
    params = stage_params(ctx.model, ctx.layout, chunks)
    static = sum(static_memory(ctx.model, ctx.layout, ctx.scenario.training, params))
    static += sum(reduction_working_bytes(ctx.scenario, ctx.model, ctx.layout, chunks, params.total))
    static += ctx.scenario.training.memory_overhead_gib * 2**30
    largest = max(size for chunk in chunk_reduction_copies(ctx, 0, chunks) for _, size in chunk)
    if precision == "bf16":
        # the BF16_Optimizer's one flat fp32 group (allreduce_no_retain never splits a tensor)
        assert largest == pytest.approx(2.0 * params.total, rel=1e-12)
    else:
        # DeepSpeedZeroOptimizer's buckets close once they reach reduce_bucket_size (5e8
        # elements) at a tensor's end: the first holds 5e8 elements or more (here the embedding,
        # last in backward order, closes it with every parameter in)
        assert 2.0 * 5e8 <= largest <= 2.0 * params.total
    assert walk == pytest.approx(static + largest, rel=1e-12)


@pytest.mark.parametrize(
    ("zero", "sections"),
    [(1, {"overlap": {"dp_grad_reduce": True}}), (2, {"dp": {"reduce_dtype": "fp32"}})],
)
def test_the_memory_walk_counts_bucket_copies_held_during_the_backward_where_the_engine_does(zero, sections):
    """Reduced during the backward (overlapped ZeRO-1, or ZeRO-2's every microbatch) a bucket's
    copy sits beside a stash that its backward is freeing, layer by layer: the walk counts each
    bucket's copy on the stash left when the bucket closes (``engine.plan.chunk_reduction_copies``),
    the engine's peak to the byte. It once counted the copies on the stash at the op's start,
    over the timeline's peak by up to that op's activations (a fuzzed DeepSpeed ZeRO-0 layout:
    21.097 GB walked, 20.946 GB simulated)."""
    walk, engine, _ = _walk_and_engine(_params_heavy("deepspeed", zero, **sections))
    assert walk == pytest.approx(engine, rel=1e-12)


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_a_bucket_copy_made_as_its_layer_frees_the_stash_is_walked_on_what_is_left(recompute):
    """With many small buckets (dp.bucket_mb 10) on a pipeline stage, each bucket's copy is made
    as the last backward reaches the layer it closes on, when the layers after it have freed
    their stash (a bucket closing on a layer's MLP weights goes out before that layer's
    attention backward frees it). The walk once charged every copy on the whole stash at the
    op's start: stage 0 of this layout walked 2.104 GB against a 2.089 GB timeline (found by
    the walk-against-timeline check, memory_report.timeline_fault)."""
    doc = _doc("deepspeed", 1, overlap={"dp_grad_reduce": True}, dp={"bucket_mb": 10})
    doc["model"] = gpt_model(8, 1024, 32000)
    doc["parallel"].update(pp=2, schedule="1f1b")
    doc["training"].update(seq_len=256, recompute=recompute)
    walk, engine, ctx = _walk_and_engine(doc)
    assert walk == pytest.approx(engine, rel=1e-12)
    from simcluster.engine.plan import chunk_reduction_copies

    shares = [share for share, _ in chunk_reduction_copies(ctx, 0, ctx.chunks[0])[0]]
    # in backward order: the last layer's MLP buckets before anything is freed, the embedding's last
    assert len(shares) > 4 and shares == sorted(shares) and shares[0] == 0.0 and shares[-1] == 1.0


@pytest.mark.parametrize(
    ("written", "unset"),
    [
        ([("training.recompute_modules", ["core_attn", "layernorm", "mlp"])], "training.recompute_modules"),
        ([("training.recompute", "full"), ("training.recompute_num_layers", 16)], "training.recompute_num_layers"),
    ],
)
def test_the_lighter_recompute_hint_unsets_what_the_lighter_one_refuses_and_its_layout_fits(cli, written, unset):
    """Megatron's recompute_modules belong to selective recomputation and recompute_num_layers
    to full (the layout checks refuse either beside another, as arguments.py does), so a
    scenario that writes them (DeepSeek-V3's layernorm / mla_up_proj / moe_act) got no hint at
    all: `--set training.recompute=none` alone is refused. The hint now unsets the companion
    (today's `--set KEY=null`), its printed compare command parses, and the layout it names
    simulates within the GPU's memory at the walk's peak."""
    import json

    from simcluster.engine import simulate
    from simcluster.fit_hints import lighter_recompute
    from simcluster.scenario import load_scenario

    name = "llama3-8b-8xh100"
    hint = lighter_recompute(load_scenario(name, written))
    assert hint is not None and hint.change == "training.recompute=none" and hint.unset == (unset,)
    changed = load_scenario(name, [*written, ("training.recompute", "none"), (unset, None)])
    summary = simulate(changed).summary
    assert summary["fits_in_memory"]
    assert summary["peak_memory_bytes"]["max"] == pytest.approx(hint.total_bytes, rel=1e-9)
    args = [f"--set={key}={json.dumps(value).replace(' ', '')}" for key, value in written]
    res = cli("run", name, *args)
    assert res.code == 0, res.err
    said = " ".join(res.out.split())
    assert f"--set training.recompute=none --set {unset}=null fits" in said
    assert f"{name}@training.recompute=none@{unset}=null" in said


def test_the_would_fit_hints_offer_full_recomputation_beside_written_recompute_modules():
    """A layout too big under Megatron's selective recomputation with its modules listed is
    offered full recomputation with the list unset (refused beside it, context.py), priced by
    the walk of exactly that change; the memory table prints both --set items."""
    from conftest import make_scenario

    from simcluster.commands.memory import hint_line
    from simcluster.context import build_context
    from simcluster.fit_hints import fitting_changes
    from simcluster.memory_report import memory_summary
    from simcluster.scenario import scenario_from_dict

    raw = make_scenario(
        model={"name": "m", "layers": 4, "hidden": 4096, "heads": 32, "ffn": 16384, "vocab": 32000,
               "max_positions": 8192},
        cluster={"hardware": "dgx-h100", "gpus": 8, "profile": {"gpu": {"memory_gib": 32}}},
        parallel={"tp": 1, "pp": 1, "zero": 0},
        training={"seq_len": 8192, "micro_batch": 4, "global_batch": 32, "recompute": "selective",
                  "recompute_modules": ["core_attn"]},
    )  # fmt: skip
    # the cheaper changes come first (zero 1, micro-batch 2, tp 2, pp 2): all of them asked for
    hints = [h.record() for h in fitting_changes(scenario_from_dict(raw), most=10)]
    full = [h for h in hints if h["change"] == "training.recompute=full"]
    assert full and full[0]["unset"] == ["training.recompute_modules"]
    changed = scenario_from_dict(raw, [("training.recompute", "full"), ("training.recompute_modules", None)])
    assert full[0]["total_bytes"] == memory_summary(build_context(changed))["total_bytes"]
    assert "--set training.recompute=full --set training.recompute_modules=null (" in hint_line(full)


def test_a_hints_command_is_not_broken_across_lines_on_a_narrow_console(cli, monkeypatch):
    """On an 80-column terminal Rich wrapped the hint with newlines inside the compare command,
    so a copied command ran as two shell lines; printed soft-wrapped, the terminal folds it for
    display and the text stays one line, as `wrote ...` already was."""
    import shlex

    monkeypatch.setenv("COLUMNS", "80")
    res = cli("run", "llama3-8b-8xh100", "--set", "training.recompute=full")
    assert res.code == 0, res.err
    line = next(x for x in res.out.splitlines() if "compare: simcluster compare " in x)
    command = line.split("compare: simcluster compare ", 1)[1]
    assert command.endswith("--set training.recompute=full)"), line
    assert shlex.split(command.rstrip(")"))[:2] == ["llama3-8b-8xh100", "llama3-8b-8xh100@training.recompute=none"]
    fits = next(x for x in res.out.splitlines() if x.startswith("recomputation is "))
    assert fits == line and len(line) > 80


def test_the_lighter_recompute_hints_compare_command_reruns_a_scenario_file(cli, tmp_path, monkeypatch):
    """A scenario given as a file is compared as that file (`compare` finds only shipped names,
    so the scenario's own name failed), with the run's --set on both sides and the variant's
    change after them: the command `run` prints runs as printed."""
    import shlex

    from simcluster.scenario.loading import resolve_scenario_path

    monkeypatch.setenv("COLUMNS", "1000")  # one line: the command is read back whole
    path = tmp_path / "mine.yaml"
    text = resolve_scenario_path("llama3-8b-8xh100").read_text()
    path.write_text(text.replace("name: llama3-8b-8xh100", "name: my-llama"))
    res = cli("run", str(path), "--set", "training.recompute=full")
    assert res.code == 0, res.err
    line = next(x for x in res.out.splitlines() if "compare: simcluster compare " in x)
    command = line.split("compare: simcluster compare ", 1)[1].rstrip(")")
    argv = shlex.split(command)
    assert argv[:2] == [str(path), f"{path}@training.recompute=none"]
    assert argv[2:] == ["--set", "training.recompute=full"]
    again = cli("compare", *argv, "--json")
    assert again.code == 0, again.err
