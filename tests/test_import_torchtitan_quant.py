"""torchtitan's low-precision converters in both spellings (simcluster/importers/torchtitan_quant.py).

Names and tables as torchtitan writes them: ``[model] converters`` ``float8`` / ``mx`` with
``[float8]`` / ``[mx]``, renamed ``quantize.linear.float8`` / ``quantize.linear.mx`` with
``[quantize.linear.*]`` tables (its config rename map ``"float8": "quantize.linear.float8"``,
``"mx": "quantize.linear.mx"``), and ``quantize.grouped_mm.*`` for a MoE's experts; torchao's
MXLinear recipes ``mxfp8_cublas`` (torchtitan's default) and ``mxfp8_cublas_rceil``.
"""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.importers import ImportOptions, import_config
from simcluster.scenario import scenario_from_dict

HEAD = '[model]\nname = "llama3"\nflavor = "8B"\n'
REST = "[parallelism]\ndata_parallel_shard_degree = -1\n[training]\nlocal_batch_size = 1\nseq_len = 4096\n"


def _import(tmp_path, text: str, cluster: str = "dgx-b200"):
    toml = tmp_path / "job.toml"
    toml.write_text(HEAD + text + REST)
    return import_config("torchtitan", toml, ImportOptions(cluster=cluster, nodes=1))


@pytest.mark.parametrize(
    ("text", "recipe", "gather"),
    [
        ('converters = ["float8"]\n[float8]\nenable_fsdp_float8_all_gather = true\n', "current", True),
        (
            'converters = ["quantize.linear.float8"]\n[quantize.linear.float8]\nrecipe_name = "tensorwise"\n'
            'enable_fsdp_float8_all_gather = true\nfilter_fqns = ["output"]\n',
            "current", True,
        ),
        ('converters = ["mx"]\n[mx]\nrecipe_name = "mxfp8_cublas"\n', "block", None),
        ('converters = ["quantize.linear.mx"]\n', "block", None),
        (
            'converters = ["quantize.linear.mx"]\n[quantize.linear.mx]\nrecipe_name = "mxfp8_cublas_rceil"\n',
            "block", None,
        ),
        ('converters = "quantize.linear.mx,quantize.grouped_mm.mx"\n[quantize.grouped_mm.mx]\nfqns = ["experts"]\n',
         "block", None),
    ],
)  # fmt: skip
def test_each_spelling_trains_the_linears_in_its_precision(tmp_path, text, recipe, gather):
    """float8 tensorwise is FP8 with current scaling (its FSDP all-gather in FP8 when asked);
    MXFP8 is FP8 with per-block scales; every key read is left off the not-imported list."""
    out = _import(tmp_path, text)
    training = out.scenario["training"]
    assert (training["precision"], training["fp8_recipe"]) == ("fp8", recipe)
    assert training.get("fp8_param_gather") is gather
    assert not [k for k in out.skipped if "float8" in k or "mx" in k]
    build_context(scenario_from_dict(out.scenario))


def test_a_table_whose_converter_is_off_is_listed_as_off(tmp_path):
    out = _import(tmp_path, '[quantize.linear.mx]\nrecipe_name = "mxfp8_cublas"\n')
    assert out.scenario["training"]["precision"] == "bf16"
    assert "[quantize.linear.mx] (quantize.linear.mx is off: model.converters does not list it)" in out.skipped


def test_an_unknown_converter_is_listed_not_dropped(tmp_path):
    out = _import(tmp_path, 'converters = ["quantize.linear.nvfp4"]\n')
    assert "model.converters quantize.linear.nvfp4 (no scenario field for it)" in out.skipped
    assert out.scenario["training"]["precision"] == "bf16"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('converters = ["float8", "mx"]\n', "model.converters: lists both float8 and mx"),
        ('converters = ["quantize.grouped_mm.mx"]\n', "model.converters: quantizes the experts' grouped GEMMs"),
        (
            'converters = ["mx"]\n[mx]\nrecipe_name = "mxfp8_emulated"\n',
            "mx.recipe_name: 'mxfp8_emulated' cannot be imported; known: mxfp8_cublas, mxfp8_cublas_rceil",
        ),
        (
            'converters = ["quantize.linear.float8"]\n[quantize.linear.float8]\nrecipe_name = "rowwise"\n',
            "quantize.linear.float8.recipe_name: 'rowwise' cannot be imported; known: tensorwise",
        ),
    ],
)
def test_what_cannot_be_imported_is_refused_in_one_line(tmp_path, text, message):
    with pytest.raises(UserError) as err:
        _import(tmp_path, text)
    assert err.value.one_line().startswith(message)
