"""Layer partitioning over virtual pipeline stages."""

import pytest

from simcluster.errors import UserError
from simcluster.schedules.partition import (
    check_interleaved_ranks,
    check_megatron_pipeline_split,
    check_megatron_virtual_split,
    cost_balanced,
    layers_per_stage,
)


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


def _refusal(check, *args) -> UserError | None:
    """The UserError ``check(*args)`` raises, None when it accepts them."""
    try:
        check(*args)
    except UserError as err:
        return err
    return None


@pytest.mark.parametrize(
    "layers, pp, vpp, framework, fix",
    [
        # 32 (33, 34) layers over 24 virtual stages; 32 = 16 x 2 = 32 x 1
        (32, 8, 3, "megatron-core", "use vpp 2 or 4, or list the 24 stages' layers"),
        (32, 8, 2, "megatron-core", None),  # 32 / 16
        (32, 8, 4, "nemo", None),  # 32 / 32
        (126, 8, 8, "megatron-bridge", None),  # Llama 3.1 405B: 126 + embedding + loss = 128 / 64
        (47, 8, 3, None, None),  # 47 + loss = 48 / 24
        # 2021's Megatron-LM had no embedding/loss terms: 47 is prime, no vpp divides it
        (47, 8, 3, "megatron-lm-2021", "requires; or list the 24 stages' layers"),
        (40, 8, 3, "megatron-lm-2021", "use vpp 5, or list"),  # 40 = 8 x 5
        (32, 8, 3, "torchtitan", None),  # torchtitan splits the remainder itself
        (32, 8, 1, "megatron-core", None),  # no virtual stages: not the interleaved split
    ],
)
def test_megatron_interleaved_split_needs_layers_divisible_by_pp_times_vpp(layers, pp, vpp, framework, fix):
    """Megatron-Core's get_num_layers_to_build (transformer_block.py) asserts num_layers (+1 for
    each of --account-for-embedding/loss-in-pipeline-split) % pp == 0 and then the rank's layers
    % vpp == 0: layers + k divisible by pp*vpp for some k in 0..2 (k = 0 for Megatron-LM 2021)."""
    err = _refusal(check_megatron_virtual_split, layers, pp, vpp, framework)
    if fix is None:
        assert err is None, err
        return
    assert err is not None and err.field == "parallel.vpp"
    assert f"{pp}*{vpp} = {pp * vpp} virtual stages" in str(err)
    assert fix in str(err)


@pytest.mark.parametrize(
    "layers, pp, framework, room, fix",
    [
        (32, 4, "megatron-core", 0, None),  # 32 / 4
        (32, 3, "megatron-core", 0, None),  # 32 + embedding = 33 / 3 (--account-for-embedding-...)
        (32, 5, "megatron-core", 40, "use pp 2 or 4 or 8,"),  # 32, 33, 34: none divides by 5
        (32, 5, "nemo", 0, "over pp=5 stages (also with the embedding and loss counted as layers)"),
        (126, 16, "megatron-bridge", 0, None),  # Llama 3.1 405B: 126 + 2 = 128 / 16
        (32, 3, "megatron-lm-2021", 24, "use pp 2 or 4 or 8,"),  # 2021: no embedding/loss terms
        (96, 3, "megatron-lm-2021", 0, None),
        (32, 5, None, 0, None),  # no framework named: simcluster's split, not refused
        (32, 5, "torchtitan", 0, None),  # torch.distributed.pipelining splits the remainder itself
        (32, 5, "deepspeed", 0, None),  # PipelineModule's partition_method splits any count
    ],
)
def test_megatron_pipeline_needs_layers_divisible_by_pp(layers, pp, framework, room, fix):
    """Without virtual stages Megatron builds num_layers / pp layers a stage and asserts they
    divide: Megatron-Core transformer_block.get_num_layers_to_build ("num_layers should be
    divisible by pipeline_model_parallel_size", num_layers + 1 for each of
    --account-for-embedding/loss-in-pipeline-split), Megatron-LM 2021 model/transformer.py
    ParallelTransformer.__init__ ("num_layers must be divisible by
    pipeline_model_parallel_size"). simcluster spread the remainder over middle stages."""
    err = _refusal(check_megatron_pipeline_split, layers, pp, framework, room)
    if fix is None:
        assert err is None, err
        return
    assert err is not None and err.field == "parallel.pp"
    assert fix in str(err) and "parallel.layers_per_stage" in str(err)


def test_a_megatron_scenario_with_an_uneven_pipeline_is_refused_unless_it_lists_the_split(cli):
    """The check runs on a scenario: exit 2 with one line naming parallel.pp; an explicit
    parallel.layers_per_stage (Megatron's --decoder-first/last-pipeline-num-layers) runs."""
    base = ["llama3-8b-8xh100", "--set", "framework=megatron-lm-2021", "--set", "cluster.gpus=24",
            "--set", "parallel.pp=3", "--set", "parallel.zero=1"]  # fmt: skip
    res = cli("memory", *base)
    assert res.code == 2, (res.code, res.out, res.err)
    assert [ln for ln in res.err.splitlines() if ln.strip()] == [
        "error: parallel.pp: megatron-lm-2021 needs the model's 32 layers to divide over pp=3 stages; "
        "use pp 2 or 4 or 8, or list the 3 stages' layers in parallel.layers_per_stage (Megatron's "
        "--decoder-first/last-pipeline-num-layers)"
    ]
    assert cli("memory", *base, "--set", "parallel.layers_per_stage=[10,11,11]").code == 0
    assert cli("memory", *base, "--set", "framework=megatron-core").code == 0  # 33 / 3


@pytest.mark.parametrize(
    "pp, vpp, framework, pp_comm, fix",
    [
        # one rank: nothing to interleave, whatever the framework (Megatron-Core parallel_state.py
        # initialize_model_parallel, commit 00caa53: "pipeline-model-parallel size should be
        # greater than 1 with interleaved schedule")
        (1, 2, "megatron-core", True, "set parallel.vpp: 1, or pp >= 2"),
        (1, 2, None, True, "pp=1 is a single rank"),
        (1, 4, "torchtitan", True, "pp=1 is a single rank"),
        # Megatron-LM 2021 megatron/arguments.py validate_args: assert pipeline_model_parallel_size
        # > 2 with --num-layers-per-virtual-pipeline-stage
        (2, 2, "megatron-lm-2021", False, "megatron-lm-2021 needs pp > 2"),
        (3, 2, "megatron-lm-2021", False, None),
        # megatron/training/arguments.py validate_args (commit 000c4ac): pp > 1 with
        # overlap_p2p_comm, pp > 2 without (--no-overlap-p2p-communication)
        (2, 2, "megatron-core", True, None),
        (2, 12, "megatron-bridge", True, None),  # scenarios/qwen3-30b-a3b-16xh100.yaml
        (2, 2, "nemo", False, "set overlap.pp_comm: true, parallel.vpp: 1, or pp >= 3"),
        (2, 2, "megatron-core", False, "unless pipeline sends and receives overlap"),
        (3, 2, "megatron-core", False, None),
        # the Zero Bubble fork's megatron/training/arguments.py validate_args: the same two
        # asserts for --num-layers-per-virtual-pipeline-stage (its preset: no p2p overlap)
        (2, 2, "zero-bubble", False, "zero-bubble needs pp > 2 with an interleaved schedule unless"),
        (2, 2, "zero-bubble", True, None),
        (3, 2, "zero-bubble", False, None),
        (2, 2, "torchtitan", False, None),  # not Megatron's rule
        (2, 2, None, False, None),  # no framework named: held to pp > 1 only
        (1, 1, "megatron-lm-2021", False, None),  # no virtual stages
    ],
)
def test_interleaving_needs_enough_pipeline_ranks(pp, vpp, framework, pp_comm, fix):
    err = _refusal(check_interleaved_ranks, pp, vpp, framework, pp_comm)
    if fix is None:
        assert err is None, err
        return
    assert err is not None and err.field == "parallel.vpp"
    assert fix in str(err) and f"pp={pp}" in str(err)


def test_an_interleaved_scenario_on_one_pipeline_rank_is_refused_in_one_line(cli):
    """On a scenario: exit 2, one line naming parallel.vpp and the fix."""
    base = ["llama3-8b-8xh100", "--set", "parallel.pp=1", "--set", "parallel.vpp=2", "--set", "parallel.zero=1",
            "--set", "parallel.schedule=interleaved"]  # fmt: skip
    res = cli("memory", *base)
    assert res.code == 2, (res.code, res.out, res.err)
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: parallel.vpp: vpp=2 interleaves") and "set parallel.vpp: 1" in lines[0]
    two = ["--set", "parallel.pp=2", "--set", "framework=megatron-lm-2021"]
    res = cli("memory", *base, *two)
    assert res.code == 2 and "megatron-lm-2021 needs pp > 2" in res.err, (res.code, res.err)
    assert cli("memory", *base, "--set", "parallel.pp=2").code == 0


def test_zero_bubble_preset_refuses_interleaving_on_two_ranks_but_not_zbv():
    """framework zero-bubble sets overlap.pp_comm false (examples/pretrain_zero_bubble.sh's
    --no-overlap-p2p-communication), so its validate_args refuses interleaved stages on pp = 2
    (megatron/training/arguments.py); ZB-V's two chunks come from zbpp_utils.validate_arguments
    after that check, pp > 1 only."""
    from simcluster.context import build_context
    from simcluster.scenario import scenario_from_dict
    from tests.conftest import make_scenario

    def ctx(**parallel):
        raw = make_scenario(framework="zero-bubble", parallel={"pp": 2, **parallel}, training={"global_batch": 8})
        return build_context(scenario_from_dict(raw))

    with pytest.raises(UserError, match="zero-bubble needs pp > 2 with an interleaved schedule") as err:
        ctx(vpp=2, schedule="interleaved")
    assert err.value.field == "parallel.vpp"
    assert ctx(schedule="zbv").layout.pp == 2
