"""Which store a replica is: PostgreSQL (and ADB, by its dialect) or ClickHouse (ADQM)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

#: URL schemes of a ClickHouse replica (`replica_store.adqm.client`).
CLICKHOUSE_SCHEMES = ("chdb", "clickhouse", "clickhouses")


class StoreKind(StrEnum):
    POSTGRESQL = "postgresql"
    CLICKHOUSE = "clickhouse"


def embedded_clickhouse_url(data_dir: Path) -> str:
    """The embedded ClickHouse (chdb) of a data directory: `data_dir/clickhouse`."""
    return f"chdb://{(data_dir / 'clickhouse').absolute()}"
