"""Build a schedule's order, check it and replay it with fixed op times (schedule tests)."""

from simcluster.schedules import ScheduleSpec, get_schedule
from simcluster.schedules.check import check_order, check_timeline, replay


def run(name, p, m, v=1, **times):
    """(per-stage ops, replayed timeline) of schedule ``name``, both checked: every op once,
    dependencies kept, one op at a time per stage."""
    sched = get_schedule(name)
    spec = ScheduleSpec(p, m, v)
    ops = sched.build(spec)
    check_order(sched, spec, ops)
    timeline = replay(sched, spec, ops, **times)
    check_timeline(sched, spec, timeline)
    return ops, timeline
