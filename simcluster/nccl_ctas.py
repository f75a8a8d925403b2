"""NCCL's per-communicator CTA limits: how many channels (one CTA each) a group's calls run on.

A communicator's channel count is what NCCL's topology search found, clamped by the
communicator's ``minCTAs`` / ``maxCTAs`` (``ncclConfig_t``; Megatron-Core sets them per process
group from ``--nccl-communicator-config-path``, a YAML of ``{group: {min_ctas, max_ctas}}``):

* collectives: ``nChannels = max(minCTAs, min(search, maxCTAs, NCCL_MAX_NCHANNELS))``
  (NVIDIA/nccl ``src/graph/connect.cc`` ``ncclTopoPostset``, "Honor NCCL_MIN/MAX_CTAS");
  channels above the search's are copies of its rings (``copyChannels``): more CTAs, no more
  links;
* send/recv: ``p2pnChannels = min(nChannels, NCCL_MAX_P2P_NCHANNELS)`` (``src/graph/paths.cc``
  ``ncclTopoComputeP2pChannels``: "here we already honor comm->max/minCTAs"), so a communicator
  with ``maxCTAs`` 1 moves all its send/recv through one CTA;
* the environment's ``NCCL_MIN_CTAS`` / ``NCCL_MAX_CTAS`` replace every communicator's own
  values (``src/init.cc`` ``envConfigOverride``, the last step of ``parseCommConfig``), and a
  minimum above the maximum is lowered to it (the same function);
* ``NCCL_MIN_NCHANNELS`` / ``NCCL_MAX_NCHANNELS`` bound every communicator beside its CTA
  limits: ``minChannels = max(NCCL_MIN_NCHANNELS, minCTAs)``, ``maxChannels =
  min(NCCL_MAX_NCHANNELS, maxCTAs)``, the minimum winning (``ncclTopoPostset``), so a job with
  ``NCCL_MIN_NCHANNELS=4`` runs a ``max_ctas: 1`` communicator on 4 channels.

The search's count is the profile's ``efficiency.collective_sms`` (one CTA per channel); with
it unknown (0) the limits change nothing. A limited group then (1) holds that many SMs while in
flight (:mod:`simcluster.engine.interference`) and (2) moves at most what that many CTAs move
(:func:`cap_GBps`, from the profile's measured ``efficiency.channel_busbw``).

Megatron-Core's communicator names (``megatron/core/parallel_state.py``
``initialize_model_parallel``, each group created with ``get_nccl_options(name, ...)``) map to
the groups simulated here as :data:`SIMULATED_GROUPS` gives; the dense gradients' reduce-scatter
and the distributed optimizer's parameter all-gather run on ``dp_cp`` even at cp 1
(``distributed_data_parallel.py`` allocates its buffers on the data-parallel group with context
parallelism). The names in :data:`UNSIMULATED` are accepted (a Megatron file carries them) but
no simulated traffic runs on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Megatron-Core communicator name -> the simulated groups whose calls run on it
SIMULATED_GROUPS: dict[str, tuple[str, ...]] = {
    "dp_cp": ("dp",),  # dense gradient reduce-scatter / all-reduce, parameter all-gather
    "cp": ("cp",),  # TransformerEngine's context-parallel KV ring (send/recv on cp_group)
    "hcp": ("cpa", "cpr"),  # hierarchical context parallelism (a2a+p2p)
    "tp": ("tp", "ppg"),  # NCCL tensor-parallel calls; a scatter/gather transfer's gather
    "pp": ("pp",),  # pipeline send/recv
    "ep": ("ep",),  # expert-parallel all-to-all
    "ep_dp": ("edp",),  # expert gradients
    "embd": ("embd",),  # tied embedding's gradient all-reduce (first and last stage)
    # FP8 amax all-reduce: Megatron's get_amax_reduction_group(with_context_parallel=True, ...)
    "tp_dp_cp": ("amax",),
    "tp_cp": ("amax_tp",),  # ... with tp_only_amax_red
}
# communicators Megatron-Core creates whose traffic is not simulated (norms, losses, metrics)
UNSIMULATED = frozenset({
    "dp", "intra_dp_cp", "mp", "pos_embd", "tp_dp", "ep_tp", "tp_exp", "tp_ep_mp", "tp_ep_pp",
    "intra_ep_dp", "inter_ep_dp", "intra_dist_opt_instance",
})  # fmt: skip
COMMUNICATORS = frozenset(SIMULATED_GROUPS) | UNSIMULATED
MAX_CHANNELS = 64  # NCCL's MAXCHANNELS (src/include/device.h) in current releases; older ones had 32


@dataclass(frozen=True)
class CtaLimit:
    """One communicator's ``minCTAs`` / ``maxCTAs`` (None: NCCL's default)."""

    min_ctas: int | None = None
    max_ctas: int | None = None


@dataclass(frozen=True)
class NcclEnv:
    """The job's ``NCCL_MIN_CTAS``, ``NCCL_MAX_CTAS``, ``NCCL_MIN_NCHANNELS`` and
    ``NCCL_MAX_NCHANNELS`` (None: unset)."""

    min_ctas: int | None = None
    max_ctas: int | None = None
    min_nchannels: int | None = None
    max_nchannels: int | None = None

    @property
    def any(self) -> bool:
        """Whether any of them is set (then they reach every communicator)."""
        return any(v is not None for v in (self.min_ctas, self.max_ctas, self.min_nchannels,
                                             self.max_nchannels))  # fmt: skip


def channels(search: int, limit: CtaLimit, env: NcclEnv = NcclEnv()) -> int:
    """The channels a communicator runs on: the search's ``search`` clamped by its CTA limits
    (each replaced by the environment's when set) and the environment's channel bounds."""
    low = env.min_ctas if env.min_ctas is not None else (limit.min_ctas or 1)
    high = env.max_ctas if env.max_ctas is not None else (limit.max_ctas or MAX_CHANNELS)
    low = min(low, high)  # envConfigOverride: "minCTAs ... is larger than maxCTAs, set both"
    low = max(low, env.min_nchannels or 0)
    high = min(high, env.max_nchannels or MAX_CHANNELS)
    return max(low, min(search, high))


def group_channels(
    search: int, limits: Mapping[str, CtaLimit], env: NcclEnv = NcclEnv(), groups: Sequence[str] = ()
) -> dict[str, int]:
    """Simulated group -> channels, for the groups whose count differs from ``search``.

    ``limits``: Megatron communicator name -> its limits; ``groups``: every simulated group
    (the environment's limits reach all of them, configured or not). Empty when the search's
    count is unknown (``search`` 0)."""
    if search <= 0:
        return {}
    out: dict[str, int] = {}
    if env.any:
        for group in groups:
            out[group] = channels(search, CtaLimit(), env)
    for name, limit in limits.items():
        for group in SIMULATED_GROUPS.get(name, ()):
            out[group] = channels(search, limit, env)
    return {g: n for g, n in sorted(out.items()) if n != search}


def cap_GBps(curve: Sequence[tuple[float, float]], n: int) -> float:
    """The bus bandwidth ``n`` channels sustain, GB/s, by the measured ``curve`` of
    [[channels, busBw], ...] (increasing): straight lines between its points and from the
    origin to the first, and beyond the last at the last point's rate per channel. Infinite
    when the curve is unknown (empty) or ``n`` is 0 (the count unknown)."""
    if not curve or n <= 0:
        return float("inf")
    x0, y0 = 0.0, 0.0
    for x1, y1 in curve:
        if n <= x1:
            return y0 + (y1 - y0) * (n - x0) / (x1 - x0)
        x0, y0 = x1, y1
    return y0 * n / x0


def scenario_channels(cluster: Any, search: int, groups: Sequence[str]) -> dict[str, int]:
    """:func:`group_channels` for a scenario's ``cluster:`` section (its ``nccl_communicators``
    and the four environment fields); ``groups``: every simulated group."""
    limits = {
        name: CtaLimit(c.min_ctas, c.max_ctas) for name, c in (cluster.nccl_communicators or {}).items()
    }
    return group_channels(search, limits, env_of(cluster), groups)


def env_of(cluster: Any) -> NcclEnv:
    """The environment fields of a scenario's ``cluster:`` section."""
    return NcclEnv(cluster.nccl_min_ctas, cluster.nccl_max_ctas, cluster.nccl_min_nchannels,
                   cluster.nccl_max_nchannels)  # fmt: skip


def channels_note(cluster: Any, profile: Any) -> str | None:
    """One line on what a scenario's NCCL limits come to (None when it sets none): the groups
    of Megatron's communicators whose channels change (the environment's reach the rest too),
    and, on a profile without ``channel_busbw``, that their rate does not."""
    groups = sorted({g for named in SIMULATED_GROUPS.values() for g in named})
    if not cluster.nccl_communicators and not env_of(cluster).any:
        return None
    search = profile.efficiency.collective_sms
    if search <= 0:
        return f"NCCL CTA limits do nothing on '{profile.name}': its efficiency.collective_sms is 0"
    found = scenario_channels(cluster, search, groups)
    if not found:
        return f"NCCL CTA limits leave every group at the profile's {search} channels"
    shown = ", ".join(f"{g} {n}" for g, n in found.items())
    text = f"NCCL channels (cluster.nccl_*): {shown}; the other groups {search} (efficiency.collective_sms)"
    if not profile.efficiency.channel_busbw:
        text += (f"; '{profile.name}' has no efficiency.channel_busbw, so fewer channels hold fewer SMs "
                 "but keep the full rate (python -m calibrate measures the curve)")  # fmt: skip
    return text
