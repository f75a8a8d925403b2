"""Settings that do nothing in the layout (simcluster/inert.py): each rule fires on a minimal
scenario that writes the setting where it is inert and stays quiet where the setting acts;
a framework preset's defaults and shipped scenarios never fire.

The conditions are the frameworks' own: Megatron-Core's Layout has sequence parallelism only
with tp > 1 (``sequence_parallel and tp > 1``), TransformerEngine's userbuffers overlap the
sequence-parallel all-gather and reduce-scatter (no TP group at tp 1), PyTorch FSDP's
per-layer gathers (``zero3.*``) exist only at ZeRO-3, HSDP's replica all-reduce only with
more than one replica, a pipeline's sends only with pp > 1.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.frameworks import FRAMEWORKS
from simcluster.inert import RULES, InertNote, common_notes, inert_settings
from simcluster.scenario import load_scenario, scenario_from_dict, shipped_scenarios
from simcluster.validate import CaseResult, load_cases
from tests.conftest import GPT_LIKE, make_scenario


def _settings(**sections: Any) -> list[str]:
    return [n.setting for n in inert_settings(build_context(scenario_from_dict(make_scenario(**sections))))]


def _moe(overrides: list[tuple[str, Any]]) -> list[str]:
    """Mixtral 8x7B on 32 H100s (tp 2, ep 8, sequence parallelism): an MoE layout."""
    return [n.setting for n in inert_settings(build_context(load_scenario("mixtral-8x7b-32xh100", overrides)))]


PARALLEL_BLOCK = {**GPT_LIKE, "parallel_block": True}

#: (setting, sections where it is inert, sections where it acts)
CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("parallel.sequence_parallel", {"parallel": {"sequence_parallel": True}},
     {"parallel": {"tp": 2, "sequence_parallel": True}}),
    # context.Context.stage_orders: one stage runs no pipeline schedule (Megatron's no_pipelining)
    ("parallel.schedule", {"parallel": {"schedule": "zb-auto"}}, {"parallel": {"pp": 2, "schedule": "zb-auto"}}),
    # the column linears keep or re-gather a sequence-parallel input only (saved_gather.py)
    ("parallel.sp_regather", {"parallel": {"tp": 2, "sp_regather": False}},
     {"parallel": {"tp": 2, "sequence_parallel": True, "sp_regather": False}}),
    ("parallel.cp_comm", {"parallel": {"cp_comm": "a2a"}}, {"parallel": {"cp": 2, "cp_comm": "a2a"}}),
    ("parallel.cp_a2a", {"parallel": {"cp_comm": "a2a+p2p", "cp_a2a": 2}},
     {"parallel": {"cp": 4, "cp_comm": "a2a+p2p", "cp_a2a": 2}}),
    ("parallel.cp_a2a_impl", {"parallel": {"cp": 2, "cp_comm": "p2p", "cp_a2a_impl": "deepspeed"}},
     {"parallel": {"cp": 2, "cp_comm": "a2a", "cp_a2a_impl": "deepspeed"}}),
    ("parallel.parallel_block_comm", {"model": PARALLEL_BLOCK, "parallel": {"parallel_block_comm": "fused"}},
     {"model": PARALLEL_BLOCK, "parallel": {"tp": 2, "parallel_block_comm": "fused"}}),
    ("parallel.partition", {"parallel": {"partition": "nanotron"}}, {"parallel": {"pp": 2, "partition": "nanotron"}}),
    # Megatron's --account-for-embedding/loss-in-pipeline-split move layers between stages only
    ("parallel.embedding_in_split", {"parallel": {"embedding_in_split": True}},
     {"cluster": {"gpus": 3}, "parallel": {"pp": 3, "embedding_in_split": True}, "training": {"global_batch": 6}}),
    ("parallel.loss_in_split", {"parallel": {"loss_in_split": True}},
     {"cluster": {"gpus": 3}, "parallel": {"pp": 3, "loss_in_split": True}, "training": {"global_batch": 6}}),
    # Megatron-Core's schedule without a pipeline never drains the kept head GEMMs
    # (with gradient accumulation fusion, which Megatron-Core's deferral needs)
    ("parallel.defer_head_wgrad", {"parallel": {"defer_head_wgrad": True}, "training": {"grad_accum_fusion": True}},
     {"parallel": {"pp": 2, "defer_head_wgrad": True}, "training": {"grad_accum_fusion": True}}),
    ("parallel.head_wgrad_deferral_limit", {"parallel": {"pp": 2, "head_wgrad_deferral_limit": 1}},
     {"parallel": {"pp": 2, "defer_head_wgrad": True, "head_wgrad_deferral_limit": 1},
      "training": {"grad_accum_fusion": True}}),
    ("parallel.activation_limit", {"parallel": {"pp": 2, "schedule": "zbv", "activation_limit": 0.75}},
     {"parallel": {"pp": 2, "schedule": "v-auto", "activation_limit": 0.75}}),
    ("training.fp8_recipe", {"training": {"fp8_recipe": "current"}},
     {"training": {"fp8_recipe": "current", "precision": "fp8"}}),
    # torchao's casts (parallelism/torchao_float8.py): FP8 with per-tensor scales only
    ("training.fp8_library", {"training": {"fp8_library": "torchao"}},
     {"training": {"fp8_library": "torchao", "precision": "fp8", "fp8_recipe": "current"}}),
    # TE's NVFP4BlockScaling options (compute.py quantise): nothing to transform or round in FP8
    ("training.nvfp4_hadamard", {"training": {"precision": "fp8", "nvfp4_hadamard": False}},
     {"cluster": {"hardware": "dgx-b200"}, "training": {"precision": "nvfp4", "nvfp4_hadamard": False}}),
    ("training.nvfp4_stochastic_rounding", {"training": {"nvfp4_stochastic_rounding": False}},
     {"cluster": {"hardware": "dgx-b200"}, "training": {"precision": "nvfp4", "nvfp4_stochastic_rounding": False}}),
    # the amax all-reduce runs only under FP8 delayed scaling (parallelism/fp8_amax.py)
    ("training.tp_only_amax_red", {"parallel": {"tp": 2}, "training": {"precision": "fp8", "fp8_recipe": "current",
                                                                      "tp_only_amax_red": True}},
     {"parallel": {"tp": 2}, "training": {"precision": "fp8", "tp_only_amax_red": True}}),
    ("training.fp8_amax_async", {"parallel": {"tp": 2}, "training": {"precision": "bf16", "fp8_amax_async": True}},
     {"parallel": {"tp": 2}, "training": {"precision": "fp8", "fp8_amax_async": True}}),
    # parallelism/attention_time.py: packed documents as long as the sequence are one per sequence
    ("training.document_tokens", {"training": {"document_tokens": 2048}}, {"training": {"document_tokens": 512}}),
    # TE's cached FP8 weight copies (parallelism/fp8_weights.py): none in bf16
    # memory.layer_activation_bytes: the one cached copy of a fused attention's output
    ("training.attention_output_bytes", {"training": {"attention_output_bytes": 1.5, "flash_attention": False}},
     {"training": {"attention_output_bytes": 1.5}}),
    # fp8_store.fp8_swiglu_store: Megatron-Core's fused bias_swiglu keeps input.to(float8_e4m3fn)
    ("training.activation_fp8_store", {"training": {"activation_fp8_store": True}},
     {"model": {**GPT_LIKE, "mlp": "swiglu"}, "training": {"activation_fp8_store": True}}),
    ("training.fp8_weight_cache", {"training": {"fp8_weight_cache": False}},
     {"training": {"precision": "fp8", "fp8_weight_cache": False}}),
    # torchao_float8.weight_cast_seconds: torchao casts a dense model's weights anew every time
    ("training.fp8_weight_cache",
     {"training": {"precision": "fp8", "fp8_recipe": "current", "fp8_library": "torchao", "fp8_weight_cache": False}},
     {"training": {"precision": "fp8", "fp8_recipe": "current", "fp8_weight_cache": False}}),
    # apex's master remainders complete a bf16 weight (memory.keeps_remainders)
    ("training.master_weights", {"training": {"precision": "fp16", "master_weights": "remainder"}},
     {"training": {"master_weights": "remainder"}}),
    ("training.grad_16bit_freed", {"parallel": {"zero": 3}, "training": {"grad_16bit_freed": "step"}},
     {"parallel": {"zero": 1}, "training": {"grad_16bit_freed": "step"}}),
    ("training.recompute_partitioned", {"training": {"recompute": "full", "recompute_partitioned": True}},
     {"parallel": {"tp": 2}, "training": {"recompute": "full", "recompute_partitioned": True}}),
    ("overlap.tp_comm", {"overlap": {"tp_comm": True}},
     {"parallel": {"tp": 2, "sequence_parallel": True}, "overlap": {"tp_comm": True}}),
    ("overlap.tp_comm_cfg", {"parallel": {"tp": 2, "sequence_parallel": True}, "overlap": {"tp_comm_cfg": "te-2"}},
     {"parallel": {"tp": 2, "sequence_parallel": True}, "overlap": {"tp_comm": True, "tp_comm_cfg": "te-2"}}),
    # rs_dgrad needs a non-bulk *_dgrad buffer (userbuffers.check_rs_dgrad)
    ("overlap.tp_comm_rs_dgrad",
     {"parallel": {"tp": 2, "sequence_parallel": True}, "overlap": {"tp_comm": True, "tp_comm_rs_dgrad": True,
      "tp_comm_disable_qkv": True, "tp_comm_disable_fc1": True}},
     {"parallel": {"tp": 2, "sequence_parallel": True}, "overlap": {"tp_comm": True, "tp_comm_rs_dgrad": True,
      "tp_comm_disable_qkv": True, "tp_comm_cfg": {"fc1_dgrad": {"method": "ring_exchange"}}}}),
    ("overlap.tp_comm_disable_qkv",
     {"parallel": {"tp": 2, "sequence_parallel": True}, "overlap": {"tp_comm": True, "tp_comm_disable_qkv": True,
      "tp_comm_cfg": "pytorch-async-tp"}},
     {"parallel": {"tp": 2, "sequence_parallel": True}, "overlap": {"tp_comm": True, "tp_comm_disable_qkv": True}}),
    ("overlap.tp_comm_disable_fc1", {"parallel": {"tp": 2}, "overlap": {"tp_comm": True, "tp_comm_disable_fc1": True}},
     {"parallel": {"tp": 2, "sequence_parallel": True}, "overlap": {"tp_comm": True, "tp_comm_disable_fc1": True}}),
    ("overlap.tp_async", {"overlap": {"tp_async": True}},
     {"parallel": {"tp": 2, "sequence_parallel": True}, "overlap": {"tp_async": True}}),
    ("overlap.tp_grad_async", {"overlap": {"tp_grad_async": False}},
     {"parallel": {"tp": 2}, "overlap": {"tp_grad_async": False}}),
    ("overlap.pp_comm", {"overlap": {"pp_comm": False}}, {"parallel": {"pp": 2}, "overlap": {"pp_comm": False}}),
    ("overlap.pp_p2p", {"overlap": {"pp_comm": False, "pp_p2p": "serial"}},
     {"parallel": {"pp": 2}, "overlap": {"pp_comm": False, "pp_p2p": "serial"}}),
    ("overlap.pp_scatter_gather", {"parallel": {"tp": 2, "pp": 2, "sequence_parallel": True},
                                   "overlap": {"pp_scatter_gather": True}},
     {"parallel": {"tp": 2, "pp": 2}, "overlap": {"pp_scatter_gather": True}}),
    ("overlap.dp_grad_reduce", {"cluster": {"gpus": 1}, "overlap": {"dp_grad_reduce": False}},
     {"overlap": {"dp_grad_reduce": False}}),
    ("overlap.param_gather", {"overlap": {"param_gather": False}},
     {"parallel": {"zero": 1}, "overlap": {"param_gather": False}}),
    ("overlap.optimizer_offload", {"overlap": {"optimizer_offload": True}},
     {"training": {"optimizer_offload": 0.5}, "overlap": {"optimizer_offload": True}}),
    ("zero3.prefetch", {"parallel": {"zero": 1}, "zero3": {"prefetch": False}},
     {"parallel": {"zero": 3}, "zero3": {"prefetch": False}}),
    ("zero3.buffers", {"parallel": {"zero": 2}, "zero3": {"buffers": "copies"}},
     {"parallel": {"zero": 3}, "zero3": {"buffers": "copies"}}),
    ("zero3.reshard_after_forward", {"parallel": {"zero": 1}, "zero3": {"reshard_after_forward": False}},
     {"parallel": {"zero": 3}, "zero3": {"reshard_after_forward": False}}),
    ("zero3.replica_all_reduce", {"parallel": {"zero": 3}, "zero3": {"replica_all_reduce": "last_microbatch"}},
     {"parallel": {"zero": 3, "zero_shard": 4}, "zero3": {"replica_all_reduce": "last_microbatch"}}),
    # FSDP2's set_requires_gradient_sync / set_reshard_after_backward: nothing to defer with one
    # microbatch (make_scenario's 8 sequences on dp 8), nor under a pipeline, which does it itself
    ("zero3.gradient_sync", {"parallel": {"zero": 3}, "zero3": {"buffers": "copies", "gradient_sync": "last_microbatch"}},
     {"parallel": {"zero": 3}, "training": {"global_batch": 16},
      "zero3": {"buffers": "copies", "gradient_sync": "last_microbatch"}}),
    ("zero3.reshard_after_backward", {"parallel": {"zero": 3}, "zero3": {"buffers": "copies", "reshard_after_backward": False}},
     {"parallel": {"zero": 3}, "training": {"global_batch": 16},
      "zero3": {"buffers": "copies", "reshard_after_backward": False}}),
    ("zero3.prefetch_bucket_size", {"parallel": {"zero": 2}, "zero3": {"prefetch_bucket_size": 1000}},
     {"parallel": {"zero": 3}, "zero3": {"prefetch_bucket_size": 1000}}),
    ("zero3.param_persistence_threshold", {"parallel": {"zero": 1}, "zero3": {"param_persistence_threshold": 10}},
     {"parallel": {"zero": 3}, "zero3": {"param_persistence_threshold": 10}}),
    ("zero3.max_live_parameters", {"parallel": {"zero": 3}, "zero3": {"max_live_parameters": 10**9}},
     {"parallel": {"zero": 3}, "zero3": {"prefetch_bucket_size": 1000, "max_live_parameters": 10**9}}),
    ("zero3.max_reuse_distance", {"parallel": {"zero": 1}, "zero3": {"max_reuse_distance": 10**9}},
     {"parallel": {"zero": 3}, "zero3": {"prefetch_bucket_size": 1000, "max_reuse_distance": 10**9}}),
    ("zero3.reduce_bucket_size", {"parallel": {"zero": 2}, "zero3": {"reduce_bucket_size": 10**6}},
     {"parallel": {"zero": 3}, "zero3": {"reduce_bucket_size": 10**6}}),
    ("zero3.backward_prefetch", {"parallel": {"zero": 3}, "zero3": {"prefetch": False, "backward_prefetch": "none"}},
     {"parallel": {"zero": 3}, "zero3": {"backward_prefetch": "none"}}),
    ("zero3.limit_all_gathers", {"parallel": {"zero": 3}, "zero3": {"limit_all_gathers": False}},
     {"parallel": {"zero": 3}, "zero3": {"buffers": "flat", "limit_all_gathers": False}}),
    ("zero3.forward_prefetch", {"parallel": {"zero": 3}, "zero3": {"forward_prefetch": True}},
     {"parallel": {"zero": 3}, "zero3": {"buffers": "flat", "forward_prefetch": True}}),
    ("training.autocast", {"parallel": {"zero": 3}, "zero3": {"buffers": "flat"}, "training": {"autocast": True}},
     {"training": {"autocast": True}}),
    # ZeRO++ (DeepSpeed's coordinator: prefetch_bucket_size set): nothing below ZeRO-3, and
    # nothing to quantize with one ZeRO rank (tp 8 leaves dp 1)
    ("zero3.hpz_partition_size", {"parallel": {"zero": 2}, "zero3": {"hpz_partition_size": 2}},
     {"parallel": {"zero": 3}, "zero3": {"prefetch_bucket_size": 1000, "hpz_partition_size": 2}}),
    ("zero3.quantized_weights",
     {"parallel": {"zero": 3, "tp": 8}, "zero3": {"prefetch_bucket_size": 1000, "quantized_weights": True}},
     {"parallel": {"zero": 3}, "zero3": {"prefetch_bucket_size": 1000, "quantized_weights": True}}),
    ("zero3.quantized_gradients", {"parallel": {"zero": 1}, "zero3": {"quantized_gradients": True}},
     {"parallel": {"zero": 3}, "zero3": {"prefetch_bucket_size": 1000, "quantized_gradients": True}}),
    ("dp.bucket_stages", {"dp": {"bucket_stages": "first"}}, {"parallel": {"pp": 2}, "dp": {"bucket_stages": "first"}}),
    # fp32 accumulation (the default) reduced in fp32: nothing to cast (data.py reduce_cast_bytes)
    ("dp.reduce_dtype", {"dp": {"reduce_dtype": "fp32"}}, {"dp": {"reduce_dtype": "16bit"}}),
    ("dp.flatten_copies", {"parallel": {"zero": 3}, "dp": {"flatten_copies": True}},
     {"parallel": {"zero": 1}, "dp": {"flatten_copies": True}}),
    ("dp.wait_reduction", {"parallel": {"zero": 1}, "overlap": {"dp_grad_reduce": False}, "dp": {"wait_reduction": True}},
     {"parallel": {"zero": 1}, "dp": {"wait_reduction": True}}),
    ("dp.backward_sync", {"parallel": {"zero": 2}, "overlap": {"dp_grad_reduce": False}, "dp": {"backward_sync": "host"}},
     {"parallel": {"zero": 2}, "dp": {"backward_sync": "host"}}),
    # simcluster/lora.py: targets and dropout are the adapters', which rank 0 does not build
    ("lora.targets", {"lora": {"targets": ["fc1"]}}, {"lora": {"rank": 8, "targets": ["fc1"]}}),
    ("lora.dropout", {"lora": {"dropout": 0.1}}, {"lora": {"rank": 8, "dropout": 0.1}}),
    # parallelism/lora_blocks.py: the all-to-all replaces a row-parallel adapter's gather into the
    # sequence shard (tp > 1 with sequence parallelism only)
    # layout_checks.check_lora: NeMo's TEFusedLoRALinear is built at tp 1 only
    ("lora.op_fuser", {"parallel": {"tp": 2}, "lora": {"rank": 8, "op_fuser": True}},
     {"lora": {"rank": 8, "op_fuser": True}}),
    ("lora.op_fuser", {"lora": {"op_fuser": True}}, {"lora": {"rank": 8, "op_fuser": True}}),
    # module_offload.py: a dense model has no routed experts' input to move
    ("training.offload_modules", {"training": {"offload_modules": ["expert_fc1"]}},
     {"model": {**GPT_LIKE, "experts": 8, "top_k": 2, "expert_ffn": 1024}, "parallel": {"ep": 8},
      "training": {"offload_modules": ["expert_fc1"]}}),
    # engine/worker.py: the joins wait for the fine-grained offload's copies
    ("training.offload_max_inflight", {"training": {"offload_max_inflight": 1}},
     {"model": {**GPT_LIKE, "experts": 8, "top_k": 2, "expert_ffn": 1024}, "parallel": {"ep": 8},
      "training": {"offload_modules": ["expert_fc1"], "offload_max_inflight": 1}}),
    ("training.offload_min_elements", {"training": {"offload_min_elements": 0}},
     {"model": {**GPT_LIKE, "experts": 8, "top_k": 2, "expert_ffn": 1024}, "parallel": {"ep": 8},
      "training": {"offload_modules": ["expert_fc1"], "offload_min_elements": 0}}),
    ("lora.a2a", {"parallel": {"tp": 2}, "lora": {"rank": 8, "a2a": True}},
     {"parallel": {"tp": 2, "sequence_parallel": True}, "lora": {"rank": 8, "a2a": True}}),
    ("lora.a2a", {"parallel": {"tp": 2, "sequence_parallel": True}, "lora": {"rank": 8, "targets": ["qkv"], "a2a": True}},
     {"parallel": {"tp": 2, "sequence_parallel": True}, "lora": {"rank": 8, "targets": ["qkv", "fc2"], "a2a": True}}),
]  # fmt: skip


@pytest.mark.parametrize(("setting", "inert", "acts"), CASES, ids=[c[0] for c in CASES])
def test_rule_fires_where_inert_and_not_where_it_acts(setting, inert, acts):
    assert setting in _settings(**inert)
    assert setting not in _settings(**acts)


def _without(sections: dict[str, Any], setting: str) -> dict[str, Any]:
    section, key = setting.split(".")
    return {**sections, section: {k: v for k, v in sections[section].items() if k != key}}


def _outcome(sections: dict[str, Any]) -> tuple[Any, ...]:
    """What a setting could change: the simulated step, its parts, the peak, the memory walk."""
    from simcluster.engine import simulate
    from simcluster.memory_report import memory_summary

    ctx = build_context(scenario_from_dict(make_scenario(**sections)))
    s = simulate(ctx).summary
    walk = memory_summary(ctx)["total_bytes"]
    return s["step_time_s"], s["peak_memory_bytes"], s["exposed_comm_s"], s["time_breakdown_s"], walk


#: the new rules' inert layouts, beside CASES': a small MoE model (8 experts of width 1024)
#: with ep 8 packed into one 8-GPU node, and tp 2 with sequence parallelism under userbuffers
#: or nanotron's async linears
SMALL_MOE = {**GPT_LIKE, "experts": 8, "top_k": 2, "expert_ffn": 1024}
MORE_INERT = [
    ("zero3.quantized_gradients", {"cluster": {"gpus": 1}, "parallel": {"zero": 3},
                                   "zero3": {"prefetch_bucket_size": 1000, "quantized_gradients": True}}),
    # top-1 across two nodes: DeepEP's one copy per node is the one copy the all-to-all sends
    ("moe.dispatcher", {"model": {**SMALL_MOE, "experts": 16, "top_k": 1}, "cluster": {"gpus": 16}, "parallel": {"ep": 16},
                        "training": {"global_batch": 16}, "moe": {"dispatcher": "deepep"}}),
    # parallelism/expert.py dispatch_sms: NCCL's all-to-all holds its own channels; no all-to-all at ep 1
    ("moe.dispatch_sms", {"model": SMALL_MOE, "parallel": {"ep": 8}, "moe": {"dispatch_sms": 32}}),
    # ... even where the all-to-alls run beside compute (the shared experts under them)
    ("moe.dispatch_sms", {"model": {**SMALL_MOE, "shared_experts": 1}, "parallel": {"ep": 8},
                          "moe": {"shared_expert_overlap": True, "dispatch_sms": 32}}),
    ("moe.dispatch_sms", {"model": SMALL_MOE, "moe": {"dispatcher": "deepep", "dispatch_sms": 32}}),
    # parallelism/expert.py padding_seconds: no alignment copies in BF16, nor when padded to capacity
    ("moe.aligned_dispatch", {"model": SMALL_MOE, "parallel": {"ep": 8}, "moe": {"aligned_dispatch": True}}),
    ("moe.aligned_dispatch", {"model": SMALL_MOE, "parallel": {"ep": 8}, "training": {"precision": "fp8"},
                              "moe": {"aligned_dispatch": True, "capacity_factor": 1.0, "pad_to_capacity": True}}),
    # parallelism/expert.py overlaps_shared_experts: no shared experts, or no all-to-all (ep 1)
    ("moe.shared_expert_overlap", {"model": SMALL_MOE, "parallel": {"ep": 8}, "moe": {"shared_expert_overlap": True}}),
    ("moe.shared_expert_overlap", {"model": {**SMALL_MOE, "shared_experts": 1}, "moe": {"shared_expert_overlap": True}}),
    ("overlap.tp_grad_async", {"parallel": {"tp": 2, "sequence_parallel": True},
                               "overlap": {"tp_comm": True, "tp_grad_async": False}}),
    ("overlap.tp_grad_async", {"parallel": {"tp": 2, "sequence_parallel": True},
                               "overlap": {"tp_async": True, "tp_grad_async": False}}),
    # DeepSpeed's partition_activations splits only what deepspeed.checkpointing saves
    ("training.recompute_partitioned", {"parallel": {"tp": 2}, "training": {"recompute": "selective",
                                                                          "recompute_partitioned": True}}),
    # Megatron's block turns --distribute-saved-activations off under sequence parallelism
    ("training.recompute_partitioned", {"parallel": {"tp": 2, "sequence_parallel": True},
                                        "training": {"recompute": "full", "recompute_partitioned": True}}),
    # FSDP's kept gathers are its MixedPrecision's 16-bit ones, autocast or not (the static
    # memory once counted them fp32 under autocast)
    ("training.autocast", {"parallel": {"zero": 3}, "zero3": {"buffers": "flat", "reshard_after_forward": False},
                           "training": {"autocast": True}}),
    ("training.autocast", {"parallel": {"zero": 3}, "zero3": {"buffers": "copies", "reshard_after_forward": False},
                           "training": {"autocast": True}}),
    ("training.autocast", {"parallel": {"zero": 3, "pp": 2}, "zero3": {"buffers": "copies"},
                           "training": {"autocast": True}}),
    # under a pipeline every stage accumulates unsharded and reduces once, after its last
    # backward (worker._zero3_reduce_all), whatever the setting
    ("zero3.gradient_sync", {"parallel": {"zero": 3, "pp": 2}, "training": {"global_batch": 16},
                             "zero3": {"buffers": "copies", "gradient_sync": "last_microbatch"}}),
    ("zero3.reshard_after_backward", {"parallel": {"zero": 3, "pp": 2}, "training": {"global_batch": 16},
                                      "zero3": {"buffers": "copies", "reshard_after_backward": False}}),
    # PyTorch FSDP reduce-scatters each unit beside the backward whatever the setting: no ZeRO
    # 0-1 bucket reduction after the backward on top of them (the engine once reduced the
    # gradients twice); DeepSpeed's coordinator runs them on the compute stream without it
    # (tests/test_deepspeed_zero3_stream.py), so there it is not inert
    ("overlap.dp_grad_reduce", {"parallel": {"zero": 3}, "overlap": {"dp_grad_reduce": False}}),
    ("zero3.forward_prefetch", {"parallel": {"zero": 3}, "zero3": {"buffers": "copies", "prefetch": False,
                                                                   "forward_prefetch": True}}),
    # the live-parameter cap limits only what is fetched ahead (zero3_coordinator.prefetch_window)
    ("zero3.max_live_parameters", {"parallel": {"zero": 3},
                                   "zero3": {"prefetch_bucket_size": 1000, "prefetch": False, "max_live_parameters": 10**6}}),
    # with one reduction in flight (FSDP2's rule, dp.wait_reduction) the coordinator's gradient
    # bucket is not used, in memory either (its pairing with FSDP2's copies is refused:
    # zero3_coordinator.check)
    ("zero3.reduce_bucket_size", {"parallel": {"zero": 3}, "dp": {"wait_reduction": True},
                                  "zero3": {"prefetch_bucket_size": 1000, "reduce_bucket_size": 10**6}}),
    ("zero3.reduce_bucket_size", {"parallel": {"zero": 3}, "zero3": {"buffers": "copies", "reduce_bucket_size": 10**6}}),
    # FSDP1's SHARD_GRAD_OP: the backward reuses the forward's gathers (no note before)
    ("zero3.backward_prefetch", {"parallel": {"zero": 3}, "zero3": {"buffers": "flat", "reshard_after_forward": False,
                                                                    "backward_prefetch": "post"}}),
]  # fmt: skip


@pytest.mark.parametrize(("setting", "inert"), [(c[0], c[1]) for c in CASES] + MORE_INERT)
def test_a_note_is_true_the_setting_changes_nothing_there(setting, inert):
    """Where a note says a setting has no effect, the scenario without it simulates to the same
    step time, parts, exposed communication and peak, and walks to the same memory, bit for
    bit (a note the last round wrote for grad_16bit_freed without fp32 accumulation was not:
    the peaks differed)."""
    assert setting in _settings(**inert)
    assert _outcome(inert) == _outcome(_without(inert, setting))


def test_every_rule_has_a_case():
    """A rule added to the registry gets its pair of scenarios here (or among the MoE ones)."""
    covered = {c[0] for c in CASES} | {"parallel.etp", "parallel.ep_placement", "moe.dispatcher", "moe.aligned_dispatch",
                                     "moe.shared_expert_overlap", "moe.dispatch_sms"}
    assert covered == {rule.setting for rule in RULES}
    assert len({rule.setting for rule in RULES}) == len(RULES)  # one rule per setting


def test_deepspeeds_zero3_knobs_under_a_pipeline_and_beside_fsdp2s_reductions():
    """Under a pipeline ZeRO-3 gathers each stage once per step (FSDP2 under
    torch.distributed.pipelining), so DeepSpeed's per-layer knobs do nothing; its gradient bucket
    does nothing where FSDP2 keeps one reduce-scatter in flight per unit."""
    piped = {"parallel": {"zero": 3, "pp": 2}, "zero3": {"prefetch_bucket_size": 1000, "max_reuse_distance": 10}}
    assert _settings(**piped) == ["zero3.prefetch_bucket_size", "zero3.max_reuse_distance"]
    fsdp2 = {"parallel": {"zero": 3}, "zero3": {"buffers": "copies", "reduce_bucket_size": 10**6}}
    assert _settings(**fsdp2) == ["zero3.reduce_bucket_size"]


def test_a_16bit_gradient_lifetime_acts_without_fp32_accumulation_and_not_at_zero3():
    """Without fp32 accumulation the lifetime still acts: ``add`` (Megatron fp16, a 16-bit
    main_grad) frees each .grad into it, one tensor on the stash, where ``backward`` and
    ``step`` describe a .grad that is itself the accumulator: the peaks differ, so no note.
    At ZeRO-3 every value gives the same memory (the static 16-bit copy is kept only below
    ZeRO-3, grad_lifetime.separate_16bit_grad_kept): the note is true there."""
    from simcluster.memory_report import memory_summary

    def peak(**sections: Any) -> float:
        return memory_summary(build_context(scenario_from_dict(make_scenario(**sections))))["total_bytes"]

    off = {"fp32_grad_accum": False}
    assert "training.grad_16bit_freed" not in _settings(training={**off, "grad_16bit_freed": "backward"})
    assert peak(training={**off, "grad_16bit_freed": "backward"}) != peak(training=off)
    zero3 = {"zero": 3}
    assert "training.grad_16bit_freed" in _settings(parallel=zero3, training={"grad_16bit_freed": "step"})
    peaks = {peak(parallel=zero3, training={"grad_16bit_freed": v}) for v in ("add", "backward", "step")}
    assert len(peaks) == 1


def test_the_dispatcher_acts_wherever_deepep_moves_other_bytes():
    """parallelism/expert.py copies_per_token and deepep_link_factor, moe.dispatcher's readers:
    DeepEP sends a token once per destination holding its experts (per node across nodes,
    DeepSeek-V3 Sec. 3.2.2; per GPU inside one, DeepEP's ``is_token_in_rank``), the alltoall
    dispatcher all top_k copies; inside a node DeepEP's kernels also spend link time on a rank's
    own share (its README's intranode rates). Mixtral's file packs ep 8 of its 8 experts into
    one 8-GPU node: the same two copies either way, but DeepEP's own share acts; at ep 1
    nothing is dispatched."""
    deepep = ("moe.dispatcher", "deepep")
    assert _moe([deepep]) == []
    assert _moe([("parallel.ep", 1), deepep]) == ["moe.dispatcher"]
    assert _moe([("parallel.ep", 4), deepep]) == []
    assert _moe([("parallel.ep_placement", "spread"), deepep]) == []


def test_tp_grad_async_under_userbuffers_or_nanotrons_async_linears():
    """parallelism/layer.py fuses_wgrad reads overlap.tp_grad_async only where neither
    TransformerEngine's userbuffers (overlap.tp_comm, with sequence parallelism) nor nanotron's
    async linears (overlap.tp_async) run: each schedules the input gradient's collective itself."""
    tp2 = {"tp": 2, "sequence_parallel": True}
    off = {"tp_grad_async": False}
    assert "overlap.tp_grad_async" in _settings(parallel=tp2, overlap={**off, "tp_comm": True})
    assert "overlap.tp_grad_async" in _settings(parallel=tp2, overlap={**off, "tp_async": True})
    assert "overlap.tp_grad_async" not in _settings(parallel=tp2, overlap=off)
    # without sequence parallelism neither runs (tp_comm, tp_async are then the inert ones)
    got = _settings(parallel={"tp": 2}, overlap={**off, "tp_comm": True})
    assert "overlap.tp_grad_async" not in got and "overlap.tp_comm" in got


def test_the_reasons_read_as_one_line():
    notes = inert_settings(build_context(scenario_from_dict(make_scenario(
        parallel={"zero": 1}, zero3={"reshard_after_forward": False}))))
    assert [n.text for n in notes] == [
        "zero3.reshard_after_forward has no effect at parallel.zero=1 (only ZeRO-3 gathers parameters per layer)"
    ]


def test_one_record_of_what_the_scenario_wrote():
    """Scenario.written is the one record of the keys a scenario gave: scenario_from_dict's
    (before a framework preset fills in) or, for a scenario validated directly (no preset
    applied), the fields pydantic saw set. context.py asks it whether parallel.vpp and
    parallel.schedule were given beside layers_per_virtual_stage (Megatron's arguments.py:
    vpp = (layers // pp) // layers_per_virtual_stage; both given and different is an error)."""
    from simcluster.scenario import Scenario

    raw = make_scenario(framework="megatron-core", parallel={"tp": 1, "pp": 2, "layers_per_virtual_stage": 1})
    loaded = scenario_from_dict(raw)
    assert {"parallel.tp", "parallel.pp", "parallel.layers_per_virtual_stage", "framework"} <= loaded.written
    assert "overlap.tp_comm" not in loaded.written  # the preset's, not the scenario's
    direct = Scenario.model_validate(make_scenario(parallel={"tp": 1, "pp": 2, "vpp": 4}))
    assert {"parallel.tp", "parallel.pp", "parallel.vpp", "name"} <= direct.written
    assert "parallel.zero" not in direct.written
    # GPT_LIKE has 8 layers: 4 per stage in chunks of 1 is vpp 4, not the 2 written
    clash = {"tp": 1, "pp": 2, "vpp": 2, "layers_per_virtual_stage": 1}
    for scenario in (scenario_from_dict(make_scenario(parallel=clash)),
                     Scenario.model_validate(make_scenario(parallel=clash))):  # fmt: skip
        with pytest.raises(UserError, match="give one of them"):
            build_context(scenario)
    assert build_context(loaded).scenario.parallel.schedule == "interleaved"
    # as_written: the mapping a sweep or a fit hint changes and validates again, without the
    # preset's values (megatron-core's zero: 1, its overlaps), which then fill in anew
    mine = loaded.as_written()
    assert mine["parallel"] == {"tp": 1, "pp": 2, "layers_per_virtual_stage": 1}
    assert "overlap" not in mine and "dp" not in mine and mine["framework"] == "megatron-core"
    assert scenario_from_dict(mine) == loaded


def test_a_written_default_is_no_note():
    """Writing a field's own default states what happens anyway (zero3.prefetch is on by default)."""
    assert _settings(parallel={"zero": 1}, zero3={"prefetch": True}, overlap={"tp_comm": False}) == []


def test_notes_follow_the_registry_order():
    got = _settings(parallel={"zero": 1, "cp_comm": "a2a"}, zero3={"prefetch": False}, overlap={"tp_comm": True})
    assert got == ["parallel.cp_comm", "overlap.tp_comm", "zero3.prefetch"]


LAYOUTS = [
    {"tp": 1, "pp": 1, "zero": 0}, {"tp": 1, "pp": 1, "zero": 1}, {"tp": 2, "pp": 1, "zero": 3},
    {"tp": 1, "pp": 2, "zero": 1}, {"tp": 2, "pp": 2, "zero": 0},
]  # fmt: skip


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_a_framework_presets_defaults_never_fire(framework):
    """A preset fills overlaps, buckets and FSDP2 buffers for every layout (megatron-core's
    bucket_stages: first, torchtitan's zero3.replica_all_reduce, NeMo's tp_comm): only what the
    scenario wrote itself is named."""
    ran = 0
    for parallel in LAYOUTS:
        try:
            ctx = build_context(scenario_from_dict(make_scenario(framework=framework, parallel=parallel)))
        except UserError:
            continue  # a layout the framework does not run (nanotron's ZeRO-3, ...)
        ran += 1
        assert inert_settings(ctx) == [], (framework, parallel)
    assert ran >= (1 if framework == "pytorch-fsdp" else 2)  # FSDP1 runs zero 3 without a pipeline only


def test_what_the_preset_would_name_fires_when_the_scenario_writes_it():
    """The same value the preset sets, written by the scenario, is named: the rule is the same."""
    data = make_scenario(framework="megatron-core", dp={"bucket_stages": "first"})
    assert [n.setting for n in inert_settings(build_context(scenario_from_dict(data)))] == ["dp.bucket_stages"]


@pytest.mark.parametrize("name", shipped_scenarios())
def test_shipped_scenarios_write_no_inert_setting(name):
    assert inert_settings(build_context(load_scenario(name))) == []


#: settings the shipped cases write in layouts where they do nothing: each family transcribes
#: its recipe's flags case by case, whatever the case's degrees (NeMo's recipes set
#: tp_comm_overlap at tp 1, which Megatron-Core then turns off; nanotron's and Megatron-LM
#: 2021's configs state their p2p mode and scatter-gather at pp 1; DGX Cloud's and NeMo's
#: cases state Megatron-Core's bucket rule at pp 1; the Zero Bubble cases state the fork's
#: script's DP overlaps, off, on one data-parallel replica). The cases are faithful, the notes
#: true; a new kind of note on a shipped case is to be looked at (case or rule wrong?)
TRANSCRIBED = {
    "dp.bucket_stages", "overlap.tp_comm", "overlap.tp_grad_async", "overlap.pp_comm", "overlap.pp_p2p",
    "overlap.pp_scatter_gather", "parallel.partition", "overlap.dp_grad_reduce", "overlap.param_gather",
}  # fmt: skip


def test_shipped_cases_write_only_transcribed_recipe_flags():
    found = set()
    for case in load_cases():
        if not case.problem:
            found |= {n.setting for n in inert_settings(build_context(scenario_from_dict(dict(case.scenario))))}
    assert found <= TRANSCRIBED, found - TRANSCRIBED


def test_a_sweep_names_only_settings_inert_in_every_layout():
    """cp_comm carried into cp 1 and cp 2 layouts acts in one: no note; tp_comm inert at tp 1
    (no TP group) and at tp 2 without sequence parallelism: both reasons, once each."""
    def notes(**parallel: Any) -> list[InertNote]:
        data = make_scenario(parallel={**parallel, "cp_comm": "a2a"}, overlap={"tp_comm": True})
        return inert_settings(build_context(scenario_from_dict(data)))

    layouts = [notes(cp=1), notes(cp=2), notes(tp=2)]
    got = common_notes(layouts)
    assert [n.setting for n in got] == ["overlap.tp_comm", "overlap.tp_comm"]
    assert {n.where for n in got} == {"at parallel.tp=1", "without parallel.sequence_parallel"}
    assert common_notes([]) == []
    assert common_notes(layouts[:1] * 3) == layouts[0]  # the same note in every layout: once


def test_run_prints_the_note_and_records_it(cli, tmp_path):
    result = cli("run", "llama3-8b-8xh100", "--set", "zero3.reshard_after_forward=false", "--json",
                 "--set", "model.layers=2", "--set", "training.global_batch=8")  # fmt: skip
    assert result.code == 0
    line = "note: zero3.reshard_after_forward has no effect at parallel.zero=2 (only ZeRO-3 gathers parameters per layer)"
    assert line in result.err.splitlines()
    assert json.loads(result.out)["inert_settings"] == [line.removeprefix("note: ")]


def test_memory_prints_the_note(cli):
    result = cli("memory", "llama3-8b-8xh100", "--set", "overlap.tp_comm=true")
    assert result.code == 0
    assert "note: overlap.tp_comm has no effect at parallel.tp=1 (no TP collectives to overlap)" in result.err


def test_validate_names_the_cases_per_setting():
    from simcluster.commands.validate import inert_lines
    from simcluster.validate import Case

    def result(name: str, inert: tuple[str, ...]) -> CaseResult:
        case = Case(name=name, source="", family="f", metric="step_time_s", measured=1.0, scenario={})
        return CaseResult(case, 1.0, None, 0.0, inert=inert)

    text = "overlap.tp_comm has no effect at parallel.tp=1 (no TP collectives to overlap)"
    lines = inert_lines([result("a", (text,)), result("b", ()), result("c", (text,))])
    assert lines == [f"note: {text} in 2 case(s) (a, c)"]


def test_sweep_prints_each_note_once_and_only_where_every_layout_leaves_it_inert(cli, tmp_path):
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_scenario(parallel={"cp_comm": "a2a"}, zero3={"prefetch": False})))
    result = cli("sweep", str(path), "--cp", "1,2", "--jobs", "1", "--json")
    assert result.code == 0
    line = "zero3.prefetch has no effect at parallel.zero=0 (only ZeRO-3 gathers parameters per layer)"
    assert [ln for ln in result.err.splitlines() if ln.startswith("note:")] == [f"note: {line}"]
    assert json.loads(result.out)["inert_settings"] == [line]  # cp_comm acts at cp 2


def test_compare_names_the_scenario_of_each_note(cli, tmp_path):
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_scenario()))
    result = cli("compare", str(path), f"{path}@overlap.tp_comm=true", "--json")
    assert result.code == 0
    notes = [ln for ln in result.err.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1 and notes[0].endswith("overlap.tp_comm has no effect at parallel.tp=1 (no TP collectives to overlap)")
    assert list(json.loads(result.out)["inert_settings"].values()) == [[notes[0].split(": ", 2)[2]]]


def test_autocast_under_pytorch_fsdp_changes_nothing():
    """The note's claim holds: under FSDP1 or FSDP2 the reduce dtype and the state are FSDP's
    own (MixedPrecision), so the simulated step and memory are those without autocast."""
    from simcluster.engine import simulate

    base = make_scenario(parallel={"zero": 3}, zero3={"buffers": "flat"}, training={"fp32_grad_accum": False})
    plain = simulate(scenario_from_dict(base)).summary
    cast = simulate(scenario_from_dict(make_scenario(**{**base, "training": {**base["training"], "autocast": True}}))).summary
    assert (cast["step_time_s"], cast["peak_memory_bytes"]) == (plain["step_time_s"], plain["peak_memory_bytes"])


def test_replica_all_reduce_is_inert_under_a_pipeline():
    """torch.distributed.pipelining runs FSDP2's backward with set_requires_gradient_sync(False)
    for every microbatch and sets it back to True (reduce-scatter and all-reduce alike) before
    the step's one post_backward (stage.py backward_maybe_with_nosync, perform_reduce_grad), so
    set_requires_all_reduce cannot defer anything there; the engine reduces a pipelined stage
    once, after its last backward (worker._zero3_reduce_all)."""
    par = {"pp": 2, "zero": 3, "zero_shard": 2}
    inert = _settings(parallel=par, zero3={"replica_all_reduce": "last_microbatch"})
    assert inert == ["zero3.replica_all_reduce"]
    note = inert_settings(build_context(scenario_from_dict(make_scenario(
        parallel=par, zero3={"replica_all_reduce": "last_microbatch"}))))[0]
    assert note.where == "at parallel.pp=2"


def test_validate_says_its_inert_settings_in_one_line_unless_asked():
    """The shipped quick set wrote nine notes of recipe flags at degree 1 under its table;
    by default validate names the settings in one line, --notes lists each with its cases."""
    from simcluster.commands.validate import inert_summary
    from simcluster.validate import Case

    def result(name: str, inert: tuple[str, ...]) -> CaseResult:
        case = Case(name=name, source="", family="f", metric="step_time_s", measured=1.0, scenario={})
        return CaseResult(case, 1.0, None, 0.0, inert=inert)

    tp = "overlap.tp_comm has no effect at parallel.tp=1 (no TP collectives to overlap)"
    pp = "overlap.pp_comm has no effect at parallel.pp=1 (no pipeline sends or receives to overlap)"
    lines = inert_summary([result("a", (tp, pp)), result("b", ()), result("c", (tp,))])
    assert lines == [
        "note: 2 setting(s) written by 2 case(s) have no effect in their layouts "
        "(overlap.tp_comm, overlap.pp_comm); --notes says where and why"
    ]
    assert inert_summary([result("b", ())]) == []


@pytest.mark.parametrize("flag, per_setting", [((), False), (("--notes",), True)])
def test_validate_prints_the_summary_or_the_notes(cli, tmp_path, flag, per_setting):
    import yaml

    case = {"name": "c1", "source": "test", "measured": {"step_time_s": 1.0},
            "scenario": make_scenario(overlap={"tp_comm": True})}  # fmt: skip
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump({"cases": [case]}))
    result = cli("validate", str(path), "--jobs", "1", *flag)
    assert result.code == 0, result.err
    text = " ".join(result.out.split())
    detailed = "note: overlap.tp_comm has no effect at parallel.tp=1 (no TP collectives to overlap) in 1 case(s) (c1)"
    assert (detailed in text) is per_setting
    assert ("--notes says where and why" in text) is not per_setting
    as_json = json.loads(cli("validate", str(path), "--jobs", "1", "--json").out)
    assert as_json["cases"][0]["inert_settings"] == [detailed.split("note: ")[1].split(" in 1 case")[0]]


def test_aligned_dispatch_acts_where_a_padded_capacity_is_unaligned():
    """Megatron-Core rounds a drop-and-pad capacity up to a whole row (moe_utils.get_capacity),
    not to the FP8 alignment: 2,048 tokens x top-2 / 8 experts at capacity factor 1.2 is
    ceil(614.4) = 615 rows from each of 8 ranks, 4,920 = 8 mod 16, which Fp8Padding copies, so
    moe.aligned_dispatch acts there and gets no note; at 1.0 (8 x 512 rows) it is inert."""
    base = {"model": SMALL_MOE, "parallel": {"ep": 8}, "training": {"precision": "fp8"},
            "moe": {"aligned_dispatch": True, "capacity_factor": 1.2, "pad_to_capacity": True}}
    assert "moe.aligned_dispatch" not in _settings(**base)
    assert _outcome(base) != _outcome(_without(base, "moe.aligned_dispatch"))
    even = {**base, "moe": {**base["moe"], "capacity_factor": 1.0}}
    assert "moe.aligned_dispatch" in _settings(**even)


def test_aligned_dispatch_acts_for_dropless_fp8_experts():
    """Dropless FP8 experts copy their rows unless the dispatch aligns them (Megatron-Core's
    TEGroupedMLP Fp8Padding, parallelism/expert.py padding_seconds): no note there, and the
    step differs with and without the setting."""
    fp8 = {"model": SMALL_MOE, "parallel": {"ep": 8}, "training": {"precision": "fp8"}, "moe": {"aligned_dispatch": True}}
    assert "moe.aligned_dispatch" not in _settings(**fp8)
    assert _outcome(fp8) != _outcome(_without(fp8, "moe.aligned_dispatch"))


def test_the_dispatcher_is_inert_where_each_node_holds_one_expert_whatever_the_rounding():
    """With one expert per node DeepEP sends a token's top_k copies across nodes as the alltoall
    dispatcher does: the expected distinct nodes is exactly top_k, not 0.9999999999999998 (6
    experts, top-1: the float complement missed it and the note with it)."""
    from simcluster.parallelism.expert_holders import distinct_holders

    assert all(distinct_holders(e, k, e) == k for e in range(2, 300) for k in range(1, min(e, 9)))
    six = make_scenario(
        model={**GPT_LIKE, "experts": 6, "top_k": 1, "expert_ffn": 1024},
        cluster={"hardware": "dgx-h100", "gpus": 6, "gpus_per_node": 1},
        parallel={"tp": 1, "pp": 1, "ep": 6},
        training={"seq_len": 2048, "micro_batch": 1, "global_batch": 12},
        moe={"dispatcher": "deepep"},
    )
    assert "moe.dispatcher" in [n.setting for n in inert_settings(build_context(scenario_from_dict(six)))]
