"""`podd-restore` settings: flags and `PODD_*` variables, as for `replica-agent`.

The loader's settings (replica DSN, data directory, staging, Spark) and the Kafka connection
settings are inherited, so one set of variables configures the agent and a restore. Where a
restore's setting differs from the agent's, it has a name of its own (`PODD_RESTORE_*`; the
old name is still read for one release)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from podd_kafka.settings import KafkaSettings
from podd_runtime.renamed_settings import WarnsOfOldNames, renamed
from spark_loader.settings import LoaderSettings


class RestoreSettings(WarnsOfOldNames, LoaderSettings, KafkaSettings):
    model_config = SettingsConfigDict(
        env_prefix="PODD_", extra="ignore", populate_by_name=True, hide_input_in_errors=True
    )

    #: A delta decoding to at most this many MiB is staged by this process, no Spark job
    #: (`LoaderSettings`); Spark is started only if a delta of the run is bigger. Measured
    #: (issue 29): the 1M-row backup of 20 deltas (each about 2.5 MiB decoded, 10 tables)
    #: restored in 13.6 s staged here, 24.0 s with the JVM started beside, 27.0 s by Spark
    #: jobs (local[2]).
    in_driver_max_mib: float = Field(
        default=8.0,
        ge=0,
        validation_alias=renamed("PODD_RESTORE_IN_DRIVER_MAX_MIB", "PODD_IN_DRIVER_MAX_MIB"),
    )
    #: Loads commit without waiting for the WAL flush, the run's end waits for all of
    #: them (`LoaderSettings`): after a crash of PostgreSQL a run again applies what the
    #: registry lacks. Measured (issue 29), the 1M-row backup of 20 deltas: 0.6 s of 12.
    synchronous_commit: bool = Field(
        default=False,
        validation_alias=renamed("PODD_RESTORE_SYNCHRONOUS_COMMIT", "PODD_SYNCHRONOUS_COMMIT"),
    )
    #: The backup topic to restore from.
    topic: str = Field(default="", validation_alias=renamed("PODD_RESTORE_TOPIC", "PODD_TOPIC"))
    #: The datamart to restore from it (one, where the agent's `PODD_DATAMART` is a list).
    datamart: str = Field(
        default="", validation_alias=renamed("PODD_RESTORE_DATAMART", "PODD_DATAMART")
    )
    #: Stop after this delta (None: the last complete one the topic holds).
    to_delta: int | None = Field(default=None, ge=0)
    #: The run (incrementId) to use where several wrote delta 0 (two snapshots).
    increment_id: str | None = None
    #: Bounds on what the topic may make this process hold.
    max_messages: int = Field(default=10_000_000, ge=1)
    #: Changelog records (schema changes) held, in all the topic's runs together.
    max_changelog_records: int = Field(default=100_000, ge=1)
    #: One delta's data bodies staged on disk (MiB); two deltas are staged at most.
    restore_max_staged_mib: float = Field(default=65_536, gt=0)
    #: How long the scan waits for the broker to deliver up to the end offsets it reported.
    stall_timeout_seconds: float = Field(default=60.0, gt=0)
    #: `json`, `console`, or `auto` (JSON unless stderr is a terminal).
    log_format: str = "auto"
