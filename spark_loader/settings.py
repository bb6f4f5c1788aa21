"""Loader settings: flags and `PODD_*` environment variables (pydantic-settings)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from protocol.ocf import OcfLimits


class LoaderSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PODD_", extra="ignore", hide_input_in_errors=True)

    #: The replica database; None starts the embedded PostgreSQL in `data_dir/postgres`.
    replica_dsn: SecretStr | None = None
    data_dir: Path = Path("var")
    spark_master: str = "local[*]"
    #: Extra Spark configuration, e.g. {"spark.executor.memory": "4g"}.
    spark_conf: dict[str, str] = Field(default_factory=dict)
    spark_ui: bool = False
    #: A table whose chunk files exceed this many MiB is staged in several key slices, so
    #: the rows a Spark task holds at once stay bounded as deltas grow.
    max_slice_mib: float = Field(default=16, gt=0)
    #: Most bytes one block / one chunk body may decompress to (more is BAD_CHUNK).
    max_block_decoded_mib: float = Field(default=64, gt=0)
    max_chunk_decoded_mib: float = Field(default=256, gt=0)
    #: How often a load is tried on transient database or executor errors.
    load_attempts: int = Field(default=4, ge=1)
    retry_backoff_seconds: float = Field(default=0.5, ge=0)

    def body_limits(self) -> OcfLimits:
        return OcfLimits(
            max_block_bytes=int(self.max_block_decoded_mib * 2**20),
            max_total_bytes=int(self.max_chunk_decoded_mib * 2**20),
        )
