"""Undo a delta published and not registered (docs/contracts/REPLICA.md: "undone by compensating
inserts, never by a delete racing merges, before the next load")."""

from __future__ import annotations

from typing import Any

import structlog

from replica_store.adqm import registry
from replica_store.adqm.names import Names
from replica_store.adqm.statements import move_sql, undo_sql
from replica_store.layout import Datamart

log = structlog.get_logger("replica_store")


def undo_unregistered(client: Any, names: Names, datamart: Datamart) -> None:
    """Compensate every row of a delta published after the last registered one (the caller
    holds the datamart's writer). Each table's undo moves into it in one statement, so a
    crash inside leaves each table undone or not, and a second run finishes the rest."""
    name = datamart.name
    pending, last_num = registry.unregistered_after(client, names, name)
    if not pending:
        return
    for position, table in enumerate(datamart.schema.tables):
        actual = names.actual(name, table.name)
        publish = names.publish(datamart.id, position)
        client.command(f"TRUNCATE TABLE {publish}")
        client.command(undo_sql(table, actual, publish, last_num))
        client.command(move_sql(actual, publish))
        client.command(f"TRUNCATE TABLE {publish}")
    log.info("unregistered delta undone", datamart=name, lastRegistered=last_num)
