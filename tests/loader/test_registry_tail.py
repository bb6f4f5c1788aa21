"""The registry's end read at the same cost whatever its length: a million rows on the real
PostgreSQL. Before, the agent read and decoded every registry row of a datamart (JSON
included) on a new connection every 10 s and before `delta.rs`: 1.3 s of Python at 100,000
deltas, past its own interval near a million. Timings are bench's; this proves the plan
reads a bounded number of rows and the tracker keeps a bounded window."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import psycopg

from protocol.schema import LogicalSchema
from protocol.sequence import AppliedDelta
from replica_agent.admission import TransferLimits
from replica_agent.tracker import TransferTracker
from replica_store.registry_tail import RegistryTail
from replica_store.store import ReplicaStore
from tests.agent.conftest import renamed

EPOCH = datetime(2020, 1, 1)


def fill_registry(dsn: str, datamart: str, count: int) -> None:
    """`count` applied deltas 0.. of `datamart`, one a minute from 2020, in one statement."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO podd_replica.delta_registry (datamart, delta_num, delta_date, "
            "request_id, table_counts) SELECT %s, n, %s + n * interval '1 minute', "
            "'rq-' || n, '[]' FROM generate_series(0, %s) AS n",
            (datamart, EPOCH, count - 1),
        )


def rows_read(dsn: str, datamart: str) -> int:
    """The rows PostgreSQL read for the tail's query of one delta (EXPLAIN ANALYZE)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT delta_num, delta_date "
            "FROM podd_replica.delta_registry WHERE datamart = %s "
            "ORDER BY delta_num DESC LIMIT 1",
            (datamart,),
        ).fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    node = plan[0]["Plan"]
    total = 0
    while True:
        total = max(total, int(node["Actual Rows"]))
        if not node.get("Plans"):
            return total
        node = node["Plans"][0]


def test_a_million_registry_rows_read_as_few_as_ten(
    replica_dsn: str, marketing: LogicalSchema
) -> None:
    big, small = renamed(marketing), renamed(marketing)
    store = ReplicaStore(replica_dsn)
    store.ensure(big)
    store.ensure(small)
    fill_registry(replica_dsn, big.datamart, 1_000_000)
    fill_registry(replica_dsn, small.datamart, 10)
    with psycopg.connect(replica_dsn, autocommit=True) as conn:
        conn.execute("ANALYZE podd_replica.delta_registry")

    tail = RegistryTail(replica_dsn)
    try:
        last = tail.last(big.datamart)
        assert last == AppliedDelta(
            999_999, (EPOCH + timedelta(minutes=999_999)).replace(tzinfo=UTC)
        )
        window = tail.tail(big.datamart, 1000)
        assert [d.delta_num for d in window] == list(range(999_000, 1_000_000))
        assert tail.tail(small.datamart, 1000)[-1].delta_num == 9
        assert tail.last("no_such_datamart") is None
        # The plan reads the one row it returns, for a million rows as for ten.
        assert rows_read(replica_dsn, big.datamart) == 1
        assert rows_read(replica_dsn, small.datamart) == 1

        tracker = TransferTracker(
            {big.datamart: big}, {big.datamart: window}, limits=TransferLimits()
        )
        assert tracker.expected(big.datamart) == 1_000_000
        assert len(tracker.applied[big.datamart]) == 1000
    finally:
        tail.close()


def test_the_kept_connection_is_opened_again_after_it_broke(
    replica_dsn: str, marketing: LogicalSchema
) -> None:
    schema = renamed(marketing)
    ReplicaStore(replica_dsn).ensure(schema)
    fill_registry(replica_dsn, schema.datamart, 3)
    tail = RegistryTail(replica_dsn)
    try:
        assert tail.last(schema.datamart) is not None
        with psycopg.connect(replica_dsn, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND query LIKE '%%delta_registry%%' "
                "AND state = 'idle' AND datname = current_database()"
            ).fetchall()
        assert ended == [(True,)]
        last = tail.last(schema.datamart)
        assert last is not None
        assert last.delta_num == 2
    finally:
        tail.close()
