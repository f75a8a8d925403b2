"""A performance table's rows copied as the table writes them read as the schema's spelling.

The fixture is four rows of NeMo 25.04's DGX-GB200 FP8 summary with the table's model names
("GPT3-175B", "LLAMA3-405B") and column headings ("#-GPUs", "TP", "VP", "FSDP", "GBS", "GA",
"Sequence Length", "Tokens / sec / GPU"); each must give the scenario and the measured figure
written in simcluster's own keys.
"""

from pathlib import Path

import pytest

from simcluster.context import build_context
from simcluster.scenario import scenario_from_dict
from simcluster.validate import load_cases_file

FIXTURE = Path(__file__).parent / "fixtures" / "nemo-25.04-gb200-as-written.yaml"

#: the same rows in the schema's keys: (model, gpus, parallel, training, tokens/s/GPU)
SCHEMA = {
    "GPT3-175B": ("gpt3-175b", 128, {"tp": 4, "pp": 4, "cp": 1, "vpp": 12, "schedule": "interleaved"},
                  {"global_batch": 256, "micro_batch": 2, "seq_len": 2048}, 1804),
    "LLAMA3-70B": ("llama3-70b", 64, {"tp": 1, "pp": 1, "cp": 1, "zero": 3},
                   {"global_batch": 128, "micro_batch": 1, "seq_len": 8192}, 4035),
    "LLAMA3-405B": ("llama3.1-405b", 128, {"tp": 4, "pp": 8, "cp": 2, "vpp": 8, "schedule": "interleaved"},
                    {"global_batch": 64, "micro_batch": 1, "seq_len": 8192}, 665),
    "Mixtral-8x7B": ("mixtral-8x7b", 64, {"tp": 1, "pp": 1, "cp": 1, "ep": 8},
                     {"global_batch": 256, "micro_batch": 2, "seq_len": 4096}, 19275),
}  # fmt: skip


@pytest.mark.parametrize("case", load_cases_file(FIXTURE), ids=lambda c: c.name)
def test_a_row_as_the_table_writes_it_is_the_schemas_scenario(case):
    model, gpus, parallel, training, per_gpu = SCHEMA[case.name]
    schema = scenario_from_dict(
        {"model": model, "framework": "nemo", "cluster": {"hardware": "gb200-nvl72", "gpus": gpus},
         "parallel": parallel, "training": {**training, "precision": "fp8", "fp8_recipe": "current"}}  # fmt: skip
    )
    table = scenario_from_dict(case.scenario)
    # names resolve when the model and profile are built; GA is kept to be checked by the layout
    as_built = {"name": "x", "model": schema.model, "cluster": table.cluster.model_copy(update={"hardware": "gb200-nvl72"}),
                "training": table.training.model_copy(update={"grad_accum": None})}  # fmt: skip
    assert table.model_copy(update=as_built) == schema.model_copy(update={"name": "x"})
    built, expected = build_context(table), build_context(schema)
    assert (built.model, built.profile.name, built.layout) == (expected.model, expected.profile.name, expected.layout)
    assert case.metric == "tokens_per_s" and case.measured == per_gpu * gpus


# Narayanan et al. 2021 Table 1 rows with the field names of a transcription of the table
# (params_B, gbs, mbs, vpp_layers_per_stage, "fp16 mixed", "full (--activations-checkpoint-method
# uniform)"): the same model and layout as the shipped cases, which spell the keys the schema's way
NARAYANAN_ROWS = {
    "narayanan2021/76.1B-1024gpu": {"params_B": 76.1, "heads": 80, "hidden": 10240, "layers": 60, "tp": 8,
                                    "pp": 4, "gpus": 1024, "gbs": 1792, "mbs": 2, "vpp_layers_per_stage": 5},
    "narayanan2021/145.6B-1536gpu": {"params_B": 145.6, "heads": 96, "hidden": 12288, "layers": 80, "tp": 8,
                                     "pp": 8, "gpus": 1536, "gbs": 2304, "mbs": 2, "vpp_layers_per_stage": 5},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NARAYANAN_ROWS))
def test_a_transcribed_narayanan_row_is_the_shipped_cases_model_and_layout(name):
    from simcluster.validate import load_cases

    row = NARAYANAN_ROWS[name]
    shipped = next(c for c in load_cases() if c.name == name)
    model = {**shipped.scenario["model"], "params_B": row["params_B"]}
    for key in ("heads", "hidden", "layers"):
        assert model[key] == row[key]
    written = {
        "model": model,
        "cluster": {"GPU": "A100-SXM 80GB", "gpus": row["gpus"]},
        "parallel": {"tp": row["tp"], "pp": row["pp"], "vpp_layers_per_stage": row["vpp_layers_per_stage"]},
        "training": {"seq_len": 2048, "gbs": row["gbs"], "mbs": row["mbs"], "precision": "fp16 mixed",
                     "recompute": "full (--activations-checkpoint-method uniform)"},
    }  # fmt: skip
    built, expected = build_context(scenario_from_dict(written)), build_context(scenario_from_dict(shipped.scenario))
    assert (built.model, built.layout, built.profile.name) == (expected.model, expected.layout, expected.profile.name)
    assert built.scenario.parallel.schedule == expected.scenario.parallel.schedule == "interleaved"
