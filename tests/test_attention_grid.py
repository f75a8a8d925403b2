"""Fused attention spread over fewer (batch x head) pairs than the published curves' runs slower.

Numbers: NVIDIA/cudnn-frontend benchmark/attention_inference/results/prefill_sweep/h200/
prefill_sweep_20260928_142443.csv (commit 0af834f), cuDNN 9.27 on an H200, batch 1, causal,
head dim 128: at 4K tokens 598.9 / 544.6 / 473.7 / 377.7 TFLOP/s with 64 / 32 / 16 / 8 query
heads, at 8K 653.6 / 630.0 / 587.2 / 507.7 (hardware/dgx-h100.yaml, efficiency.attention_grid).
The curves (FlashAttention-3 paper, Fig. 5) ran 16K tokens at hidden 2048: 64 pairs of a 4K
sequence, 32 of an 8K one.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from simcluster.compute import KernelModel
from simcluster.data import data_dir
from simcluster.errors import UserError
from simcluster.hardware import load_profile, profile_from_dict


@pytest.fixture(scope="module")
def h100():
    return load_profile("dgx-h100")


@pytest.mark.parametrize(
    ("units", "seq", "share"),
    [
        (16, 4096, 473.7 / 598.9),  # Megatron-Core 1.7B (16 heads, tp 1) or 7.1B (32 heads, tp 2), micro-batch 1
        (8, 4096, 377.7 / 598.9),  # 64 heads at tp 8
        (8, 8192, 507.7 / 630.0),  # the curves ran 32 pairs at 8K
        (64, 4096, 1.0),  # the curves' own spread
        (256, 4096, 1.0),  # more pairs than the curves': the curve's rate, not more
    ],
)
def test_share_is_the_measured_ratio(h100, units, seq, share):
    assert h100.efficiency.attention_grid.factor(units, seq, 128) == pytest.approx(share, rel=1e-9)


def test_a_one_sequence_call_runs_below_the_curve(h100):
    """The 1.7B row's forward core: one 4K sequence, 16 heads of 128, causal, cuDNN: the
    curve's 518 TFLOP/s (FA3 paper, Fig. 5) times 473.7 / 598.9."""
    km = KernelModel(h100, "bf16", "cudnn")
    flops = 4.0 * 16 * 4096**2 * 128 * 0.5
    seconds = km.attention(1, 4096, 4096, 16, 128, 128, True, False) - km.launch_s
    assert flops / seconds / 1e12 == pytest.approx(518 * 473.7 / 598.9, rel=1e-9)
    # the FA3 paper's own shape (4 sequences of 4K, 16 heads) keeps the published rate
    seconds = km.attention(4, 4096, 4096, 16, 128, 128, True, False) - km.launch_s
    assert 4 * flops / seconds / 1e12 == pytest.approx(518, rel=1e-9)


def test_a_profile_without_the_table_keeps_the_curves():
    a100 = load_profile("dgx-a100")
    assert a100.efficiency.attention_grid is None
    assert KernelModel(a100, "bf16").attention_spread(16, 4096, 128) == 1.0


def test_a_calibrated_kernel_is_not_rescaled(h100):
    """A calibrated profile's own curves were timed at the user's shapes."""
    data = yaml.safe_load((data_dir("hardware") / "dgx-h100.yaml").read_text())
    data["measured"] = {
        "attention": [
            {"batch": 1, "seq": s, "heads": 16, "kv_heads": 16, "head_dim": 128, "causal": True,
             "dtype": "bf16", "fwd_s": 1e-3, "bwd_s": 2.5e-3}
            for s in (1024, 4096)
        ]
    }  # fmt: skip
    measured = profile_from_dict(data)
    assert KernelModel(measured, "bf16").attention_spread(16, 4096, 128) == 1.0
    assert KernelModel(measured, "bf16", "cudnn").attention_spread(16, 4096, 128) < 1.0


def test_a_grid_with_a_hole_is_a_one_line_error():
    data = yaml.safe_load((data_dir("hardware") / "dgx-h100.yaml").read_text())
    bad = copy.deepcopy(data)
    bad["efficiency"]["attention_grid"]["fwd_tflops"].pop()
    with pytest.raises(UserError, match="attention_grid") as err:
        profile_from_dict(bad)
    assert "\n" not in str(err.value)
    # a hole filled by a repeated row keeps the count of a full grid: before, it loaded and the
    # hole's cell read log(rate) 0, i.e. 1 TFLOP/s, as a measurement
    rows = copy.deepcopy(data)["efficiency"]["attention_grid"]["fwd_tflops"]
    rows[-1] = list(rows[0])
    dup = copy.deepcopy(data)
    dup["efficiency"]["attention_grid"]["fwd_tflops"] = rows
    with pytest.raises(UserError, match="attention_grid"):
        profile_from_dict(dup)


def test_unequal_key_ranges_keep_the_curve(h100):
    """A context-parallel ring block (queries over another rank's keys) is not the table's
    call: its CTAs' work differs, so it keeps the published non-causal rate (FA3 paper Fig. 5,
    cuDNN, head dim 128, 4K: 609 TFLOP/s; 2K queries over 4K keys read at the 4K point)."""
    km = KernelModel(h100, "bf16", "cudnn")
    flops = 4.0 * 16 * 2048 * 4096 * 128
    seconds = km.attention(1, 2048, 4096, 16, 128, 128, False, False) - km.launch_s
    assert flops / seconds / 1e12 == pytest.approx(609, rel=1e-9)
