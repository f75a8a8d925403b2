"""FP8 dot-product attention (``training.fp8_attention``): which kernel curves it runs on.

TransformerEngine's ``FusedAttention`` with ``fp8_dpa`` (Megatron-Core's
``--fp8-dot-product-attention``; ``NVTE_FP8_DPA_BWD=1``, TE's default, makes the backward FP8
too) runs cuDNN's FP8 kernel, whose rate differs from the 16-bit one on the same GPU (cuDNN
9.10.2 on a B200 at 8K tokens: 1.10x the forward, 1.23x the backward). A profile holds that
kernel's curves beside the 16-bit one's under the same name with :data:`SUFFIX`
(``cudnn-fp8`` beside ``cudnn``), so FP8 attention is the 16-bit kernel in use with the suffix.
What it keeps and casts (Q, K, V and the output in FP8; the casts around the kernel) is
``memory.layer_activation_bytes`` and ``Elementwise.fp8_attention_casts``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simcluster.errors import UserError

if TYPE_CHECKING:
    from simcluster.hardware import HardwareProfile
    from simcluster.scenario import Scenario

SUFFIX = "-fp8"  # a profile's FP8 attention curves: the 16-bit kernel's name with this


def _fp8_name(profile: HardwareProfile, named: str | None) -> str | None:
    """The FP8 kernel's name for ``named`` (or the profile's default kernel) in use."""
    base = profile.attention_kernel_in_use(named)
    return None if base is None else base if base.endswith(SUFFIX) else base + SUFFIX


def fp8_kernel(profile: HardwareProfile, named: str | None) -> str | None:
    """The FP8 kernel FP8 attention runs on with ``named`` (or the profile's default) in use:
    its name with :data:`SUFFIX`, when the profile has its curves; None otherwise."""
    name = _fp8_name(profile, named)
    return name if name in profile.attention_kernels else None


def with_fp8_kernel(scenario: Scenario, profile: HardwareProfile) -> Scenario:
    """``scenario`` with the FP8 kernel its FP8 attention runs on named in
    ``training.attention_kernel`` (unchanged without ``training.fp8_attention``); a one-line
    error for FP8 attention the layout or profile cannot run, and for an FP8 kernel named
    without FP8 attention (its saved tensors and casts would be left out)."""
    training = scenario.training
    named = training.attention_kernel
    if not training.fp8_attention:
        if named and named.endswith(SUFFIX):
            raise UserError(
                "training.attention_kernel",
                f"'{named}' is an FP8 attention kernel: set training.fp8_attention: true (it keeps Q, K, V "
                f"and the output in FP8 and casts them), or pick a 16-bit kernel ('{named.removesuffix(SUFFIX)}')",
            )
        return scenario
    if training.precision not in ("fp8", "nvfp4"):
        raise UserError(
            "training.fp8_attention",
            f"FP8 attention runs inside TransformerEngine's FP8 autocast, not under precision "
            f"{training.precision}: set training.precision: fp8 (or nvfp4), or drop fp8_attention",
        )
    if not training.flash_attention:
        raise UserError(
            "training.fp8_attention",
            "FP8 attention is TransformerEngine's fused attention kernel: drop training.flash_attention: false, "
            "or drop fp8_attention",
        )
    name = fp8_kernel(profile, named)
    if name is None:
        fp8 = sorted(k for k in profile.attention_kernels if k.endswith(SUFFIX))
        has = f"it has {', '.join(fp8)}: set training.attention_kernel to " + (
            " or ".join(k.removesuffix(SUFFIX) for k in fp8)
        ) if fp8 else "it has none"
        raise UserError(
            "training.fp8_attention",
            f"hardware '{profile.name}' has no FP8 attention curves for the kernel in use "
            f"('{_fp8_name(profile, named) or 'none'}' in efficiency.attention_kernels; {has}); drop fp8_attention to run "
            "16-bit attention, or add the FP8 kernel's benchmark curves to a profile",
        )
    if name == named:
        return scenario
    return scenario.model_copy(update={"training": training.model_copy(update={"attention_kernel": name})})
