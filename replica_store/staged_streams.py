"""Which transfer's stream each staging table holds, when it was staged before the load.

A stream that is complete while its transfer still arrives can be staged at once
(`spark_loader.prestage`): its rows decoded and copied into its table's staging table, so
the load that follows the last chunk applies them without staging them again.
`podd_replica.staged_stream` says, per datamart table, which transfer's stream (requestId,
stream number, chunk count) the staging table holds and its (staged, received) rows. Under
the datamart's lock, both rules keep a row there true:

* a row is written only after every row of that stream is staged (committed);
* it is deleted before anything writes that staging table again (a load, another prestage).

Staging is never the replica: nothing of it is visible before the load's one transaction.
After `kill -9` a row is either absent (the load stages the table) or true.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import psycopg

from replica_store.store_sql import META_SCHEMA, q
from replica_store.transfer import TransferManifest

_TABLE = f"{q(META_SCHEMA)}.staged_stream"


def staged_streams(
    conn: psycopg.Connection, manifest: TransferManifest, staging: Callable[[str], str]
) -> dict[str, tuple[int, int]]:
    """The manifest's tables whose staging holds exactly its stream: (staged, received).
    `staging` names a table's (quoted) staging table. A PostgreSQL crash empties unlogged
    staging tables while the (logged) rows here survive: a row whose staging table is
    empty though it says rows were staged is not believed (the load stages the table)."""
    rows = conn.execute(
        f"SELECT table_name, stream_number, chunk_count, staged, received FROM {_TABLE} "
        "WHERE datamart = %s AND request_id = %s",
        (manifest.datamart, manifest.request_id),
    ).fetchall()
    wanted = {(s.table_name, s.stream_number, s.chunk_count) for s in manifest.streams if s.whole}
    found = {
        str(name): (int(staged), int(received))
        for name, number, count, staged, received in rows
        if (name, number, count) in wanted
    }
    holding = [name for name, (staged, _) in found.items() if staged > 0]
    if holding:
        probe = ", ".join(f"EXISTS (SELECT FROM {staging(name)})" for name in holding)
        held = conn.execute(f"SELECT {probe}").fetchone()
        assert held is not None
        for name, has_rows in zip(holding, held, strict=True):
            if not has_rows:
                del found[name]
    return found


def forget_staged_streams(
    conn: psycopg.Connection, datamart: str, table_names: Sequence[str]
) -> None:
    """Before their staging is written: these tables hold no known stream any more."""
    if table_names:
        conn.execute(
            f"DELETE FROM {_TABLE} WHERE datamart = %s AND table_name = ANY(%s)",
            (datamart, list(table_names)),
        )


def record_staged_stream(
    conn: psycopg.Connection,
    manifest: TransferManifest,
    table_name: str,
    staged: int,
    received: int,
) -> None:
    """After every row of the table's stream is staged and committed."""
    stream = next(s for s in manifest.streams if s.table_name == table_name)
    # No ON CONFLICT (docs/contracts/REPLICA.md).
    forget_staged_streams(conn, manifest.datamart, [table_name])
    conn.execute(
        f"INSERT INTO {_TABLE} (datamart, table_name, request_id, stream_number, "
        "chunk_count, staged, received) VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (
            manifest.datamart,
            table_name,
            manifest.request_id,
            stream.stream_number,
            stream.chunk_count,
            staged,
            received,
        ),
    )
