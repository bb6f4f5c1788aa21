"""`bench.cdc_read` stays runnable: each reader it measures reads every message written."""

from __future__ import annotations

import pytest

from bench import cdc_read
from bench.cdc_bench import source


def test_the_read_bench_reads_every_message_with_each_reader(
    broker: str, capsys: pytest.CaptureFixture[str]
) -> None:
    written, _ = source("qlik", 1500, 0)
    assert cdc_read.main(["--changes", "1500", "--pairs", "1", "--bootstrap", broker]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == list(cdc_read.readers())
    assert all(f"({len(written):,} messages," in line for line in lines), lines
