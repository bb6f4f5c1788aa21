"""The end of a datamart's registry in the ADQM store, as the agent reads it often
(`replica_store.registry_tail` is PostgreSQL's): numbers and dates only, the last rows by
the registry's sorting key."""

from __future__ import annotations

from protocol.sequence import AppliedDelta
from replica_store.adqm.names import literal
from replica_store.adqm.registry import as_utc
from replica_store.adqm.store import AdqmStore


class AdqmRegistryTail:
    def __init__(self, store: AdqmStore) -> None:
        self.store = store

    def last(self, datamart: str) -> AppliedDelta | None:
        entries = self.tail(datamart, 1)
        return entries[-1] if entries else None

    def tail(self, datamart: str, count: int) -> list[AppliedDelta]:
        """The datamart's last `count` applied deltas, oldest first."""
        rows = self.store.client.query(
            f"SELECT delta_num, delta_date FROM {self.store.names.meta_table('delta_registry')} "
            f"WHERE datamart = {literal(datamart)} ORDER BY delta_num DESC LIMIT {int(count)}"
        ).result_rows
        return [AppliedDelta(int(n), as_utc(d)) for n, d in reversed(rows)]

    def close(self) -> None:
        """Nothing is held (the store's client is the store's)."""
