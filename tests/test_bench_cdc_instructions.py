"""`bench.cdc_instructions`: the origin's in-process path cuts and frames every change it
is given, and cachegrind's count is read (where valgrind is installed)."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from bench import cdc_instructions


@pytest.mark.parametrize("fmt", ["qlik", "dataworks"])
def test_the_path_cuts_and_frames_every_change(fmt: str) -> None:
    data = cdc_instructions.prepared(fmt, 3_000)
    made = cdc_instructions.origin_path(fmt, data["schema"], data["messages"])
    assert made["changes"] >= data["source_changes"] > 0
    assert made["cut_changes"] == made["changes"]  # nothing left held, nothing dropped
    assert made["rows"] > 0
    assert made["chunks"] >= made["deltas"] * len(data["schema"].tables)


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_cachegrind_counts_a_child_run(tmp_path: Path) -> None:
    data = cdc_instructions.prepared("qlik", 600)
    path = tmp_path / "data.pickle"
    path.write_bytes(pickle.dumps(data))
    assert cdc_instructions._counted(path, 600) > 10**8
