"""The CDC origin end to end on real parts: Qlik and DataWorks topics written by the writers,
cut by `podd-cdc run` (a process), applied by the real agent (Tansu, PostgreSQL, Spark);
the replica equals the model of the raw changes as of every delta."""

from __future__ import annotations

import itertools
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from podd_cdc.topic_reader import partition_records
from replica_store.replica_reader import differences
from tests.agent.conftest import AgentProcess
from tests.origin.cdc_fixtures import CdcReplica, cdc_agent_fixture, cdc_schema, replica_for
from tests.origin.cdc_model import expected_replica, transactions_whole
from tools.cdc_write.dataworks_writer import DataWorksWriter
from tools.cdc_write.produce import Landed
from tools.cdc_write.qlik_writer import QlikWriter, Written
from tools.cdc_write.source import SourceDatabase, SourceTable
from tools.cdc_write.tables import dataworks_marketing, qlik_every_type, qlik_marketing

pytestmark = pytest.mark.slow

cdc_agent = cdc_agent_fixture(qlik=15, dataworks=3)
QLIK_TABLES = (*qlik_marketing(), qlik_every_type())


def qlik_topic(
    db: SourceDatabase,
    transactions: int,
    *,
    duplicates: float = 0.0,
    encoding: str = "json",
    envelope: bool = True,
    full_load: int = 10,
    partitions: int = 4,
) -> list[Written]:
    writer = QlikWriter(
        db.tables,
        encoding=encoding,  # type: ignore[arg-type]
        envelope=envelope,
        duplicate_ratio=duplicates,
        seed=db.seed,
        partitions=partitions,
    )
    changes = (db.transaction(db.rng.randint(1, 8)) for _ in range(transactions))
    return [
        *writer.metadata(),
        *writer.refresh(db.full_load(full_load)),
        *writer.transactions(changes),
    ]


def check(
    replica: CdcReplica, tables: tuple[SourceTable, ...], landed: list[Landed], dsn: str
) -> int:
    cuts = replica.cuts()
    assert [c.delta for c in cuts] == list(range(len(cuts)))
    assert all(a.date < b.date for a, b in itertools.pairwise(cuts))
    if replica.fmt == "qlik":
        assert transactions_whole(landed, cuts, replica.topic) == []
    model = expected_replica(replica.schema, tables, replica.fmt, landed, cuts, replica.topic)
    assert differences(dsn, model, as_of=range(len(cuts))) == []
    return len(cuts)


@pytest.mark.parametrize("columnar", [False, True], ids=["by-record", "columnar"])
def test_qlik_json_with_duplicates_over_four_snappy_partitions(
    cdc_agent: AgentProcess, replica_dsn: str, tmp_path: Path, columnar: bool
) -> None:
    """Also with the cutter on arrays (`--columnar`), fed from read batches."""
    replica = replica_for(cdc_agent, "qlik", tmp_path, columnar=columnar)
    db = SourceDatabase(QLIK_TABLES, seed=3)
    landed = replica.write(qlik_topic(db, 250, duplicates=0.05), compression="snappy")
    done = replica.run("--max-delta-rows", "300", "--until-idle", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "delta(s) applied" in done.stdout
    assert check(replica, QLIK_TABLES, landed, replica_dsn) >= 3
    if columnar:  # fetches of the size a batch pays off for are read on arrays
        assert _batched(done.stdout) > 0
    # The final state is the source's: every row it holds, and only those.
    for table in QLIK_TABLES:
        assert len(db.rows[table.name]) > 0


@pytest.mark.parametrize(
    ("encoding", "compression"), [("avro", "lz4"), ("json", "zstd"), ("json", "gzip")]
)
def test_qlik_avro_and_json_on_every_codec(
    cdc_agent: AgentProcess, replica_dsn: str, tmp_path: Path, encoding: str, compression: str
) -> None:
    replica = replica_for(cdc_agent, "qlik", tmp_path)
    db = SourceDatabase(QLIK_TABLES, seed=4)
    landed = replica.write(qlik_topic(db, 80, encoding=encoding), compression=compression)  # type: ignore[arg-type]
    done = replica.run("--max-delta-rows", "150", "--until-idle", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert check(replica, QLIK_TABLES, landed, replica_dsn) >= 2


def test_qlik_json_without_envelope_one_topic_per_table(
    cdc_agent: AgentProcess, replica_dsn: str, tmp_path: Path
) -> None:
    replica = replica_for(cdc_agent, "qlik", tmp_path)
    db = SourceDatabase(QLIK_TABLES, seed=5)
    messages = qlik_topic(db, 60, envelope=False, partitions=2)
    metadata = {QLIK_TABLES[i].name: m for i, m in enumerate(messages[: len(QLIK_TABLES)])}
    landed = []
    for table in QLIK_TABLES:  # as Qlik's per-table topics: metadata, then the table's data
        own = [m for m in messages[len(QLIK_TABLES) :] if m.change and m.change.table == table.name]
        landed += replica.write(
            [metadata[table.name], *own], partitions=2, topic=f"{replica.topic}-{table.name}"
        )
    topics = [f"{replica.topic}-{t.name}" for t in QLIK_TABLES]
    mapping = [
        flag
        for t in QLIK_TABLES
        for flag in ("--topic-table", f"{replica.topic}-{t.name}={t.name}")
    ]
    done = replica.run("--until-idle", "2", *mapping, topics=topics)
    assert done.returncode == 0, done.stderr[-3000:]
    assert check(replica, QLIK_TABLES, landed, replica_dsn) >= 1


def test_dataworks_pairs_key_changes_late_changes_and_a_table_without_key(
    cdc_agent: AgentProcess, replica_dsn: str, tmp_path: Path
) -> None:
    replica = replica_for(cdc_agent, "dataworks", tmp_path)
    tables = dataworks_marketing()
    db = SourceDatabase(tables, seed=6, key_change_ratio=0.2)
    writer = DataWorksWriter(
        tables, heartbeat_every=30, late_ratio=0.1, one_record_ratio=0.3, marker_ratio=0.2, seed=6
    )
    changes = (db.transaction(db.rng.randint(1, 8)) for _ in range(250))
    landed = replica.write(writer.transactions(changes), compression="gzip")
    done = replica.run("--max-delta-rows", "250", "--until-idle", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert check(replica, tables, landed, replica_dsn) >= 3


def test_schema_command_prints_the_replicas_ddl(cdc_agent: AgentProcess, tmp_path: Path) -> None:
    for fmt, tables in (("qlik", QLIK_TABLES), ("dataworks", dataworks_marketing())):
        replica = replica_for(cdc_agent, fmt, tmp_path / fmt)
        db = SourceDatabase(tables, seed=7)
        if fmt == "qlik":
            replica.write(qlik_topic(db, 5))
        else:
            replica.write(
                DataWorksWriter(tables).transactions([db.transaction(9) for _ in range(9)])
            )
        command = replica.command()
        command[command.index("run")] = "schema"
        kept = [
            a
            for a in command
            if a not in ("--schema", str(cdc_agent.data_dir / f"{replica.datamart}.sql"))
        ]
        done = subprocess.run(
            _schema_flags(kept), capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        from protocol.ddl import parse_schema  # noqa: PLC0415

        derived = parse_schema(done.stdout, replica.datamart)
        want = cdc_schema(fmt, replica.datamart)
        assert {t.name: t for t in derived} == {t.name: t for t in want}


def _schema_flags(command: list[str]) -> list[str]:
    """`cdc schema` takes no run-only flags: keep format, topic, datamart, broker, settle."""
    kept, skip = [], False
    run_only = {
        "--state-dir",
        "--answer-timeout-seconds",
        "--topic-delta-in",
        "--topic-delta-in-rs",
        "--topic-delta-rq",
        "--topic-delta-rs",
    }
    for item in command:
        if skip:
            skip = False
            continue
        if item in run_only:
            skip = True
            continue
        if item not in ("--columnar", "--no-columnar"):  # run-only, without a value
            kept.append(item)
    return kept


def _killed_after_cuts(replica: CdcReplica, deltas: tuple[int, ...], *flags: str) -> list[str]:
    """The origin run with `flags` and killed (SIGKILL) right after each of `deltas`' cuts was
    recorded, a run each; the lines they logged."""
    logged: list[str] = []
    for kill_at in deltas:
        process = subprocess.Popen(
            replica.command(*flags), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert process.stderr is not None
        deadline = time.monotonic() + 180
        for line in process.stderr:
            logged.append(line)
            if "delta cut" in line and f"deltaNum={kill_at} " in line:
                break
            assert time.monotonic() < deadline, "no cut logged in time"
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert replica.cuts()[-1].delta == kill_at
    return logged


@pytest.mark.parametrize("columnar", [False, True], ids=["by-record", "columnar"])
def test_kill_9_of_the_origin_mid_run_loses_and_doubles_nothing(
    cdc_agent: AgentProcess, replica_dsn: str, tmp_path: Path, columnar: bool
) -> None:
    replica = replica_for(cdc_agent, "qlik", tmp_path, columnar=columnar)
    db = SourceDatabase(QLIK_TABLES, seed=8)
    landed = replica.write(qlik_topic(db, 500, duplicates=0.02))
    logged = _killed_after_cuts(replica, (2, 5), "--max-delta-rows", "60")
    done = replica.run("--max-delta-rows", "60", "--until-idle", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    # The delta cut just before a kill was sent again from exactly its recorded offsets.
    assert any("delta rebuilt from the cut log" in line for line in [*logged, done.stderr])
    assert check(replica, QLIK_TABLES, landed, replica_dsn) >= 8


def test_kill_9_of_the_dataworks_origin_on_arrays_loses_and_doubles_nothing(
    cdc_agent: AgentProcess, replica_dsn: str, tmp_path: Path
) -> None:
    """DataWorks held and cut on arrays (fetches large enough to be read as batches), killed
    right after a cut was recorded, twice: the run after each rebuilds that delta from its
    recorded offsets, and the replica ends as the source."""
    replica = replica_for(cdc_agent, "dataworks", tmp_path)
    tables = dataworks_marketing()
    db = SourceDatabase(tables, seed=9, key_change_ratio=0.1)
    writer = DataWorksWriter(
        tables, heartbeat_every=40, late_ratio=0.05, one_record_ratio=0.3, marker_ratio=0.2, seed=9
    )
    landed = replica.write(
        writer.transactions(db.transaction(db.rng.randint(1, 8)) for _ in range(600))
    )
    logged = _killed_after_cuts(replica, (1, 3), "--max-delta-rows", "400")
    done = replica.run("--max-delta-rows", "400", "--until-idle", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert any("delta rebuilt from the cut log" in line for line in [*logged, done.stderr])
    held = re.search(r"([\d,]+) message\(s\) held from read batches", done.stdout)
    assert held is not None, done.stdout
    assert int(held.group(1).replace(",", "")) > 0  # the last run read batches on arrays
    assert check(replica, tables, landed, replica_dsn) >= 5


@pytest.mark.parametrize("columnar", [False, True], ids=["by-record", "columnar"])
def test_a_backlog_is_held_no_further_than_the_next_delta(
    cdc_agent: AgentProcess, replica_dsn: str, tmp_path: Path, columnar: bool
) -> None:
    """A backlog many deltas long, of tables already known: the origin holds about the next
    delta's changes, not the backlog (it reads no further while a cut delta waits, and once
    a delta's worth is held it reads only the partitions that hold the bound back)."""
    replica = replica_for(cdc_agent, "qlik", tmp_path, columnar=columnar)
    db = SourceDatabase(QLIK_TABLES, seed=12)
    writer = QlikWriter(QLIK_TABLES, seed=12)
    first = replica.write([*writer.metadata(), *writer.transactions([db.transaction(3)])])
    assert replica.run("--until-idle", "1").returncode == 0
    backlog = (db.transaction(db.rng.randint(1, 8)) for _ in range(4000))
    landed = first + replica.write(writer.transactions(backlog))
    done = replica.run("--max-delta-rows", "2000", "--until-idle", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    found = re.search(r"([\d,]+) changes, .*at most ([\d,]+) changes held", done.stdout)
    assert found is not None, done.stdout[-2000:]
    changes, held = (int(g.replace(",", "")) for g in found.groups())
    assert changes > 15_000
    # The next delta's worth, and up to a batch of each partition on either side of it:
    # the four partitions are read unevenly until that much is held.
    assert held <= 2000 + 2 * 4 * partition_records(2000, on_arrays=columnar), (
        f"{held:,} of {changes:,} held"
    )
    assert check(replica, QLIK_TABLES, landed, replica_dsn) >= 9
    if columnar:  # a backlog's fetches are full: most of it is read on arrays
        assert _batched(done.stdout) > len(landed) // 2


def test_a_replica_ahead_of_the_cut_log_is_refused_naming_both(
    cdc_agent: AgentProcess, tmp_path: Path
) -> None:
    replica = replica_for(cdc_agent, "qlik", tmp_path)
    db = SourceDatabase(QLIK_TABLES, seed=9)
    writer = QlikWriter(QLIK_TABLES)
    replica.write([*writer.metadata(), *writer.transactions(db.transaction(3) for _ in range(40))])
    assert replica.run("--max-delta-rows", "30", "--until-idle", "1").returncode == 0
    older = tmp_path / "older-state"
    shutil.copytree(replica.state_dir, older)
    replica.write(writer.transactions(db.transaction(3) for _ in range(40)))
    assert replica.run("--max-delta-rows", "30", "--until-idle", "1").returncode == 0
    last = replica.cuts()[-1].delta
    replica.state_dir = older
    kept = replica.cuts()[-1].delta
    refused = replica.run("--until-idle", "1")
    assert refused.returncode == 2
    assert f"expects delta {last + 1}" in refused.stderr
    assert f"ends at delta {kept}" in refused.stderr


def test_kill_9_of_the_agent_mid_delta_loses_and_doubles_nothing(
    cdc_agent: AgentProcess, replica_dsn: str, tmp_path: Path
) -> None:
    """The agent dies while a delta is in flight and comes back on the same data directory;
    the CDC origin, waiting for its answer, asks the state again and goes on."""
    replica = replica_for(cdc_agent, "qlik", tmp_path)
    db = SourceDatabase(QLIK_TABLES, seed=10)
    landed = replica.write(qlik_topic(db, 400))
    origin = subprocess.Popen(
        replica.command(
            "--max-delta-rows", "150", "--until-idle", "3", "--answer-timeout-seconds", "8"
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert origin.stdout is not None
    for line in origin.stdout:  # the first delta applied: the agent is warm and busy
        if line.startswith("delta 1:"):
            break
    cdc_agent.kill()
    cdc_agent.start()
    _, err = origin.communicate(timeout=300)
    assert origin.returncode == 0, err[-3000:]
    assert check(replica, QLIK_TABLES, landed, replica_dsn) >= 5


@pytest.mark.parametrize("columnar", [False, True], ids=["by-record", "columnar"])
def test_a_transaction_larger_than_the_delta_bound_is_never_split(
    cdc_agent: AgentProcess, replica_dsn: str, tmp_path: Path, columnar: bool
) -> None:
    replica = replica_for(cdc_agent, "qlik", tmp_path, columnar=columnar)
    db = SourceDatabase(QLIK_TABLES, seed=11)
    writer = QlikWriter(QLIK_TABLES, seed=11)
    big = [db.transaction(db.rng.randint(5, 12)) for _ in range(30)]
    landed = replica.write([*writer.metadata(), *writer.transactions(big)])
    done = replica.run("--max-delta-rows", "3", "--until-idle", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    # The bound is reached by any one transaction: each delta is exactly one, never a part.
    assert check(replica, QLIK_TABLES, landed, replica_dsn) == len(big)
    assert [c.changes for c in replica.cuts()] == [len(t.changes) for t in big]


def _batched(printed: str) -> int:
    """How many messages a `--columnar` run says it held from read batches."""
    found = re.search(r"([\d,]+) message\(s\) held from read batches", printed)
    assert found is not None, printed[-2000:]
    return int(found[1].replace(",", ""))
