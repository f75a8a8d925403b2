"""``cluster.nccl_communicators``: one NCCL communicator's CTA limits, as Megatron-Core's
``--nccl-communicator-config-path`` YAML gives them (see :mod:`simcluster.nccl_ctas`)."""

from __future__ import annotations

from pydantic import Field

from simcluster.errors import did_you_mean
from simcluster.nccl_ctas import COMMUNICATORS, MAX_CHANNELS
from simcluster.scenario.base import SectionBase


class NcclCommunicator(SectionBase):
    """``{min_ctas, max_ctas}`` of one communicator (Megatron's ``get_nccl_options``: NCCL's
    ``ncclConfig_t.minCTAs`` / ``maxCTAs``); unset = NCCL's default."""

    min_ctas: int | None = Field(
        default=None, ge=1, le=MAX_CHANNELS,
        description="NCCL minCTAs: the fewest channels (CTAs) its calls run on",
    )
    max_ctas: int | None = Field(
        default=None, ge=1, le=MAX_CHANNELS,
        description="NCCL maxCTAs: the most channels (CTAs) its calls run on",
    )


def check_communicators(value: dict[str, NcclCommunicator] | None) -> dict[str, NcclCommunicator] | None:
    """Refuse a communicator name Megatron-Core does not create (with a did-you-mean hint)."""
    for name in value or {}:
        if name not in COMMUNICATORS:
            raise ValueError(
                f"'{name}' is not a Megatron-Core communicator{did_you_mean(name, COMMUNICATORS)}; "
                f"use one of {', '.join(sorted(COMMUNICATORS))}"
            )
    return value
