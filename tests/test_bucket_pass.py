"""The framework's pass over each gradient bucket before it is reduced (``dp.nan_check``,
``dp.prescale``).

Megatron-Core's ``Bucket.start_grad_sync`` (Megatron-LM defaults) first computes
``grad_data.norm(p=2)`` and asserts it is not NaN (one read of the bucket), then scales it in
place, ``grad_data *= gradient_scaling_factor`` with the factor 1/dp (a read and a write), and
only then issues the reduce-scatter; all of it on the stream the backward runs on.
"""

from __future__ import annotations

import pytest
from engine_helpers import gpt_model, run

from simcluster.context import build_context
from simcluster.engine.plan import kernel_model
from simcluster.frameworks import apply_framework
from simcluster.parallelism.data import build_buckets
from simcluster.scenario import scenario_from_dict


def _scenario(gpus: int = 4, overlap: bool = True, **dp: bool) -> dict:
    return {
        "name": "buckets",
        "model": gpt_model(4, 2048, 32000),
        "cluster": {
            "hardware": "dgx-h100",
            "gpus": gpus,
            # no NCCL SM sharing, no slowest-GPU factor and a host that issues instantly (the
            # NaN checks' host syncs, test_host.py, cost nothing): a pass lasts exactly its bytes
            "profile": {"efficiency": {"collective_sms": 0, "host_op_us": 0.0}, "gpu": {"speed_spread": 0.0}},
        },
        "parallel": {"zero": 1},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 2 * gpus, "precision": "bf16"},
        "overlap": {"dp_grad_reduce": overlap, "param_gather": False},
        "dp": {"bucket_mb": 100, **dp},
    }


def _passes(res):
    ev = res.events
    return ev[(ev["rank"] == 0) & (ev["name"] == "grad_bucket_pass")].sort_values("start_s")


def _bucket_params(data: dict) -> list[float]:
    ctx = build_context(scenario_from_dict(data))
    buckets = build_buckets(ctx.model, ctx.layout, ctx.chunks[0], 100e6 / 4.0)  # 100 MB of fp32
    return [b.params for b in buckets if b.group == "dp"]


def _bytes_seconds(data: dict, nbytes: float) -> float:
    return kernel_model(build_context(scenario_from_dict(data))).memory(nbytes)


def test_no_pass_unless_asked():
    assert _passes(run(_scenario())).empty


@pytest.mark.parametrize(
    "flags, passes",
    [({"nan_check": True}, 1), ({"prescale": True}, 2), ({"nan_check": True, "prescale": True}, 3)],
)
def test_each_bucket_is_read_once_per_norm_and_read_and_written_per_scaling(flags, passes):
    data = _scenario(**flags)
    got = _passes(run(data))
    params = _bucket_params(data)
    assert len(got) == len(params) > 1
    # fp32 main gradients (Megatron's gradient_accumulation_fusion): 4 B per element and pass
    for (_, ev), n in zip(got.iterrows(), params, strict=True):
        assert ev["end_s"] - ev["start_s"] == pytest.approx(_bytes_seconds(data, n * 4.0 * passes))


def test_the_reduction_starts_after_its_bucket_pass():
    res = run(_scenario(nan_check=True, prescale=True))
    ev = res.events
    rs = ev[(ev["rank"] == 0) & (ev["name"] == "grad_reduce_scatter")].sort_values("start_s")
    passes = _passes(res)
    assert len(rs) == len(passes)
    for end, start in zip(passes["end_s"], rs["start_s"], strict=True):
        assert start >= end - 1e-12


def test_scaling_needs_a_group_to_average_over_and_the_norm_does_not():
    """One data-parallel rank: gradient_scaling_factor is 1 and Megatron skips the multiply;
    the NaN check still reads the bucket."""
    assert _passes(run(_scenario(gpus=1, prescale=True))).empty
    assert not _passes(run(_scenario(gpus=1, nan_check=True))).empty


def test_without_overlap_each_pass_precedes_its_reduction_at_the_end():
    base = run(_scenario(overlap=False))
    data = _scenario(overlap=False, nan_check=True, prescale=True)
    res = run(data)
    passes = _passes(res)
    assert set(passes["kind"]) == {"optimizer"}
    total = sum(_bytes_seconds(data, n * 12.0) for n in _bucket_params(data))
    # nothing overlaps them: the step grows by exactly their time
    assert res.summary["step_time_s"] - base.summary["step_time_s"] == pytest.approx(total)


def test_frameworks_set_the_passes_they_run():
    plain = {k: v for k, v in _scenario().items() if k != "dp"}
    core = apply_framework({**plain, "framework": "megatron-core"})
    assert core["dp"]["nan_check"] is True and core["dp"]["prescale"] is True
    lm2021 = apply_framework({**plain, "framework": "megatron-lm-2021"})["dp"]
    assert lm2021["prescale"] is True and "nan_check" not in lm2021
    for name in ("nanotron", "torchtitan"):
        # torchtitan has no ZeRO-1: its FSDP2 is zero 3
        parallel = {"zero": 3} if name == "torchtitan" else plain["parallel"]
        dp = apply_framework({**plain, "parallel": parallel, "framework": name}).get("dp", {})
        assert "nan_check" not in dp and "prescale" not in dp, name
    # DeepSpeed divides every ZeRO 0-2 bucket by dp in a pass of its own (engine.py
    # allreduce_bucket: mul_(1/dp) after the all_reduce; stage_1_and_2.py
    # gradient_reduction_w_predivide, average_tensor's div_), and checks no NaN
    ds = apply_framework({**plain, "framework": "deepspeed"})["dp"]
    assert ds["prescale"] is True and "nan_check" not in ds
    # an explicit field wins (NeMo's and Megatron-Bridge's recipes turn both off)
    off = apply_framework({**plain, "framework": "megatron-core", "dp": {"nan_check": False}})
    assert off["dp"]["nan_check"] is False and off["dp"]["prescale"] is True


def test_torch_ddp_copies_each_gradient_into_its_bucket_and_back():
    """PyTorch DDP without gradient_as_bucket_view (its default, and nanotron's: trainer.py
    builds DistributedDataParallel without it): the reducer copies each 16-bit .grad into its
    bucket when it is ready (copy_grad_to_bucket) and the reduced bucket back into .grad after
    the backward (copy_bucket_to_grad): a read and a write of 2 B each, twice, 8 B per
    parameter, whatever width the bucket is reduced at; fp32 training copies 4 B elements."""
    data = _scenario(bucket_copies=True)
    got = _passes(run(data))
    params = _bucket_params(data)
    assert len(got) == len(params) > 1
    for (_, ev), n in zip(got.iterrows(), params, strict=True):
        assert ev["end_s"] - ev["start_s"] == pytest.approx(_bytes_seconds(data, n * 8.0))
    fp32 = _scenario(bucket_copies=True)
    fp32["training"] = {**fp32["training"], "precision": "fp32"}
    got32 = _passes(run(fp32))
    first = _bucket_params(fp32)[0]
    assert got32.iloc[0]["end_s"] - got32.iloc[0]["start_s"] == pytest.approx(_bytes_seconds(fp32, first * 16.0))


def test_nanotron_ddp_copies_only_on_its_torch_ddp_path():
    plain = {k: v for k, v in _scenario().items() if k not in ("dp", "parallel")}
    zero0 = apply_framework({**plain, "framework": "nanotron", "parallel": {"zero": 0}})
    assert zero0["dp"]["bucket_copies"] is True
    zero1 = apply_framework({**plain, "framework": "nanotron", "parallel": {"zero": 1}})
    assert "bucket_copies" not in zero1["dp"]


def test_autocast_copies_fp32_gradients_as_fp32_training_does():
    """Under torch.autocast (framework pytorch-ddp: the model built in fp32) .grad is fp32, as
    the buckets' memory counts it (data.bucket_buffer_bytes): DDP's copy in and back moves
    4 B elements, 16 B per parameter, the same pass as fp32 training's, not a 16-bit model's 8 B."""
    cast = _scenario(bucket_copies=True)
    cast["training"] = {**cast["training"], "autocast": True}
    fp32 = _scenario(bucket_copies=True)
    fp32["training"] = {**fp32["training"], "precision": "fp32"}
    got, ref = _passes(run(cast)), _passes(run(fp32))
    assert _bucket_params(cast) == _bucket_params(fp32)
    first = _bucket_params(cast)[0]
    assert got.iloc[0]["end_s"] - got.iloc[0]["start_s"] == pytest.approx(_bytes_seconds(cast, first * 16.0))
    assert list(got["end_s"] - got["start_s"]) == pytest.approx(list(ref["end_s"] - ref["start_s"]))


@pytest.mark.parametrize("zero", [1, 3])
def test_autocast_gathers_its_fp32_parameters_as_fp32_training_does(zero):
    """Under torch.autocast the parameters are fp32 (the static memory keeps 4 B of each) and
    autocast casts them op by op after they are gathered, so ZeRO-1's parameter all-gather
    after the step and ZeRO-3's per-layer gathers (buffers views: DeepSpeed, Megatron-FSDP)
    move fp32 elements, the bytes of fp32 training (they once moved 16-bit ones). PyTorch
    FSDP's MixedPrecision gathers 16-bit copies either way (test_inert: autocast's note)."""

    def gathered(**training):
        data = _scenario(overlap=False)
        data["parallel"] = {"zero": zero}
        data["training"] = {**data["training"], **training}
        ev = run(data).events
        return ev[(ev["rank"] == 0) & ev["name"].str.contains("param_all_gather")]["bytes"].sum()

    cast, fp32, bf16 = gathered(autocast=True), gathered(precision="fp32"), gathered()
    assert cast == fp32 == 2 * bf16 > 0
