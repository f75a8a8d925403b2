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
from simcluster.memory_report import memory_by_stage
from simcluster.parallelism.head_wgrad_deferral import drain_buffer_bytes, kept_bytes
from simcluster.scenario import scenario_from_dict

M = 8


def _data(defer: bool, limit: int = 0, **parallel) -> dict:
    """Two 1F1B stages of M microbatches, 3 layers on the first and 1 with the 256K-vocabulary
    LM head on the last; ``parallel`` adds settings (tp, sequence parallelism)."""
    return pipeline_scenario(
        2, M, "1f1b", layers=4,
        model={"vocab": 262144, "hidden": 2048, "heads": 16, "ffn": 8192},
        parallel={"layers_per_stage": [3, 1], "defer_head_wgrad": defer, "head_wgrad_deferral_limit": limit,
                  **parallel},
        training={"grad_accum_fusion": True},  # Megatron-Core defers only with it (ModelParallelConfig)
    )  # fmt: skip


def _run(defer: bool, limit: int = 0):
    return simulate(scenario_from_dict(_data(defer, limit))).events


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
    data = pipeline_scenario(1, 2, "1f1b", parallel={"defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": 4},
                             training={"grad_accum_fusion": True})  # fmt: skip
    sc = scenario_from_dict(data)
    assert sc.parallel.defer_head_wgrad and sc.parallel.head_wgrad_deferral_limit == 4
    settings = {n.setting for n in inert_settings(build_context(sc))}
    assert {"parallel.defer_head_wgrad", "parallel.head_wgrad_deferral_limit"} <= settings


# --- memory: the kept input and output gradient of each deferred microbatch ----------------------
# Megatron-Core (megatron/core/tensor_parallel/layers.py): ColumnParallelLinear.forward appends the
# output layer's input_parallel to embedding_activation_buffer, and
# LinearWithGradAccumulationAndAsyncCommunication.backward its grad_output to grad_output_buffer;
# drain_embedding_wgrad_compute (megatron/core/utils.py) pops them after the last backward. The
# scenario above (tp 1, no sequence parallelism, bf16): per microbatch the input is s x b x h =
# 1024 x 1 x 2048 elements and the output gradient s x b x V = 1024 x 1 x 262144, 2 bytes each.
KEPT = 2 * 1024 * 2048 + 2 * 1024 * 262144  # 541,065,216 bytes (516 MiB)


def _context(defer: bool, limit: int = 0):
    return build_context(scenario_from_dict(_data(defer, limit)))


def test_kept_bytes_by_hand():
    ctx = _context(True)
    assert kept_bytes(ctx.model, ctx.layout, ctx.scenario.training) == KEPT == 541_065_216
    # tp 1: nothing to all-gather in the drain, no mpu_0 / mpu_1 buffers
    assert drain_buffer_bytes(ctx.model, ctx.layout, ctx.scenario.training, M) == 0.0


@pytest.mark.parametrize(("limit", "held"), [(3, 3), (0, M - 1)])
def test_the_last_stage_peak_holds_the_deferred_microbatches(limit, held):
    """The last 1F1B stage runs F0 B0 F1 B1 ...: its stash peaks at each forward with one
    microbatch's activations, the same every time. With L deferred microbatches the forward of
    microbatch L finds L kept pairs besides (L < M: 3 x 516 MiB); with every microbatch deferred
    the last forward finds M - 1 (the M-th pair joins after it, when one stash fewer is alive:
    the stash, with its fp32 logits, 4 x s x V bytes, outweighs a pair). The first stage keeps
    nothing more; the timeline (engine) and the walk (memory_by_stage) agree."""
    base = [m.total_bytes for m in memory_by_stage(_context(False))]
    ctx = _context(True, limit)
    mem = [m.total_bytes for m in memory_by_stage(ctx)]
    assert mem[0] == base[0]
    assert mem[1] - base[1] == pytest.approx(held * KEPT, rel=1e-12)
    res = simulate(ctx.scenario)
    timeline = res.memory.groupby("stage")["total"].max()
    assert timeline[1] == pytest.approx(mem[1], rel=1e-9)
    # every kept pair is freed by the drain: the step ends with the stash it began with
    last = res.memory[res.memory.stage == 1].iloc[-1]
    assert last.activations == pytest.approx(0.0, abs=1.0)


def test_sequence_parallel_keeps_the_input_shard_and_two_gather_buffers():
    """tp 2 with sequence parallelism: the kept input is the 1/tp shard (s/tp x b x h), the output
    gradient the vocab-parallel s x b x V/tp, and the drain's mpu_0 / mpu_1 each hold a gathered
    input (s x b x h), 2 bytes each."""
    data = _data(True, tp=2, sequence_parallel=True)
    data["cluster"]["gpus"] = 4
    data["cluster"]["gpus_per_node"] = 4
    ctx = build_context(scenario_from_dict(data))
    training = ctx.scenario.training
    assert kept_bytes(ctx.model, ctx.layout, training) == 2 * 512 * 2048 + 2 * 1024 * 131072
    assert drain_buffer_bytes(ctx.model, ctx.layout, training, M) == 2 * (2 * 1024 * 2048)
    assert drain_buffer_bytes(ctx.model, ctx.layout, training, 1) == 2 * 1024 * 2048  # mpu_0 only
