"""A connection lost around the COMMIT: the registry decides, so an applied delta is never
answered LOAD_FAILED and one not applied is tried again (`replica_store.lost_commit`)."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

import psycopg
import pytest

from protocol.ddl import parse_schema
from protocol.schema import LogicalSchema
from replica_store.registry import encode_counts
from replica_store.store import ReplicaStore
from tests.loader.conftest import NewLoader, unique
from tests.loader.staging_helpers import assert_matches_model, two_deltas

DDL = (Path(__file__).resolve().parents[2] / "examples" / "marketing.sql").read_text()


@pytest.fixture
def schema() -> LogicalSchema:
    return unique(parse_schema(DDL))


def test_a_connection_lost_after_the_commit_landed_is_ok_not_load_failed(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    model, (first, second) = two_deltas(schema, staging_root)
    new_loader(schema).load(first)
    lost: list[int] = []

    def commit_then_lose_the_connection(conn: psycopg.Connection) -> None:
        conn.commit()
        lost.append(conn.info.backend_pid)
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    result = new_loader(schema, attempts=1, commit=commit_then_lose_the_connection).load(second)
    assert lost
    assert not result.already_applied
    assert result.request_id == second.manifest.request_id
    assert_matches_model(replica_dsn, model)
    registry = ReplicaStore(replica_dsn).registry(schema.datamart)
    assert [e.delta_num for e in registry] == [0, 1]


def test_a_registry_row_of_another_request_after_a_lost_commit_is_not_taken_as_ours(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    """The COMMIT did not land, but by the time the registry is read another writer has
    applied the delta: its row is that writer's load, reported as already applied, never
    as this load's own."""
    _, (first, second) = two_deltas(schema, staging_root)
    new_loader(schema).load(first)
    manifest = second.manifest

    def lose_the_commit_while_another_writer_applies(conn: psycopg.Connection) -> None:
        conn.rollback()
        with psycopg.connect(replica_dsn, autocommit=True) as other:
            other.execute(
                "INSERT INTO podd_replica.delta_registry "
                "(datamart, delta_num, delta_date, request_id, table_counts) "
                "VALUES (%s, %s, %s, %s, %s)",
                (
                    manifest.datamart,
                    manifest.delta_num,
                    manifest.delta_date.astimezone(UTC).replace(tzinfo=None),
                    "another-writer",
                    encode_counts([]),
                ),
            )
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    loader = new_loader(schema, attempts=1, commit=lose_the_commit_while_another_writer_applies)
    result = loader.load(second)
    assert result.request_id == "another-writer"
    assert result.already_applied


def test_a_connection_lost_before_the_commit_is_retried_and_applies_once(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    model, (first, second) = two_deltas(schema, staging_root)
    new_loader(schema).load(first)
    killed: list[int] = []

    def lose_the_connection_then_commit(conn: psycopg.Connection) -> None:
        if not killed:
            killed.append(conn.info.backend_pid)
            with psycopg.connect(replica_dsn, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", (killed[0],))
        conn.commit()

    result = new_loader(schema, attempts=3, commit=lose_the_connection_then_commit).load(second)
    assert len(killed) == 1
    assert not result.already_applied
    assert_matches_model(replica_dsn, model)
    registry = ReplicaStore(replica_dsn).registry(schema.datamart)
    assert [e.delta_num for e in registry] == [0, 1]
