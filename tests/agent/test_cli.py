"""`replica-agent` as an operator meets it: bad settings, secrets, `status`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from protocol.schema import LogicalSchema
from replica_agent.chunk_spool import ChunkSpool
from replica_agent.cli import status_report
from replica_agent.settings import AgentSettings
from replica_agent.transfers import StreamState
from tests.agent.conftest import renamed
from tests.agent.spool_writes import transfer_of, write_chunk, write_stream
from tests.loader.staging_helpers import delta_date


def _agent(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "replica_agent.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_datamarts_and_schemas_that_do_not_pair_are_refused_clearly() -> None:
    done = _agent("run", "--datamart", "a", "--datamart", "b", "--schema", "a.sql")
    assert done.returncode == 2
    assert "give one --schema per --datamart" in done.stderr


def test_an_unreachable_replica_is_reported_without_its_password(
    tmp_path: Path, broker: str
) -> None:
    schema = tmp_path / "m.sql"
    schema.write_text((Path(__file__).parents[2] / "examples" / "marketing.sql").read_text())
    done = _agent(
        "run",
        "--datamart",
        "marketing",
        "--schema",
        str(schema),
        "--data-dir",
        str(tmp_path),
        "--broker",
        f"kafka://{broker}",
        "--log-format",
        "json",
        env={"PODD_REPLICA_DSN": "postgresql://podd:s3cret-pw@127.0.0.1:1/replica"},
    )
    assert done.returncode == 2
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert any(line["event"] == "the replica database cannot be used" for line in lines)
    assert "s3cret-pw" not in done.stderr + done.stdout


def test_status_reports_applied_deltas_transfers_in_progress_and_the_last_error(
    tmp_path: Path, replica_dsn: str, marketing: LogicalSchema
) -> None:
    from replica_store.store import ReplicaStore  # noqa: PLC0415

    schema = renamed(marketing)
    ReplicaStore(replica_dsn).ensure(schema)
    settings = AgentSettings(data_dir=tmp_path, replica_dsn=replica_dsn)
    spool = ChunkSpool(settings.staging_path)
    transfer = transfer_of("rq-7", schema.datamart, 0, delta_date(0), "SELECT 1", 3)
    spool.open_transfer(transfer.framing)
    write_chunk(spool, "rq-7", 1, 1, b"")
    write_stream(spool, "rq-7", 1, StreamState("sales", {1}, None))
    (tmp_path / "agent-status.json").write_text(
        json.dumps(
            {
                schema.datamart: {
                    "loading": None,
                    "last_error": {"code": "BAD_CHUNK", "message": "m", "requestId": "x"},
                },
                "_health": {
                    "worker_alive": False,
                    "last_progress": 0,
                    "queued_loads": 2,
                    "open_transfers": 1,
                    "staged_bytes": 2**20,
                },
            }
        )
    )
    report = status_report(settings, [schema.datamart])[schema.datamart]
    assert report["applied"] is None
    assert report["expectedDeltaNum"] == 0
    (progress,) = report["inProgress"]
    assert progress["missing"] == [
        "stream 1 last chunk",
        "stream 2 last chunk",
        "stream 3 last chunk",
    ]
    assert report["lastError"]["code"] == "BAD_CHUNK"
    done = _agent(
        "status",
        "--data-dir",
        str(tmp_path),
        "--replica",
        replica_dsn,
        "--datamart",
        schema.datamart,
    )
    assert done.returncode == 0, done.stderr
    assert f"{schema.datamart}: no delta applied; expects delta 0" in done.stdout
    assert "missing stream 1 last chunk" in done.stdout
    assert "last error: BAD_CHUNK: m" in done.stdout
    assert report["agent"]["worker_alive"] is False
    assert "agent: load worker NOT RUNNING" in done.stdout
    assert "2 queued loads, 1 open transfers, 1.0 MiB staged" in done.stdout


def test_invalid_settings_never_print_a_secret_value() -> None:
    secret = "s3cret-sasl-pw"
    done = _agent(
        "run",
        "--datamart",
        "marketing",
        "--schema",
        "x.sql",
        env={
            "PODD_SASL_PASSWORD": secret,
            "PODD_SECURITY_PROTOCOL": f"BOGUS-{secret}",
            "PODD_REPLICA_DSN": f"postgresql://u:{secret}@h/db",
            "PODD_METRICS_PORT": secret,
        },
    )
    assert done.returncode == 2
    assert "invalid settings" in done.stderr
    assert secret not in done.stderr + done.stdout


def test_the_consumer_group_is_one_per_set_of_datamarts_unless_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PODD_GROUP_ID", raising=False)
    assert AgentSettings(datamart=["b", "a"]).group_id == "podd-replica-a+b"
    assert AgentSettings(datamart=["a"]).group_id != AgentSettings(datamart=["b"]).group_id
    many = AgentSettings(datamart=[f"datamart_{i}" for i in range(40)]).group_id
    assert many.startswith("podd-replica-")
    assert len(many) < 64
    assert AgentSettings(datamart=["a"], group_id="shared").group_id == "shared"


def test_synchronous_commit_off_is_refused_for_the_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off, the agent answered OK for a commit a PostgreSQL crash could still lose."""
    monkeypatch.setenv("PODD_SYNCHRONOUS_COMMIT", "false")
    with pytest.raises(ValidationError, match="synchronous_commit cannot be off for the agent"):
        AgentSettings()
