"""The global batch stated in tokens or as gradient accumulation steps (simcluster/global_batch.py)."""

import pytest

from simcluster.errors import UserError
from simcluster.scenario import scenario_from_dict


def _scenario(**training):
    return scenario_from_dict(
        {"model": "llama3-8b", "cluster": {"hardware": "dgx-h100", "gpus": 8},
         "training": {"seq_len": 8192, "micro_batch": 1, **training}}
    )  # fmt: skip


@pytest.mark.parametrize(
    "written, sequences",
    [
        # Llama 3 paper (arXiv 2407.21783) Sec. 3.4.1: 16M tokens per batch at 8K tokens = 2,048 sequences
        ("16M", 2048),
        (16 * 2**20, 2048),
        ("4Mi", 512),
        ("512K tokens", 64),
    ],
)
def test_a_batch_in_tokens_is_that_many_sequences(written, sequences):
    assert _scenario(global_batch_tokens=written).training.global_batch == sequences


def test_other_names_and_an_agreeing_global_batch_are_read():
    assert _scenario(tokens_per_batch="1M", global_batch=128).training.global_batch == 128


@pytest.mark.parametrize(
    "training, needle",
    [
        ({"global_batch_tokens": 4_000_000}, "not a whole number of 8192-token sequences"),
        ({"global_batch_tokens": "1M", "global_batch": 64}, "give one of them"),
        ({"global_batch_tokens": "lots"}, "must be a token count"),
    ],
)
def test_a_batch_in_tokens_that_does_not_resolve_is_one_error(training, needle):
    with pytest.raises(UserError) as err:
        _scenario(**training)
    assert err.value.field == "training.global_batch_tokens" and needle in str(err.value)


def test_an_override_in_tokens_or_nodes_replaces_the_size_the_scenario_states():
    # llama3-8b-8xh100 states global_batch 64 and gpus 8: an override given the other way
    # replaces it rather than contradicting it
    from simcluster.scenario import load_scenario

    sc = load_scenario("llama3-8b-8xh100", [("training.global_batch_tokens", "1M"), ("cluster.nodes", 2)])
    assert (sc.training.global_batch, sc.cluster.gpus) == (2**20 // sc.training.seq_len, 16)
    back = load_scenario("llama3-8b-8xh100", [("training.tokens_per_batch", "1M"), ("training.global_batch", 64)])
    assert back.training.global_batch == 64


def test_gradient_accumulation_steps_set_or_check_the_global_batch():
    # a NeMo performance table's row: Llama 3 8B on 8 GPUs, MBS 1, GA 16 -> GBS 128
    raw = {"model": "llama3-8b", "cluster": {"hardware": "dgx-h100", "gpus": 8},
           "training": {"seq_len": 8192, "micro_batch": 1, "ga": 16}}  # fmt: skip
    assert scenario_from_dict(raw).training.global_batch == 16 * 1 * 8
    from simcluster.context import build_context

    wrong = {**raw, "training": {**raw["training"], "global_batch": 64}}
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(wrong))
    assert err.value.field == "training.grad_accum" and "64 / (dp*micro_batch = 8) = 8" in str(err.value)
    from simcluster.scenario import load_scenario

    # --set of the GA column replaces the scenario's global batch (llama3-8b-8xh100: dp 8, MBS 1)
    assert load_scenario("llama3-8b-8xh100", [("training.grad_accum", 4)]).training.global_batch == 32


def test_microbatches_per_pipeline_are_the_accumulation_steps():
    # the Zero Bubble tables state "microbatches" (per pipeline per step) beside the micro-batch size
    raw = {"model": "llama3-8b", "cluster": {"hardware": "dgx-h100", "gpus": 8}, "parallel": {"pp": 8},
           "training": {"seq_len": 4096, "micro_batch": 3, "microbatches": 24}}  # fmt: skip
    assert scenario_from_dict(raw).training.global_batch == 24 * 3 * 1


def test_a_tables_gbs_and_ga_without_mbs_give_the_micro_batch():
    # NeMo's performance summary, Mixtral 8x7B on 64 GPUs: GBS 256, TP 1, PP 1, EP 8, GA 2, whose
    # MBS column says 2 = 256 / (GA 2 x dp 64)
    raw = {"model": "mixtral-8x7b", "cluster": {"hardware": "dgx-b200", "gpus": 64},
           "parallel": {"ep": 8}, "training": {"seq_len": 4096, "global_batch": 256, "ga": 2}}  # fmt: skip
    assert scenario_from_dict(raw).training.micro_batch == 2
    # a GA that leaves no whole micro-batch is the layout check's to refuse, not rounded here
    odd = {**raw, "training": {**raw["training"], "ga": 3}}
    assert scenario_from_dict(odd).training.micro_batch == 1
