"""The replica's registry of applied deltas (`podd_replica.delta_registry`): one row per
delta, written in the transaction that applies it, so "delta N applied" and the tables'
versions change together. Read by loads (the sequence check), answers and `delta.rs`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg

from protocol.apply_model import TableCounts
from protocol.sequence import AppliedDelta, check_sequence
from replica_store.store_sql import META_SCHEMA, q
from replica_store.transfer import TransferManifest


@dataclass(frozen=True)
class RegistryEntry:
    """One applied delta, as the replica recorded it."""

    datamart: str
    delta_num: int
    delta_date: datetime
    request_id: str
    tables: tuple[TableCounts, ...]
    applied_at: datetime


def registry_entry(
    conn: psycopg.Connection, datamart: str, delta_num: int | None, *, exists: bool = False
) -> RegistryEntry | None:
    """The registry's entry of `delta_num`, or with None its last entry (`exists`: the
    caller knows the registry table exists, as after `ensure`)."""
    entries = read_registry(
        conn, datamart, delta_num=delta_num, last=delta_num is None, exists=exists
    )
    return entries[0] if entries else None


def read_registry(
    conn: psycopg.Connection,
    datamart: str,
    *,
    delta_num: int | None = None,
    last: bool = False,
    exists: bool = False,
) -> list[RegistryEntry]:
    query = (
        f"SELECT datamart, delta_num, delta_date, request_id, table_counts, applied_at "
        f"FROM {q(META_SCHEMA)}.delta_registry WHERE datamart = %s"
    )
    params: list[object] = [datamart]
    if delta_num is not None:
        query += " AND delta_num = %s"
        params.append(delta_num)
    query += " ORDER BY delta_num DESC LIMIT 1" if last else " ORDER BY delta_num"
    if not exists:
        found = conn.execute(
            "SELECT to_regclass(%s)", (f"{META_SCHEMA}.delta_registry",)
        ).fetchone()
        if not found or found[0] is None:
            return []
    rows = conn.execute(query, params).fetchall()
    return [
        RegistryEntry(
            datamart=row[0],
            delta_num=row[1],
            delta_date=row[2].replace(tzinfo=UTC),
            request_id=row[3],
            tables=tuple(TableCounts(*t) for t in json.loads(row[4])),
            applied_at=row[5],
        )
        for row in rows
    ]


def registered_or_refused(
    manifest: TransferManifest, stored: RegistryEntry | None, last: RegistryEntry | None
) -> RegistryEntry | None:
    """The sequence check of a delta under its datamart's one writer, from the registry's
    entry of the delta (`stored`) and its last entry: the stored entry if the delta is
    applied (the same date), None if it is the one expected next; the protocol's refusal
    (raised) else. Every store's delta write asks this."""
    previous = None if stored is not None or last is None else last
    refusal = check_sequence(
        manifest.delta_num,
        manifest.delta_date,
        applied_date=None if stored is None else stored.delta_date,
        last=None if previous is None else AppliedDelta(previous.delta_num, previous.delta_date),
    )
    if refusal is not None:
        raise refusal.error()
    return stored


def encode_counts(counts: list[TableCounts]) -> str:
    return json.dumps(
        [[c.table_name, c.rows_received, c.rows_upserted, c.rows_deleted] for c in counts]
    )
