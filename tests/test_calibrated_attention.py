"""A calibrated profile's attention: measured rates by sequence length and head dimension.

Calibration times SDPA at several call shapes (``measured.attention``). Fused-attention kernels
run far below their best at short sequences and small heads (Shah et al., FlashAttention-3,
arXiv 2407.08608, Fig. 5/6: FA2 on H100, head dim 128, causal forward 191 TFLOP/s at 512 tokens
against 335 at 16K), so the simulator must use the measured rate of the shape it simulates, not
one number for all. FLOPs follow the FlashAttention benchmark convention: forward 4*b*h*s^2*d,
halved when causal, backward 2.5x the forward.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from calibrate.profile_writer import Machine, Measurements, build_profile
from simcluster.attention_kernels import MEASURED, curves_from_rows
from simcluster.compute import KernelModel
from simcluster.data import data_dir
from simcluster.hardware import profile_from_dict

SEQ_TFLOPS = {1024: (200.0, 150.0), 4096: (400.0, 300.0)}  # seq -> (fwd, bwd) TFLOP/s, head dim 128


def _row(seq: int, fwd_tflops: float, bwd_tflops: float, head_dim: int = 128) -> dict:
    batch, heads = 16384 // seq, 2048 // head_dim
    fwd_flops = 4.0 * batch * heads * seq**2 * head_dim / 2  # causal
    return {
        "batch": batch, "seq": seq, "heads": heads, "kv_heads": heads // 4, "head_dim": head_dim,
        "causal": True, "dtype": "bf16",
        "fwd_s": fwd_flops / (fwd_tflops * 1e12), "bwd_s": 2.5 * fwd_flops / (bwd_tflops * 1e12),
        "fwd_tflops": fwd_tflops, "bwd_tflops": bwd_tflops,
    }  # fmt: skip


ROWS = [_row(s, f, b) for s, (f, b) in SEQ_TFLOPS.items()]


@pytest.fixture(scope="module")
def h100_data():
    return yaml.safe_load((data_dir("hardware") / "dgx-h100.yaml").read_text())


@pytest.fixture(scope="module")
def measured_h100(h100_data):
    data = copy.deepcopy(h100_data)
    data["measured"] = {"attention": ROWS}
    return profile_from_dict(data)


def _rate(km: KernelModel, seq: float, backward: bool, head_dim: int = 128) -> float:
    """TFLOP/s the model gives one 16K-token causal call (the calibration's call shape)."""
    batch, heads = 16384 / seq, 2048 // head_dim
    flops = 4.0 * batch * heads * seq * seq * head_dim * 0.5 * (2.5 if backward else 1.0)
    seconds = km.attention(batch, seq, seq, heads, head_dim, head_dim, True, backward) - km.launch_s
    return flops / seconds / 1e12


@pytest.mark.parametrize("backward", [False, True])
def test_each_sequence_length_runs_at_its_measured_rate(measured_h100, backward):
    km = KernelModel(measured_h100, "bf16")
    for seq, rates in SEQ_TFLOPS.items():
        assert _rate(km, seq, backward) == pytest.approx(rates[backward], rel=1e-9)
    # in between: log-linear in sequence length, like the published curves
    midpoint = (SEQ_TFLOPS[1024][backward] + SEQ_TFLOPS[4096][backward]) / 2
    assert _rate(km, 2048, backward) == pytest.approx(midpoint, rel=1e-9)


def test_measurements_replace_the_profile_default_but_a_named_kernel_wins(measured_h100):
    assert measured_h100.attention_curves(None) == measured_h100.attention_kernels[MEASURED]
    # FA2's published causal forward at 4K tokens, head dim 128 (FA3 paper Fig. 5): 319
    assert _rate(KernelModel(measured_h100, "bf16", "fa2"), 4096, False) == pytest.approx(319)
    assert _rate(KernelModel(measured_h100, "bf16", MEASURED), 4096, False) == pytest.approx(400)


def test_several_rows_of_one_length_keep_the_best():
    slow = _row(1024, 100.0, 80.0)
    curves = curves_from_rows([slow, *ROWS])
    assert [(c.head_dim, c.causal) for c in curves] == [(128, True)]
    assert curves[0].fwd_tflops == [(1024.0, pytest.approx(200.0)), (4096.0, pytest.approx(400.0))]
    assert curves[0].bwd_tflops == [(1024.0, pytest.approx(150.0)), (4096.0, pytest.approx(300.0))]


def test_written_profile_names_the_measured_kernel(tmp_path):
    m = Measurements(attention=ROWS)
    data = build_profile(m, {"backend": "nccl"}, "dgx-h100", None)
    eff = data["efficiency"]
    assert eff["attention_kernel"] == MEASURED
    assert set(eff["attention_kernels"]) == {"fa2", "cudnn", "cudnn-fp8", "fa3", MEASURED}  # the base's stay
    prof = profile_from_dict(yaml.safe_load(yaml.safe_dump(data)))
    assert _rate(KernelModel(prof, "bf16"), 1024, False) == pytest.approx(200.0, rel=1e-9)


def test_a_described_machine_drops_the_fallbacks_published_curves():
    gemm = [{"m": 512, "n": 512, "k": 512, "dtype": "bf16", "time_s": 1e-3, "tflops": 0.268}]
    m = Measurements(gemm=gemm, attention=[{**r, "dtype": "bf16"} for r in ROWS])
    data = build_profile(m, {"backend": "gloo"}, None, Machine("Test CPU", 2**34, 2))
    assert set(data["efficiency"]["attention_kernels"]) == {MEASURED}


def test_gpu_calibration_times_the_flashattention_papers_call_shapes():
    pytest.importorskip("torch")
    from calibrate.attention import default_shapes

    shapes = default_shapes("cuda", quick=False)
    # FlashAttention-2/3 benchmark sweep: 16K tokens per call, hidden 2048, seq 512..16K, d 64 and 128
    assert {(s.seq, s.head_dim) for s in shapes} == {
        (seq, d) for seq in (512, 1024, 2048, 4096, 8192, 16384) for d in (64, 128)
    }
    for s in shapes:
        assert s.batch * s.seq == 16384 and s.heads * s.head_dim == 2048 and s.causal
        assert s.heads == 4 * s.kv_heads


def test_the_timed_backward_returns_gradients_without_accumulating_them():
    """In a training step Q, K and V are not leaves, so their gradients flow on; timing
    ``out.backward`` on leaf tensors again and again would add every call's gradients into
    their ``.grad`` (autograd's AccumulateGrad), a memory-bound pass the step never makes.
    Each timed call returns the gradients one backward gives, and leaves ``.grad`` unset."""
    torch = pytest.importorskip("torch")
    from calibrate.attention import backward_call

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, 64, 16, generator=gen, requires_grad=True) for h in (4, 2, 2))

    def forward():
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    out = forward()
    call = backward_call(out, (q, k, v), torch.ones_like(out))
    first, second = call(), call()
    assert q.grad is None and k.grad is None and v.grad is None
    forward().backward(torch.ones_like(out))  # the reference: one plain backward
    for a, b, leaf in zip(first, second, (q, k, v), strict=True):
        assert torch.equal(a, b) and torch.allclose(a, leaf.grad)
