"""`podd-cdc` settings: flags, or `PODD_CDC_*` variables (the broker, topics and
SASL/SSL settings are the origin's own `PODD_*`). It drives the replica as any origin does
(`OriginSessionSettings`) and has no workload: the reference origin's `PODD_INSERT_RATIO`
and the like are not read here."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from origin.settings import OriginSessionSettings
from podd_cdc.cutlog import partition_key
from podd_cdc.cutter import Bounds
from podd_cdc.options import CdcOptions
from podd_runtime.renamed_settings import renamed


class CdcSettings(OriginSessionSettings):
    #: The one datamart the topics are cut into (its schema: `cdc schema` derives one).
    datamart: str | None = Field(
        default=None, validation_alias=renamed("PODD_CDC_DATAMART", "PODD_DATAMART")
    )
    #: The datamart's logical schema (Prostore DDL), as the replica serves it.
    schema_file: Path | None = Field(
        default=None, validation_alias=renamed("PODD_CDC_SCHEMA", "PODD_SCHEMA")
    )
    #: The topics' format: Qlik Replicate's or DataWorks'.
    cdc_format: Literal["qlik", "dataworks"] | None = None
    #: The source topics to read (every partition of each).
    cdc_topics: list[str] = Field(default_factory=list)
    #: The run's durable state (the cut log, Qlik's table catalog): one per datamart.
    cdc_state_dir: Path | None = None
    #: A delta closes at this many changes (never inside a source transaction) ...
    cdc_max_delta_rows: int = Field(default=100_000, ge=1)
    #: ... or when its oldest change has waited this long.
    cdc_max_delta_age_seconds: float = Field(default=10.0, gt=0)
    #: A partition read to its end counts as delivering nothing older after this long.
    cdc_settle_seconds: float = Field(default=2.0, ge=0)
    #: Bad input goes here, counted, instead of stopping the origin.
    cdc_dead_letter_topic: str | None = None
    #: Where a partition starts while the cut log is empty.
    cdc_start: Literal["earliest", "latest"] = "earliest"
    #: `TOPIC:PARTITION=OFFSET` items: where a partition starts when the cut log is empty.
    cdc_start_offsets: list[str] = Field(default_factory=list)
    #: Exit 0 once every complete delta read is applied and nothing arrived for this long.
    cdc_until_idle_seconds: float | None = Field(default=None, gt=0)
    #: How long a Qlik data message may wait for its table's metadata message.
    cdc_metadata_wait_seconds: float = Field(default=30.0, gt=0)
    #: Changes held in memory at most; a transaction larger than this is bad input.
    cdc_max_pending_changes: int = Field(default=500_000, ge=10)
    #: ... and MiB of their source messages held at most.
    cdc_max_pending_mib: float = Field(default=1024, gt=0)
    #: A sequence, source time or eventTime this many hours ahead of the clock stops the run.
    cdc_max_ahead_hours: float = Field(default=24.0, gt=0)
    #: `TOPIC=TABLE` items: the table of a Qlik topic written without the envelope.
    cdc_topic_tables: list[str] = Field(default_factory=list)
    #: Hold and cut changes on arrays, read in batches (false: a change at a time).
    cdc_columnar: bool = True

    @field_validator("cdc_start_offsets", "cdc_topic_tables")
    @classmethod
    def _pairs(cls, items: list[str]) -> list[str]:
        for item in items:
            if "=" not in item:
                raise ValueError(f"{item!r} is not NAME=VALUE")
        return items

    def start_offsets(self) -> dict[str, int]:
        found = {}
        for item in self.cdc_start_offsets:
            where, _, offset = item.rpartition("=")
            topic, _, partition = where.rpartition(":")
            if not topic or not partition.isdigit() or not offset.isdigit():
                raise ValueError(f"--start-offset {item!r} is not TOPIC:PARTITION=OFFSET")
            found[partition_key(topic, int(partition))] = int(offset)
        return found

    def options(self) -> CdcOptions:
        if self.cdc_format is None or not self.cdc_topics or self.cdc_state_dir is None:
            raise ValueError("give --format qlik|dataworks, --topic (one or more) and --state-dir")
        return CdcOptions(
            fmt=self.cdc_format,
            topics=list(dict.fromkeys(self.cdc_topics)),
            state_dir=self.cdc_state_dir,
            bounds=Bounds(
                self.cdc_max_delta_rows,
                self.cdc_max_delta_age_seconds,
                self.cdc_max_pending_changes,
                max_pending_bytes=round(self.cdc_max_pending_mib * 2**20),
                max_ahead=self.cdc_max_ahead_hours * 3600,
            ),
            settle=self.cdc_settle_seconds,
            dead_letter_topic=self.cdc_dead_letter_topic,
            start_latest=self.cdc_start == "latest",
            start_offsets=self.start_offsets(),
            until_idle=self.cdc_until_idle_seconds,
            metadata_wait=self.cdc_metadata_wait_seconds,
            topic_tables=dict(i.split("=", 1) for i in self.cdc_topic_tables),
            columnar=self.cdc_columnar,
        )
