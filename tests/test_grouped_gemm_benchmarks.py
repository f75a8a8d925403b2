"""The expert layer's grouped GEMMs and router against published kernel benchmarks.

A mixture-of-experts layer with many small experts runs one GEMM per local expert
(``parallelism/expert.py::expert_work``: the per-GEMM model's time of each, ``count`` of them
filling the GPU's waves together, one launch gap for the group). These rows check that model at
the shapes fine-grained MoE models run, where the published end-to-end runs are far faster in
simulation than measured (docs/accuracy.md, "MoE with small experts"): the grouped GEMM is not
where the model is optimistic.

Sources:
- NVIDIA/TransformerEngine pull request 2045 ("Add Cutlass GroupGEMM Support for fine-grained
  MoE Model", merged for TE 2.8): ``general_grouped_gemm`` on H100, BF16, TE's default
  multi-stream cuBLAS path (the one Megatron-Core's ``TEGroupedMLP`` runs), shape (g, m, n, k)
  = (groups, rows per group, N, K): (8, 4096, 768, 2048) 508.77 TFLOP/s with TE 2.2 and 627.903
  with TE 2.7 (CUDA 12.9); (16, 2048, 768, 2048) 398.81 and 553.945 (Qwen3-30B-A3B's expert
  width 768 over hidden 2048).
- deepseek-ai/DeepGEMM README.md, first release (February 2025), "Performance": H800, NVCC
  12.8, FP8 with 1x128 / 128x128 block scaling; "Grouped GEMMs for MoE models (contiguous
  layout)" and "(masked layout)", TFLOP/s per (groups, M per group, N, K).
"""

from __future__ import annotations

import pytest
from engine_helpers import layer_builder

from simcluster.compute import KernelModel
from simcluster.hardware import load_profile
from simcluster.parallelism import expert

#: TE PR 2045: (g, m, n, k) -> (TE 2.2, TE 2.7) TFLOP/s of the multi-stream cuBLAS grouped GEMM
TE_MULTI_STREAM_H100 = {
    (8, 4096, 768, 2048): (508.77, 627.903),
    (16, 2048, 768, 2048): (398.81, 553.945),
}

#: DeepGEMM's first README, H800: (g, m, n, k) -> TFLOP/s
DEEPGEMM_CONTIGUOUS = {
    (4, 8192, 4096, 7168): 1297,
    (4, 8192, 7168, 2048): 1099,
    (8, 4096, 4096, 7168): 1288,
    (8, 4096, 7168, 2048): 1093,
}
DEEPGEMM_MASKED = {
    (1, 1024, 4096, 7168): 1233,
    (1, 1024, 7168, 2048): 925,
    (2, 512, 4096, 7168): 1040,
    (2, 512, 7168, 2048): 916,
    (4, 256, 4096, 7168): 932,
    (4, 256, 7168, 2048): 815,
}


def _tflops(km: KernelModel, g: int, m: int, n: int, k: int) -> float:
    return 2.0 * g * m * n * k / km.gemm(m, n, k, count=g) / 1e12


def test_te_multi_stream_grouped_gemm_between_its_two_releases():
    """On dgx-h100 the model's BF16 grouped GEMM at Qwen3-30B-A3B's expert shapes is no faster
    than TE 2.7 measured it and within 5% of TE 2.2 or faster (model 548 and 418 TFLOP/s): it
    does not under-charge TE's per-expert cuBLAS loop."""
    km = KernelModel(load_profile("dgx-h100"), "bf16")
    for (g, m, n, k), (te22, te27) in TE_MULTI_STREAM_H100.items():
        model = _tflops(km, g, m, n, k)
        assert 0.95 * te22 <= model <= te27, (g, m, n, k, model)


def test_deepgemm_contiguous_rows_within_fifteen_percent():
    """DeepSeek-V3's expert shapes (fc1 N 4096 over K 7168, fc2 N 7168 over K 2048) on
    hgx-h800 in FP8: each row's time within 15% of DeepGEMM's (model 1266, 1234, 1237 and 974
    TFLOP/s against 1297, 1099, 1288 and 1093) and their mean error within 5%."""
    km = KernelModel(load_profile("hgx-h800"), "fp8", fp8_recipe="block")
    errors = []
    for (g, m, n, k), published in DEEPGEMM_CONTIGUOUS.items():
        err = published / _tflops(km, g, m, n, k) - 1.0  # simulated time over published, less 1
        assert abs(err) < 0.15, (g, m, n, k, err)
        errors.append(err)
    assert abs(sum(errors) / len(errors)) < 0.05


def test_small_groups_not_faster_than_deepgemm():
    """256 to 1,024 rows per expert (the masked layout's groups; fine-grained experts' per-GPU
    share): the model's per-GEMM rates are 19-54% slower than DeepGEMM's, never faster, so
    small experts' GEMMs are not what the model under-charges."""
    km = KernelModel(load_profile("hgx-h800"), "fp8", fp8_recipe="block")
    for (g, m, n, k), published in DEEPGEMM_MASKED.items():
        assert _tflops(km, g, m, n, k) < published, (g, m, n, k)


MOE = {
    "name": "small-moe", "layers": 2, "hidden": 2048, "heads": 16, "kv_heads": 4, "ffn": 4096,
    "vocab": 1024, "experts": 128, "top_k": 8, "expert_ffn": 768, "position": "rope",
}  # fmt: skip


def test_router_gemm_stays_bf16_under_fp8():
    """Megatron-Core's router is a plain matmul (``moe_utils.router_gating_linear``), not a
    TransformerEngine module, so FP8 training runs it in BF16 (DeepSeek-V3 Sec. 3.3.1 keeps the
    gating in BF16/FP32 too): the router segment's GEMM time is the BF16 time of
    tokens x hidden @ hidden x experts forward, the input gradient's tokens x experts @
    experts x hidden backward, and the weight gradient's hidden x experts over the tokens."""
    b = layer_builder(
        {
            "model": MOE,
            "cluster": {"hardware": "dgx-h100", "gpus": 8},
            "parallel": {"ep": 8},
            "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 8, "precision": "fp8"},
        }
    )
    km = b.km
    assert expert.router_gemm_dtype(km) == "bf16"
    tokens = 4096
    for phase, shape, role in (("F", (tokens, 128, 2048), "fwd"), ("B", (tokens, 2048, 128), "dgrad")):
        (router,) = [s for s in expert.moe_block(b.shapes, km, b.scenario.moe, phase, 0) if s.name == "router"]
        gemm = dict(router.work.parts)["gemm"]
        assert gemm == pytest.approx(km.gemm(*shape, dtype="bf16", role=role))
        assert gemm != pytest.approx(km.gemm(*shape, dtype="fp8", role=role))
    (experts,) = expert.moe_block(b.shapes, km, b.scenario.moe, "W", 0)
    routed = dict(expert.expert_work(b.shapes, km, b.scenario.moe, "W").parts)["gemm"]
    router_w = km.gemm(2048, 128, tokens, dtype="bf16", role="wgrad")
    assert dict(experts.work.parts)["gemm"] == pytest.approx(routed + router_w)
