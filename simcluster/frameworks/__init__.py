"""Training frameworks as scenario defaults (``framework:`` at the top of a scenario).

The same layout runs at different speeds under Megatron-Core, DeepSpeed's pipeline engine or
nanotron because each framework overlaps (or does not overlap) different communication, fuses
different kernels and reduces gradients differently. Those choices already exist as scenario
fields (``overlap.*``, ``dp.*``, ``training.elementwise`` ...); a framework entry is the set of
values that framework runs with by default or in its published recipes, so that a user can write
``framework: deepspeed`` instead of learning seven flags.

A framework only fills what the scenario leaves unset: an explicit field always wins. It never
touches the model or the parallel degrees (it may pick how layers split over the stages). Each entry names where its values were read.

A parallel attention + MLP block (``model.parallel_block``) runs under every entry with each
branch's own TP collectives (``parallel.parallel_block_comm: separate``, the schema's default),
since none of these codebases has a layer that shares them: Megatron-Core's TransformerLayer
is sequential and NeMo runs Falcon's parallel block as a subclass of it over the stock
SelfAttention and MLP modules (``FalconTransformerLayer``), which Megatron-Bridge inherits;
Megatron-LM 2021, Megatron-DeepSpeed and sail-sg's Zero Bubble fork keep the sequential
``ParallelTransformerLayer``; torchtitan's and NeMo AutoModel's tensor-parallel plans shard
each module (ColwiseParallel / RowwiseParallel), so each branch gathers and reduces its own;
nanotron has no parallel block. EleutherAI's GPT-NeoX (``gpt-neox``) and a block fused around
one set (``fused``, as PaLM's shared input allows) are chosen with that field.
"""

from simcluster.frameworks.base import Defaults, Framework
from simcluster.frameworks.lookup import (
    FRAMEWORK_ALIASES,
    SETTINGS_NOT_FRAMEWORKS,
    apply_framework,
    framework_and_release,
    framework_names,
    get_framework,
    with_framework_fp8_weights,
    with_framework_kernel,
    with_framework_weight_cache,
)
from simcluster.frameworks.pytorch import PYTORCH_PIPELINING
from simcluster.frameworks.registry import FRAMEWORKS

__all__ = [
    "FRAMEWORKS",
    "FRAMEWORK_ALIASES",
    "PYTORCH_PIPELINING",
    "SETTINGS_NOT_FRAMEWORKS",
    "Defaults",
    "Framework",
    "apply_framework",
    "framework_and_release",
    "framework_names",
    "get_framework",
    "with_framework_fp8_weights",
    "with_framework_kernel",
    "with_framework_weight_cache",
]
