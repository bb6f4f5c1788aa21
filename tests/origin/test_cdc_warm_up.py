"""`podd-cdc warm-up` and `replica-agent warm-up` compile every kernel a run of the origin
and the agent's loader call, into numba's cache: in a fresh cache, after them, the origin's
paths over the test writers' messages (the demo's tables, one of every Qlik type,
DataWorks) and the loader's staging of the chunks it framed compile nothing more."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # about 40 CPU s of compiling


def _run(args: list[str], cache: Path) -> str:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, *args],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _compiled(cache: Path) -> set[str]:
    """The compiled kernel signatures in the cache (a file each)."""
    return {str(p.relative_to(cache)) for p in cache.rglob("*.nbc")}


def test_after_the_warm_ups_the_origin_and_the_loader_compile_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "numba"
    said = _run(["-m", "podd_cdc.cli", "warm-up"], cache)
    found = re.match(r"(\d+) kernel signature\(s\) compiled, 0 loaded from the cache", said)
    assert found, said
    assert int(found[1]) > 0
    warmed = _compiled(cache)
    assert len(warmed) == int(found[1])
    assert {p.split("/")[0].rsplit("_", 1)[0] for p in warmed} == {
        "podd_cdc",
        "podd_kafka",
        "protocol",
    }
    said = _run(["-m", "replica_agent.cli", "warm-up"], cache)
    assert re.match(r"\d+ kernel signature\(s\) compiled, \d+ loaded from the cache", said)
    loader = _compiled(cache) - warmed
    assert {p.split("/")[0].rsplit("_", 1)[0] for p in loader} == {
        "protocol",
        "replica_store",
        "spark_loader",
    }
    warmed |= loader

    assert "ran" in _run(["-m", "tests.origin.warm_up_child"], cache)
    assert _compiled(cache) == warmed  # the paths found every kernel compiled

    again = _run(["-m", "podd_cdc.cli", "warm-up"], cache)
    assert again.startswith("0 kernel signature(s) compiled, "), again
