"""The loader benchmark stays runnable: a smoke-size run in its own process (it stops its
SparkSession, which must not be the test session's). No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_apply_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    args = ["--rows", "400", "--preload", "400", "--tables", "2", "--chunk-rows", "50"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.bench_apply",
            *args,
            "--spark-master",
            "local[2]",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["rows"] == 400
    assert sum(c[1] for c in results["counts"]) == 400
    assert results["apply_seconds"] > 0
    assert results["copy_seconds"] > 0
    assert "ratio apply/COPY" in done.stdout
