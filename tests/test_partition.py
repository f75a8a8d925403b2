"""Layer partitioning over virtual pipeline stages."""

import pytest

from simcluster.errors import UserError
from simcluster.schedules.partition import cost_balanced, layers_per_stage


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


def test_nanotron_cost_balanced_split_of_llama3_8b():
    """nanotron's build_model (models/base.py) walks its pipeline blocks with
    get_block_compute_costs (decoder layer 4*heads*d_head*h + 3*d_ff*h, LM head vocab*h). For
    Llama 3 8B on 8 stages it prints 5, 4, 4, 5, 4, 4, 4 and 2 decoder layers, the last rank also
    holding the norm, LM head and loss (TJ-Solergibert, "3D Parallelism" with nanotron,
    2024-06-10, tj-solergibert.github.io content/post/3d-parallelism/index.md)."""
    from simcluster.model import load_preset
    from simcluster.placement import nanotron_costs

    model = load_preset("llama3-8b")
    layer, head = nanotron_costs(model)
    assert (layer, head) == (4 * 32 * 128 * 4096 + 3 * 14336 * 4096, 128256 * 4096)
    assert cost_balanced(32, 8, layer, head) == [5, 4, 4, 5, 4, 4, 4, 2]


def test_nanotron_split_with_an_exact_threshold():
    # 1.34B of the Ultra-Scale Playbook: layer cost 2**26, head 4 * 2**26, total 20 * 2**26. The
    # tenth layer lands exactly on the threshold, which is not passed, so rank 0 takes eleven.
    assert cost_balanced(16, 2, 2**26, 4 * 2**26) == [11, 5]


def test_nanotron_split_that_empties_a_stage_is_refused():
    with pytest.raises(UserError) as err:
        cost_balanced(2, 4, 10, 1)
    assert err.value.field == "parallel.partition"


def test_framework_nanotron_moves_layers_off_the_head_stage():
    from simcluster.context import build_context
    from simcluster.scenario import scenario_from_dict

    data = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "parallel": {"pp": 8},
        "training": {"seq_len": 4096, "global_batch": 8},
    }
    counts = [c.layers for stage in build_context(scenario_from_dict(data)).chunks for c in stage]
    assert counts == [4] * 8
    nano = build_context(scenario_from_dict({**data, "framework": "nanotron"})).chunks
    assert [c.layers for stage in nano for c in stage] == [5, 4, 4, 5, 4, 4, 4, 2]
