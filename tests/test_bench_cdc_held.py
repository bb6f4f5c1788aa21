"""`bench.cdc_held` stays runnable: both sides take every change it feeds (its own check),
and it prints a figure for each."""

from __future__ import annotations

import pytest

from bench import cdc_held


def test_the_held_bench_takes_every_change_on_both_sides(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cdc_held.main(["--changes", "3000", "--max-rows", "700", "--pairs", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["cutter", "arrays"]
