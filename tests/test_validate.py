"""`simcluster validate`: shipped cases derived correctly from the sources, summaries, CLI, ratchet.

The measured values of the shipped cases are re-derived here from each case's `published`
figures with the source's own FLOP formula, so a typo in a case file cannot hide.
"""

from __future__ import annotations

import json
import statistics

import pandas as pd
import pytest
import yaml

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.flops import megatron_flops_per_step
from simcluster.hardware import load_profile
from simcluster.scenario import scenario_from_dict
from simcluster.schedules.partition import megatron_accounted
from simcluster.validate import Case, CaseResult, load_cases, run_cases
from simcluster.validate_report import (
    by_family,
    by_gpu,
    by_gpu_precision,
    checked_rule,
    memory_summary,
    ordering_checks,
    ordering_line,
    report,
    summarize,
)
from tests.conftest import GPT_LIKE, make_scenario

H100_BF16_PEAK = 989.4e12  # NVIDIA H100 SXM5 datasheet, dense BF16


def _family(name: str) -> list[Case]:
    return [c for c in load_cases() if c.family == name]


# --- the shipped cases --------------------------------------------------------------------
def test_shipped_case_counts_and_unique_names():
    cases = load_cases()
    fams = {}
    for c in cases:
        fams[c.family] = fams.get(c.family, 0) + 1
    # Narayanan Table 1: 10 rows; MCore r0.8: 9 rows; nanotron SVG: 26 cells; Zero Bubble
    # Table 4: 4 models x 3 m x 4 schedules (1F1B-I with one layer per virtual stage);
    # Korthikanti 2022: 4 models x (full recompute, SP + selective recompute); NeMo long
    # sequence: 9 lengths, 4K-1M tokens on H100, 8 lengths, 8K-1M tokens on B200; NeMo 24.07
    # FP8 summary: 9 GPT-3 / Llama rows; Megatron-Bridge summary: 8 dense Llama H100 rows of
    # three containers and 21 FP8 Blackwell rows (B200, GB200, GB300; FP8-CS, and NeMo 26.02's
    # FP8-MX; six of them Llama 3 70B / 405B with Megatron FSDP and activations offloaded to the
    # Grace CPU) and the 4 NVFP4 rows beside 26.02's FP8-MX / FP8-CS ones; torchtitan's A100
    # page: all 8 rows, and the Trainy team's Llama 3.1 8B Float8 FSDP runs on 32 and 64 H200 (its
    # benchmarks/ page of June 2025); Zero Bubble's same-memory table (arXiv Table 6): 3 models x 3 m x
    # (ZB-V, ZB-1p, 1F1B); BigScience BLOOM-176B: the main run and five steady re-test layouts;
    # NVIDIA's DGX Cloud benchmarking recipes: 5 models x (BF16 smallest and largest, FP8 smallest),
    # and Grok-1 314B (MoE): GB200 at 128/256/512 GPUs and H100 at 512, BF16 and FP8; Swiss AI's
    # pull request 33 on CSCS Alps (GH200): its three 8B layouts on 256 GPUs; MLPerf Training
    # GPT-3 175B, NVIDIA's DGX H100 submissions: v3.1 at 512/1024/1344 nodes, v4.0 at 64/1344,
    # v4.1 at 32/64/1452, Llama 3.1 405B v5.0 at 64/256/304 nodes and Nebius's on 64/128 H200 nodes,
    # and HPE's v5.1 Llama 3.1 8B on 64 H200; v4.1's 8-node B200 preview, v5.1 Llama 3.1 8B on NVIDIA's GB200/GB300 at 72/512 GPUs and
    # other submitters' runs on 16 (Dell) / 64 (Oracle) B200 and 72 GB300 (Lambda); the University of
    # Florida's v5.1 Llama 3.1 405B on 32 and 56 DGX B200;
    # AMD's rocm/pytorch-training:v25.2 overview: its four Llama 3.1 8B FSDP rows on 8 MI300X;
    # MLPerf's llama2_70b_lora (LoRA fine-tuning): AMD's v5.1 runs on 8 MI355X, MI325X and MI300X,
    # NVIDIA's v5.0 on one DGX B200 and 8 GB200; Megatron-LM's own MoE recipes (examples/moe_recipes):
    # Qwen3-30B-A3B on 32 H100 (BF16, FP8 blockwise) and 16 GB200, Qwen3-235B-A22B on 256 H100,
    # Qwen3-30B-A3B on 16 GB200 in MXFP8 with partial CUDA graphs, Qwen3-235B-A22B on 128 B200 in
    # MXFP8 with DeepEP, and its DeepSeek-V3 GB200 optimization guide's MXFP8 run on 256 GB200.
    # Megatron-Bridge's model-verification cards: Qwen3-30B-A3B (tuned) and Qwen3-8B (untuned) on 16 H100,
    # DeepSeek-V3 on 1,024 H100 (tuned).
    assert fams == {
        "bigscience-a100": 6,
        "korthikanti2022-a100": 8,
        "narayanan2021-a100": 10,
        "megatron-core-h100": 9,
        "nanotron-h100": 26,
        "megatron-bridge-fp8-h100": 8,
        "megatron-bridge-fp8-blackwell": 21,
        "megatron-bridge-nvfp4-blackwell": 4,
        "nemo-fp8-h100": 11,
        "nemo-long-context-h100": 9,
        "nemo-long-context-b200": 8,
        "nvidia-dgxc-h100": 22,
        "nvidia-dgxc-grok1": 8,
        "torchtitan-a100": 8,
        "torchtitan-h200": 2,
        "zero-bubble-a100": 48,
        "zero-bubble-v-a100": 27,
        "swissai-gh200": 3,
        "mlperf-training-h100": 14,
        "mlperf-training-blackwell": 14,
        "amd-fsdp-mi300x": 4,
        "amd-fsdp-mi325x": 4,
        "mlperf-training-amd": 1,
        "mlperf-lora-70b": 20,
        "megatron-moe-recipes": 11,
        "megatron-bridge-cards": 9,
    }
    assert len({c.name for c in cases}) == len(cases)


def test_every_shipped_scenario_resolves():
    for c in load_cases():
        ctx = build_context(scenario_from_dict(c.scenario))
        assert ctx.layout.world == c.scenario["cluster"]["gpus"], c.name


def test_narayanan_row1_by_hand():
    # Narayanan et al. 2021 eq. (3) with recompute, 1.7B row: B=512, s=2048, l=24, h=2304,
    # V=51200 at 137 TFLOP/s on 32 GPUs -> 3.528 s per step.
    (case,) = [c for c in load_cases() if c.name == "narayanan2021/1.7B-32gpu"]
    assert case.measured == pytest.approx(3.528018, rel=1e-6)


@pytest.mark.parametrize("family", ["narayanan2021-a100", "megatron-core-h100"])
def test_megatron_step_times_follow_the_sources_formula(family):
    recompute = family.startswith("narayanan")  # the 2021 paper counts the recompute forward
    for c in _family(family):
        p = c.published
        flops = megatron_flops_per_step(
            p["global_batch"], p["seq_len"], p["layers"], p["hidden"], p["vocab"], recompute
        )
        assert c.measured == pytest.approx(
            flops / (p["tflops_per_gpu"] * 1e12 * p["gpus"]), rel=1e-5
        )
        assert c.scenario["training"]["global_batch"] == p["global_batch"]


def test_mcore_row1_matches_the_quoted_mfu():
    # README: 1.7B at 408.8 TFLOP/s is 41% MFU of 989 -> step = 72*B*s*l*h^2*(...) / (408.8e12 * 48)
    (case,) = [c for c in load_cases() if c.name == "mcore-r0.8/1.7B-48gpu"]
    assert case.measured == pytest.approx(0.451854, rel=1e-5)
    assert round(408.8 / 989 * 100) == 41


def _nemo_llama_flops_per_token(m: dict, s: int, causal_half: bool = False) -> float:
    """NeMo's llama model FLOPs per token (nemo/utils/flops_formulas.py):
    l*h^2*(12 + 12*g/a + 18*ffn/h + 12*s/h + 6*V/(l*h)); later versions halve the 12*s/h term
    for the causal mask."""
    h, layers = m["hidden"], m["layers"]
    attention = 12 * s / h * (0.5 if causal_half else 1.0)
    per_layer = 12 + 12 * m["kv_heads"] / m["heads"] + 18 * m["ffn"] / h + attention
    return layers * h * h * (per_layer + 6 * m["vocab"] / (layers * h))


@pytest.mark.parametrize("family", ["nemo-long-context-h100", "nemo-long-context-b200"])
def test_nemo_long_context_step_times_follow_nemos_llama_formula(family):
    # NeMo llama2/llama3 model FLOPs: gbs*s*l*h^2*(12 + 12*g/a + 18*ffn/h + 12*s/h + 6*V/(l*h)),
    # the attention term without a causal discount (nemo/utils/flops_formulas.py)
    for c in _family(family):
        m, p = c.scenario["model"], c.published
        flops = p["global_batch"] * p["seq_len"] * _nemo_llama_flops_per_token(m, p["seq_len"])
        assert c.measured == pytest.approx(flops / (p["tflops_per_gpu"] * 1e12 * p["gpus"]), rel=1e-5)
        assert c.scenario["training"]["precision"] == "fp8"
        assert c.scenario["cluster"]["gpus"] == p["gpus"]


def test_nemo_long_context_rows_by_hand():
    # H100, 4K row: 1024 x 4096 tokens at 768 TFLOP/s on 4 GPUs -> 62.921 s
    (first,) = [c for c in _family("nemo-long-context-h100") if c.published["seq_len"] == 4096]
    assert first.measured == pytest.approx(62.921, abs=1e-3)
    # B200 (Llama 3 8B, V = 128256), 8K row: 512 x 8192 tokens at 1671 TFLOP/s; the table lists 8
    # GPUs but tp 1 x pp 1 x dp 2 x cp 1 = 2 (every row lists 4x its layout), so the step is
    # 512*8192*32*4096^2*(12 + 3 + 63 + 24 + 6*128256/(32*4096)) / (1671e12 * 2) = 72.682 s
    (b8k,) = [c for c in _family("nemo-long-context-b200") if c.published["seq_len"] == 8192]
    assert b8k.scenario["cluster"]["gpus"] == 2
    flops = 512 * 8192 * 32 * 4096**2 * (12 + 3 + 63 + 24 + 6 * 128256 / (32 * 4096))
    assert b8k.measured == pytest.approx(flops / (1671e12 * 2), rel=1e-6)
    assert b8k.measured == pytest.approx(72.682, abs=1e-3)


def test_b200_llama3_8b_at_8k_in_two_tables():
    """The same run shape in two published tables: Llama 3 8B FP8, 8K tokens, tp 1 pp 1 cp 1 on
    DGX B200. NeMo 25.04.rc2's long-sequence row, 1671 TFLOP/s by the undiscounted formula, is
    1671e12 / (32*4096^2*(12 + 3 + 63 + 24 + 6*128256/(32*4096))) = 28,854 tokens/s/GPU;
    Megatron-Bridge's summary has 29,994 (NeMo 25.09) and 30,624 (25.11) on 8 GPUs, so the
    later software runs the same shape 4.0% and 6.1% faster (FP8-CS and micro-batch 2 there,
    delayed scaling and micro-batch 1 here). Read with the causal half instead, the NeMo row
    would be 32,465 tokens/s/GPU, faster than both later containers: one more piece of evidence
    for the undiscounted reading (docs/accuracy.md, NeMo long sequence on B200)."""
    (nemo,) = [c for c in _family("nemo-long-context-b200") if c.published["seq_len"] == 8192]
    bridge = {c.published["container"]: c for c in _family("megatron-bridge-fp8-blackwell")
              if c.name.endswith("llama3-8b-b200-8gpu")}
    m = nemo.scenario["model"]
    assert (nemo.scenario["parallel"]["tp"], nemo.scenario["parallel"]["cp"]) == (1, 1)
    tokens = nemo.published["tflops_per_gpu"] * 1e12 / _nemo_llama_flops_per_token(m, 8192)
    assert tokens == pytest.approx(28854, abs=1)
    assert nemo.published["global_batch"] * 8192 / (nemo.measured * nemo.published["gpus"]) == pytest.approx(tokens)
    later = {k: c.published["tokens_per_s_per_gpu"] for k, c in bridge.items()}
    assert later == {"25.09": 29994, "25.11": 30624}
    assert later["25.09"] / tokens == pytest.approx(1.040, abs=5e-4)
    assert later["25.11"] / tokens == pytest.approx(1.061, abs=5e-4)
    for c in bridge.values():
        assert c.scenario["model"]["hidden"] == m["hidden"] and c.scenario["training"]["seq_len"] == 8192
        assert (c.scenario["parallel"]["tp"], c.scenario["parallel"]["cp"]) == (1, 1)
    halved = nemo.published["tflops_per_gpu"] * 1e12 / _nemo_llama_flops_per_token(m, 8192, causal_half=True)
    assert halved == pytest.approx(32465, abs=1) and halved > max(later.values())


def test_nemo_summary_tokens_are_tokens_per_gpu_times_gpus():
    # NeMo 24.07 performance summary publishes tokens/s/GPU; e.g. LLAMA3-70B on 64 GPUs: 1533
    rows = {c.name: c for c in _family("nemo-fp8-h100")}
    for c in rows.values():
        p = c.published
        assert c.measured == p["tokens_per_s_per_gpu"] * p["gpus"] == p["tokens_per_s_per_gpu"] * c.scenario["cluster"]["gpus"]
        assert c.scenario["training"]["precision"] == "fp8"
    assert rows["nemo-24.07/llama3-70b-64gpu"].measured == 1533 * 64
    # the published model TFLOP/s follow from the tokens with NeMo's llama formula (attention term
    # 12 s/h without a causal discount) for every Llama row, within rounding: evidence for the
    # undiscounted formula the long-sequence family also uses (LLAMA3-70B: 1533 tok/s -> 738)
    for c in rows.values():
        m, s = c.scenario["model"], c.published["seq_len"]
        if m["mlp"] == "relu2":
            # the Nemotron rows, whose shapes the page omits: the launcher's Nemotron-3 configs
            # (two-matrix squared-ReLU MLP) with a 256,000-token vocabulary give the table's
            # TFLOP/s (6 x weights + 12 l h s per token): NEMOTRON-8B 12701 tok/s -> 653
            n_layers, h = m["layers"], m["hidden"]
            per_token = 6 * (n_layers * (4 * h * h + 2 * h * m["ffn"]) + h * m["vocab"]) + 12 * n_layers * h * s
            tflops = c.published["tokens_per_s_per_gpu"] * per_token / 1e12
            assert m["vocab"] == 256000 and tflops == pytest.approx(c.published["model_tflops_per_gpu"], rel=0.002)
            continue
        if m["mlp"] != "swiglu":
            continue
        tflops = c.published["tokens_per_s_per_gpu"] * _nemo_llama_flops_per_token(m, s) / 1e12
        assert tflops == pytest.approx(c.published["model_tflops_per_gpu"], rel=0.01), c.name
    assert {"nemo-24.07/nemotron-8b-64gpu", "nemo-24.07/nemotron-22b-64gpu"} <= set(rows)


@pytest.mark.parametrize(
    "family", ["megatron-bridge-fp8-h100", "megatron-bridge-fp8-blackwell", "megatron-bridge-nvfp4-blackwell"]
)
def test_bridge_tokens_and_the_causal_formula_of_later_nemo(family):
    """Megatron-Bridge summary rows: tokens/s = tokens/s/GPU x GPUs, and their quoted TFLOP/s follow
    from the tokens with NeMo's later llama formula, whose attention term 12 s/h is halved for
    the causal mask (LLAMA3.1-405B, 25.09: 302 tokens/s -> 763 TFLOP/s; on B200, 25.11: 661 ->
    1667); the 24.07 summary used the undiscounted one (test above)."""
    rows = _family(family)
    assert rows
    for c in rows:
        m, p = c.scenario["model"], c.published
        assert c.measured == p["tokens_per_s_per_gpu"] * p["gpus"]
        per_token = _nemo_llama_flops_per_token(m, p["seq_len"], causal_half=True)
        assert p["tokens_per_s_per_gpu"] * per_token / 1e12 == pytest.approx(
            p["model_tflops_per_gpu"], rel=0.01
        ), c.name


def test_blackwell_rows_run_their_containers_cudnn_release():
    """NeMo 25.09 / 25.11 carried cuDNN 9.11.0.98 / 9.13.1.26 and 26.02 9.18.0.50 (Megatron-Bridge
    docs/releases/software-versions.md), MLPerf v5.1's NVIDIA builds cuDNN 9.13.1 (its system
    descriptions); cuDNN 9.17 brought the SDPA kernels of the GB200 / GB300 default curves
    (cudnn-frontend v1.17.0). So before 26.02 a row runs the newest older release its profile keeps
    at or below its container's, else the oldest: GB200 cudnn-9.10 (9.10.2, cudnn-frontend cb560b9)
    for 25.09 and cudnn-9.13 for 25.11, GB300 cudnn-9.13 (it keeps no 9.10); the default after.
    B200's default curves are 9.13.1's (cudnn-frontend 0b1577c, through the cuDNN graph), so its
    25.11 and v5.1 rows run them and its 25.09, NeMo 25.04 (9.9.0), MLPerf v5.0 (9.9.0) and
    v4.1 (9.4.0) rows cudnn-9.10."""
    bridge = [c for c in load_cases() if c.family.startswith("megatron-bridge") and c.family.endswith("blackwell")]
    assert len(bridge) == 25
    for c in bridge:
        container, system = c.published["container"], c.published["system"]
        newer = container >= "26.02" or (system == "B200" and container >= "25.11")
        older = "cudnn-9.10" if container == "25.09" and system in ("GB200", "B200") else "cudnn-9.13"
        assert c.scenario["training"]["attention_kernel"] == ("cudnn" if newer else older), c.name
    v51 = [c for c in load_cases() if c.name.startswith("mlperf-v5.1/") and "xgb" in c.name]
    assert len(v51) == 11 and all(c.scenario["training"]["attention_kernel"] == "cudnn-9.13" for c in v51)
    b200 = {c.name: c.scenario["training"]["attention_kernel"] for c in load_cases()
            if c.scenario["cluster"]["hardware"] == "dgx-b200" and c.family not in {"megatron-bridge-fp8-blackwell"}}
    old = {n for n in b200 if n.startswith(("nemo-cp-b200/", "mlperf-v5.0/", "mlperf-v4.1/"))}
    assert len(old) == 10 and all(b200[n] == "cudnn-9.10" for n in old)
    assert all(k == "cudnn" for n, k in b200.items() if n not in old)


def test_every_nvfp4_row_has_the_same_layout_at_fp8():
    """Megatron-Bridge's NeMo 26.02 table runs each NVFP4 layout at FP8 too (FP8-MX, or FP8-CS
    for Llama 3.1 405B on GB300): the pair isolates what the precision changes."""
    fp8 = _family("megatron-bridge-fp8-blackwell")
    for c in _family("megatron-bridge-nvfp4-blackwell"):
        assert c.scenario["training"]["precision"] == "nvfp4" and c.published["container"] == "26.02"
        twins = [
            o for o in fp8
            if o.published["container"] == "26.02" and o.published["system"] == c.published["system"]
            and o.scenario["parallel"] == c.scenario["parallel"] and o.scenario["model"] == c.scenario["model"]
            and o.scenario["training"]["global_batch"] == c.scenario["training"]["global_batch"]
        ]  # fmt: skip
        assert twins, c.name
        assert all(o.measured < c.measured for o in twins), c.name  # NVFP4 measured faster


def test_moe_recipe_rows_are_megatrons_tflops_over_its_moe_flop_count():
    """NVIDIA/Megatron-LM pull request 5728's medians (model TFLOP/s per GPU; the B200 row's 633.9
    from pull request 5289's recipe README) over Megatron-LM's
    num_floating_point_operations per token, 6 x [l (h (q + 2 kv) + q h + q s + 3 h f k) + h V]
    (causal scores: q s / 2 for each of QK^T and its product with V): Qwen3-30B-A3B (l 48,
    h 2048, q 4096, kv 512, experts 768 wide, top-8, V 151,936, s 4,096) is 23.006 GFLOP per
    token, so 240.5 TFLOP/s is 10,453.8 tokens/s per GPU; Qwen3-235B-A22B (l 94, h 4096, q 8192,
    experts 1536 wide) is 148.035 GFLOP, so 302.0 TFLOP/s is 2,040.1."""
    per_token = {
        "qwen3-30b-a3b": 6 * (48 * (2048 * 5120 + 4096 * 2048 + 4096 * 4096 + 3 * 2048 * 768 * 8) + 2048 * 151936),
        "qwen3-235b-a22b": 6 * (94 * (4096 * 9216 + 8192 * 4096 + 8192 * 4096 + 3 * 4096 * 1536 * 8) + 4096 * 151936),
    }
    assert per_token["qwen3-30b-a3b"] == pytest.approx(23.00628e9, rel=1e-6)
    assert per_token["qwen3-235b-a22b"] == pytest.approx(148.0348e9, rel=1e-6)
    published = {"h100-bf16-32gpu": 240.5, "h100-fp8-blockwise-32gpu": 242.9, "gb200-bf16-16gpu": 504.2,
                 "gb200-mxfp8-partial-cg-16gpu": 480.3, "h100-bf16-256gpu": 302.0,
                 "b200-mxfp8-128gpu": 633.9}  # fmt: skip
    cases = [c for c in _family("megatron-moe-recipes") if "/qwen3-" in c.name and "/zoo/" not in c.name]
    assert len(cases) == len(published)
    for c in cases:
        model, row = c.name.split("/")[1:]
        assert c.published["tflops_per_gpu"] == published[row]
        gpus = c.scenario["cluster"]["gpus"]
        assert c.measured == pytest.approx(published[row] * 1e12 * gpus / per_token[model], rel=1e-5), c.name
    (bf16,) = [c for c in cases if c.name.endswith("h100-bf16-32gpu")]
    assert bf16.measured / 32 == pytest.approx(10453.8, abs=0.5)  # the YAML keeps 6 significant figures


def test_model_zoo_rows_are_the_readmes_tflops_over_megatrons_flop_count():
    """yanring/Megatron-MoE-ModelZoo best_practice/qwen3/readme.md: Qwen3-235B-A22B at 750 and 919 (256
    GB200, BF16 and MXFP8), 974 (256 GB300, MXFP8) and 1,150 TFLOP/s per GPU (128 GB300, MXFP8, 131,072
    tokens).
    Megatron-LM's num_floating_point_operations per token: 6 x [94 x (QKV 4096 x (8192 + 2 x 512),
    output 8192 x 4096, causal scores 8192 x s, 8 routed SwiGLU experts 3 x 4096 x 1536) + logits
    4096 x 151,936]: 148.03 GFLOP at s = 4,096 and 734.70 at s = 131,072, the scores term growing
    with the sequence."""
    def per_token(s):
        return 6 * (94 * (4096 * 9216 + 8192 * 4096 + 8192 * s + 3 * 4096 * 1536 * 8) + 4096 * 151936)

    assert per_token(4096) == pytest.approx(148.0348e9, rel=1e-6)
    assert per_token(131072) == pytest.approx(734.7005e9, rel=1e-6)
    published = {"gb200-bf16-256gpu": (750, 256, 4096), "gb200-mxfp8-256gpu": (919, 256, 4096),
                 "gb300-mxfp8-256gpu": (974, 256, 4096), "gb300-mxfp8-128k-128gpu": (1150, 128, 131072)}  # fmt: skip
    cases = [c for c in _family("megatron-moe-recipes") if "/zoo/" in c.name]
    assert len(cases) == len(published)
    for c in cases:
        tflops, gpus, seq = published[c.name.split("qwen3-235b-a22b-")[1]]
        assert (c.published["tflops_per_gpu"], c.scenario["cluster"]["gpus"]) == (tflops, gpus)
        assert c.scenario["training"]["seq_len"] == seq
        assert c.measured == pytest.approx(tflops * 1e12 * gpus / per_token(seq), rel=1e-5), c.name
        # 94 layers with the embedding and the loss each counted as one in the pipeline split
        assert sum(c.scenario["parallel"]["layers_per_stage"]) == 94, c.name


#: Megatron-Bridge's model-verification cards (docs/model-verification/models/*.md, commit d5d8c19):
#: row -> (GPUs, global batch, tokens a sequence, the card's step seconds, its tokens/s per GPU)
BRIDGE_CARD_ROWS = {
    # qwen3-30b-a3b.md pretrain_performance.H100: steps 41-50 averaging 20,147.29 ms
    "bridge-cards/qwen3-30b-a3b-h100-bf16-16gpu": (16, 1024, 4096, 20.14729, 13011.378),
    # pretrain_performance.GB200 (6,501.12 ms), .GB300 (5,854.91 ms) and GB300 weak scaling's 256 GPUs
    "bridge-cards/qwen3-30b-a3b-gb200-mxfp8-8gpu": (8, 512, 4096, 6.50112, 40322.898),
    "bridge-cards/qwen3-30b-a3b-gb300-mxfp8-8gpu": (8, 512, 4096, 5.85491, 44773.361),
    "bridge-cards/qwen3-30b-a3b-gb300-mxfp8-256gpu": (256, 16384, 4096, 5.81862, 45052.607),
    # qwen3-235b-a22b.md pretrain_performance.GB200 (17,905.34 ms) and .GB300 (14,920.84 ms)
    "bridge-cards/qwen3-235b-a22b-gb200-mxfp8-256gpu": (256, 8192, 4096, 17.90534, 7320.274),
    "bridge-cards/qwen3-235b-a22b-gb300-mxfp8-256gpu": (256, 8192, 4096, 14.92084, 8784.492),
    # qwen3-8b.md pretrain.H100: the last ten steps average 25,070.32 ms
    "bridge-cards/qwen3-8b-h100-bf16-16gpu": (16, 1024, 4096, 25.07032, 10456.348),
    # deepseek-v3.md pretrain_performance.H100: 61,756.13 ms a step
    "bridge-cards/deepseek-v3-h100-bf16-1024gpu": (1024, 16384, 4096, 61.75613, 1061.206),
    # deepseek-v3.md pretrain_performance.GB200: 13,841.18 ms a step
    "bridge-cards/deepseek-v3-gb200-mxfp8-256gpu": (256, 4096, 4096, 13.84118, 4734.856),
}


@pytest.mark.parametrize("name", sorted(BRIDGE_CARD_ROWS))
def test_bridge_card_rows_are_their_cards_tokens_per_gpu(name):
    """Each card's figures agree (the batch's tokens over the step on its GPUs are its tokens/s
    per GPU), and the case measures that rate on its GPUs with the card's batch and sequence."""
    gpus, gbs, seq, step_s, per_gpu = BRIDGE_CARD_ROWS[name]
    (case,) = [c for c in _family("megatron-bridge-cards") if c.name == name]
    assert case.measured == pytest.approx(gpus * per_gpu, abs=0.5)
    assert gbs * seq / step_s / gpus == pytest.approx(per_gpu, rel=1e-5)
    training = case.scenario["training"]
    assert (case.scenario["cluster"]["gpus"], training["global_batch"], training["seq_len"]) == (gpus, gbs, seq)
    assert set(BRIDGE_CARD_ROWS) == {c.name for c in _family("megatron-bridge-cards")}


def test_bridge_qwen3_30b_h100_rows_flops_are_megatrons_count():
    """qwen3-30b-a3b.md pretrain_performance.H100: 299.352 model TFLOP/s and 13,011.378 tokens/s per
    GPU, so 299.352e12 / 13,011.378 = 23.0069e9 FLOP a token, Megatron's count for Qwen3-30B-A3B (the
    recipes' test above: 23.0063e9)."""
    assert 299.352e12 / 13011.378 == pytest.approx(23.0063e9, rel=1e-4)


def test_bridge_qwen3_30b_blackwell_rows_run_the_full_iteration_recipe():
    """qwen3-30b-a3b.md: the GB200 and GB300 MXFP8 rows run TP1/PP1/CP1/EP8/ETP1 with "forced
    load balancing, HybridEP, MXFP8, and full-iteration CUDA graphs", MBS 4 on GB200 and 8 on GB300
    (the recipes); their model TFLOP/s over tokens/s per GPU is Megatron's 23.006 GFLOP a token."""
    rows = [c for c in _family("megatron-bridge-cards") if "qwen3-30b-a3b-gb" in c.name]
    assert len(rows) == 3
    for case in rows:
        sc = case.scenario
        par, tr, moe = sc["parallel"], sc["training"], sc["moe"]
        assert (par["tp"], par["pp"], par["ep"], par["etp"]) == (1, 1, 8, 1)
        assert tr["micro_batch"] == (4 if "gb200" in case.name else 8)
        assert tr["cuda_graphs"] == ["full_iteration"] and moe["host_sync"] is False
        assert (moe["dispatcher"], moe["dispatch_sms"], tr["fp8_recipe"]) == ("hybridep", 32, "block")
        assert case.published["tflops_per_gpu"] * 1e12 / case.published["tokens_per_s_per_gpu"] == pytest.approx(
            23.006e9, rel=1e-4
        )


def test_bridge_qwen3_235b_blackwell_rows_run_the_cards_layouts():
    """qwen3-235b-a22b.md: GB200 "TP1/PP8/CP1/EP32/ETP1, VPP3, GBS/MBS 8192/1", GB300
    "TP1/PP4/CP1/EP32/ETP1, GBS/MBS 8192/2" (its recipe's VP 12); the recipes count the embedding
    and the loss as a layer each in the pipeline split (account_for_embedding_in_pipeline_split,
    account_for_loss_in_pipeline_split), so (94 + 2) / (pp x vp) layers a virtual stage, one fewer
    in the first and the last. The GB200 row's 256 microbatches keep it out of the quick set."""
    rows = {c.name: c for c in _family("megatron-bridge-cards") if "qwen3-235b" in c.name}
    expected = {"gb200": (8, 3, 1, 4, True), "gb300": (4, 12, 2, 2, False)}
    assert len(rows) == 2
    for name, case in rows.items():
        pp, vpp, mbs, per_stage, slow = expected[name.split("-")[4]]
        par = case.scenario["parallel"]
        assert (par["tp"], par["pp"], par["vpp"], par["ep"], par["etp"]) == (1, pp, vpp, 32, 1)
        assert case.scenario["training"]["micro_batch"] == mbs and case.slow is slow
        stages = par["layers_per_stage"]
        assert stages == [per_stage - 1] + [per_stage] * (pp * vpp - 2) + [per_stage - 1]
        assert (sum(stages) + 2) / (pp * vpp) == per_stage and sum(stages) == 94


def test_bridge_deepseek_v3_h100_row_runs_the_recipes_layout():
    """deepseek-v3.md pretrain_performance.H100: TP2/PP8/VP4/CP1/EP64/ETP1, GBS/MBS 16384/1. The
    recipe's layout Et|(tt|)*30mL: 32 virtual stages, the first the embedding and one layer, 30 of
    two layers, the last the MTP module and the loss (61 layers)."""
    (case,) = [c for c in _family("megatron-bridge-cards") if c.name == "bridge-cards/deepseek-v3-h100-bf16-1024gpu"]
    par, model = case.scenario["parallel"], case.scenario["model"]
    assert (par["tp"], par["pp"], par["vpp"], par["ep"], par["etp"]) == (2, 8, 4, 64, 1)
    stages = par["layers_per_stage"]
    assert len(stages) == 32 and stages[0] == 1 and stages[-1] == 0 and set(stages[1:-1]) == {2}
    assert sum(stages) == model["layers"] == 61 and model["mtp_layers"] == 1
    assert 1024 // (par["tp"] * par["pp"]) * case.scenario["training"]["micro_batch"] * 256 == 16384


def test_bridge_deepseek_v3_gb200_row_runs_the_full_iteration_recipe():
    """deepseek-v3.md pretrain_performance.GB200: TP1/PP4/VP4/CP1/EP64/ETP1, GBS/MBS 4096/1, with
    reduced-precision optimizer moments; the recipe's full-iteration graphs with the static
    expert-rank capacity; Megatron-Core's default split for 61 layers in 16 virtual stages with the
    MTP layer and the loss last: 15 of 4 layers, then 1."""
    (case,) = [c for c in _family("megatron-bridge-cards") if c.name == "bridge-cards/deepseek-v3-gb200-mxfp8-256gpu"]
    par, tr = case.scenario["parallel"], case.scenario["training"]
    assert (par["tp"], par["pp"], par["vpp"], par["ep"], par["etp"]) == (1, 4, 4, 64, 1)
    assert par["layers_per_stage"] == [4] * 15 + [1] and sum(par["layers_per_stage"]) == 61
    assert (tr["micro_batch"], tr["global_batch"], tr["optimizer_moments"]) == (1, 4096, "bf16")
    assert tr["cuda_graphs"] == ["full_iteration"] and case.scenario["moe"]["host_sync"] is False


def test_bridge_qwen3_8b_h100_row_runs_the_library_recipe():
    """qwen3-8b.md pretrain.H100: TP1/PP1/CP1, DP16, GBS/MBS 1024/1 (64-way accumulation). The recipe
    passes no comm_overlap config (recipes/common.py _pretrain_common: comm_overlap=None), so the
    buckets are Megatron-Core's own, and it checks the gradients for NaN (ddp.check_for_nan_in_grad
    True)."""
    (case,) = [c for c in _family("megatron-bridge-cards") if "qwen3-8b" in c.name]
    sc = case.scenario
    assert sc["training"]["micro_batch"] == 1
    assert sc["cluster"]["gpus"] // (sc["parallel"]["tp"] * sc["parallel"]["pp"] * sc["parallel"]["cp"]) == 16
    assert sc["dp"] == {"nan_check": True, "bucket_mb": "megatron-core"}


def test_deepseek_v3_gb200_row_is_the_guides_tflops_over_megatrons_mla_flop_count():
    """NVIDIA/Megatron-LM's DeepSeek-V3 GB200 optimization guide, summary table's last row: 970.01
    TFLOP/s per GPU on 256 GB200. Megatron-LM's num_floating_point_operations, multi-latent branch,
    per token 6 x [61 attention terms + MLP + logits]: per layer the query LoRA
    1536 (7168 + 128 x 192 + 1), the key/value LoRA 512 (7168 + 128 x 256 + 1), the rope key
    7168 x 64, the output 128 x 128 x 7168 and the causal scores 4096 x 128 x (192 + 128) / 2;
    3 dense SwiGLU layers of 18,432 and 58 MoE layers of 8 routed plus 1 shared expert of 2,048;
    logits over 129,280: 249.81 GFLOP, so 3,883.0 tokens/s per GPU."""
    attn = (1536 * (7168 + 128 * 192 + 1) + 512 * (7168 + 128 * 256 + 1) + 7168 * 64 + 128 * 128 * 7168
            + 4096 * 128 * (192 + 128) / 2)  # fmt: skip
    per_token = 6 * (61 * attn + 7168 * 3 * (18432 * 3 + 2048 * 9 * 58) + 7168 * 129280)
    assert per_token == pytest.approx(249.812e9, rel=1e-5)
    (case,) = [c for c in _family("megatron-moe-recipes") if "deepseek-v3" in c.name]
    assert case.published["tflops_per_gpu"] == 970.01
    assert case.measured / 256 == pytest.approx(970.01e12 / per_token, rel=1e-5)
    assert case.measured / 256 == pytest.approx(3883.0, abs=0.5)


def test_swissai_rows_are_the_pull_requests_tokens_at_two_million_tokens_a_step():
    """swiss-ai/Megatron-LM pull request 33: ~8000 / ~8290 / ~8840 tokens/s/GPU on 64 Alps nodes
    (256 GH200); the 2M-token batch of pull request 29 puts one microbatch on each rank."""
    published = {(2, 4, 4096): 8000, (1, 1, 8192): 8290, (1, 2, 4096): 8840}
    cases = _family("swissai-gh200")
    assert len(cases) == len(published)
    for c in cases:
        sc = c.scenario
        par, tr = sc["parallel"], sc["training"]
        gpus = sc["cluster"]["gpus"]
        assert (gpus, sc["cluster"]["hardware"]) == (256, "alps-gh200")
        tokens_per_gpu = published[(par["tp"], tr["micro_batch"], tr["seq_len"])]
        assert c.measured == tokens_per_gpu * gpus, c.name
        assert tr["global_batch"] * tr["seq_len"] == 2 * 1024 * 1024, c.name
        assert tr["global_batch"] == (gpus // par["tp"]) * tr["micro_batch"], c.name


def test_mlperf_steps_are_the_logs_blocks_and_stay_out_of_the_quick_set():
    """MLPerf Training result logs (mlcommons/training_results_v3.1, _v4.0, _v5.1; forks of _v4.1
    and _v5.0): a block_start/block_stop pair brackets one evaluation interval whose epoch_count is its
    tokens (GPT-3; Llama 3.1 405B: samples_count grows by its samples), so the step is (the two
    blocks' ms) / (2 x block tokens / (global batch x sequence)); the global batch is MINIBS x dp
    (the configs' README: miniBS = GBS // DP; the 405B configs: DGXNNODES x MINIBS / 16), e.g. v3.1
    at 512 nodes: 16 x 4096 / 32 = 2048, 12 steps a block of 50331648 tokens, (19498 + 19529) / 24 =
    1626.1 ms; v5.0 405B at 64 nodes: 288 x 4 = 1152, 40 steps a block of 46080 samples, (2207989 +
    2209515) / 80 = 55219 ms. Every case is marked slow, so validate --quick (and its ratchet)
    leaves both families out."""
    minibs = {"mlperf-v3.1/gpt3-175b-4096xh100": 16, "mlperf-v3.1/gpt3-175b-8192xh100": 16,
              "mlperf-v3.1/gpt3-175b-10752xh100": 8, "mlperf-v4.0/gpt3-175b-512xh100": 144,
              "mlperf-v4.0/gpt3-175b-10752xh100": 6, "mlperf-v4.1/gpt3-175b-11616xh100": 6,
              "mlperf-v4.1/gpt3-175b-256xh100": 256, "mlperf-v4.1/gpt3-175b-512xh100": 128,
              "mlperf-v4.1/gpt3-175b-64xb200": 1024, "mlperf-v5.0/llama31-405b-512xh100": 288,
              "mlperf-v5.0/llama31-405b-2048xh100": 72, "mlperf-v5.0/llama31-405b-2432xh100": 64,
              "mlperf-v5.1/llama31-8b-72xgb300": 1, "mlperf-v5.1/llama31-8b-512xgb300": 1,
              "mlperf-v5.1/llama31-8b-72xgb200": 1, "mlperf-v5.1/llama31-8b-512xgb200": 1,
              # other submitters: MINIBS in their configs (Dell's log: micro_batch_size 2, GBS 32)
              "mlperf-v5.1/llama31-8b-64xh200-hpe": 1, "mlperf-v5.1/llama31-8b-16xb200-dell": 2,
              "mlperf-v5.1/llama31-8b-64xb200-oracle": 1, "mlperf-v5.1/llama31-8b-72xgb300-lambda": 1,
              "mlperf-v5.0/llama31-405b-512xh200-nebius": 144, "mlperf-v5.0/llama31-405b-1024xh200-nebius": 72,
              "mlperf-v5.1/llama31-405b-256xb200-uf": 144, "mlperf-v5.1/llama31-405b-448xb200-uf": 144,
              "mlperf-v5.1/llama31-405b-512xgb200-nvfp4": 144, "mlperf-v5.1/llama31-405b-512xgb300-nvfp4": 72,
              "mlperf-v5.1/llama31-405b-2560xgb200-nvfp4": 24, "mlperf-v5.1/llama31-405b-5120xgb200-nvfp4": 16}
    cases = {c.name: c for c in _family("mlperf-training-h100") + _family("mlperf-training-blackwell")}
    assert set(cases) == set(minibs)
    for name, c in cases.items():
        sc, pub = c.scenario, c.published
        par, tr = sc["parallel"], sc["training"]
        dp = sc["cluster"]["gpus"] // (par["tp"] * par["pp"] * par.get("cp", 1))
        assert tr["global_batch"] == pub["global_batch"] == minibs[name] * dp, name
        steps = pub["block_tokens"] / (tr["global_batch"] * tr["seq_len"])
        assert steps == int(steps), name  # an evaluation interval is whole steps
        step = sum(pub["blocks_ms"]) / 1000 / (len(pub["blocks_ms"]) * steps)
        if "step_time_sums_s" in pub:
            # the per-step lines' sums: each block_stop comes after time the log gives the next
            # eval, so the blocks run longer than their steps (by 0.3 s at 512 GPUs, 5.3 at 5,120)
            within = sum(pub["step_time_sums_s"]) / (len(pub["blocks_ms"]) * steps)
            assert 0 < step - within < 0.2 * within, name
            step = within
        assert c.measured == pytest.approx(step, rel=1e-5), name  # six digits as written
        assert c.slow, name
    assert cases["mlperf-v3.1/gpt3-175b-4096xh100"].measured == pytest.approx(1.62613, abs=1e-5)
    assert cases["mlperf-v5.0/llama31-405b-512xh100"].measured == pytest.approx(55.2188, abs=1e-4)
    assert cases["mlperf-v4.1/gpt3-175b-64xb200"].scenario["cluster"]["hardware"] == "dgx-b200"
    # v5.1 Llama 3.1 8B (mlcommons/training_results_v5.1): 342 steps of 36 x 8192 tokens a block at
    # 72 GPUs, (50589 + 50594) / 684 = 147.928 ms; 192 steps of 64 at 512, (16616 + 16631) / 384
    assert cases["mlperf-v5.1/llama31-8b-72xgb300"].measured == pytest.approx(0.147928, abs=1e-5)
    assert cases["mlperf-v5.1/llama31-8b-512xgb300"].measured == pytest.approx(0.0865807, abs=1e-5)
    for name in ("72xgb300", "512xgb300", "72xgb200", "512xgb200"):
        sc = cases[f"mlperf-v5.1/llama31-8b-{name}"].scenario
        assert sc["cluster"]["hardware"] == ("gb300-nvl72" if "gb300" in name else "gb200-nvl72")
        assert sc["training"]["seq_len"] == 8192 and sc["parallel"]["pp"] == 1, name
    # NVTE_ASYNC_AMAX_REDUCTION=1 and NVTE_DP_AMAX_REDUCE_INTERVAL=0 (v3.1's config_common.sh, as
    # aws-samples/awsome-distributed-training @ad9afb3 redistributes it) were read by
    # TransformerEngine up to 1.5 (v3.1 pins 09ba842), dropped in 1.6 (v4.0 pins 1.6rc1): only the
    # v3.1 rows reduce amaxes asynchronously, over the TP group
    for name, c in cases.items():
        tr = c.scenario["training"]
        v31 = name.startswith("mlperf-v3.1/")
        assert tr.get("fp8_amax_async", False) is v31 and tr.get("tp_only_amax_red", False) is v31, name
    # v5.0's pretrain.py (prishajain1/training_results_v5.0 @0fdc28f): DistributedDataParallelConfig
    # (check_for_nan_in_grad=True, grad_reduce_in_fp32=False) and ASYM_PP_EMBED / ASYM_PP_LOSS as
    # Megatron's account_for_embedding/loss_in_pipeline_split: 126 + 2 layers over pp 8 x vp 8, two
    # a virtual stage, the first and the last one
    for name, c in cases.items():
        if name.startswith("mlperf-v5.0/"):
            sc = c.scenario
            assert sc["dp"]["nan_check"] and sc["training"]["fp32_grad_accum"] is False, name
            assert sc["parallel"]["embedding_in_split"] and sc["parallel"]["loss_in_split"], name
            split = megatron_accounted(126, sc["parallel"]["pp"], sc["parallel"]["vpp"], True, True, name)
            assert split[0] == split[-1] == 1 and set(split[1:-1]) == {2}, name
    # (the AMD MLPerf family, one 8-GPU node, is in the quick set: test_mlperf_amd_step_is_the_logs_blocks...)
    assert not any(c.family in ("mlperf-training-h100", "mlperf-training-blackwell") for c in load_cases(quick=True))
    # defer_embedding_wgrad_compute as each run set it: the v4.1 H100 configs'
    # WGRAD_DEFERRAL_LIMIT=65, v5.0 config_common.sh's 50, and custom.yaml's default (on with
    # PP > 1, MINIBS <= 256 and MBS 1, limit 0) for the MINIBS 6 runs; the B200 config (MINIBS
    # 1024, MBS 2), v4.0's MBS 2 run and v3.1 defer nothing
    deferral = {name: (c.scenario["parallel"].get("defer_head_wgrad", False),
                       c.scenario["parallel"].get("head_wgrad_deferral_limit", 0)) for name, c in cases.items()}
    assert {name: limit for name, (on, limit) in deferral.items() if on} == {
        "mlperf-v4.0/gpt3-175b-10752xh100": 0, "mlperf-v4.1/gpt3-175b-11616xh100": 0,
        "mlperf-v4.1/gpt3-175b-256xh100": 65, "mlperf-v4.1/gpt3-175b-512xh100": 65,
        "mlperf-v5.0/llama31-405b-512xh100": 50, "mlperf-v5.0/llama31-405b-2048xh100": 50,
        "mlperf-v5.0/llama31-405b-2432xh100": 50, "mlperf-v5.0/llama31-405b-512xh200-nebius": 50,
        "mlperf-v5.0/llama31-405b-1024xh200-nebius": 50,
    }  # fmt: skip
    # v5.0's config_common.sh sets OVERLAP_PARAM_GATHER_WITH_OPTIM_STEP=True, which pretrain.py hands to
    # NeMo's comm-overlap callback: Megatron-Core's get_model then buckets no model chunk
    assert all(c.scenario["dp"]["bucket_stages"] == "none" for n, c in cases.items() if n.startswith("mlperf-v5.0/"))


def test_dgxc_cases_are_the_published_step_times_and_layouts():
    """NVIDIA dgxc-benchmarking rows: the measured step is the README's; the global batch is
    dp x micro-batch x gradient accumulation with the README's GA (8B: 32, 70B: 64, 405B: 64 at
    512 GPUs, Nemotron-4 15B: 4, GPT-3 175B: 64 at 128 GPUs, Nemotron-4 340B: 16 at 128 GPUs),
    dp = gpus / (tp pp cp)."""
    ga = {"dgxc/llama3-8b-bf16-8gpu": 32, "dgxc/llama3-70b-bf16-64gpu": 64,
          "dgxc/llama3.1-405b-bf16-512gpu": 64, "dgxc/nemotron4-15b-bf16-16gpu": 4,
          "dgxc/gpt3-175b-bf16-128gpu": 64, "dgxc/nemotron4-340b-bf16-128gpu": 16,
          "dgxc/nemotron4-340b-fp8-128gpu": 16, "dgxc-25.04/nemotron4-340b-bf16-256gpu": 16,
          "dgxc-25.04/nemotron4-15b-bf16-16gpu": 4}
    cases = {c.name: c for c in _family("nvidia-dgxc-h100")}
    for c in cases.values():
        assert c.measured == c.published["step_time_s"], c.name
    for name, accumulation in ga.items():
        sc = cases[name].scenario
        par, tr = sc["parallel"], sc["training"]
        dp = sc["cluster"]["gpus"] // (par["tp"] * par["pp"] * par["cp"])
        assert dp * tr["micro_batch"] * accumulation == tr["global_batch"], name


def test_dgxc_nemotron4_step_times_give_the_published_mfu():
    """dgxc-benchmarking's Nemotron-4 340B MFU = GBS x FLOPs per sequence / step / GPUs / peak (H100
    989 BF16, 1979 FP8 TFLOP/s). README_340b.md (35a9aec, NeMo 24.09): 1.01e16 per 4096-token
    sequence, 4096 x (24 L h^2 + 12 L h s + 48 L h^2 + 6 V h) at L 96, h 18432, V 256000: 55.38%
    (BF16, 128 GPUs), 52.75% (BF16, 2048), 40.38% (FP8, 128). nemotron/README.md (dc1028f, NeMo
    25.04): 8.62124e15 per 340B sequence, 47.3% (BF16, 256), 35% (FP8, 256); 3.85e14 per 15B
    sequence, 56.7% (BF16, 16), 39.1% (FP8, 16). Each case's step, batch and GPU count give it."""
    L, h, s, V = 96, 18432, 4096, 256000
    assert s * (24 * L * h**2 + 12 * L * h * s + 48 * L * h**2 + 6 * V * h) == pytest.approx(1.01e16, rel=5e-3)
    # name: FLOPs per sequence, MFU % as printed, half its last printed digit
    published = {"dgxc/nemotron4-340b-bf16-128gpu": (1.01e16, 55.38, 0.005),
                 "dgxc/nemotron4-340b-bf16-2048gpu": (1.01e16, 52.75, 0.005),
                 "dgxc/nemotron4-340b-fp8-128gpu": (1.01e16, 40.38, 0.005),
                 "dgxc-25.04/nemotron4-340b-bf16-256gpu": (8.62124e15, 47.3, 0.05),
                 "dgxc-25.04/nemotron4-340b-fp8-256gpu": (8.62124e15, 35, 0.5),
                 "dgxc-25.04/nemotron4-15b-bf16-16gpu": (3.85e14, 56.7, 0.05),
                 "dgxc-25.04/nemotron4-15b-fp8-16gpu": (3.85e14, 39.1, 0.05)}
    peak = {"bf16": 989e12, "fp8": 1979e12}
    cases = {c.name: c for c in _family("nvidia-dgxc-h100")}
    for name, (flops, mfu, rounding) in published.items():
        p = cases[name].published
        got = 100 * p["global_batch"] * flops / p["step_time_s"] / p["gpus"] / peak[p["precision"]]
        assert got == pytest.approx(mfu, abs=rounding), name


def test_grok1_step_times_give_the_published_mfu():
    """dgxc-benchmarking grok1/README.md: MFU = GBS x 4.27e15 (its model FLOPs per 8192-token
    sequence, L=64, h=6144, top-2 of 8 experts of 32768) / step / GPUs / peak, with its peaks
    GB200 2.45 / 4.9 PFLOP/s and H100 989 / 1979 TFLOP/s (BF16 / FP8). Each row's step time,
    GBS and GPU count reproduce its published MFU to the README's rounding; dp x micro-batch x
    its GA column (GB200 8, H100 128) is the GBS."""
    peaks = {("GB200", "bf16"): 2.45e15, ("GB200", "fp8"): 4.9e15, ("H100", "bf16"): 989e12, ("H100", "fp8"): 1979e12}
    accumulation = {"GB200": 8, "H100": 128}
    # the README's breakdown: 8192 * (attention 53,150,220,288 + MLP 463,856,467,968 + embedding
    # 4,728,029,184) = 4.27e15
    assert 8192 * (53_150_220_288 + 463_856_467_968 + 4_728_029_184) == pytest.approx(4.27e15, rel=2e-3)
    cases = _family("nvidia-dgxc-grok1")
    assert len(cases) == 8
    for c in cases:
        p, sc = c.published, c.scenario
        assert c.measured == p["step_time_s"], c.name
        mfu = p["global_batch"] * 4.27e15 / p["step_time_s"] / p["gpus"] / peaks[(p["system"], p["precision"])]
        # 0.1 points: the README's H100 rows round the unrounded 4.274e15 (32.16 -> 32.2)
        assert 100 * mfu == pytest.approx(p["mfu_pct"], abs=0.1), c.name
        par, tr = sc["parallel"], sc["training"]
        dp = sc["cluster"]["gpus"] // (par["tp"] * par["pp"] * par["cp"])
        assert dp * tr["micro_batch"] * accumulation[p["system"]] == tr["global_batch"], c.name


def test_nanotron_tokens_follow_nanotron_flops():
    # nanotron get_flops (MHA, SwiGLU): forward per token = l*(8h^2 + 4sh + 6h*ffn) + 2hV, x3.
    for c in _family("nanotron-h100"):
        m, s = c.scenario["model"], c.published["seq_len"]
        h, layers, ffn, vocab = m["hidden"], m["layers"], m["ffn"], m["vocab"]
        per_token = 3 * (layers * (8 * h * h + 4 * s * h + 6 * h * ffn) + 2 * h * vocab)
        expected = c.published["mfu_pct"] / 100 * H100_BF16_PEAK * c.published["gpus"] / per_token
        assert c.measured == pytest.approx(expected, rel=1e-5), c.name


def test_torchtitan_tokens_follow_torchtitans_mfu():
    # torchtitan train.py of that time: flops per token = 6 * params (embedding included) +
    # 12 * layers * heads * head_dim * seq; MFU against the A100's 312 TFLOP/s dense BF16.
    from simcluster.model import build_model

    for c in _family("torchtitan-a100"):
        p, m = c.published, c.scenario["model"]
        assert c.measured == p["wps_per_gpu"] * p["gpus"]
        params = build_model(m).params_total()
        per_token = 6 * params + 12 * m["layers"] * m["hidden"] * p["seq_len"]
        assert p["wps_per_gpu"] * per_token / 312e12 * 100 == pytest.approx(p["mfu_pct"], abs=0.15), c.name


def test_torchtitan_h200_tokens_are_its_tps_per_gpu_times_the_gpus():
    # torchtitan train.py (e7c0cae): tps = the rank's tokens since the last log / (seconds x the
    # non-data-parallel degree), 1 under FSDP alone, so a GPU's tokens per second; local batch 2 of
    # 8,192 tokens: step time = 16,384 / tps (1.498 s on 32 H200, 1.524 s on 64)
    cases = _family("torchtitan-h200")
    assert [c.published["gpus"] for c in cases] == [32, 64]
    for c in cases:
        p = c.published
        assert c.measured == p["tps_per_gpu"] * p["gpus"]
        assert c.scenario["training"]["global_batch"] == p["local_batch"] * p["gpus"]
    assert 2 * 8192 / cases[0].published["tps_per_gpu"] == pytest.approx(1.498, abs=5e-4)


def test_amd_fsdp_tokens_follow_the_benchmarks_flop_count():
    # AMD-AIG-AIMA/pytorch-training-benchmark llama.py estimate_flops_per_token, Llama 3.1 8B
    # (h 4096, 32 layers, 32 heads, 8 KV heads, ffn 14336, vocab 128256): per token the linears
    # 2 x (3 x 14336 x 4096 + 4096 x 6144 + 4096 x 4096) = 436,207,616 FLOPs a layer, the LM head
    # 2 x 4096 x 128256 = 1,050,673,152, both x 3 for forward and backward; attention 3 x 4 s h a
    # layer, not halved for causality. At s = 8192: 3 x (32 x 436,207,616 + 1,050,673,152) +
    # 3 x 32 x 4 x 8192 x 4096 = 57,912,852,480. The overview's 542.94 TFLOPS/s/GPU on 8 GPUs is
    # then 8 x 542.94e12 / 57,912,852,480 = 75,001 tokens/s.
    by_seq = {8192: 57_912_852_480, 4096: 51_470_401_536}
    rows = _family("amd-fsdp-mi300x")
    assert len(rows) == 4
    for c in rows:
        p = c.published
        assert p["flops_per_token"] == by_seq[p["seq_len"]], c.name
        assert c.measured == pytest.approx(8 * p["tflops_per_gpu"] * 1e12 / by_seq[p["seq_len"]], abs=1.0)  # 6 digits kept
        tr = c.scenario["training"]
        assert tr["global_batch"] == 8 * 8 * p["batch_per_gpu"] and tr["micro_batch"] == p["batch_per_gpu"]
        assert c.scenario["framework"] == "pytorch-fsdp" and c.scenario["cluster"]["hardware"] == "amd-mi300x"
    first = next(c for c in rows if c.name == "amd-fsdp/llama31-8b-bf16-s8192-b3-8xmi300x")
    assert first.measured == pytest.approx(75_001.0, abs=0.5)
    # the page's MI325X table: the same code on a 1,000 W MI325X node with larger batches where they
    # fit, e.g. FP8 8K at batch 5: 8 x 893.68e12 / 57,912,852,480 = 123,452 tokens/s
    rows = _family("amd-fsdp-mi325x")
    assert sorted((c.published["precision"], c.published["seq_len"], c.published["batch_per_gpu"]) for c in rows) == [
        ("bf16", 4096, 8), ("bf16", 8192, 3), ("fp8", 4096, 10), ("fp8", 8192, 5)]
    for c in rows:
        p = c.published
        assert c.measured == pytest.approx(8 * p["tflops_per_gpu"] * 1e12 / by_seq[p["seq_len"]], abs=1.0)
        assert c.scenario["cluster"]["hardware"] == "amd-mi325x"
    fp8 = next(c for c in rows if c.name == "amd-fsdp/llama31-8b-fp8-s8192-b5-8xmi325x")
    assert fp8.measured == pytest.approx(123_452.0, abs=0.5)


def test_mlperf_amd_step_is_the_logs_blocks_and_its_config():
    """AMD's MLPerf Training v5.1 Llama 3.1 8B log (mlcommons/training_results_v5.1,
    AMD/results/MI355X_EPYC_9575F_pytorch/llama31_8b/result_0.txt): the last two blocks of 12,288
    samples, 384 steps of GBS 32, last (1759971544582 - 1759971144322) = 400,260 and
    (1759971954839 - 1759971554411) = 400,428 ms, so (400260 + 400428) / 768 = 1042.56 ms a step;
    config_MI355X_1x8x1_8b.sh: MBS 2 on dp 8 (2 microbatches), FP8 delayed scaling, the
    distributed optimizer with neither overlap, AITER's attention with bf16 dQ atomics. One node:
    fast enough for the quick set."""
    (c,) = _family("mlperf-training-amd")
    pub, sc = c.published, c.scenario
    steps = pub["block_tokens"] / (pub["global_batch"] * pub["seq_len"])
    assert steps == 384 and pub["blocks_ms"] == [400260, 400428]
    assert c.measured == pytest.approx(1.04256, abs=1e-5) and not c.slow
    tr = sc["training"]
    assert (tr["micro_batch"], tr["global_batch"], tr["fp8_recipe"], tr["attention_kernel"]) == (2, 32, "delayed", "ck-a16")
    assert sc["cluster"] == {"hardware": "amd-mi355x", "gpus": 8, "nccl_min_ctas": 32}
    assert sc["overlap"] == {"dp_grad_reduce": False, "param_gather": False, "tp_comm": False}


def test_mlperf_lora_rows_are_their_logs_steps():
    """MLPerf Training llama2_70b_lora: AMD's v5.1 logs print tracked_stats throughput (samples/s
    = 8 / the step; MI355X's last two 5.875013494167505 and 5.874360352283764, so 1.36177 s a
    step); NVIDIA's v5.0 logs their train_step_time (DGX B200: 1.5408691637135234 and
    1.5421426771663391 s). All: global batch 8 = MINIBS 1 x dp 8, sequence 8192, FP8 with frozen
    FP8 weights, rank-16 adapters on QKV and the output projection with dropout 0.1; AMD's
    MI300X config alone recomputes (ACL=21 layers) and AMD's configs keep no transpose cache.
    NVIDIA's run FP8 attention (FP8_DPA=1 in the v5.0 config_common.sh copies and in v4.0's), keep
    the SwiGLU input in FP8 in v5.0 (FP8_ACT=1: activation_func_fp8_input_store) and the unfused
    loss (train.py's cross_entropy_loss_fusion=False; v4.0's yaml has no fusion key); AMD's
    FP8_ACTIVATION reaches no code (a yaml key that is no TransformerConfig field). NVIDIA's v4.0
    DGX H100 row (config_DGXH100_1x8x4xtp4pp1cp1.sh): tp 4 with sequence parallelism and
    userbuffers, the adapters' all-to-all (LORA_A2A=1), 8 / (2.154987 + 2.155219) x 2 = 3.71212 s."""
    fp8 = [c for c in _family("mlperf-lora-70b") if c.scenario["training"]["precision"] == "fp8"
           and not c.name.endswith("-fp8")  # the partners' v5.1 FP8 row: its own test
           and not c.name.startswith("mlperf-v4.1/")]  # the v4.1 H200 rows: their own test
    rows = {c.scenario["cluster"]["hardware"]: c for c in fp8}
    assert len(rows) == len(fp8) == 6
    for hardware, c in rows.items():
        if hardware.startswith("amd"):
            thr = c.published["throughput_samples_per_s"]
            assert c.measured == pytest.approx(8 / (sum(thr) / 2), abs=1e-5)
            assert c.scenario["training"]["fp8_weight_cache"] is False
    assert rows["amd-mi355x"].measured == pytest.approx(1.36177, abs=1e-5)
    for nvidia in (rows["dgx-b200"], rows["gb200-nvl72"]):
        assert nvidia.measured == pytest.approx(sum(nvidia.published["train_step_time_s"]) / 2, abs=1e-5)
    mi300x = rows["amd-mi300x"].scenario["training"]
    assert (mi300x["recompute"], mi300x["recompute_num_layers"]) == ("full", 21)
    h100 = rows["dgx-h100"]
    assert h100.measured == pytest.approx(8 / (sum(h100.published["throughput_samples_per_s"]) / 2), abs=1e-5)
    assert h100.scenario["parallel"]["tp"] == 4 and h100.scenario["parallel"]["sequence_parallel"]
    assert h100.scenario["lora"]["a2a"] and h100.scenario["overlap"]["tp_comm"]
    # the yaml's tp_comm_disable_qkv: True, a core_v0.7.0 ModelParallelConfig field of that name
    assert h100.scenario["overlap"]["tp_comm_disable_qkv"] and "tp_comm_rs_dgrad" not in h100.scenario["overlap"]
    for hardware, c in rows.items():
        amd = hardware.startswith("amd")
        kernel, zero = ("ck-a16", 0) if amd else ("cudnn", 0 if hardware == "dgx-h100" else 1)
        if hardware in ("gb200-nvl72", "dgx-b200"):  # v5.0's container: cuDNN 9.9.0, nearest 9.10.2
            kernel = "cudnn-9.10"
        sc = c.scenario
        tr = sc["training"]
        # v5.0's FP8_ACT=1; v4.0 sets no FP8_ACTIVATION, AMD's reaches no code
        assert tr.get("activation_fp8_store", False) is (not amd and hardware != "dgx-h100")
        assert tr.get("fp8_attention", False) is (not amd)
        assert tr["fused_cross_entropy"] == ("native" if amd else False)
        # LORA_A2A=1 everywhere; written where it acts (tp > 1 with sequence parallelism)
        assert sc["lora"] == {"rank": 16, "targets": ["qkv", "proj"], "dropout": 0.1} | (
            {"a2a": True} if hardware == "dgx-h100" else {})
        assert sc["parallel"]["zero"] == zero
        tr = sc["training"]
        assert (tr["micro_batch"], tr["global_batch"], tr["seq_len"]) == (1, 8, 8192)
        assert (tr["precision"], tr["fp8_param_gather"], tr["attention_kernel"]) == ("fp8", True, kernel)
        assert (tr["recompute"] == "none") == (hardware != "amd-mi300x") and not c.slow


def test_v41_h200_lora_rows_run_nvidia_v41_config_at_cp_2():
    """MLPerf Training v4.1 llama2_70b_lora on one node of 8 H200 (NVIDIA's h200_ngc24.09_nemo,
    Dell's XE9680 and Lenovo's SR685a V3 runs of config_DGXH200_1x8x2xtp1pp1cp2.sh): global batch
    MINIBS 2 x 8 / (TP 1 x PP 1) / CP 2 = 8, so dp 4 and 2 accumulation steps; step = 8 / the mean
    of the last two tracked_stats throughputs (NVIDIA 2.471431 and 2.471846 samples/s: 3.23672 s);
    FP8_DPA=0 (16-bit attention), FP8_ACTIVATION=True, the yaml's mcore_distributed_optim with
    both overlaps and no transpose cache, the unfused loss, no CUDA graphs."""
    rows = {c.name: c for c in _family("mlperf-lora-70b") if c.name.startswith("mlperf-v4.1/") and "h200" in c.name}
    assert sorted(rows) == ["mlperf-v4.1/llama2-70b-lora-8xh200", "mlperf-v4.1/llama2-70b-lora-dell-8xh200",
                            "mlperf-v4.1/llama2-70b-lora-lenovo-8xh200"]
    assert rows["mlperf-v4.1/llama2-70b-lora-8xh200"].measured == pytest.approx(3.23672, abs=1e-5)
    for c in rows.values():
        sc, tr = c.scenario, c.scenario["training"]
        thr = c.published["throughput_samples_per_s"]
        assert c.measured == pytest.approx(8 / (sum(thr) / 2), abs=1e-5) and not c.slow
        assert sc["cluster"]["hardware"] == "dgx-h200" and sc["cluster"]["gpus"] == 8
        p = sc["parallel"]
        assert (p["tp"], p["pp"], p["cp"], p["zero"]) == (1, 1, 2, 1) and "cp_comm" not in p
        dp = 8 // (p["tp"] * p["pp"] * p["cp"])
        assert (tr["micro_batch"], tr["global_batch"], tr["global_batch"] // (tr["micro_batch"] * dp)) == (1, 8, 2)
        assert (tr["precision"], tr["fp8_recipe"], tr["fp8_param_gather"]) == ("fp8", "delayed", True)
        assert tr.get("fp8_attention", False) is False and tr["activation_fp8_store"] is True
        assert tr["fp8_weight_cache"] is False and tr["fused_cross_entropy"] is False
        assert "cuda_graphs" not in tr and tr["recompute"] == "none"
        assert sc["overlap"] == {"dp_grad_reduce": True, "param_gather": True, "tp_comm": False}
        assert sc["lora"] == {"rank": 16, "targets": ["qkv", "proj"], "dropout": 0.1}


def test_v41_h100_lora_rows_run_nvidia_v41_config_at_tp_4():
    """MLPerf Training v4.1 llama2_70b_lora on one DGX H100 (NVIDIA's eos_ngc24.09_nemo,
    Supermicro's AS-8125GS-TNHR and Dell's XE9680 runs of config_DGXH100_1x8x4xtp4pp1cp1.sh): tp 4
    with sequence parallelism, MINIBS 4 x 8 / TP 4 = 8, so dp 2 and 4 accumulation steps; step = 8 /
    the mean of the last two tracked_stats throughputs (NVIDIA 2.169706 and 2.170172 samples/s:
    3.68674 s). v4.1 differs from v4.0's config in MC_TP_OVERLAP_RS_DGRAD=True with fc1_dgrad a
    1-SM ring exchange (h100tp4mbs1.yaml) and the distributed optimizer; tp_comm_overlap_disable_qkv
    stays true (Supermicro's log prints both)."""
    rows = {c.name: c for c in _family("mlperf-lora-70b") if c.name.startswith("mlperf-v4.1/") and "h100" in c.name}
    assert sorted(rows) == ["mlperf-v4.1/llama2-70b-lora-8xh100", "mlperf-v4.1/llama2-70b-lora-dell-8xh100",
                            "mlperf-v4.1/llama2-70b-lora-supermicro-8xh100"]
    assert rows["mlperf-v4.1/llama2-70b-lora-8xh100"].measured == pytest.approx(3.68674, abs=1e-5)
    for c in rows.values():
        sc, tr, ov = c.scenario, c.scenario["training"], c.scenario["overlap"]
        thr = c.published["throughput_samples_per_s"]
        assert c.measured == pytest.approx(8 / (sum(thr) / 2), abs=1e-5) and not c.slow
        p = sc["parallel"]
        assert (p["tp"], p["pp"], p["cp"], p["zero"], p["sequence_parallel"]) == (4, 1, 1, 1, True)
        assert (tr["micro_batch"], tr["global_batch"], tr["global_batch"] // (tr["micro_batch"] * 2)) == (1, 8, 4)
        assert tr["fp8_attention"] is True and "activation_fp8_store" not in tr and tr["fp8_weight_cache"] is False
        assert ov["tp_comm"] and ov["tp_comm_rs_dgrad"] and ov["tp_comm_disable_qkv"]
        assert ov["tp_comm_cfg"]["fc1_dgrad"] == {"method": "ring_exchange", "num_sm": 1, "set_sm_margin": True}
        assert ov["tp_comm_cfg"]["qkv_dgrad"]["method"] == "bulk" and ov["dp_grad_reduce"] and ov["param_gather"]
        # h100tp4mbs1.yaml: atomic_gemm ${NVTE_UB_ATOMIC_GEMM_RS_PROJ,1} / _FC2,1 (unset by the configs),
        # proj_fprop fp8_buf 1, fc2_fprop fp8_buf 0
        proj, fc2 = ov["tp_comm_cfg"]["proj_fprop"], ov["tp_comm_cfg"]["fc2_fprop"]
        assert proj["atomic_gemm"] and fc2["atomic_gemm"] and proj["fp8_buf"] and "fp8_buf" not in fc2
        assert sc["lora"] == {"rank": 16, "targets": ["qkv", "proj"], "dropout": 0.1, "a2a": True}


def test_bloom_logged_tflops_follow_narayanans_formula_with_recompute():
    # Megatron-DeepSpeed logs TFLOPs = 96*B*s*l*h^2*(1+s/(6h)+V/(16*l*h)) / (t * gpus) (eq. 3 of
    # Narayanan et al. 2021 with the recompute forward, bigscience math/README.md): each logged
    # pair of seconds and TFLOPs must satisfy it, e.g. 104.70 s on 384 GPUs -> 149.77
    for c in _family("bigscience-a100"):
        p = c.published
        flops = megatron_flops_per_step(p["global_batch"], p["seq_len"], p["layers"], p["hidden"], p["vocab"],
                                        recompute=True)
        assert flops / (c.measured * p["gpus"] * 1e12) == pytest.approx(p["tflops_per_gpu"], abs=0.02), c.name
        assert c.measured == p["seconds_per_iteration"]


def test_zero_bubble_tokens_are_samples_times_gpus_times_seq():
    for c in _family("zero-bubble-a100") + _family("zero-bubble-v-a100"):
        p = c.published
        assert c.measured == pytest.approx(p["samples_per_gpu_per_s"] * p["gpus"] * 1024, rel=1e-5)
        assert c.scenario["cluster"]["gpus"] == c.scenario["parallel"]["pp"]  # pure pipeline


def test_measured_zero_bubble_table_satisfies_the_ordering():
    # Qi et al. Table 4 itself: ZB-2p > ZB-1p >~ 1F1B-I > 1F1B in all 12 rows (the check's rule).
    fake = [CaseResult(c, c.measured, None, 0.0) for c in _family("zero-bubble-a100")]
    checks = ordering_checks(fake)
    assert len(checks) == 12
    assert all(c.measured_ok and c.predicted_ok for c in checks)
    # Table 6: ZB-1p >~ 1F1B in all 9 rows too (ZB-V is not part of the rule)
    fake = [CaseResult(c, c.measured, None, 0.0) for c in _family("zero-bubble-v-a100")]
    checks = ordering_checks(fake)
    assert len(checks) == 9 and all(c.measured_ok for c in checks)


@pytest.mark.parametrize("model", ["1.5B", "6.2B", "14.6B", "28.3B"])
def test_zero_bubble_compute_per_microbatch_matches_tables_4_and_5(model):
    """Per-microbatch stage compute (F + B + W) implied by Qi et al.: the ZB-2p row with the most
    microbatches (bubble 0.2-0.3%, Table 5) gives step x (1 - bubble) / m, with the step from
    Table 4's throughput. The model's busiest stage lands within 0..+6% of it (fp32 main-gradient
    accumulation modelled additive, the pessimistic bound; without it the model is 3-9% below)."""
    rows = [c for c in _family("zero-bubble-a100") if c.name.startswith(f"zb/{model}-") and "ZB-2p" in c.name]
    row = max(rows, key=lambda c: c.scenario["training"]["global_batch"])
    t = row.scenario["training"]
    m = t["global_batch"] // t["micro_batch"]
    step = t["global_batch"] * t["seq_len"] / row.measured
    implied = step * (1 - row.published["bubble_rate"]) / m
    smallest = dict(row.scenario, training=dict(t, global_batch=min(r.scenario["training"]["global_batch"] for r in rows)))
    modelled = sum(simulate(scenario_from_dict(smallest)).summary["compute_per_microbatch_s"].values())
    assert 0.97 * implied <= modelled <= 1.07 * implied, (modelled, implied)


@pytest.mark.parametrize("model", ["1.5B", "6.2B"])
def test_zero_bubble_peak_memory_matches_table_4(model):
    """Qi et al. Table 4 peak memory (GB) of the m=24 rows, 1F1B / 1F1B-I / ZB-1p / ZB-2p.

    The cases run unfused attention (s^2 scores kept for the backward). With FlashAttention the
    same layouts would store 1.4-2.5x less than the paper measured, so the published memory is
    the evidence for that setting; this test keeps the memory model and the setting honest.
    15% covers the ZB-1p 1.5B row (8.5% below: the automatic schedule's W placement) and the
    GB-or-GiB ambiguity of the table (7%).
    """
    rows = [c for c in _family("zero-bubble-a100") if c.name.startswith(f"zb/{model}-m24-")]
    assert len(rows) == 4
    for c in rows:
        assert c.scenario["training"]["flash_attention"] is False
        peak_gib = simulate(scenario_from_dict(c.scenario)).summary["peak_memory_bytes"]["max"] / 2**30
        assert peak_gib == pytest.approx(c.published["peak_memory_gb"], rel=0.15), c.name


def test_korthikanti_times_are_the_published_iteration_times():
    cases = {c.name: c for c in _family("korthikanti2022-a100")}
    for c in cases.values():
        assert c.measured == c.published["iteration_time_s"]
        assert c.scenario["parallel"]["sequence_parallel"] == (c.published["mode"] == "sel")
    # the paper's abstract: 530B on A100 goes from 42.1% to 54.2% MFU with the present work,
    # "29% faster" -- the two iteration times must say the same
    speedup = cases["korthikanti2022/530B-full"].measured / cases["korthikanti2022/530B-sel"].measured
    assert speedup == pytest.approx(54.2 / 42.1, rel=0.01)


# --- summaries ----------------------------------------------------------------------------
def _case(name: str, measured: float, group: str = "", label: str = "") -> Case:
    return Case(name, "test", "fam", "tokens_per_s", measured, {}, group=group, label=label)


def test_summary_statistics():
    results = [
        CaseResult(_case("a", 100.0), 110.0, None, 0.0),  # +10 %
        CaseResult(_case("b", 100.0), 80.0, None, 0.0),  # -20 %
        CaseResult(_case("c", 100.0), 130.0, None, 0.0),  # +30 %
        CaseResult(_case("d", 100.0), None, "boom", 0.0),
    ]
    assert [r.error_pct for r in results[:3]] == pytest.approx([10.0, -20.0, 30.0])
    s = summarize(results)
    assert s == {
        "n": 3,
        "mape_pct": pytest.approx(20.0),
        "median_ape_pct": pytest.approx(20.0),
        "max_ape_pct": pytest.approx(30.0),
        "speed_bias_pct": pytest.approx(20 / 3),
        "failed": 1,
    }
    # a step time 20% short is a step 25% faster: the bias is in speed, whatever the metric
    fast = CaseResult(Case("s", "t", "fam", "step_time_s", 1.0, {}), 0.8, None, 0.0)
    assert fast.error_pct == pytest.approx(-20.0) and fast.speed_error_pct == pytest.approx(25.0)


def test_ordering_violation_is_reported():
    values = {"ZB-2p": 9.0, "ZB-1p": 10.0, "1F1B-I": 8.0, "1F1B": 7.0}
    results = [CaseResult(_case(k, 1.0, "g", k), v, None, 0.0) for k, v in values.items()]
    (check,) = ordering_checks(results)
    assert not check.predicted_ok and check.violations == ("ZB-2p < ZB-1p",)


@pytest.mark.parametrize(
    "values, violations",
    [
        # Table 6's groups hold ZB-1p and 1F1B only: ZB-1p 20% below 1F1B breaks
        # ZB-1p >~ 1F1B-I > 1F1B, which the check passed for want of a direct ZB-1p/1F1B link
        ({"ZB-1p": 8.0, "1F1B": 10.0}, ("ZB-1p < 1F1B",)),
        # within the 5% that ">~" allows over the skipped 1F1B-I
        ({"ZB-1p": 9.6, "1F1B": 10.0}, ()),
        ({"ZB-2p": 9.0, "1F1B": 10.0}, ("ZB-2p < 1F1B",)),
        ({"ZB-2p": 9.0, "1F1B-I": 10.0, "1F1B": 8.0}, ("ZB-2p < 1F1B-I",)),
    ],
)
def test_ordering_holds_across_labels_a_group_does_not_have(values, violations):
    results = [CaseResult(_case(k, 1.0, "g", k), v, None, 0.0) for k, v in values.items()]
    (check,) = ordering_checks(results)
    assert check.violations == violations and check.predicted_ok == (not violations)


def test_the_ordering_line_prints_each_rule_as_checked():
    """validate printed 'ZB-2p > ZB-1p >~ 1F1B-I > 1F1B' for every group, though Table 6's
    (ZB-V, ZB-1p, 1F1B) are held to ZB-1p >~ 1F1B only (_order_violations: each label a group
    has against the next one it has, 5% over the skipped 1F1B-I). The line names the chains as
    checked, each with its rows; the JSON keeps 'rule' and adds each check's own."""
    fake = [CaseResult(c, c.measured, None, 0.0) for c in _family("zero-bubble-a100") + _family("zero-bubble-v-a100")]
    checks = ordering_checks(fake)
    assert ordering_line(checks) == (
        "schedule ordering reproduced in 21/21 rows: ZB-2p > ZB-1p >~ 1F1B-I > 1F1B in 12/12, ZB-1p >~ 1F1B in 9/9"
    )
    doc = report(fake)["ordering"]
    assert doc["rule"] == "ZB-2p > ZB-1p >~ 1F1B-I > 1F1B (throughput; >~ allows 5%)"  # as before
    assert {c["group"].split("/")[0]: c["rule"] for c in doc["checks"]} == {
        "zb": "ZB-2p > ZB-1p >~ 1F1B-I > 1F1B", "zb-v": "ZB-1p >~ 1F1B",
    }  # fmt: skip
    # a link with no tolerance between the labels a group has stays '>'
    assert checked_rule(["ZB-2p", "1F1B-I", "ZB-V"]) == "ZB-2p >~ 1F1B-I"
    assert checked_rule(["1F1B-I", "1F1B"]) == "1F1B-I > 1F1B"
    assert checked_rule(["ZB-2p", "ZB-1p"]) == "ZB-2p > ZB-1p"
    results = [CaseResult(_case(k, 1.0, "g", k), v, None, 0.0) for k, v in {"ZB-1p": 8.0, "1F1B": 10.0}.items()]
    assert ordering_line(ordering_checks(results)) == "schedule ordering reproduced in 0/1 rows: ZB-1p >~ 1F1B in 0/1"


# --- CLI ----------------------------------------------------------------------------------
def _cases_file(tmp_path, cases):
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump({"cases": cases}))
    return str(path)


def test_cli_failed_case_is_listed_and_others_run(cli, tmp_path):
    good = {
        "name": "good",
        "source": "t",
        "scenario": make_scenario(),
        "measured": {"tokens_per_s": 1e5},
    }
    bad_sc = make_scenario(parallel={"tp": 3})  # 3 does not divide the 8 GPUs
    bad = {"name": "bad", "source": "t", "scenario": bad_sc, "measured": {"tokens_per_s": 1e5}}
    res = cli("validate", _cases_file(tmp_path, [good, bad]), "--json", "--jobs", "1")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["summary"]["failed"] == 1 and doc["summary"]["n"] == 1
    by_name = {c["name"]: c for c in doc["cases"]}
    assert by_name["bad"]["predicted"] is None and by_name["bad"]["error"].startswith("parallel")
    good_row = by_name["good"]
    assert good_row["error_pct"] == pytest.approx(100 * (good_row["predicted"] - 1e5) / 1e5)
    assert set(good_row) >= {"name", "predicted", "measured", "metric", "error_pct"}


def test_cases_written_with_a_preset_name_run_in_worker_processes(cli, tmp_path):
    # ordering the work by size read `model:` as a mapping; a preset name (or any value of the
    # wrong type) must reach the case's own validation instead of a traceback
    named = {"name": "named", "source": "t", "measured": {"tokens_per_s": 1e5},
             "scenario": make_scenario(model="gpt3-13b", cluster={"gpus": "8"})}
    good = {"name": "good", "source": "t", "measured": {"tokens_per_s": 1e5},
            "scenario": make_scenario()}
    res = cli("validate", _cases_file(tmp_path, [named, good]), "--json", "--jobs", "2")
    assert res.code == 0, res.err
    by_name = {c["name"]: c for c in json.loads(res.out)["cases"]}
    assert by_name["good"]["predicted"] > 0
    assert by_name["named"]["predicted"] or by_name["named"]["error"].startswith("cluster.gpus")


def test_cli_compares_published_peak_memory_on_the_side(cli, tmp_path):
    """A case's ``peak_memory_gib`` is compared with the simulated peak (GiB) in its own column
    and summary; the metric's error and MAPE do not change."""
    base = {"source": "t", "scenario": make_scenario(), "measured": {"step_time_s": 1.0}}
    cases = [{"name": "with", "peak_memory_gib": 10.0, **base}, {"name": "without", **base}]
    res = cli("validate", _cases_file(tmp_path, cases), "--json", "--jobs", "1")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    rows = {c["name"]: c for c in doc["cases"]}
    mem = rows["with"]["peak_memory_gib"]
    simulated = simulate(scenario_from_dict(make_scenario())).summary["peak_memory_bytes"]["max"]
    assert mem["predicted"] == pytest.approx(simulated / 2**30)
    assert mem["error_pct"] == pytest.approx(100 * (mem["predicted"] - 10.0) / 10.0)
    assert rows["without"]["peak_memory_gib"]["error_pct"] is None
    assert doc["memory"]["n"] == 1
    assert doc["memory"]["mape_pct"] == pytest.approx(abs(mem["error_pct"]))
    assert doc["summary"]["n"] == 2  # the metric's summary still covers both cases
    table = cli("validate", _cases_file(tmp_path, cases), "--jobs", "1")
    assert "peak memory" in table.out and "/ 10.0" in table.out


def test_cli_reports_the_error_per_gpu_and_the_cases_beyond_25_percent(cli, tmp_path):
    """The issue's targets are per GPU (A100 and H100 cases) and per case (none beyond 25%):
    validate groups by the profile's GPU and names every case whose error exceeds 25%."""
    h100 = simulate(scenario_from_dict(make_scenario())).summary["step_time_s"]
    a100_sc = make_scenario(cluster={"hardware": "dgx-a100", "gpus": 8})
    a100 = simulate(scenario_from_dict(a100_sc)).summary["step_time_s"]
    cases = [
        {"name": "h-close", "source": "t", "scenario": make_scenario(), "measured": {"step_time_s": h100 * 1.05}},
        {"name": "h-far", "source": "t", "scenario": make_scenario(), "measured": {"step_time_s": h100 * 2.0}},
        {"name": "a-close", "source": "t", "scenario": a100_sc, "measured": {"step_time_s": a100 / 0.9}},
    ]
    res = cli("validate", _cases_file(tmp_path, cases), "--json", "--jobs", "1")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    gpus = doc["gpus"]
    assert set(gpus) == {load_profile("dgx-a100").gpu.name, load_profile("dgx-h100").gpu.name}
    assert gpus[load_profile("dgx-a100").gpu.name]["mape_pct"] == pytest.approx(10.0)
    # |1/1.05 - 1| and |1/2 - 1|
    assert gpus[load_profile("dgx-h100").gpu.name]["mape_pct"] == pytest.approx((100 / 21 + 50) / 2)
    assert doc["beyond_25_pct"] == ["h-far"]
    table = cli("validate", _cases_file(tmp_path, cases), "--jobs", "1")
    assert "1 case(s) beyond ±25%: h-far (-50%)" in table.out
    assert "on " + load_profile("dgx-a100").gpu.name in table.out


def test_cli_names_cases_that_do_not_fit_or_leave_the_stack_to_the_defaults(cli, tmp_path):
    """A published run fitted in its GPUs, so a case whose simulated peak exceeds them is missing a
    setting; a case naming no framework and spelling out no stack section runs on simcluster's
    defaults. Both are said under the table and kept in the JSON."""
    capacity = simulate(scenario_from_dict(make_scenario())).summary["capacity_bytes"] / 2**30
    fits = {"name": "fits", "source": "t", "scenario": make_scenario(), "measured": {"step_time_s": 1.0}}
    small = make_scenario(cluster={"hardware": "dgx-h100", "gpus": 8, "memory_gib": 1.0})
    unfit = {"name": "unfit", "source": "t", "scenario": small, "measured": {"step_time_s": 1.0}}
    spelled = {**fits, "name": "spelled", "scenario": make_scenario(overlap={"dp_grad_reduce": False})}
    named = {**fits, "name": "named", "scenario": {**make_scenario(), "framework": "megatron-core"}}
    path = _cases_file(tmp_path, [fits, unfit, spelled, named])
    doc = json.loads(cli("validate", path, "--json", "--jobs", "1").out)
    rows = {c["name"]: c for c in doc["cases"]}
    assert capacity > 1.0
    assert rows["fits"]["fits_in_memory"] is True and rows["unfit"]["fits_in_memory"] is False
    assert rows["named"]["framework"] == "megatron-core" and rows["fits"]["framework"] is None
    table = cli("validate", path, "--jobs", "1").out.replace("\n", " ")
    assert "1 case(s) do not fit in GPU memory as simulated (unfit)" in table
    # 'spelled' sets an overlap section, 'named' a framework: only the other two are bare
    assert "2 case(s) name no framework and set no overlap, dp or zero3 section (fits, unfit)" in table


@pytest.mark.parametrize(
    ("convention", "attention_share"),
    [("megatron", 1.0), ("causal", 0.5), ("6n", 0.0)],
)
def test_flop_conventions_follow_narayanans_closed_form(convention, attention_share):
    """Per token, Narayanan et al. 2021 eq. (3) without recompute is 72lh^2 + 12lhs + 6Vh for a
    GPT layer (4h GeLU MLP, MHA): 12lhs is the attention's score and value matmuls over three
    passes, halved by a causal count and dropped by C = 6N (Kaplan et al. 2020)."""
    from simcluster.flops import convention_factor
    from simcluster.model import build_model

    layers, h, v, s = GPT_LIKE["layers"], GPT_LIKE["hidden"], GPT_LIKE["vocab"], 2048
    megatron = 72 * layers * h * h + 12 * layers * h * s + 6 * v * h
    expected = (72 * layers * h * h + attention_share * 12 * layers * h * s + 6 * v * h) / megatron
    # rel 1e-3: the module counts each layer's 9h bias terms with its weights (72lh^2 does not)
    assert convention_factor(build_model(dict(GPT_LIKE)), s, convention) == pytest.approx(expected, rel=1e-3)


def test_cli_compares_an_mfu_in_the_sources_flop_count(cli, tmp_path):
    """``flops: causal`` (or ``6n``) puts the simulated MFU in the source's count: the same
    tokens/s, fewer FLOPs per token; a tokens/s case is unchanged and says so."""
    base = {"source": "t", "scenario": make_scenario()}
    cases = [
        {"name": "mega", "measured": {"mfu": 0.4}, **base},
        {"name": "causal", "flops": "causal", "measured": {"mfu": 0.4}, **base},
        {"name": "tflops", "flops": "6n", "measured": {"model_tflops_per_gpu": 400}, **base},
        {"name": "tokens", "flops": "6n", "measured": {"tokens_per_s": 1e5}, **base},
    ]
    res = cli("validate", _cases_file(tmp_path, cases), "--json", "--jobs", "1")
    rows = {c["name"]: c for c in json.loads(res.out)["cases"]}
    summary = simulate(scenario_from_dict(make_scenario())).summary
    from simcluster.flops import convention_factor
    from simcluster.model import build_model

    model = build_model(dict(GPT_LIKE))
    assert rows["mega"]["predicted"] == pytest.approx(summary["mfu"])
    assert rows["causal"]["predicted"] == pytest.approx(summary["mfu"] * convention_factor(model, 2048, "causal"))
    assert rows["tflops"]["predicted"] == pytest.approx(
        summary["model_tflops_per_gpu"] * convention_factor(model, 2048, "6n")
    )
    assert rows["tokens"]["predicted"] == pytest.approx(summary["tokens_per_s"])
    assert "flops: 6n does not change a tokens_per_s comparison" in rows["tokens"]["note"]
    bad_case = {"name": "b", "flops": "palm", "measured": {"mfu": 0.4}, **base}
    bad = json.loads(cli("validate", _cases_file(tmp_path, [bad_case]), "--json").out)["cases"][0]
    assert bad["error"].endswith("flops: 'palm' is not a FLOP count; use one of megatron, causal, 6n, hardware")


def test_cli_compares_a_recomputing_runs_tflops_in_narayanans_count(cli, tmp_path):
    """``flops: hardware`` counts the forward that full recomputation reruns, as Narayanan et al.
    2021 eq. (3) does: 96*B*s*l*h^2*(1 + s/(6h) + V/(16lh)) per step, against 72*... without it
    (the LM head runs once, so the ratio is a little under 4/3). A model-FLOP figure without
    ``flops:`` is compared in model FLOPs and the note says how to switch; a bare TFLOP/s
    figure of a fully recomputed run is taken in Narayanan's count, as its sources print it."""
    sc = make_scenario(training={"recompute": "full"})
    base = {"source": "t", "scenario": sc, "measured": {"tflops_per_gpu": 100}}
    cases = [{"name": "model", **base, "measured": {"model_tflops_per_gpu": 100}},
             {"name": "hw", "flops": "HFU", **base}, {"name": "bare", **base}]  # fmt: skip
    rows = {c["name"]: c for c in json.loads(cli("validate", _cases_file(tmp_path, cases), "--json").out)["cases"]}
    assert rows["bare"]["predicted"] == rows["hw"]["predicted"] and "hardware FLOPs" in rows["bare"]["note"]
    layers, h, v, s = GPT_LIKE["layers"], GPT_LIKE["hidden"], GPT_LIKE["vocab"], 2048
    narayanan_96 = 96 * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    narayanan_72 = 72 * layers * h * h * (1 + s / (6 * h) + v / (12 * layers * h))
    # rel 1e-3: the module counts each layer's bias terms with its weights (eq. 3 does not)
    assert rows["hw"]["predicted"] / rows["model"]["predicted"] == pytest.approx(narayanan_96 / narayanan_72, rel=1e-3)
    assert "needs flops: hardware" in rows["model"]["note"] and "needs" not in rows["hw"]["note"]
    # where flops: goes: a case key, not a scenario one
    assert "a key of the case beside measured:" in rows["model"]["note"]


def test_cli_out_writes_the_cases_the_document_and_the_error_picture(cli, tmp_path):
    """``--out DIR``: validate.csv (one row per case, the signed error of each), validate.json
    (the ``--json`` document) and validate.png, written atomically; a failed case is a row too."""
    base = {"source": "t", "scenario": make_scenario(), "measured": {"step_time_s": 1.0}}
    bad_sc = make_scenario(parallel={"tp": 3})
    cases = [{"name": "a", **base}, {"name": "b", "peak_memory_gib": 10.0, **base},
             {"name": "bad", "source": "t", "scenario": bad_sc, "measured": {"step_time_s": 1.0}}]  # fmt: skip
    path = _cases_file(tmp_path, cases)
    out = tmp_path / "val"
    res = cli("validate", path, "--jobs", "1", "--out", str(out))
    assert res.code == 0, res.err
    assert "validate.png" in res.out
    frame = pd.read_csv(out / "validate.csv")
    assert list(frame["name"]) == ["a", "b", "bad"]
    ok = frame[frame["name"] != "bad"]
    assert list(ok["error_pct"]) == pytest.approx(list(100 * (ok["predicted"] - 1.0) / 1.0))
    assert frame.loc[frame["name"] == "bad", "failed"].str.startswith("parallel").all()
    # each case names its simulated step's largest part after the GEMMs, as run's breakdown does
    from simcluster.engine.breakdown import largest_besides_gemm

    key, share = largest_besides_gemm(simulate(scenario_from_dict(make_scenario())).summary)
    assert list(ok["largest_after_gemm"]) == [key, key]
    assert list(ok["largest_after_gemm_share"]) == pytest.approx([share, share])

    def timeless(doc: dict) -> dict:  # wall_s is the only field that differs between runs
        return {**doc, "cases": [{k: v for k, v in c.items() if k != "wall_s"} for c in doc["cases"]]}

    doc = json.loads((out / "validate.json").read_text())
    assert timeless(doc) == timeless(json.loads(cli("validate", path, "--jobs", "1", "--json").out))
    assert (out / "validate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in out.iterdir()) == ["validate.csv", "validate.json", "validate.png"]


def test_nvidia_v51_lora_rows_are_nvfp4_with_pre_quantised_weights():
    """NVIDIA's MLPerf v5.1 llama2_70b_lora rows (config_common_fp4.sh: FP4=True, FP4_RECIPE nvfp4,
    NVTE_NVFP4_DISABLE_RHT=1, PRE_QUANTIZED_MODEL=True; train.py: no gradient-accumulation or
    cross-entropy fusion): 8 GB300 at cp 1 and 8 GB200 at cp 2 over the a2a all-to-all with
    MINIBS=2 (dp 4 x 2 microbatches); each step the mean of the last two pre-healing blocks'
    train_step_time (HEALING_ITER=350 switches the run to FP8 inside the block ending at 384);
    USE_TE_OPS=1 at tp 1: NeMo's op-fused adapter (lora.op_fuser)."""
    rows = {c.scenario["cluster"]["hardware"]: c for c in _family("mlperf-lora-70b")
            if c.name in ("mlperf-v5.1/llama2-70b-lora-8xgb300", "mlperf-v5.1/llama2-70b-lora-8xgb200")}
    assert sorted(rows) == ["gb200-nvl72", "gb300-nvl72"]
    assert rows["gb300-nvl72"].measured == pytest.approx((0.7456289133745789 + 0.7458845753341544) / 2, abs=5e-6)
    assert rows["gb200-nvl72"].measured == pytest.approx((1.028948866041598 + 1.029137257437469) / 2, abs=5e-6)
    for hardware, c in rows.items():
        tr, par = c.scenario["training"], c.scenario["parallel"]
        assert tr["fp4_param"] and tr["nvfp4_hadamard"] is False and "nvfp4_stochastic_rounding" not in tr
        assert (tr["grad_accum_fusion"], tr["fused_cross_entropy"], tr.get("fp8_attention", False)) == (
            False, False, False)
        assert (tr["micro_batch"], tr["global_batch"], par["tp"], par["zero"]) == (1, 8, 1, 1)
        cp = 2 if hardware == "gb200-nvl72" else 1
        assert par["cp"] == cp and par.get("cp_comm", "p2p") == ("a2a" if cp > 1 else "p2p")
        assert c.scenario["lora"] == {"rank": 16, "targets": ["qkv", "proj"], "dropout": 0.1, "op_fuser": True}
        assert "healing" in c.source and not c.slow


def test_partner_v51_lora_rows_run_nvidias_configs():
    """The partners' v5.1 llama2_70b_lora rows on 8 B200 / B300 (NVIDIA's NeMo 25.09 code): Dell's
    XE9680L B200 on the NVFP4 cp 2 config (MINIBS=2, CP=2), Nebius's B300 and B200 on the NVFP4
    cp 1 config (the B200 one with FP8_ACT=1), Supermicro's SYS-422GS-NBRT-LCC B200 on the FP8 one
    (FP8_DPA=1, FP8_ACT=1, te.fp8_model_init), and on that FP8 config Supermicro's SYS-822GS-NB3RT
    and Dell's XE9780 B300 (its printed configuration: no CUDA graphs, the op fuser); each step
    the mean of two logged blocks' train_step_time (the NVFP4 ones before healing at step 350)."""
    rows = {c.name.removeprefix("mlperf-v5.1/llama2-70b-lora-"): c for c in _family("mlperf-lora-70b")}
    expected = {
        "dell-8xb200-cp2": ("dgx-b200", "nvfp4", 2, (1.1111137004584937, 1.1114746473958803)),
        "nebius-8xb300": ("dgx-b300", "nvfp4", 1, (0.9244468325002041, 0.9227604620634035)),
        "nebius-8xb200": ("dgx-b200", "nvfp4", 1, (1.0419110924412962, 1.0405839411638833)),
        "supermicro-8xb200-fp8": ("dgx-b200", "fp8", 1, (1.2971547613125647, 1.2970344382083567)),
        "supermicro-8xb300-fp8": ("dgx-b300", "fp8", 1, (1.264972010353328, 1.2644421805622794)),
        "dell-8xb300-fp8": ("dgx-b300", "fp8", 1, (1.299987996895652, 1.3000767467498615)),
    }
    for name, (hardware, precision, cp, steps) in expected.items():
        c = rows[name]
        tr, par = c.scenario["training"], c.scenario["parallel"]
        assert (c.scenario["cluster"]["hardware"], tr["precision"], par["cp"]) == (hardware, precision, cp)
        assert c.measured == pytest.approx(sum(steps) / 2, abs=5e-6)
        assert (tr["grad_accum_fusion"], tr["fused_cross_entropy"], par["zero"]) == (False, False, 1)
        assert c.scenario["lora"]["op_fuser"] and not c.slow
        assert tr.get("fp4_param", False) is (precision == "nvfp4")
        assert tr.get("fp8_attention", False) is (precision == "fp8")
        assert tr.get("activation_fp8_store", False) is (name == "nebius-8xb200" or precision == "fp8")
        assert ("healing" in c.source) is (precision == "nvfp4")


def test_error_picture_headline_counts_cases_in_words():
    """The picture's headline says "1 case" for one case and "2 cases, 1 failed" for more."""
    from simcluster.output.validate_output import draw_errors

    one = draw_errors([CaseResult(_case("a", 100.0), 110.0, None, 0.0)])
    assert one._suptitle.get_text() == "1 case, MAPE 10.0%"
    two = draw_errors([CaseResult(_case("a", 100.0), 110.0, None, 0.0),
                       CaseResult(_case("b", 100.0), 70.0, None, 0.0),
                       CaseResult(_case("c", 100.0), None, "boom", 0.0)], "run")  # fmt: skip
    assert two._suptitle.get_text() == "run\n2 cases, MAPE 20.0%, 1 failed"


def test_cli_out_refuses_an_unwritable_place_before_running(cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    base = {"name": "a", "source": "t", "scenario": make_scenario(), "measured": {"step_time_s": 1.0}}
    res = cli("validate", _cases_file(tmp_path, [base]), "--out", str(blocker / "sub"))
    assert res.code == 2 and res.err.startswith("error: --out") and res.err.count("\n") == 1


def test_cli_table_and_filter(cli, tmp_path):
    cases = [
        {
            "name": f"c{i}",
            "source": "t",
            "scenario": make_scenario(),
            "measured": {"step_time_s": 1.0},
        }
        for i in range(2)
    ]
    res = cli("validate", _cases_file(tmp_path, cases), "--filter", "c1", "--jobs", "1")
    assert res.code == 0, res.err
    assert "c1" in res.out and "c0" not in res.out and "MAPE" in res.out


def test_filter_matches_the_family_too():
    """The tables group cases by family, so a family name is a filter as well."""
    family = load_cases(contains="zero-bubble-v-a100")
    assert len(family) == 27 and {c.family for c in family} == {"zero-bubble-v-a100"}
    assert {c.name for c in load_cases(contains="zb-v/")} == {c.name for c in family}


@pytest.mark.parametrize(
    "case, field",
    [
        ({"name": "x", "source": "t", "scenario": {}}, "measured"),
        ({"name": "x", "source": "t", "scenario": {}, "mesured": {"mfu": 0.4}}, "'mesured' looks like"),
        ({"name": "x", "source": "t", "scenario": {}, "measured": {"speed": 1}}, "measured.speed"),
        ({"name": "x", "source": "t", "scenario": {}, "measured": {"mfu": -1}}, "measured.mfu"),
        (
            {"name": "x", "source": "t", "scenario": {}, "measured": {"mfu": 1}, "peak_memory_gib": "big"},
            "peak_memory_gib",
        ),
        ("not a mapping", "cases[0]"),
    ],
)
def test_cli_malformed_case_fails_alone(cli, tmp_path, case, field):
    # the issue: a case that cannot be simulated is listed with its error and counted in
    # `failed`; the others still run (here a good case beside the malformed one)
    good = {"name": "good", "source": "t", "scenario": make_scenario(), "measured": {"step_time_s": 1.0}}
    res = cli("validate", _cases_file(tmp_path, [case, good]), "--json", "--jobs", "1")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["summary"]["failed"] == 1 and doc["summary"]["n"] == 1
    broken = doc["cases"][0]
    assert broken["predicted"] is None and field in broken["error"] and "\n" not in broken["error"]
    table = cli("validate", _cases_file(tmp_path, [case, good]), "--jobs", "1")
    assert table.code == 0 and "failed" in table.out


def test_extra_case_keys_are_noted_not_fatal(cli, tmp_path):
    # a case may carry metadata (notes, a URL); a typo of an optional key shows in the note
    case = {"name": "x", "scenario": make_scenario(), "measured": {"step_time_s": 1.0},
            "notes": "from the paper's Table 2", "peak_memory_gb": 40}
    res = cli("validate", _cases_file(tmp_path, [case]), "--json", "--jobs", "1")
    assert res.code == 0, res.err
    row = json.loads(res.out)["cases"][0]
    assert row["predicted"] is not None
    assert "unknown key notes, peak_memory_gb ignored ('peak_memory_gb': did you mean 'peak_memory_gib'?)" in row["note"]


def test_cli_missing_file(cli):
    res = cli("validate", "no/such/cases.yaml")
    assert res.code == 2 and "not found" in res.err


def test_a_case_may_name_its_scenario_and_set_fields_on_it(cli, tmp_path):
    """``scenario:`` takes a shipped scenario's name or a file beside the cases file, and
    ``set:`` changes fields on it as ``run --set`` does; the prediction is the same as for the
    scenario written out."""
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(make_scenario()))
    cases = [
        {"name": "shipped", "scenario": "llama3-8b-8xh100", "set": {"training.global_batch": 128},
         "measured": {"step_time_s": 1.0}},
        {"name": "file", "scenario": "mine.yaml", "measured": {"step_time_s": 1.0}},
        {"name": "nosuch", "scenario": "llama3-9b-8xh100", "measured": {"step_time_s": 1.0}},
        {"name": "badset", "scenario": "mine.yaml", "set": [1], "measured": {"step_time_s": 1.0}},
    ]  # fmt: skip
    doc = json.loads(cli("validate", _cases_file(tmp_path, cases), "--json", "--jobs", "1").out)
    rows = {c["name"]: c for c in doc["cases"]}
    from simcluster.scenario import load_scenario

    shipped = simulate(load_scenario("llama3-8b-8xh100", [("training.global_batch", 128)])).summary
    assert rows["shipped"]["predicted"] == pytest.approx(shipped["step_time_s"])
    assert rows["file"]["predicted"] == pytest.approx(simulate(scenario_from_dict(make_scenario())).summary["step_time_s"])
    assert "did you mean 'llama3-8b-8xh100'" in rows["nosuch"]["error"]
    assert "cases[3].set: must map dotted scenario keys to values" in rows["badset"]["error"]


def test_a_bare_list_of_cases_reads_as_the_cases_list(cli, tmp_path):
    path = tmp_path / "bare.yaml"
    case = {"name": "one", "scenario": make_scenario(), "measured": {"step_time_s": 1.0}}
    path.write_text(yaml.safe_dump([case]))
    doc = json.loads(cli("validate", str(path), "--json", "--jobs", "1").out)
    assert [c["name"] for c in doc["cases"]] == ["one"] and doc["summary"]["failed"] == 0
    single = tmp_path / "single.yaml"
    single.write_text(yaml.safe_dump(case))  # one case on its own reads as a list of one
    doc = json.loads(cli("validate", str(single), "--json", "--jobs", "1").out)
    assert [c["name"] for c in doc["cases"]] == ["one"] and doc["summary"]["failed"] == 0
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    res = cli("validate", str(scalar))
    assert res.code == 2 and "needs a top-level 'cases:' list (or a bare list of cases, or one case)" in res.err


# --- ratchet ------------------------------------------------------------------------------
# Levels reached on the shipped cases (docs/accuracy.md); lower them when the model improves,
# never raise them. Margin: 1 percentage point.
FAST_SUBSET = (
    "narayanan2021/1.7B-32gpu",
    "narayanan2021/7.5B-128gpu",
    "mcore-r0.8/1.7B-48gpu",
    "mcore-r0.8/16B-192gpu",
    "nanotron/1.34B-2node-dp8tp1pp2",
    "nanotron/8.86B-16node-dp16tp8pp1",
    "zb/1.5B-m24-1F1B",
    "zb/1.5B-m24-1F1B-I",
    "zb/1.5B-m24-ZB-1p",
    "zb/1.5B-m24-ZB-2p",
)
# Raised from 5.6 on purpose: nanotron's re-layout copies (training.elementwise nanotron, read
# from its models/llama.py) make its single-node 1.34B rows more pessimistic (2 nodes -8.6 ->
# -14.8%) while the family's MAPE falls (36.7 -> 32.0): physics over score.
FAST_SUBSET_MAPE = 4.0  # 5.5 before the Hopper BF16 GEMMs were capped at the sustained rate;
# 4.8 before nanotron's cost-balanced pipeline split (parallel.partition nanotron)
# 8.9 with the 27 same-memory Zero Bubble rows (arXiv Table 6, 4.1%); the 129 cases before
# them: 9.9. 8.4 with Zero Bubble's own runtime modelled: the automatic ZB-1p/ZB-2p schedules
# planned with the run's op times, and the optimizer's post-validation its script enables.
# 8.3 with BLOOM-176B's six Megatron-DeepSpeed runs (5.8% with DeepSpeed's one-at-a-time
# pipeline p2p, overlap.pp_p2p serial, and its whole-bucket all-reduce; 13.5% without them);
# the 156 cases before them: 8.4. Raised to 8.5 on purpose by NVIDIA's dgxc-benchmarking rows
# (15 DGX H100 cases, 10.5%, every one optimistic); the 162 cases before them stay at 8.3.
# 8.2 with TransformerEngine's TP-overlap GEMM slices (ring exchange in tp slices, pipelined
# reduce-scatter in 4): DGX Cloud 10.5 -> 7.9, Megatron-Bridge 5.2 -> 2.4; Megatron-Core's
# 32B row +24.6 -> +28.4% (its exposed fp32 reduce-scatter, docs/accuracy.md), its MAPE 8.9 -> 9.0.
# 7.8 with the Hopper BF16 GEMM curve capped at the sustained 755 TFLOP/s (an 8x H200 node's
# MSMF, stas00/ml-engineering; hardware/dgx-h100.yaml): DGX Cloud 7.9 -> 5.9, nanotron 30.6 ->
# 29.2; Megatron-Bridge 2.4 -> 2.7 and NeMo long context 5.2 -> 5.3 rose on purpose.
# 7.6 with nanotron's pipeline split by block cost (models/base.py build_model; the LM head's
# stage holds fewer layers): nanotron 29.2 -> 28.1, its published memories 6.0 -> 5.1 overall.
# 7.5 with FlashAttention-2's sustained A100 rates instead of the paper's burst maxima
# (hardware/dgx-a100.yaml attention_kernels): torchtitan 6.7 -> 4.7 (max 11.7 -> 10.7).
# 6.5 with nanotron's ZeRO-1 parameter gather unpacked tensor by tensor in Python
# (dp.param_unpack per_tensor; optim/zero.py, distributed.py): nanotron 26.9 -> 20.9.
# 6.4 with ring attention costed by TransformerEngine's per-step kernels (AttnFuncWithCPAndKVP2P:
# the local pair causal, every visiting block unmasked): NeMo long context 5.3 -> 2.8.
# 6.8 with NeMo's B200 long-sequence rows added (185 cases; that family 16.9%, all optimistic, at
# cuDNN's measured B200 attention curves): no A100/H100 case moved. 6.7 with B200 GEMMs capped at
# the rate the GPU sustains at its power limit (B200 family 16.9 -> 13.9).
# 6.6 with Megatron-Bridge's dense FP8-CS Blackwell rows added (193 cases; that family 4.5% with
# GB200's causal attention from the cuDNN of NeMo 25.11's PyTorch, 5.0% with cuDNN 9.22's).
# Still 6.6 (6.59 -> 6.57) when a collective call is timed by its widest group: ring attention
# across nodes waits for its network hop (B200 long sequence 13.9 -> 13.3).
# 7.0 with nanotron's async TP linears (overlap.tp_async, which its scaling_benchmarks.py sets:
# parallel/tensor_parallel/functional.py): every nanotron TP row 1-8 points more optimistic,
# nanotron 20.9 -> 24.0; physics over score (docs/accuracy.md, modelling changes).
# 7.2 with the Megatron-Bridge rows' bf16 main gradients, which its benchmark configs set
# (grad_reduce_in_fp32 False in scripts/performance/configs/llama3 and llama31): Bridge H100
# 2.6 -> 4.7 (405B +1..+5 -> +8..+13%), Blackwell 4.5 -> 8.3; the fp32 accumulation's traffic
# had been hiding a cost that the TP-overlapped H100/Blackwell runs still miss.
# 7.1 with the last slice of TransformerEngine's pipelined reduce-scatter exposed after the
# row-parallel forward GEMM (parallelism/tensor.py): Bridge H100 4.7 -> 3.6 (max 12.9 -> 10.8),
# Blackwell 7.8, DGX Cloud 5.9 -> 5.1; Megatron-Core 8.9 -> 9.5 and NeMo FP8 3.8 -> 4.0 rose on
# purpose (their pessimistic rows, 32B +29.6 -> +31.2%, got slower).
# 7.2 (7.13 -> 7.21) with TransformerEngine's FP8 all-gathers (an FP8 run gathers the quantised
# operand, 1 B per element; parallelism/shapes.py tp_gather_bytes): physics over score, Bridge
# H100 3.6 -> 5.0 (405B +6..+11 -> +9..+14%), DGX Cloud 5.1 -> 5.3, NeMo FP8 4.0 -> 3.9.
# 7.0 (7.21 -> 7.01) with the DGX H100 nccl-tests sample as the single-node table of dgx-h100 and
# aws-p5 (measured.collectives): NCCL's mid-size losses reach every TP collective; nanotron 24.0
# -> 22.7, DGX Cloud 5.3 -> 4.7, Bridge H100 5.0 -> 4.3; Megatron-Core 9.5 -> 10.5 (32B +34.8%).
# 7.0 (7.01 -> 7.01) with TransformerEngine's userbuffers settings per run (overlap.tp_comm_cfg;
# simcluster/userbuffers.py): bulk backward overlaps hold their SMs (NeMo presets 2-24 without a
# margin; TE 2.x defaults 16 with one), FP8 presets' forward reduce-scatters as ring exchanges:
# DGX Cloud 4.7 -> 4.6, NeMo FP8 4.1 -> 4.0, NeMo long context B200 13.3 -> 13.2; Blackwell
# 7.9 -> 8.3 and Megatron-Core 10.5 -> 10.7 moved away (physics over score).
# 7.1 (7.01 -> 7.10) with the NeMo 24.07 summary's runs as the launcher's H100 FP8 example scripts
# ran them (grad_sync_dtype=bf16: bf16 gradient buckets; the GPT-3 configs' dropout 0.1): physics
# over score, NeMo FP8 4.0 -> 6.0 (every row but Llama 2 7B/13B now optimistic, +0..+14%).
# 7.1 (7.10 -> 7.09) with the attention block's backward in autograd order (the projection's
# input gradient first, the QKV one last with the input re-gather beside it): Bridge H100 4.3 -> 3.9.
# 7.2 (7.09 -> 7.15) with the fused backward's sequence-parallel reduce-scatter under the
# weight-gradient GEMMs (Megatron's async linear backward, TE's wgrad bulk overlaps): physics over
# score, DGX Cloud 4.6 -> 5.0, Bridge H100 3.9 -> 4.7 (405B +8..+13%), Korthikanti 3.6 -> 3.8;
# Megatron-Core 10.7 -> 10.4.
# 7.2 (7.15 -> 7.15) with Megatron's asynchronous input-gradient all-reduce without sequence
# parallelism (ColumnParallelLinearWithAsyncAllreduce; Korthikanti's "full" rows): Korthikanti
# 3.8 -> 4.1, its 22B/175B full rows +0.2/+7.8 -> -4.0/+4.9% (max 7.8 -> 5.8).
# 7.2 (7.15 -> 7.18) with Megatron's pass over each gradient bucket before its reduction (the
# NaN-checking norm and the 1/dp scaling of Megatron-LM's defaults): physics over score,
# Megatron-Core 10.4 -> 11.0 (its pipelined rows' passes sit on the cool-down's critical path),
# Narayanan 2.6 -> 2.5.
# 7.2 (7.18 -> 7.12) with the gradient buffer cleared at each step's start (dp.zero_grad_buffer)
# and the optimizer's fp16 unscale and 16-bit copy read counted: Korthikanti 4.1 -> 3.1,
# Narayanan 2.5 -> 2.4, nanotron 22.7 -> 22.4; Zero Bubble's max 7.9 -> 8.0 (fp16 unscale).
# 7.0 (7.12 -> 7.00) with gradient buckets of whole tensors as torch DDP and Megatron-Core form
# them (a large layer spans several buckets; Megatron-Core's max(40M, 1M x dp) parameters on
# pipeline rank 0's first chunk only, one bucket per chunk elsewhere): nanotron 22.4 -> 21.7
# (8.86B on 64 nodes +11.1 -> +1.6%), Megatron-Core 11.0 -> 10.5 (its 32B row +33.6 -> +35.6%).
# 7.0 (7.00 -> 7.03) with a bucket that closes on a layer's MLP weights reduced before that
# layer's attention backward (DDP's per-parameter readiness): physics over score, nanotron
# 21.7 -> 22.0 (its level stays 21.8, inside the margin).
# 7.0 (7.028 -> 7.024) with 16-bit gradients widened to fp32 in the optimizer step (Megatron's
# _copy_model_grads_to_main_grads): NeMo FP8 5.85 -> 5.82, Blackwell 8.23 -> 8.20.
# 7.0 (7.02 -> 6.97, 193 -> 198 cases) with Megatron-Bridge's five Llama 3 70B rows on GB200 and
# GB300 (Megatron FSDP, the presets' activations offloaded to the Grace CPU): Blackwell 8.2 -> 7.0;
# 7.0 (6.97 -> 7.03, 199 cases) with its 405B row on 128 GB200 over two racks (+17.4%), which the
# ring's channels across unequal NVLink domains made simulable (-78% with one channel).
# 7.1 (7.03 -> 7.09, 199 -> 210 cases) with Megatron-Bridge's NeMo 26.02 FP8-MX and NVFP4 rows
# and its GB300 FP8-CS rows (the 199 earlier cases bit-identical): NVFP4 (training.precision
# nvfp4) -10...+14% with its training GEMMs at TransformerEngine's measured 1.81x FP8 (+24...+42%
# at square-GEMM cuBLASLt rates, 7.53), the FP8 ones -10...+14%.
# 7.0 (7.09 -> 6.99, 210 -> 218 cases) with NVIDIA's Grok-1 314B MoE rows (GB200 with expert
# tensor parallelism 4, H100; parallel.etp): -14.4...+2.0%, the 210 earlier cases bit-identical.
# 7.1 (6.99 -> 7.06) with the dense and expert parameter gathers in forward order layer by
# layer (the first forward had waited for every expert bucket of the stage): physics over
# score, Grok-1 on GB200 -5...-2% -> -7...-4% (family 4.2 -> 6.1); no dense case moved.
# 7.1 (7.06 -> 7.09) with the FP8 recipes' weights kept and gathered in FP8
# (training.fp8_param_gather: NeMo 2's and Megatron-Bridge's FP8 configs set it): physics over
# score, the Bridge and NeMo 2 FP8 rows 0-1 points more optimistic, the 405B Megatron FSDP row
# on two GB200 racks +17.6 -> +20.6% (its ZeRO-3 gathers halved).
# 6.9 (7.09 -> 6.93) with every point of the burst-measured GEMM curves taken at the share of
# their rate the GPU sustains at its power limit (efficiency.sustained: Hopper 0.95, B200 0.853;
# before, only the largest GEMMs were capped): H100 11.2 -> 10.7 (FP8 4.6 -> 3.8), B200 11.0 ->
# 10.8; Megatron-Core's pessimistic rows 0.6-1.3 points slower (32B +35.4 -> +36.4%).
# 7.2 (6.89 -> 7.19) with pipeline transfers sent as 1/tp slices and re-gathered by the
# receiving stage, as Megatron-LM 2021 and DeepSpeed's engine send them (overlap.
# pp_scatter_gather): physics over score, BLOOM 5.8 -> 15.9 (its whole-tensor sends over shared
# Omni-Path links had stood in for a cost still not found), Narayanan 2.3 -> 3.2, Korthikanti
# 3.1 -> 2.4. 7.1 (7.19 -> 7.06) with DeepSpeed's BF16_Optimizer's cast-then-add of every
# microbatch's gradient (18 B per parameter, training.grad_accum_cast) and an unfused 16-bit
# gradient add at 6 B, not 4: BLOOM 15.9 -> 11.5. 7.1 (7.06 -> 7.10) with fp16 Megatron-LM 2021
# runs keeping their gradients in fp16 (training.fp32_grad_accum false, as arguments.py does for
# fp16): Narayanan 3.2 -> 4.8, Korthikanti 2.4 -> 1.5. 6.7 (7.10 -> 6.69) with each way of adding
# a microbatch's gradient into the fp32 main gradient charged its own bytes (fused epilogue 6 B,
# in-place add 10 B; both were 8) and the Zero Bubble cases running the fork's fused accumulation
# (Megatron's default, not turned off by its script): Zero Bubble 2.9 -> 1.9, 3.4 -> 2.5,
# Megatron-Core 11.0 -> 10.2; DGX Cloud 4.2 -> 4.6 (its fused rows a little faster). 6.7
# (6.694 -> 6.686) with the embedding's gradient added in place even under the fusion (no GEMM
# produces it): 10 B per table entry into fp32, 6 B into 16-bit main gradients. 6.7 (6.686 ->
# 6.665) with PyTorch DDP's copies of each gradient into its bucket and back (dp.bucket_copies:
# nanotron's ZeRO-0 rows, Narayanan's torch-DDP rows): nanotron 21.1 -> 21.0, Narayanan 4.8 -> 4.7.
# 6.6 (6.665 -> 6.622) with nanotron's clipping of every local gradient (training.grad_clip
# local_scale): nanotron 21.0 -> 20.6. 6.6 (6.668 -> 6.624) with FSDP2 keeping one reduce-scatter
# in flight (post_backward waits on the previous one's event, then copy-casts on the compute
# stream; dp.wait_reduction): torchtitan 4.7 -> 3.5. 6.1 (6.494 -> 6.080) with B200's cuDNN
# attention curves at the share of their rate a B200 sustains at its power limit
# (efficiency.attention_sustained 0.853: cudnn-frontend's benchmark lets the GPU idle 10x each
# call before the next): NeMo long context on B200 13.3 -> 3.3, the four Bridge B200 rows
# +3.3...+6.0 -> -0.8...+3.5%. 6.0 (6.08 -> 6.00) with GB200's attention curves at its GEMMs'
# sustained share (0.8861) and B300's at its efficiency.sustained: the 18 GB200 cases 7.4 -> 6.4.
# 6.0 (5.996 -> 5.967 -> 6.022) with the loss kernels as the frameworks run them (Bridge's and NeMo
# 25.04's TransformerEngine cross-entropy, Megatron-Core's native fused loss before): physics over score.
# 6.1 (6.022 -> 6.068) with FP8 casts on datacenter Blackwell writing no transposed copy for per-tensor
# scales, as TransformerEngine's quantizers do there (GB200 and B200 rows, already fast, 0.3-1.2 points
# faster; GB300's, slow, as much nearer): physics over score; 6.1 (6.0680 -> 6.0687) with FP8 delayed
# scaling's blocking amax all-reduce over the stage per chunk and microbatch; 6.1 (6.0687 -> 6.0675)
# with MXFP8 GEMMs at their measured share of per-tensor FP8 kernels (efficiency.block_fp8_gemm);
# 6.1 (6.0675 -> 6.0687) with the DGX Cloud GPT-3 FP8 row's weights gathered in FP8 (its yaml's fp8_params);
# 6.0 (6.0290 -> 5.9855, 227 cases) with NeMo 24.07's Nemotron-8B and 22B rows (+1.5 / +0.7%)
# 6.0 (5.9855 -> 5.9624 -> 5.9324 -> 5.9197, 234 cases) with DGX Cloud's Nemotron-4 340B rows (-3.8 / -6.3 /
# +2.6%; NeMo 25.04's -3.9 / +1.1%) and NeMo 25.04's Nemotron-4 15B rows (-4.2 / -4.7%)
# 6.2 (5.8308 -> 6.1658, 263 cases) with Megatron-LM's own MoE recipes (+19...+48%, the small-expert gap)
# 6.1 (6.1658 -> 6.0617) with HybridEP's copies per GPU of an NVL72 domain (not per 4-GPU tray) and its
# measured kernel rate (efficiency.hybridep_nvlink): the GB200 recipe +47.8 -> +20.4%; 6.1 (6.0617 ->
# 6.0724) with HybridEP's 16 SMs beside the 235B recipe's overlapped compute, not NCCL's 24 (+19.0 -> +21.8%);
# 6.1 (6.0724 -> 6.0557, 264 cases) with Megatron-LM's DeepSeek-V3 GB200 guide's MXFP8 run (+1.7%);
# 6.2 (6.0557 -> 6.1994, 265 cases) with its Qwen3-30B-A3B MXFP8 recipe on 16 GB200 (+44.1%: measured
# slower than the BF16 recipe, simulated faster); 6.3 (6.1978 -> 6.3029, 266 cases) with its Qwen3-235B-A22B
# MXFP8 recipe on 128 B200 with DeepEP (+34.1%: the small-expert gap on B200); 6.3 (6.3028 -> 6.3183, 268
# cases) with torchtitan's Llama 3.1 8B Float8 FSDP runs on 32 and 64 H200 (+7.7 / +9.1%); 6.3 (6.3184 ->
# 6.3084) with torchao's Float8Linear casts (training.fp8_library torchao): those rows +6.3 / +7.8%;
# 6.3 (6.3084 -> 6.3071, 271 cases) with the Megatron-MoE model zoo's Qwen3-235B-A22B runs on GB200 and
# GB300 racks (-10.6 / -2.7 / +5.2%); 6.3 (6.3071 -> 6.3286, 272 cases) with its GB200 MXFP8 run and the
# fine-grained offload of the experts' inputs it needs to fit (training.offload_modules; +12.2%); 6.3
# (6.3286 -> 6.3183) with HybridEP on the 32 SMs those runs give it (moe.dispatch_sms); 6.3 (6.3183 -> 6.3203)
# with group-limited routing (model.router_groups / group_topk) on the DeepSeek-V3 guide's row; 6.2 (6.3203
# -> 6.1570) with the DeepEP-family kernels' fixed work a token (efficiency.*_token_sm_ns): the Qwen3-30B-A3B
# GB200 recipes +20.4 -> +0.2% (BF16) and +44.1 -> +17.2% (MXFP8), the zoo's Qwen3-235B-A22B rows 1-4 points
# slower
QUICK_SET_MAPE = 6.2
QUICK_SET_ORDERING_ROWS = 21
# published peak memory (Zero Bubble Table 4 and nanotron's summary), compared on the side
QUICK_SET_MEMORY_MAPE = 5.6  # 8.1 before Table 6's 27 published memories (2.3%), 6.0 before
# nanotron's cost-balanced pipeline split, 4.7 before torch DDP's bucket copies were counted,
# 4.5 before nanotron's bf16 gradients were freed after each backward as its
# FP32GradientAccumulator does (5.45: nanotron 9.4 -> 13.0, physics over score); 5.51 with the
# native fused loss's materialised fp32 buffer on Swiss AI's peak (its two rows -1/-3 -> +6/+4%)
# per family (quick set): the issue's target is <= 10% MAPE with no case worse than 25%;
# narayanan2021-a100, korthikanti2022-a100, the NeMo and Megatron-Bridge families,
# torchtitan-a100 and zero-bubble-a100 meet it, so their max error is held too
FAMILY_MAPE = {
    # 5.8 before the partitioned pipeline transfers and the BF16_Optimizer's cast-then-add,
    # 11.4 before its fp32 buffers were all-reduced in bf16 as DeepSpeed's engine casts them,
    # 11.7 before CUDA_LAUNCH_BLOCKING=1 (training.launch_blocking) as its Slurm script exports it,
    # 10.6 before ALiBi's bias copy into the unfused scores
    "bigscience-a100": 9.8,
    # 3.2 before the full rows' transfers were sent as 1/tp slices, 2.4 before fp16 gradients
    "korthikanti2022-a100": 1.5,
    # 4.7 before the sustained share of every GEMM size; 3.6 before the unfused bf16 gradient
    # add of its 8B rows was charged 6 B, not 4
    # 3.8 before FP8 current scaling's amax and scale kernels had their launch gaps
    # 3.9 before the ring-exchange reduce-scatter's local reduction (reduce_bf16) was charged
    # 3.7 before TransformerEngine's cross-entropy (training.fused_cross_entropy te)
    # 2.2 before FP8 GEMMs read the BF16 shape table at half their K and the Hopper FP8 curve held
    # the median shape (its 405B rows on 1,024 H100s 1.4 points faster): physics over score
    # 2.7 before the Hopper FP8 curve became Azure's cuBLASLt table of an H100 timed at its settled
    # clock (DeepGEMM's burst block-scaled points before; the 405B rows 5 points faster, the
    # 8B/70B ones 1.5-2): physics over score
    "megatron-bridge-fp8-h100": 4.2,
    # 8.3 before its six FSDP + activation-offload rows (7.0 with the five 70B ones, 7.7 with 405B;
    # 7.8 with NeMo 26.02's FP8-MX rows and the GB300 FP8-CS ones)
    # 7.8 before the FP8 parameter gathers, 8.0 before GB200's BF16 GEMMs at its sustained rate
    # 7.6 before FP8 current scaling's amax and scale kernels had their launch gaps
    # 7.4 before the ring-exchange reduce-scatter's local reduction
    # 7.3 before B200's attention curves at its sustained share (its four B200 rows), 6.7 before
    # GB200's at its GEMMs' sustained share (its twelve GB200 rows); 6.0 before TransformerEngine's
    # cross-entropy, which its recipes run (rows 0.3-2.9 points faster): physics over score;
    # 6.5 before Blackwell's FP8 casts without a transpose (per-tensor scales; 6.48 -> 6.71);
    # 5.75 before the step's eager tail (training.step_tail: the optimizer's Python on Grace)
    # 5.57 before the GB200 / GB300 rows of NeMo 25.09 and 25.11 ran their containers' cuDNN
    # (cudnn-9.13 curves; the 8B GB200 rows +10.5 / +10.0 -> +5.6 / +5.1%); 4.73 before FP8 GEMMs
    # read the BF16 shape table at half their K; 4.41 before B200's attention ran cuDNN's graph
    # rows as TransformerEngine calls it (not PyTorch SDPA's): the four B200 rows 1.5-4.4 points
    # more optimistic, physics over score
    "megatron-bridge-fp8-blackwell": 5.0,
    # 31.9 with NVFP4 GEMMs at square-GEMM cuBLASLt rates (docs/accuracy.md, modelling changes)
    # 8.7 before the ring-exchange reduce-scatter's local reduction, 8.5 before GB200's attention
    # at its GEMMs' sustained share; 7.4 before TransformerEngine's cross-entropy
    "megatron-bridge-nvfp4-blackwell": 7.7,
    # 10.5 before the sustained share of every GEMM size (its 16B...462B rows, already slow, 1
    # point slower; 1.7B/7.1B -15/-11 -> -15/-10%): physics over score; 11.1 before the GEMM
    # shape factor (hardware/gemm_shapes)
    # 10.2 before NCCL's current ring latency at one rank per node (32B +37.7 -> +35.3%); 10.5
    # since a ring of one rank per node pays the tree's network latency again, as NCCL 2.32.3
    # and NCCL <= 2.2x do (32B +35.3 -> +37.7%): physics over score
    "megatron-core-h100": 11.5,  # 10.5 before the attention grid (cuDNN batch-1 sweep: 16 heads per GPU at 0.79 of the curve; 1.7B/7.1B -15/-11 -> -12/-8%, 32B-462B 1-3 points slower: physics over score), 11.0 before the fused accumulation's 6 B (not 8)
    # 21.7 before its in-place fp32 add's 10 B (not 8), 21.1 before torch DDP's bucket copies,
    # 21.0 before its clipping of every local gradient
    # 19.7 before NCCL's NVLS GPU-count rule (no NVLS_TREE for the tp 4 rows' DP groups)
    # 19.5 before AVG all-reduces lost NVLS / NVLS_TREE (ncclNvlsSupported)
    # 19.4 before in-flight collectives held the sum of their SMs (its TP 4 rows' DP and async TP)
    "nanotron-h100": 19.3,  # 20.6 before the attention grid
    # 2.3 before the scatter/gather pipeline transfers, 3.2 before fp16 gradients (physics over
    # score: the 2021 code keeps an fp16 run's gradients in fp16)
    "narayanan2021-a100": 4.7,  # 4.8 before torch DDP's bucket copies (its rows below 39B)
    # 4.4 before the Llama 2 7B/13B rows' bf16 gradient buckets (their launcher scripts of mid-2024)
    "nemo-fp8-h100": 3.4,  # 2.9 before the Hopper FP8 curve from Azure's cuBLASLt table (rows 0.5-3.7 points faster); 3.1 before FP8 GEMMs' shape factor (the BF16 table at K/2); 3.6 before the Nemotron-8B and 22B rows (+1.5 / +0.7%); 3.9 before the attention grid (Llama 3 70B -2.6 -> -5.4%), 4.0 before the ring-exchange reduce-scatter's local reduction
    # 2.6 before the sustained share of every GEMM size, 3.0 before the fused accumulation's 6 B
    "nemo-long-context-h100": 3.1,  # 3.0 before FP8 GEMMs' shape factor (the BF16 table at K/2); 2.7 before the attention grid and the userbuffers shard copy
    # 13.4 before B200's attention curves at its sustained share, 3.3 before the 25.04 performance
    # scripts' TransformerEngine cross-entropy (ASSUMED for this table): physics over score; 4.2
    # before Blackwell's FP8 casts without a transpose (4.22 -> 4.63)
    # 4.6 before FP8 GEMMs' shape factor (the BF16 table at K/2); 4.29 before B200's attention ran
    # cuDNN's graph rows as TransformerEngine calls them, 9.10.2's for this 9.9.0 container (PyTorch
    # SDPA's 9.13.0 rows before): every row 1.3-6.8 points more optimistic, the long ones most (64K
    # backward 1,205 against 1,073 TFLOP/s), now -7..-10% throughout: physics over score
    "nemo-long-context-b200": 8.4,
    # 4.3 before the GEMM shape factor, 4.2 before the fused accumulation's 6 B (not 8); 4.6
    # before the Llama BF16 rows' bf16 main gradients, which NeMo 2.2.0's performance recipes set
    # (grad_reduce_in_fp32 False; tests/test_dgxc_memory.py): physics over score, those six rows
    # 3-4 points more optimistic
    # 5.0 before the Llama 3.1 and Nemotron-4 rows ran Megatron-Core's native fused loss
    # 5.1 before DGX Cloud's Nemotron-4 340B rows (-3.8 / -6.3 / +2.6%; NeMo 25.04's -3.9 / +1.1%)
    "nvidia-dgxc-h100": 4.8,  # 5.1 before in-flight collectives held the sum of their SMs, 6.0 before the deferred LM-head wgrad, the attention grid and the UB copy
    # 6.0 before GB200's BF16 GEMMs at its sustained rate (its BF16 rows -5 -> +5%); 5.9 before
    # the MoE block lost the TP all-gather / reduce-scatter Megatron-Core does not run around it
    # (BF16 rows +4..+5 -> -2..+1%, FP8 rows 4 points more optimistic): physics over score
    # 5.8 before NeMo 25.04's TransformerEngine cross-entropy (H100 FP8 -14.4 -> -16.3%)
    # 6.2 before the attention grid, 6.2 before Blackwell's FP8 casts without a transpose (6.6), 6.6
    # before the delayed-scaling amax all-reduce (H100 FP8 -16.3 -> -15.6%)
    "nvidia-dgxc-grok1": 6.3,  # 6.1 before the Hopper FP8 curve from Azure's cuBLASLt table (H100 FP8 -14.9 -> -16.9%); 6.3 before FP8 GEMMs' shape factor (the H100 FP8 row's K = 2048 expert wgrads)
    "torchtitan-a100": 3.5,  # 4.7 before FSDP2's one reduce-scatter in flight
    "torchtitan-h200": 7.1,  # added at 8.4 (session 96); 7.1 with torchao's own casts (fp8_library torchao)
    # 2.8 / 3.3 before the fork's fused accumulation was charged its 6 B (an 8 B in-place add)
    "zero-bubble-a100": 1.9,
    "zero-bubble-v-a100": 2.5,
    # GH200 at the H100's sustained share, an upper bound under the Alps module cap (docs/accuracy.md);
    # 9.6 before in-flight collectives held the sum of their SMs, 9.2 before its
    # --cross-entropy-loss-fusion ran as Megatron-Core's native compiled loss (was one fused kernel),
    # 7.6 before the step's eager tail (training.step_tail)
    "swissai-gh200": 7.4,
    # all four rows optimistic (+1.4...+11.8%); MI300X's attention rate is one ambiguous published
    # figure (hardware/amd-mi300x.yaml)
    "amd-fsdp-mi300x": 6.7,
    # the same benchmark page's MI325X table (+1.5 / -7.3 / +7.4 / -1.3%)
    "amd-fsdp-mi325x": 4.4,
    # Megatron-LM's own Qwen3 MoE recipes: every row fast (H100 +21...+23%, GB200 +20%): the
    # small-expert gap of docs/accuracy.md, not found; held so it does not grow unnoticed. 27.9
    # before HybridEP sent to each GPU of the NVL72 domain at its measured rate (GB200 was +48%),
    # 21.0 before HybridEP's 16 SMs (not NCCL's 24) beside the 235B row's overlapped compute;
    # 21.7 before the DeepSeek-V3 GB200 guide's MXFP8 row (2,048-wide experts: +1.7%), 17.7 before
    # the Qwen3-30B-A3B GB200 MXFP8 recipe (+44.1%: MXFP8's cost to small experts missing)
    # 18.5 before the model zoo's GB200 MXFP8 row with its expert offload (+12.2%), 23.8 before its
    # three other Qwen3-235B-A22B rows on NVL72 racks (-10.6 / -2.7 / +5.2%); 22.1 before
    # Megatron-LM's Qwen3-235B-A22B B200 recipe (+34.1%); 18.0 before HybridEP ran on the 32 SMs
    # the zoo's and the DeepSeek-V3 guide's runs give it (moe.dispatch_sms); 17.7 before the kernels'
    # fixed work a token slowed hidden-2,048 and 4,096 rows inside NVL72 racks (efficiency.*_token_sm_ns);
    # 13.7 before Megatron-Core's optimizer tail ran over a weight tensor per local expert; 13.5
    # before Megatron-Bridge 26.06's Qwen3-30B-A3B H100 recipe (+24.9%, its model-verification card),
    # 14.5 with it until it moved to megatron-bridge-cards
    "megatron-moe-recipes": 13.5,
    # Megatron-Bridge's model-verification cards: the tuned Qwen3-30B-A3B recipe on 16 H100 +24.9%
    # (the small-expert gap above), the untuned Qwen3-8B library recipe on 16 H100 +13.4%, the tuned
    # DeepSeek-V3 recipe on 1,024 H100 +9.1% (2,048-wide experts: 12-16 points closer than the small ones);
    # 8.3 with the tuned MXFP8 recipes under full-iteration CUDA graphs (session 104: Qwen3-30B-A3B on
    # 8 GB200, 8 and 256 GB300 -3.0 / -0.2 / +0.9%, Qwen3-235B-A22B on 256 GB300 -6.3%, DeepSeek-V3 on
    # 256 GB200 -0.1%): 15.8 before
    "megatron-bridge-cards": 7.2,
    # AMD's MLPerf v5.1 8B row on MI355X, +2.2% (its partners' runs of the same config 3-5% slower)
    "mlperf-training-amd": 2.2,
    # MLPerf's llama2_70b_lora: AMD's MI355X +0.7%, MI325X +0.8%, MI300X -4.8%; NVIDIA's v5.0 DGX
    # B200 -9.3% and GB200 -9.8% with FP8 attention's casts and the FP8 SwiGLU store (was -12.3 /
    # -12.9; something NVIDIA's implementation runs that the model lacks; docs/accuracy.md); its
    # v4.0 DGX H100 row at tp 4 +6.3% (+5.6% with frozen linears' rowwise-only input casts);
    # 5.3 before NVIDIA's v5.1 NVFP4 rows, 8 GB300 +12.7% and 8 GB200 at cp 2 +0.2% with
    # TransformerEngine's op-fused adapters (+16.4 / +2.9% without; docs/accuracy.md: GB300's
    # NVFP4 GEMM rate the likely gap); 5.4 before the partners' v5.1 rows on 8 B200 / B300
    # (+2.0 / +3.1 / +6.6 / +5.6%); 5.1 before the op fuser's 1-bit dropout mask (those rows 0.2-0.4
    # points faster) and the v4.1 runs on 8 H200 at cp 2 (-7.3 / -4.5 / -3.4%); 5.0 before the B300
    # FP8 rows (-0.1 / -2.8%); 4.6 before a frozen linear's input-gradient reduce-scatter was
    # exposed (TE turns bulk wgrad off for a frozen weight) and v4.0's row ran the
    # tp_comm_disable_qkv it sets (+5.6 -> +10.9%), and before the v4.1 rows on 8 H100 at tp 4
    # (+10.6 / +11.0 / +10.6%): physics over score; 5.8 before the H100 rows' FP8 proj_fprop buffer
    # and atomic GEMMs, as their userbuffers files set them; 5.5 before the Blackwell rows ran their
    # containers' cuDNN (v5.1: 9.13.1 by NVIDIA's system descriptions, the cudnn-9.13 curves; GB300 /
    # GB200 NVFP4 +12.7 / +0.3 -> +18.4 / +5.6%, Nebius B300 +2.9 -> +8.4%): physics over score;
    # 6.4 before the Hopper FP8 attention's causal backward took the unmasked ratio (2024's cuDNN
    # ran FP8 attention faster than BF16): the four H100 rows +9.1...+9.9 -> +4.5...+5.3%; 5.37
    # before B200's attention ran cuDNN's graph rows (v5.1 B200 rows 1.1-2.7 points faster); 5.12
    # before the op fuser's frozen linears quantised their output gradients rowwise only
    # 5.0 before the Hopper FP8 curve from Azure's cuBLASLt table (H100 rows 0.8 points closer, H200
    # rows 2.2 points more optimistic)
    "mlperf-lora-70b": 5.2,
}
# Korthikanti's max is above its old 5.4 on purpose: the fp32 main-gradient accumulation (every
# family's MAPE fell) makes the full-recompute rows more pessimistic (175B +2.1 -> +6.2%); the
# model's recompute forward costs more of a step than Megatron's (docs/accuracy.md). Narayanan's
# rose from 6.2 when full recomputation stopped rerunning the LM head (Megatron checkpoints the
# transformer layers only), and its MAPE from 3.7 and max from 6.6 when learned positions
# stopped paying a rotary pass (Megatron 2021 splits the QKV output into views): physics over
# score. torchtitan's rose from 10.5 when its three "selective op" rows were added with the
# op-level checkpointing they need (Llama 2 70B at local batch 1: +14%).
# The slowest-GPU factor (gpu.speed_spread, Sinha et al. SC'22; simcluster/variability.py)
# raised Korthikanti's (3.1 -> 3.7, max 6.2 -> 7.8), NeMo long context's (3.9 -> 5.3, max
# 11.2 -> 14.6) and Zero Bubble's (3.3 -> 3.8, max 11.4 -> 12.9) on purpose: their pessimistic
# rows got slower while the large-scale families moved toward the measurements (Narayanan
# 4.4 -> 2.6, Megatron-Core 10.4 -> 8.9, torchtitan 8.9 -> 6.7, quick set 10.3 -> 9.9).
# NeMo long context's max rose 14.6 -> 14.9 with the TP-overlap GEMM slices (its cp 32 row).
FAMILY_MAX_APE = {
    # 12.7 before the partitioned pipeline transfers, 17.3 before the bf16 gradient all-reduce
    # (physics over score both), 17.6 before CUDA_LAUNCH_BLOCKING=1 was modelled, 16.8 before
    # ALiBi's bias copy
    "bigscience-a100": 16.0,
    "korthikanti2022-a100": 3.2,
    "megatron-bridge-fp8-h100": 12.3,  # 9.0 before the Hopper FP8 curve from Azure's cuBLASLt table (405B on 1,024 H100s, 25.11: +7.2 -> +12.2%); 5.8 since TransformerEngine's cross-entropy
    # 11.0 before the 405B Megatron FSDP row (+17.4%; +17.6% on 64 GPUs of each rack, Slurm segments;
    # +20.6% with its FP8 parameter gathers)
    "megatron-bridge-fp8-blackwell": 19.0,  # 17.4 with Blackwell's FP8 casts without a transpose
    "megatron-bridge-nvfp4-blackwell": 12.7,
    "narayanan2021-a100": 8.5,  # 5.0 before the scatter/gather transfers, 5.4 before fp16 gradients
    "nemo-fp8-h100": 10.4,
    "nemo-long-context-h100": 6.5,  # 6.0 before the attention grid (llama2-7b 4k 4.2 -> 6.4%)
    "nemo-long-context-b200": 9.8,  # 16.9 before B200's attention curves at its sustained share, 5.8 before TE's loss, 7.4 before Blackwell's FP8 casts without a transpose, 8.3 before B200's attention ran cuDNN's graph rows (32K -7.2 -> -9.8%)
    "nvidia-dgxc-h100": 8.1,  # 9.5 before the attention grid and deferred LM-head wgrad, 8.7 before its Llama BF16 rows' bf16 main gradients (70B -6.5 -> -9.5%)
    "nvidia-dgxc-grok1": 16.9,  # 16.3 before the Hopper FP8 curve from Azure's cuBLASLt table; 16.0 before TE's loss, 12.0 before the MoE block's TP collectives went (H100 FP8 -12 -> -16%)
    "torchtitan-a100": 8.3,  # 10.7 before FSDP2's one reduce-scatter in flight
    "torchtitan-h200": 7.8,  # added at 9.1 (session 96); 7.8 with torchao's own casts
    "zero-bubble-a100": 5.4,
    "zero-bubble-v-a100": 5.6,
    "swissai-gh200": 9.3,  # 11.9 before in-flight collectives held the sum of their SMs, 10.8 before its native loss
}


def test_ratchet_fast_subset():
    cases = [c for c in load_cases() if c.name in FAST_SUBSET]
    assert len(cases) == len(FAST_SUBSET)
    results = run_cases(cases, jobs=1)
    s = summarize(results)
    assert s["failed"] == 0
    assert s["mape_pct"] <= FAST_SUBSET_MAPE + 1.0, s
    assert statistics.fmean(abs(r.error_pct) for r in results) == pytest.approx(s["mape_pct"])


def test_ratchet_blackwell_fast_rows():
    """The two 8-GPU Llama 3 8B Bridge rows (NeMo 25.11, FP8-CS) guard the B200 and GB200
    profiles between full ratchet runs: B200 +2.7% (GEMMs and cuDNN 9.13 attention at the
    sustained share, TransformerEngine's cross-entropy as the recipes run it, FP8-CS casts with
    no transposed copy as TE's quantizers make them on Blackwell; +1.6 with the transpose, -0.8
    also with the unfused loss), GB200 +10.1% (its cuDNN attention at its GEMMs' sustained
    share, 0.8861; +8.9 with the transpose, +6.0 also with the unfused loss) (docs/accuracy.md;
    +2.3 / +8.5 before the benchmark configs' bf16 main gradients, GB200 +10.3 before its BF16
    GEMMs at its sustained rate; GB200 +5.1 since it runs its container's cuDNN 9.13.1 curves,
    cudnn-9.13, not the profile's 9.17 ones, 2026-12-06; B200 +4.1 since its attention runs the
    same cuDNN 9.13.1 graph rows, not PyTorch SDPA's 9.13.0 ones, session 89); within 1 point more,
    either sign."""
    names = {"bridge-25.11/llama3-8b-b200-8gpu": 4.1, "bridge-25.11/llama3-8b-gb200-8gpu": 5.1}
    results = run_cases([c for c in load_cases() if c.name in names], jobs=1)
    assert len(results) == 2
    for r in results:
        assert r.error_pct is not None and abs(r.error_pct) <= names[r.case.name] + 1.0, (r.case.name, r.error_pct)


# MLPerf Training rows (slow: true) lie outside the quick-set ratchet, and drift there went unseen:
# the blocking amax all-reduce of 2026-12-04 moved every H100 row 1.5-2.7 points before they were
# re-run on 2026-12-05. These rows (all but the 8,192- to 11,616-GPU ones, 25-95 s each) are held to
# their errors of that day (docs/accuracy.md, "MLPerf Training GPT-3 175B on DGX H100" and the v5.1
# rows), either sign within 1 point: a change that moves one further updates this table with its reason.
# The v5.0 405B rows: 1.22 / 0.94 before their stored per-communicator CTA limits (2026-12-05), 0.38 /
# 0.03 before every model chunk was one bucket (OVERLAP_PARAM_GATHER_WITH_OPTIM_STEP; same day), when
# Nebius's two H200 rows were added.
# The v5.1 8B rows: -4.60 / -36.70 / -12.78 / -36.67 before the settings other submitters' copies of
# the implementation show (TransformerEngine's cross-entropy; NeMo's comm-overlap buckets where the
# configuration sets no BUCKET_SIZE; 2026-12-05);
# the partner rows (HPE, Dell, Oracle, Lambda; the University of Florida's 405B) were added that day,
# and NVIDIA's v5.1 405B NVFP4 rows with NeMo's data-parallel-last rank order (TP_PP_DP_MAPPING; the
# UF rows unmoved by it) and the NVFP4 recipe's options (no Hadamard transform, no stochastic rounding).
# The GB300 rows: -8.89 / -37.65 / -17.40 / +7.38 before gb300-nvl72 took GB300's own measured FP8
# and FP4 GEMM rates (Azure's ND GB300 v6 cuBLASLt tables, 1.14x GB200's; same day).
# The GPT-3 rows: v4.0 512 / 10,752 2.22 / 2.05, v4.1 256 / 512 4.43 / 2.47 and the 64-B200 row 5.46
# before their userbuffers files' atomic GEMMs and FP8 proj_fprop buffers (NVTE_UB_ATOMIC_GEMM_RS_PROJ
# default 1, the v4.0 MBS 1 configs' NVTE_UB_ATOMIC_GEMM_RS_FC2=1 and NVTE_UB_FP8_RS=1, the B200
# config's NVTE_UB_FP8_RS=1; 2026-12-06).
# The Llama 3.1 8B rows: 72 / 512 GB300 -14.79 / -40.16, 72 / 512 GB200 -16.50 / -37.59, Lambda's
# GB300 -22.74, Oracle's B200 -4.03, HPE's H200 -14.68, and the v4.0 10,752-GPU GPT-3 row 0.71,
# before the host's eager end of each step (training.step_tail: Megatron-Core's optimizer Python
# and TransformerEngine's FP8 weight casts after the norm's sync; 2026-12-06, session 86).
# The GB200 / GB300 rows: 8B 72 / 512 GB300 -8.89 / -34.75, 72 / 512 GB200 -11.36 / -32.39, Lambda's
# GB300 -17.40, 405B NVFP4 512 GB200 / 512 GB300 / 2,560 / 5,120 GB200 -7.68 / -1.68 / -9.15 / -8.73,
# before they ran cuDNN 9.13.1's attention curves (cudnn-9.13), their containers' release (NVIDIA's
# v5.1 system descriptions), not the profiles' 9.17 / 9.22 ones (2026-12-06, session 87).
# FP8 GEMMs at the BF16 shape table's rate at half their K (session 88): v5.0 405B on 2,048 / 2,432 H100
# 0.37 / 0.02, the B200 / GB200 / GB300 8B rows (72 GB300 -0.41, 512 -27.48, 72 GB200 -2.77, 512 -25.89,
# Dell -8.48, Oracle -2.66, Lambda -9.71) and UF's 405B -6.64 / -7.61, the 64-B200 GPT-3 5.24 before it
# (short-K FP8 GEMMs slower, the de-shaped Hopper curve's mid-size ones faster; NVFP4 rows unmoved).
# B200's attention on cuDNN's graph rows as TransformerEngine calls it, not PyTorch SDPA's (session 89):
# the 64-B200 GPT-3 5.91 (its 2K calls on 9.10.2's rows, 1.4x faster forward), Dell's / Oracle's 8B
# -7.76 / -1.68 and UF's 405B -5.58 / -6.56 before it (9.13.1's rows; 8K forward 1.18x): physics over
# score, every B200 row of NeMo's code now simulated 3-10% fast.
# The Hopper FP8 GEMMs at Azure's cuBLASLt tables of an H100 / H200 at their settled clocks, not
# DeepGEMM's burst block-scaled points and an assumed ramp (session 90): before it GPT-3 175B on
# 4,096 / 512 / 10,752 / 256 / 512 H100 -0.25 / 1.36 / 0.86 / 3.53 / 1.60, Llama 3.1 405B on 2,048 /
# 2,432 H100 -0.91 / -1.26, Nebius's 405B on 512 / 1,024 H200 -3.82 / -3.91, HPE's 8B -14.05:
# physics over score, every Hopper row 1.3-4.6 points faster.
MLPERF_HELD_ERRORS = {
    "mlperf-v3.1/gpt3-175b-4096xh100": -3.45, "mlperf-v4.0/gpt3-175b-512xh100": -0.32,
    "mlperf-v4.0/gpt3-175b-10752xh100": -1.60, "mlperf-v4.1/gpt3-175b-256xh100": 1.80,
    "mlperf-v4.1/gpt3-175b-512xh100": -0.10, "mlperf-v5.0/llama31-405b-2048xh100": -5.46,
    "mlperf-v5.0/llama31-405b-2432xh100": -5.79, "mlperf-v4.1/gpt3-175b-64xb200": 3.45,
    "mlperf-v5.0/llama31-405b-512xh200-nebius": -7.13,
    "mlperf-v5.0/llama31-405b-1024xh200-nebius": -7.28, "mlperf-v5.1/llama31-8b-72xgb300": 0.46,
    "mlperf-v5.1/llama31-8b-512xgb300": -27.03, "mlperf-v5.1/llama31-8b-72xgb200": -1.75,
    "mlperf-v5.1/llama31-8b-512xgb200": -25.41, "mlperf-v5.1/llama31-8b-64xh200-hpe": -15.32,
    "mlperf-v5.1/llama31-8b-16xb200-dell": -9.68, "mlperf-v5.1/llama31-8b-64xb200-oracle": -9.52,
    "mlperf-v5.1/llama31-8b-72xgb300-lambda": -8.92, "mlperf-v5.1/llama31-405b-256xb200-uf": -9.38,
    "mlperf-v5.1/llama31-405b-448xb200-uf": -10.32, "mlperf-v5.1/llama31-405b-512xgb200-nvfp4": -1.84,
    "mlperf-v5.1/llama31-405b-512xgb300-nvfp4": 4.89,
    "mlperf-v5.1/llama31-405b-2560xgb200-nvfp4": -3.51,
    "mlperf-v5.1/llama31-405b-5120xgb200-nvfp4": -3.12,
}  # fmt: skip


#: held rows whose smaller or larger sibling of the same configuration is held in CI too: marked
#: ``scale`` (left out of the default run, ``-m scale`` runs them), as together they cost more
#: than three CPU-minutes of the suite (2026-12-07: 89 / 42 / 32 / 26 s), which the brief keeps
#: under about 20 minutes on two cores
MLPERF_SCALE_SIBLINGS = {
    "mlperf-v5.1/llama31-405b-512xgb200-nvfp4": "mlperf-v5.1/llama31-405b-2560xgb200-nvfp4",
    "mlperf-v5.0/llama31-405b-512xh200-nebius": "mlperf-v5.0/llama31-405b-1024xh200-nebius",
    "mlperf-v5.1/llama31-405b-448xb200-uf": "mlperf-v5.1/llama31-405b-256xb200-uf",
    "mlperf-v5.0/llama31-405b-2432xh100": "mlperf-v5.0/llama31-405b-2048xh100",
}


def _held_row(name: str):
    return pytest.param(name, marks=pytest.mark.scale) if name in MLPERF_SCALE_SIBLINGS else name


def test_every_scale_row_has_its_sibling_held_in_ci():
    for row, sibling in MLPERF_SCALE_SIBLINGS.items():
        assert row in MLPERF_HELD_ERRORS and sibling in MLPERF_HELD_ERRORS, row
        assert sibling not in MLPERF_SCALE_SIBLINGS, sibling
        assert row.rsplit("x", 1)[1] == sibling.rsplit("x", 1)[1], (row, sibling)  # the same GPU and submitter


@pytest.mark.slow
@pytest.mark.parametrize("name", [_held_row(n) for n in sorted(MLPERF_HELD_ERRORS)])
def test_mlperf_rows_hold_their_errors(name):
    """The slow MLPerf rows above (2-90 CPU-seconds each, one test apiece so that xdist spreads
    them), each within 1 point of its recorded error."""
    (r,) = run_cases([c for c in load_cases() if c.name == name], jobs=1)
    assert r.error_pct is not None, name
    assert abs(r.error_pct - MLPERF_HELD_ERRORS[name]) <= 1.0, (name, r.error_pct)


@pytest.mark.slow
def test_ratchet_all_quick_cases():
    """Every shipped case not marked slow (about 23 CPU-minutes, long steps read off shorter
    ones by steady_state.py; run first, see conftest)."""
    results = run_cases(load_cases(quick=True), jobs=2)
    s = summarize(results)
    assert s["failed"] == 0
    assert s["mape_pct"] <= QUICK_SET_MAPE + 1.0, s
    assert sum(c.predicted_ok for c in ordering_checks(results)) >= QUICK_SET_ORDERING_ROWS
    assert memory_summary(results)["mape_pct"] <= QUICK_SET_MEMORY_MAPE + 1.0
    # the per-GPU record `run` prints (validation/accuracy-by-gpu.json) is this run's
    from simcluster.accuracy_table import load_table

    shipped = load_table()["by_gpu"]
    for gpu, row in by_gpu(results).items():
        assert shipped[gpu]["n"] == row["n"], gpu
        for key in ("mape_pct", "median_ape_pct", "speed_bias_pct"):
            assert shipped[gpu][key] == pytest.approx(row[key], abs=0.15), (gpu, key, row[key])
    shipped_precision = load_table()["by_gpu_precision"]
    for gpu, rows in by_gpu_precision(results).items():
        if len(rows) < 2:
            assert gpu not in shipped_precision, gpu
            continue
        for precision, row in rows.items():
            mine = shipped_precision[gpu][precision]
            assert mine["n"] == row["n"] and mine["mape_pct"] == pytest.approx(row["mape_pct"], abs=0.15), gpu
    families = by_family(results)
    for family, level in FAMILY_MAPE.items():
        assert families[family]["mape_pct"] <= level + 1.0, (family, families[family])
    for family, level in FAMILY_MAX_APE.items():
        assert families[family]["max_ape_pct"] <= level + 1.0, (family, families[family])


def test_an_hfu_figure_is_compared_in_hardware_flops(cli, tmp_path):
    """``hfu`` is the MFU of the FLOPs the GPUs run (Korthikanti et al. 2022 Sec. 6): compared
    with the simulated HFU; a contradicting ``flops:`` is refused for that case."""
    sc = make_scenario(training={"recompute": "full"})
    cases = [
        {"name": "hfu", "source": "t", "scenario": sc, "measured": {"hfu": 0.5}},
        {"name": "bad", "source": "t", "scenario": sc, "measured": {"hfu": 0.5}, "flops": "causal"},
    ]
    rows = {c["name"]: c for c in json.loads(cli("validate", _cases_file(tmp_path, cases), "--json").out)["cases"]}
    summary = simulate(scenario_from_dict(sc)).summary
    assert rows["hfu"]["predicted"] == pytest.approx(summary["hfu"]) and summary["hfu"] > summary["mfu"]
    assert "contradicts a figure in hardware FLOPs" in rows["bad"]["error"]


def test_a_megatron_bridge_cases_tflops_are_counted_as_bridge_counts_them(tmp_path):
    # Megatron-Bridge's summaries print model TFLOP/s with attention's causal half (25.09, Llama 3
    # 8B at 8K: 14,079 tokens/s/GPU = 725 TFLOP/s); NeMo's own up to 25.07 count it whole
    # (25.04 GB200: 33,099 = 1,917), so only a case naming Megatron-Bridge is compared causal
    from simcluster.validate import load_cases_file

    bridge = {**make_scenario(), "framework": "Megatron-Bridge"}
    cases = [{"name": "bridge", "scenario": bridge, "measured": {"model_tflops_per_gpu": 500}},
             {"name": "said", "scenario": bridge, "measured": {"model_tflops_per_gpu": 500}, "flops": "megatron"},
             {"name": "nemo", "scenario": {**make_scenario(), "framework": "NeMo"}, "measured": {"model_tflops_per_gpu": 500}},
             {"name": "tokens", "scenario": bridge, "measured": {"tokens_per_s": 5e5}}]  # fmt: skip
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"cases": cases}))
    assert {c.name: c.flops for c in load_cases_file(path)} == {
        "bridge": "causal", "said": "megatron", "nemo": "megatron", "tokens": "megatron"}


def test_a_memory_figure_among_the_measured_ones_is_the_cases_peak_memory(tmp_path):
    # tables give a run's memory in the same row (the Zero Bubble tables' "memory GB")
    from simcluster.validate import load_cases_file

    case = {"name": "m", "scenario": make_scenario(), "measured": {"samples_per_s": 3.0, "Memory (GB)": 61.5}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump([case]))
    (read,) = load_cases_file(path)
    assert (read.metric, read.peak_memory_gib) == ("tokens_per_s", 61.5)


def test_accuracy_gates_fail_the_run_with_status_1(cli, tmp_path):
    """--max-mape / --max-error turn the report into a CI gate: the report is still printed,
    each broken gate is one stderr line, and the status is 1 (2 stays for bad input). Two cases
    measured at the prediction and 1.2x below it: errors 0% and +20%, MAPE 10%."""
    probe = {"name": "probe", "source": "t", "scenario": make_scenario(), "measured": {"step_time_s": 1.0}}
    res = cli("validate", _cases_file(tmp_path, [probe]), "--json", "--jobs", "1")
    predicted = json.loads(res.out)["cases"][0]["predicted"]
    exact = {**probe, "name": "exact", "measured": {"step_time_s": predicted}}
    slow = {**probe, "name": "slow", "measured": {"step_time_s": predicted / 1.2}}
    cases = _cases_file(tmp_path, [exact, slow])
    run = lambda *gates: cli("validate", cases, "--json", "--jobs", "1", *gates)  # noqa: E731

    ok = run("--max-mape", "10.5", "--max-error", "20.5%")
    assert ok.code == 0 and ok.err == "", ok.err
    assert json.loads(ok.out)["summary"]["mape_pct"] == pytest.approx(10.0)
    mape = run("--max-mape", "9")
    assert mape.code == 1 and json.loads(mape.out)["summary"]["n"] == 2  # the report still prints
    assert mape.err.strip() == "simcluster validate: MAPE 10.00% is above --max-mape 9%"
    worst = run("--max-error", "15")
    assert worst.code == 1
    assert worst.err.strip().endswith("1 case(s) beyond --max-error 15%: slow (+20.0%)")
    bad = {**probe, "name": "bad", "scenario": make_scenario(parallel={"tp": 3})}
    failed = cli("validate", _cases_file(tmp_path, [exact, bad]), "--jobs", "1", "--max-mape", "50")
    assert failed.code == 1 and "1 case(s) could not be simulated: bad" in failed.err
    for value in ("abc", "0", "-5", "inf"):
        refused = cli("validate", cases, "--max-error", value)
        assert refused.code == 2 and refused.err.count("\n") == 1 and "--max-error" in refused.err


def test_a_misspelt_case_key_fails_the_case_instead_of_scoring_another_scenario(cli, tmp_path):
    # 'sett:' for 'set:' ran the scenario without the override and scored it (+219% in the
    # review); keys far from every case key (notes, a URL) are still metadata
    base = {"source": "t", "scenario": make_scenario(), "measured": {"tokens_per_s": 1e5}}
    typo = {**base, "name": "typo", "sett": {"training.global_batch": 16}}
    noted = {**base, "name": "noted", "notes": "from a talk", "url": "https://example.org"}
    res = cli("validate", _cases_file(tmp_path, [typo, noted]), "--json", "--jobs", "1")
    assert res.code == 0, res.err
    by_name = {c["name"]: c for c in json.loads(res.out)["cases"]}
    assert by_name["typo"]["predicted"] is None
    assert "cases[0].sett: unknown key (did you mean 'set'?); fix its spelling" in by_name["typo"]["error"]
    assert by_name["noted"]["predicted"] is not None


def test_an_empty_cases_file_says_so_without_blaming_a_flag(cli, tmp_path):
    path = tmp_path / "empty.yaml"
    for text in ("cases: []\n", "cases:\n"):  # the key with nothing under it (was: 'needs a top-level cases: list')
        path.write_text(text)
        res = cli("validate", str(path))
        assert res.code == 2 and res.err.strip() == f"error: CASES: {path} has no cases; add items to its cases: list"
    good = {"name": "good", "source": "t", "scenario": make_scenario(), "measured": {"tokens_per_s": 1e5}}
    res = cli("validate", _cases_file(tmp_path, [good]), "--filter", "zzz")
    assert res.code == 2 and res.err.startswith("error: --filter: no case left after --filter;")
    # the filter matches a case's name or family: the families it could have meant are named
    assert res.err.strip().endswith("; families: cases")  # a file's family is its stem


def test_a_misspelt_family_filter_gets_the_nearest_family(cli):
    res = cli("validate", "--quick", "--filter", "nanotorn")
    assert res.code == 2 and len(res.err.strip().splitlines()) == 1
    assert "no case left after --filter and --quick (did you mean 'nanotron-h100'?)" in res.err
    assert "families: amd-fsdp-mi300x, amd-fsdp-mi325x, bigscience-a100, " in res.err
    assert "mlperf-lora-70b" in res.err


def test_cases_whose_profile_does_not_load_are_not_a_gpu_row(tmp_path):
    from simcluster.validate_report import NO_PROFILE, gpu_of

    case = Case("x", "t", "fam", "step_time_s", 1.0, {"cluster": {"hardware": str(tmp_path / "none.yaml")}})
    assert gpu_of(case) == NO_PROFILE


def test_a_case_name_in_two_files_names_both(cli, tmp_path):
    # two measure-step case files of one scenario carry the same name; the error says where
    case = {"name": "tiny/measure-step", "source": "t", "scenario": make_scenario(), "measured": {"tokens_per_s": 1e5}}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = _cases_file(tmp_path / "a", [case]), _cases_file(tmp_path / "b", [case])
    res = cli("validate", first, second)
    assert res.code == 2 and res.err.strip() == (
        f"error: CASES: case name 'tiny/measure-step' appears twice (in {first} and {second}); "
        "names must be unique: rename one"
    )


def test_a_case_without_a_micro_batch_is_told_what_was_assumed(cli, tmp_path):
    # Shoeybi et al. 2019 ran 8 sequences per V100 without accumulation; a case that leaves the
    # micro-batch out is simulated at 1 with 8 accumulation steps, and the table says so
    bare = make_scenario()
    bare["training"] = {k: v for k, v in bare["training"].items() if k != "micro_batch"}
    cases = [{"name": "no-mbs", "scenario": bare, "measured": {"step_time_s": 1.0}},
             {"name": "with-mbs", "scenario": make_scenario(), "measured": {"step_time_s": 1.0}}]  # fmt: skip
    out = " ".join(cli("validate", _cases_file(tmp_path, cases), "--jobs", "1").out.split())
    assert "1 case(s) state no micro-batch (no-mbs)" in out


def test_a_cases_unset_keys_are_read_by_the_loaders_own_path_helper():
    """The nulls still unwritten once set: is applied are looked up with scenario/loading.py's
    value_at, the helper the loader reads a raw mapping's dotted keys by, not a twin of it."""
    import simcluster.validate as validate
    from simcluster.scenario.loading import value_at

    assert not hasattr(validate, "_value_at")
    assert value_at({"training": {"seq_len": 8}}, "training.seq_len".split(".")) == 8
    assert value_at({"training": 3}, ["training", "seq_len"]) is None
