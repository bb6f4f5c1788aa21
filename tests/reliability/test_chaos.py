"""The chaos command, 20 deltas (CI's version): kill -9s, PostgreSQL crash restarts,
malformed messages, a second agent, the staging disk filled and freed, the database rewound,
then the replica equals the model and no applied delta was answered ERROR.
`python -m reliability.chaos` (100 deltas) writes RELIABILITY.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def chaos_report(tmp_path: Path, **flags: str) -> str:
    """`python -m reliability.chaos` with these flags (`kill_within` is `--kill-within`), in
    `tmp_path`: its RELIABILITY.md, once it exited 0 having passed every check it makes."""
    report = tmp_path / "RELIABILITY.md"
    flags |= {"work_dir": str(tmp_path), "report": str(report)}
    argv = [
        part for name, value in flags.items() for part in ("--" + name.replace("_", "-"), value)
    ]
    done = subprocess.run(
        [sys.executable, "-m", "reliability.chaos", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = report.read_text()
    deltas = flags["deltas"]
    assert f"**PASS**: {deltas} deltas" in text, text
    assert f"the registry has {deltas} rows for {deltas} deltas" in text
    assert "no transfer that applied a delta was ever answered ERROR" in text
    assert re.search(r"\| agent kill -9 \| 3 \| 0 \| 0 \| 0 \| [0-9.]+ s \|", text), text
    assert re.search(r"\| second agent \| 1 \| 0 \| 0 \| 0 \|", text), text
    assert "the second agent stopped at start" in text
    return text


def test_twenty_deltas_through_kills_and_database_restarts(tmp_path: Path) -> None:
    tmp_path.chmod(0o711)  # as root, PostgreSQL's system user must enter the work directory
    flags = {"deltas": "20", "rows_per_delta": "300", "kills": "3", "kill_within": "3"}
    text = chaos_report(tmp_path, **flags, pg_restarts="2", seed="3")
    assert re.search(r"\| PostgreSQL crash restart \| 2 \| 0 \| 0 \| 0 \|", text)
    assert re.search(r"\| database rewound 2 deltas \| 1 \| 0 \| 0 \| 0 \| [0-9.]+ s \|", text)
    assert re.search(r"\| staging disk filled \| 1 \| 0 \| 0 \| 0 \| [0-9.]+ s \|", text) or (
        "NOT injected: staging disk filled: cannot mount a tmpfs" in text
    )
    assert re.search(r"\| compression bomb \| [1-9]", text)
    assert re.search(r"\| whole \| [1-9]", text)  # replays, and still nothing lost above
    assert re.search(r"\| cut short of its last chunk \| [1-9]", text)


def test_deltas_through_kills_on_a_clickhouse_replica(tmp_path: Path) -> None:
    """The same faults with the replica in an embedded ClickHouse (the agent's own engine:
    a kill -9 of the agent crashes the database too); no server to restart, no rewind.
    Without the disk fill's pause (as where no tmpfs can be mounted: CI), the deltas go
    faster than the kills' random delays: each kill must still land mid-run."""
    flags = {"deltas": "12", "rows_per_delta": "300", "kills": "3", "kill_within": "3"}
    text = chaos_report(tmp_path, **flags, store="clickhouse", seed="5", disk_fills="0")
    assert "NOT injected: database rewound 2 deltas: not built for an embedded ClickHouse" in text
