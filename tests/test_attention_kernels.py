"""Fused-attention kernel curves: the published points come back exactly, the in-between rules
(log sequence length, linear head dimension, causal backward) hold, and a bad kernel name is a
one-line error.

Points: Shah et al., FlashAttention-3 (arXiv 2407.08608), Fig. 5 / Fig. 6, H100 80GB SXM5, BF16;
the same numbers are in hardware/dgx-h100.yaml under efficiency.attention_kernels.
"""

from __future__ import annotations

import pytest
import yaml

from simcluster.attention_kernels import AttentionCurve, kernel_tflops
from simcluster.compute import KernelModel
from simcluster.data import data_dir
from simcluster.errors import UserError
from simcluster.hardware import HardwareProfile, load_profile
from tests.conftest import make_scenario, write_profile
from tests.test_scenario_errors import assert_one_line_error, write


@pytest.fixture(scope="module")
def h100():
    return load_profile("dgx-h100")


def _rate(km: KernelModel, seq: int, head_dim: int, causal: bool, backward: bool) -> float:
    """TFLOP/s the kernel model achieves on a FA3-paper-shaped call (16K tokens, hidden 2048)."""
    b, heads = 16384 // seq, 2048 // head_dim
    flops = 4.0 * b * heads * seq * seq * head_dim * (0.5 if causal else 1.0) * (2.5 if backward else 1.0)
    return flops / (km.attention(b, seq, seq, heads, head_dim, head_dim, causal, backward) - km.launch_s) / 1e12


@pytest.mark.parametrize(
    ("kernel", "seq", "head_dim", "causal", "backward", "published"),
    [
        ("cudnn", 4096, 128, True, False, 518),  # Fig. 5, forward, causal, head dim 128
        ("fa2", 4096, 128, True, False, 319),
        ("fa3", 16384, 128, False, False, 648),  # Fig. 5, forward, non-causal
        ("fa2", 1024, 64, False, True, 238),  # Fig. 6, backward, head dim 64
        ("cudnn", 8192, 128, False, True, 518),  # Fig. 6, backward, head dim 128
    ],
)
def test_published_points_are_reproduced(h100, kernel, seq, head_dim, causal, backward, published):
    km = KernelModel(h100, "bf16", kernel)
    assert _rate(km, seq, head_dim, causal, backward) == pytest.approx(published, rel=1e-9)


def test_between_points_log_sequence_and_linear_head_dim(h100):
    fa2 = h100.efficiency.attention_kernels["fa2"]
    # 2896 ~ sqrt(2048 * 4096): halfway in log(seq) between FA2's causal 298 and 319 (head dim 128)
    assert kernel_tflops(fa2, 128, (2048 * 4096) ** 0.5, True, False) == pytest.approx((298 + 319) / 2)
    # head dim 96 is halfway between the 64 and 128 curves (FA2 causal 4K: 284 and 319)
    assert kernel_tflops(fa2, 96, 4096, True, False) == pytest.approx((284 + 319) / 2)
    # beyond the measured range the ends hold
    assert kernel_tflops(fa2, 256, 65536, True, False) == pytest.approx(335)
    assert kernel_tflops(fa2, 32, 128, True, False) == pytest.approx(180)


def test_causal_backward_is_noncausal_backward_times_the_forward_causal_ratio(h100):
    cudnn = h100.efficiency.attention_kernels["cudnn"]
    # head dim 128 at 4K: non-causal backward 499; forward causal 518 / non-causal 609
    assert kernel_tflops(cudnn, 128, 4096, True, True) == pytest.approx(499 * 518 / 609)


def test_kernel_choice_orders_as_published(h100):
    # at 4K tokens, head dim 128: FA2 < cuDNN < FA3 in both passes (Fig. 5, Fig. 6)
    for backward in (False, True):
        rates = [_rate(KernelModel(h100, "bf16", k), 4096, 128, True, backward) for k in ("fa2", "cudnn", "fa3")]
        assert rates == sorted(rates)


def test_profile_default_kernel_and_scalar_fallback(h100):
    assert h100.efficiency.attention_kernel == "cudnn"
    assert _rate(KernelModel(h100, "bf16"), 4096, 128, True, False) == pytest.approx(518)
    data = yaml.safe_load((data_dir("hardware") / "dgx-a100.yaml").read_text())
    del data["efficiency"]["attention_kernels"], data["efficiency"]["attention_kernel"]
    bare = HardwareProfile.model_validate(data)  # no curves: the scalar forward efficiency applies
    assert bare.attention_kernel_in_use(None) is None
    expected = bare.efficiency.attention_fwd * bare.gpu.peak_tflops["fp16"]
    assert _rate(KernelModel(bare, "fp16"), 4096, 128, True, False) == pytest.approx(expected)


def test_a100_runs_flash_attention_2_at_its_sustained_rate():
    # liangan1/GPU_travel performance/flash-attn/README.md (A100, head dim 128, ~1200 MHz under
    # the power limit): causal forward 156.3 / 159.4 TFLOP/s at 1 x 4096 tokens, 143.7 / 140.6 at
    # 16 x 1024; non-causal 184.0 / 183.6 and 179.1 / 179.5
    a100 = load_profile("dgx-a100")
    assert a100.attention_kernel_in_use(None) == "fa2"
    km = KernelModel(a100, "bf16")
    assert _rate(km, 4096, 128, True, False) == pytest.approx((156.27 + 159.41) / 2, rel=1e-3)
    assert _rate(km, 1024, 128, False, False) == pytest.approx((179.11 + 179.48) / 2, rel=1e-3)
    # backward: the forward times FlashAttention-2's backward/forward ratio on H100 at the same
    # shape (FlashAttention-3 paper Fig. 5/6, head dim 128 non-causal, 4K: 310 / 368)
    assert _rate(km, 4096, 128, False, True) == pytest.approx(183.8 * 310 / 368, rel=2e-3)
    # the sustained rate sits below the FlashAttention-2 paper's burst maximum (73% of 312)
    assert _rate(km, 8192, 128, False, False) < 0.73 * 312


@pytest.mark.parametrize("profile", ["dgx-a100", "dgx-a100-40gb"])
def test_a100_head_dim_64_follows_flash_attention_2s_head_dim_ratio_on_h100(profile):
    # FlashAttention-2 runs the same SM80 kernels on A100 and H100, so its head-dim-64/128 ratio
    # at a given length and mask is carried over (FlashAttention-3 paper Fig. 5/6 FA2 bars):
    # non-causal forward 306/350 at 1K, causal forward 284/319 at 4K, backward 279/310 at 4K
    km = KernelModel(load_profile(profile), "bf16")
    cases = [(1024, False, False, 306 / 350), (4096, True, False, 284 / 319), (4096, False, True, 279 / 310)]
    for seq, causal, backward, ratio in cases:
        hd128 = _rate(km, seq, 128, causal, backward)
        assert _rate(km, seq, 64, causal, backward) == pytest.approx(hd128 * ratio, rel=2e-3)
    # head dim 64 is slower than 128 (it was clamped to it before)
    assert _rate(km, 2048, 64, True, False) < _rate(km, 2048, 128, True, False)


def test_unknown_kernel_names_the_field_and_the_choices(h100):
    with pytest.raises(UserError) as err:
        h100.attention_curves("fa9")
    assert err.value.field == "training.attention_kernel"
    assert "cudnn, fa2, fa3" in str(err.value)


def test_unknown_kernel_on_the_cli_is_one_line(cli, tmp_path):
    path = write(tmp_path, make_scenario(training={"attention_kernel": "fa9"}))
    assert_one_line_error(cli("memory", path), "training.attention_kernel", "fa2")


def test_profile_default_must_be_a_listed_kernel(tmp_path):
    with pytest.raises(UserError) as err:
        load_profile(str(write_profile(tmp_path, {"attention_kernel": "fa9"})))
    assert "attention_kernel" in str(err.value)


def test_curve_points_must_be_positive():
    with pytest.raises(ValueError, match="fwd_tflops"):
        AttentionCurve(head_dim=64, causal=True, fwd_tflops=[(512, 0.0)])


@pytest.mark.parametrize(
    ("profile", "kernel", "seq", "causal", "backward", "published"),
    [
        # NVIDIA/cudnn-frontend sdpa_fp8_benchmark_results_NVIDIA_B200.csv (causal, batch 1, 128
        # query / 8 KV heads, head dim 128, through the cuDNN graph as TransformerEngine calls it):
        # at 0b1577c (cuDNN 9.13.1) the bf16 rows, 8K forward 1.589 ms, and the fp8 rows, 8K
        # backward 4.382 ms (2.5x the forward FLOPs); at cb560b9 (cuDNN 9.10.2) the fp8 rows,
        # 8K forward 1.605 ms = 4 x 8192^2 x 128 x 128 / 2 FLOPs -> 1370.1 TFLOP/s
        ("dgx-b200", "cudnn", 8192, True, False, 4 * 8192**2 * 128 * 128 / 2 / 1.589e-3 / 1e12),
        ("dgx-b200", "cudnn-fp8", 8192, True, True, 2.5 * 4 * 8192**2 * 128 * 128 / 2 / 4.382e-3 / 1e12),
        ("dgx-b200", "cudnn-9.10-fp8", 8192, True, False, 1370.101),
        ("dgx-b200", "cudnn-9.10-fp8", 32768, True, True, 1561.247),
        ("dgx-b200", "cudnn-9.10", 8192, True, True, 2.5 * 4 * 8192**2 * 128 * 128 / 2 / 5.566e-3 / 1e12),
        # sdpa_bf16_benchmark_results_NVIDIA_B200.csv (bb37575): the native flash-attn 2 rows
        ("dgx-b200", "fa2", 16384, True, False, 425.128),
        # GB200: the same benchmark's GB200 run (cuDNN 9.17, PyTorch 25.11) for the causal curve,
        # the repository's llama3.1 rows (cuDNN 9.22, batch 2, 64 / 8 heads) for the unmasked one
        ("gb200-nvl72", "cudnn", 4096, True, False, 1386),
        ("gb200-nvl72", "cudnn", 131072, True, True, 1188),
        ("gb200-nvl72", "cudnn", 4096, False, True, 1350),
        # the same GB200 run's fp8 rows (sdpa_fp8_benchmark_results_NVIDIA_GB200.csv, cuDNN 9.17)
        ("gb200-nvl72", "cudnn-fp8", 8192, True, False, 1894),
        ("gb200-nvl72", "cudnn-fp8", 65536, True, True, 1450),
        # GB300: the repository's llama3.1 rows on GB300 (cuDNN 9.22, batch 2, 64 / 8 heads)
        ("gb300-nvl72", "cudnn", 32768, True, False, 1953),
        ("gb300-nvl72", "cudnn", 8192, True, True, 1435),
        ("gb300-nvl72", "cudnn", 2048, False, False, 1805),
        # cuDNN 9.13.1 through the cuDNN graph (sdpa_fp8_benchmark_results_NVIDIA_B200.csv and
        # _GB300.csv, commit 0b1577c, PyTorch nv25.09), from the printed milliseconds: B200's 8K
        # bf16 forward 1.589 ms and fp8 backward 4.382 ms (2.5x the forward FLOPs) serve GB200;
        # GB300's own 8K bf16 backward 4.778 ms and 32K fp8 forward 14.961 ms
        ("gb200-nvl72", "cudnn-9.13", 8192, True, False, 4 * 8192**2 * 128 * 128 / 2 / 1.589e-3 / 1e12),
        ("gb200-nvl72", "cudnn-9.13-fp8", 8192, True, True, 2.5 * 4 * 8192**2 * 128 * 128 / 2 / 4.382e-3 / 1e12),
        ("gb300-nvl72", "cudnn-9.13", 8192, True, True, 2.5 * 4 * 8192**2 * 128 * 128 / 2 / 4.778e-3 / 1e12),
        ("gb300-nvl72", "cudnn-9.13-fp8", 32768, True, False, 4 * 32768**2 * 128 * 128 / 2 / 14.961e-3 / 1e12),
        # cuDNN 9.10.2 through the cuDNN graph on a B200 (the same file at commit cb560b9, PyTorch
        # nv25.06, backend 91002): 8K bf16 forward 1.762 ms and backward 5.566 ms, 2K fp8 forward
        # 0.192 ms (its printed rate 717.023: the milliseconds are rounded)
        ("gb200-nvl72", "cudnn-9.10", 8192, True, False, 4 * 8192**2 * 128 * 128 / 2 / 1.762e-3 / 1e12),
        ("gb200-nvl72", "cudnn-9.10", 8192, True, True, 2.5 * 4 * 8192**2 * 128 * 128 / 2 / 5.566e-3 / 1e12),
        ("gb200-nvl72", "cudnn-9.10-fp8", 2048, True, False, 717.023),
        # dgx-b300: GB300's 9.13.1 rows at the B300 / GB300 ratios of its other curves (0.98, 0.97)
        ("dgx-b300", "cudnn-9.13", 16384, True, False, 1835.897 * 0.98),
        ("dgx-b300", "cudnn-9.13-fp8", 16384, True, True, 1745.939 * 0.97),
    ],
)
def test_blackwell_curves_are_the_cudnn_frontend_measurements(profile, kernel, seq, causal, backward, published):
    curves = load_profile(profile).efficiency.attention_kernels[kernel]
    assert kernel_tflops(curves, 128, seq, causal, backward) == pytest.approx(published, rel=1e-3)


def test_b200_causal_only_curves_serve_unmasked_blocks_and_clamp_below_2k():
    # the B200 benchmark is causal only: ring attention's unmasked blocks take the causal rate,
    # and the launch-bound 512 / 1K rows were left out, so short sequences hold the 2K rate
    cudnn = load_profile("dgx-b200").efficiency.attention_kernels["cudnn"]
    assert kernel_tflops(cudnn, 128, 32768, False, False) == kernel_tflops(cudnn, 128, 32768, True, False)
    assert kernel_tflops(cudnn, 128, 512, True, False) == pytest.approx(907.5)


def test_b200_attention_runs_at_the_sustained_share_of_its_burst_benchmark():
    """The B200 curves are burst rates: NVIDIA/cudnn-frontend's
    benchmark/sdpa_benchmark_training/benchmark_single_sdpa.py sleeps
    ``np.min([t / 100, 1.0])`` seconds after each timed call, ``t`` in milliseconds (CUDA
    events), i.e. 10x the call, and its README says the delays are there "to avoid GPU
    throttling". A training step runs attention back to back at the 1,000 W limit, where a
    B200 keeps 1,237 of 1,450 TFLOP/s (flashinfer-ai/flashinfer pull request 2899, FA4 BF16):
    the cuDNN 9.13.1 32K causal forward, 1,514.8 TFLOP/s as timed, runs at 0.853 of that. The
    H100 curves (FlashAttention-3 paper) keep their rate, and so does a calibrated profile's
    own kernel, timed on the user's GPUs as they run."""
    from simcluster.attention_kernels import MEASURED

    b200 = load_profile("dgx-b200")
    share = 1237 / 1450
    assert b200.efficiency.attention_sustained == pytest.approx(share, abs=5e-4)
    assert b200.efficiency.attention_sustained == b200.efficiency.sustained
    km = KernelModel(b200, "bf16", attention_kernel="cudnn")
    flops = 4.0 * 32768**2 * 128 * 128 * 0.5
    seconds = km.attention(1, 32768, 32768, 128, 128, 128, causal=True, backward=False) - km.launch_s
    assert flops / seconds / 1e12 == pytest.approx(1514.8 * 0.853, rel=1e-3)
    assert load_profile("dgx-h100").efficiency.attention_sustained == 1.0

    # a calibrated profile: its own kernel only (rebuilt, not copied: the profile caches its kernels)
    data = b200.model_dump()
    own = {"head_dim": 128, "causal": True, "fwd_tflops": [[2048, 500.0], [131072, 1200.0]]}
    data["efficiency"].update(attention_kernels={MEASURED: [own]}, attention_kernel=None)
    calibrated = HardwareProfile.model_validate(data)
    km = KernelModel(calibrated, "bf16")
    seconds = km.attention(1, 131072, 131072, 128, 128, 128, causal=True, backward=False) - km.launch_s
    assert 4.0 * 131072**2 * 128 * 128 * 0.5 / seconds / 1e12 == pytest.approx(1200.0, rel=1e-3)


def test_gb200_and_b300_attention_run_at_their_profiles_sustained_gemm_share():
    """gb200-nvl72's and dgx-b300's cuDNN curves are burst rates from the same
    NVIDIA/cudnn-frontend benchmark as B200's (one call at a time from a GPU that has idled), so
    a training step runs them at the share of their rate the profile's GEMM curves already take
    at the power limit. GB200: 0.853 (B200's, flashinfer-ai/flashinfer pull request 2899) times
    the ratio of the sustained FP8 plateaus, GB200 2906.9 TFLOP/s (Azure/AI-benchmarking-guide
    ND_GB200_v6_results.md, 10,000 warm-up iterations) over B200 0.729 x 0.853 x 4500, the
    factor that takes XLA's 1670 TFLOP/s burst plateau to gb200's 0.5919 x 2500. It lies between
    GB200's own sustained / burst FP8 ratio (2906.9 over stas00/ml-engineering's MAMF 3615.6) and
    1. B300: dgx-b300's efficiency.sustained 0.853, no lower than the drop a B300 shows in
    stas00/ml-engineering's table (BF16 MSMF 1519 against MAMF 1892). GB300 keeps 1: no GB300
    sustained figure is published."""
    gb200 = load_profile("gb200-nvl72")
    share = 0.853 * 2906.9 / (0.729 * 0.853 * 4500)
    assert gb200.efficiency.attention_sustained == pytest.approx(share, abs=5e-4)
    assert gb200.efficiency.gemm[-1][1] * 2500 == pytest.approx(1670 * share, rel=1e-3)
    assert 2906.9 / 3615.6 < gb200.efficiency.attention_sustained < 1
    km = KernelModel(gb200, "bf16", attention_kernel="cudnn")
    flops = 4.0 * 32768**2 * 128 * 128 * 0.5
    seconds = km.attention(1, 32768, 32768, 128, 128, 128, causal=True, backward=False) - km.launch_s
    # cuDNN 9.17's 32K causal forward on a GB200: 1681 TFLOP/s as timed
    # (cudnn-frontend sdpa_bf16_benchmark_results_NVIDIA_GB200.csv)
    assert flops / seconds / 1e12 == pytest.approx(1681 * 0.8861, rel=1e-3)

    b300 = load_profile("dgx-b300")
    assert b300.efficiency.attention_sustained == b300.efficiency.sustained == 0.853
    assert 1519 / 1892 < b300.efficiency.attention_sustained
    assert load_profile("gb300-nvl72").efficiency.attention_sustained == 1.0
