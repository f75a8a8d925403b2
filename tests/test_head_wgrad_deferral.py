"""``parallel.defer_head_wgrad``: Megatron-Core's --defer-embedding-wgrad-compute.

The analytic check: two 1F1B stages on an ideal network, the last one's LM head over a 256K
vocabulary large enough that the last stage sets the pace (a + c <= d + e - w for the first
stage's forward a and backward c, the last stage's d and e, and the head's weight gradient w).
The last stage then runs without a gap and ends its backwards at A + m (d + e) (A: the first
forward); the first stage's last backward follows at A + m (d + e) + c. Deferring the head's
weight gradient of every microbatch shortens each of the last stage's backwards by w, so the
first stage's last backward ends m w earlier, while the last stage runs the m kept GEMMs
(drain_embedding_wgrad_compute, megatron/core/utils.py) after its last backward and ends when
it did before. With --wgrad-deferral-limit L only the first L microbatches wait: L w.
"""

from __future__ import annotations

import pytest
from engine_helpers import pipeline_scenario

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.inert import inert_settings
from simcluster.scenario import scenario_from_dict

M = 8


def _run(defer: bool, limit: int = 0):
    data = pipeline_scenario(
        2, M, "1f1b", layers=4,
        model={"vocab": 262144, "hidden": 2048, "heads": 16, "ffn": 8192},
        parallel={"layers_per_stage": [3, 1], "defer_head_wgrad": defer, "head_wgrad_deferral_limit": limit},
    )  # fmt: skip
    return simulate(scenario_from_dict(data)).events


def _ends(events):
    """(first stage's last backward end, last stage's last compute end, the head's wgrad events)."""
    compute = events[events.stream == "compute"]
    first = compute[(compute.stage == 0) & compute.kind.str.startswith("backward")].end_s.max()
    last = compute[compute.stage == 1].end_s.max()
    return first, last, events[events.name == "lm_head_wgrad"]


@pytest.fixture(scope="module")
def plain():
    return _ends(_run(False))


def test_deferring_every_head_wgrad_moves_the_flush_by_m_gemms(plain):
    first0, last0, heads0 = plain
    first, last, heads = _ends(_run(True))
    w = (heads0.end_s - heads0.start_s).iloc[0]
    assert len(heads0) == len(heads) == M
    assert w > 1e-3  # 2 x 1024 x 2048 x 262144 FLOPs: about 1.1 TFLOP, milliseconds on an H100
    assert first0 - first == pytest.approx(M * w, rel=1e-6)
    assert last == pytest.approx(last0, rel=1e-9)
    # the kept GEMMs run back to back after the last stage's last backward op
    backward_end = heads.start_s.min()
    assert (heads.microbatch == -1).all()
    assert heads.end_s.max() - backward_end == pytest.approx(M * w, rel=1e-6)


def test_the_deferral_limit_defers_the_first_microbatches_only(plain):
    first0, _, heads0 = plain
    first, _, heads = _ends(_run(True, limit=3))
    w = (heads0.end_s - heads0.start_s).iloc[0]
    assert sorted(heads.microbatch) == [-1, -1, -1, 3, 4, 5, 6, 7]
    assert first0 - first == pytest.approx(3 * w, rel=1e-6)


def test_megatron_flag_names_are_read_and_inert_without_pipeline():
    data = pipeline_scenario(1, 2, "1f1b", parallel={"defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": 4})
    sc = scenario_from_dict(data)
    assert sc.parallel.defer_head_wgrad and sc.parallel.head_wgrad_deferral_limit == 4
    settings = {n.setting for n in inert_settings(build_context(sc))}
    assert {"parallel.defer_head_wgrad", "parallel.head_wgrad_deferral_limit"} <= settings
