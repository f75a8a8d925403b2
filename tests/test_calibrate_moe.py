"""calibrate's MoE measurements (calibrate/moe.py, moe_alltoall.py), from a real run on CPU:
torchrun with 2 gloo ranks and ``--scenario`` naming a small MoE model.

Every number checked was timed by the run under test; the checks are what the definitions
and the physics say: the shapes asked for, ratio = grouped call / the same GEMMs timed singly,
more tokens never much cheaper, the uneven all-to-all's bytes as the rows sent.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

from calibrate.moe import grouped_mm_missing, measure_grouped, routed_counts  # noqa: E402
from calibrate.moe_alltoall import split_matrix  # noqa: E402
from calibrate.moe_shapes import MoeShape, check_moe_fits, default_moe_shapes  # noqa: E402
from calibrate.timers import PerfCounterTimer  # noqa: E402
from simcluster.compute import KernelModel  # noqa: E402
from simcluster.errors import UserError  # noqa: E402
from simcluster.hardware import load_profile  # noqa: E402
from simcluster.moe_kernels import scenario_moe_shapes  # noqa: E402
from tests.test_calibrate_run import CAL, TORCHRUN, _env  # noqa: E402

#: 4 experts over ep 2, top 2, 64 tokens a rank: each of the 2 local experts receives
#: 64 x 2 x 2 / 4 tokens; fc1 is 2 x expert_ffn wide (this model's gated activation) from hidden
SCENARIO = {
    "name": "tiny-moe",
    "model": {
        "name": "tiny-moe", "layers": 1, "hidden": 64, "heads": 4, "kv_heads": 4, "ffn": 128,
        "vocab": 256, "experts": 4, "top_k": 2, "expert_ffn": 32, "position": "rope",
    },
    "cluster": {"hardware": "dgx-h100", "gpus": 2},
    "parallel": {"tp": 1, "pp": 1, "ep": 2},
    "training": {"seq_len": 64, "micro_batch": 1, "global_batch": 2},
}  # fmt: skip
SCENARIO_SHAPE = (2, 64, 64, 64, 4, 2, 64)


@pytest.fixture(scope="module")
def moe_profile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("moe")
    scenario = tmp / "tiny-moe.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    out = tmp / "p.yaml"
    errors = []
    for _attempt in range(2):  # one relaunch, as test_calibrate_run's fixture (port races)
        proc = subprocess.run(
            # fp32 GEMMs only: the MoE tables are timed in fp32 on a CPU whatever --dtypes
            # says, and the bf16 grid would triple the run (test_calibrate_run covers it)
            TORCHRUN + CAL + ["--dtypes", "fp32", "--scenario", str(scenario), "--out", str(out)],
            env=_env(), capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        if proc.returncode == 0:
            return out, scenario
        errors.append(proc.stderr[-3000:])
    pytest.fail("two-rank calibrate run failed twice:\n" + "\n---\n".join(errors))


def _moe(path: Path) -> dict:
    return yaml.safe_load(path.read_text())["measured"]["moe"]


def test_the_scenarios_moe_layer_is_what_the_simulator_sizes(moe_profile):
    assert scenario_moe_shapes(moe_profile[1]) == [SCENARIO_SHAPE]


def test_grouped_gemms_cover_the_shapes_asked_for_by_each_implementation(moe_profile):
    rows = _moe(moe_profile[0])["grouped_gemm"]
    asked = {(s.local_experts, s.tokens_per_expert, s.n, s.k) for s in default_moe_shapes("cpu", quick=True)}
    asked.add(SCENARIO_SHAPE[:4])
    missing = grouped_mm_missing(torch.device("cpu"), "fp32")
    impls = {"loop"} if missing else {"loop", "grouped_mm"}
    timed = {(r["impl"], (r["experts"], r["tokens_per_expert"], r["n"], r["k"])) for r in rows}
    assert timed == {(i, s) for i in impls for s in asked}
    if missing:  # said in the profile, not faked
        assert any("grouped_mm not timed" in n for n in _moe(moe_profile[0])["notes"])
    for r in rows:
        assert r["dtype"] == "fp32" and r["time_s"] > 0 and r["singles_s"] > 0
        assert r["ratio"] == r["time_s"] / r["singles_s"]
        # the counts are uneven (a random routing draw), the busiest above the mean
        assert r["max_tokens"] >= r["tokens_per_expert"]
        assert r["tflops"] == pytest.approx(2 * r["experts"] * r["tokens_per_expert"] * r["n"] * r["k"] / r["time_s"] / 1e12)


def test_more_tokens_are_never_much_cheaper(moe_profile):
    """16x the tokens per expert is 16x the FLOPs, yet the quick grid's calls (4 to 64 tokens of
    64 x 128 per expert: 0.26-4.2 MFLOP) take tens of microseconds, mostly the call's own
    overhead, so on a shared CPU the larger can time shorter by noise (68 against 97 us once with
    the suite's two workers busy): no step, of 4x or of 16x, is faster by more than half."""
    moe = _moe(moe_profile[0])
    grid = default_moe_shapes("cpu", quick=True)
    for impl in {r["impl"] for r in moe["grouped_gemm"]}:
        by_tokens = {
            r["tokens_per_expert"]: r["time_s"]
            for r in moe["grouped_gemm"]
            if r["impl"] == impl and (r["experts"], r["n"], r["k"]) == (grid[0].local_experts, grid[0].n, grid[0].k)
        }
        times = [by_tokens[s.tokens_per_expert] for s in grid]
        assert times[-1] > 0.5 * times[0]
        assert all(b > 0.5 * a for a, b in zip(times, times[1:], strict=False))
    for table, column, size in (("permute", "permute_s", "bytes"), ("permute", "unpermute_s", "bytes"), ("router", "time_s", "tokens")):
        rows = sorted(moe[table], key=lambda r: r[size])
        assert rows[-1][column] > rows[0][column] > 0


def test_permute_router_and_all_to_all_rows_are_the_sizes_they_say(moe_profile):
    moe = _moe(moe_profile[0])
    shapes = [*default_moe_shapes("cpu", quick=True), MoeShape(*SCENARIO_SHAPE)]
    # each routed copy's row read once and written once, fp32 on a CPU
    permutes = {(s.tokens, s.top_k, s.k, 2 * s.routed_rows * s.k * 4) for s in shapes}
    assert {(r["tokens"], r["top_k"], r["hidden"], r["bytes"]) for r in moe["permute"]} == permutes
    assert {(r["tokens"], r["experts"], r["top_k"]) for r in moe["router"]} == {(s.tokens, s.experts, s.top_k) for s in shapes}
    a2a = moe["all_to_all"]
    # every rank sends its routed copies, rounded down to equal parts for the even all-to-all
    assert {r["bytes"] for r in a2a} == {s.routed_rows // 2 * 2 * s.k * 4 for s in shapes}
    for r in a2a:
        assert r["gpus"] == 2 and r["ratio"] == r["uneven_s"] / r["even_s"] and r["max_over_mean"] >= 1
    assert 0 < moe["count_read_s"] < 0.01


def test_the_simulator_reads_the_run(moe_profile):
    """The profile loads, and the expert layer's ratio at the scenario's own tokens per expert
    is the row timed there (the grid's point, not an interpolation)."""
    profile = load_profile(moe_profile[0])
    km = KernelModel(profile, "fp32")
    assert km.moe is not None
    local, tpe, n, k = SCENARIO_SHAPE[:4]
    row = next(
        r for r in _moe(moe_profile[0])["grouped_gemm"]
        if r["impl"] == "loop" and (r["experts"], r["tokens_per_expert"], r["n"], r["k"]) == (local, tpe, n, k)
    )  # fmt: skip
    assert km.moe.grouped_ratio("loop", tpe, local, n, k, "fp32") == row["ratio"]
    assert km.moe.count_read_s == _moe(moe_profile[0])["count_read_s"]


def test_routing_draws_are_seeded_and_complete():
    """The same uneven split on every rank and every run; every copy goes somewhere."""
    assert routed_counts(1000, 8) == routed_counts(1000, 8) and sum(routed_counts(1000, 8)) == 1000
    m = split_matrix(4, 512)
    assert m == split_matrix(4, 512) and all(sum(row) == 512 for row in m)


def test_a_moe_layer_too_large_for_the_device_is_refused_before_measuring():
    """Qwen3-30B-A3B's layer at 4K tokens, micro-batch 2, ep 8 (the GPU grid's largest): the
    grouped GEMM holds 16 x 4096 tokens x 2048 in, 16 x 1536 x 2048 weights, 16 x 4096 x 1536
    out, in fp32 = 1.0625 GiB."""
    shape = MoeShape(16, 4096, 1536, 2048, 128, 8, 8192)
    assert shape.operand_bytes == 4 * (16 * 4096 * 2048 + 16 * 1536 * 2048 + 16 * 4096 * 1536) == 1.0625 * 2**30
    check_moe_fits([shape], 2**31, "2 GiB")
    with pytest.raises(UserError, match=r"^--scenario: its MoE layer \(16 experts x 4096 tokens") as err:
        check_moe_fits([shape], 2**30, "the 1 GiB of this cpu device")
    assert "\n" not in str(err.value)


def test_an_implementation_refusing_a_shape_is_noted_not_timed(monkeypatch):
    """A GPU's torch._grouped_mm refuses strides that are not 16-byte aligned: the shape is
    timed by the loop alone and the profile's notes say why the other is missing."""

    def refuse(*args, **kwargs):
        raise RuntimeError("strides should be multiples of 16 bytes")

    monkeypatch.setattr(torch, "_grouped_mm", refuse)
    shape = MoeShape(2, 8, 16, 16, 4, 2, 8)
    rows, notes = measure_grouped(shape, "fp32", torch.device("cpu"), PerfCounterTimer(), 0.001, ("loop", "grouped_mm"))
    assert [r["impl"] for r in rows] == ["loop"] and rows[0]["time_s"] > 0
    assert notes == [f"grouped_mm not timed at {shape.text()}: strides should be multiples of 16 bytes"]
