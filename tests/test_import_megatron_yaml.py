"""`simcluster import megatron` on Megatron-LM's YAML launch configs: the MoE recipes of
``examples/moe_recipes/`` (``ENV_VARS`` and ``ARGS`` with underscore keys) and the functional
tests' ``model_config.yaml`` (``ENV_VARS`` and ``MODEL_ARGS`` with flag keys). The recipe below
is written here in that layout with the settings of Megatron-LM's
``examples/moe_recipes/qwen3_30b/h100/fp8_32GPU_TP1PP1EP8.yaml`` (Qwen3-30B-A3B on 32 H100,
read at 59bbfaf), not copied from it: tests/fixtures/launch/megatron/qwen3_30b_h100_fp8_recipe.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcluster.cli import main
from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.importers import ImportOptions, import_config
from simcluster.importers.recipe_yaml import recipe_args
from simcluster.scenario import scenario_from_dict

RECIPE = (Path(__file__).parent / "fixtures" / "launch" / "megatron" / "qwen3_30b_h100_fp8_recipe.yaml").read_text()


def _recipe(tmp_path: Path, text: str = RECIPE, name: str = "recipe.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _import(path: Path, gpus: int = 32):
    return import_config("megatron", path, ImportOptions(cluster="dgx-h100", gpus=gpus))


def test_a_recipe_reads_as_its_launch_line(tmp_path):
    # Megatron's launchers: true -> the bare flag, false -> no flag, a list -> the flag and its
    # items, underscores -> dashes; ENV_VARS is the run's environment, --var over it
    args = recipe_args(_recipe(tmp_path), {"NCCL_MAX_NCHANNELS": "4"})
    assert args is not None
    words = args.words
    assert words[words.index("--num-layers") + 1] == "48"
    assert "--qk-layernorm" in words and "--log-timers-to-tensorboard" not in words
    i = words.index("--cuda-graph-scope")
    assert words[i + 1 : i + 4] == ["attn", "moe_router", "moe_preprocess"]
    assert words[words.index("--attention-dropout") + 1] == "0.0"
    # a value of several words is several words on the launch line (recompute_modules: moe_act layernorm)
    text = _recipe(tmp_path).read_text().replace("  bf16: true\n", "  bf16: true\n  recompute_modules: moe_act layernorm\n")
    spaced = recipe_args(_recipe(tmp_path, text, "spaced.yaml"), {})
    assert spaced is not None
    i = spaced.words.index("--recompute-modules")
    assert spaced.words[i + 1 : i + 3] == ["moe_act", "layernorm"]
    assert args.variables["NCCL_NVLS_ENABLE"] == "0" and args.variables["NCCL_MAX_NCHANNELS"] == "4"
    assert recipe_args(tmp_path / "train.sh", {}) is None  # not YAML by name: the shell reader's


def test_the_qwen3_recipe_becomes_its_scenario(tmp_path):
    out = _import(_recipe(tmp_path))
    s = out.scenario
    assert "model.vocab" in out.needs  # HuggingFaceTokenizer: its size is in its files
    assert (s["model"]["experts"], s["model"]["top_k"], s["model"]["expert_ffn"]) == (128, 8, 768)
    assert (s["parallel"]["ep"], s["parallel"]["zero"]) == (8, 1)
    # flex + hybridep: one copy per GPU holding a token's experts, counts aligned in the dispatch
    assert s["moe"] == {"dispatcher": "hybridep", "aligned_dispatch": True, "router_dtype": "fp32"}
    t = s["training"]
    assert (t["precision"], t["fp8_recipe"], t["fused_cross_entropy"]) == ("fp8", "block", "te")
    assert t["cuda_graphs"] == ["attn", "moe_router", "moe_preprocess"]
    assert s["overlap"]["dp_grad_reduce"] and s["overlap"]["param_gather"]
    assert s["cluster"]["nccl_max_nchannels"] == 8  # from ENV_VARS
    assert s["cluster"]["nvls"] is False  # NCCL_NVLS_ENABLE: '0'
    # the precision-aware optimizer's bf16 moments; its fp32 main gradients keep the bf16 default
    assert (t["optimizer_moments"], t["fp32_grad_accum"]) == ("bf16", True)
    notes = " ".join(out.notes)
    assert "--moe-permute-fusion: simulated so" in notes
    assert "no --moe-router-fusion: Megatron runs the router's score function" in notes
    assert "moe.load_imbalance 1.0" in notes
    skipped = " ".join(out.skipped_lines())
    assert "--log-params-norm" in skipped and "--norm-epsilon" in skipped
    s["model"]["vocab"] = 151936  # Qwen3's tokenizer, padded to 1187 x tp as the recipe asks
    build_context(scenario_from_dict(s))


def test_a_functional_test_config_and_whole_layer_graphs(tmp_path):
    text = (
        "ENV_VARS:\n  CUDA_DEVICE_MAX_CONNECTIONS: 1\nMODEL_ARGS:\n  --num-layers: 4\n"
        "  --hidden-size: 1024\n  --num-attention-heads: 16\n  --seq-length: 2048\n"
        "  --micro-batch-size: 2\n  --global-batch-size: 32\n  --tensor-model-parallel-size: 2\n"
        "  --sequence-parallel: true\n  --bf16: true\n  --vocab-size: 32000\n"
        "  --tokenizer-type: NullTokenizer\n  --cuda-graph-impl: local\n"
        "  --overlap-moe-expert-parallel-comm: false\n"
    )
    out = _import(_recipe(tmp_path, text, "model_config.yml"), gpus=8)
    s = out.scenario
    assert (s["model"]["layers"], s["parallel"]["tp"], s["parallel"]["sequence_parallel"]) == (4, 2, True)
    assert s["model"]["vocab"] == 32256  # NullTokenizer: 32,000 + its EOD, padded to 128 x tp
    assert "cuda_graphs" not in s["training"] and "ep_comm" not in s.get("overlap", {})
    assert any(x.startswith("--cuda-graph-impl local (whole layers) (only attention") for x in out.skipped_lines())
    build_context(scenario_from_dict(s))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ARGS: [1\n", "FILE: bad.yaml is not valid YAML"),
        ("steps: 10\n", "FILE: bad.yaml holds no ARGS mapping"),
    ],
)  # fmt: skip
def test_refusals_are_one_line(tmp_path, capsys, text, message):
    path = _recipe(tmp_path, text, "bad.yaml")
    with pytest.raises(UserError):
        _import(path)
    status = main(["import", "megatron", str(path), "--cluster", "dgx-h100", "--gpus", "8"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and message in err and "\n" not in err


@pytest.mark.parametrize(
    ("extra", "moments", "grads", "said"),
    [
        # Megatron-Core's OptimizerConfig reads the dtypes only with use_precision_aware_optimizer
        ("  --exp-avg-dtype: bf16\n  --exp-avg-sq-dtype: bf16\n", None, True, "without --use-precision-aware-optimizer"),
        ("  --use-precision-aware-optimizer: true\n  --exp-avg-dtype: bf16\n  --exp-avg-sq-dtype: bf16\n"
         "  --main-grads-dtype: bf16\n", "bf16", False, None),
        ("  --use-precision-aware-optimizer: true\n  --exp-avg-dtype: fp8\n", None, True, "--exp-avg-dtype fp8 (only both"),
    ],
)  # fmt: skip
def test_precision_aware_optimizer_dtypes(tmp_path, extra, moments, grads, said):
    text = (
        "MODEL_ARGS:\n  --num-layers: 4\n  --hidden-size: 1024\n  --num-attention-heads: 16\n"
        "  --seq-length: 2048\n  --micro-batch-size: 1\n  --bf16: true\n  --vocab-size: 32000\n"
        "  --tokenizer-type: NullTokenizer\n  --use-distributed-optimizer: true\n" + extra
    )
    out = _import(_recipe(tmp_path, text, "c.yaml"), gpus=8)
    t = out.scenario["training"]
    assert (t.get("optimizer_moments"), t["fp32_grad_accum"]) == (moments, grads)
    if said:
        assert said in " ".join(out.notes + out.skipped_lines())
    build_context(scenario_from_dict(out.scenario))
