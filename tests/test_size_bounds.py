"""Sizes no framework runs and simcluster cannot simulate in reasonable time are one-line
errors naming the field, the bound and its reason (simcluster/size_bounds.py); values just
inside each bound still pass the check."""

from __future__ import annotations

import dataclasses
import re

import pytest

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.limits import MAX_GEMM_DIM, MAX_LAYER_PASSES
from simcluster.scenario import load_scenario
from simcluster.size_bounds import check_sizes
from tests.test_scenario_errors import assert_one_line_error

BASE = "llama3-8b-8xh100"  # dp 8, tp 1, micro_batch 1, global_batch 64: 8 microbatches, 32 layers


@pytest.fixture(scope="module")
def ctx():
    return build_context(load_scenario(BASE))


def test_gemm_bound_is_cublas_int_max():
    # PyTorch aten/src/ATen/cuda/CUDABlas.cpp, CUDABLAS_POSINT_CHECK: m, n, k in (0, INT_MAX]
    assert MAX_GEMM_DIM == 2**31 - 1 == 2_147_483_647


@pytest.mark.parametrize(
    "setting, field",
    [("training.seq_len=10000000000000", "training.seq_len"),
     ("model.hidden=100000000000", "model.hidden"),
     ("model.ffn=100000000000", "model.ffn"),
     ("model.vocab=100000000000", "model.vocab")],
)  # fmt: skip
def test_gemm_dimensions_above_int_max_are_refused(cli, setting, field):
    res = cli("memory", BASE, "--set", setting)
    assert_one_line_error(res, field, "2,147,483,647", "GEMM", f"lower {field}")


def test_microbatch_tokens_name_micro_batch_when_the_sequence_fits(cli):
    # 2**20 sequences of 8,192 tokens a microbatch: 2**33 rows, each sequence well inside
    res = cli("memory", BASE, "--set", "training.micro_batch=1048576", "--set", "training.global_batch=8388608")
    assert_one_line_error(res, "training.micro_batch", "8,589,934,592 tokens", "2,147,483,647")


def test_gemm_rows_bound_is_exact(ctx):
    """micro_batch x seq_len / cp rows: INT_MAX passes, one token more is refused."""
    at = dataclasses.replace(ctx.layout, micro_batch=1, seq_len=MAX_GEMM_DIM, cp=1)
    check_sizes(ctx.model, at)
    with pytest.raises(UserError) as got:
        check_sizes(ctx.model, dataclasses.replace(at, seq_len=MAX_GEMM_DIM + 1))
    assert got.value.field == "training.seq_len"
    # context parallelism splits the sequence before the linear layers: cp 2 halves the rows
    check_sizes(ctx.model, dataclasses.replace(at, seq_len=2 * MAX_GEMM_DIM, cp=2))


def test_widths_count_per_gpu_after_tensor_parallelism(ctx):
    """The MLP and output head GEMMs see ffn / tp and vocab / tp (Megatron's column- and
    vocab-parallel linears): a width twice INT_MAX passes at tp 2, not at tp 1."""
    wide = dataclasses.replace(ctx.model, ffn=2 * MAX_GEMM_DIM, vocab=2 * MAX_GEMM_DIM)
    check_sizes(wide, dataclasses.replace(ctx.layout, tp=2))
    with pytest.raises(UserError) as got:
        check_sizes(wide, ctx.layout)
    assert got.value.field == "model.ffn" and f"{2 * MAX_GEMM_DIM:,}" in got.value.message


def test_layer_passes_bound(ctx):
    """8 microbatches x layers: at the bound it passes, one layer more is refused naming the
    layers (the factor further from any published run), and the microbatches when they are."""
    m = ctx.layout.microbatches
    assert m == 8
    check_sizes(dataclasses.replace(ctx.model, layers=MAX_LAYER_PASSES // m), ctx.layout)
    with pytest.raises(UserError) as got:
        check_sizes(dataclasses.replace(ctx.model, layers=MAX_LAYER_PASSES // m + 1), ctx.layout)
    assert got.value.field == "model.layers" and "2,000,000" in got.value.message
    many = dataclasses.replace(ctx.layout, global_batch=8 * (MAX_LAYER_PASSES // 32 + 1))
    with pytest.raises(UserError) as got:
        check_sizes(ctx.model, many)
    assert got.value.field == "training.global_batch" and "micro_batch" in got.value.message


def test_layer_passes_cli(cli):
    res = cli("memory", BASE, "--set", "training.global_batch=2000000", "--set", "model.layers=9000")
    assert_one_line_error(res, "training.global_batch", "250,000 microbatches", "9,000 layers", "hours of simulation")


def test_the_largest_published_case_is_far_inside():
    """The largest validation case (BLOOM 176B at pp 24: global batch 2,048 over dp 2, 1,024
    microbatches x 70 layers) is the 71,680 layer passes the error quotes, and passes."""
    from simcluster.scenario import scenario_from_dict
    from simcluster.validate import load_cases

    (case,) = [c for c in load_cases(None, contains="bloom/176B-24node-tp4pp24dp2-mbs1")]
    bloom = build_context(scenario_from_dict({**case.scenario, "name": "bloom"}))
    assert bloom.layout.microbatches * bloom.model.layers == 71_680
    check_sizes(bloom.model, bloom.layout)


@pytest.mark.parametrize(
    "setting, field",
    [("training.memory_overhead_gib=1e300", "training.memory_overhead_gib"),
     ("cluster.memory_gib=1e300", "cluster.memory_gib"),
     ("cluster.profile.gpu.memory_gib=1e300", "cluster.profile.gpu.memory_gib")],
)  # fmt: skip
def test_gpu_memory_beyond_its_address_space_is_refused(cli, setting, field):
    """A GPU addresses 2^49 bytes (49-bit virtual addresses, NVIDIA's since Pascal: the Tesla
    P100 whitepaper): 1e300 GiB was 'summary: cannot be written as JSON: inf' from `run --json`
    and 'fits: 70.94 GiB of inf TiB' from `memory`."""
    res = cli("memory", BASE, "--set", setting)
    assert_one_line_error(res, field, "524,288 GiB (2^49 bytes)", "lower it")
    assert "Value error" not in res.err


def test_gpu_memory_bound_is_exact(cli):
    from simcluster.limits import MAX_GPU_MEMORY_GIB

    assert MAX_GPU_MEMORY_GIB * 2**30 == 2**49
    assert cli("memory", BASE, "--set", f"cluster.memory_gib={MAX_GPU_MEMORY_GIB}").code == 0
    res = cli("memory", BASE, "--set", f"training.memory_overhead_gib={MAX_GPU_MEMORY_GIB + 1}")
    assert_one_line_error(res, "training.memory_overhead_gib", "2^49")


def test_a_profile_file_beyond_the_address_space_names_its_field(cli, tmp_path):
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[1] / "hardware" / "dgx-h100.yaml"
    text = shipped.read_text()
    big, n = re.subn(r"(?m)^(  memory_gib: )[0-9.]+", r"\g<1>1.0e+300", text, count=1)
    assert n == 1
    profile = tmp_path / "big.yaml"
    profile.write_text(big)
    res = cli("memory", BASE, "--hardware", str(profile))
    assert_one_line_error(res, "--hardware", "field 'gpu.memory_gib'", "2^49 bytes")
    assert "Value error" not in res.err


def test_attention_width_is_bounded_per_gpu(ctx):
    """The fused QKV projection's width ((heads + 2 kv_heads) x head_dim, Megatron's linear_qkv)
    is a GEMM dimension too: split over tp it may reach INT_MAX, one column more is refused,
    naming the head dim where it is the factor further above published models (<= 256)."""
    m = ctx.model  # llama3-8b: 32 query and 8 key/value heads
    per_column = m.heads + 2 * m.kv_heads  # 48
    at = dataclasses.replace(m, head_dim=MAX_GEMM_DIM // per_column)
    check_sizes(at, ctx.layout)
    over = dataclasses.replace(m, head_dim=MAX_GEMM_DIM // per_column + 1)
    with pytest.raises(UserError) as got:
        check_sizes(over, ctx.layout)
    assert got.value.field == "model.head_dim" and "QKV projection" in got.value.message
    check_sizes(over, dataclasses.replace(ctx.layout, tp=2))


def test_attention_width_names_heads_when_they_are_off(cli):
    res = cli("memory", BASE, "--set", "model.heads=100000000", "--set", "model.kv_heads=100000000",
              "--set", "model.head_dim=64")  # fmt: skip
    assert_one_line_error(res, "error: model.heads:", "19,200,000,000", "QKV projection")


def test_routed_experts_are_bounded(cli):
    """More than 2^24 routed experts (16x PEER's 1,048,576, arXiv 2407.04202) is a typo."""
    from simcluster.limits import MAX_EXPERTS

    assert MAX_EXPERTS == 16 * 1_048_576
    res = cli("memory", "mixtral-8x7b-32xh100", "--set", f"model.experts={MAX_EXPERTS + 8}")  # ep 8 divides it
    assert_one_line_error(res, "error: model.experts:", "16,777,224 routed experts", "PEER")


def test_routed_expert_rows_are_bounded(cli):
    """A routed expert's GEMM takes on average rows x ep x top_k / experts tokens: Mixtral at
    ep 8, top_k 8 of 8 experts gives each expert 8x the microbatch's tokens, so a 2^30-token
    sequence (within the dense GEMMs' INT_MAX) is refused there, naming the sequence."""
    res = cli("memory", "mixtral-8x7b-32xh100", "--set", "training.seq_len=1073741824", "--set", "model.top_k=8")
    assert_one_line_error(res, "error: training.seq_len:", "8,589,934,592 rows of each routed expert's GEMM")
