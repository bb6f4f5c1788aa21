"""`bench.cdc_intake`: the origin's intake and cutter on arrays, driven in process, hold every
message of either format from read batches and cut every change into framed deltas; the
counted child runs the same path."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from bench import cdc_instructions, cdc_intake

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("fmt", ["qlik", "dataworks"])
def test_the_intake_holds_every_message_from_batches_and_cuts_every_change(fmt: str) -> None:
    data = cdc_instructions.prepared(fmt, 3_000)
    fetched = cdc_intake.fetches(data["messages"], batch=500)
    made = cdc_intake.intake_path(fmt, data["schema"], fetched)
    # Read exactly: Qlik's table descriptions, and a last fetch smaller than a batch's least.
    assert made["batched"] >= 0.9 * len(data["messages"])
    assert made["changes"] >= data["source_changes"] > 0  # every change cut, none left held
    assert made["deltas"] >= 1
    assert made["chunks"] >= made["deltas"]


def test_the_counted_child_runs_the_intake(tmp_path: Path) -> None:
    data = cdc_instructions.prepared("dataworks", 500)
    path = tmp_path / "data.pickle"
    path.write_bytes(pickle.dumps(data))
    cdc_intake._child(path, len(data["messages"]), 100)  # as cachegrind's child runs it
