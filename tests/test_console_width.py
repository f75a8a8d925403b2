"""Tables printed to a file or a pipe keep their columns (Rich's default there is 80)."""

from __future__ import annotations

from simcluster.cli import main
from simcluster.commands.console import PIPE_WIDTH, stdout_console


def test_a_redirected_console_is_wide_unless_columns_says_otherwise(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert stdout_console().width == PIPE_WIDTH  # pytest's captured stdout is not a terminal
    assert stdout_console(250).width == 250
    monkeypatch.setenv("COLUMNS", "100")
    assert stdout_console().width == 100  # the user's own width wins
    assert stdout_console(120).width == 120


def test_hardware_list_in_a_log_shows_whole_headers(monkeypatch, capsys):
    # before: `simcluster list hardware | cat` cut the headers to 'prof…' and 'memo…'
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["list", "hardware"]) == 0
    out = capsys.readouterr().out
    assert "profile" in out and "memory GiB" in out and "…" not in out


def test_hardware_list_on_a_narrow_terminal_lists_each_profile_whole(monkeypatch, capsys):
    # before: at 80 or 100 columns the table cut the names a user copies into cluster.hardware
    # to 'alps-g…' and 'dgx-a1…', and H100's FP8 peak to '1978…'; below the table's width each
    # profile is now a block of lines (NVIDIA H100 datasheet: 989.4 BF16, 1978.9 FP8 TFLOP/s)
    from simcluster.hardware import shipped_profiles

    for columns in ("60", "80", "100"):
        monkeypatch.setenv("COLUMNS", columns)
        assert main(["list", "hardware"]) == 0
        out = capsys.readouterr().out
        assert "…" not in out and "┃" not in out, columns
        heads = {line.split()[0] for line in out.splitlines() if line and not line.startswith(" ")}
        assert set(shipped_profiles()) <= heads, columns
        h100 = out[out.index("\ndgx-h100 ") :]
        # (16384^3 as modelled; FP8: Azure's cuBLASLt H100 table measures 1377.3 TFLOP/s there)
        assert "BF16 989.4 (746), FP8 1978.9 (1371)" in " ".join(h100.split()[:20]), columns
    v100 = out[out.index("\ndgx-2-v100 ") :].splitlines()
    assert v100[3].strip() == "TFLOP/s: FP16 125 (83)"  # no BF16 on a V100: its FP16 tensor cores
