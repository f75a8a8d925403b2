"""Layer partitioning over virtual pipeline stages."""

import pytest

from simcluster.errors import UserError
from simcluster.schedules.partition import layers_per_stage


def test_llama3_405b_126_layers_on_16_stages():
    # Llama 3 paper (Dubey et al. 2024, §3.3.2): first and last stage hold one layer fewer.
    assert layers_per_stage(126, 16) == [7] + [8] * 14 + [7]


def test_even_split_and_interleaved_virtual_stages():
    assert layers_per_stage(32, 4) == [8, 8, 8, 8]
    assert layers_per_stage(80, 4, 2) == [10] * 8
    # 30 layers, 4 x 2 virtual stages: (30 + 2) / 8 = 4, ends get 3.
    assert layers_per_stage(30, 4, 2) == [3, 4, 4, 4, 4, 4, 4, 3]


def test_remainder_goes_to_middle_stages():
    counts = layers_per_stage(61, 4)
    assert sum(counts) == 61 and counts[0] == counts[-1] == 15 and max(counts) == 16
    assert layers_per_stage(11, 4) == [3, 3, 3, 2]  # only the LM-head stage is lighter


def test_explicit_is_used_verbatim():
    assert layers_per_stage(10, 2, 1, [4, 6]) == [4, 6]
    # an end stage may hold only the embedding or only the head (Megatron-Core's "E|...|L"
    # layouts; Megatron-Bridge's DeepSeek-V3 "Et|(tt|)*30mL")
    assert layers_per_stage(10, 3, 1, [0, 5, 5]) == [0, 5, 5]
    assert layers_per_stage(10, 3, 1, [5, 5, 0]) == [5, 5, 0]


@pytest.mark.parametrize(
    ("explicit", "needle"),
    [([5, 6, 0], "sums to 11"), ([10, 0, 0], "positive except the first and last"), ([3, 3, 4, 0], "needs 3")],
)
def test_bad_explicit_names_the_field(explicit, needle):
    with pytest.raises(UserError) as err:
        layers_per_stage(10, 3, 1, explicit)
    assert err.value.field == "parallel.layers_per_stage" and needle in str(err.value)


def test_too_few_layers():
    with pytest.raises(UserError, match="lower pp"):
        layers_per_stage(3, 4)
