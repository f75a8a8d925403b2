"""What a framework did in an earlier release: ``framework: NeMo 24.03`` as tables write it.

Performance tables name their software by release ("container NeMo24.07", "Megatron-Core
r0.8.0"), and some defaults changed between releases in ways that move a step by tens of
percent: NVIDIA's NeMo runs before August 2024 disabled TransformerEngine's cuDNN attention and
ran the flash-attn 2 package, which makes a 128K-token step on an H100 46% longer than cuDNN's
kernel does (docs/accuracy.md). A release named
after the framework selects that release's settings; a later one, or none, the current ones.
Only what was read from a release's sources is dated here; everything else is the framework's
current preset (``simcluster.frameworks``), and an explicit scenario field still wins.

A release is written after the name with a space, ``@``, ``-`` or nothing ("nemo 24.03.01",
"nemo@24.07", "NeMo24.07", "Megatron-Core r0.8.0", "core_r0.8.0", "nanotron v0.5", "NeMo
25.04.rc2"); it is kept as ``framework_release``. NeMo's releases are its container's YY.MM
tag: its library versions (NeMo 2.0.0 shipped in 24.09, 2.0.0rc0 already in 24.05) do not date
a run, so they are refused with the fix.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from simcluster.errors import UserError

Defaults = dict[str, dict[str, Any]]

# name, then an optional separator, an optional v / r / core_r, dotted digits, an optional rc
_RELEASE = re.compile(
    r"^(?P<name>.*?[a-z])[\s@:_-]*(?:v|r|core_r)?(?P<release>\d+(?:\.\d+)+)(?:[.-]?rc\d+)?$",
    re.IGNORECASE,
)


def split_release(text: str) -> tuple[str, str | None]:
    """``text`` as (framework name, release or None): 'NeMo 24.03.01' -> ('NeMo', '24.03.01').

    A release has at least two dotted numbers, so names that end in a number ('nemo-2',
    'megatron-lm-2021') stay names."""
    match = _RELEASE.match(text.strip())
    if match is None:
        return text, None
    return match["name"].strip(), match["release"]


def release_key(release: str) -> tuple[int, ...]:
    """A release as numbers to compare: '24.03.01' -> (24, 3, 1)."""
    return tuple(int(part) for part in release.split("."))


@dataclass(frozen=True)
class Dated:
    """Settings a framework's releases before ``until`` (excluded) ran with, from ``since``
    (included) when it is set, for the scenarios ``when`` accepts (every one when unset)."""

    until: str
    defaults: Defaults = field(default_factory=dict)
    #: the attention kernels those releases called, in order of preference: the first the
    #: profile has curves for (a library's releases, nearest the container's first)
    attention_kernels: tuple[str, ...] = ()
    source: str = ""
    since: str | None = None
    #: which scenarios (the raw document, before any preset) the settings apply to, and its words
    when: Callable[[Mapping[str, Any]], bool] | None = field(default=None, compare=False)
    scope: str = ""


def raw_section(raw: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """The section ``name`` of a raw scenario where it is a mapping, empty otherwise (the schema
    reports a malformed section itself); what every framework preset reads the scenario with."""
    value = raw.get(name)
    return value if isinstance(value, Mapping) else {}


def _bf16_zero_0_2(raw: Mapping[str, Any]) -> bool:
    """A bf16 run below ZeRO-3, as a scenario writes it (bf16 and zero 0 by default)."""
    precision = raw_section(raw, "training").get("precision", "bf16")
    zero = raw_section(raw, "parallel").get("zero", 0)
    return precision not in ("fp16", "fp32") and isinstance(zero, int) and zero <= 2


def _bf16_weights(raw: Mapping[str, Any]) -> bool:
    """A run whose weights are bf16, as a scenario writes it (bf16, FP8 or NVFP4 GEMMs: bf16
    by default; fp16 and fp32 keep their own weights)."""
    return raw_section(raw, "training").get("precision", "bf16") not in ("fp16", "fp32")


def _zero_2(raw: Mapping[str, Any]) -> bool:
    """A ZeRO-2 run, as a scenario writes it (the parallel section's zero stage)."""
    return raw_section(raw, "parallel").get("zero") == 2


#: per framework, its dated settings (each applies to every release before its ``until``)
DATED: dict[str, tuple[Dated, ...]] = {
    "nemo": (
        Dated(
            until="24.09",
            attention_kernels=("fa2",),
            # NeMo 1.x's apex DistributedFusedAdam: 100 MiB gradient buckets on every stage; its
            # FP8 runs kept 16-bit weights (NeMo 1.x's fp8_params defaulted to False)
            defaults={"dp": {"bucket_mb": 104.858, "bucket_stages": "all"},
                      "training": {"fp8_param_gather": False, "fused_cross_entropy": False}},
            source=(
                "NeMo-Framework-Launcher set NVTE_FUSED_ATTN=0 until its pull request 422 'enable "
                "fused attention' (August 2024), so TransformerEngine ran the flash-attn 2 "
                "package; NeMo 1.x's optimizer was apex's distributed_fused_adam (bucket_cap_mb "
                "default 100, NeMo's docs); NeMo 1.x's build_transformer_config passes "
                "cross_entropy_loss_fusion on only where a model's YAML sets it (Megatron-Core's "
                "default: the unfused loss)"
            ),
        ),
        Dated(
            until="24.09",
            defaults={"training": {"master_weights": "remainder"}},
            when=_bf16_weights,
            scope="bf16 weights",
            source=(
                "NeMo 1.x's megatron_base_model.py setup_optimization gives apex's "
                "DistributedFusedAdam store_params=False, store_param_remainders=True for an fp32 "
                "optimizer over a bf16 model (store_params=True with fp8_params): an int16 "
                "remainder shard beside the bf16 weight, no fp32 master"
            ),
        ),
        Dated(
            until="25.04",
            defaults={"training": {"fused_cross_entropy": "native"}},
            source=(
                "NeMo 2's GPTConfig sets cross_entropy_loss_fusion True (2.0 on); Megatron-Core "
                "added cross_entropy_fusion_impl, and its 'te' choice, in 0.12.0 (25.02 shipped "
                "0.11.0), and NeMo's performance scripts first set it to 'te' in 2.3.0, the 25.04 "
                "container (scripts/performance/utils.py)"
            ),
        ),
        Dated(
            since="24.09",
            until="25.11",
            attention_kernels=("cudnn-9.10", "cudnn-9.13"),
            source=(
                "NeMo 25.09 carried cuDNN 9.11.0.98 (Megatron-Bridge docs/releases/"
                "software-versions.md), earlier containers older ones (PyTorch 25.04's 9.9.0): on "
                "Blackwell profiles with cuDNN 9.10.2's curves, the release timed there through the "
                "cuDNN graph nearest theirs, those; else 9.13.1's, the oldest such release"
            ),
        ),
        Dated(
            since="25.11",
            until="26.02",
            attention_kernels=("cudnn-9.13",),
            source=(
                "NeMo 25.11 carried cuDNN 9.13.1.26 (Megatron-Bridge docs/releases/"
                "software-versions.md); 26.02 reinstalled 9.18.0.50 (Megatron-Bridge issue 1724), "
                "after cuDNN 9.17's SDPA improvements (cudnn-frontend v1.17.0). On Blackwell "
                "profiles that keep cuDNN 9.13.1's curves beside their later default ones; "
                "elsewhere the profile's own cudnn"
            ),
        ),
        Dated(
            until="24.12",
            defaults={"overlap": {"tp_comm_cfg": "te-1"}},
            source=(
                "NeMo's software component versions: TransformerEngine 1.6 in 24.05, 1.8 in "
                "24.07, 1.10 in 24.09 (TE 1.x's userbuffers defaults: no SM margin)"
            ),
        ),
    ),
    "deepspeed": (
        Dated(
            until="0.12.4",
            defaults={"dp": {"grad_collective": "reduce_scatter"}},
            when=_zero_2,
            scope="ZeRO-2",
            source=(
                "ZeRO-2's bucket reduction, read in the PyPI sdists' "
                "deepspeed/runtime/zero/stage_1_and_2.py (and the 2020 "
                "deepspeed/pt/deepspeed_zero_optimizer.py): up to 0.12.3 average_tensor divides "
                "the contiguous ipg bucket by dp and reduces each partition's slice to its owner "
                "(dist.reduce per owner rank, the traffic of a reduce-scatter); 0.12.4 added "
                "use_multi_rank_bucket_allreduce (zero/config.py, default true), which "
                "all-reduces the bucket whole (allreduce_and_scatter)"
            ),
        ),
        Dated(
            since="0.9.0",
            until="0.9.2",
            defaults={"dp": {"reduce_dtype": "fp32"}},
            when=_bf16_zero_0_2,
            scope="bf16 at ZeRO 0-2",
            source=(
                "the engine's communication_data_type default, read in the PyPI sdists' "
                "deepspeed/runtime/engine.py: 0.9.0 and 0.9.1 return float16 under fp16, else "
                "float32 (pull request 2970), so bf16 gradients (and the BF16_Optimizer's fp32 "
                "buffers) were all-reduced in fp32; 0.8.3 returns float16 under fp16 or any ZeRO "
                "stage above 0, else bfloat16 under bf16; 0.9.2 float16 under fp16, bfloat16 "
                "under bf16 (pull request 3370)"
            ),
        ),
    ),
    "megatron-core": (
        Dated(
            until="0.10",
            defaults={"overlap": {"tp_comm_cfg": "te-1"}},
            source=(
                "the NeMo containers that shipped Megatron-Core 0.7, 0.8 and 0.9 carried "
                "TransformerEngine 1.6, 1.8 and 1.10 (NeMo's software component versions)"
            ),
        ),
    ),
}


def check_release(framework: str, release: str) -> None:
    """A one-line error for a release that cannot date ``framework``'s settings."""
    key = release_key(release)
    if framework == "nemo" and key[0] < 22:
        raise UserError(
            "framework",
            f"'{release}' is a NeMo library version, which does not date a run (2.0.0rc0 "
            "shipped in 24.05, 2.0.0 in 24.09); give the container release as YY.MM, e.g. "
            "framework: nemo 24.07",
        )
    if framework == "megatron-core" and key[0] > 0:
        raise UserError(
            "framework",
            f"'{release}' is not a Megatron-Core release; write it as r0.8 or 0.8.0 (a NeMo "
            "container tag goes with framework nemo)",
        )


def resolve_release(framework: str, written: str, in_name: str | None, given: Any) -> str | None:
    """The release of ``framework``: the one after its name (``written``, read as ``in_name``)
    and/or ``framework_release`` (``given``), checked; a one-line error if they disagree."""
    if given is None:
        return in_name
    text = str(given).strip()
    release = split_release(f"x {text}")[1]  # read as the release after a name would be
    if release is None:
        raise UserError("framework_release", f"'{text}' is not a release; write it as 24.07 or r0.8")
    if isinstance(given, float) and len(text.split(".")[-1]) == 1 and release_key(release)[0] >= 22:
        # YAML reads 24.10 as the number 24.1: a YY.MM release must be quoted
        raise UserError(
            "framework_release", f"YAML reads {text}0 as the number {text}; quote the release: '{text}0'"
        )
    if in_name is not None and release != in_name:
        raise UserError(
            "framework_release",
            f"'{text}' and the release in framework '{written}' differ; give the release once",
        )
    check_release(framework, release)
    return release


def dated(framework: str, release: str | None) -> list[Dated]:
    """The dated settings that apply to ``release`` of ``framework``, earliest cut-off first."""
    if release is None:
        return []
    key = release_key(release)
    # sorted, not the table's order: dated_defaults lets the earliest cut-off win
    return sorted(
        (d for d in DATED.get(framework, ())
         if key < release_key(d.until) and (d.since is None or key >= release_key(d.since))),
        key=lambda d: release_key(d.until),
    )  # fmt: skip


def dated_defaults(framework: str, release: str | None, raw: Mapping[str, Any] | None = None) -> Defaults:
    """The section values ``release`` of ``framework`` ran with, where they differ from now,
    for the scenario ``raw`` (an entry with a ``when`` applies only to a scenario it accepts)."""
    out: Defaults = {}
    entries = [d for d in dated(framework, release) if d.when is None or (raw is not None and d.when(raw))]
    for entry in reversed(entries):  # the earliest cut-off wins
        for section, values in entry.defaults.items():
            out[section] = {**out.get(section, {}), **values}
    return out


def dated_kernels(framework: str, release: str | None) -> tuple[str, ...]:
    """The attention kernels ``release`` of ``framework`` called, in order of preference, if
    they differ from now (empty if not)."""
    return next((d.attention_kernels for d in dated(framework, release) if d.attention_kernels), ())


def describe(framework: str) -> str:
    """One clause for ``simcluster list frameworks``: which releases run differently."""
    # in release order, as dated() applies them, whatever the table's order
    entries = sorted(DATED.get(framework, ()), key=lambda d: release_key(d.until))
    if not entries:
        return ""
    parts = []
    for entry in entries:
        what = [f"{k}={v}" for values in entry.defaults.values() for k, v in values.items()]
        if entry.attention_kernels:
            what.insert(0, f"attention {' or '.join(entry.attention_kernels)}")
        span = f"{entry.since} to before {entry.until}" if entry.since else f"before {entry.until}"
        scope = f" ({entry.scope})" if entry.scope else ""
        parts.append(f"{span}{scope}: {', '.join(what)}")
    return "; releases " + "; ".join(parts)


__all__ = [
    "DATED",
    "Dated",
    "check_release",
    "dated_defaults",
    "dated_kernels",
    "describe",
    "release_key",
    "resolve_release",
    "split_release",
]
