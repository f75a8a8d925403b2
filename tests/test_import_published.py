"""`simcluster import` on more published launch scripts, each a fixture under
tests/fixtures/launch/megatron with its source URL and commit in its header: each must load and
simulate, and where a validation case describes the same run, differ from it only where the
test says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.errors import UserError
from simcluster.importers import ImportOptions, import_config
from simcluster.model import load_preset
from simcluster.scenario import scenario_from_dict
from simcluster.scenario.loading import apply_overrides
from simcluster.validate import load_cases_file

ROOT = Path(__file__).resolve().parent.parent
MEGATRON = Path(__file__).parent / "fixtures" / "launch" / "megatron"


def _resolved(raw: dict[str, Any]) -> dict[str, Any]:
    return build_context(scenario_from_dict(dict(raw))).scenario.model_dump()


def _differences(a: Any, b: Any, path: str = "") -> dict[str, tuple[Any, Any]]:
    """Dotted field -> (a's value, b's value) wherever the two resolved scenarios differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: dict[str, tuple[Any, Any]] = {}
        for key in sorted(set(a) | set(b)):
            out |= _differences(a.get(key), b.get(key), f"{path}.{key}" if path else key)
        return out
    return {} if a == b else {path: (a, b)}


def _step(raw: dict[str, Any]) -> float:
    return float(simulate(build_context(scenario_from_dict(dict(raw)))).summary["step_time_s"])


def test_llama3_8b_fp8_script_is_the_dgxc_case_but_for_the_listed_differences():
    imported = import_config(
        "megatron",
        MEGATRON / "train_llama3_8b_h100_fp8.sh",
        ImportOptions(cluster="dgx-h100", nodes=1),
    )
    s = imported.scenario
    # the script's flags as Megatron-LM's arguments.py reads them: --fp8-format hybrid with the
    # default --fp8-recipe delayed; --grad-reduce-in-bf16 keeps bf16 main gradients; the MOCK
    # branch's NullTokenizer has --vocab-size + 1 = 128,257 entries (tokenizer.py
    # _NullTokenizer.vocab_size), padded to a multiple of 128: 128,384
    assert s["training"]["precision"] == "fp8" and s["training"]["fp8_recipe"] == "delayed"
    assert s["training"]["fp32_grad_accum"] is False and s["training"]["fp8_param_gather"]
    assert s["training"]["attention_kernel"] == "cudnn"  # --attention-backend fused
    assert s["model"]["vocab"] == 128384
    assert s["parallel"] == {"tp": 1, "cp": 1, "sequence_parallel": False, "zero": 1}
    assert s["overlap"] == {"dp_grad_reduce": True, "param_gather": True, "tp_comm": False}
    case = {c.name: c for c in load_cases_file(ROOT / "validation" / "nvidia-dgxc-h100.yaml")}[
        "dgxc/llama3-8b-fp8-8gpu"
    ].scenario
    assert _differences(_resolved(s), _resolved(case)) == {
        # names only: the case spells its settings out rather than naming a framework
        "name": ("train_llama3_8b_h100_fp8", "scenario"),
        "framework": ("megatron-core", None),
        "model.name": (None, "llama3-8b"),
        # the case leaves them to the model's defaults: no biases, no dropout, hidden / heads
        "model.bias": (False, None),
        "model.dropout": (False, None),
        "model.head_dim": (128, None),
        # NullTokenizer's padded vocabulary (above) vs Llama 3's tokenizer (NeMo)
        "model.vocab": (128384, 128256),
        # the NeMo run the case transcribes used context parallelism 2; the script uses 1
        "parallel.cp": (1, 2),
        # Megatron-LM's defaults (--check-for-nan-in-loss-and-grad on, no
        # --ddp-average-in-collective) vs NeMo's performance recipe, which turns both off
        "dp.nan_check": (True, False),
        "dp.prescale": (True, False),
        # and averaging in the collective asks NCCL for ReduceOp.AVG instead of SUM
        "dp.reduce_op": ("sum", "avg"),
        # Megatron-Core's own bucket size vs NeMo's MegatronCommOverlapCallback's 128 Mi
        # parameters beside the distributed optimizer
        "dp.bucket_mb": ("megatron-core", "comm-overlap"),
    }
    # with those fields as the case has them, the two simulate the same step, bit for bit
    aligned = apply_overrides(
        s,
        [
            ("model.vocab", 128256), ("parallel.cp", 2), ("dp.nan_check", False), ("dp.prescale", False),
            ("dp.reduce_op", "avg"), ("dp.bucket_mb", "comm-overlap"),
        ],
    )  # fmt: skip
    assert _step(aligned) == _step(case)


def test_mixtral_8x7b_script_is_the_mixtral_preset_shape():
    imported = import_config(
        "megatron",
        MEGATRON / "train_mixtral_8x7b_distributed.sh",
        ImportOptions(cluster="dgx-h100", nodes=4),
    )
    s = imported.scenario
    # Llama2Tokenizer keeps its size in its tokenizer.model: asked for, not guessed
    assert "model.vocab" in imported.needs
    s = apply_overrides(s, [("model.vocab", 32000)])
    # arguments.py: --moe-ffn-hidden-size defaults to --ffn-hidden-size (Mixtral's experts are
    # whole 14,336-wide SwiGLU MLPs); the preset is mistralai/Mixtral-8x7B-v0.1's config.json
    preset = load_preset("mixtral-8x7b")
    for key in ("layers", "hidden", "heads", "kv_heads", "ffn", "experts", "top_k", "expert_ffn"):
        assert s["model"][key] == getattr(preset, key), key
    assert s["parallel"] == {"tp": 1, "pp": 4, "ep": 8, "sequence_parallel": False, "zero": 1}
    assert s["moe"] == {"dispatcher": "alltoall"}
    assert s["training"] == {
        "micro_batch": 1, "global_batch": 256, "seq_len": 4096, "precision": "bf16",
        "fp32_grad_accum": True, "recompute": "none",
    }  # fmt: skip
    lines = " ".join(imported.skipped_lines())
    for flag in ("--moe-router-load-balancing-type", "--moe-aux-loss-coeff"):
        assert flag in lines
    # the kernel switches the model times one way either way are noted, not listed as skipped
    assert "--moe-grouped-gemm: simulated so" in " ".join(imported.notes)
    assert _step(s) > 0


DEEPSPEED = Path(__file__).parent / "fixtures" / "launch" / "deepspeed"  # sources: SOURCES.md


def _deepspeed(name: str, nodes: int = 2) -> Any:
    return import_config(
        "deepspeed",
        DEEPSPEED / name,
        ImportOptions(cluster="dgx-a100", nodes=nodes, model="gpt3-1.3b", seq_len=1024),
    )


def test_deepspeed_examples_zero3_config_loads_and_simulates():
    imported = _deepspeed("ds_zero_stage_3_config.json")
    s = imported.scenario
    assert s["parallel"] == {"zero": 3}
    assert s["training"] == {
        "seq_len": 1024,
        "micro_batch": 8,
        "grad_accum": 1,
        "precision": "fp16",
    }
    # 1.000000e+09 in the JSON is the count DeepSpeed's pydantic config reads (an int field)
    assert s["zero3"] == {
        "max_live_parameters": 1_000_000_000, "max_reuse_distance": 1_000_000_000,
        "prefetch_bucket_size": 60_397_980, "reduce_bucket_size": 67_108_860,
    }  # fmt: skip
    # the example's misspelt key is not read by DeepSpeed either: listed, not guessed at
    assert any("stage3_param_persitence_threshold" in x for x in imported.skipped)
    assert _step(s) > 0


def test_deepspeed_batch_derivation_and_legacy_cpu_offload():
    # runtime/config.py _set_batch_related_parameters: train_batch_size 16 with accumulation 1
    # on 16 GPUs: micro-batch 16 // 16 // 1 = 1; zero/config.py: cpu_offload: true is the
    # deprecated spelling of offload_optimizer {device: cpu}
    s = _deepspeed("ds_zero2_cpu_offload_config.json").scenario
    assert (s["training"]["micro_batch"], s["training"]["global_batch"]) == (1, 16)
    assert s["training"]["optimizer_offload"] == 1.0 and s["parallel"] == {"zero": 2}
    assert _step(s) > 0
    # on 3 nodes (24 GPUs) 16 is no whole micro-batch: DeepSpeed's _batch_assertion fails
    with pytest.raises(UserError, match="train_batch_size: 16 is not micro-batch x 1"):
        _deepspeed("ds_zero2_cpu_offload_config.json", nodes=3)


def test_deepspeed_parameter_offload_is_refused_in_one_line():
    with pytest.raises(UserError, match="offload_param.device: 'cpu': parameter offload"):
        _deepspeed("alpaca_lora_zero3_ds_config.json")


def test_torchtitan_llama3_405b_toml_loads_and_simulates():
    imported = import_config(
        "torchtitan",
        Path(__file__).parent / "fixtures" / "launch" / "torchtitan" / "llama3_405b.toml",
        ImportOptions(cluster="dgx-h100", nodes=16),
    )
    s = imported.scenario
    # 128 GPUs / tp 8 = 16-way FSDP (shard degree -1); converters = "float8" as a string (the
    # shipped TOML's spelling) turns on torchao's tensorwise FP8 (current scaling), with the
    # FSDP all-gather in FP8; filter_fqns = "output" keeps the LM head 16-bit, as fp8 costs it
    assert s["model"] == {"preset": "llama3.1-405b"}
    assert s["parallel"] == {
        "tp": 8, "pp": 1, "cp": 1, "dp": 16, "zero": 3, "sequence_parallel": True,
    }  # fmt: skip
    assert s["training"] == {
        "seq_len": 8192, "micro_batch": 2, "global_batch": 32, "precision": "fp8", "fp8_recipe": "current",
        "fp8_param_gather": True, "recompute": "full", "elementwise": "fused",
    }  # fmt: skip
    assert s["overlap"] == {"tp_comm": True}  # enable_async_tensor_parallel
    assert not any("filter_fqns" in x for x in imported.skipped)
    assert _step(s) > 0


def test_deepseek2_lite_script_has_the_v2_lite_mla_and_moe_shape():
    imported = import_config(
        "megatron",
        MEGATRON / "train_deepseek2_lite_h100_fp8.sh",
        ImportOptions(cluster="dgx-h100", nodes=1),
    )
    # HuggingFaceTokenizer sizes itself from deepseek-ai/DeepSeek-V2-Lite's files (Megatron
    # ignores the script's --vocab-size 128256 for it): asked for, with the padding to use
    assert "a multiple of 3200 x tp 8 = 25600" in imported.needs["model.vocab"]
    s = apply_overrides(imported.scenario, [("model.vocab", 102400)])
    m = s["model"]
    # deepseek-ai/DeepSeek-V2-Lite config.json: kv_lora_rank 512, q_lora_rank null (0 here),
    # qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, 64 routed experts of 1408,
    # top-6, 2 shared (--moe-shared-expert-intermediate-size 2816 = 2 x 1408), first_k_dense 1
    assert m["mla"] == {
        "q_lora_rank": 0, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128,
    }  # fmt: skip
    assert (m["experts"], m["expert_ffn"], m["top_k"], m["shared_experts"]) == (64, 1408, 6, 2)
    assert (m["dense_layers"], m["layers"], m["ffn"]) == (1, 16, 10944)  # the script's 16 layers
    assert "qk_norm" not in m  # --qk-layernorm under MLA: the latents' own norms
    # --transformer-impl local: Megatron-Core's unfused DotProductAttention
    assert s["training"]["flash_attention"] is False
    assert _step(s) > 0


def test_torchtitan_llama4_scout_toml_names_the_scout_preset():
    # torchtitan/experiments/llama4 llama4_configs["17bx16e"]: Scout (48 layers, 16 experts);
    # this release's TOML sets no expert parallelism, so the experts are FSDP-sharded (ep 1)
    imported = import_config(
        "torchtitan",
        Path(__file__).parent / "fixtures" / "launch" / "torchtitan" / "llama4_17bx16e.toml",
        ImportOptions(cluster="dgx-h100", nodes=8),
    )
    s = imported.scenario
    assert s["model"] == {"preset": "llama4-scout"}
    assert s["parallel"] == {
        "tp": 8, "pp": 1, "cp": 1, "dp": 8, "zero": 3, "sequence_parallel": True,
    }  # fmt: skip
    assert s["training"] == {
        "seq_len": 8192, "micro_batch": 8, "global_batch": 64, "precision": "bf16", "recompute": "full",
    }  # fmt: skip
    # its [float8] section is inert: converters (commented out) does not list float8
    assert "[float8] (float8 is off: model.converters does not list it)" in imported.skipped
    assert _step(s) > 0


def test_megatron_deepspeed_llama2_example_script():
    # microsoft/Megatron-DeepSpeed examples_deepspeed: its DeepSpeed JSON is written by a
    # here-document (skipped: a command's input, not statements); --deepspeed selects DeepSpeed's
    # engine, where bf16 at ZeRO stage 0 is its BF16_Optimizer (sharded as ZeRO-1);
    # Megatron-DeepSpeed's own spellings: --normalization rmsnorm, --num-key-value-heads 4
    imported = import_config(
        "megatron",
        Path(__file__).parent
        / "fixtures"
        / "launch"
        / "megatron-deepspeed"
        / "pretrain_llama2_distributed.sh",
        ImportOptions(cluster="dgx-a100", nodes=1),
    )
    assert "model.vocab" in imported.needs  # GPTSentencePieceTokenizer: its tokenizer.model
    s = apply_overrides(imported.scenario, [("model.vocab", 32000)])
    assert s["framework"] == "deepspeed"
    assert (s["model"]["norm"], s["model"]["kv_heads"], s["model"]["position"]) == (
        "rmsnorm",
        4,
        "rope",
    )
    assert s["parallel"] == {"tp": 2, "pp": 2, "zero": 1, "sequence_parallel": False}
    assert (s["training"]["micro_batch"], s["training"]["global_batch"]) == (4, 32)
    assert not any("train_batch_size" in x for x in imported.skipped)  # the heredoc's lines
    assert _step(s) > 0
