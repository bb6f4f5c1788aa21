"""The replica store, the embedded PostgreSQL and the staged-transfer format."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psycopg
import pytest

from podd_runtime.dsn import safe_dsn
from protocol.ddl import parse_schema
from protocol.schema import LogicalSchema
from replica_store.embedded_pg import (
    LOAD_SETTINGS,
    PASSWORD_FILE,
    SOCKET_PATH_MAX,
    EmbeddedPostgres,
)
from replica_store.errors import EmbeddedPostgresError, StagedTransferError, StoreMismatchError
from replica_store.store import ReplicaStore
from replica_store.transfer import MANIFEST_NAME, StagedTransfer
from tests.loader.conftest import unique
from tests.loader.staging_helpers import stage

DDL = '''
CREATE TABLE m.t (id bigint not null, v varchar(8), d date, PRIMARY KEY (id));
CREATE TABLE m."Weird ""name""" ("a b" int32 not null, PRIMARY KEY ("a b"));
'''


@pytest.fixture
def schema() -> LogicalSchema:
    return unique(parse_schema(DDL))


def test_ensure_creates_the_layout_of_replica_md(replica_dsn: str, schema: LogicalSchema) -> None:
    store = ReplicaStore(replica_dsn)
    first = store.ensure(schema)
    assert store.ensure(schema).id == first.id  # idempotent
    with psycopg.connect(replica_dsn) as conn:
        columns = conn.execute(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 't_history' ORDER BY ordinal_position",
            (schema.datamart,),
        ).fetchall()
        weird = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s",
            (schema.datamart,),
        ).fetchone()
        catalog = conn.execute(
            "SELECT table_name, column_name, prostore_type, key_position FROM podd_replica.catalog "
            "WHERE datamart = %s ORDER BY table_position, column_position",
            (schema.datamart,),
        ).fetchall()
    assert columns == [
        ("id", "bigint", "NO"),
        ("v", "character varying", "YES"),
        ("d", "date", "YES"),
        ("sys_from", "bigint", "NO"),
        ("sys_to", "bigint", "YES"),
        ("sys_op", "integer", "YES"),
    ]
    assert weird == (4,)  # names with quotes and spaces are quoted, never spliced
    assert catalog == [
        ("t", "id", "BIGINT", 0),
        ("t", "v", "VARCHAR(8)", None),
        ("t", "d", "DATE", None),
        ('Weird "name"', "a b", "INT32", 0),
    ]


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ("ALTER TABLE {t} ALTER COLUMN v TYPE varchar(9)", "column 2 is v character varying(9)"),
        ("ALTER TABLE {t} ADD COLUMN extra int", "columns the schema lacks: extra"),
        ("ALTER TABLE {t} DROP COLUMN d CASCADE", "column 3 is sys_from"),
        ("ALTER TABLE {t} ALTER COLUMN v SET NOT NULL", "v character varying(8) NOT NULL"),
    ],
)
def test_live_tables_that_disagree_are_refused_by_name(
    replica_dsn: str, schema: LogicalSchema, change: str, fragment: str
) -> None:
    store = ReplicaStore(replica_dsn)
    store.ensure(schema)
    table = f'"{schema.datamart}"."t_history"'
    with psycopg.connect(replica_dsn, autocommit=True) as conn:
        conn.execute(change.format(t=table))
    with pytest.raises(StoreMismatchError) as caught:
        store.ensure(schema)
    assert f"table {schema.datamart}.t_history" in str(caught.value)
    assert fragment in str(caught.value)


def test_a_changed_primary_key_or_a_dropped_table_is_refused(
    replica_dsn: str, schema: LogicalSchema
) -> None:
    store = ReplicaStore(replica_dsn)
    store.ensure(schema)
    keyed = unique(
        parse_schema("CREATE TABLE m.k (a int not null, b int not null, PRIMARY KEY (a))")
    )
    store.ensure(keyed)
    rekeyed = parse_schema(f"CREATE TABLE {keyed.datamart}.k (a int, b int, PRIMARY KEY (a, b))")
    with pytest.raises(StoreMismatchError, match=r"k_actual .* primary key is \(a, sys_from\)"):
        store.ensure(rekeyed)
    only_t = schema.model_copy(update={"tables": (schema.table("t"),)})
    with pytest.raises(StoreMismatchError, match='Weird "name" is in the replica but not'):
        store.ensure(only_t)


def test_safe_dsn_never_shows_the_password() -> None:
    shown = safe_dsn("postgresql://replica:s3cret-pw@db.example:5432/dr")
    assert "s3cret-pw" not in shown
    assert "host=db.example" in shown
    assert "s3cret" not in repr(ReplicaStore("host=h password=s3cret user=u"))


def test_embedded_postgres_keeps_its_data_and_is_reused(tmp_path: Path) -> None:
    data = tmp_path / "pg"
    with EmbeddedPostgres(data) as server:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (x int)")
            conn.execute("INSERT INTO kept VALUES (42)")
        assert EmbeddedPostgres(data).start().port == server.port  # running: reused
    assert EmbeddedPostgres(data).running_port() is None  # stopped cleanly
    with EmbeddedPostgres(data) as again, psycopg.connect(again.dsn) as conn:
        assert conn.execute("SELECT x FROM kept").fetchone() == (42,)
        assert again.dsn.startswith("postgresql://postgres:")  # with its password
        assert "@127.0.0.1:" in again.dsn
        for name, value in LOAD_SETTINGS.items():  # the apply's server settings hold
            assert conn.execute(f"SHOW {name}").fetchone() == (value,)


def test_embedded_postgres_needs_its_password_over_tcp(tmp_path: Path) -> None:
    data = tmp_path / "pg"
    with EmbeddedPostgres(data) as server:
        password = (data / PASSWORD_FILE).read_text().strip()
        assert len(password) >= 24
        assert (data / PASSWORD_FILE).stat().st_mode & 0o777 == 0o600
        assert f":{password}@" in server.dsn
        for wrong in ("", ":not-the-password"):
            with pytest.raises(psycopg.OperationalError, match="password"):
                psycopg.connect(f"postgresql://postgres{wrong}@127.0.0.1:{server.port}/postgres")
        with psycopg.connect(server.dsn) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_embedded_postgres_in_a_directory_too_deep_for_its_socket(tmp_path: Path) -> None:
    """A data directory whose socket path would pass `SOCKET_PATH_MAX`: the server starts
    with its socket in a private directory of its own, is found again by a second object,
    survives a crash restart, and takes that directory away when it stops."""
    tmp_path.chmod(0o711)  # as root, PostgreSQL's system user must enter the directories
    data = tmp_path / ("d" * (SOCKET_PATH_MAX - len(str(tmp_path)))) / "pg"
    assert len(str(data / ".s.PGSQL.65535")) > SOCKET_PATH_MAX
    with EmbeddedPostgres(data) as server:
        socket_dir = server.socket_dir()
        assert socket_dir != data
        assert socket_dir.stat().st_mode & 0o777 == 0o700
        assert list(socket_dir.glob(".s.PGSQL.*"))
        found = EmbeddedPostgres(data)
        assert found.start().port == server.port  # reused, over the socket it found
        assert found.socket_dir() == socket_dir
        server.crash_restart()
        with psycopg.connect(server.dsn) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    assert not socket_dir.exists()
    assert EmbeddedPostgres(data).running_port() is None


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as a system user")
def test_as_root_nothing_above_the_data_directory_is_opened(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    closed.chmod(0o700)
    with pytest.raises(EmbeddedPostgresError, match=r"cannot enter .*closed \(mode 0o700\)"):
        EmbeddedPostgres(closed / "var" / "pg").start()
    assert closed.stat().st_mode & 0o777 == 0o700  # named, never changed


def test_a_staged_transfer_reads_back_and_refuses_gaps(
    tmp_path: Path, schema: LogicalSchema
) -> None:
    transfer = stage(tmp_path, schema, 0, {"t": []}, chunk_rows=1)
    again = StagedTransfer.open(transfer.directory)
    assert again.manifest == transfer.manifest
    assert [n for n, _ in again.chunks_of("t")] == [1]
    assert again.chunks_of("no such table") == []
    transfer.chunk_path(2, 1).unlink()
    with pytest.raises(StagedTransferError, match="stream 2 chunk 1"):
        StagedTransfer.open(transfer.directory)
    (transfer.directory / MANIFEST_NAME).write_text(json.dumps({"datamart": 1}))
    with pytest.raises(StagedTransferError, match="not a transfer manifest"):
        StagedTransfer.open(transfer.directory)
    with pytest.raises(StagedTransferError, match="no manifest"):
        StagedTransfer.open(tmp_path)
