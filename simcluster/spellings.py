"""Other spellings of a scenario's choice fields, read as the names the schema knows.

Papers and launch scripts write ``BF16``, ``bfloat16``, ``1F1B``, ``GPipe`` or ``Full``; the
schema's names are lower case and short. Each field below is matched without case, then
through its synonyms (each an exact equivalent: ``gpipe`` is all-forward-all-backward,
``interleaved-1f1b`` Megatron's interleaved schedule). Anything else is left for the schema
to reject with its list of choices. The few settings frameworks make a switch take ``true``
and ``false`` as their values (:data:`SWITCHES`). Applied to the raw scenario before
validation.
"""

from __future__ import annotations

import re
from typing import Any

#: (section, field) -> {other spelling: the schema's name}; every field here is matched without case
SYNONYMS: dict[tuple[str, str], dict[str, Any]] = {
    ("training", "precision"): {
        "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32",
        "fp4": "nvfp4", "nv-fp4": "nvfp4", "nvfp4-mixed": "nvfp4", "bf16-with-nvfp4-mixed": "nvfp4",
        # PyTorch Lightning's mixed-precision names (16-bit compute, fp32 master weights)
        "bf16-mixed": "bf16", "16-mixed": "fp16", "fp16-mixed": "fp16", "mixed-bf16": "bf16",
        "mixed-fp16": "fp16", "32-true": "fp32",
        # Composer's (llm-foundry's) automatic mixed precision names
        "amp-bf16": "bf16", "amp-fp16": "fp16", "amp-fp8": "fp8",
        # TransformerEngine's FP8 formats: HYBRID (E4M3 forward, E5M2 gradients) and E4M3
        "fp8-hybrid": "fp8", "fp8_hybrid": "fp8", "fp8-e4m3": "fp8", "fp8_e4m3": "fp8",
    },
    # AdamW keeps Adam's two fp32 moments and reads and writes the same bytes per update
    ("training", "optimizer"): {"adamw": "adam", "adam-w": "adam", "adam_w": "adam", "fusedadam": "adam"},
    ("training", "recompute"): {
        "selective-recompute": "selective", "full-recompute": "full", "no": "none", "off": "none",
        # the switch written as a word ("activation checkpointing: yes"), as true reads (SWITCHES)
        "yes": "full", "on": "full", "true": "full", "false": "none",
    },
    # the distributed optimizer is ZeRO-1 (optimizer state sharded over the data-parallel ranks);
    # FSDP's FULL_SHARD is ZeRO-3
    ("parallel", "zero"): {
        "zero-0": 0, "ddp": 0, "none": 0, "zero-1": 1, "zero1": 1, "stage-1": 1,
        "distributed-optimizer": 1, "zero-2": 2, "zero2": 2, "stage-2": 2, "zero-3": 3, "zero3": 3,
        "stage-3": 3, "fsdp": 3, "full-shard": 3,
        "zero-stage-0": 0, "zero-stage-1": 1, "zero-stage-2": 2, "zero-stage-3": 3,
    },
    ("training", "attention_kernel"): {
        "flash-attn": "fa2", "flashattention-2": "fa2", "flash_attn": "fa2", "flash-attention-2": "fa2",
        "flash_attention_2": "fa2", "flash-attn-2": "fa2", "fa-2": "fa2",
        "flashattention-3": "fa3", "flash-attention-3": "fa3", "flash_attention_3": "fa3", "fa-3": "fa3",
        # PyTorch's scaled_dot_product_attention runs its flash backend (FlashAttention-2's kernels)
        # on A100/H100 by default; its cuDNN backend is opt-in since 2.5 (pytorch/pytorch#138522)
        "sdpa": "fa2",
        "cudnn-fused": "cudnn", "cudnn_fused": "cudnn", "cudnn-fa": "cudnn",
    },
    ("training", "elementwise"): {},
    ("parallel", "schedule"): {
        "gpipe": "afab", "interleaved-1f1b": "interleaved", "1f1b-interleaved": "interleaved",
        "interleaved_1f1b": "interleaved", "zb-v": "zbv", "zero-bubble-v": "zbv",
        # the Zero Bubble paper's names: 1F1B-I is the interleaved schedule
        "1f1b-i": "interleaved", "zbh1": "zb-h1", "zbh2": "zb-h2", "zb1p": "zb-1p", "zb2p": "zb-2p",
        "dualpipe-v": "dualpipev",
        # torch.distributed.pipelining's class names, as torchtitan's pipeline_parallel_schedule takes them
        "interleavedzerobubble": "interleaved-zb", "interleaved-zero-bubble": "interleaved-zb",
        "interleaved1f1b": "interleaved", "loopedbfs": "looped-bfs", "zbvzerobubble": "zbv-fixed",
    },
    ("parallel", "cp_comm"): {"ring": "p2p", "ulysses": "a2a", "all-gather": "all_gather"},
    # the parallel block's collectives named after the code that runs them
    ("parallel", "parallel_block_comm"): {
        "neox": "gpt-neox", "gpt_neox": "gpt-neox", "gpt-j-residual": "gpt-neox", "nemo": "separate",
        "megatron-core": "separate",
    },
    # gelu stands for any two-matrix MLP (OPT's ReLU, GPT-2's tanh GeLU): one elementwise pass
    ("model", "mlp"): {
        "gated-silu": "swiglu", "geglu": "swiglu", "squared-relu": "relu2", "squared_relu": "relu2",
        "relu": "gelu", "gelu_new": "gelu", "gelu-tanh": "gelu", "gelu_pytorch_tanh": "gelu",
    },
    ("model", "norm"): {"rms": "rmsnorm", "layer": "layernorm", "layer_norm": "layernorm", "rms_norm": "rmsnorm"},
    ("model", "position"): {"rotary": "rope", "learned-absolute": "learned"},
    ("moe", "dispatcher"): {
        "all2all": "alltoall", "all-to-all": "alltoall", "all_to_all": "alltoall", "a2a": "alltoall",
        "deep-ep": "deepep", "deep_ep": "deepep", "hybrid-ep": "hybridep", "hybrid_ep": "hybridep",
    },
}  # fmt: skip


#: (section, field) -> its values for true and false, where frameworks make the setting a
#: switch; every other number field refuses a boolean (strict_numbers.py)
SWITCHES: dict[tuple[str, str], tuple[Any, Any]] = {
    # "activation checkpointing: true" is whole-layer recomputation wherever it is a switch
    # (Hugging Face's gradient_checkpointing, llm-foundry's activation_checkpointing)
    ("training", "recompute"): ("full", "none"),
    # Megatron's use_distributed_optimizer (read as zero) shards the optimizer state: ZeRO-1
    ("parallel", "zero"): (1, 0),
    # DeepSpeed's offload_optimizer and Megatron-Core's --optimizer-cpu-offload without a
    # fraction move the whole optimizer to the host
    ("training", "optimizer_offload"): (1.0, 0.0),
}


#: precisions written with their FP8 recipe, as NVIDIA's performance tables head them
#: (``FP8-CS``, ``FP8-MX``): training.precision fp8 and, unless given, that training.fp8_recipe
FP8_RECIPE_SPELLINGS: dict[str, str] = {
    "fp8-cs": "current", "fp8-current": "current", "fp8-current-scaling": "current",
    "fp8-mx": "block", "mxfp8": "block", "fp8-blockwise": "block", "fp8-sc": "block",
    "fp8-ds": "delayed", "fp8-delayed": "delayed", "fp8-delayed-scaling": "delayed",
}  # fmt: skip


def _plain(value: str) -> str:
    """``value`` lower-cased without a table's remark in parentheses after it
    ("full (--activations-checkpoint-method uniform)" is "full")."""
    return (re.sub(r"\s*\(.*\)\s*$", "", value) or value).strip().lower()


def _dp_written_as_zero(data: dict[str, Any]) -> dict[str, Any]:
    """``parallel.dp`` written as a ZeRO stage ("DP: ZeRO-1", as DeepSeek-V3's report gives
    its data parallelism) read as ``parallel.zero``: the degree is then the GPUs left over,
    as when dp is not given."""
    parallel = data.get("parallel")
    if not isinstance(parallel, dict) or not isinstance(parallel.get("dp"), str):
        return data
    text = _plain(parallel["dp"])
    synonyms = SYNONYMS[("parallel", "zero")]
    stage = synonyms.get(text, synonyms.get("-".join(text.replace("_", " ").split())))
    if stage is None or parallel.get("zero", stage) != stage:
        return data  # not a stage, or another zero is given: the schema says which is wrong
    rest = {k: v for k, v in parallel.items() if k != "dp"}
    return {**data, "parallel": {**rest, "zero": stage}}


def schedule_spelled(name: Any) -> Any:
    """A raw ``parallel.schedule`` value in the schema's spelling (a value it cannot read as it
    is: validation reports it)."""
    return normalise_spellings({"parallel": {"schedule": name}})["parallel"]["schedule"]


def normalise_spellings(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the choice fields of :data:`SYNONYMS` in the schema's spelling."""
    out = _dp_written_as_zero(dict(data))
    training = out.get("training")
    if isinstance(training, dict) and isinstance(training.get("precision"), str):
        recipe = FP8_RECIPE_SPELLINGS.get(_plain(training["precision"]).replace("_", "-").replace(" ", "-"))
        if recipe:
            out["training"] = {**training, "precision": "fp8", "fp8_recipe": training.get("fp8_recipe", recipe)}
    for (section, key), (on, off) in SWITCHES.items():
        values = out.get(section)
        if isinstance(values, dict) and isinstance(values.get(key), bool):
            out[section] = {**values, key: on if values[key] else off}
    for (section, key), synonyms in SYNONYMS.items():
        values = out.get(section)
        if not isinstance(values, dict) or not isinstance(values.get(key), str):
            continue
        text = _plain(values[key])
        # "fp16 mixed", "interleaved 1F1B", "ZeRO_1": spaces and underscores as dashes
        dashed = "-".join(text.replace("_", " ").split())
        out[section] = {**values, key: synonyms.get(text, synonyms.get(dashed, text))}
    return out


def raw_precision(scenario: Any) -> str | None:
    """A raw scenario's training.precision in the schema's spelling (None when absent)."""
    training = scenario.get("training") if isinstance(scenario, dict) else None
    if not isinstance(training, dict) or not isinstance(training.get("precision"), str):
        return None
    return str(normalise_spellings({"training": training})["training"]["precision"])
