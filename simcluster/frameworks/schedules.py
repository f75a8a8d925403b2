"""Which pipeline schedules a framework's code runs: a scenario naming a framework and a
schedule its code does not have is refused (Megatron-Core has no zero-bubble schedule,
DeepSpeed's engine no interleaving), with the frameworks that do run it; and a schedule a
framework runs only without sequence parallelism (Megatron-DeepSpeed's ZB-H1)."""

from __future__ import annotations

from simcluster.errors import UserError
from simcluster.frameworks.lookup import get_framework
from simcluster.frameworks.registry import FRAMEWORKS
from simcluster.schedules.zb_h1_ds import EXACT_NAME as ZBH1_DS_EXACT
from simcluster.schedules.zb_h1_ds import NAME as ZBH1_DS


def runners(schedule: str) -> list[str]:
    """The frameworks whose code runs ``schedule``."""
    return [f.name for f in FRAMEWORKS.values() if f.schedules is not None and schedule in f.schedules]


def framework_runs(framework: str | None, schedule: str) -> bool:
    """Whether a scenario with ``framework`` (None: simcluster's own loop, which runs every
    schedule) may run ``schedule``."""
    return framework is None or get_framework(framework).runs_schedule(schedule)


def check_framework_schedule(framework: str | None, schedule: str, pp: int) -> None:
    """Refuse a pipeline (pp > 1) in a schedule the named framework does not run."""
    if pp <= 1 or framework_runs(framework, schedule):
        return
    entry = get_framework(framework)
    others = runners(schedule)
    elsewhere = f"framework {' or '.join(others)}, or no framework" if others else "no framework (simcluster's own loop)"
    raise UserError(
        "parallel.schedule",
        f"framework {entry.name} does not run schedule '{schedule}' (its pipelines run "
        f"{', '.join(entry.schedules or ())}); use one of those, or {elsewhere}",
    )


def runs_with_sequence_parallel(framework: str | None, schedule: str) -> bool:
    """Whether ``framework`` runs ``schedule`` with sequence parallelism: not Megatron-DeepSpeed's
    ZB-H1, which its arguments.py asserts against (``--enable-zbh1-pipeline``: "Sequence
    Parallel not tested")."""
    return not (framework == "deepspeed" and schedule in (ZBH1_DS, ZBH1_DS_EXACT))


def check_framework_sequence_parallel(framework: str | None, schedule: str, sequence_parallel: bool) -> None:
    """Refuse a schedule with sequence parallelism where the framework runs it without
    (:func:`runs_with_sequence_parallel`)."""
    if sequence_parallel and not runs_with_sequence_parallel(framework, schedule):
        raise UserError(
            "parallel.sequence_parallel",
            f"Megatron-DeepSpeed runs its ZB-H1 ('{schedule}') without sequence parallelism "
            "(arguments.py asserts it); set parallel.sequence_parallel: false, or schedule 1f1b",
        )
