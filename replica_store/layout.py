"""A datamart whose store exists, as every load path sees it."""

from __future__ import annotations

from dataclasses import dataclass

from protocol.schema import LogicalSchema
from replica_store.dialect import Dialect
from replica_store.store_sql import staging_name


@dataclass(frozen=True)
class Datamart:
    """A datamart whose store exists: its logical schema and its catalog id."""

    schema: LogicalSchema
    id: int
    #: Which statements its loads send (`replica_store.dialect`).
    dialect: Dialect = Dialect.POSTGRESQL
    #: Whether the tables it creates are `DISTRIBUTED BY` (a Greenplum server).
    distributed: bool = False

    @property
    def name(self) -> str:
        return self.schema.datamart

    def position(self, table_name: str) -> int:
        """The table's place in the schema, which numbers its staging table."""
        return [t.name for t in self.schema.tables].index(table_name)

    def staging(self, table_name: str) -> str:
        """The quoted name of the table's staging table."""
        return staging_name(self.id, self.position(table_name))
