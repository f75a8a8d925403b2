"""`simcluster import megatron` of ``--pipeline-model-parallel-layout``, read as Megatron-Core's
``transformer/pipeline_parallel_layer_layout.py`` reads it: ``parse_str_to_list`` unrolls
``(...)*n`` then ``x*n`` and splits stages on ``|``; the stage count over pp is the virtual
pipeline size (``training/arguments.py``); ``validate_layer_layout`` wants E first, L last, each
once, and ``--num-layers`` t's."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.importers import ImportOptions, import_config
from simcluster.importers.pipeline_layout import layout_split, parse_stages
from simcluster.scenario import scenario_from_dict

BASE = (
    "--num-layers 61 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
    "--micro-batch-size 1 --global-batch-size 256 --bf16 --vocab-size 32000 --pipeline-model-parallel-size 8 "
)


def _import(tmp_path: Path, flags: str) -> dict:
    args = tmp_path / "train.args"
    args.write_text(BASE + flags + "\n")
    return import_config("megatron", args, ImportOptions(cluster="dgx-h100", nodes=8)).scenario


def test_the_docstrings_example_unrolls_as_megatron_does():
    # parse_str_to_list's own example: "Ettt|(tt|)*29,m|L" -> [E t t t] + [t t] x 29 + [m] + [L]
    stages = parse_stages("Ettt|(tt|)*29,m|L")
    assert stages == ["Ettt", *["tt"] * 29, "m", "L"]
    assert parse_stages("Et*3|t*2|L") == ["Ettt", "tt", "L"]


def test_deepseek_v3_on_gb200_is_four_virtual_stages_a_rank(tmp_path):
    """Megatron-LM's DeepSeek-V3 GB200 guide: "Et|(tt|)*30L" on pp 8 is 32 stages, vpp 4: the
    embedding with one layer, 30 stages of two, the loss alone (61 layers)."""
    s = _import(tmp_path, "--pipeline-model-parallel-layout 'Et|(tt|)*30L'")
    assert s["parallel"]["vpp"] == 4 and s["parallel"]["schedule"] == "interleaved"
    assert s["parallel"]["layers_per_stage"] == [1, *[2] * 30, 0]
    ctx = build_context(scenario_from_dict(s))
    chunks = sorted((c for stage in ctx.chunks for c in stage), key=lambda c: c.first_layer)
    assert [c.layers for c in chunks if c.layers] == [1, *[2] * 30]


def test_one_stage_a_rank_is_the_plain_pipeline(tmp_path):
    s = _import(tmp_path, "--pipeline-model-parallel-layout 'Ettttttt|(tttttttt|)*6ttttttL'")
    assert "vpp" not in s["parallel"] and s["parallel"]["layers_per_stage"] == [7, *[8] * 6, 6]


@pytest.mark.parametrize(
    ("layout", "needle"),
    [
        ("Et|(tt|)*29L", "31 stages, which do not divide over pp 8"),
        ("Et|(tt|)*30tL", "places 62 transformer layers"),
        ("t|(tt|)*30EL", "must start with the embedding E and end with the loss L"),
        ("Et|(tt|)*30xL", "'x'"),
        ("Et|(tt|)*29m|ttL", "MTP module (m) before the last stage"),
    ],
)
def test_layouts_megatron_refuses_are_one_line_errors(layout, needle):
    with pytest.raises(UserError, match="pipeline-model-parallel-layout") as err:
        layout_split(layout, 8, 61)
    assert needle in str(err.value)


def test_mtp_modules_match_mtp_num_layers(tmp_path):
    s = _import(tmp_path, "--mtp-num-layers 1 --pipeline-model-parallel-layout 'Et|(tt|)*30mL'")
    assert s["model"]["mtp_layers"] == 1 and s["parallel"]["layers_per_stage"][-1] == 0
    with pytest.raises(UserError, match="--mtp-num-layers gives 0"):
        _import(tmp_path, "--pipeline-model-parallel-layout 'Et|(tt|)*30mL'")
    with pytest.raises(UserError, match="places 0 MTP modules"):
        _import(tmp_path, "--mtp-num-layers 1 --pipeline-model-parallel-layout 'Et|(tt|)*30L'")


def test_another_split_beside_the_layout_is_refused(tmp_path):
    with pytest.raises(UserError, match="one way to split the pipeline") as err:
        _import(tmp_path, "--decoder-first-pipeline-num-layers 1 --pipeline-model-parallel-layout 'Et|(tt|)*30L'")
    assert err.value.field == "--pipeline-model-parallel-layout"
