"""Sequence integrity end to end: Qlik topics written by the writer, cut by `podd-cdc run`
(a process), applied by the real agent (Tansu, PostgreSQL, Spark). A change that breaks
the source's order stops the run with exit 3 naming topic, partition and offset, and the
replica holds exactly what was cut before it, as of every delta.

Before, the second run below exited 0 with a replica that matched no state of the source
(the changes sequenced 400 days back were taken for copies of cut ones and dropped)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.agent.conftest import AgentProcess
from tests.origin.cdc_fixtures import cdc_agent_fixture, replica_for
from tests.origin.test_cdc_e2e import QLIK_TABLES, check, qlik_topic
from tools.cdc_write.source import SourceDatabase

cdc_agent = cdc_agent_fixture(qlik=4, dataworks=0)
DAY_MS = 86_400_000
WHERE = re.compile(r"topic cdc-\w+ partition \d+ offset \d+")


@pytest.mark.parametrize("columnar", [False, True], ids=["by-record", "columnar"])
def test_a_sequence_that_goes_backwards_stops_the_run_and_applies_nothing_of_it(
    cdc_agent: AgentProcess, replica_dsn: str, tmp_path: Path, columnar: bool
) -> None:
    replica = replica_for(cdc_agent, "qlik", tmp_path, columnar=columnar)
    db = SourceDatabase(QLIK_TABLES, seed=11)
    landed = replica.write(qlik_topic(db, 150))
    first = replica.run("--max-delta-rows", "200", "--until-idle", "2")
    assert first.returncode == 0, first.stderr[-3000:]
    cuts_before = len(replica.cuts())

    db._clock_ms -= 400 * DAY_MS  # the Replicate server's clock set back, or a task reset
    replica.write(qlik_topic(db, 150, full_load=0)[len(QLIK_TABLES) :])
    second = replica.run("--max-delta-rows", "200", "--until-idle", "2")
    assert second.returncode == 3, second.stderr[-3000:]
    assert "is at or below the bound of delta" in second.stderr
    assert WHERE.search(second.stderr), second.stderr[-2000:]
    assert len(replica.cuts()) == cuts_before  # nothing of the later changes was cut
    assert check(replica, QLIK_TABLES, landed, replica_dsn) == cuts_before


@pytest.mark.parametrize("columnar", [False, True], ids=["by-record", "columnar"])
def test_a_transaction_sequenced_far_ahead_stops_before_it_and_what_came_first_applies(
    cdc_agent: AgentProcess, replica_dsn: str, tmp_path: Path, columnar: bool
) -> None:
    replica = replica_for(cdc_agent, "qlik", tmp_path, columnar=columnar)
    db = SourceDatabase(QLIK_TABLES, seed=12)
    landed = replica.write(qlik_topic(db, 60))
    clock = db._clock_ms
    db._clock_ms = 4_070_908_800_000  # 2099-01-01: a stray sequence, far ahead
    replica.write(qlik_topic(db, 1, full_load=0)[len(QLIK_TABLES) :])
    db._clock_ms = clock
    done = replica.run("--max-delta-rows", "40", "--until-idle", "2")
    assert done.returncode == 3, done.stderr[-3000:]
    assert "ahead of this origin's clock" in done.stderr
    assert WHERE.search(done.stderr)
    cuts = replica.cuts()
    assert cuts
    assert all(c.date.year < 2099 for c in cuts)
    assert check(replica, QLIK_TABLES, landed, replica_dsn) == len(cuts)
