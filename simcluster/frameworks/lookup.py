"""Framework names as users write them (aliases, releases, settings mistaken for frameworks)
and a scenario's framework applied: its defaults filled where the scenario is silent, its
attention kernel where the profile has curves for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from simcluster.compute import QUANTISED
from simcluster.errors import UserError, did_you_mean
from simcluster.framework_releases import check_release, resolve_release, split_release
from simcluster.frameworks.base import Framework
from simcluster.frameworks.registry import FRAMEWORKS
from simcluster.frameworks.stacks import runs_megatron_core
from simcluster.names import loose_lookup

if TYPE_CHECKING:
    from simcluster.hardware import HardwareProfile
    from simcluster.scenario import Scenario


def framework_names() -> list[str]:
    """Names accepted by ``framework:``."""
    return sorted(FRAMEWORKS)


#: other names of the frameworks above, compared as names.loose_key does: today's Megatron-LM
#: trains on Megatron-Core; Megatron-DeepSpeed is DeepSpeed's pipeline engine
FRAMEWORK_ALIASES = {
    "megatron": "megatron-core", "megatron-lm": "megatron-core", "mcore": "megatron-core",
    "nemo2": "nemo", "nemo-2": "nemo", "nemo-megatron-bridge": "megatron-bridge", "bridge": "megatron-bridge",
    # NVIDIA's own names for it: "NVIDIA NeMo", "NeMo Framework 24.07"
    "nvidia-nemo": "nemo", "nemo-framework": "nemo", "nvidia-nemo-framework": "nemo",
    "megatron-deepspeed": "deepspeed",
    "nemo-automodel": "automodel",
    "pytorch": "pytorch-ddp", "torch-ddp": "pytorch-ddp", "ddp": "pytorch-ddp",
    "fsdp": "pytorch-fsdp", "fsdp1": "pytorch-fsdp", "torch-fsdp": "pytorch-fsdp",
    "fully-sharded-data-parallel": "pytorch-fsdp",
    "zb": "zero-bubble", "zero-bubble-pipeline-parallelism": "zero-bubble", "sail-sg": "zero-bubble",
}  # fmt: skip


def get_framework(name: Any) -> Framework:
    """The framework called ``name`` (or an alias; without case, spaces, hyphens or
    underscores; a release after it is ignored here, see :func:`framework_and_release`); a
    one-line error naming the field otherwise."""
    return framework_and_release(name)[0]


def framework_and_release(name: Any) -> tuple[Framework, str | None]:
    """The framework ``name`` names and the release written after it ('NeMo 24.07' ->
    nemo, '24.07'), checked (simcluster.framework_releases)."""
    if isinstance(name, str):
        bare, release = split_release(name)
        for text, rel in ((name, None), (bare, release)):
            key = loose_lookup(text, (*FRAMEWORKS, *FRAMEWORK_ALIASES))
            key = FRAMEWORK_ALIASES.get(key, key) if key else None
            if key in FRAMEWORKS:
                if rel is not None:
                    check_release(key, rel)
                return FRAMEWORKS[key], rel
    text = str(name)
    setting = loose_lookup(text, SETTINGS_NOT_FRAMEWORKS) if isinstance(name, str) else None
    hint = f" ({SETTINGS_NOT_FRAMEWORKS[setting]})" if setting else did_you_mean(text, FRAMEWORKS)
    raise UserError(
        "framework",
        f"unknown framework '{text}'{hint}; known: {', '.join(framework_names())}",
    )


#: names users give as a framework that are a parallelism setting: what to write instead
SETTINGS_NOT_FRAMEWORKS = {
    name: "FSDP2 is a sharding, not a framework: parallel.fsdp: true (ZeRO-3), and framework: "
    "torchtitan or automodel for PyTorch FSDP2 as those run it (pytorch-fsdp is FSDP1)"
    for name in ("fsdp2", "pytorch-fsdp2", "torch-fsdp2", "hsdp")  # fsdp, fsdp1: pytorch-fsdp
}


def with_framework_kernel(scenario: Scenario, profile: HardwareProfile) -> Scenario:
    """``scenario`` with its framework's attention kernel (that of its release, if the release
    called another) when it names none and ``profile`` has curves for that kernel (a
    framework's kernel is a preference, not a demand on the hardware)."""
    if scenario.framework is None or scenario.training.attention_kernel is not None:
        return scenario
    kernel = get_framework(scenario.framework).kernel(scenario.framework_release, profile.attention_kernels)
    if kernel is None:
        return scenario
    training = scenario.training.model_copy(update={"attention_kernel": kernel})
    return scenario.model_copy(update={"training": training})


def with_framework_fp8_weights(scenario: Scenario, profile: HardwareProfile) -> Scenario:
    """``scenario`` with Megatron-Bridge's blockwise FP8 on Hopper keeping 16-bit weights where
    the scenario does not say: its preset keeps FP8 weights for every FP8 recipe, but the
    blockwise one (``bf16_with_fp8_subchannel_scaling_mixed``, "blockwise (for Hopper only)",
    training.fp8_recipe block before Blackwell, where block is MXFP8) sets fp8_param_gather False."""
    tr = scenario.training
    hopper_block = tr.precision == "fp8" and tr.fp8_recipe == "block" and (profile.gpu.compute_capability or 0.0) < 10.0
    if scenario.framework != "megatron-bridge" or not hopper_block or "training.fp8_param_gather" in scenario.written:
        return scenario
    return scenario.model_copy(update={"training": tr.model_copy(update={"fp8_param_gather": False})})


def with_framework_weight_cache(scenario: Scenario) -> Scenario:
    """``scenario`` with FP8 weight copies cast every microbatch under a framework that does
    not train with Megatron-Core's TE layers, where the scenario does not say: only those pass
    TransformerEngine ``is_first_microbatch`` (``TELinear.forward``), which caches the cast
    (``training.fp8_weight_cache``, parallelism/fp8_weights.py); torchao's float8 linears and a
    TE module called without the flag cast the weight in every forward."""
    tr = scenario.training
    if tr.precision not in QUANTISED or runs_megatron_core(scenario.framework):
        return scenario  # (a 16-bit run keeps the field as written: it has no copy to cache)
    if not tr.fp8_weight_cache or "training.fp8_weight_cache" in scenario.written:
        return scenario
    return scenario.model_copy(update={"training": tr.model_copy(update={"fp8_weight_cache": False})})


def apply_framework(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with its framework's defaults (those of its release, where they differ) filled
    in wherever the scenario is silent."""
    out = dict(data)
    name = out.get("framework")
    given_release = out.get("framework_release")
    if name is None:
        if given_release is not None:
            raise UserError("framework_release", "a release needs its framework; set framework too")
        return out
    framework, release = framework_and_release(name)
    out["framework"] = framework.name  # an alias or other spelling reads as the entry's name
    release = resolve_release(framework.name, name, release, given_release)
    if release is not None:
        out["framework_release"] = release
    for section, values in framework.preset(data, release).items():
        given = out.get(section)
        if given is None:
            given = {}
        if not isinstance(given, Mapping):
            continue  # the schema reports the malformed section itself
        out[section] = {**values, **given}
    return out
