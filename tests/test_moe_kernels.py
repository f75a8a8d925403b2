"""A profile's measured MoE kernels (``measured.moe``, simcluster/moe_kernels.py) in the model.

Each test hands the simulator a hand-written table and checks the expert layer's time is the
table's figure (so each would fail were the table ignored), against the same scenario on the
unmodified profile.
"""

from __future__ import annotations

import copy

import pytest
import yaml
from conftest import make_scenario
from engine_helpers import layer_builder, run

from simcluster.errors import UserError
from simcluster.hardware import load_profile, resolve_profile_path
from simcluster.moe_kernels import GROUPED_BY_FRAMEWORK, scenario_moe_shapes
from simcluster.parallelism import expert
from simcluster.parallelism.segments import Comm, Compute

MOE = {
    "name": "small-moe", "layers": 2, "hidden": 1024, "heads": 8, "kv_heads": 8, "ffn": 2816,
    "vocab": 1024, "experts": 8, "top_k": 2, "expert_ffn": 512, "position": "rope",
}  # fmt: skip

#: the H100 profile's own rows are not read here: a hand-written table, in its units
TABLES = {
    "grouped_gemm": [
        {"impl": "loop", "dtype": "bf16", "experts": 8, "tokens_per_expert": t, "n": 1024, "k": 1024,
         "time_s": 2e-5 * t, "singles_s": 1e-5 * t, "ratio": 2.0}
        for t in (64, 4096)
    ],
    "permute": [{"bytes": b, "permute_s": b / 1e11, "unpermute_s": b / 5e10} for b in (1e6, 1e9)],
    "router": [{"tokens": t, "experts": 8, "top_k": 2, "time_s": t * 8 / 1e9} for t in (256, 65536)],
    "count_read_s": 0.002,
}  # fmt: skip


def _profile(tmp_path, tables) -> str:
    raw = yaml.safe_load(resolve_profile_path("dgx-h100").read_text())
    raw = copy.deepcopy(raw)
    raw.setdefault("measured", {})["moe"] = tables
    path = tmp_path / "h100-moe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _scenario(hardware: str = "dgx-h100", **sections) -> dict:
    return make_scenario(
        model=MOE, cluster={"hardware": hardware, "gpus": 8}, parallel={"tp": 1, "pp": 1, "ep": 8},
        training={"seq_len": 2048, "micro_batch": 1, "global_batch": 8}, **sections,
    )  # fmt: skip


def _part(work, category: str) -> float:
    return dict(work.parts).get(category, 0.0)


def _segments(data: dict, phase: str = "F") -> dict[str, Compute]:
    b = layer_builder(data)
    grouped = GROUPED_BY_FRAMEWORK.get(data.get("framework") or "", "loop")
    segs = expert.moe_block(b.shapes, b.km, b.scenario.moe, phase, 0, grouped)
    return {s.name: s for s in segs if isinstance(s, Compute)}


def test_grouped_gemms_take_the_measured_ratio_over_their_single_gemms(tmp_path):
    """The ratio (grouped call / its GEMMs timed singly) multiplies the per-GEMM model's time
    of each local expert's GEMM: 2.0 in the table, so twice the local experts' singles."""
    measured = layer_builder(_scenario(_profile(tmp_path, TABLES)))
    plain = layer_builder(_scenario())
    sh, km = measured.shapes, measured.km
    per_expert, local = expert._routed_load(sh, 1.0)
    up, ffn = expert._widths(sh)
    h = sh.model.hidden
    singles = plain.km.gemm(per_expert, up, h, role="fwd") + plain.km.gemm(per_expert, h, ffn, role="fwd")
    got = _part(expert.expert_work(sh, km, measured.scenario.moe, "F"), "gemm")
    assert got == pytest.approx(2.0 * local * singles, rel=1e-12)
    # the model alone charges one grouped kernel, about a launch gap per expert less
    alone = _part(expert.expert_work(plain.shapes, plain.km, plain.scenario.moe, "F"), "gemm")
    assert alone < got / 1.9


def test_a_frameworks_implementation_picks_its_rows(tmp_path):
    """torchtitan runs torch._grouped_mm: a table holding only loop rows leaves it on the model,
    while Megatron-Core (a loop of GEMMs, TE GroupedLinear) takes them."""
    path = _profile(tmp_path, TABLES)
    fsdp2 = {"tp": 1, "pp": 1, "ep": 8, "zero": 3}  # torchtitan's EP is carved from FSDP2's shard
    titan = _segments(_scenario(path) | {"framework": "torchtitan", "parallel": fsdp2})
    titan_plain = _segments(_scenario() | {"framework": "torchtitan", "parallel": fsdp2})
    assert _part(titan["experts"].work, "gemm") == _part(titan_plain["experts"].work, "gemm")
    mcore = _segments(_scenario(path) | {"framework": "megatron-core"})
    mcore_plain = _segments(_scenario() | {"framework": "megatron-core"})
    assert _part(mcore["experts"].work, "gemm") > 1.9 * _part(mcore_plain["experts"].work, "gemm")


def test_permute_router_and_read_back_take_the_measured_figures(tmp_path):
    data = _scenario(_profile(tmp_path, TABLES))
    segs = _segments(data)
    b = layer_builder(data)
    sh = b.shapes
    tokens, m = sh.moe_tokens, sh.model
    moved = 2 * tokens * m.top_k * m.hidden * sh.elt  # bytes: each copy's row read and written
    # the table's rates are flat in bytes: 1e11 B/s gathering, 5e10 B/s scattering back
    assert _part(segs["unpermute"].work, "memory") == pytest.approx(moved / 5e10, rel=1e-12)
    router_gemm = b.km.gemm(tokens, m.experts, m.hidden, role="fwd")
    scores = tokens * m.experts / 1e9  # 1e9 logits a second in the table
    assert _part(segs["router"].work, "memory") == pytest.approx(scores + moved / 1e11, rel=1e-9)
    assert _part(segs["router"].work, "gemm") == pytest.approx(router_gemm, rel=1e-12)
    assert segs["router"].sync and segs["router"].sync_s == 0.002  # dropless: counts read back


def test_the_engine_waits_the_measured_read_back(tmp_path):
    """A dropless forward reads the counts back once per MoE layer: a 2 ms read per layer
    (2 layers, 1 microbatch) puts the host 4 ms behind; without the table it is one Python op."""
    slow = run(_scenario(_profile(tmp_path, TABLES)))
    quick = run(_scenario(_profile(tmp_path, TABLES | {"count_read_s": 1e-9})))
    assert slow.summary["step_time_s"] - quick.summary["step_time_s"] == pytest.approx(2 * 0.002, rel=0.02)


def test_a_malformed_row_is_a_one_line_error(tmp_path):
    bad = copy.deepcopy(TABLES)
    bad["grouped_gemm"][1]["ratio"] = -1
    with pytest.raises(UserError) as err:
        load_profile(_profile(tmp_path, bad))
    assert "measured.moe.grouped_gemm[1].ratio" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UserError, match=r"measured\.moe\.colour"):
        load_profile(_profile(tmp_path, TABLES | {"colour": 1}))


def test_a_scenarios_moe_layer_as_calibrate_times_it(tmp_path):
    """8 experts over ep 8: one local expert receiving 2048 tokens x top 2 x 8 ranks / 8 experts;
    fc1 from hidden to expert_ffn (this model's activation is not gated)."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_scenario()))
    assert scenario_moe_shapes(path) == [(1, 4096, 512, 1024, 8, 2, 2048)]
    dense = tmp_path / "dense.yaml"
    dense.write_text(yaml.safe_dump(make_scenario()))
    assert scenario_moe_shapes(dense) == []  # calibrate --scenario then times the grid alone


def test_a_patched_hbm_carries_the_measured_rates(tmp_path):
    """As the measured memory table (compute.py): the rates are the measured machine's, so a
    scenario that doubles ``gpu.hbm_tbps`` halves the permute's and router's times; the grouped
    ratio, of two times on one machine, stays."""
    path = _profile(tmp_path, TABLES)
    hbm = load_profile(path).gpu.hbm_tbps
    patched = _scenario(path) | {"cluster": {"hardware": path, "gpus": 8, "profile": {"gpu": {"hbm_tbps": 2 * hbm}}}}
    stock, fast = _segments(_scenario(path)), _segments(patched)
    assert _part(fast["unpermute"].work, "memory") == pytest.approx(_part(stock["unpermute"].work, "memory") / 2, rel=1e-12)
    km = layer_builder(patched).km
    assert km.moe is not None and km.moe.hbm_scale == 2.0
    sh = layer_builder(patched).shapes
    assert km.moe.router_seconds(sh.moe_tokens, 8, 2) == pytest.approx(sh.moe_tokens * 8 / 1e9 / 2, rel=1e-12)


def test_the_expert_all_to_alls_carry_the_measured_unevenness(tmp_path):
    """1.5 times an even all-to-all's time at 8 ranks in the table: the dispatch and combine
    carry 1.5 times their bytes; a ratio below 1 (timing noise: an uneven exchange cannot beat
    an even one of the same bytes, its busiest rank sets the end) leaves them as they are."""
    rows = [{"bytes": b, "gpus": 8, "uneven_s": 1.5 * b / 1e11, "even_s": b / 1e11, "ratio": 1.5} for b in (1e5, 1e9)]
    data = _scenario(_profile(tmp_path, TABLES | {"all_to_all": rows}))
    b = layer_builder(data)
    comms = {s.name: s for s in expert.moe_block(b.shapes, b.km, b.scenario.moe, "F", 0) if isinstance(s, Comm)}
    even = expert.a2a_bytes(b.shapes, b.scenario.moe)
    assert comms["ep_dispatch"].nbytes == comms["ep_combine"].nbytes == even  # what is sent
    assert comms["ep_dispatch"].uneven == comms["ep_combine"].uneven == 1.5  # what the network moves
    # the engine times the exchange at 1.5 times the bytes, and records the bytes sent
    def dispatch(res):
        ev = res.events[res.events["name"] == "ep_dispatch"]
        return set(ev["bytes"]), float((ev["end_s"] - ev["start_s"]).iloc[0])

    shown, seconds = dispatch(run(data))
    plain_shown, plain_seconds = dispatch(run(_scenario()))
    assert shown == plain_shown == {even}
    # 8 MiB a rank inside one NVLink node: bandwidth-bound, so about 1.5 times as long
    assert seconds == pytest.approx(1.5 * plain_seconds, rel=0.1)
    faster = [r | {"uneven_s": 0.9 * r["even_s"], "ratio": 0.9} for r in rows]
    b = layer_builder(_scenario(_profile(tmp_path, TABLES | {"all_to_all": faster})))
    comms = {s.name: s for s in expert.moe_block(b.shapes, b.km, b.scenario.moe, "F", 0) if isinstance(s, Comm)}
    assert comms["ep_dispatch"].uneven == 1.0
