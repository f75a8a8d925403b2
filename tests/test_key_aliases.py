"""Other names of scenario keys (simcluster/key_aliases.py): Megatron-LM's argument names,
Hugging Face config fields and DeepSpeed's config keys read as the schema's fields."""

import subprocess
import sys

import pytest

from simcluster.errors import UserError
from simcluster.scenario import load_scenario, scenario_from_dict
from simcluster.validate import load_cases_file
from simcluster.validate_report import gpu_of

CANONICAL = {
    "model": {"layers": 24, "hidden": 2048, "heads": 16, "kv_heads": 8, "ffn": 8192, "vocab": 131072,
              "mlp": "swiglu", "tied_embeddings": False},
    "cluster": {"hardware": "dgx-h100", "gpus": 16},
    "parallel": {"tp": 2, "pp": 2, "dp": 4, "vpp": 2, "zero": 1},
    "training": {"global_batch": 64, "micro_batch": 2, "seq_len": 4096},
}

# Megatron-LM's launch arguments (--num-layers, --tensor-model-parallel-size, ...)
MEGATRON = {
    "model": {"num-layers": 24, "hidden-size": 2048, "num-attention-heads": 16, "num-query-groups": 8,
              "ffn-hidden-size": 8192, "padded_vocab_size": 131072, "mlp": "swiglu",
              "tied_embeddings": False},
    "cluster": {"hardware": "dgx-h100", "gpus": 16},
    "parallel": {"tensor-model-parallel-size": 2, "pipeline-model-parallel-size": 2, "data_parallel_size": 4,
                 "virtual-pipeline-model-parallel-size": 2, "zero_stage": 1},
    "training": {"global-batch-size": 64, "micro-batch-size": 2, "seq-length": 4096},
}

# a Hugging Face config.json's names, a DeepSpeed config's micro-batch, a paper table's gbs
HUGGING_FACE = {
    "model": {"num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
              "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 131072, "mlp": "swiglu",
              "tie_word_embeddings": False},
    "cluster": {"gpu": "dgx-h100", "num_gpus": 16},
    "parallelism": {"tensor_parallel": 2, "pipeline_parallel": 2, "data_parallel": 4, "vp": 2, "zero": 1},
    "training": {"gbs": 64, "train_micro_batch_size_per_gpu": 2, "max_seq_len": 4096},
}


@pytest.mark.parametrize("written", [MEGATRON, HUGGING_FACE], ids=["megatron", "hugging-face"])
def test_other_names_give_the_same_scenario(written):
    assert scenario_from_dict(written).model_dump() == scenario_from_dict(CANONICAL).model_dump()


def test_moe_names_from_both_conventions():
    base = {k: v for k, v in CANONICAL.items() if k != "model"}
    hf = {"model": {**CANONICAL["model"], "num_experts": 64, "num_experts_per_tok": 8,
                    "moe_intermediate_size": 1024}, **base}
    mcore = {"model": {**CANONICAL["model"], "num_experts": 64, "moe-router-topk": 8,
                       "moe-ffn-hidden-size": 1024}, **base}
    for data in (hf, mcore):
        m = scenario_from_dict(data).model
        assert (m.experts, m.top_k, m.expert_ffn) == (64, 8, 1024)


def test_a_key_given_under_two_names_is_an_error_naming_both():
    data = {**CANONICAL, "training": {**CANONICAL["training"], "global_batch_size": 128}}
    with pytest.raises(UserError) as err:
        scenario_from_dict(data)
    assert err.value.field == "training.global_batch_size"
    assert "training.global_batch" in str(err.value) and "keep one" in str(err.value)


def test_a_section_given_under_two_names_is_an_error():
    with pytest.raises(UserError) as err:
        scenario_from_dict({**CANONICAL, "parallelism": {"tp": 2}})
    assert err.value.field == "parallelism"


def test_an_unknown_name_is_still_refused_with_a_hint():
    data = {**CANONICAL, "model": {**CANONICAL["model"], "num_layer": 24}}
    with pytest.raises(UserError) as err:
        scenario_from_dict(data)
    assert err.value.field == "model.num_layer" and "unknown key" in str(err.value)


def test_set_takes_an_alias_path_and_the_cli_exits_2_on_a_conflict(tmp_path):
    sc = load_scenario("llama3-8b-8xh100", [("training.global-batch-size", 64), ("parallelism.tensor_parallel", 2)])
    assert (sc.training.global_batch, sc.parallel.tp) == (64, 2)
    path = tmp_path / "both.yaml"
    path.write_text(
        "model: llama3-8b\ncluster: {gpus: 8}\ntraining: {seq_len: 4096, global_batch: 16, gbs: 32}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "simcluster", "run", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "training.gbs" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_validation_case_written_with_other_names_runs_on_its_gpu(tmp_path):
    path = tmp_path / "cases.yaml"
    path.write_text(
        "cases:\n- name: hf-names\n  source: test\n  scenario:\n"
        "    model: {num_hidden_layers: 2, hidden_size: 1024, num_attention_heads: 8, intermediate_size: 4096,"
        " vocab_size: 32000}\n"
        "    cluster: {gpu: A100, num_gpus: 8}\n"
        "    parallelism: {tensor_model_parallel_size: 2}\n"
        "    training: {global_batch_size: 8, seq_length: 1024}\n"
        "  measured: {step_time_s: 1.0}\n"
    )
    (case,) = load_cases_file(path)
    assert case.problem is None or case.problem == ""
    assert "A100" in gpu_of(case)
    assert case.scenario["parallel"]["tp"] == 2


def test_a_case_given_in_nodes_reads_a_per_gpu_figure(tmp_path):
    # 2 DGX H100 nodes = 16 GPUs: 1,000 tokens/s per GPU is 16,000 tokens/s
    path = tmp_path / "cases.yaml"
    path.write_text(
        "cases:\n- name: nodes\n  source: test\n  scenario:\n"
        "    model: llama3-8b\n    cluster: {hardware: h100, num_nodes: 2}\n"
        "    training: {seq_len: 8192, gbs: 32}\n"
        "  measured: {'Tokens / sec / GPU': 1000}\n"
    )
    (case,) = load_cases_file(path)
    assert not case.problem
    assert (case.metric, case.measured) == ("tokens_per_s", 16000)


def test_set_model_to_a_name_replaces_the_model_and_can_be_refined(cli):
    # `--set model=NAME` is the scenario shorthand `model: NAME`; a later model.* override edits it
    import json

    from simcluster.model import load_preset

    res = cli("memory", "llama3-8b-8xh100", "--set", "model=Qwen/Qwen3-8B", "--set", "model.layers=4", "--json")
    assert res.code == 0, res.err
    qwen = load_preset("qwen3-8b")
    per_layer = (qwen.params_total() - json.loads(res.out)["params_total"]) / (qwen.layers - 4)
    # Qwen3-8B (config.json): hidden 4096, 32/8 heads of 128, MLP 12288, q/k norms: 192.9M per layer
    assert per_layer == pytest.approx(4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 12288 + 2 * 4096 + 2 * 128, rel=1e-6)


def test_set_preset_or_hf_config_replaces_the_other_source_of_the_shape(cli, tmp_path):
    """The model's shape comes from a preset or a config.json, never both: --set of one over a
    scenario that names the other replaces it (as --set nodes replaces gpus), instead of the
    'give either preset or hf_config, not both' error, which a --set could not mend."""
    import json

    from simcluster.model import load_preset

    config = tmp_path / "config.json"  # Llama 3 8B's config.json (meta-llama/Meta-Llama-3-8B)
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                                  "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
                                  "vocab_size": 128256, "tie_word_embeddings": False}))  # fmt: skip
    by_config = cli("memory", "llama3-8b-8xh100", "--set", f"model.hf_config={config}", "--json")
    assert by_config.code == 0, by_config.err
    assert json.loads(by_config.out)["params_total"] == load_preset("llama3-8b").params_total()
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"model: {{hf_config: {config}}}\ncluster: {{gpus: 8}}\ntraining: {{seq_len: 2048, global_batch: 8}}\n")
    by_preset = cli("memory", str(scenario), "--set", "model.preset=qwen3-8b", "--json")
    assert by_preset.code == 0, by_preset.err
    assert json.loads(by_preset.out)["params_total"] == load_preset("qwen3-8b").params_total()


def test_a_tables_headings_read_as_keys():
    # NeMo's performance summary heads its columns "TP", "PP", "CP", "VP", "GBS", "MBS",
    # "Sequence Length": the same scenario as the schema's names
    from simcluster.scenario import scenario_from_dict

    base = {"model": "llama3-70b", "cluster": {"hardware": "dgx-h100", "gpus": 64}}
    table = scenario_from_dict({**base, "Parallel": {"TP": 4, "PP": 4, "CP": 2, "VP": 5},
                                "Training": {"GBS": 128, "MBS": 1, "Sequence Length": 8192}})  # fmt: skip
    schema = scenario_from_dict({**base, "parallel": {"tp": 4, "pp": 4, "cp": 2, "vpp": 5},
                                 "training": {"global_batch": 128, "micro_batch": 1, "seq_len": 8192}})  # fmt: skip
    assert table == schema


def test_one_setting_stated_twice_alike_is_read_once():
    # a transcription's hardware block names the GPU and the system: one profile, no conflict
    from simcluster.errors import UserError
    from simcluster.scenario import scenario_from_dict

    def cluster(**given):
        raw = {"model": "llama3-8b", "cluster": {"gpus": 8, **given}, "training": {"seq_len": 2048, "global_batch": 8}}
        return scenario_from_dict(raw).cluster

    assert cluster(gpu="A100-SXM 80GB", system="NVIDIA Selene (DGX A100)").hardware == "A100-SXM 80GB"
    assert cluster(num_gpus=8).gpus == 8  # gpus: 8 and num_gpus: 8
    with pytest.raises(UserError, match="keep one"):
        cluster(gpu="A100-SXM 80GB", system="DGX H100")


@pytest.mark.parametrize("spelled", ["nvlink_GBps", "nvlink_gbps", "NVLink GBps"])
def test_the_schema_key_with_capitals_is_accepted_as_documented(spelled):
    # cluster.nvlink_GBps (README, hardware.CLUSTER_OVERRIDES) was refused as 'nvlink_gbps':
    # spellings are lower-cased before lookup, and the schema's own name has capitals
    doc = {**CANONICAL, "cluster": {"hardware": "dgx-h100", "gpus": 16, spelled: 900}}
    assert scenario_from_dict(doc).cluster.nvlink_GBps == 900


def test_torchtitan_hf_trainer_and_old_megatron_names():
    # torchtitan's [parallelism] degrees, Hugging Face Trainer's per-device batch, Megatron-LM
    # 2021's --checkpoint-activations (full recompute) and --position-embedding-type
    s = scenario_from_dict({
        "model": {"num_layers": 24, "hidden_size": 2048, "num_attention_heads": 16, "vocab_size": 50257,
                  "position_embedding_type": "learned_absolute"},
        "cluster": {"accelerator": "H100", "total_gpus": 16},
        "parallel": {"tensor_parallel_degree": 2, "pipeline_parallel_degree": 2, "context_parallel_degree": 2},
        "training": {"seq_len": 2048, "per_device_train_batch_size": 2, "global_batch": 64,
                     "checkpoint-activations": True},
    })
    assert (s.parallel.tp, s.parallel.pp, s.parallel.cp) == (2, 2, 2)
    assert (s.training.micro_batch, s.training.recompute, s.model.position) == (2, "full", "learned")
    assert (s.cluster.hardware, s.cluster.gpus) == ("H100", 16)


def test_a_case_reads_its_per_gpu_and_per_sample_figures_by_keys_written_one_level_off(tmp_path):
    # the GPU count under parallel, the sequence length under model: the scenario reads both
    # where they belong, and so does the measured figure's conversion
    path = tmp_path / "cases.yaml"
    path.write_text(
        "cases:\n- name: a\n  source: test\n  scenario:\n"
        "    model: {name: llama3-8b, seq_len: 4096}\n    cluster: {gpu: h100}\n"
        "    parallel: {tp: 1, num_gpus: 8}\n    training: {global_batch: 64}\n"
        "  measured: {samples_per_s: 10}\n"
        "- name: b\n  source: test\n  scenario:\n"
        "    model: llama3-8b\n    cluster: {gpu: h100}\n"
        "    parallel: {tp: 1, num_gpus: 8}\n    training: {seq_len: 4096, global_batch: 64}\n"
        "  measured: {'Tokens / sec / GPU': 1000}\n"
    )
    a, b = load_cases_file(path)
    assert not a.problem and not b.problem
    assert (a.metric, a.measured) == ("tokens_per_s", 40960)
    assert (b.metric, b.measured) == ("tokens_per_s", 8000)
