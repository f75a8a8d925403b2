"""Other names of scenario keys, read as the names the schema knows.

A layout is usually copied from somewhere: a Megatron-LM launch line (``--num-layers``,
``--tensor-model-parallel-size``, ``--global-batch-size``), a Hugging Face ``config.json``
(``num_hidden_layers``, ``intermediate_size``), a DeepSpeed config
(``train_micro_batch_size_per_gpu``) or a paper's table (``gbs``, ``mbs``). Those names mean
exactly the schema's field, so they are read as it rather than refused as unknown keys; each
alias below is such an exact equivalent, nothing looser (``ffn_hidden_size`` is the MLP width
as ``ffn`` is; a name whose meaning differs, such as Megatron's
``untie_embeddings_and_output_weights``, the negation of ``tied_embeddings``, is left for the
schema to reject with its did-you-mean hint). Dashes and spaces read as underscores and capitals
as lower case, so a launch flag's own spelling and a table's heading ("Sequence Length", "TP")
work too. Giving a key and one of its aliases together is an error unless both say the same
(equal values, or two names of one hardware profile).
Applied to the raw scenario, and to ``--set`` paths, before validation.
"""

from __future__ import annotations

from typing import Any

from simcluster.errors import UserError

#: top-level section -> {other name: the schema's key}
KEY_ALIASES: dict[str, dict[str, str]] = {
    "model": {
        "num_layers": "layers", "num_hidden_layers": "layers", "n_layers": "layers", "n_layer": "layers",
        "hidden_size": "hidden", "d_model": "hidden", "n_embd": "hidden",
        "num_attention_heads": "heads", "n_heads": "heads", "n_head": "heads", "attention_heads": "heads",
        "num_key_value_heads": "kv_heads", "num_query_groups": "kv_heads", "n_kv_heads": "kv_heads",
        "kv_channels": "head_dim",
        "ffn_hidden_size": "ffn", "intermediate_size": "ffn", "d_ff": "ffn", "ffn_dim": "ffn",
        "vocab_size": "vocab", "padded_vocab_size": "vocab",
        "num_experts": "experts", "n_routed_experts": "experts", "num_local_experts": "experts",
        "moe_num_experts": "experts",
        "moe_router_topk": "top_k", "num_experts_per_tok": "top_k", "moe_top_k": "top_k",
        "moe_ffn_hidden_size": "expert_ffn", "moe_intermediate_size": "expert_ffn",
        "n_shared_experts": "shared_experts",
        "first_k_dense_replace": "dense_layers",
        # DeepSeek-V2/V3's config.json and Megatron-Core's --moe-router-num-groups / -group-topk
        "n_group": "router_groups", "moe_router_num_groups": "router_groups",
        "topk_group": "group_topk", "moe_router_group_topk": "group_topk",
        "interleave_moe_layer_step": "moe_every", "decoder_sparse_step": "moe_every",
        "tie_word_embeddings": "tied_embeddings",
        "max_position_embeddings": "max_positions",
        "qk_layernorm": "qk_norm",
        # Megatron's --add-qkv-bias and ChatGLM's config.json; Llama 4's config.json
        "add_qkv_bias": "qkv_bias", "attention_chunk_size": "attention_chunk",
        # Gemma 2's config.json (Gemma2Config) and llm-foundry's model config
        "final_logit_softcapping": "logit_softcap",
        # the parallel attention + MLP block: GPT-NeoX's and StableLM's config.json, GPT-NeoX's
        # own config (gpt_j_residual), Falcon's config.json, NeMo's Falcon (parallel_attention)
        "use_parallel_residual": "parallel_block", "gpt_j_residual": "parallel_block",
        "parallel_attn": "parallel_block", "parallel_attention": "parallel_block",
        "num_ln_in_parallel_attn": "parallel_norms",
        "mtp_num_layers": "mtp_layers", "num_nextn_predict_layers": "mtp_layers",
        # Megatron's --position-embedding-type (rope, learned_absolute)
        "position_embedding_type": "position",
    },
    "parallel": {
        "tensor_model_parallel_size": "tp", "tensor_parallel_size": "tp", "tensor_parallel": "tp",
        "tp_size": "tp",
        "pipeline_model_parallel_size": "pp", "pipeline_parallel_size": "pp", "pipeline_parallel": "pp",
        "pp_size": "pp",
        "data_parallel_size": "dp", "data_parallel": "dp", "dp_size": "dp",
        "context_parallel_size": "cp", "context_parallel": "cp", "cp_size": "cp",
        "expert_model_parallel_size": "ep", "expert_parallel_size": "ep", "expert_parallel": "ep",
        "ep_size": "ep",
        "expert_tensor_parallel_size": "etp",
        "virtual_pipeline_model_parallel_size": "vpp", "virtual_pipeline_parallel_size": "vpp",
        "virtual_pipeline": "vpp", "vp": "vpp", "vp_size": "vpp",
        "num_layers_per_virtual_pipeline_stage": "layers_per_virtual_stage",
        "vpp_layers_per_stage": "layers_per_virtual_stage",
        "layers_per_virtual_pipeline_stage": "layers_per_virtual_stage",
        "account_for_embedding_in_pipeline_split": "embedding_in_split",
        "account_for_loss_in_pipeline_split": "loss_in_split",
        "zero_stage": "zero",
        # the optimizer state sharded or not: ZeRO-1 (Megatron's distributed optimizer) or 0;
        # read through zero's spellings ('none', 'distributed optimizer'; true is 1)
        "optimizer_sharding": "zero", "use_distributed_optimizer": "zero", "distributed_optimizer": "zero",
        "pipeline_schedule": "schedule",
        "sp": "sequence_parallel", "sequence_parallelism": "sequence_parallel",
        # torchtitan's [parallelism] degrees (its data_parallel_shard/replicate_degree are FSDP's
        # and HSDP's groups, not one dp, and are left out)
        "tensor_parallel_degree": "tp", "pipeline_parallel_degree": "pp", "context_parallel_degree": "cp",
        "expert_parallel_degree": "ep",
        # PyTorch FSDP1's ShardingStrategy (OLMo's fsdp.sharding_strategy, accelerate's
        # fsdp_sharding_strategy), read by fsdp_column.py
        "sharding_strategy": "fsdp", "fsdp_sharding_strategy": "fsdp",
        # Megatron-Core's ModelParallelConfig (NeMo's and Megatron-Bridge's CommOverlapConfig)
        "defer_embedding_wgrad_compute": "defer_head_wgrad",
        "wgrad_deferral_limit": "head_wgrad_deferral_limit",
    },
    "training": {
        "global_batch_size": "global_batch", "gbs": "global_batch", "train_batch_size": "global_batch",
        "micro_batch_size": "micro_batch", "mbs": "micro_batch",
        "train_micro_batch_size_per_gpu": "micro_batch",
        "seq_length": "seq_len", "sequence_length": "seq_len", "max_seq_len": "seq_len",
        "max_seq_length": "seq_len", "encoder_seq_length": "seq_len",
        "recompute_granularity": "recompute",
        # Hugging Face's gradient checkpointing and torchtitan's activation_checkpoint.mode:
        # true is whole layers rerun, as recompute: true reads
        "gradient_checkpointing": "recompute", "activation_checkpointing": "recompute",
        "activation_checkpoint": "recompute",
        "mixed_precision": "precision", "dtype": "precision",
        "sequence_len": "seq_len", "seqlen": "seq_len",
        "tokens_per_batch": "global_batch_tokens", "batch_tokens": "global_batch_tokens",
        "global_batch_size_tokens": "global_batch_tokens", "gbs_tokens": "global_batch_tokens",
        "gradient_accumulation_steps": "grad_accum", "ga": "grad_accum", "grad_accum_steps": "grad_accum",
        "gas": "grad_accum", "seq": "seq_len",
        # microbatches per pipeline per step (the Zero Bubble tables' "microbatches")
        "microbatches": "grad_accum", "num_microbatches": "grad_accum", "num_micro_batches": "grad_accum",
        "accumulate_grad_batches": "grad_accum", "gradient_accumulation": "grad_accum",
        # Hugging Face Trainer's per-GPU batch of one forward; DeepSpeed's, without 'train_'
        "per_device_train_batch_size": "micro_batch", "micro_batch_size_per_gpu": "micro_batch",
        # Megatron-LM's flag before recompute_granularity (2021, Narayanan et al.'s scripts):
        # --checkpoint-activations is full recomputation, as recompute: true reads
        "checkpoint_activations": "recompute",
        "fp8_dot_product_attention": "fp8_attention", "fp8_dpa": "fp8_attention",
        "activation_func_fp8_input_store": "activation_fp8_store",
    },
    # a DeepSpeed config's ZeRO-3 keys (zero_optimization.stage3_*)
    "zero3": {
        "stage3_prefetch_bucket_size": "prefetch_bucket_size",
        "stage3_param_persistence_threshold": "param_persistence_threshold",
        "stage3_max_live_parameters": "max_live_parameters",
        "stage3_max_reuse_distance": "max_reuse_distance",
        # ZeRO++ (zero_optimization.zero_hpz_partition_size, zero_quantized_*)
        "zero_hpz_partition_size": "hpz_partition_size",
        "zero_quantized_weights": "quantized_weights",
        "zero_quantized_gradients": "quantized_gradients",
    },
    "cluster": {
        "num_gpus": "gpus", "n_gpus": "gpus", "gpu_count": "gpus", "world_size": "gpus",
        "#_gpus": "gpus", "#gpus": "gpus", "number_of_gpus": "gpus",  # NeMo's "#-GPUs", AutoModel's "#GPUs"
        "num_nodes": "nodes", "n_nodes": "nodes", "nnodes": "nodes",
        "gpu": "hardware", "gpu_type": "hardware", "system": "hardware",
        "accelerator": "hardware", "gpu_model": "hardware", "gpu_name": "hardware",
        "total_gpus": "gpus",
        "nproc_per_node": "gpus_per_node",
        # the one schema key with capitals (GB/s, as the profiles spell it): spellings are
        # lower-cased before lookup, so it needs its own entry
        "nvlink_gbps": "nvlink_GBps",
    },
}  # fmt: skip

#: every alias whatever its section, for the did-you-mean hint of a key put in the wrong one
ANY_SECTION: dict[str, str] = {alias: key for table in KEY_ALIASES.values() for alias, key in table.items()}

#: other names of whole sections
SECTION_ALIASES: dict[str, str] = {
    "parallelism": "parallel", "train": "training", "framework_version": "framework_release",
}


def _spelled(key: str) -> str:
    # a launch flag's dashes, a table heading's spaces and capitals ("Sequence Length", "TP"):
    # every schema key is lower case with underscores but cluster.nvlink_GBps (an alias)
    return "_".join(key.strip().replace("-", " ").replace("_", " ").split()).lower()


def canonical_key(section: str, key: str) -> str:
    """The schema's name of ``key`` in ``section`` (``key`` lower-cased, with dashes and spaces
    as underscores, when it has no alias)."""
    return KEY_ALIASES.get(section, {}).get(_spelled(key), _spelled(key))


def canonical_section(name: str) -> str:
    """The schema's name of the top-level section ``name`` (lower-cased, or its alias's)."""
    spelled = name.strip().lower()
    return SECTION_ALIASES.get(spelled, spelled)


def canonical_path(path: str) -> str:
    """A dotted ``--set`` path with its section and key in the schema's names."""
    parts = path.split(".")
    section = canonical_section(parts[0])
    if len(parts) == 2:
        return f"{section}.{canonical_key(section, parts[1])}"
    return ".".join([section, *parts[1:]])


def normalise_keys(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with section and key aliases renamed to the schema's names.

    Raises :class:`UserError` naming both spellings when a key is given under two names.
    """
    out: dict[str, Any] = {}
    for name, value in data.items():
        section = canonical_section(name) if isinstance(name, str) else name
        if section in out:
            raise UserError(str(name), f"is another name for '{section}', which is also given; keep one")
        out[section] = value
    for section, values in list(out.items()):
        if not isinstance(values, dict):
            continue
        renamed: dict[Any, Any] = {}
        given_as: dict[Any, Any] = {}
        for key, value in values.items():
            canon = canonical_key(section, key) if isinstance(key, str) else key
            if canon in renamed:
                if _same(section, canon, renamed[canon], value):
                    continue  # one setting stated twice alike ('gpu: A100-SXM 80GB', 'system: DGX A100')
                raise UserError(
                    f"{section}.{key}",
                    f"means {section}.{canon}, which is also given (as '{given_as[canon]}'); keep one",
                )
            renamed[canon] = value
            given_as[canon] = key
        out[section] = renamed
    return out


def _same(section: str, key: str, first: Any, second: Any) -> bool:
    """Whether two values given for one key under different names mean the same: equal, or two
    names of one shipped hardware profile."""
    if first == second:
        return True
    if (section, key) != ("cluster", "hardware") or not (isinstance(first, str) and isinstance(second, str)):
        return False
    from simcluster.hardware import resolve_profile_path  # hardware imports the scenario schema

    try:
        return resolve_profile_path(first) == resolve_profile_path(second)
    except UserError:
        return False
