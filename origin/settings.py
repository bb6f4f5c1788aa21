"""`podd-origin` settings: flags, or `PODD_*` variables shared with the agent where they mean
the same (broker, topics, SASL/SSL). The datamart and its schema are the origin's own
(`PODD_ORIGIN_DATAMART`, `PODD_ORIGIN_SCHEMA`: one datamart, where the agent's
`PODD_DATAMART` is a list); the old names are still read for one release.

`OriginSessionSettings` is what any origin needs to drive a replica over the protocol (the
CDC origin too); `OriginSettings` adds the reference origin's delta source."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from origin.errors import OriginError
from origin.session import SessionOptions
from origin.sources import START_DATE
from podd_kafka.settings import KafkaSettings
from podd_runtime.renamed_settings import WarnsOfOldNames, renamed
from protocol.ddl import parse_schema
from protocol.schema import LogicalSchema
from protocol.workload import WorkloadSpec


class OriginSessionSettings(WarnsOfOldNames, KafkaSettings):
    model_config = SettingsConfigDict(
        env_prefix="PODD_", extra="ignore", populate_by_name=True, hide_input_in_errors=True
    )

    #: The one datamart this origin drives.
    datamart: str | None = Field(
        default=None, validation_alias=renamed("PODD_ORIGIN_DATAMART", "PODD_DATAMART")
    )
    #: Its logical schema (Prostore DDL), as the replica serves it.
    schema_file: Path | None = Field(
        default=None, validation_alias=renamed("PODD_ORIGIN_SCHEMA", "PODD_SCHEMA")
    )
    #: Rows per chunk (Prostore's `chunkSize`).
    chunk_rows: int = Field(default=1000, ge=1)
    #: How long to wait for a transfer's `delta.in.rs` before asking `delta.rq` again.
    answer_timeout_seconds: float = Field(default=120.0, gt=0)
    #: How long to wait for a `delta.rs` answering one `delta.rq`.
    state_timeout_seconds: float = Field(default=30.0, gt=0)
    #: A delta answered LOAD_FAILED is sent again this many times (with backoff), then
    #: the origin stops.
    load_failed_retries: int = Field(default=3, ge=0)
    #: Rows per second a delta's chunks are sent at (0: as fast as the broker takes them):
    #: an origin behind a slow network, or one reading its source as it goes.
    rate: float = Field(default=0.0, ge=0)

    @field_validator("datamart")
    @classmethod
    def _one_datamart(cls, value: str | None) -> str | None:
        if value is not None and "," in value:
            raise ValueError("the origin drives one datamart; run one origin per datamart")
        return value

    def logical_schema(self) -> LogicalSchema:
        """The datamart's schema from `--schema`, as the replica agent serves it."""
        if self.schema_file is None or self.datamart is None:
            raise OriginError("give --datamart NAME and --schema FILE.sql")
        try:
            text = self.schema_file.read_text()
        except OSError as exc:
            raise OriginError(f"cannot read the schema: {exc}") from None
        return parse_schema(text, self.datamart)

    def session_options(self) -> SessionOptions:
        return SessionOptions(
            chunk_rows=self.chunk_rows,
            answer_timeout=self.answer_timeout_seconds,
            state_timeout=self.state_timeout_seconds,
            load_failed_retries=self.load_failed_retries,
            rows_per_second=self.rate,
        )


class OriginSettings(OriginSessionSettings):
    """The reference origin: the session's settings and its delta source."""

    #: How many deltas to send; None: until the source ends (a workload never ends).
    deltas: int | None = Field(default=None, ge=0)
    #: A directory of saved deltas; None: the seeded workload.
    source_dir: Path | None = None
    #: Rows of each delta the seeded workload makes.
    rows_per_delta: int = Field(default=3000, ge=0)
    #: The workload's mix of inserts, updates and deletes (they add up to 1).
    insert_ratio: float = Field(default=0.7, ge=0, le=1)
    #: (see `insert_ratio`)
    update_ratio: float = Field(default=0.2, ge=0, le=1)
    #: (see `insert_ratio`)
    delete_ratio: float = Field(default=0.1, ge=0, le=1)
    #: The share of nullable values the workload leaves NULL.
    null_ratio: float = Field(default=0.1, ge=0, le=1)
    #: The workload's seed: the same seed, the same deltas.
    seed: int = 0
    #: The workload's delta N is dated `start_date + N * delta_interval_seconds`.
    start_date: datetime = START_DATE
    #: (see `start_date`)
    delta_interval_seconds: float = Field(default=3600.0, gt=0)

    @field_validator("start_date")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    @model_validator(mode="after")
    def _mix(self) -> OriginSettings:
        self.workload_spec()  # the ratios must add up to 1
        return self

    def workload_spec(self) -> WorkloadSpec:
        return WorkloadSpec(
            rows_per_delta=self.rows_per_delta,
            insert_ratio=self.insert_ratio,
            update_ratio=self.update_ratio,
            delete_ratio=self.delete_ratio,
            null_ratio=self.null_ratio,
            seed=self.seed,
        )
