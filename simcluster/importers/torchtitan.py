"""``simcluster import torchtitan``: a torchtitan TOML job config.

What each key means is torchtitan's (``torchtitan/config/job_config.py``, and ``[training]`` /
``[experimental]`` where older releases kept the parallel degrees):

- ``[model] name`` + ``flavor`` name the shipped preset (``llama3`` ``8B`` is ``llama3-8b``; its
  ``405B`` flavour is Llama 3.1's); ``converters`` ``float8`` / ``mx`` (or their ``quantize.linear.*``
  spellings) train the linears in FP8 with current scaling or MXFP8 blocks
  (``torchtitan_quant.py``);
- ``data_parallel_shard_degree`` > 1 is FSDP2 (ZeRO-3; -1: the GPUs left over), with
  ``data_parallel_replicate_degree`` > 1 HSDP (``parallel.zero_shard``); shard degree 1 with
  replicas is DDP (ZeRO-0); under FSDP2 ``fsdp_reshard_after_forward`` ``always`` / ``never`` is
  ``zero3.reshard_after_forward`` true / false (``default``: torchtitan's policy, the field's
  default). Its TP plan shards the norms' sequence (sequence parallelism), and
  ``enable_async_tensor_parallel`` overlaps its collectives (``overlap.tp_comm``, as
  scenarios/llama3-70b-128xh100-fsdp-tp-pp.yaml writes it; the framework preset makes it
  PyTorch's async TP); ``context_parallel_rotate_method`` is ``parallel.cp_comm`` (allgather
  ``all_gather``, the default; alltoall the ring ``p2p``);
- a multi-stage ``pipeline_parallel_schedule`` runs two stages per rank unless
  ``pipeline_parallel_layers_per_stage`` says otherwise (``pipeline_module_split``);
  ``pipeline_parallel_microbatch_size`` (default 1) is the micro-batch under a pipeline, older
  releases' ``pipeline_parallel_microbatches`` the count (the framework preset's default);
- ``local_batch_size`` (older ``batch_size``) per data-parallel rank, ``global_batch_size``
  (-1: local x dp) with gradient accumulation, ``seq_len``; ``mixed_precision_param`` the
  compute dtype (bfloat16 by default); ``mixed_precision_reduce`` FSDP2's reduce dtype
  (float32: ``training.fp32_grad_accum``'s default; bfloat16: false);
- ``[activation_checkpoint] mode`` full or selective, ``selective_ac_option`` ``op`` (its
  op-level policy, ``recompute: op``) or N (every N-th block whole: full recomputation of
  1/N of each pipeline chunk's layers, as validation/torchtitan-a100.yaml models 'selective
  layer');
- ``[compile] enable`` (older ``[training] compile``) fuses norms and rotary (``elementwise``
  ``fused``, the loss compiled too); ``[compile] components`` without ``"loss"`` compiles the
  blocks only (``compiled-blocks``), as ``[training] compile`` did between pytorch/torchtitan#755
  (2024-12-19) and #1033 (2025-04-01), which a TOML does not tell apart (a note says so).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tomllib

from simcluster.errors import UserError
from simcluster.importers import torchtitan_quant
from simcluster.importers.options import ImportOptions
from simcluster.importers.result import Imported
from simcluster.importers.run_length import run_tokens

#: torchtitan's schedule names (torch.distributed.pipelining) -> simcluster's
SCHEDULES = {
    "1F1B": "1f1b", "GPipe": "afab", "Interleaved1F1B": "interleaved", "LoopedBFS": "looped-bfs",
    "InterleavedZeroBubble": "interleaved-zb", "ZBVZeroBubble": "zbv-fixed", "DualPipeV": "dualpipev",
}  # fmt: skip
_SINGLE_STAGE = {"1F1B", "GPipe"}
#: the V schedules: two stages per rank, folded as a V (simcluster's V schedules take no vpp)
_V_SHAPED = {"ZBVZeroBubble", "DualPipeV"}
#: context_parallel_rotate_method -> parallel.cp_comm: "allgather" gathers every K/V shard at
#: once (the framework preset's default, as torchtitan's), "alltoall" passes them on step by
#: step, a ring
_ROTATE = {"allgather": "all_gather", "alltoall": "p2p"}
#: parallelism.expert_parallel_comm_backend -> moe.dispatcher: "standard" (the default) is its
#: ExpertParallel, all_to_all_single over each token's top_k copies; "deepep" and "hybridep" its
#: torchtitan/distributed/deepep dispatchers (DeepEP's normal kernels, NVIDIA's HybridEP)
_EP_BACKENDS = {"standard": "alltoall", "deepep": "deepep", "hybridep": "hybridep"}
_PRECISIONS = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}
#: (name, flavor) whose preset is not name-flavor
_PRESETS = {
    ("llama3", "405B"): "llama3.1-405b",
    # torchtitan/experiments/llama4 llama4_configs: 17bx16e is Scout (16 experts), 17bx128e
    # Maverick (128, MoE every second layer); models/deepseek_v3 deepseekv3_configs["671B"]
    ("llama4", "17bx16e"): "llama4-scout",
    ("llama4", "17bx128e"): "llama4-maverick",
    ("deepseek_v3", "671B"): "deepseek-v3",
}
#: sections (and keys) read here; any other key is listed as not imported
_READ = {
    "model": {"name", "flavor", "converters"},
    "parallelism": {
        "data_parallel_shard_degree", "data_parallel_replicate_degree", "tensor_parallel_degree",
        "pipeline_parallel_degree", "pipeline_parallel_schedule", "context_parallel_degree",
        "expert_parallel_degree", "expert_tensor_parallel_degree", "enable_async_tensor_parallel",
        "context_parallel_rotate_method", "expert_parallel_comm_backend",
        "pipeline_parallel_microbatch_size", "pipeline_parallel_microbatches", "pipeline_parallel_layers_per_stage",
        "fsdp_reshard_after_forward",
        "mixed_precision_param", "mixed_precision_reduce", "data_parallel_degree",
    },
    "training": {"local_batch_size", "batch_size", "global_batch_size", "seq_len", "mixed_precision_param", "compile"},
    "activation_checkpoint": {"mode", "selective_ac_option"},
    "compile": {"enable", "components"},
}  # fmt: skip
_READ["training"] |= _READ["parallelism"]  # older releases kept the degrees under [training]
_READ["experimental"] = set(_READ["parallelism"])
#: keys outside a step, by why
_KEY_REASONS = {
    "tokenizer_path": "tokenizer files", "hf_assets_path": "tokenizer and checkpoint files",
    "steps": "run length", "dataset": "training data", "dataset_path": "training data",
    "max_norm": "the clipping threshold: the clipping pass is costed whatever it is",
    "seed": "a training hyperparameter", "deterministic": "reproducibility switch",
}  # fmt: skip
_OUTSIDE = {
    "job": "the run's name and folders", "profiling": "profiler settings", "metrics": "logging",
    "optimizer": "optimizer hyperparameters: AdamW's step is costed whatever they are",
    "lr_scheduler": "learning-rate schedule", "checkpoint": "checkpoint input/output",
    "validation": "evaluation outside the step", "comm": "process-group timeouts and tracing",
    "memory_estimation": "a tool outside training",
}  # fmt: skip


def _get(doc: dict[str, Any], key: str, *sections: str) -> Any:
    """``key`` from the first of ``sections`` that has it (releases moved keys between them)."""
    for section in sections:
        table = doc.get(section)
        if isinstance(table, dict) and key in table:
            return table[key]
    return None


#: the tables a parallelism key may sit in (releases moved them between these)
_PAR = ("parallelism", "training", "experimental")


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(where, f"'{value}' is not a whole number")
    return value


def import_file(path: Path, options: ImportOptions) -> Imported:
    """The scenario the torchtitan TOML at ``path`` describes."""
    options.refuse("torchtitan", "seq-len", "variables")
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UserError("FILE", f"{path.name} is not TOML: {exc}") from None
    out = Imported({}, path.name)
    model, layers = _model(doc, options)
    parallel, dp = _parallel(doc, options.world())
    training: dict[str, Any] = {}
    overlap: dict[str, Any] = {}
    if _get(doc, "enable_async_tensor_parallel", *_PAR):
        overlap["tp_comm"] = True
    _pipeline(doc, parallel, training, layers, out)
    _batch(doc, parallel, training, dp)
    _precision(doc, training)
    _reduce_dtype(doc, parallel, training)
    # training.recompute_num_layers counts the layers of one pipeline chunk: every N-th of them
    # (a V schedule's two stages a rank are two chunks)
    v_shaped = parallel.get("schedule") in {SCHEDULES[name] for name in _V_SHAPED}
    chunks = 2 if v_shaped else parallel.get("vpp", 1)
    _recompute(doc, training, layers // (parallel["pp"] * chunks))
    style = _compiled_style(doc)
    if style is not None:
        training["elementwise"] = style
    if _get(doc, "compile", "training") is True:
        out.notes.append(
            "[training] compile: the loss compiled too (fused); releases from pytorch/torchtitan#755 "
            "(2024-12-19) to #1033 (2025-04-01) left it uncompiled: training.elementwise compiled-blocks"
        )
    out.scenario = {
        "framework": options.framework or "torchtitan",
        "model": model,
        "cluster": options.cluster_section(),
        "parallel": parallel,
        "training": training,
    }
    if overlap:
        out.scenario["overlap"] = overlap
    if dispatcher := _dispatcher(doc, parallel):
        out.scenario["moe"] = {"dispatcher": dispatcher}
    if (reshard := _reshard_after_forward(doc, parallel)) is not None:
        out.scenario["zero3"] = {"reshard_after_forward": reshard}
    out.run_tokens = run_tokens(
        training.get("seq_len"), training.get("global_batch"), iters=_get(doc, "steps", "training"),
        names=("", "[training] steps"),
    )
    _unread(doc, out)
    return out


#: fsdp_reshard_after_forward -> zero3.reshard_after_forward ("default": the field's own default,
#: not after the forward with a pipeline, after it without, as torchtitan's parallelize decides)
_RESHARD = {"always": True, "never": False, "default": None}


def _reshard_after_forward(doc: dict[str, Any], parallel: dict[str, Any]) -> bool | None:
    """``zero3.reshard_after_forward`` from ``fsdp_reshard_after_forward`` under FSDP2 (zero 3),
    None for its default policy or without FSDP."""
    policy = _get(doc, "fsdp_reshard_after_forward", *_PAR)
    if policy is None or parallel.get("zero") != 3:
        return None
    if policy not in _RESHARD:
        raise UserError(
            "parallelism.fsdp_reshard_after_forward", f"'{policy}' cannot be imported; known: {', '.join(_RESHARD)}"
        )
    return _RESHARD[policy]


def _dispatcher(doc: dict[str, Any], parallel: dict[str, Any]) -> str | None:
    """``moe.dispatcher`` from ``expert_parallel_comm_backend`` with expert parallelism (its
    backends run only there), None where it is the default all-to-all."""
    backend = _get(doc, "expert_parallel_comm_backend", *_PAR)
    if backend is None or parallel.get("ep", 1) == 1:
        return None
    if backend not in _EP_BACKENDS:
        raise UserError(
            "parallelism.expert_parallel_comm_backend",
            f"'{backend}' cannot be imported; known: {', '.join(_EP_BACKENDS)}",
        )
    dispatcher = _EP_BACKENDS[backend]
    return None if dispatcher == "alltoall" else dispatcher


def _parallel(doc: dict[str, Any], world: int) -> tuple[dict[str, Any], int]:
    """``parallel:`` from the degrees on ``world`` GPUs, and the data-parallel degree."""
    degree = {
        k: _int(_get(doc, f"{k}_degree", *_PAR) or 1, f"parallelism.{k}_degree")
        for k in ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel")
    }
    tp, pp, cp, ep = degree.values()
    replicate = _int(
        _get(doc, "data_parallel_replicate_degree", *_PAR) or 1,
        "parallelism.data_parallel_replicate_degree",
    )
    # the first releases' data_parallel_degree was the FSDP degree
    shard = _int(
        _get(doc, "data_parallel_shard_degree", *_PAR)
        or _get(doc, "data_parallel_degree", *_PAR)
        or -1,
        "parallelism.data_parallel_shard_degree",
    )
    dp, shard = _data_parallel(world, tp * pp * cp, shard, replicate)
    parallel: dict[str, Any] = {
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "dp": dp,
        "zero": 3 if shard > 1 else 0,
    }
    if ep > 1:
        parallel["ep"] = ep
    etp = _get(doc, "expert_tensor_parallel_degree", *_PAR)
    if etp is not None and ep > 1:
        parallel["etp"] = _int(etp, "parallelism.expert_tensor_parallel_degree")
    if shard > 1 and replicate > 1:
        parallel["zero_shard"] = shard
    if tp > 1:
        parallel["sequence_parallel"] = True  # its TP plan: SequenceParallel on the norms
    rotate = _get(doc, "context_parallel_rotate_method", *_PAR)
    if cp > 1 and rotate is not None:
        if rotate not in _ROTATE:
            raise UserError(
                "parallelism.context_parallel_rotate_method",
                f"'{rotate}' cannot be imported; known: {', '.join(_ROTATE)}",
            )
        parallel["cp_comm"] = _ROTATE[rotate]
    return parallel, dp


def _data_parallel(world: int, group: int, shard: int, replicate: int) -> tuple[int, int]:
    """The data-parallel degree ``world`` GPUs leave in tp x pp x cp = ``group`` groups, and
    the FSDP ``shard`` degree (-1: what ``replicate`` leaves of it), checked against it."""
    if world % group:
        raise UserError(
            "--nodes",
            f"{world} GPUs are not a whole number of tp x pp x cp = {group} groups",
        )
    dp = world // group
    if shard == -1:
        shard = dp // replicate
    if shard * replicate != dp:
        raise UserError(
            "parallelism.data_parallel_shard_degree",
            f"{shard} x replicate {replicate} is not the {dp} data-parallel ranks {world} GPUs leave; check --nodes",
        )
    return dp, shard


def _model(doc: dict[str, Any], options: ImportOptions) -> tuple[dict[str, Any], int]:
    from simcluster.model import load_preset, resolve_preset_name

    if options.model or options.hf_config:
        section = options.model_section("model")
    else:
        name, flavor = _get(doc, "name", "model"), _get(doc, "flavor", "model")
        if not isinstance(name, str) or not isinstance(flavor, str):
            raise UserError(
                "model.name", "the config names no model and flavor; pass --model PRESET"
            )
        preset = _PRESETS.get((name, flavor), f"{name}-{flavor}".lower().replace("_", "-"))
        resolved = resolve_preset_name(preset)
        from simcluster.model import preset_names

        if resolved not in preset_names():
            raise UserError(
                "model.flavor",
                f"torchtitan's {name} {flavor} is not a shipped preset; pass --model PRESET or --hf-config PATH",
            )
        section = {"preset": resolved}
    if "preset" in section:
        layers = load_preset(section["preset"], "--model").layers
    else:
        from simcluster.model import build_model

        layers = build_model(dict(section), options.hf_parsed).layers
    return section, layers


def _pipeline(
    doc: dict[str, Any],
    parallel: dict[str, Any],
    training: dict[str, Any],
    layers: int,
    out: Imported,
) -> None:
    pp = parallel["pp"]
    if pp <= 1:
        return
    name = _get(doc, "pipeline_parallel_schedule", *_PAR) or "1F1B"
    if name not in SCHEDULES:
        raise UserError(
            "parallelism.pipeline_parallel_schedule",
            f"'{name}' cannot be imported; known: {', '.join(SCHEDULES)}",
        )
    parallel["schedule"] = SCHEDULES[name]
    per_stage = _get(doc, "pipeline_parallel_layers_per_stage", *_PAR)
    if name not in _SINGLE_STAGE:
        stages = (
            math.ceil(layers / _int(per_stage, "parallelism.pipeline_parallel_layers_per_stage"))
            if per_stage
            else 2 * pp
        )
        if stages % pp:
            raise UserError(
                "parallelism.pipeline_parallel_layers_per_stage",
                f"{stages} stages are not a whole number per rank of {pp}",
            )
        if name in _V_SHAPED and stages != 2 * pp:
            raise UserError(
                "parallelism.pipeline_parallel_layers_per_stage",
                f"{name} runs 2 stages per rank, a V ({stages} stages over {pp} ranks given)",
            )
        if name not in _V_SHAPED:
            parallel["vpp"] = stages // pp
        if per_stage:
            out.notes.append(
                "pipeline_parallel_layers_per_stage: the stages counted over the transformer blocks only"
            )
    _pipeline_microbatches(doc, training)


def _pipeline_microbatches(doc: dict[str, Any], training: dict[str, Any]) -> None:
    """The pipeline's microbatch: its size, else its count, else size 1 (torchtitan's
    default) where the config gives a local batch to cut."""
    size = _get(doc, "pipeline_parallel_microbatch_size", *_PAR)
    count = _get(doc, "pipeline_parallel_microbatches", *_PAR)
    if size is not None:
        training["micro_batch"] = _int(size, "parallelism.pipeline_parallel_microbatch_size")
    elif count is not None:
        training["pipeline_microbatches"] = _int(
            count, "experimental.pipeline_parallel_microbatches"
        )
    elif _get(doc, "local_batch_size", "training") is not None:
        training["micro_batch"] = 1  # pipeline_parallel_microbatch_size's default


def _batch(
    doc: dict[str, Any], parallel: dict[str, Any], training: dict[str, Any], dp: int
) -> None:
    local = _get(doc, "local_batch_size", "training")
    if local is None:
        local = _get(doc, "batch_size", "training")
    local = _int(
        local if local is not None else 8, "training.local_batch_size"
    )  # job_config default 8
    seq = _get(doc, "seq_len", "training")
    training["seq_len"] = _int(seq if seq is not None else 2048, "training.seq_len")  # default 2048
    global_batch = _get(doc, "global_batch_size", "training")
    global_batch = (
        local * dp
        if global_batch in (None, -1)
        else _int(global_batch, "training.global_batch_size")
    )
    count = training.pop("pipeline_microbatches", None)
    if count is not None:
        if local % count:
            raise UserError(
                "experimental.pipeline_parallel_microbatches",
                f"{count} does not divide the local batch {local}",
            )
        training["micro_batch"] = local // count
    elif parallel["pp"] <= 1:
        training["micro_batch"] = local
    training["global_batch"] = global_batch


def _precision(doc: dict[str, Any], training: dict[str, Any]) -> None:
    param = _get(doc, "mixed_precision_param", "training", "parallelism") or "bfloat16"
    if param not in _PRECISIONS:
        raise UserError(
            "training.mixed_precision_param",
            f"'{param}' cannot be imported; known: {', '.join(_PRECISIONS)}",
        )
    training["precision"] = _PRECISIONS[param]
    torchtitan_quant.apply(doc, training)


def _reduce_dtype(doc: dict[str, Any], parallel: dict[str, Any], training: dict[str, Any]) -> None:
    """``mixed_precision_reduce``: FSDP2's reduce dtype (``MixedPrecisionPolicy.reduce_dtype``).
    float32, its default (the only choice in its first releases), is ``training.fp32_grad_accum``'s
    default; bfloat16 (allowed by later releases) reduce-scatters, and under a pipeline
    accumulates unsharded, in 16 bits: ``fp32_grad_accum`` false (the sharded gradient stays
    fp32 either way, as FSDP2 casts the reduce-scatter's output back to the parameters' dtype:
    ``memory.fsdp2_bytes_per_param``). Without FSDP2 it does nothing (torchtitan's own help:
    "only takes effect when data_parallel_shard_degree > 1")."""
    reduce = _get(doc, "mixed_precision_reduce", "training", "parallelism")
    if reduce is not None and reduce not in ("float32", "bfloat16"):
        raise UserError(
            "training.mixed_precision_reduce",
            f"'{reduce}' cannot be imported; known: float32, bfloat16",
        )
    if reduce == "bfloat16" and parallel.get("zero") == 3:
        training["fp32_grad_accum"] = False


def _compiled_style(doc: dict[str, Any]) -> str | None:
    """``training.elementwise`` for torchtitan's torch.compile switch, None when it is off.

    ``[compile] enable`` compiles what ``components`` lists, each transformer block
    (``apply_compile``) and the loss by default (``job_config.Compile``,
    ``BaseLoss._maybe_compile``); ``[training] compile`` compiled both from
    pytorch/torchtitan#1033 (``build_cross_entropy_loss``) on, and before #755 turned the
    loss's compile off ("TODO: compiling loss function causes CUDA errors")."""
    if _get(doc, "compile", "training") is True:
        return "fused"
    if not _get(doc, "enable", "compile"):
        return None
    components = _get(doc, "components", "compile")
    if components is None:
        components = ["model", "loss"]
    if isinstance(components, str):
        components = [part.strip() for part in components.split(",")]
    if "model" not in components:
        return None  # a compiled loss alone: the blocks stay eager (the loss's own kernels not modelled)
    return "fused" if "loss" in components else "compiled-blocks"


def _recompute(doc: dict[str, Any], training: dict[str, Any], layers: int) -> None:
    mode = _get(doc, "mode", "activation_checkpoint") or "selective"  # job_config default
    if mode == "none":
        training["recompute"] = "none"
    elif mode == "full":
        training["recompute"] = "full"
    elif mode == "selective":
        option = str(_get(doc, "selective_ac_option", "activation_checkpoint") or "2")
        if option == "op":
            training["recompute"] = "op"
        elif option.isdigit() and int(option) > 0:
            training["recompute"] = "full"
            if int(option) > 1:
                training["recompute_num_layers"] = layers // int(option)
        else:
            raise UserError(
                "activation_checkpoint.selective_ac_option",
                f"'{option}' is neither 'op' nor a whole number",
            )
    else:
        raise UserError(
            "activation_checkpoint.mode",
            f"'{mode}' cannot be imported; known: none, selective, full",
        )


def _unread(doc: dict[str, Any], out: Imported) -> None:
    for name in torchtitan_quant.unknown(doc):
        out.skip(f"model.converters {name}", "no scenario field for it")
    for section, table in _sections(doc):
        if section in _OUTSIDE:
            out.skip(f"[{section}]", _OUTSIDE[section])
            continue
        quant = section in torchtitan_quant.TABLES or section.startswith("quantize.")
        if quant and not torchtitan_quant.is_on(doc, section):
            out.skip(f"[{section}]", f"{section} is off: model.converters does not list it")
            continue
        read = torchtitan_quant.READ_KEYS if quant else _READ.get(section, set())
        keys = table.items() if isinstance(table, dict) else [("", table)]
        for key, value in keys:
            if quant and key == "filter_fqns" and value in ("output", ["output"]):
                continue  # the LM head left in 16-bit: what training.precision fp8 costs
            if key not in read:
                out.skip(
                    f"{section}.{key}" if key else section,
                    _KEY_REASONS.get(key, "no scenario field for it"),
                )


def _sections(doc: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The TOML's tables by dotted name: its top-level ones, and ``[quantize.*.*]``'s each."""
    for section, table in doc.items():
        if section != "quantize":
            yield section, table
    yield from ((name, t) for name, t in torchtitan_quant.tables(doc) if name.startswith("quantize."))
