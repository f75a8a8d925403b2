"""Pipeline schedules: pure functions from (p, m, v) to per-stage op orders.

Importing this package registers every schedule in :data:`SCHEDULES`.
"""

from simcluster.schedules import (  # noqa: F401  (imported to register)
    afab,
    dualpipe,
    dualpipev,
    interleaved,
    interleaved_zb,
    looped_bfs,
    one_f_one_b,
    v_auto,
    v_controllable,
    zb_auto,
    zb_h1,
    zb_h1_ds,
    zb_h2,
    zbv,
    zbv_fixed,
)
from simcluster.schedules.base import OpCosts, PipeOp, Schedule, ScheduleSpec, locate, upstream
from simcluster.schedules.registry import SCHEDULES, get_schedule

__all__ = ["SCHEDULES", "OpCosts", "PipeOp", "Schedule", "ScheduleSpec", "get_schedule", "locate", "upstream"]
