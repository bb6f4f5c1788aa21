"""ClickHouse names of a datamart's store: databases, tables, views, always quoted.

The ADQM store takes only Prostore names (docs/contracts/REPLICA.md: a letter, then letters, digits
and `_`); a schema with any other name is refused when its store is made, never escaped into
something that reads differently. Quoting is still applied to every name (backticks).
"""

from __future__ import annotations

import re

from protocol.schema import LogicalSchema
from replica_store.errors import UnsupportedSchemaError

PROSTORE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
#: The database of the replica's own tables (registry, catalog, staging), after the prefix.
META_DATABASE = "podd_replica"


def check_prostore_names(schema: LogicalSchema) -> None:
    """`UnsupportedSchemaError` for the first name that is not a Prostore name."""
    names = [("datamart", schema.datamart)]
    for table in schema:
        names.append(("table", table.name))
        names += [("column", c.name) for c in table.columns]
    for kind, name in names:
        if not PROSTORE_NAME.match(name):
            raise UnsupportedSchemaError(
                f"{kind} name {name[:80]!r} is not a Prostore name (a letter, then letters, "
                "digits and _), which the ADQM store requires"
            )


def quote(name: str) -> str:
    """A ClickHouse identifier in backticks (backslash and backtick escaped)."""
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def literal(text: str) -> str:
    """A ClickHouse string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class Names:
    """Where a datamart's tables live, for one database prefix (such as `env__`)."""

    def __init__(self, prefix: str = "") -> None:
        if prefix and not PROSTORE_NAME.match(prefix):
            raise UnsupportedSchemaError(f"database prefix {prefix[:80]!r} is not a plain name")
        self.prefix = prefix

    @property
    def meta(self) -> str:
        return quote(self.prefix + META_DATABASE)

    def database(self, datamart: str) -> str:
        return quote(self.prefix + datamart)

    def actual(self, datamart: str, table: str) -> str:
        return f"{self.database(datamart)}.{quote(table + '_actual')}"

    def actual_shard(self, datamart: str, table: str) -> str:
        return f"{self.database(datamart)}.{quote(table + '_actual_shard')}"

    def as_of_view(self, datamart: str, table: str) -> str:
        return f"{self.database(datamart)}.{quote(table + '_as_of')}"

    def current_view(self, datamart: str, table: str) -> str:
        return f"{self.database(datamart)}.{quote(table + '_current')}"

    def meta_table(self, name: str) -> str:
        return f"{self.meta}.{quote(name)}"

    @staticmethod
    def incoming_table(datamart_id: int, position: int) -> str:
        """The staging table of a table's rows of the delta being loaded (last per key),
        unquoted, in the replica's database."""
        return f"stage_{datamart_id}_{position}_in"

    @staticmethod
    def publish_table(datamart_id: int, position: int) -> str:
        """The table whose parts move to `t_actual` in one statement, unquoted."""
        return f"stage_{datamart_id}_{position}_publish"

    def incoming(self, datamart_id: int, position: int) -> str:
        return self.meta_table(self.incoming_table(datamart_id, position))

    def publish(self, datamart_id: int, position: int) -> str:
        return self.meta_table(self.publish_table(datamart_id, position))
