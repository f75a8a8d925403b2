"""The dtype ZeRO 0-2's gradient buckets are reduced in (``dp.reduce_dtype``) when it is not the
dtype they accumulate in.

DeepSpeed's engine reduces every ZeRO 0-2 bucket through ``allreduce_bucket`` (runtime/engine.py):
``if self.communication_data_type != tensor.dtype: tensor_to_allreduce =
tensor.to(self.communication_data_type)``, the all_reduce, ``mul_(1/dp)`` on the cast, then
``tensor.copy_(tensor_to_allreduce)``. Its ``communication_data_type`` property returns the
config's value, else float16 under fp16 and bfloat16 under bf16. The BF16_Optimizer (bf16 at
ZeRO 0/1 with fp32 accumulation, the pipeline engine's ``_bf16_reduce_grads``) hands the engine
its fp32 gradient buffers (``get_grads_for_reduction``), so they go on the wire in bf16: 2 B per
element, after a cast that reads 4 and writes 2, and a copy back that reads 2 and writes 4.
"""

from __future__ import annotations

import pytest
from engine_helpers import deepspeed_bucket_doc, run

from simcluster.context import build_context
from simcluster.engine.plan import kernel_model
from simcluster.errors import UserError
from simcluster.frameworks import apply_framework
from simcluster.parallelism.data import (
    cast_buffer_bytes,
    grad_reduce_bytes,
    grad_wire_bytes,
    reduce_cast_bytes,
)
from simcluster.scenario import scenario_from_dict


def _doc(zero: int = 1, precision: str = "bf16", gpus: int = 4, **dp: object) -> dict:
    return deepspeed_bucket_doc("reduce-dtype", zero, precision, gpus, **dp)


def _scenario(**kw: object):
    return scenario_from_dict(_doc(**kw))  # type: ignore[arg-type]


def test_the_bf16_optimizers_fp32_buffers_go_on_the_wire_in_bf16():
    sc = _scenario()
    assert sc.training.fp32_grad_accum and sc.dp.reduce_dtype == "16bit"
    assert (grad_reduce_bytes(sc), grad_wire_bytes(sc)) == (4.0, 2.0)
    # tensor.to(bf16): read 4, write 2; tensor.copy_(cast): read 2, write 4
    assert reduce_cast_bytes(sc) == 12.0


@pytest.mark.parametrize(("zero", "precision"), [(1, "fp16"), (2, "bf16"), (0, "fp16")])
def test_deepspeeds_16bit_gradients_reduce_as_they_are(zero, precision):
    """DeepSpeedZeroOptimizer (fp16, or ZeRO-2) and fp16's FP16_Optimizer keep 16-bit
    gradients and communication_data_type is their dtype: no cast."""
    sc = _scenario(zero=zero, precision=precision)
    assert sc.dp.reduce_dtype is None
    assert grad_wire_bytes(sc) == grad_reduce_bytes(sc) == 2.0 and reduce_cast_bytes(sc) == 0.0


def test_an_explicit_dtype_wins_over_the_preset():
    """A config with communication_data_type fp32 (or DeepSpeed's default between its pull
    requests 2970 and 3370) reduces the fp32 buffers as they are."""
    sc = _scenario(reduce_dtype="fp32")
    assert grad_wire_bytes(sc) == 4.0 and reduce_cast_bytes(sc) == 0.0
    # and 16-bit gradients reduced in fp32 (ZeRO-2 with communication_data_type fp32): read 2,
    # write 4, then read 4, write 2
    up = _scenario(zero=2, reduce_dtype="fp32")
    assert (grad_reduce_bytes(up), grad_wire_bytes(up), reduce_cast_bytes(up)) == (2.0, 4.0, 12.0)


@pytest.mark.parametrize(
    ("release", "zero", "precision", "wire"),
    [
        # DeepSpeed 0.9.0 and 0.9.1's engine.py: float16 under fp16, else float32
        ("0.9.0", 1, "bf16", "fp32"),  # the BF16_Optimizer's fp32 buffers, reduced as they are
        ("0.9.1", 2, "bf16", "fp32"),  # ZeRO-2's bf16 buckets cast up to fp32
        ("0.9.1", 1, "fp16", None),
        ("0.9.1", 3, "bf16", None),  # ZeRO-3's reduce dtype is not dp.reduce_dtype's
        # 0.8.3: bfloat16 under bf16 at stage 0; 0.9.2 (pull request 3370): bfloat16 under bf16
        ("0.8.3", 1, "bf16", "16bit"),
        ("0.9.2", 1, "bf16", "16bit"),
        ("0.9.2", 2, "bf16", None),
    ],
)
def test_releases_0_9_0_and_0_9_1_reduced_bf16_runs_in_fp32(release, zero, precision, wire):
    doc = {**_doc(zero=zero, precision=precision), "framework": f"deepspeed {release}"}
    sc = scenario_from_dict(doc)
    assert sc.dp.reduce_dtype == wire
    build_context(sc)  # and it runs: no dated setting the layout refuses


def test_other_frameworks_are_untouched():
    plain = {k: v for k, v in _doc().items() if k != "framework"}
    for name in ("megatron-core", "megatron-lm-2021", "nanotron"):
        assert "reduce_dtype" not in apply_framework({**plain, "framework": name}).get("dp", {}), name


def _reductions(res, name: str = "grad_all_reduce"):
    ev = res.events
    return ev[(ev["rank"] == 0) & (ev["name"] == name)]


def test_the_reduction_moves_half_the_bytes_and_pays_the_casts():
    cast, kept = _doc(), _doc(reduce_dtype="fp32")
    a, b = run(cast), run(kept)
    wire_a, wire_b = _reductions(a), _reductions(b)
    assert len(wire_a) == len(wire_b) > 0
    assert wire_a["bytes"].sum() == pytest.approx(wire_b["bytes"].sum() / 2)
    # the bucket pass grows by the casts: 12 B per element beside the 1/dp scaling, which
    # acts on the cast (2 x 2 B) instead of the fp32 buffer (2 x 4 B)
    km = kernel_model(build_context(scenario_from_dict(cast)))
    pa, pb = _reductions(a, "grad_bucket_pass"), _reductions(b, "grad_bucket_pass")
    buckets = wire_a["bytes"] / 2.0
    assert len(pa) == len(pb) == len(buckets)
    for (_, ea), (_, eb), n in zip(pa.iterrows(), pb.iterrows(), buckets, strict=True):
        assert ea["end_s"] - ea["start_s"] == pytest.approx(km.memory(n * (12 + 2 * 2)), rel=1e-12)
        assert eb["end_s"] - eb["start_s"] == pytest.approx(km.memory(n * 2 * 4), rel=1e-12)


def test_the_cast_is_held_beside_the_stage_until_its_reduction():
    sc = _scenario()
    ctx = build_context(sc)
    assert cast_buffer_bytes(sc, ctx.layout, 1e9) == 2e9
    # one data-parallel rank: nothing is reduced, nothing cast
    one = _scenario(gpus=1)
    assert cast_buffer_bytes(one, build_context(one).layout, 1e9) == 0.0
    a, b = run(_doc()), run(_doc(reduce_dtype="fp32"))
    params = _reductions(a)["bytes"].sum() / 2.0

    def after_backward(res) -> float:
        # the highest point once the reduction's bucket pass has begun (the activations freed)
        start = _reductions(res, "grad_bucket_pass")["start_s"].min()
        mem = res.memory
        return float(mem[(mem["stage"] == 0) & (mem["time_s"] >= start)]["total"].max())

    # the whole bucket's bf16 cast on top of the static memory
    assert after_backward(a) - after_backward(b) == pytest.approx(2.0 * params, rel=1e-9)


@pytest.mark.parametrize(
    ("kw", "fix"),
    [
        ({"zero": 3, "reduce_dtype": "16bit"}, "training.fp32_grad_accum"),
        ({"precision": "fp32", "reduce_dtype": "16bit"}, "bf16 or fp16"),
    ],
)
def test_what_it_cannot_cast_is_a_one_line_error(kw, fix):
    with pytest.raises(UserError) as err:
        build_context(_scenario(**kw))
    assert err.value.field == "dp.reduce_dtype" and fix in str(err.value)
