"""The DeepEP-family dispatch and combine kernels' rate inside one NVLink domain, by EP size
and by the SMs they run on.

DeepEP's normal kernels and NVIDIA's HybridEP copy tokens with SMs of their own, so their rate
depends on how many they are given (Megatron-Core's ``--moe-deepep-num-sms``, default 20, and
``--moe-hybridep-num-sms``, default 16). DeepEP's Hybrid-EP README measures both by SM count on
B200 (DeepEP 16-48 SMs, 8 ranks: 325 to 616 GB/s, nearly in proportion up to 24 SMs, saturating
past 32) and GB200 (HybridEP 16 and 32 SMs, 8-36 ranks: 1.02-1.10x; DeepEP 16, 24, 32 SMs).

A profile gives the rate at the framework's default count (``efficiency.deepep_nvlink``,
``hybridep_nvlink``: [[EP ranks, fraction of the links]]) and, where measured, at other counts
(``efficiency.deepep_nvlink_by_sms``, ``hybridep_nvlink_by_sms``: {SMs: the same table}).
Between two measured counts the rate is linear in SMs; beyond the largest it is held (the links
and HBM bound it there); below the smallest it falls in proportion to the SMs (an ASSUMPTION:
with too few SMs each copies at its own fixed rate, as DeepEP's B200 rows nearly do from 16 to
24 SMs). This module imports nothing from simcluster, so the profile schema can use it.

The tables hold the rate at the measurements' token of hidden 7,168 in BF16 (14,336 bytes). A
token of other size moves at another rate, because the kernels spend a fixed amount of SM time
on each token besides moving its bytes (``efficiency.deepep_token_sm_ns``,
``hybridep_token_sm_ns``: {SMs: SM-nanoseconds a token}). The same tables measure FP8 dispatch
(7,392 bytes a token with its scales) beside BF16 at every SM count, so the two calls' times
give both terms: DeepEP's on B200 and GB200 come to 290-330 SM-ns a token from 16 to 32 SMs (a
nearly constant per-token work spread over the SMs), HybridEP's to 135-180; on H200's NVLink 4
(24 SMs) the pair shows none (the links bind). Read back, a BF16 token of hidden 2,048 moves at
0.45-0.65 of the tables' rate on 16-32 SMs (:func:`token_size_ratio`); torchtitan's B200
tuning run of DeepEP at that hidden size (EP 4, 24 SMs) measured 218 GB/s dispatch against the
494 of hidden 7,168 at EP 8: 0.44.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from simcluster.interp import interp

#: SMs the DeepEP-family dispatch and combine kernels run on unless told: Megatron-Core's
#: defaults ``moe_deepep_num_sms`` 20 (DeepSeek-V3's report, Sec. 3.2.2: "only 20 SMs are
#: sufficient to fully utilize the bandwidths of IB and NVLink") and ``moe_hybridep_num_sms`` 16
DISPATCH_SMS = {"deepep": 20, "hybridep": 16}

#: bytes of the token the rate tables were measured with: hidden 7,168 in BF16 (DeepEP's and
#: HybridEP's tests, the DeepSeek-V3 shape)
MEASURED_TOKEN_BYTES = 7168 * 2

RateTable = Sequence[tuple[int, float]]


def kernel_fraction(
    base: RateTable,
    by_sms: Mapping[int, RateTable] | None,
    default_sms: int,
    ranks: int,
    sms: int,
) -> float:
    """The kernels' rate as a fraction of the links at ``ranks`` EP ranks on ``sms`` SMs:
    ``base`` (measured at ``default_sms``) read by EP size, and, at another SM count, the
    measured counts of ``by_sms`` with the default's between them (module docstring). Without
    ``by_sms`` the default's rate is held at every count."""
    at_default = interp(base, ranks)
    if sms == default_sms or not by_sms:
        return at_default
    points = sorted([(default_sms, at_default), *((k, interp(t, ranks)) for k, t in by_sms.items())])
    lowest, rate = points[0]
    if sms < lowest:
        return rate * sms / lowest
    return interp(points, sms)


def token_size_ratio(rate_gbps: float, token_sm_ns: Mapping[int, float] | None, sms: int, token_bytes: float) -> float:
    """The kernels' rate for tokens of ``token_bytes`` over ``rate_gbps``, their measured rate
    for tokens of :data:`MEASURED_TOKEN_BYTES` on ``sms`` SMs: a token takes a fixed ``c`` =
    ``token_sm_ns`` (read at ``sms``, linear between measured counts, held beyond) / ``sms``
    nanoseconds plus its bytes at the rate that leaves the measured time per token (module
    docstring). 1.0 without ``token_sm_ns`` (the rate is held at every token size)."""
    if not token_sm_ns or sms <= 0 or rate_gbps <= 0:
        return 1.0
    per_token_ns = MEASURED_TOKEN_BYTES / rate_gbps  # bytes over GB/s: nanoseconds
    fixed = min(interp(sorted(token_sm_ns.items()), sms) / sms, per_token_ns) / per_token_ns
    size = token_bytes / MEASURED_TOKEN_BYTES
    return size / (fixed + (1.0 - fixed) * size)
