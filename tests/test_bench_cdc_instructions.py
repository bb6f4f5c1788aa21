"""`bench.cdc_instructions`: the origin's in-process path cuts and frames every change it
is given, and cachegrind's count is read (where valgrind is installed)."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from bench import cdc_chain, cdc_instructions

pytestmark = pytest.mark.slow


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
    """The child runs under valgrind and its count is read. Kept cheap for CI (it took 226 s
    beside other tests with numba's compile and a warm-up under valgrind): no warm-up, and
    numba's JIT off, so the body writer runs as Python; the imports alone are ~2.8e9."""
    data = cdc_instructions.prepared("qlik", 200)
    path = tmp_path / "data.pickle"
    path.write_bytes(pickle.dumps(data))
    counted = cdc_instructions._counted(path, 200, warm=0, env={"NUMBA_DISABLE_JIT": "1"})
    assert counted > 10**9


def test_the_chains_child_holds_every_change_of_the_messages_it_is_given(tmp_path: Path) -> None:
    """`bench.cdc_chain --instructions` counts this child: the columnar path over the first
    messages, after a warm-up run over fewer."""
    data = cdc_instructions.prepared("qlik", 1_000)
    path = tmp_path / "data.pickle"
    path.write_bytes(pickle.dumps(data))
    changes = sum(b'"type": "DT"' in value for _, value in data["messages"])
    assert cdc_chain._child(path, len(data["messages"]), 300) == changes > 0
