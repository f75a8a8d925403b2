"""simcluster.divisors: the degrees named as the fix of a 'must divide' error."""

import pytest

from simcluster.context import build_context
from simcluster.divisors import divisors, one_of
from simcluster.errors import UserError
from simcluster.scenario import scenario_from_dict
from tests.conftest import make_scenario


def test_divisors_are_every_divisor_ascending_filtered_by_fits():
    # 36 = 2^2 * 3^2 has (2+1)(2+1) = 9 divisors; 6 = sqrt(36) is listed once
    assert divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]
    assert divisors(1) == [1]
    assert divisors(32, lambda d: 24 % d == 0) == [1, 2, 4, 8]
    # 10^9 = 2^9 * 5^9: 10 x 10 divisors, found without a billion divisions
    assert len(divisors(10**9)) == 100


def test_one_of_reads_as_a_list_with_or():
    assert one_of([1, 2, 4, 8]) == "1, 2, 4 or 8"
    assert one_of([1, 2]) == "1 or 2"
    assert one_of([1]) == "1"


def test_the_other_must_divide_errors_name_the_values_that_work(cli):
    """zero_shard over dp*cp, pipeline_flushes over the microbatches, and collective --per-node
    over --gpus name their divisors as the fix."""
    # 8 GPUs, dp 8: a shard of 3 does not split 8 replicas evenly
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(make_scenario(parallel={"tp": 1, "pp": 1, "zero": 3, "zero_shard": 3})))
    assert err.value.field == "parallel.zero_shard" and "use 1, 2, 4 or 8" in str(err.value)
    # pp 2 on 8 GPUs: dp 4, global batch 24 -> 6 microbatches per data-parallel rank
    flushes = make_scenario(parallel={"pp": 2}, training={"seq_len": 2048, "micro_batch": 1, "global_batch": 24,
                                                          "pipeline_flushes": 4})  # fmt: skip
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(flushes))
    assert err.value.field == "training.pipeline_flushes" and "use 1, 2, 3 or 6" in str(err.value)
    res = cli("collective", "all_reduce", "1MiB", "--gpus", "12", "--per-node", "5")
    assert res.code == 2 and "use 1, 2, 3, 4 or 6" in res.err  # divisors of 12 within 8 GPUs a node
