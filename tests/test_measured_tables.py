"""A profile's measured tables and its sources are checked at load (simcluster/measured_tables.py,
simcluster/profile_keys.py unknown_source).

Found by hand while fuzzing (session 40): a profile whose ``measured.gemm`` row had a negative
``time_s`` simulated Llama 3 70B on 64 H100 to a 77,197-second step with exit code 0 (every GEMM
at a negative fraction of peak, compute.py's ``flops / time_s / peak``), a zero ``time_s`` or a
row without ``k`` ended in a traceback (ZeroDivisionError, KeyError), a negative
``measured.memory`` rate simulated silently, a ``measured.collectives`` given as a string
crashed with AttributeError, and a misspelt ``op`` left its row unused without a word. Each is
now a one-line error naming ``measured.TABLE[i].FIELD``, exit code 2.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from simcluster.cli import main
from simcluster.errors import UserError
from simcluster.hardware import load_profile, profile_from_dict

H100 = Path(__file__).resolve().parents[1] / "hardware" / "dgx-h100.yaml"
GEMM = {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "time_s": 0.0015}


def _raw() -> dict:
    return yaml.safe_load(H100.read_text())


def _with(table: str, rows: object) -> dict:
    raw = _raw()
    raw["measured"][table] = rows
    return raw


@pytest.mark.parametrize(
    ("table", "rows", "field"),
    [
        ("gemm", [{**GEMM, "time_s": -0.002}], "measured.gemm[0].time_s"),
        ("gemm", [{**GEMM, "time_s": 0}], "measured.gemm[0].time_s"),
        ("gemm", [{k: v for k, v in GEMM.items() if k != "k"}], "measured.gemm[0].k"),
        ("gemm", [{k: v for k, v in GEMM.items() if k != "dtype"}], "measured.gemm[0].dtype"),
        ("memory", [{"kernel": "copy", "bytes": 1e9, "bytes_per_s": -2.8e12}], "measured.memory[0].bytes_per_s"),
        ("attention", [{"batch": 1, "heads": 16, "seq": 4096, "head_dim": 128, "fwd_s": -1e-3}],
         "measured.attention[0].fwd_s"),
        ("collectives", "oops", "measured.collectives"),
        ("collectives", ["all_reduce 8 GPUs"], "measured.collectives[0]"),
    ],
)  # fmt: skip
def test_bad_rows_are_one_line_errors(table: str, rows: object, field: str) -> None:
    with pytest.raises(UserError) as err:
        profile_from_dict(_with(table, rows), origin="p.yaml")
    assert f"field '{field}'" in err.value.message
    assert "\n" not in err.value.one_line()


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"time_s": -5e-4, "busbw_GBps": None}, "time_s"),
        ({"busbw_GBps": -5}, "busbw_GBps"),
        ({"bytes": 0}, "bytes"),
        ({"op": "allreduce"}, "op"),  # did you mean all_reduce: the row was silently unused
        ({"scope": "node"}, "scope"),
        ({"gpus": None}, "gpus"),
    ],
)
def test_bad_collective_rows(edit: dict, field: str) -> None:
    raw = _raw()
    row = raw["measured"]["collectives"][3]  # dgx-h100's 32 MiB all-reduce (nccl-tests sample)
    row.update(edit)
    with pytest.raises(UserError) as err:
        profile_from_dict(raw, origin="p.yaml")
    assert f"field 'measured.collectives[3].{field}'" in err.value.message


@pytest.mark.parametrize("bad", [-0.002, float("inf"), float("nan"), "fast", True])
def test_a_table_row_and_a_validation_figure_say_the_same_of_a_bad_number(bad: object) -> None:
    """One check (measured.positive_number) and one wording for a number that must be finite and
    above 0, whether a profile's measured table or a validation case's measured figure holds it;
    only the fix differs (re-run calibrate / give the published figure)."""
    from simcluster.measured import positive_number

    with pytest.raises(UserError) as table:
        profile_from_dict(_with("gemm", [{**GEMM, "time_s": bad}]), origin="p.yaml")
    with pytest.raises(UserError) as figure:
        positive_number(bad, "c.measured.step_time_s")
    said = f"must be a finite number above 0, got {bad!r}; "
    assert table.value.one_line().endswith(said + "fix the row or re-run calibrate (docs/architecture.md, "
                                           "'measured:', lists each table's fields)")  # fmt: skip
    assert figure.value.one_line().endswith(said + "give the figure as published, a number above 0")


def test_a_row_needs_a_time_or_a_bandwidth() -> None:
    raw = _raw()
    row = raw["measured"]["collectives"][3]
    row.pop("time_s"), row.pop("busbw_GBps")
    with pytest.raises(UserError, match=r"needs time_s or busbw_GBps"):
        profile_from_dict(raw, origin="p.yaml")


def test_shipped_profiles_and_good_rows_load() -> None:
    for path in sorted(H100.parent.glob("*.yaml")):
        load_profile(path)
    raw = _with("gemm", [GEMM])
    raw["measured"]["memory"] = [{"kernel": "copy", "bytes": 4e9, "bytes_per_s": 2.9e12}]
    raw["measured"]["attention"] = [
        {"batch": 1, "heads": 16, "seq": 4096, "head_dim": 128, "fwd_s": 1e-3, "bwd_s": None}
    ]
    profile_from_dict(copy.deepcopy(raw))  # an attention row without a backward time is allowed


def test_cli_exit_code_and_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "neg.yaml"
    profile.write_text(yaml.safe_dump(_with("gemm", [{**GEMM, "time_s": -0.002}])))
    assert main(["memory", "llama3-70b-64xh100", "--set", f"cluster.hardware={profile}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "measured.gemm[0].time_s" in err


@pytest.mark.parametrize(
    ("key", "hint"),
    [("gpu.hbm_tbpz", "did you mean 'gpu.hbm_tbps'?"), ("node.nic_gbp", "did you mean 'node.nic_gbps'?")],
)
def test_a_source_for_no_field_is_refused(key: str, hint: str) -> None:
    """A misspelt ``sources:`` key cites a source for nothing and leaves the number it was
    meant for unsourced (found by hand, session 40: it loaded silently)."""
    raw = _raw()
    raw["sources"][key] = raw["sources"].pop({"gpu.hbm_tbpz": "gpu.hbm_tbps", "node.nic_gbp": "node.nic_gbps"}[key])
    with pytest.raises(UserError) as err:
        profile_from_dict(raw, origin="p.yaml")
    assert f"field 'sources.{key}' names no field" in err.value.message and hint in err.value.message


@pytest.mark.parametrize("key", ["gpu", "gpu.peak_tflops.bf16", "efficiency.gemm_tile", "measured.collectives"])
def test_sources_of_sections_defaults_and_table_rows_are_fields(key: str) -> None:
    # a whole section, a key inside a mapping, a field left at its schema default (every
    # shipped Hopper profile sources efficiency.gemm_tile), a measured table
    raw = _raw()
    raw["sources"][key] = "a source of at least ten characters"
    profile_from_dict(raw)
