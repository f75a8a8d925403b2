"""The SwiGLU input kept for the backward as an FP8 copy (``training.activation_fp8_store``).

Megatron-Core's fused SwiGLU (``fusions/fused_bias_swiglu.py``: ``SwiGLUFunction`` and the
experts' ``weighted_bias_swiglu_impl``) with ``activation_func_fp8_input_store`` saves
``input.to(torch.float8_e4m3fn)``, a plain cast without a scale, and casts it back to 16 bits
before ``swiglu_back``: 1 byte kept per element of the fc1 output instead of 2, and a cast
kernel each way (``memory.layer_activation_bytes``, ``Elementwise.fp8_store_casts``,
``expert.fp8_store_seconds``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simcluster.model import ModelSpec
    from simcluster.scenario import TrainingSection


def fp8_swiglu_store(model: ModelSpec, training: TrainingSection) -> bool:
    """Whether the SwiGLU inputs are kept in FP8: asked for, a SwiGLU MLP, and Megatron-Core's
    fused elementwise kernels (the only SwiGLU with the option)."""
    return training.activation_fp8_store and model.mlp == "swiglu" and training.elementwise == "fused"
