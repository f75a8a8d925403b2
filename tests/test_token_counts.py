"""Token counts with binary suffixes: ``training.seq_len: 8K`` as ``global_batch_tokens: 1M``
(simcluster/token_counts.py)."""

from __future__ import annotations

import pytest
import yaml

from simcluster.errors import UserError
from simcluster.scenario import scenario_from_dict
from simcluster.token_counts import token_count
from tests.conftest import make_scenario


def _scenario(**training):
    return scenario_from_dict(
        {"model": "llama3-8b", "cluster": {"hardware": "dgx-h100", "gpus": 8},
         "training": {"micro_batch": 1, "global_batch": 8, **training}}
    )  # fmt: skip


@pytest.mark.parametrize(
    "written, tokens",
    # Llama 3.1's 128K context is 131072 tokens, a "4K" sequence 4096: K is 2^10, as for batches
    [("8K", 8192), ("128K", 131072), ("8k", 8192), ("4Ki", 4096), ("2K tokens", 2048), ("8192", 8192), (4096, 4096)],
)  # fmt: skip
def test_a_sequence_length_may_be_written_with_a_suffix(written, tokens):
    assert _scenario(seq_len=written).training.seq_len == tokens


def test_a_suffixed_sequence_length_divides_a_suffixed_batch():
    assert _scenario(seq_len="8K", global_batch_tokens="1M", global_batch=128).training.global_batch == 128
    assert _scenario(seq_len="8K", global_batch_tokens="1M", global_batch=None).training.global_batch == 128


@pytest.mark.parametrize("written", ["8X", "0K", "8.5K", "-8K", "K"])
def test_a_sequence_length_that_is_no_count_is_one_error(written):
    with pytest.raises(UserError) as err:
        _scenario(seq_len=written)
    assert err.value.field == "training.seq_len" and "such as 8192 or 8K" in str(err.value)


def test_a_case_measured_in_samples_reads_a_suffixed_sequence_length(tmp_path):
    from simcluster.validate import load_cases_file

    scenario = make_scenario(training={"seq_len": "2K"})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump([{"name": "s", "scenario": scenario, "measured": {"samples_per_s": 3.0}}]))
    (case,) = load_cases_file(path)
    assert not case.problem and (case.metric, case.measured) == ("tokens_per_s", 3.0 * 2048)


def test_only_whole_positive_counts_are_token_counts():
    assert [token_count(v) for v in (True, 0, -1, 1.5, "1.5K", None)] == [None] * 6
