"""Keys written one level off (simcluster/scenario/misplaced.py): read in the one section they
belong to, refused where two sections know them or where the place they belong says otherwise."""

import subprocess
import sys

import pytest

from simcluster.errors import UserError
from simcluster.scenario import scenario_from_dict

CANONICAL = {
    "framework": "megatron-core",
    "model": {"layers": 24, "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 131072},
    "cluster": {"hardware": "dgx-h100", "gpus": 16},
    "parallel": {"tp": 2, "pp": 2, "dp": 4, "sequence_parallel": True},
    "training": {"global_batch": 64, "micro_batch": 2, "seq_len": 4096, "recompute": "full"},
}

# what a case written from a paper's table, section by section, tends to look like
ONE_LEVEL_OFF = {
    "tp": 2,  # at the top
    "dp": 4,  # at the top, where 'dp' is also the gradient-bucket section's name
    "model": {"layers": 24, "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 131072,
              "seq_len": 4096},  # training's, under model
    "cluster": {"hardware": "dgx-h100", "gpus": 16},
    "parallel": {"pp": 2, "micro_batch_size": 2, "sp": True},  # training's (by another name), under parallel
    "training": {"framework": "megatron-core", "global_batch": 64, "gradient_checkpointing": True},
}


def test_keys_one_level_off_read_where_they_belong():
    assert scenario_from_dict(ONE_LEVEL_OFF).model_dump() == scenario_from_dict(CANONICAL).model_dump()


def test_a_moved_key_that_contradicts_its_home_is_an_error_naming_both():
    data = {**CANONICAL, "tp": 4}
    with pytest.raises(UserError) as err:
        scenario_from_dict(data)
    assert err.value.field == "tp" and "parallel.tp" in str(err.value) and "keep one" in str(err.value)
    # the same value twice is one setting stated twice
    assert scenario_from_dict({**CANONICAL, "tp": 2}).parallel.tp == 2


def test_a_key_two_sections_know_stays_where_it_was_written():
    # training.optimizer_offload (a fraction) and overlap.optimizer_offload (a switch)
    data = {**CANONICAL, "parallel": {**CANONICAL["parallel"], "optimizer_offload": 1.0}}
    with pytest.raises(UserError) as err:
        scenario_from_dict(data)
    assert err.value.field == "parallel.optimizer_offload"


def test_an_unknown_section_does_not_lend_its_keys():
    from simcluster.scenario.loading import apply_overrides

    with pytest.raises(UserError) as err:
        scenario_from_dict(apply_overrides(CANONICAL, [("foo.tp", 2)]))
    assert err.value.field == "foo"


def test_set_writes_a_key_one_level_off_where_it_belongs():
    from simcluster.scenario import load_scenario

    base = load_scenario("llama3-8b-8xh100")
    moved = load_scenario("llama3-8b-8xh100", [("training.tp", 2), ("micro_batch", 2)])
    assert (moved.parallel.tp, moved.training.micro_batch) == (2, 2)
    assert (base.parallel.tp, base.training.micro_batch) != (2, 2)


def test_cli_reads_the_framework_under_training():
    def memory(*sets):
        args = [a for s in sets for a in ("--set", s)]
        return subprocess.run([sys.executable, "-m", "simcluster", "memory", "llama3-8b-8xh100", *args],
                              capture_output=True, text=True)

    # the shipped scenario's ZeRO-2 is one nanotron does not run: the framework was read
    refused = memory("training.framework=nanotron")
    assert refused.returncode == 2 and "framework nanotron" in refused.stderr
    assert memory("training.framework=nanotron", "parallel.zero=1").returncode == 0
