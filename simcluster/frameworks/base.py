"""What every framework entry is: a :class:`Framework` (its defaults of a raw scenario and
where they were read) and the readers its defaults share."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from simcluster.framework_releases import dated_defaults, dated_kernels, raw_section

Defaults = dict[str, dict[str, Any]]

__all__ = ["Defaults", "Framework", "parallel_degree", "parallel_flag", "raw_section", "zero_stage"]


@dataclass(frozen=True)
class Framework:
    """One framework: what it sets (``defaults`` of the raw scenario, since some choices depend
    on the layout, e.g. nanotron's ZeRO-1 path) and where that was read (``sources``)."""

    name: str
    summary: str
    sources: str
    defaults: Callable[[Mapping[str, Any]], Defaults]
    #: the attention kernel it calls, used where the hardware profile has curves for it (the
    #: profile's default kernel otherwise, e.g. on a profile with no curves at all)
    attention_kernel: str | None = None
    #: its MoE module all-gathers the sequence-parallel input over the attention's TP group and
    #: reduce-scatters the output (torchtitan's PrepareModuleInputOutput on the moe module:
    #: Shard(1) in as Replicate, Partial out as Shard(1)); Megatron-Core's MoE layer routes the
    #: sequence shard it is given, with no TP collective around it (token_dispatcher.py)
    moe_tp_gather: bool = False
    #: the recomputation modes its code offers (training.recompute): Megatron's selective
    #: (--recompute-granularity selective) in the Megatron family, PyTorch's op-level selective
    #: activation checkpointing (torch.utils.checkpoint's context_fn policy, torchtitan's
    #: "selective op") in the PyTorch ones; what the fit hints may suggest
    recompute: tuple[str, ...] = ("none", "selective", "op", "full")
    #: the pipeline schedules its code runs (parallel.schedule); None: not bounded (an entry
    #: whose layouts have no pipeline, PyTorch FSDP1's)
    schedules: tuple[str, ...] | None = None

    def runs_schedule(self, schedule: str) -> bool:
        """Whether its code runs the pipeline schedule ``schedule``."""
        return self.schedules is None or schedule in self.schedules

    def preset(self, raw: Mapping[str, Any], release: str | None = None) -> Defaults:
        """What it fills in ``raw``: its settings, with those of ``release`` where that release
        ran differently (simcluster.framework_releases)."""
        out = self.defaults(raw)
        for section, values in dated_defaults(self.name, release, raw).items():
            out[section] = {**out.get(section, {}), **values}
        return out

    def kernel(self, release: str | None = None, available: Collection[str] | None = None) -> str | None:
        """The attention kernel it (at ``release``) calls; with ``available`` (a profile's
        kernels), the first of that release's kernels among them, None if none is (a preference,
        not a demand)."""
        kernels = dated_kernels(self.name, release) or ((self.attention_kernel,) if self.attention_kernel else ())
        return next((k for k in kernels if available is None or k in available), None)


def parallel_degree(raw: Mapping[str, Any], key: str, default: int) -> int:
    """``parallel.<key>`` of a raw scenario where it is an integer, ``default`` otherwise."""
    value = raw_section(raw, "parallel").get(key, default)
    return value if isinstance(value, int) else default


def parallel_flag(raw: Mapping[str, Any], key: str) -> bool:
    """Whether a raw scenario sets ``parallel.<key>`` to true."""
    return raw_section(raw, "parallel").get(key) is True


def zero_stage(raw: Mapping[str, Any]) -> int:
    """The ZeRO stage a raw scenario writes (0 when it writes none)."""
    return parallel_degree(raw, "zero", 0)
