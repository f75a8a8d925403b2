"""DeepSpeed's ZeRO 0-1 reductions flatten each bucket into a new tensor and copy the result back
(``dp.flatten_copies``).

``engine.py`` (ZeRO-0: ``allreduce_gradients`` -> ``buffered_allreduce_fallback``) and
``stage_1_and_2.py`` (ZeRO-1 without contiguous gradients: ``reduce_ipg_grads`` ->
``buffered_reduce_fallback``) both end in ``allreduce_no_retain``, which groups ``.grad`` tensors
up to 5e8 elements and calls ``allreduce_and_copy``: ``allreduce_bucket`` starts with
``tensor = self.flatten(bucket)`` (``torch._utils._flatten_dense_tensors``: ``torch.cat`` of the
tensors, a new tensor; a single tensor is returned as a view), and ``allreduce_and_copy`` ends
with ``buf.copy_(synced)`` for every tensor. Per element: the flatten reads and writes it, the
copy back reads and writes it again, 4 x 2 B in fp16; the flat tensor, up to 5e8 x 2 B = 1 GB,
lives from the flatten to the copy back. The BF16_Optimizer hands over one flat fp32 buffer per
parameter group, which flattens to a view: no copy.
"""

from __future__ import annotations

import pytest
from engine_helpers import deepspeed_bucket_doc, run

from simcluster.context import build_context
from simcluster.engine.plan import kernel_model
from simcluster.parallelism.data import cast_buffer_bytes, flatten_copy_bytes
from simcluster.scenario import scenario_from_dict


def _doc(zero: int = 1, precision: str = "fp16", gpus: int = 4, **dp: object) -> dict:
    return deepspeed_bucket_doc("flatten", zero, precision, gpus, **dp)


@pytest.mark.parametrize(
    ("zero", "precision", "flat"),
    [
        (0, "fp16", True),  # FP16_Optimizer: engine.buffered_allreduce_fallback over .grad
        (1, "fp16", True),  # DeepSpeedZeroOptimizer: buffered_reduce_fallback over .grad
        (0, "fp32", True),
        (1, "bf16", False),  # the BF16_Optimizer's flat buffers: views
        (2, "fp16", False),  # ZeRO-2 reduces its contiguous ipg buffer (dp.bucket_copies)
    ],
)
def test_framework_deepspeed_flattens_where_it_reduces_grad_tensors(zero, precision, flat):
    sc = scenario_from_dict(_doc(zero=zero, precision=precision))
    assert sc.dp.flatten_copies is flat


def test_a_flatten_and_its_copy_back_read_and_write_every_element_twice():
    sc = scenario_from_dict(_doc())
    assert flatten_copy_bytes(sc) == 4 * 2.0
    assert flatten_copy_bytes(scenario_from_dict(_doc(flatten_copies=False))) == 0.0


def _events(res, name: str):
    ev = res.events
    return ev[(ev["rank"] == 0) & (ev["name"] == name)].sort_values("start_s")


def test_each_bucket_pays_its_flatten_and_holds_the_flat_copy():
    # 1e8-element buckets (DeepSpeed's reduce_bucket_size set lower): several of them
    flat, plain = _doc(bucket_mb=200.0), _doc(bucket_mb=200.0, flatten_copies=False)
    a, b = run(flat), run(plain)
    km = kernel_model(build_context(scenario_from_dict(flat)))
    buckets = list(_events(a, "grad_all_reduce")["bytes"] / 2.0)
    assert len(buckets) > 1 and buckets == list(_events(b, "grad_all_reduce")["bytes"] / 2.0)
    # the 1/dp scaling (2 x 2 B) in both, the flatten and the copy back (4 x 2 B) in one
    for (_, ea), (_, eb), n in zip(
        _events(a, "grad_bucket_pass").iterrows(), _events(b, "grad_bucket_pass").iterrows(), buckets, strict=True
    ):
        assert ea["end_s"] - ea["start_s"] == pytest.approx(km.memory(n * 12.0), rel=1e-12)
        assert eb["end_s"] - eb["start_s"] == pytest.approx(km.memory(n * 4.0), rel=1e-12)

    def after_backward(res) -> float:
        start = _events(res, "grad_bucket_pass")["start_s"].min()
        mem = res.memory
        return float(mem[(mem["stage"] == 0) & (mem["time_s"] >= start)]["total"].max())

    # the largest bucket's flat fp16 copy on top of the static memory
    assert after_backward(a) - after_backward(b) == pytest.approx(2.0 * max(buckets), rel=1e-9)
    ctx = build_context(scenario_from_dict(flat))
    assert cast_buffer_bytes(ctx.scenario, ctx.layout, 5e8) == 1e9


def test_context_parallel_ranks_alone_reduce_through_the_flat_copy():
    """Dense buckets reduce over dp x cp, so two context-parallel ranks without data
    parallelism flatten and scale them too, and hold the flat copy where `simcluster memory`
    walks it (tests/test_random_layouts.py seed 7 on the whole profile list: dp 1 x cp 2 under
    DeepSpeed simulated 157 MiB below the walk while the pass looked at dp alone)."""
    from simcluster.memory_report import timeline_fault

    doc = _doc(bucket_mb=200.0)
    doc["parallel"]["cp"] = 2
    doc["cluster"]["gpus"] = 2
    doc["training"]["global_batch"] = 2
    res = run(doc)
    assert len(_events(res, "grad_bucket_pass")) == len(_events(res, "grad_all_reduce")) > 1
    ctx = build_context(scenario_from_dict(doc))
    assert timeline_fault(ctx, res.memory, res.summary["peak_memory_bytes"]["per_stage"]) is None
