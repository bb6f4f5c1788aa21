"""The README's main command, run small."""

from __future__ import annotations

import pytest

from replica_agent import demo


def test_demo_runs_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--deltas", "3", "--rows-per-delta", "90", "--chunk-rows", "7"]) == 0
    out = capsys.readouterr().out
    assert "delta   2:" in out
    assert "deltas 3, rows 270" in out
    assert "live rows" in out
