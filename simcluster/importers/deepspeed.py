"""``simcluster import deepspeed``: a DeepSpeed config JSON, with the model from ``--model`` or
``--hf-config`` and the sequence length from ``--seq-len`` (a DeepSpeed config has neither).

Keys as DeepSpeed reads them (``deepspeed/runtime/config.py``, ``zero/config.py``):
``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps`` and ``train_batch_size``
(any two fix the third, as ``_set_batch_related_parameters`` derives it, accumulation 1 when
only one is given; the layout check holds them to agree), ``bf16``/``bfloat16`` and
``fp16`` ``enabled`` (neither: fp32), ``zero_optimization.stage``, its ``stage3_*`` keys and
ZeRO++'s ``zero_hpz_partition_size``/``zero_quantized_*`` (the ``zero3:`` fields their key
aliases name), ``reduce_bucket_size`` (ZeRO-3: ``zero3.reduce_bucket_size`` in elements;
below it ``dp.bucket_mb``, elements x the gradient's bytes), ``overlap_comm``
(``overlap.dp_grad_reduce``), ``offload_optimizer.device: cpu`` or the deprecated
``cpu_offload: true`` (``training.optimizer_offload`` 1.0; parameter offload is refused),
``data_types.grad_accum_dtype`` (``training.fp32_grad_accum``) and
``communication_data_type`` (``dp.reduce_dtype`` at ZeRO 0-2). DeepSpeed's
``activation_checkpointing`` section only configures ``deepspeed.checkpointing.checkpoint``
for models that call it, so whether layers are recomputed is the model code's choice:
it is listed, and ``--set training.recompute=full`` says it; its ``partition_activations``
is ``training.recompute_partitioned`` (a note says so while nothing is recomputed).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simcluster.errors import UserError
from simcluster.importers.options import ImportOptions
from simcluster.importers.result import Imported
from simcluster.key_aliases import KEY_ALIASES

_BATCH = {
    "train_micro_batch_size_per_gpu": "micro_batch", "gradient_accumulation_steps": "grad_accum",
    "train_batch_size": "global_batch",
}  # fmt: skip
#: top-level keys outside a step, by why
_OUTSIDE = {
    "optimizer": "optimizer hyperparameters: its step is costed by the optimizer type (training.optimizer)",
    "scheduler": "learning-rate schedule", "gradient_clipping": "the clipping threshold: the pass is costed whatever it is",
    "steps_per_print": "logging", "wall_clock_breakdown": "logging", "tensorboard": "logging",
    "wandb": "logging", "csv_monitor": "logging", "comms_logger": "logging", "flops_profiler": "profiler",
    "zero_allow_untested_optimizer": "a safety switch", "prescale_gradients": "no scenario field for it",
    "activation_checkpointing": "configures deepspeed.checkpointing.checkpoint only for models that call it; "
    "if yours does, --set training.recompute=full (partition_activations is read: training.recompute_partitioned)",
}  # fmt: skip
_ZERO_OUTSIDE = {
    "contiguous_gradients", "allgather_partitions", "allgather_bucket_size", "reduce_scatter",
    "round_robin_gradients", "sub_group_size", "stage3_gather_16bit_weights_on_model_save",
    "stage3_gather_fp16_weights_on_model_save", "ignore_unused_parameters", "load_from_fp32_weights",
    "elastic_checkpoint", "zero_quantized_nontrainable_weights", "memory_efficient_linear",
}  # fmt: skip


def _number(value: Any, key: str) -> int:
    if value == "auto":
        raise UserError(
            key, "'auto' is filled in by Hugging Face's Trainer; give the number it would use"
        )
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise UserError(key, f"'{value}' is not a whole number")
    return int(value)


def _section(doc: dict[str, Any], key: str) -> dict[str, Any]:
    """``doc[key]`` as a mapping (absent or null: empty); anything else is an error."""
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(key, f"must be a JSON object, not {value!r}")
    return value


def _enabled(doc: dict[str, Any], key: str) -> bool:
    section = doc.get(key)
    if not isinstance(section, dict):
        return False
    value = section.get("enabled", False)
    if value == "auto":
        raise UserError(
            f"{key}.enabled", "'auto' is filled in by Hugging Face's Trainer; give true or false"
        )
    return bool(value)


def import_file(path: Path, options: ImportOptions) -> Imported:
    """The scenario the DeepSpeed config at ``path`` describes, with ``options``' model."""
    options.refuse("DeepSpeed", "variables")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError("FILE", f"{path.name} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise UserError("FILE", f"{path.name} must hold a JSON object")
    out = Imported({}, path.name)
    training = _training(doc, options)
    sc: dict[str, Any] = {
        "framework": options.framework or "deepspeed", "model": options.model_section("--model"),
        "cluster": options.cluster_section(), "parallel": {}, "training": training,
    }  # fmt: skip
    _zero(_section(doc, "zero_optimization"), sc, out)
    accum = _grad_accum_dtype(doc, training)
    wire = _communication_dtype(doc, sc, out)
    if _section(doc, "activation_checkpointing").get("partition_activations") is True:
        training["recompute_partitioned"] = True
    for key in doc:
        if (
            key in _BATCH
            or key in ("bf16", "bfloat16", "fp16", "zero_optimization")
            or (key == "data_types" and accum is not None)
            or (key == "communication_data_type" and wire)
        ):
            continue
        out.skip(key, _OUTSIDE.get(key, "no scenario field for it"))
    out.scenario = {k: v for k, v in sc.items() if v != {}}
    return out


def _training(doc: dict[str, Any], options: ImportOptions) -> dict[str, Any]:
    """``training:``: the sequence length given, the batch sizes as DeepSpeed completes them,
    and the precision."""
    if options.seq_len is None:
        raise UserError(
            "--seq-len", "a DeepSpeed config does not give the sequence length; pass --seq-len N"
        )
    training: dict[str, Any] = {"seq_len": options.seq_len}
    for key, field in _BATCH.items():
        if key in doc:
            training[field] = _number(doc[key], key)
    if "micro_batch" not in training and "global_batch" not in training:
        raise UserError(
            "train_micro_batch_size_per_gpu",
            "the config gives neither it nor train_batch_size; add one (DeepSpeed needs one)",
        )
    if "global_batch" not in training and "grad_accum" not in training:
        training["grad_accum"] = 1  # DeepSpeed's default gradient_accumulation_steps
    if "micro_batch" not in training:
        _derive_micro_batch(training, options.world())
    bf16, fp16 = _enabled(doc, "bf16") or _enabled(doc, "bfloat16"), _enabled(doc, "fp16")
    if bf16 and fp16:
        raise UserError(
            "fp16.enabled", "bf16 and fp16 are both enabled; DeepSpeed refuses that, keep one"
        )
    training["precision"] = "bf16" if bf16 else "fp16" if fp16 else "fp32"
    return training


def _grad_accum_dtype(doc: dict[str, Any], training: dict[str, Any]) -> str | None:
    """``data_types.grad_accum_dtype`` as ``training.fp32_grad_accum``; the dtype, if given."""
    accum = _section(doc, "data_types").get("grad_accum_dtype")
    if accum is not None:
        if accum not in ("fp32", "fp16", "bf16"):
            raise UserError(
                "data_types.grad_accum_dtype",
                f"'{accum}' cannot be imported; known: fp32, fp16, bf16",
            )
        training["fp32_grad_accum"] = accum == "fp32"
    return accum


def _communication_dtype(doc: dict[str, Any], sc: dict[str, Any], out: Imported) -> bool:
    """``communication_data_type`` as ``dp.reduce_dtype`` (the dtype ZeRO 0-2's buckets go on
    the wire in: engine.py and stage_1_and_2.py cast each bucket to it); whether it was taken."""
    value = doc.get("communication_data_type")
    if value is None:
        return False
    precision = sc["training"]["precision"]
    if value not in ("fp32", "fp16", "bf16"):
        raise UserError(
            "communication_data_type", f"'{value}' cannot be imported; known: fp32, fp16, bf16"
        )
    if sc["parallel"]["zero"] == 3 or precision == "fp32":
        out.skip(
            "communication_data_type",
            "read at ZeRO 0-2 with a 16-bit precision only (dp.reduce_dtype); this config's "
            "reductions keep their own dtype",
        )
        return True
    if value != "fp32" and value != precision:
        raise UserError(
            "communication_data_type",
            f"{value} on the wire under {precision} training is a cast simcluster does not "
            f"model; use fp32 or {precision}",
        )
    sc.setdefault("dp", {})["reduce_dtype"] = "fp32" if value == "fp32" else "16bit"
    return True


def _derive_micro_batch(training: dict[str, Any], world: int) -> None:
    """``train_micro_batch_size_per_gpu`` as DeepSpeed derives it (runtime/config.py
    _set_batch_related_parameters: train_batch_size // world_size // gradient_accumulation_steps,
    accumulation 1 when not given), refused where its _batch_assertion would fail; world_size is
    the data-parallel size, all the job's GPUs for a config without model parallelism."""
    accum = training.get("grad_accum", 1)
    if training["global_batch"] % (world * accum):
        raise UserError(
            "train_batch_size",
            f"{training['global_batch']} is not micro-batch x {accum} accumulation steps x {world} "
            "GPUs (DeepSpeed asserts it); check --nodes or give train_micro_batch_size_per_gpu",
        )
    training["micro_batch"] = training["global_batch"] // (world * accum)
    training.setdefault("grad_accum", accum)


def _zero(zero: dict[str, Any], sc: dict[str, Any], out: Imported) -> None:
    """``zero_optimization``: the stage, the ZeRO-3 settings, buckets, overlap and offload."""
    stage = _number(zero.get("stage", 0), "zero_optimization.stage")
    sc["parallel"]["zero"] = stage
    aliases = KEY_ALIASES["zero3"]
    zero3: dict[str, Any] = {}
    for key, value in zero.items():
        where = f"zero_optimization.{key}"
        if key == "stage":
            continue
        if key in aliases:
            # JSON configs often write counts as 1e9: a whole float is the count it names
            whole = isinstance(value, float) and value.is_integer()
            zero3[aliases[key]] = int(value) if whole else value
        elif key == "reduce_bucket_size":
            if stage == 3:
                zero3["reduce_bucket_size"] = value if value == "auto" else _number(value, where)
            else:
                # elements of the gradients DeepSpeed reduces, in the model's 16-bit dtype (fp32 at fp32)
                width = 4 if sc["training"]["precision"] == "fp32" else 2
                sc["dp"] = {"bucket_mb": _number(value, where) * width / 1e6}
        elif key in _ZERO_KEYS:
            _ZERO_KEYS[key](zero, key, sc)
        else:
            out.skip(
                where,
                "no scenario field for it"
                if key not in _ZERO_OUTSIDE
                else "its effect is not modelled separately",
            )
    if zero3:
        sc["zero3"] = zero3


def _overlap_comm(zero: dict[str, Any], key: str, sc: dict[str, Any]) -> None:
    sc.setdefault("overlap", {})["dp_grad_reduce"] = bool(zero[key])


def _offload_optimizer(zero: dict[str, Any], key: str, sc: dict[str, Any]) -> None:
    device = _section(zero, key).get("device", "none")
    if device == "cpu":
        sc["training"]["optimizer_offload"] = 1.0
    elif device not in ("none", None):
        raise UserError(
            f"zero_optimization.{key}.device",
            f"'{device}' cannot be imported; the host CPU's offload (cpu) is modelled",
        )


def _cpu_offload(zero: dict[str, Any], key: str, sc: dict[str, Any]) -> None:
    # zero/config.py: the deprecated cpu_offload: true is offload_optimizer {device: cpu}
    if zero[key] is True:
        sc["training"]["optimizer_offload"] = 1.0


def _cpu_offload_params(zero: dict[str, Any], key: str, sc: dict[str, Any]) -> None:
    if zero[key] is True:  # deprecated for offload_param {device: cpu}
        raise UserError(
            f"zero_optimization.{key}", "parameter offload is not modelled; import without it"
        )


def _offload_param(zero: dict[str, Any], key: str, sc: dict[str, Any]) -> None:
    device = _section(zero, key).get("device", "none")
    if device not in ("none", None):
        raise UserError(
            f"zero_optimization.{key}.device",
            f"'{device}': parameter offload is not modelled; import without it",
        )


#: the zero_optimization keys read into the scenario beside the ZeRO-3 ones, each by its reader
_ZERO_KEYS: dict[str, Callable[[dict[str, Any], str, dict[str, Any]], None]] = {
    "overlap_comm": _overlap_comm,
    "offload_optimizer": _offload_optimizer,
    "cpu_offload": _cpu_offload,
    "cpu_offload_params": _cpu_offload_params,
    "cpu_offload_param": _cpu_offload_params,
    "offload_param": _offload_param,
}
