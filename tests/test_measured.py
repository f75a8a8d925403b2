"""How a case's ``measured:`` figure is read (simcluster/measured.py)."""

import pytest

from simcluster.errors import UserError
from simcluster.measured import read_measured

SCENARIO = {"cluster": {"gpus": 64}, "training": {"seq_len": 2048}}


@pytest.mark.parametrize(
    ("measured", "metric", "value"),
    [
        ({"step_time_s": 2.5}, "step_time_s", 2.5),
        ({"step_time_ms": 2500}, "step_time_s", 2.5),
        ({"mfu": 0.47}, "mfu", 0.47),
        # MFU cannot exceed 1, so 47 is the README's "47% MFU"
        ({"mfu": 47}, "mfu", 0.47),
        ({"mfu_pct": 47}, "mfu", 0.47),
        ({"tflops_per_gpu": 465.9}, "model_tflops_per_gpu", 465.9),
        # per GPU x the scenario's 64 GPUs
        ({"tokens_per_s_per_gpu": 1000}, "tokens_per_s", 64000),
        # Zero Bubble's tables give samples (sequences) per second: x 2048 tokens each
        ({"samples_per_s": 12.5}, "tokens_per_s", 25600),
        # papers' and logs' headings for the same figures
        ({"iteration_time_s": 60.1}, "step_time_s", 60.1),
        ({"iteration_time_ms": 2500}, "step_time_s", 2.5),
        ({"tokens_per_sec": 9e5}, "tokens_per_s", 9e5),
        ({"tokens_per_second_per_gpu": 1000}, "tokens_per_s", 64000),
        ({"samples_per_second": 12.5}, "tokens_per_s", 25600),
        ({"hfu_pct": 56.0}, "mfu", 0.56),
        # headings as NVIDIA's performance tables print them, and TGS (tokens per GPU per second)
        ({"Tokens / sec / GPU": 1000}, "tokens_per_s", 64000),
        ({"Model TFLOP / sec / GPU": 465.9}, "model_tflops_per_gpu", 465.9),
        ({"MFU (%)": 47}, "mfu", 0.47),
        ({"TFLOPS/GPU": 465.9}, "model_tflops_per_gpu", 465.9),
        ({"tflops": 465.9}, "model_tflops_per_gpu", 465.9),
        ({"tgs": 1000}, "tokens_per_s", 64000),
        # Zero Bubble's Table 4 heading: samples per GPU per second, x 2048 tokens x 64 GPUs
        ({"samples_per_gpu_s": 0.5}, "tokens_per_s", 0.5 * 2048 * 64),
        ({"Samples / sec / GPU": 0.5}, "tokens_per_s", 0.5 * 2048 * 64),
        # Narayanan et al. 2021's Table 1 "percentage of theoretical peak FLOP/s"
        ({"pct_peak": 44}, "mfu", 0.44),
        # Megatron-LM's log line "elapsed time per iteration (ms)"; NeMo AutoModel's "Time per
        # Global Step (s)"; llm-foundry's "Throughput (T/s)" (T tokens, S samples) and per GPU
        ({"elapsed time per iteration (ms)": 2500}, "step_time_s", 2.5),
        ({"Time per Global Step (s)": 7.286}, "step_time_s", 7.286),
        ({"Throughput (T/s)": 85144}, "tokens_per_s", 85144),
        ({"Throughput (T/s/GPU)": 1000}, "tokens_per_s", 64000),
        ({"Throughput (S/s)": 41}, "tokens_per_s", 41 * 2048),
        ({"TPS/GPU": 5762}, "tokens_per_s", 5762 * 64),  # torchtitan's performance tables
        ({"model_flops_utilization": 0.41}, "mfu", 0.41),
        ({"mfu_percent": 41}, "mfu", 0.41),
        # a share of peak written with its percent sign
        ({"mfu": "41%"}, "mfu", 0.41),
        ({"MFU (%)": "41 %"}, "mfu", 0.41),
    ],
)
def test_spellings_read_as_their_canonical_metric(measured, metric, value):
    m = read_measured(measured, "cases[0].measured", SCENARIO)
    assert (m.metric, m.value) == (metric, pytest.approx(value))
    assert bool(m.note) == (measured != {metric: value})


def test_several_figures_compare_the_first_and_say_so():
    m = read_measured({"tokens_per_s": 9e5, "mfu": 0.4}, "c.measured", SCENARIO)
    assert (m.metric, m.value) == ("tokens_per_s", 9e5)
    assert "mfu 0.4 not compared" in m.note


@pytest.mark.parametrize(
    ("measured", "field", "words"),
    [
        ({}, "c.measured", "one of"),
        ({"speed": 3}, "c.measured.speed", "unknown metric"),
        ({"mfu": 470}, "c.measured.mfu", "fraction of peak"),
        ({"tokens_per_s": -1}, "c.measured.tokens_per_s", "finite number above 0"),
        ({"tokens_per_s": True}, "c.measured.tokens_per_s", "finite number above 0"),
        ({"mfu": 0.4, "step_time_s": "fast"}, "c.measured.step_time_s", "finite number above 0"),
    ],
)
def test_bad_figures_name_their_field(measured, field, words):
    with pytest.raises(UserError) as err:
        read_measured(measured, "c.measured", SCENARIO)
    assert err.value.field == field and words in str(err.value)


def test_per_gpu_figures_need_the_gpu_count():
    with pytest.raises(UserError, match="cluster.gpus"):
        read_measured({"tokens_per_s_per_gpu": 10}, "c.measured", {"cluster": {}})
    with pytest.raises(UserError, match="training.seq_len"):
        read_measured({"samples_per_s": 10}, "c.measured", {"cluster": {"gpus": 8}})


def test_an_fp8_mfu_says_which_peak_it_is_against():
    # NVIDIA's tables quote FP8 runs against the FP8 peak, others against BF16's (twice apart)
    fp8 = {"cluster": {"gpus": 8}, "training": {"seq_len": 2048, "precision": "FP8"}}
    assert "against the GPU's FP8 peak" in read_measured({"mfu": 0.3}, "c.measured", fp8).note
    assert read_measured({"mfu": 0.3}, "c.measured", SCENARIO).note == ""
    assert read_measured({"tokens_per_s": 9e5}, "c.measured", fp8).note == ""


def test_hardware_flop_figures_are_marked_for_the_hardware_count():
    # Korthikanti et al. 2022 Table 5 quotes MFU and HFU side by side; HFU counts the recompute
    assert read_measured({"hfu": 0.56}, "c.measured", SCENARIO).hardware_flops
    assert read_measured({"hardware_tflops_per_gpu": 140}, "c.measured", SCENARIO).hardware_flops
    assert not read_measured({"mfu": 0.56}, "c.measured", SCENARIO).hardware_flops


def test_a_time_without_its_unit_asks_for_it():
    with pytest.raises(UserError, match="give the unit: step_time_s or step_time_ms"):
        read_measured({"step_time": 3}, "c.measured", SCENARIO)


def test_a_throughput_without_its_unit_asks_for_it():
    with pytest.raises(UserError, match="give the unit: tokens_per_s or samples_per_s"):
        read_measured({"throughput": 3000}, "c.measured", SCENARIO)


def test_a_percent_sign_is_only_for_a_share_of_peak():
    with pytest.raises(UserError, match="is a share of peak; give tokens_per_s as a number"):
        read_measured({"tokens_per_s": "41%"}, "c.measured", SCENARIO)
