"""Agent settings: every flag of `replica-agent run` is also a `PODD_*` environment variable.

The loader's settings (replica DSN, data directory, Spark) and the Kafka connection settings
(broker, topics, SASL/SSL; shared with `podd-origin`) are inherited, so one set of variables
configures all of them. Lists (`PODD_DATAMART`, `PODD_SCHEMA`) take comma-separated
values: `PODD_DATAMART=marketing,sales PODD_SCHEMA=/etc/podd/m.sql,/etc/podd/s.sql`.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from podd_kafka.settings import KafkaSettings
from replica_agent.admission import TransferLimits
from replica_agent.logs import LogFormat
from spark_loader.settings import LoaderSettings


def default_group_id(datamarts: list[str]) -> str:
    """`podd-replica-<datamarts, sorted, joined by +>`; a digest of them when that is long."""
    joined = "+".join(sorted(datamarts)) or "none"
    if len(joined) > 120:
        joined = hashlib.sha256(joined.encode()).hexdigest()[:24]
    return f"podd-replica-{joined}"


class AgentSettings(LoaderSettings, KafkaSettings):
    model_config = SettingsConfigDict(
        env_prefix="PODD_", extra="ignore", populate_by_name=True, hide_input_in_errors=True
    )

    #: Datamarts served, each with its logical schema (Prostore DDL), paired in order; with
    #: no schema file at all, the schemas stored in the replica's catalog.
    datamart: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: (see `datamart`: `PODD_SCHEMA=a.sql,b.sql`)
    schema_file: Annotated[list[Path], NoDecode] = Field(
        default_factory=list, validation_alias="PODD_SCHEMA"
    )
    #: The consumer group, also the Faust app id. Unset: one group per set of datamarts
    #: (`podd-replica-<datamarts>`), so agents of different datamarts on one Kafka never
    #: share a group and split each other's partitions.
    group_id: str = ""
    #: The consumer group session's timeout: an agent gone this long loses its partitions.
    session_timeout_seconds: float = Field(default=10.0, gt=0)
    #: A transfer still incomplete this long after its first chunk is answered INCOMPLETE_DELTA.
    incomplete_timeout_seconds: float = Field(default=300.0, gt=0)
    #: The Prometheus endpoint is http://metrics_host:metrics_port/metrics.
    metrics_host: str = "127.0.0.1"
    #: (see `metrics_host`; 0: a free port)
    metrics_port: int = Field(default=9464, ge=0, le=65535)
    #: Bounds on what messages may claim (see docs/contracts/PROTOCOL.md, "Bounds").
    max_chunk_number: int = Field(default=1_000_000, ge=1)
    #: Transfers receiving chunks at once; beyond, the oldest incomplete one is evicted
    #: (INCOMPLETE_DELTA).
    max_open_transfers: int = Field(default=8, ge=1)
    #: Chunk bytes staged at once, in all open transfers; beyond, a transfer is evicted.
    max_staged_mib: float = Field(default=8192, gt=0)
    #: The most gaps an INCOMPLETE_DELTA answer or a `delta.rs` names.
    max_missing_items: int = Field(default=100, ge=1)
    #: The longest requestId, datamart or subscription a message may carry.
    max_name_chars: int = Field(default=256, ge=16)
    #: Finished requestIds remembered (their later chunks are dropped), in memory and on
    #: disk alike (the outbox keeps as many sent answers), so a restart changes nothing.
    max_finished: int = Field(default=10_000, ge=1)
    #: Transfers of deltas already applied (replays: nothing staged, no slot or budget
    #: taken) held at once, in all, and the chunk numbers they may hold; beyond either,
    #: the oldest replay is dropped unanswered.
    max_replays: int = Field(default=16, ge=1)
    #: (see `max_replays`)
    max_replay_chunks: int = Field(default=100_000, ge=1)
    #: `delta.rq` answered per datamart and second at most; the rest are dropped, counted.
    max_state_answers_per_second: float = Field(default=100.0, gt=0)
    #: A delta dated more than this many hours ahead of the agent's clock is refused
    #: (BAD_CHUNK); 0: no limit.
    max_date_skew_hours: float = Field(default=24.0, ge=0)
    #: `/health` says 503 while a load has run longer than this (a hung job, a lock wait).
    load_stall_seconds: float = Field(default=1800.0, gt=0)
    #: Stage a stream as soon as it is complete, while later streams of its delta arrive
    #: (`spark_loader.prestage`); off: every table is staged after the last chunk.
    prestage: bool = True
    #: Streams decoding to fewer KiB are left to the load (a prestage's lock, sequence
    #: check and record cost more than staging them there).
    prestage_min_kib: float = Field(default=256.0, ge=0)
    #: A stream still arriving is prestaged in pieces of about this many KiB decoded (its
    #: chunks so far, applied in the delta's open transaction: `replica_store.pieces`), so
    #: a delta whose streams are interleaved is mostly applied by its last chunk; 0: only
    #: complete streams are prestaged.
    prestage_piece_kib: float = Field(default=1024.0, ge=0)
    #: While nothing is being prestaged, a stream still arriving is offered as soon as its
    #: chunks decode to this many KiB (at most `prestage_piece_kib`): a prestager with room
    #: takes what there is, so little of an interleaved delta is left for after its last
    #: chunk; a busy one takes pieces of `prestage_piece_kib`. 0: pieces only of that size.
    prestage_eager_kib: float = Field(default=128.0, ge=0)
    #: Messages that fail unexpectedly are copied here (raw key and value) when set.
    topic_dead_letter: str | None = None
    #: Testing only: exit between this delta's commit and its answer (the crash tests).
    fault_crash_after_commit_of: int | None = None
    #: `json`, `console`, or `auto` (JSON unless stderr is a terminal).
    log_format: LogFormat = "auto"
    #: The least level logged: `DEBUG`, `INFO`, `WARNING`, `ERROR`.
    log_level: str = "INFO"

    @field_validator("datamart", "schema_file", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("synchronous_commit")
    @classmethod
    def _durable_answers(cls, value: bool) -> bool:
        """The agent answers OK after the commit: the commit must be durable first."""
        if not value:
            raise ValueError(
                "synchronous_commit cannot be off for the agent: it answers OK once a delta "
                "is committed, and a PostgreSQL crash could then lose a delta the origin was "
                "told is applied (only podd-restore, which tells nobody, may turn it off)"
            )
        return value

    @model_validator(mode="after")
    def _paired(self) -> AgentSettings:
        # No --schema at all: every datamart's schema is the one the replica's catalog holds
        # (a replica created by `podd-restore`, or by an earlier run of the agent).
        if self.schema_file and len(self.datamart) != len(self.schema_file):
            raise ValueError(
                f"{len(self.datamart)} datamart(s) and {len(self.schema_file)} schema file(s): "
                "give one --schema per --datamart"
            )
        if not self.group_id:
            self.group_id = default_group_id(self.datamart)
        return self

    def transfer_limits(self) -> TransferLimits:
        mib = 2**20
        return TransferLimits(
            max_chunk_number=self.max_chunk_number,
            max_open_transfers=self.max_open_transfers,
            max_staged_bytes=int(self.max_staged_mib * mib),
            max_missing_items=self.max_missing_items,
            max_name_chars=self.max_name_chars,
            max_finished=self.max_finished,
            max_replays=self.max_replays,
            max_replay_chunks=self.max_replay_chunks,
            max_date_skew=timedelta(hours=self.max_date_skew_hours)
            if self.max_date_skew_hours
            else None,
            body=self.body_limits(),
        )
