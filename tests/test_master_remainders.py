"""apex DistributedFusedAdam's master-weight remainders (``training.master_weights: remainder``).

Sources: NVIDIA/apex ``apex/contrib/optimizers/distributed_fused_adam.py`` (``StateBucket``: an
int16 ``param_remainders_shard`` and fp32 ``exp_avg_shard`` / ``exp_avg_sq_shard`` under
``store_param_remainders``, no fp32 ``params_shard``; ``_local_step_with_param_remainders``
writes the bf16 weight through ``multi_tensor_fused_adam_with_param_remainders``); NVIDIA/NeMo
``megatron_base_model.py`` ``setup_optimization`` (``store_param_remainders = True`` for an fp32
optimizer over a bf16 model, ``store_params`` with ``fp8_params``).
"""

from __future__ import annotations

import pytest
from engine_helpers import pipeline_scenario

from simcluster.context import build_context
from simcluster.memory import bytes_per_param, keeps_remainders
from simcluster.memory_report import memory_by_stage
from simcluster.parallelism.data import optimizer_bytes_per_param
from simcluster.scenario import scenario_from_dict

DP = 4


def _data(**training) -> dict:
    data = pipeline_scenario(1, DP, "1f1b", layers=2, cluster={"gpus": DP}, parallel={"zero": 1})
    data["training"].update(**training)
    return data


def test_adams_state_is_ten_bytes_a_parameter_with_remainders():
    """int16 remainder + fp32 m + fp32 v = 2 + 4 + 4, where an fp32 master makes it 12."""
    assert bytes_per_param("bf16", "adam", True, remainder=True).optimizer == 10.0
    assert bytes_per_param("bf16", "adam", True).optimizer == 12.0


def test_the_sharded_state_shrinks_by_two_bytes_over_dp():
    plain = build_context(scenario_from_dict(_data()))
    kept = build_context(scenario_from_dict(_data(master_weights="remainder")))
    params = memory_by_stage(plain)[0].params_per_gpu
    saved = memory_by_stage(plain)[0].optimizer_bytes - memory_by_stage(kept)[0].optimizer_bytes
    assert saved == pytest.approx(2.0 * params / DP, rel=1e-12)
    assert memory_by_stage(plain)[0].params_bytes == memory_by_stage(kept)[0].params_bytes


def test_the_fused_step_writes_the_bf16_weight_itself():
    """No separate copy of the master into the 16-bit weight (read 4 B, write 2 B): the fused
    step reads and writes the remainder and the bf16 weight, the bytes of an fp32 master."""
    plain = scenario_from_dict(_data())
    kept = scenario_from_dict(_data(master_weights="remainder"))
    assert optimizer_bytes_per_param(plain) - optimizer_bytes_per_param(kept) == 6.0


@pytest.mark.parametrize(
    ("training", "kept"),
    [
        ({"master_weights": "remainder"}, True),
        ({"master_weights": "remainder", "precision": "fp8"}, True),
        ({"master_weights": "remainder", "precision": "fp16"}, False),  # an fp16 weight is no fp32 half
        ({"master_weights": "remainder", "precision": "fp8", "fp8_param_gather": True}, False),  # store_params
        ({}, False),
    ],
)
def test_only_a_bf16_weight_completes_a_remainder(training, kept):
    assert keeps_remainders(scenario_from_dict(_data(**training)).training) is kept


@pytest.mark.parametrize(
    ("release", "precision", "expected"),
    [("24.07", "fp8", "remainder"), ("24.03.01", "bf16", "remainder"), ("24.07", "fp16", "fp32"),
     ("24.09", "bf16", "fp32")],
)
def test_nemo_1x_keeps_remainders(release, precision, expected):
    """NeMo 1.x (before the 24.09 container's NeMo 2) ran apex's DistributedFusedAdam with
    NeMo's rule; NeMo 2 runs Megatron-Core's distributed optimizer (an fp32 master)."""
    data = _data(precision=precision)
    data.update(framework="nemo", framework_release=release)
    assert scenario_from_dict(data).training.master_weights == expected


def test_pytorch_fsdp_has_no_master_to_shorten():
    """FSDP steps its fp32 shards in place (no master copy): the setting changes nothing and
    says so."""
    from simcluster.inert import inert_settings

    data = _data()
    data.update(framework="torchtitan")
    data["parallel"].update(zero=3, schedule="1f1b")
    kept = _data(master_weights="remainder")
    kept.update(framework="torchtitan")
    kept["parallel"].update(zero=3, schedule="1f1b")
    plain_ctx, kept_ctx = (build_context(scenario_from_dict(d)) for d in (data, kept))
    assert memory_by_stage(plain_ctx)[0].total_bytes == memory_by_stage(kept_ctx)[0].total_bytes
    assert "training.master_weights" in [n.setting for n in inert_settings(kept_ctx)]
