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
