"""A linear layer's three GEMMs timed in their own operand layouts (simcluster/gemm_roles.py).

The products are autograd's for ``torch.nn.Linear`` (weight stored ``[out, in]``): forward
``x @ W.t()``, input gradient ``dy @ W``, weight gradient ``dy.t() @ x``; each check below
compares a layout with that product computed from the stored tensors.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simcluster.compute import KernelModel
from simcluster.errors import UserError
from simcluster.gemm_roles import PHASE_ROLES, ROLES, TimedGemms
from simcluster.gemm_shapes import gemm_shapes
from simcluster.hardware import load_profile

ROOT = Path(__file__).resolve().parent.parent

#: a model small enough that a CPU times its every GEMM in a second
TINY = {
    "name": "tiny",
    "model": {"layers": 2, "hidden": 64, "heads": 4, "ffn": 96, "vocab": 128, "mlp": "swiglu"},
    "cluster": {"hardware": "dgx-h100", "gpus": 2},
    "parallel": {"tp": 2, "sequence_parallel": True},
    "training": {"seq_len": 32, "micro_batch": 1, "global_batch": 2, "precision": "bf16"},
}


def _row(m: int, n: int, k: int, time_s: float, role: str | None = None) -> dict:
    row = {"m": m, "n": n, "k": k, "dtype": "bf16", "time_s": time_s, "tflops": 2 * m * n * k / time_s / 1e12}
    return {**row, "role": role} if role else row


def test_lookup_takes_the_own_role_then_a_plain_row_then_any_role():
    table = TimedGemms.of_rows([_row(8, 8, 8, 3.0, "wgrad"), _row(8, 8, 8, 2.0), _row(4, 4, 4, 5.0, "fwd"),
                                _row(4, 4, 4, 4.0, "dgrad")])
    assert table.seconds("bf16", 8, 8, 8, "wgrad") == 3.0
    assert table.seconds("bf16", 8, 8, 8, "fwd") == 2.0  # no fwd row: the plain A @ B
    assert table.seconds("bf16", 4, 4, 4, "wgrad") == 4.0  # neither: the fastest of that shape
    assert table.seconds("bf16", 4, 4, 4, None) == 4.0
    assert table.seconds("bf16", 4, 4, 5, "fwd") is None  # another shape: the size curve's
    assert table.seconds("fp16", 8, 8, 8, "wgrad") is None


def test_a_role_the_simulator_does_not_know_is_a_one_line_error():
    with pytest.raises(UserError) as err:
        TimedGemms.of_rows([_row(8, 8, 8, 1.0), _row(8, 8, 8, 1.0, "bwd")])
    assert err.value.field == "measured.gemm[1].role"
    assert "fwd, dgrad, wgrad" in err.value.one_line()


def test_the_kernel_model_times_a_gemm_by_its_role():
    profile = load_profile("dgx-h100").model_copy(
        update={"measured": {"gemm": [_row(8192, 1280, 8192, 1e-3), _row(8192, 1280, 8192, 2e-3, "wgrad")]}}
    )
    km = KernelModel(profile, "bf16")
    launch = km.launch_s
    assert km.gemm(8192, 1280, 8192, role="wgrad") == pytest.approx(2e-3 + launch)
    assert km.gemm(8192, 1280, 8192, role="fwd") == pytest.approx(1e-3 + launch)
    assert km.gemm_breakdown(8192, 1280, 8192, role="dgrad").timed


def test_every_dense_gemm_of_a_step_carries_the_role_of_its_phase():
    """tp 2 on hidden 64 (QKV 3 x 64 / 2 = 96 wide, SwiGLU up 2 x 96 / 2 = 96, down 48 in),
    32 tokens per microbatch: forward (tokens, out, in), input gradient (tokens, in, out),
    weight gradient (in, out, tokens)."""
    shapes = set(gemm_shapes(_scenario(TINY)))
    for in_, out in ((64, 96), (32, 64), (48, 64)):  # QKV, attention out, MLP down
        assert {(32, out, in_, "fwd"), (32, in_, out, "dgrad"), (in_, out, 32, "wgrad")} <= shapes
    assert {role for *_, role in shapes} == set(ROLES)
    assert set(PHASE_ROLES.values()) == set(ROLES)


def _scenario(doc: dict):
    from simcluster.scenario import Scenario

    return Scenario.model_validate(doc)


@pytest.mark.parametrize("role", ["", *ROLES])
def test_each_layout_computes_autograds_product_from_the_stored_tensors(role):
    torch = pytest.importorskip("torch")
    from calibrate.gemm import operands
    from calibrate.shapes import GemmShape

    m, n, k = 3, 5, 7
    a, b, out = operands(GemmShape(m, n, k, role), "fp32", torch.device("cpu"))
    torch.matmul(a, b, out=out)
    if role == "fwd":  # x [m, k] @ W.t(), W stored [n, k]: cuBLAS reads B transposed
        w = b.t()
        assert w.is_contiguous() and w.shape == (n, k) and not b.is_contiguous()
        assert torch.allclose(out, torch.nn.functional.linear(a, w))
    elif role == "wgrad":  # dy.t() @ x, dy stored [k, n], x [k, m]: dW is [n, m] = [out, in]
        dy = a.t()
        assert dy.is_contiguous() and dy.shape == (k, n) and b.shape == (k, m)
        assert out.shape == (n, m) and torch.allclose(out, dy.t() @ b)
    else:  # dgrad and plain: both operands as stored
        assert a.is_contiguous() and b.is_contiguous() and out.shape == (m, n)


def test_calibrate_scenario_times_each_gemm_in_its_role_and_the_simulator_uses_them(tmp_path):
    """A real single-process run on the CPU: every GEMM of the tiny scenario is timed in its
    role, and simulating that scenario on the written profile takes each from its own row."""
    pytest.importorskip("torch")
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "p.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "calibrate", "--device", "cpu", "--quick", "--base", "dgx-h100",
         "--scenario", str(scenario), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    profile = load_profile(out)
    rows = profile.measured["gemm"]
    timed = {(r["m"], r["n"], r["k"], r.get("role")) for r in rows if r["dtype"] == "bf16"}
    wanted = set(gemm_shapes(_scenario(TINY)))
    assert wanted <= timed
    km = KernelModel(profile, "bf16")
    for m, n, k, role in wanted:
        own = min(r["time_s"] for r in rows if r["dtype"] == "bf16" and (r["m"], r["n"], r["k"], r.get("role")) == (m, n, k, role))
        timing = km.gemm_breakdown(m, n, k, role=role)
        assert timing.timed
        if not timing.memory_bound:
            assert timing.seconds == pytest.approx(own + km.launch_s)


def test_the_gemm_command_reads_a_roles_row(cli, tmp_path):
    raw = yaml.safe_load((ROOT / "hardware" / "dgx-h100.yaml").read_text())
    raw["measured"]["gemm"] = [_row(8192, 1280, 8192, 1e-3), _row(8192, 1280, 8192, 2e-3, "wgrad")]
    path = tmp_path / "h100-timed.yaml"
    path.write_text(yaml.safe_dump(raw))
    times = {}
    for role in ("wgrad", "fwd"):
        res = cli("gemm", "8192,1280,8192", "--hardware", str(path), "--role", role, "--json")
        assert res.code == 0, res.err
        (row,) = json.loads(res.out)
        assert row["timed"] and row["role"] == role
        times[role] = row["time_s"]
    assert times["wgrad"] - times["fwd"] == pytest.approx(1e-3)
    bad = cli("gemm", "8192,1280,8192", "--role", "bwd")
    assert bad.code == 2 and "--role" in bad.err
