"""``simcluster import megatron``: a Megatron-LM / Megatron-DeepSpeed launch script or args file,
or Megatron-LM's YAML launch configs (its MoE recipes, its functional tests' model configs:
:mod:`simcluster.importers.recipe_yaml`).

Each flag becomes the scenario field that means it; where a flag is absent the field gets what
Megatron-LM's ``arguments.py`` does without it (``validate_args`` and the argument defaults), so
the scenario says what the launch line runs, not simcluster's defaults:

- shape: ``--ffn-hidden-size`` defaults to 4h, or int(4h * 2/3 / 64) * 64 with ``--swiglu``; GeLU
  MLP, LayerNorm, linear biases, learned absolute positions, tied embeddings and dropout 0.1
  unless ``--swiglu``/``--squared-relu``, ``--normalization``, ``--disable-bias-linear``,
  ``--position-embedding-type``, ``--untie-embeddings-and-output-weights`` and the dropout flags
  say otherwise; ``--num-query-groups`` counts only with ``--group-query-attention``;
- vocabulary: the tokenizer's size padded up to a multiple of
  ``--make-vocab-size-divisible-by`` (128) x tp (``_vocab_size_with_padding``);
  ``NullTokenizer`` (``--mock-data`` runs) has ``--vocab-size`` + 1 entries (its EOD); GPT-2's BPE
  (``--vocab-file``/``--merge-file``, ``GPT2BPETokenizer``) has 50,257 entries, others say
  theirs only in their files (``--set model.vocab=N``);
- optimizer and overlaps: ZeRO-1 only with ``--use-distributed-optimizer``, sequence
  parallelism only with ``--sequence-parallel``, and no DP or TP overlap without
  ``--overlap-grad-reduce``, ``--overlap-param-gather``, ``--tp-comm-overlap`` (all off by
  default), written out so the framework preset does not fill in its recipes' choices;
- main gradients in fp32 with ``--accumulate-allreduce-grads-in-fp32``, which Megatron forces for
  bf16 (unless ``--grad-reduce-in-bf16``): an fp16 run without it keeps fp16 main gradients;
- the global batch is micro-batch x dp without ``--global-batch-size``;
- one virtual stage per pipeline rank (``--num-virtual-stages-per-pipeline-rank 1``, or
  ``--num-layers-per-virtual-pipeline-stage`` of a rank's layers) is no virtual pipeline at all:
  ``validate_args`` sets its size to None and the run is the non-interleaved 1F1B.

Megatron-DeepSpeed's ``--deepspeed`` selects ``framework: deepspeed`` (``--zero-stage``; bf16
at stage 0 is DeepSpeed's BF16_Optimizer, sharded as ZeRO-1; ``--pad-vocab-size-to``;
``--pp-partition-method 'type:transformer|embedding'`` as DeepSpeed's PipelineModule splits
it); flags of Megatron-LM before 2023 (``--DDP-impl``, ``--checkpoint-activations``,
``--activations-checkpoint-*``) ``framework: megatron-lm-2021``; otherwise ``megatron-core``. ``--DDP-impl torch`` (PyTorch DDP, default 25 MiB buckets, overlapped with
the backward, gradients copied into its buckets and back) is written out over that
framework's 'local' DDP, as validation/narayanan2021-a100.yaml's torch-DDP rows are.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from simcluster.errors import UserError
from simcluster.importers.flags import Flags, not_step_reason
from simcluster.importers.megatron_context import context_parallel
from simcluster.importers.megatron_layer_kinds import refuse_unmodelled_layers
from simcluster.importers.megatron_moe import mla, moe
from simcluster.importers.megatron_offload import activation_offload
from simcluster.importers.megatron_pipeline import schedule_flags
from simcluster.importers.megatron_window import sliding_window
from simcluster.importers.nccl_env import communicator_file, nccl_channel_variables
from simcluster.importers.options import ImportOptions
from simcluster.importers.pipeline_layout import apply_layout
from simcluster.importers.recipe_yaml import recipe_args
from simcluster.importers.result import Imported
from simcluster.importers.run_length import ramp_clause, run_tokens, whole
from simcluster.importers.shell import read_script
from simcluster.scenario.loading import ASYNC_COMM_OVERLAPS
from simcluster.schedules.partition import megatron_accounted, megatron_first_last, megatron_vpp

#: Megatron-LM's flags removed in 2023 that only its older code (the SC'21 scripts) takes
OLD_FLAGS = (
    "DDP-impl",
    "checkpoint-activations",
    "activations-checkpoint-method",
    "activations-checkpoint-num-layers",
)
#: GPT-2's BPE vocabulary (gpt2-vocab.json), Megatron's GPT2BPETokenizer
GPT2_VOCAB = 50257

_INTS = {
    "num-layers": ("model", "layers"), "hidden-size": ("model", "hidden"),
    "num-attention-heads": ("model", "heads"), "kv-channels": ("model", "head_dim"),
    "tensor-model-parallel-size": ("parallel", "tp"), "pipeline-model-parallel-size": ("parallel", "pp"),
    "context-parallel-size": ("parallel", "cp"), "expert-model-parallel-size": ("parallel", "ep"),
    "expert-tensor-parallel-size": ("parallel", "etp"),
    "num-layers-per-virtual-pipeline-stage": ("parallel", "layers_per_virtual_stage"),
    "num-virtual-stages-per-pipeline-rank": ("parallel", "vpp"),
    "micro-batch-size": ("training", "micro_batch"), "global-batch-size": ("training", "global_batch"),
    "seq-length": ("training", "seq_len"),
    "num-experts": ("model", "experts"), "moe-router-topk": ("model", "top_k"),
    "moe-ffn-hidden-size": ("model", "expert_ffn"), "mtp-num-layers": ("model", "mtp_layers"),
    "moe-router-num-groups": ("model", "router_groups"), "moe-router-group-topk": ("model", "group_topk"),
}  # fmt: skip
_FLAGS_SET = {
    "sequence-parallel": ("parallel", "sequence_parallel"),
    "overlap-grad-reduce": ("overlap", "dp_grad_reduce"),
    "overlap-param-gather": ("overlap", "param_gather"),
    "tp-comm-overlap": ("overlap", "tp_comm"),
    "qk-layernorm": ("model", "qk_norm"),
    "add-qkv-bias": ("model", "qkv_bias"),
    "moe-pad-expert-input-to-capacity": ("moe", "pad_to_capacity"),
    "overlap-moe-expert-parallel-comm": ("overlap", "ep_comm"),
}
#: --fp8-recipe (Megatron-LM arguments.py choices) -> training.fp8_recipe
_FP8_RECIPES = {
    "delayed": "delayed",
    "tensorwise": "current",
    "blockwise": "block",
    "mxfp8": "block",
}
#: why some flags with effects are still not imported
_REASONS = {
    "deepspeed_config": "its DeepSpeed JSON is not read here: `simcluster import deepspeed` reads one",
    "deepspeed-config": "its DeepSpeed JSON is not read here: `simcluster import deepspeed` reads one",
    "pp-partition-method": "stage boundaries: give parallel.layers_per_stage with --set",
    "rampup-batch-size": "the batch ramp-up: the scenario is a step at --global-batch-size",
    "nccl-communicator-config-path": "its YAML is not on this machine (as given, or beside the "
    "script): write its groups' min_ctas / max_ctas as cluster.nccl_communicators (e.g. {dp_cp: "
    "{max_ctas: 8}})",
    "use-mcore-models": "a no-op today: Megatron-Core's models are the default",
    "delay-wgrad-compute": "the weight gradients split from the backward for "
    "--overlap-moe-expert-parallel-comm are not modelled: overlap.ep_comm pairs whole phases",
    "calculate-per-token-loss": "the loss's normalisation: one scalar all-reduce, not costed",
    "moe-use-legacy-grouped-gemm": "the legacy GroupedMLP (the grouped_gemm package's one kernel over "
    "two stacked weight tensors) is not modelled: simulated as TransformerEngine's GroupedLinear, a "
    "GEMM and a weight tensor per local expert, which the optimizer's tail walks one by one",
    "moe-single-grouped-weight": "TransformerEngine's single grouped weight (two stacked tensors a "
    "layer, not one per local expert) is not modelled: the optimizer's tail walks a tensor per expert",
    "moe-deepep-num-sms": "read only with the flex dispatcher's deepep backend (moe.dispatch_sms); a "
    "Megatron-Core that forwards it to --moe-flex-dispatcher-num-sms: --set moe.dispatch_sms=N",
    "moe-hybridep-num-sms": "read only with the flex dispatcher's hybridep backend (moe.dispatch_sms); a "
    "Megatron-Core that forwards it to --moe-flex-dispatcher-num-sms: --set moe.dispatch_sms=N",
    "moe-flex-dispatcher-num-sms": "the flex dispatcher's SMs (moe.dispatch_sms), not used by the "
    "alltoall dispatcher",
    "use-torch-fsdp2": "Megatron's PyTorch FSDP2 wrapping has no Megatron-Core preset here; "
    "--set parallel.zero=3 for its sharding (the preset's DDP buckets do not describe FSDP2)",
    "use-custom-fsdp": "Megatron-FSDP (its earlier name) is not modelled; --set parallel.zero=N for its "
    "--data-parallel-sharding-strategy (optim 1, optim_grads 2, optim_grads_params 3)",
    "moe-layer-recompute": "the whole MoE block recomputed in the backward is not modelled (training."
    "recompute_modules has moe_act, the experts' activation, not the block)",
    "use-megatron-fsdp": "Megatron-FSDP is not modelled; --set parallel.zero=N for its "
    "--data-parallel-sharding-strategy (optim 1, optim_grads 2, optim_grads_params 3)",
    "data-parallel-sharding-strategy": "Megatron-FSDP's sharding: --set parallel.zero=N "
    "(no_shard 0, optim 1, optim_grads 2, optim_grads_params 3)",
}
_RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp")


def import_file(path: Path, options: ImportOptions) -> Imported:
    """The scenario a Megatron launch script (or arguments file) at ``path`` describes."""
    options.refuse("megatron", "model", "hf-config", "seq-len")
    args = recipe_args(path, options.variables) or read_script(path, options.variables)
    out = Imported({}, f"{path.name} ({args.origin})")
    out.notes.extend(args.notes)
    flags = Flags.parse(args.words)
    refuse_unmodelled_layers(flags, args.program)
    framework = options.framework or _framework(flags)
    if not options.framework:
        why = {
            "deepspeed": "--deepspeed: Megatron-DeepSpeed, DeepSpeed's engine",
            "megatron-lm-2021": "its flags are Megatron-LM's before 2023 (--DDP-impl, --activations-checkpoint-*)",
        }.get(framework, "Megatron-LM's current flags")
        out.notes.append(f"framework {framework}: {why}; --framework NAME to choose another")
    sc: dict[str, Any] = {
        "framework": framework,
        "model": {},
        "cluster": options.cluster_section(),
        "parallel": {},
        "training": {},
    }
    for flag, (section, key) in _INTS.items():
        value = flags.integer(flag)
        if value is not None:
            sc[section][key] = value
    for flag, (section, key) in _FLAGS_SET.items():
        if flags.has(flag):
            sc.setdefault(section, {})[key] = True
    _model(flags, sc, out)
    _parallel(flags, sc, framework, out)
    _optimizer_instances(flags, sc, options)
    _training(flags, sc, framework, out)
    _launch_blocking(args.variables, sc, out)
    _amax_variables(args.variables, sc, out)
    nccl_channel_variables(args.variables, sc["cluster"], out)
    communicator_file(flags, path, sc["cluster"], out)
    moe(flags, sc, out)
    out.run_tokens = _run_length(flags, sc["training"])
    if out.run_tokens is None:
        out.run_steps = _run_steps(flags, sc["training"])
    for name in flags.left():
        out.skip(
            f"--{name}", not_step_reason(name) or _REASONS.get(name, "no scenario field for it")
        )
    out.scenario = {k: v for k, v in sc.items() if v != {}}
    return out


def _run_length(flags: Flags, training: dict[str, Any]) -> tuple[int, str] | None:
    """The run's tokens from ``--train-samples`` or ``--train-iters`` (``run_length.py``), peeked,
    not taken: the flags stay listed as not imported, since the scenario is one step."""
    samples, iters = (" ".join(flags.values.get(name, [])) for name in ("train-samples", "train-iters"))
    ramp = flags.values.get("rampup-batch-size")
    if ramp is not None:
        # arguments.py refuses a ramp-up with --train-iters ("expected no batch-size rampup for
        # iteration-based training"); with --train-samples the tokens are still samples x seq
        iters = ""
    names = ("--train-samples", "--train-iters")
    found = run_tokens(training.get("seq_len"), training.get("global_batch"), samples, iters, names)
    if found is None or ramp is None:
        return found
    clause = ramp_clause(ramp, samples)
    return found if clause is None else (found[0], f"{found[1]}; {clause}")


def _run_steps(flags: Flags, training: dict[str, Any]) -> tuple[int, str] | None:
    """``--train-iters`` without ``--global-batch-size``: arguments.py's batch is then
    micro-batch x dp, which the layout settles (``commands/importing.py`` finishes the count)."""
    if "global_batch" in training or "rampup-batch-size" in flags.values:
        return None
    steps = whole(" ".join(flags.values.get("train-iters", [])))
    return None if steps is None else (steps, "--train-iters")


def _launch_blocking(variables: dict[str, str], sc: dict[str, Any], out: Imported) -> None:
    """``CUDA_LAUNCH_BLOCKING=1`` set by the script (BigScience's tr11-176B-ml.slurm exports it
    against hangs): ``training.launch_blocking``."""
    if variables.get("CUDA_LAUNCH_BLOCKING", "").strip() == "1":
        sc["training"]["launch_blocking"] = True
        out.notes.append(
            "CUDA_LAUNCH_BLOCKING=1: training.launch_blocking (each layer op's host time adds to the GPU's)"
        )
        # each collective's launch then waits for it to finish: none runs beside compute
        # (scenario.loading.blocking_overlaps refuses an overlap written true)
        overlap = sc.get("overlap", {})
        dropped = [key for key in ASYNC_COMM_OVERLAPS if overlap.get(key) is True]
        for key in dropped:
            overlap[key] = False
        if dropped:
            out.notes.append(
                f"CUDA_LAUNCH_BLOCKING=1: {', '.join(f'overlap.{k}' for k in dropped)} false "
                "(each collective's launch waits until it has run, so nothing runs beside it)"
            )


#: TransformerEngine's amax variables only releases up to 1.5 read (``fp8.py``, ``module/base.py``;
#: pull request 575 dropped them in 1.6): (variable, value, what it did, the field that says so)
OLD_TE_AMAX_VARIABLES = (
    ("NVTE_ASYNC_AMAX_REDUCTION", "1", "an asynchronous amax all-reduce", "fp8_amax_async"),
    ("NVTE_DP_AMAX_REDUCE_INTERVAL", "0", "amaxes reduced over the tensor-parallel group alone", "tp_only_amax_red"),
)


def _amax_variables(variables: dict[str, str], sc: dict[str, Any], out: Imported) -> None:
    """:data:`OLD_TE_AMAX_VARIABLES` a script sets under FP8 delayed scaling: which TE runs is not
    in the script, so a note says what to write rather than setting it."""
    tr = sc["training"]
    if tr.get("precision") != "fp8" or tr.get("fp8_recipe", "delayed") != "delayed":
        return
    for name, value, effect, field in OLD_TE_AMAX_VARIABLES:
        if variables.get(name, "").strip() == value:
            out.notes.append(
                f"{name}={value}: read by TransformerEngine up to 1.5 only ({effect}); with such a TE "
                f"write training.{field}: true"
            )


def _framework(flags: Flags) -> str:
    """The framework preset the flags imply: Megatron-DeepSpeed (``--deepspeed``), Megatron-LM
    before 2023 (its removed flags), or Megatron-Core."""
    if "deepspeed" in flags.values:
        return "deepspeed"
    if any(f in flags.values for f in OLD_FLAGS):
        return "megatron-lm-2021"
    return "megatron-core"


def _model(flags: Flags, sc: dict[str, Any], out: Imported) -> None:
    """Fill ``model`` from the flags that describe the network (shape, MLP, attention, norm,
    positions, vocabulary)."""
    model = sc["model"]
    _require_shape(model)
    _mlp(flags, model)
    _qk_l2_norm(flags, model)
    mla(flags, model, out)
    _kv_heads(flags, model)
    _norm_and_positions(flags, model, out)
    _softmax(flags, model, out)
    sliding_window(flags, model, out)
    dropouts = [flags.number("hidden-dropout"), flags.number("attention-dropout")]
    model["dropout"] = any(0.1 if d is None else d for d in dropouts)  # both default to 0.1
    _model_vocab(flags, sc, out)
    # arguments.py --transformer-impl local: Megatron-Core's own DotProductAttention, which
    # materialises the scores (no fused kernel); transformer_engine (the default) fuses them
    if flags.choice("transformer-impl", {"local": "local", "transformer_engine": "te"}) == "local":
        sc["training"]["flash_attention"] = False


def _qk_l2_norm(flags: Flags, model: dict[str, Any]) -> None:
    """``--qk-l2-norm``: Llama 4's weightless L2 norm of queries and keys (``model.qk_norm``
    weightless), which Megatron-Core's layer specs put in place of the ``--qk-layernorm`` norms
    (``q_layernorm = L2Norm if qk_l2_norm else (qk_norm if qk_layernorm else IdentityOp)``);
    its multi-latent attention refuses it ("qk_l2_norm is not supported")."""
    if not flags.has("qk-l2-norm"):
        return
    if flags.has("multi-latent-attention"):
        raise UserError("--qk-l2-norm", "Megatron-Core refuses it with --multi-latent-attention; drop one of them")
    model["qk_norm"] = "weightless"


_SHAPE_FLAGS = {"layers": "num-layers", "hidden": "hidden-size", "heads": "num-attention-heads"}


def _require_shape(model: dict[str, Any]) -> None:
    """Refuse a launch line without the layers, hidden size or heads (Megatron requires them)."""
    for needed, flag in _SHAPE_FLAGS.items():
        if needed not in model:
            raise UserError(
                f"--{flag}",
                "the launch line does not give it (Megatron requires it): add it to the config "
                "(a shell variable the script reads for it can be set with --var NAME=VALUE)",
            )


def _mlp(flags: Flags, model: dict[str, Any]) -> None:
    """The MLP's activation and width, and the experts' defaults (Megatron's arguments.py)."""
    if flags.has("swiglu"):
        model["mlp"] = "swiglu"
    elif flags.has("squared-relu"):
        model["mlp"] = "relu2"
    else:
        model["mlp"] = "gelu"
    ffn = flags.integer("ffn-hidden-size")
    if ffn is None:  # arguments.py validate_args
        ffn = (
            int(4 * model["hidden"] * 2 / 3 / 64) * 64
            if model["mlp"] == "swiglu"
            else 4 * model["hidden"]
        )
    model["ffn"] = ffn
    if "experts" in model and "expert_ffn" not in model:
        model["expert_ffn"] = ffn  # arguments.py: --moe-ffn-hidden-size defaults to ffn_hidden_size
    if "experts" in model and "top_k" not in model:
        model["top_k"] = 2  # arguments.py: --moe-router-topk defaults to 2


def _kv_heads(flags: Flags, model: dict[str, Any]) -> None:
    """Grouped-query attention's key/value heads, in either framework's spelling."""
    kv_heads = flags.integer("num-key-value-heads")  # Megatron-DeepSpeed's GQA flag
    if kv_heads is not None:
        model["kv_heads"] = kv_heads
    if flags.has("group-query-attention"):
        groups = flags.integer("num-query-groups")
        if groups is None:
            raise UserError(
                "--num-query-groups",
                "--group-query-attention needs it (Megatron's default is 1 group)",
            )
        model["kv_heads"] = groups


def _norm_and_positions(flags: Flags, model: dict[str, Any], out: Imported) -> None:
    """The norm, the linear layers' bias, the position embedding and the tied embeddings."""
    # Megatron-LM spells the choices LayerNorm / RMSNorm, Megatron-DeepSpeed layernorm / rmsnorm
    norm = flags.choice(
        "normalization",
        {
            "LayerNorm": "layernorm",
            "RMSNorm": "rmsnorm",
            "layernorm": "layernorm",
            "rmsnorm": "rmsnorm",
        },
    )
    model["norm"] = norm or "layernorm"
    model["bias"] = not flags.has("disable-bias-linear")
    position = flags.choice(
        "position-embedding-type", {"learned_absolute": "learned", "rope": "rope", "alibi": "alibi"}
    )
    if flags.has("use-rotary-position-embeddings"):
        position = "rope"
    model["position"] = position or "learned"
    max_positions = flags.integer("max-position-embeddings")
    if max_positions is not None and model["position"] == "learned":
        model["max_positions"] = max_positions
    elif max_positions is not None:
        out.skip("--max-position-embeddings", "sizes the rotary table only, which is not costed")
    model["tied_embeddings"] = not flags.has("untie-embeddings-and-output-weights")


def _softmax(flags: Flags, model: dict[str, Any], out: Imported) -> None:
    """``--softmax-type``: learned attention sinks, or a note for the fixed one."""
    # arguments.py --softmax-type: 'learnable' is gpt-oss's per-head sink logit in the softmax's
    # denominator (one parameter per head, TransformerEngine's softmax_type); 'off-by-one' is the
    # same term fixed at logit 0, with no parameter, which model.attention_sinks does not describe
    softmax = flags.choice(
        "softmax-type", {"vanilla": "vanilla", "learnable": "learnable", "off-by-one": "off-by-one"}
    )
    if softmax == "learnable":
        model["attention_sinks"] = True
    elif softmax == "off-by-one":
        out.skip(
            "--softmax-type off-by-one",
            "a fixed sink logit with no parameter: model.attention_sinks (learned sinks) costs "
            "it the same but counts one parameter per head; --set model.attention_sinks=true",
        )


def _model_vocab(flags: Flags, sc: dict[str, Any], out: Imported) -> None:
    """``model.vocab`` where the flags give it, else what the user must give (and why)."""
    vocab = _vocab(flags, sc, out)
    if vocab is not None:
        sc["model"]["vocab"] = vocab
        return
    tokenizer = flags.values.get("tokenizer-type") or ["the script's tokenizer"]
    divisor = flags.integer("make-vocab-size-divisible-by") or 128
    tp = sc["parallel"].get("tp", 1)
    out.needs["model.vocab"] = (
        f"{' '.join(tokenizer)} keeps its vocabulary size in its files; give it padded as "
        f"Megatron pads it (a multiple of {divisor} x tp {tp} = {divisor * tp}): "
        "--set model.vocab=N"
    )


def _vocab(flags: Flags, sc: dict[str, Any], out: Imported) -> int | None:
    exact = flags.integer("pad-vocab-size-to")  # Megatron-DeepSpeed: padded to this size
    if exact is not None:
        return exact
    size = flags.integer("vocab-size")
    tokenizer = flags.text("tokenizer-type")
    if size is not None and tokenizer == "NullTokenizer":
        # tokenizer.py _NullTokenizer: vocab_size is --vocab-size + 1 (its EOD token comes after)
        size += 1
    elif size is not None and tokenizer is not None:
        # tokenizer.py build_tokenizer: only NullTokenizer is sized by --vocab-size; the others
        # (HuggingFaceTokenizer, SentencePiece, tiktoken) count the entries of their files
        out.skip(
            "--vocab-size",
            f"{tokenizer} takes its size from its files; Megatron reads --vocab-size only for "
            "NullTokenizer",
        )
        size = None
    if size is None and (
        tokenizer == "GPT2BPETokenizer"
        or (tokenizer is None and ("merge-file" in flags.values or "vocab-file" in flags.values))
    ):
        size = GPT2_VOCAB
    if size is None:
        return None
    # tokenizer.py _vocab_size_with_padding: up to a multiple of divisible-by x tp
    multiple = (flags.integer("make-vocab-size-divisible-by") or 128) * sc["parallel"].get("tp", 1)
    padded: int = math.ceil(size / multiple) * multiple
    return padded


def _parallel(flags: Flags, sc: dict[str, Any], framework: str, out: Imported) -> None:
    parallel = sc["parallel"]
    _zero(flags, parallel, framework, out)
    context_parallel(flags, parallel, out)
    _partition(flags, sc)
    # the layout first: Megatron refuses the other splits beside it
    apply_layout(flags.text("pipeline-model-parallel-layout"), set(flags.values), sc)
    _uneven_stages(flags, sc)
    if parallel.get("tp", 1) == 1:
        if parallel.get("sequence_parallel"):
            out.notes.append(
                "--sequence-parallel at tp 1: off, as Megatron's arguments.py turns it off"
            )
        parallel["sequence_parallel"] = False
    parallel.setdefault("sequence_parallel", False)
    _zbh1(flags, parallel, framework)
    _refuse_as_megatron(sc)
    _virtual_stages(flags, sc, framework, out)
    schedule_flags(flags, parallel, out)
    overlap = sc.setdefault("overlap", {})
    if framework not in ("megatron-lm-2021", "deepspeed"):  # their presets' overlaps stand
        # the parameter all-gather exists only with the distributed optimizer (not written
        # otherwise: it would be an inert setting)
        for key in (
            ("dp_grad_reduce", "param_gather", "tp_comm")
            if parallel["zero"]
            else ("dp_grad_reduce", "tp_comm")
        ):
            overlap.setdefault(key, False)
    if flags.has("no-overlap-p2p-communication"):
        overlap["pp_comm"] = False
    elif flags.has("overlap-p2p-communication"):
        # Megatron-LM of 2023 (store_true, off by default), before --no-overlap-p2p-communication
        overlap["pp_comm"] = True
    _ddp_impl(flags, sc, framework, out)


def _zero(flags: Flags, parallel: dict[str, Any], framework: str, out: Imported) -> None:
    """``parallel.zero``: 1 with ``--use-distributed-optimizer``; under DeepSpeed its
    ``--zero-stage``, bf16 at stage 0 sharded as ZeRO-1."""
    parallel["zero"] = 1 if flags.has("use-distributed-optimizer") else 0
    stage = flags.integer("zero-stage")  # Megatron-DeepSpeed's, mirrored into its DeepSpeed config
    if framework == "deepspeed":
        flags.has("deepspeed")
        parallel["zero"] = stage or 0
        if parallel["zero"] == 0 and flags.has("bf16"):
            # DeepSpeed's BF16_Optimizer (bf16 at stage 0) shards the fp32 optimizer state over
            # data parallelism as ZeRO-1 does (validation/bigscience-a100.yaml, BLOOM's runs)
            parallel["zero"] = 1
            out.notes.append("bf16 at ZeRO stage 0: DeepSpeed's BF16_Optimizer, sharded as zero 1")


def _refuse_as_megatron(sc: dict[str, Any]) -> None:
    """arguments.py's assertions: these overlaps need the distributed optimizer / SP, and the
    two ways of giving virtual stages exclude each other."""
    parallel, given = sc["parallel"], sc.get("overlap", {})
    if given.get("param_gather") is True and not parallel["zero"]:
        raise UserError(
            "--overlap-param-gather", "Megatron requires --use-distributed-optimizer with it"
        )
    if given.get("param_gather") is True and not given.get("dp_grad_reduce"):
        raise UserError("--overlap-param-gather", "Megatron requires --overlap-grad-reduce with it")
    if given.get("tp_comm") is True and not parallel["sequence_parallel"]:
        raise UserError(
            "--tp-comm-overlap", "Megatron requires --sequence-parallel (and tp > 1) with it"
        )
    if "vpp" in parallel and "layers_per_virtual_stage" in parallel:
        raise UserError(  # arguments.py validate_args: the two cannot be set at the same time
            "--num-virtual-stages-per-pipeline-rank",
            "Megatron refuses it beside --num-layers-per-virtual-pipeline-stage; keep one",
        )


def _ddp_impl(flags: Flags, sc: dict[str, Any], framework: str, out: Imported) -> None:
    """``--DDP-impl`` (Megatron-LM before 2023): torch's is PyTorch DDP's buckets."""
    ddp = flags.choice("DDP-impl", {"local": "local", "torch": "torch"})
    if ddp == "torch":
        # PyTorch DDP under Megatron-LM 2021 (validation/narayanan2021-a100.yaml's torch-DDP
        # rows): bucketed all-reduce overlapped with the backward, 25 MiB buckets (bucket_cap_mb)
        # of fp16 gradients reduced at the model's fp32 width, each gradient copied into its
        # bucket scaled by 1/dp and back (gradient_as_bucket_view off), grads freed, not zeroed
        sc["overlap"]["dp_grad_reduce"] = True
        sc["dp"] = {
            "prescale": False,
            "bucket_copies": True,
            "zero_grad_buffer": False,
            "bucket_mb": 52.4288,
        }
    if ddp is not None and framework != "megatron-lm-2021":
        out.notes.append(
            f"--DDP-impl {ddp} is Megatron-LM's before 2023; read under framework {framework}"
        )


def _zbh1(flags: Flags, parallel: dict[str, Any], framework: str) -> None:
    """``--enable-zbh1-pipeline``: Megatron-DeepSpeed's initialize.py swaps DeepSpeed's
    TrainSchedule for its ZeroBubbleH1Pipeline (``zb-h1-ds``, ``zb-h1-ds-exact`` with
    ``--enable-zbh1-exact-semantics``); its arguments.py asserts --deepspeed and no sequence
    parallelism with it, and the pipeline with exact semantics."""
    exact = flags.has("enable-zbh1-exact-semantics")
    if not flags.has("enable-zbh1-pipeline"):
        if exact:
            raise UserError("--enable-zbh1-exact-semantics", "exact semantics require the ZB-H1 pipeline; add --enable-zbh1-pipeline")
        return
    name = "--enable-zbh1-pipeline"
    if framework != "deepspeed":
        raise UserError(name, "Megatron-DeepSpeed runs it on DeepSpeed's engine; add --deepspeed")
    if parallel["sequence_parallel"]:
        raise UserError(name, "Megatron-DeepSpeed runs it without --sequence-parallel; drop one of them")
    parallel["schedule"] = "zb-h1-ds-exact" if exact else "zb-h1-ds"


def _virtual_stages(flags: Flags, sc: dict[str, Any], framework: str, out: Imported) -> None:
    """The interleaved schedule for more than one virtual stage per pipeline rank, and none for
    one: Megatron-LM's ``megatron/training/arguments.py`` ``validate_args`` (NVIDIA/Megatron-LM
    000c4ac) derives virtual_pipeline_model_parallel_size from
    --num-virtual-stages-per-pipeline-rank or --num-layers-per-virtual-pipeline-stage
    (``partition.megatron_vpp``) and sets it to None when that is 1, so the run takes the
    non-interleaved 1F1B schedule (``get_forward_backward_func``), not the interleaved one at one
    chunk. Megatron-LM 2021's ``megatron/arguments.py`` ``parse_args`` kept the derived 1 (its
    interleaved schedule, one chunk), so its imports keep it; DeepSpeed's engine has no vpp."""
    parallel = sc["parallel"]
    if "vpp" not in parallel and "layers_per_virtual_stage" not in parallel:
        return
    if framework in ("megatron-lm-2021", "deepspeed"):
        parallel["schedule"] = "interleaved"
        return
    per_virtual = flags.integer("num-layers-per-virtual-pipeline-stage")
    name = "--num-layers-per-virtual-pipeline-stage"
    vpp = parallel.get("vpp")  # given, or resolved by _uneven_stages with the accounting flags
    if vpp is None:  # no accounting flag (_uneven_stages resolves vpp under one): no slot counted
        pp, layers = parallel.get("pp", 1), sc["model"]["layers"]
        vpp = megatron_vpp(layers, pp, parallel["layers_per_virtual_stage"], 0, name)
    if per_virtual is None:
        name, per_virtual = "--num-virtual-stages-per-pipeline-rank", vpp
    if vpp > 1:
        parallel["schedule"] = "interleaved"
        return
    parallel.pop("vpp", None)
    parallel.pop("layers_per_virtual_stage", None)
    out.notes.append(
        f"{name} {per_virtual}: one virtual stage per pipeline rank, so Megatron runs its "
        "non-interleaved 1F1B (validate_args sets no virtual pipeline size): schedule 1f1b, no vpp"
    )


def _optimizer_instances(flags: Flags, sc: dict[str, Any], options: ImportOptions) -> None:
    """``--num-distributed-optimizer-instances N``: the distributed optimizer shards over
    dp x cp / N ranks and the N instances all-reduce their gradients (Megatron-Core's
    intra / inter distributed-optimizer groups): ``parallel.zero_shard``."""
    instances = flags.integer("num-distributed-optimizer-instances")
    if instances is None or instances == 1:
        return
    if not sc["parallel"]["zero"]:
        raise UserError(
            "--num-distributed-optimizer-instances",
            "Megatron requires --use-distributed-optimizer with it",
        )
    parallel = sc["parallel"]
    model_parallel = parallel.get("tp", 1) * parallel.get("pp", 1)
    ranks = options.world() // model_parallel  # dp x cp
    if instances < 1 or ranks % instances:
        raise UserError(
            "--num-distributed-optimizer-instances",
            f"{instances} does not divide the {ranks} data-parallel x context-parallel ranks",
        )
    parallel["zero_shard"] = ranks // instances


def _uneven_stages(flags: Flags, sc: dict[str, Any]) -> None:
    """Megatron-Core's uneven pipeline splits as ``parallel.layers_per_stage`` (the pp*vpp
    virtual stages' layers, model order): ``--decoder-first-pipeline-num-layers`` /
    ``--decoder-last-pipeline-num-layers`` give the first / last rank's layers, the rest split
    evenly over the others, each rank's over its virtual stages
    (``partition.megatron_first_last``); with ``--account-for-embedding-in-pipeline-split`` /
    ``--account-for-loss-in-pipeline-split`` the embedding / loss counts as one layer of the
    first / last virtual stage (``partition.megatron_accounted``), and vpp from
    ``--num-layers-per-virtual-pipeline-stage`` counts it too (``partition.megatron_vpp``). The
    scenario's ``parallel.embedding_in_split`` / ``loss_in_split`` resolve through the same
    functions. Megatron refuses the first/last flags beside the accounting flags and beside
    --num-layers-per-virtual-pipeline-stage (training/arguments.py validate_args: "please use
    --num-virtual-stages-per-pipeline-rank to specify virtual pipeline parallel degree when
    enable uneven pipeline parallelism")."""
    first, last = (
        flags.integer("decoder-first-pipeline-num-layers"),
        flags.integer("decoder-last-pipeline-num-layers"),
    )
    embedding = flags.has("account-for-embedding-in-pipeline-split")
    loss = flags.has("account-for-loss-in-pipeline-split")
    if first is None and last is None and not embedding and not loss:
        return
    parallel, layers = sc["parallel"], sc["model"]["layers"]
    pp = parallel.get("pp", 1)
    if pp <= 1:
        for name in (
            "decoder-first-pipeline-num-layers",
            "decoder-last-pipeline-num-layers",
            "account-for-embedding-in-pipeline-split",
            "account-for-loss-in-pipeline-split",
        ):
            flags.taken.discard(name)  # listed: no pipeline to split
        return
    if first is not None or last is not None:
        edge = "--decoder-first-pipeline-num-layers" if first is not None else "--decoder-last-pipeline-num-layers"
        if embedding or loss:
            raise UserError(
                "--account-for-embedding-in-pipeline-split",
                "Megatron refuses it beside --decoder-first/last-pipeline-num-layers",
            )
        if "layers_per_virtual_stage" in parallel:
            raise UserError(
                edge,
                "Megatron refuses it beside --num-layers-per-virtual-pipeline-stage; give the virtual "
                "stages as --num-virtual-stages-per-pipeline-rank",
            )
        parallel["layers_per_stage"] = megatron_first_last(layers, pp, parallel.get("vpp", 1), first, last, edge)
        return
    field = "--account-for-embedding-in-pipeline-split" if embedding else "--account-for-loss-in-pipeline-split"
    if "layers_per_virtual_stage" in parallel:
        chunk = parallel.pop("layers_per_virtual_stage")
        parallel["vpp"] = megatron_vpp(layers, pp, chunk, embedding + loss, "--num-layers-per-virtual-pipeline-stage")
    parallel["layers_per_stage"] = megatron_accounted(layers, pp, parallel.get("vpp", 1), embedding, loss, field)


def _partition(flags: Flags, sc: dict[str, Any]) -> None:
    """Megatron-DeepSpeed's ``--pp-partition-method 'type:transformer|embedding'``: DeepSpeed's
    PipelineModule balances the count of layers of those types over the stages
    (pipe/module.py _partition_layers: partition_balanced of binary weights); with tied
    embeddings both ends hold an EmbeddingPipe, so a whole split gives the first and last stage
    one transformer block fewer. Uneven splits are listed (the balancing's tie-breaks)."""
    method = flags.text("pp-partition-method")
    pp, model = sc["parallel"].get("pp", 1), sc["model"]
    if method is None or pp <= 1:
        return
    items = model["layers"] + 2
    if method != "type:transformer|embedding" or not model["tied_embeddings"] or items % pp:
        flags.taken.discard("pp-partition-method")  # listed with its reason
        return
    per = items // pp
    sc["parallel"]["layers_per_stage"] = [per - 1, *[per] * (pp - 2), per - 1]


def _training(flags: Flags, sc: dict[str, Any], framework: str, out: Imported) -> None:
    training = sc["training"]
    for flag in ("micro-batch-size", "seq-length"):
        if flag not in flags.values:
            raise UserError(f"--{flag}", "the launch line does not give it (Megatron requires it)")
    if "global_batch" not in training:
        training["grad_accum"] = 1  # arguments.py: global_batch_size = micro_batch_size x dp
    precision = training["precision"] = _precision(flags, training)
    # arguments.py: bf16 forces accumulate_allreduce_grads_in_fp32 (unless --grad-reduce-in-bf16);
    # under DeepSpeed its optimizer decides (the deepspeed preset, by ZeRO stage)
    if framework == "deepspeed":
        pass
    elif flags.has("grad-reduce-in-bf16"):
        training["fp32_grad_accum"] = False
    else:
        training["fp32_grad_accum"] = (
            flags.has("accumulate-allreduce-grads-in-fp32") or precision != "fp16"
        )
    if flags.has("no-gradient-accumulation-fusion"):
        training["grad_accum_fusion"] = False
    _recompute(flags, training, out)
    _optimizer_and_buckets(flags, sc)
    _attention_backend(flags, sc, out)
    _fp8_attention(flags, sc, out)
    if flags.has("activation-func-fp8-input-store"):
        training["activation_fp8_store"] = True
    _cuda_graphs(flags, training, out)
    _precision_aware(flags, training, out)
    activation_offload(flags, training, out)


def _precision_aware(flags: Flags, training: dict[str, Any], out: Imported) -> None:
    """``--use-precision-aware-optimizer``'s dtypes (Megatron-Core's ``OptimizerConfig``: they
    count only with it): Adam's moments both ``bf16`` as ``training.optimizer_moments``, main
    gradients ``bf16`` as ``training.fp32_grad_accum: false``; other mixes said skipped."""
    names = ("exp-avg-dtype", "exp-avg-sq-dtype", "main-grads-dtype", "main-params-dtype")
    given = {n: flags.text(n) for n in names if n in flags.values}
    if not flags.has("use-precision-aware-optimizer"):
        for name, value in given.items():
            out.notes.append(f"--{name} {value} without --use-precision-aware-optimizer: Megatron keeps fp32")
        return
    moments = {given.get("exp-avg-dtype", "fp32"), given.get("exp-avg-sq-dtype", "fp32")}
    if moments == {"bf16"}:
        training["optimizer_moments"] = "bf16"
    elif moments != {"fp32"}:
        out.skip(
            " ".join(f"--{n} {given[n]}" for n in names[:2] if n in given),
            "only both moments in fp32 or both in bf16 are modelled (training.optimizer_moments)",
        )
    if given.get("main-grads-dtype") == "bf16":
        training["fp32_grad_accum"] = False
    if given.get("main-params-dtype", "fp32") != "fp32":
        out.skip(f"--main-params-dtype {given['main-params-dtype']}", "fp32 master weights are modelled")


#: --cuda-graph-scope values training.cuda_graphs takes (the layer parts TransformerEngine's
#: partial capture graphs)
GRAPH_SCOPES = ("attn", "mlp", "moe_router", "moe_preprocess")


def _cuda_graphs(flags: Flags, training: dict[str, Any], out: Imported) -> None:
    """``--cuda-graph-impl`` (``local`` or ``transformer_engine``; before it ``--enable-cuda-graph``
    and ``--external-cuda-graph``) with ``--cuda-graph-scope``'s layer parts as
    ``training.cuda_graphs``; the whole iteration (``--cuda-graph-impl full_iteration``, or the
    ``full_iteration`` scope it migrated from) as ``[full_iteration]``; a whole-layer scope (its
    ``full``, ``moe``, or no scope) is said skipped with how to write it."""
    impl = flags.text("cuda-graph-impl")
    legacy = flags.has("enable-cuda-graph") | flags.has("external-cuda-graph")
    scopes = flags.words("cuda-graph-scope")
    graphed = impl not in (None, "none") or legacy
    if impl == "full_iteration" or (graphed and "full_iteration" in scopes):
        training["cuda_graphs"] = ["full_iteration"]
        return
    if impl in (None, "none") and not legacy:
        if scopes:
            out.notes.append("--cuda-graph-scope without --cuda-graph-impl: no CUDA graphs")
        return
    parts = [s for s in scopes if s in GRAPH_SCOPES]
    rest = [s for s in scopes if s not in GRAPH_SCOPES]
    if parts:
        training["cuda_graphs"] = parts
    if rest or not scopes:
        out.skip(
            f"--cuda-graph-scope {' '.join(rest)}" if rest else f"--cuda-graph-impl {impl or 'local'} (whole layers)",
            "only attention, MLP, router and dispatch-preprocess graphs are modelled: "
            "--set training.cuda_graphs=[attn,mlp] for a dense layer's",
        )


def _precision(flags: Flags, training: dict[str, Any]) -> str:
    """``training.precision`` from the dtype flags (FP8's recipe set in ``training`` too)."""
    precision = "bf16" if flags.has("bf16") else "fp16" if flags.has("fp16") else "fp32"
    if flags.choice("fp8-format", {"e4m3": "fp8", "hybrid": "fp8"}):
        precision = "fp8"
        training["fp8_recipe"] = flags.choice("fp8-recipe", _FP8_RECIPES) or "delayed"
        if flags.has("tp-only-amax-red"):
            training["tp_only_amax_red"] = True
    if flags.choice("fp4-format", {"e2m1": "nvfp4"}):
        precision = "nvfp4"
    return precision


def _attention_backend(flags: Flags, sc: dict[str, Any], out: Imported) -> None:
    """The flash-attention and ``--attention-backend`` flags as ``training.flash_attention``
    (and cuDNN's kernel for the fused backend)."""
    training = sc["training"]
    # Megatron-DeepSpeed's --use-flash-attn-v1/-v2/-triton, Megatron-LM's --use-flash-attn
    if any(
        [
            flags.has(f)
            for f in (
                "use-flash-attn",
                "use-flash-attn-v1",
                "use-flash-attn-v2",
                "use-flash-attn-triton",
            )
        ]
    ):
        training["flash_attention"] = True
    backend = flags.choice(
        "attention-backend",
        {"flash": True, "fused": True, "unfused": False, "local": False, "auto": None},
    )
    if backend is not None:
        training["flash_attention"] = backend
    if flags.text("attention-backend") == "fused":
        _cudnn_attention(sc, out)


def _cudnn_attention(sc: dict[str, Any], out: Imported) -> None:
    """``--attention-backend fused``: TransformerEngine's FusedAttention, cuDNN's fused kernel
    (Megatron-Core's AttnBackend.fused runs TE with NVTE_FUSED_ATTN=1, NVTE_FLASH_ATTN=0), its
    curves where the profile has them."""
    from simcluster.hardware import load_profile  # hardware imports the scenario schema

    profile = load_profile(sc["cluster"]["hardware"], field="--cluster")
    if "cudnn" in profile.attention_kernels:
        sc["training"]["attention_kernel"] = "cudnn"
    else:
        out.notes.append(
            f"--attention-backend fused is cuDNN's fused attention; {sc['cluster']['hardware']} has no "
            "cudnn curves, so the profile's default kernel is used"
        )


def _fp8_attention(flags: Flags, sc: dict[str, Any], out: Imported) -> None:
    """``--fp8-dot-product-attention`` as ``training.fp8_attention`` where it can run: under an
    FP8 or NVFP4 recipe (Megatron-Core's TEDotProductAttention reads it inside the FP8
    autocast) with the profile's FP8 curves of the kernel in use; otherwise said in a note."""
    if not flags.has("fp8-dot-product-attention"):
        return
    from simcluster.fp8_attention import fp8_kernel
    from simcluster.hardware import load_profile  # hardware imports the scenario schema

    training, hardware = sc["training"], sc["cluster"]["hardware"]
    profile = load_profile(hardware, field="--cluster")
    if training.get("precision") not in ("fp8", "nvfp4"):
        out.notes.append("--fp8-dot-product-attention without an FP8 recipe runs 16-bit attention (imported so)")
    elif fp8_kernel(profile, training.get("attention_kernel")) is None:
        kernel = profile.attention_kernel_in_use(training.get("attention_kernel"))
        out.notes.append(
            f"--fp8-dot-product-attention: {hardware} has no FP8 attention curves for '{kernel}', so the "
            "attention is imported 16-bit (training.fp8_attention left false)"
        )
    else:
        training["fp8_attention"] = True


def _nan_check(flags: Flags, dp: dict[str, Any]) -> None:
    """``dp.nan_check`` where the launch says (on by default: arguments.py's
    --no-check-for-nan-in-loss-and-grad; Megatron-LM of 2023 spelt it on as a store_true)."""
    if flags.has("no-check-for-nan-in-loss-and-grad"):
        dp["nan_check"] = False
    elif flags.has("check-for-nan-in-loss-and-grad"):
        dp["nan_check"] = True


def _optimizer_and_buckets(flags: Flags, sc: dict[str, Any]) -> None:
    """The optimizer, its CPU offload and the gradient buckets' flags (Megatron-LM arguments.py;
    scenarios/apertus-70b-4096xgh200.yaml writes the same)."""
    training = sc["training"]
    if flags.has("cross-entropy-loss-fusion"):
        # --cross-entropy-fusion-impl: native (Megatron-Core's compiled loss, the default) or te
        impl = flags.choice("cross-entropy-fusion-impl", {"native": "native", "te": "te"})
        training["fused_cross_entropy"] = impl or "native"
    if flags.has("fp8-param-gather"):
        training["fp8_param_gather"] = True
    optimizer = flags.choice("optimizer", {"adam": "adam", "sgd": "sgd", "ademamix": "ademamix"})
    if optimizer is not None:
        training["optimizer"] = optimizer
    if flags.has("optimizer-cpu-offload"):
        fraction = flags.number("optimizer-offload-fraction")
        training["optimizer_offload"] = 1.0 if fraction is None else fraction
    dp: dict[str, Any] = sc.setdefault("dp", {})
    _nan_check(flags, dp)
    if flags.has("overlap-param-gather-with-optimizer-step"):
        # Megatron-Core's get_model: disable_bucketing=(model_chunk_idx > 0) or
        # overlap_param_gather_with_optimizer_step, so every chunk is one bucket
        dp["bucket_stages"] = "none"
    if flags.has("ddp-average-in-collective"):
        # the 1/dp scaling done by the collective (ReduceOp.AVG), no pass of its own
        dp.update(prescale=False, reduce_op="avg")
    size = flags.number("ddp-bucket-size")
    if size is not None:
        # parameters per bucket, of the main gradients' width
        width = 4 if training.get("fp32_grad_accum", True) else 2
        dp["bucket_mb"] = size * width / 1e6
    if not dp:
        sc.pop("dp")


def _partitioned(flags: Flags, granularity: str | None, training: dict[str, Any]) -> None:
    """Checkpointed inputs split over the TP ranks: Megatron-LM's --distribute-saved-activations
    (--distribute-checkpointed-activations before 2022), whose validate_args asserts full
    recomputation with it (and tp > 1 for the newer flag); Megatron-DeepSpeed's --partition-activations, passed to
    deepspeed.checkpointing.configure when --deepspeed-activation-checkpointing routes the
    checkpoints through DeepSpeed (otherwise it does nothing and stays listed)."""
    names = ("distribute-saved-activations", "distribute-checkpointed-activations")
    given = [n for n in names if flags.has(n)]
    deepspeed = ("deepspeed-activation-checkpointing", "partition-activations")
    if all(n in flags.values for n in deepspeed):
        given += [n for n in deepspeed if flags.has(n)][1:]
    if not given:
        return
    if granularity != "full":
        raise UserError(
            f"--{given[0]}", "Megatron requires full recomputation with it (--recompute-granularity "
            "full, or --checkpoint-activations); add it or drop the flag",
        )  # fmt: skip
    if given[0] == names[0] and (flags.integer("tensor-model-parallel-size") or 1) <= 1:
        raise UserError(
            f"--{given[0]}", "Megatron distributes the inputs only over a tensor-parallel group; "
            "set --tensor-model-parallel-size above 1 or drop the flag",
        )  # fmt: skip
    training["recompute_partitioned"] = True


def _check_recompute_method(granularity: str | None, method: str | None, layers: int | None) -> None:
    """Megatron-Core's own refusals: full recomputation needs a method and a layer count
    (transformer_config.py ``__post_init__``), selective takes no method (arguments.py
    ``validate_args``)."""
    if granularity == "full" and (method is None or layers is None):
        raise UserError(
            "--recompute-method" if method is None else "--recompute-num-layers",
            "Megatron requires --recompute-method (uniform or block) and "
            "--recompute-num-layers with --recompute-granularity full",
        )
    if granularity == "selective" and method is not None:
        raise UserError(
            "--recompute-method",
            "Megatron refuses a recompute method with selective recomputation",
        )


def _recompute_modules(flags: Flags, training: dict[str, Any]) -> None:
    """``--recompute-modules``: the selective recomputation's parts, each one simcluster costs."""
    modules = flags.words("recompute-modules")
    if not modules:
        return
    bad = [m for m in modules if m not in _RECOMPUTE_MODULES]
    if bad:
        raise UserError(
            "--recompute-modules",
            f"'{bad[0]}' cannot be imported; known: {', '.join(_RECOMPUTE_MODULES)}",
        )
    training["recompute_modules"] = modules


def _recompute(flags: Flags, training: dict[str, Any], out: Imported) -> None:
    granularity = flags.choice("recompute-granularity", {"full": "full", "selective": "selective"})
    if flags.has("recompute-activations"):  # Megatron 2022: selective recomputation
        granularity = "selective"
    method = flags.choice("recompute-method", {"uniform": "uniform", "block": "block"})
    layers = flags.integer("recompute-num-layers")
    old = flags.choice("activations-checkpoint-method", {"uniform": "uniform", "block": "block"})
    if old is not None or flags.has("checkpoint-activations"):
        # Megatron-LM 2021: a checkpoint method (uniform for --checkpoint-activations) reruns
        # every layer's forward
        granularity, method = "full", old or "uniform"
        layers = flags.integer("activations-checkpoint-num-layers")
    if old is None and not flags.has("checkpoint-activations"):
        _check_recompute_method(granularity, method, layers)
    _partitioned(flags, granularity, training)
    if granularity is None:
        training["recompute"] = "none"
        return
    training["recompute"] = granularity
    if granularity == "full" and method == "block" and layers is not None:
        training["recompute_num_layers"] = layers
    elif granularity == "full" and layers is not None and layers > 1:
        out.notes.append(
            f"recompute uniform in groups of {layers} layers: every layer reruns (recompute full)"
        )
    _recompute_modules(flags, training)
