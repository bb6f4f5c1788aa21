"""docs/contracts/CDC.md "Bad input" and "Schema", each on the real broker: a valid topic with one
hostile message in it. `cdc run` stops naming topic, partition and offset (exit 3), with every delta
before it applied and nothing after it; with a dead-letter topic it goes on instead."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from aiokafka import AIOKafkaConsumer

from replica_store.replica_reader import differences
from tests.agent.conftest import AgentProcess
from tests.origin.cdc_fixtures import CdcReplica, cdc_agent_fixture, replica_for
from tests.origin.cdc_model import expected_replica
from tools.cdc_write.dataworks_writer import DataWorksWriter
from tools.cdc_write.produce import Landed
from tools.cdc_write.qlik_writer import QlikWriter, Written
from tools.cdc_write.source import SourceColumn, SourceDatabase, SourceTable
from tools.cdc_write.tables import qlik_every_type, qlik_marketing

pytestmark = pytest.mark.slow

cdc_agent = cdc_agent_fixture(qlik=22, dataworks=3)
QLIK_TABLES = (*qlik_marketing(), qlik_every_type())


def _mutated(message: Written, change: Callable[[dict], None]) -> Written:  # type: ignore[type-arg]
    body = json.loads(message.value)
    change(body)
    return Written(0, message.key, json.dumps(body).encode())


def _first_data(messages: list[Written], table: str) -> Written:
    return next(
        m for m in messages if m.change is not None and m.change.table == table and m.op == "INSERT"
    )


def _uncaptured(m: dict) -> None:  # type: ignore[type-arg]
    m["message"]["headers"]["columnMask"] = "01"


def _uint8(m: dict) -> None:  # type: ignore[type-arg]
    m["message"]["data"]["U8"] = str(2**63)


def _no_key(m: dict) -> None:  # type: ignore[type-arg]
    del m["message"]["data"]["ID"]


def _huge(m: dict) -> None:  # type: ignore[type-arg]
    m["message"]["data"]["ADDRESS"] = "x" * 10_000_000


def _unknown_schema(m: dict) -> None:  # type: ignore[type-arg]
    m["messageSchemaId"] = "never-described"


def _one(message: Written) -> list[Written]:
    return [message]


#: case → (an extra flag, the hostile messages given the valid prefix (the last one is the
#: one the stop must name), what the error must say)
QLIK_CASES: dict[str, tuple[str, Callable[[list[Written]], list[Written]], str]] = {
    "not JSON": ("", lambda ms: _one(Written(0, None, b"\x00\xff not json")), "neither JSON"),
    "truncated Avro": (
        "",
        lambda ms: _one(
            Written(0, None, QlikWriter(QLIK_TABLES, encoding="avro").metadata()[0].value[:40])
        ),
        "not a Qlik Avro envelope",
    ),
    "no metadata": (
        "--metadata-wait-seconds=2",
        lambda ms: _one(_mutated(_first_data(ms, "sales"), _unknown_schema)),
        "did not arrive within 2 s",
    ),
    "uncaptured column": (
        "",
        lambda ms: _one(_mutated(_first_data(ms, "sales"), _uncaptured)),
        "was not captured (columnMask)",
    ),
    "UINT8 above 2^63-1": (
        "",
        lambda ms: _one(_mutated(_first_data(ms, "all_types"), _uint8)),
        "column u8: 9223372036854775808 is outside",
    ),
    "key column missing": (
        "",
        lambda ms: _one(_mutated(_first_data(ms, "sales"), _no_key)),
        "has no column id",
    ),
    "a 10 MB string": (
        "",
        lambda ms: _one(_mutated(_first_data(ms, "stores"), _huge)),
        "a value of 10,000,000 bytes",
    ),
    "table without a key": (
        "",
        lambda ms: _one(
            Written(
                0,
                None,
                QlikWriter([SourceTable("events", (SourceColumn("AT", "DATETIME"),), ())])
                .metadata()[0]
                .value,
            )
        ),
        "table EVENTS has no primary key",
    ),
    "ALTER of a replicated table": ("", lambda ms: _altered_sales(), "table sales changed"),
}


def _altered_sales() -> list[Written]:
    """Version 2 of `sales` (a column more), then a data message written with it."""
    sales = next(t for t in QLIK_TABLES if t.name == "sales")
    wider = SourceTable("sales", (*sales.columns, SourceColumn("CHANNEL", "STRING", 10)), sales.key)
    altered = QlikWriter([wider], partitions=1)
    data = _mutated(
        altered.refresh(SourceDatabase((wider,)).full_load(1))[0],
        lambda m: m.update(messageSchemaId=altered.schema_id(wider, 2)),
    )
    return [altered.metadata(version=2)[0], data]


def _qlik_prefix(db: SourceDatabase, writer: QlikWriter, count: int) -> list[Written]:
    return list(writer.transactions(db.transaction(db.rng.randint(1, 5)) for _ in range(count)))


def _stopped_cleanly(replica: CdcReplica, landed: list[Landed], bad_offset: int, dsn: str) -> None:
    cuts = replica.cuts()
    assert cuts, "no delta before the bad message was applied"
    assert all(s.end <= bad_offset for c in cuts for s in c.spans.values())
    before = [m for m in landed if m.offset < bad_offset]
    model = expected_replica(
        replica.schema, replica.tables, replica.fmt, before, cuts, replica.topic
    )
    assert differences(dsn, model, as_of=range(len(cuts))) == []


@pytest.mark.parametrize("columnar", [False, True], ids=["by-record", "columnar"])
@pytest.mark.parametrize("case", list(QLIK_CASES))
def test_qlik_bad_input_stops_naming_where(
    cdc_agent: AgentProcess, replica_dsn: str, tmp_path: Path, case: str, columnar: bool
) -> None:
    """Also with the cutter on arrays (`--columnar`): the batch is not sure of the bad
    message, so the exact decoder reads it and names it."""
    flag, make, reason = QLIK_CASES[case]
    replica = replica_for(cdc_agent, "qlik", tmp_path, columnar=columnar)
    db = SourceDatabase(QLIK_TABLES, seed=21)
    writer = QlikWriter(QLIK_TABLES, partitions=1)
    prefix = [*writer.metadata(), *_qlik_prefix(db, writer, 60)]
    bad_parts = make(prefix)
    suffix = _qlik_prefix(db, writer, 20)
    landed = replica.write([*prefix, *bad_parts, *suffix], partitions=1)
    bad_offset = landed[len(prefix) + len(bad_parts) - 1].offset
    extra = [flag] if flag else []
    stopped = replica.run("--max-delta-rows", "40", *extra)
    assert stopped.returncode == 3, stopped.stderr[-3000:]
    assert f"topic {replica.topic} partition 0 offset {bad_offset}" in stopped.stderr
    assert reason in stopped.stderr
    _stopped_cleanly(replica, landed, bad_offset, replica_dsn)
    if case.startswith("ALTER") or case == "table without a key":
        return  # a schema stop never goes to the dead-letter topic
    dead = f"{replica.topic}-dead"
    resumed = replica.run("--until-idle", "2", "--dead-letter-topic", dead, *extra)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "1 message(s) to" in resumed.stdout
    whole = [m for m in landed if m.offset != bad_offset]
    cuts = replica.cuts()
    model = expected_replica(replica.schema, QLIK_TABLES, "qlik", whole, cuts, replica.topic)
    assert differences(replica_dsn, model, as_of=range(len(cuts))) == []
    headers = asyncio.run(_dead_letters(replica, dead))
    assert headers == [f"{replica.topic}:0:{bad_offset}".encode()]


async def _dead_letters(replica: CdcReplica, topic: str) -> list[bytes]:
    reader = AIOKafkaConsumer(
        topic, bootstrap_servers=[replica.agent.broker], group_id=None, auto_offset_reset="earliest"
    )
    await reader.start()
    try:
        found = await reader.getmany(timeout_ms=5000)
        return [dict(m.headers)["podd-source"] for ms in found.values() for m in ms]
    finally:
        await reader.stop()


DW_CASES = {
    "sequenceId not a number": (
        lambda m: m["payload"].update(sequenceId="12x"),
        "sequenceId '12x' is not a whole number",
    ),
    "ALTER of a replicated table": (None, "ALTER of replicated table sales"),
}


@pytest.mark.parametrize("case", list(DW_CASES))
def test_dataworks_bad_input_stops_naming_where(
    cdc_agent: AgentProcess, replica_dsn: str, tmp_path: Path, case: str
) -> None:
    change, reason = DW_CASES[case]
    replica = replica_for(cdc_agent, "dataworks", tmp_path)
    db = SourceDatabase(replica.tables, seed=22)
    writer = DataWorksWriter(replica.tables, partitions=1, heartbeat_every=10)
    prefix = list(writer.transactions(db.transaction(4) for _ in range(40)))
    if change is None:
        bad = writer.ddl("sales", "ALTER TABLE sales ADD channel varchar(10)", 1_800_000_000_000)
    else:
        sample = next(m for m in prefix if m.change is not None)
        body = json.loads(sample.value)
        change(body)
        bad = Written(0, None, json.dumps(body).encode())
    suffix = list(writer.transactions(db.transaction(4) for _ in range(20)))
    landed = replica.write([*prefix, bad, *suffix], partitions=1)
    bad_offset = landed[len(prefix)].offset
    stopped = replica.run("--max-delta-rows", "40")
    assert stopped.returncode == 3, stopped.stderr[-3000:]
    assert f"topic {replica.topic} partition 0 offset {bad_offset}" in stopped.stderr
    assert reason in stopped.stderr
    _stopped_cleanly(replica, landed, bad_offset, replica_dsn)


@pytest.mark.parametrize("columnar", [False, True], ids=["by-record", "columnar"])
def test_a_transaction_past_the_bound_stops_with_memory_bounded(
    cdc_agent: AgentProcess, tmp_path: Path, columnar: bool
) -> None:
    """CDC.md's "transaction of 2 million changes", scaled: the bound is a setting
    (`--max-pending-changes`), so 30,000 changes against a bound of 2,000 show the same
    path; the origin's memory stays flat while it holds the bound and stops."""
    replica = replica_for(cdc_agent, "qlik", tmp_path, columnar=columnar)
    db = SourceDatabase(QLIK_TABLES, seed=23)
    writer = QlikWriter(QLIK_TABLES, partitions=1)
    small = _qlik_prefix(db, writer, 30)
    huge = list(writer.transactions([db.transaction(30_000)]))
    landed = replica.write([*writer.metadata(), *small, *huge], partitions=1)
    process = psutil.Popen(
        replica.command("--max-pending-changes", "2000"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = 0
    while process.poll() is None:
        try:
            peak = max(peak, process.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    _, err = process.communicate()
    assert process.returncode == 3, err[-3000:]
    assert "none can be cut: a transaction larger than 2,000 changes" in err
    first_huge = landed[len(writer.tables) + len(small)].offset
    assert f"partition 0 offset {first_huge}" in err
    assert replica.cuts(), "the transactions before it were applied"
    assert peak < 400 << 20, f"the origin used {peak >> 20} MiB"
