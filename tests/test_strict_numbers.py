"""A YAML boolean given for a number is an error, not 1 or 0 (simcluster/strict_numbers.py)."""

from __future__ import annotations

import json

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from simcluster.attention_kernels import AttentionCurve
from simcluster.data import data_dir
from simcluster.hardware import HardwareProfile
from simcluster.scenario.document import _SECTIONS, Scenario, Straggler
from simcluster.strict_numbers import BOOLEAN_NUMBER, NumbersNotBooleans, boolean_in_number
from tests.conftest import make_scenario
from tests.test_scenario_errors import assert_one_line_error, write


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """``root`` and every model its fields hold, at any depth."""
    seen: list[type[BaseModel]] = []
    todo = [root]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.append(model)
        for field in model.model_fields.values():
            todo += [t for t in _types_in(field.annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
    return seen


def _types_in(annotation):
    from typing import get_args

    yield annotation
    for arg in get_args(annotation):
        yield from _types_in(arg)


def _number_fields(model: type[BaseModel]) -> list[str]:
    return [
        name for name, field in model.model_fields.items()
        if boolean_in_number(field.annotation, True) is not None
    ]  # fmt: skip


INPUT_MODELS = sorted(
    {*_models(Scenario), *_models(HardwareProfile), *_SECTIONS.values(), Straggler, AttentionCurve},
    key=lambda m: m.__name__,
)


@pytest.mark.parametrize("model", INPUT_MODELS, ids=lambda m: m.__name__)
def test_every_number_field_of_every_input_model_refuses_a_boolean(model):
    assert issubclass(model, NumbersNotBooleans)
    for name in _number_fields(model):
        for boolean in (True, False):
            with pytest.raises(ValidationError) as err:
                model.model_validate({name: boolean})
            types = {e["loc"]: e["type"] for e in err.value.errors()}
            # a field with a validator of its own (dp.bucket_mb) may say it its way
            assert (name,) in types, (model.__name__, name, types)
            assert types[(name,)] in (BOOLEAN_NUMBER, "value_error"), (model.__name__, name, types)


def test_the_scenario_has_integer_and_float_fields_to_check():
    from simcluster.scenario import ParallelSection, TrainingSection

    assert {"tp", "pp", "dp", "zero"} <= set(_number_fields(ParallelSection))
    assert {"seq_len", "micro_batch", "global_batch", "memory_overhead_gib"} <= set(_number_fields(TrainingSection))


@pytest.mark.parametrize(
    "section, key, value, expected",
    [("parallel", "tp", True, "an integer"), ("parallel", "pp", True, "an integer"),
     ("training", "micro_batch", True, "an integer"), ("training", "global_batch", "yes", "an integer"),
     ("cluster", "gpus", "on", "an integer"), ("training", "memory_overhead_gib", True, "a number")],
)  # fmt: skip
def test_a_boolean_for_a_number_is_one_line(cli, tmp_path, section, key, value, expected):
    data = make_scenario()
    data[section][key] = "@@"
    text = yaml.safe_dump(data).replace("'@@'", str(value))  # as a user writes it: yes, on, true
    assert_one_line_error(
        cli("memory", write(tmp_path, text)), f"error: {section}.{key}: expected {expected}, got true"
    )


@pytest.mark.parametrize("setting", ["cluster.gpus=true", "parallel.tp=yes", "training.micro_batch=false"])
def test_a_boolean_set_for_a_number_is_one_line(cli, setting):
    key, _, _ = setting.partition("=")
    assert_one_line_error(cli("memory", "llama3-8b-8xh100", "--set", setting), f"{key}: expected an integer, got")


def test_a_boolean_inside_a_list_of_numbers_says_where(cli):
    res = cli("memory", "llama3-8b-8xh100", "--set", "parallel.pp=2", "--set", "parallel.layers_per_stage=[16, true]")
    assert_one_line_error(res, "parallel.layers_per_stage: expected an integer at [1], got true")


def test_a_boolean_in_a_hardware_profile(cli, tmp_path):
    text = (data_dir("hardware") / "dgx-h100.yaml").read_text()
    assert "sm_count: 132\n" in text
    profile = tmp_path / "hw.yaml"
    profile.write_text(text.replace("sm_count: 132\n", "sm_count: yes\n"))
    res = cli("memory", "llama3-8b-8xh100", "--hardware", str(profile))
    assert_one_line_error(res, "field 'gpu.sm_count': expected an integer, got true")
    res = cli("memory", "llama3-8b-8xh100", "--set", "cluster.profile.gpu.peak_tflops.bf16=true")
    assert_one_line_error(res, "cluster.profile.gpu.peak_tflops: expected a number at bf16, got true")


def test_what_is_deliberately_accepted_stays(cli, tmp_path):
    """Quoted counts, token suffixes and the switches that mean a number are still read."""
    data = make_scenario(cluster={"gpus": "8"}, parallel={"use_distributed_optimizer": True})
    data["training"].pop("global_batch")
    data["training"]["global_batch_tokens"] = "16K"
    res = cli("memory", write(tmp_path, data), "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["optimizer_bytes"] < 12 * doc["params_total"]  # ZeRO-1: the state is sharded


@pytest.mark.parametrize(
    "section, key, value, read",
    [("training", "optimizer_offload", True, 1.0), ("training", "optimizer_offload", False, 0.0),
     ("parallel", "zero", True, 1), ("training", "recompute", True, "full")],
)  # fmt: skip
def test_the_settings_frameworks_make_switches_take_a_boolean(section, key, value, read):
    """DeepSpeed's offload_optimizer, Megatron's use_distributed_optimizer, Hugging Face's
    gradient_checkpointing: true is the whole of it (spellings.SWITCHES)."""
    from simcluster.scenario import scenario_from_dict

    data = make_scenario(**{section: {key: value}})
    assert getattr(getattr(scenario_from_dict(data), section), key) == read
