"""Memory of NVIDIA's DGX Cloud Llama rows against what their runs logged and what fits.

NVIDIA/dgxc-benchmarking llama3.1/README.md (commit 741c886) shows one line of a NeMo 2 run's log
(NEMO_LOG_MEMORY_USAGE=1): the 8B on 8 GPUs at GBS 128, a BF16 step time (12.39 s; the BF16 table
row is 12.27 s, FP8 9.33 s), ``peak_memory_usage: 70833405952 | memory_allocated: 44271689728``.
``memory_allocated`` is read after the step: what stays is the weights, the main gradients and the
distributed optimizer's shard, 5.51 B per parameter of the 8.03e9: bf16 weights 2, bf16 main
gradients 2 and fp32 master + two moments 12 over dp x cp = 8. NeMo 2.2.0's llama3_8b / 70b /
llama31_405b ``pretrain_performance_optimizations`` set ``recipe.trainer.plugins.grad_reduce_in_fp32
= False``, which ``MegatronStrategy.connect`` copies over the DDP config (training.fp32_grad_accum
false); fp32 gradients would make the weights and gradients alone 48.2e9 B, more than the log's
whole allocation.
"""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.memory_report import memory_summary
from simcluster.scenario import scenario_from_dict
from simcluster.validate import load_cases

#: the README's example log line (NVIDIA/dgxc-benchmarking llama3.1/README.md @741c886)
LOGGED_ALLOCATED = 44_271_689_728
LOGGED_PEAK = 70_833_405_952
#: nvidia-smi's total for an H100 SXM5 80GB (81559 MiB), what a process can hold at most
H100_DEVICE_BYTES = 81_559 * 2**20


def _memory(name: str) -> dict:
    """``simcluster memory --json`` of a shipped case, its scenario read as ``validate`` reads it."""
    case = next(c for c in load_cases() if c.name == name)
    data = {**case.scenario, "name": case.name.replace("/", "_")}
    return memory_summary(build_context(scenario_from_dict(data, [(key, None) for key in case.unset])))


def test_llama3_8b_static_memory_is_the_logged_allocation():
    """Weights + main gradients + optimizer shard of the 8B BF16 8-GPU row: 8,030,261,248
    parameters x 5.5 B = 44,166,436,864 B, within 0.3% of the 44,271,689,728 B the README's log
    line holds after the step (the rest: RoPE tables, workspaces); 7.5 B with fp32 gradients
    would be 36% over it."""
    mem = _memory("dgxc/llama3-8b-bf16-8gpu")
    assert mem["params_per_gpu"] == 8_030_261_248
    static = mem["params_bytes"] + mem["grads_bytes"] + mem["optimizer_bytes"]
    assert static == pytest.approx(8_030_261_248 * 5.5)
    assert static == pytest.approx(LOGGED_ALLOCATED, rel=0.003)


def test_llama3_8b_peak_is_under_the_logged_peak():
    """The allocator's peak (everything but training.memory_overhead_gib, which PyTorch does not
    count) cannot exceed the log's peak_memory_usage, 70,833,405,952 B, whether NeMo logs the
    reserved or the allocated peak: 65.66e9 B simulated (it was 81.7e9 with fp32 gradients)."""
    mem = _memory("dgxc/llama3-8b-bf16-8gpu")
    assert mem["total_bytes"] - mem["other_bytes"] <= LOGGED_PEAK


def test_llama31_405b_bf16_512_gpus_fits_an_h100():
    """The 405B BF16 row ran on 512 H100 80GB (README table: 19.78 s). Its stage 1 (16 layers,
    6,375,407,616 parameters) holds bf16 gradients, 2 B each (11.875 GiB; fp32 would be 23.75 GiB
    and put that GPU at 81.15 GiB, over the 79.65 GiB nvidia-smi reports). The most loaded GPU is
    the last stage's: wgrad_deferral_limit 50 keeps 50 of its 64 microbatches' LM-head inputs
    (2 x 4096 x 16384 / 8 B) and output gradients (2 x 4096 x 128256 / 8 B) until the pipeline
    flush, 50 x 148,111,360 B = 6.90 GiB (parallelism/head_wgrad_deferral.py), and the drain's
    two gather buffers (2 x 2 x 4096 x 16384 B); it still fits."""
    mem = _memory("dgxc/llama3.1-405b-bf16-512gpu")
    stage1 = mem["per_stage"][1]
    assert stage1["params_per_gpu"] == 6_375_407_616
    assert stage1["grads_bytes"] == 2 * 6_375_407_616
    assert mem["worst_stage"] == 7
    assert mem["other_bytes"] - mem["per_stage"][0]["other_bytes"] == 2 * 2 * 4096 * 16384
    assert mem["total_bytes"] < H100_DEVICE_BYTES
    assert mem["fits"]
