"""Which fused-attention kernels run learned attention sinks (``model.attention_sinks``).

gpt-oss gives every query head of every layer one learned logit (transformers'
``GptOssAttention.sinks``; its ``eager_attention_forward`` appends it as an extra column of the
scores, takes the softmax and drops the column). In a fused kernel that is one term more in each
query row's softmax normaliser, added once when the row is finalised (flash-attn's CuTe
``Softmax.finalize`` with ``sink_val``: ``row_sum += exp(sink - row_max)``), and in the backward
the sink's gradient, a per-head sum over the rows of what the kernel already holds (the
log-sum-exp and rowsum(dO * O)). No matmul, no tile more: against the 4 * keys * head_dim FLOPs
of a query row's two products it is two exponentials, so the kernel's time is taken as
unchanged. The one published timing with and without sinks agrees: AMD's Triton attention
backward (ROCm/aiter#1576, BSHD and THD batches) runs 0.99x to 1.01x as fast with them;
NVIDIA's (TransformerEngine#2148, flash-attention#2706, vLLM's flash-attention#75) give support
and correctness only.

PyTorch's FlexAttention has no denominator term of its own but runs the same sum two ways: a
zero key/value column whose score ``score_mod`` replaces with the sink logit, or its returned
log-sum-exp rescaling the output by sigmoid(lse - sink), as gpt-oss ports on it do; no profile has
curves for it. A kernel without a sink input can be wrapped to run them (PaddleFormers#2461
post-processes flash-attn 2's and 3's forward and backward: the output rescaled by that sigmoid,
and a backward given the rescaled output and log-sum-exp yields the sink softmax's gradients),
but TransformerEngine does not (its get_attention_backend drops FlashAttention for any
softmax_type but vanilla); a user of such a wrapper sets ``attention_sinks: false``, its extra
work being elementwise passes over the output. Otherwise a kernel that does not take the sink
cannot train the model (the sink's gradient is needed), so a scenario that names one is refused
with the kernels that can.
"""

from __future__ import annotations

from dataclasses import dataclass

from simcluster.errors import UserError
from simcluster.hardware import HardwareProfile
from simcluster.kernel_versions import family
from simcluster.model import ModelSpec


@dataclass(frozen=True)
class SinkSupport:
    """Whether a kernel of ``efficiency.attention_kernels`` trains with sinks, and the source."""

    runs: bool
    why: str


#: kernel name (a profile's ``efficiency.attention_kernels`` key) -> sink support in training
KERNELS: dict[str, SinkSupport] = {
    # flash-attn 2's CUDA kernels take no sink (Dao-AILab/flash-attention#1797, PR #1819 open);
    # PyTorch SDPA (spelled sdpa, read as fa2) has no sink argument either
    "fa2": SinkSupport(False, "flash-attn 2 has no sink input (flash-attention#1797, #1819 unmerged)"),
    # the Hopper FA3 kernel: sinks only in vLLM's fork, forward only, for inference
    # (vllm-project/flash-attention#75; flash-attention#1797: no backward anywhere then);
    # TransformerEngine's get_attention_backend disables FlashAttention for any softmax_type but
    # vanilla
    "fa3": SinkSupport(False, "FlashAttention-3 has a sink only in vLLM's forward-only fork"),
    # TransformerEngine >= 2.8 (NVIDIA/TransformerEngine#2148): softmax_type "learnable" on
    # FusedAttention, forward and backward, cuDNN >= 9.13.1, BSHD/SBHD (THD from cuDNN 9.18 and
    # TE 2.12, TransformerEngine#2483)
    "cudnn": SinkSupport(True, "TransformerEngine >= 2.8 with cuDNN >= 9.13.1 (softmax_type learnable)"),
}

# a calibrated profile's own attention (kernel ``measured``) timed whatever kernel the user ran,
# and a profile without curves costs a generic fused kernel (on ROCm, TransformerEngine's CK
# backend takes sinks, ROCm/TransformerEngine#678): neither is refused
_UNNAMED = SinkSupport(True, "")


def support(kernel: str | None) -> SinkSupport:
    """What the kernel named ``kernel`` does with sinks (unknown names run them: see above)."""
    return KERNELS.get(family(kernel or ""), _UNNAMED)


def check(model: ModelSpec, flash_attention: bool, kernel: str | None, profile: HardwareProfile) -> None:
    """Refuse a model with attention sinks on a fused kernel that cannot train them.

    ``flash_attention: false`` (the unfused path, as transformers' eager GptOssAttention and
    TransformerEngine's UnfusedDotProductAttention run it) always can."""
    if not model.attention_sinks or not flash_attention:
        return
    found = support(kernel)
    if found.runs:
        return
    able = sorted(k for k in profile.attention_kernels if support(k).runs)
    fix = (
        f"set training.attention_kernel to one that does ({', '.join(able)}: {KERNELS['cudnn'].why})"
        if able
        else f"hardware '{profile.name}' has curves for no kernel that does (cudnn: {KERNELS['cudnn'].why})"
    )
    raise UserError(
        "model.attention_sinks",
        f"kernel '{kernel}' cannot train attention sinks: {found.why}; {fix}, or training.flash_attention: "
        "false (unfused, as transformers' eager GptOssAttention), or attention_sinks: false to cost the "
        "model as if it could (sinks add no modelled time)",
    )
