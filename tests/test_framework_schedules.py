"""Which pipeline schedules each framework's code runs (``frameworks.schedules``): Megatron-Core's
``get_forward_backward_func`` has 1F1B and interleaved 1F1B only, DeepSpeed's pipeline engine
its TrainSchedule, nanotron its OneForwardOneBackward and AllForwardAllBackward engines,
torch.distributed.pipelining the seven ``Schedule*`` classes of ``schedules.py``, sail-sg's
fork its zero-bubble and V schedules; a schedule outside them is a one-line error."""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.frameworks import FRAMEWORKS
from simcluster.frameworks.schedules import runners
from simcluster.scenario import load_scenario
from simcluster.schedules import SCHEDULES


def test_every_listed_schedule_is_a_registered_one():
    for entry in FRAMEWORKS.values():
        assert set(entry.schedules or ()) <= set(SCHEDULES), entry.name


#: torch.distributed.pipelining's schedule classes and the simcluster schedule each one runs
TORCH_CLASSES = {
    "Schedule1F1B": "1f1b", "ScheduleGPipe": "afab", "ScheduleInterleaved1F1B": "interleaved",
    "ScheduleLoopedBFS": "looped-bfs", "ScheduleInterleavedZeroBubble": "interleaved-zb",
    "ScheduleZBVZeroBubble": "zbv-fixed", "ScheduleDualPipeV": "dualpipev",
}  # fmt: skip


def test_pytorchs_pipelining_schedules_are_the_classes_torch_ships():
    """The installed torch's Schedule* classes, each a schedule of the PyTorch frameworks."""
    module = pytest.importorskip("torch.distributed.pipelining.schedules")
    assert {name for name in dir(module) if name.startswith("Schedule")} == set(TORCH_CLASSES)
    for framework in ("pytorch-ddp", "torchtitan", "automodel"):
        assert set(FRAMEWORKS[framework].schedules) == set(TORCH_CLASSES.values())


@pytest.mark.parametrize(
    ("framework", "schedule", "refused"),
    [
        ("megatron-core", "zb-1p", True),
        ("nemo", "zbv", True),
        ("megatron-core", "interleaved", False),
        ("deepspeed", "interleaved", True),
        ("nanotron", "afab", False),
        ("torchtitan", "zbv-fixed", False),
        ("torchtitan", "zb-1p", True),
        ("zero-bubble", "zb-2p", False),
        ("zero-bubble", "dualpipe", True),
    ],
)
def test_a_schedule_outside_the_frameworks_code_is_refused(framework, schedule, refused):
    # torchtitan's DDP runs alone (data parallelism only): its pipelines run under FSDP2
    zero = 3 if framework == "torchtitan" else 0
    overrides = [("framework", framework), ("parallel.zero", zero), ("parallel.schedule", schedule)]
    if schedule == "interleaved":
        overrides.append(("parallel.vpp", 2))
    sc = load_scenario("llama3-70b-64xh100", overrides)
    if not refused:
        build_context(sc)
        return
    with pytest.raises(UserError) as err:
        build_context(sc)
    assert err.value.field == "parallel.schedule"
    assert f"framework {framework} does not run schedule '{schedule}'" in str(err.value)
    assert "\n" not in str(err.value)


def test_the_error_names_the_frameworks_that_run_the_schedule():
    assert runners("zb-1p") == ["zero-bubble"]
    assert runners("zbv-fixed") == ["pytorch-ddp", "torchtitan", "automodel"]
    assert runners("dualpipe") == []  # DeepSeek's own training code; no framework entry here
    with pytest.raises(UserError) as err:
        build_context(load_scenario("llama3-70b-64xh100", [("framework", "megatron-core"), ("parallel.schedule", "zbv")]))
    assert "use one of those, or framework zero-bubble, or no framework" in str(err.value)


def test_without_a_pipeline_the_schedule_is_not_checked():
    build_context(load_scenario("llama3-8b-8xh100", [("framework", "megatron-core"), ("parallel.schedule", "zb-1p")]))
