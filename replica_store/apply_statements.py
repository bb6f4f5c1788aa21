"""The statements that apply one table's staged rows in delta N's transaction (PROTOCOL.md,
"applying delta N"), in both dialects, each rule written once.

Staging holds one row per key (the last of the delta, or of a piece of its stream). The
rules, for a staged key whose current version is `a` and staged row `s`:

* **moved**: `a` leaves `t_actual` for `t_history`, closed at `sys_to = N - 1` with the
  staged row's `sys_op` (1: closed by a delete, counted as rowsDeleted; 0: by an upsert),
  unless an earlier piece of this delta opened it (`sys_from = N`): then it is **replaced**,
  gone without a trace, as it never existed as of any applied delta;
* **opened**: an upsert opens a new version at `sys_from = N` (rowsUpserted);
* for a piece (`replica_store.pieces`), the transaction's table of keys closed by a delete
  (`gone`) is kept: **recorded** adds the keys a piece closes by a delete; **flipped to a
  delete**: a version an earlier piece closed by an upsert, whose key this piece deletes,
  takes `sys_op = 1`; **flipped to an upsert** (before the piece's rows, while `gone` holds
  keys): a version an earlier piece closed by a delete, whose key this piece upserts,
  takes `sys_op = 0` and its key leaves `gone`.

A delete of a key with no current version matches nothing and opens nothing. The count of
staged rows as the statements see them lets the caller check that what it applies is what
it staged (a staging table emptied under it would otherwise apply nothing and be answered
OK).

The PostgreSQL dialect sends the rules as one statement of writable CTEs (one pass); the ADB
dialect as a sequence of plain `INSERT … SELECT`, `UPDATE … FROM` and `DELETE … USING`,
ordered so each reads what the CTE's snapshot would, its counts from row counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from protocol.schema import Table
from replica_store.dialect import Dialect, distributed_by
from replica_store.store_sql import ident, physical_ident, render

#: An older version, moved to `t_history` (a version this delta opened is replaced instead).
OLDER = "{}.sys_from <> %(delta)s"
#: A version this delta opened (an earlier piece's).
THIS_DELTA = "{}.sys_from = %(delta)s"
#: In `t_history` (first alias): the version closed when the second alias's version (one
#: this delta opened) was. Relative to that row, never a constant: the planner's statistics
#: do not know the rows this transaction wrote, and a constant filter on `t_history` lets
#: it start from `t_history` and scan staging once per row (`replica_store.pieces`).
CLOSED_BY_THIS_DELTA = "{0}.sys_to = {1}.sys_from - 1"
#: The name of a step of the ADB sequence whose row count means nothing.
UNCOUNTED = "uncounted"
SEQSCAN_DEFAULT = "SET LOCAL enable_seqscan TO DEFAULT"


@dataclass(frozen=True)
class Applied:
    """What applying a table's staged rows did."""

    #: Versions moved to `t_history` closed by a delete.
    deleted: int
    #: Versions opened (for a piece: including those replacing a version it removed).
    opened: int
    #: Rows in staging as the statements saw them.
    staged: int
    #: Versions an earlier piece of this delta opened, removed (pieces only).
    replaced: int = 0
    #: Keys closed by a delete, added to `gone` (pieces only).
    recorded: int = 0
    #: Versions an earlier piece closed by an upsert, now closed by a delete (pieces only).
    flipped: int = 0


class ApplyStatements:
    """The statements of one table's apply from one staging relation (`staging`, quoted).
    For a piece (`pieces.gone_name`, `pieces.closing_name`, quoted): `gone`, the
    transaction's table of keys closed by a delete, and `closing`, the ADB dialect's table
    of the versions the piece closes."""

    def __init__(
        self,
        datamart: str,
        table: Table,
        staging: str,
        gone: str | None = None,
        closing: str | None = None,
    ):
        self.table = table
        self.actual = physical_ident(datamart, table.name, "actual")
        self.history = physical_ident(datamart, table.name, "history")
        self.staging = sql.SQL(staging)
        self.gone = sql.SQL(gone) if gone is not None else None
        self.closing = sql.SQL(closing) if closing is not None else None

    # --- fragments -----------------------------------------------------------------------
    def on(self, left: str, right: str) -> sql.Composable:
        return sql.SQL(" AND ").join(
            sql.SQL("{l}.{k} = {r}.{k}").format(l=sql.SQL(left), r=sql.SQL(right), k=ident(k))
            for k in self.table.primary_key
        )

    def keys(self, prefix: str = "") -> sql.Composable:
        return sql.SQL(", ").join(sql.SQL(prefix) + ident(k) for k in self.table.primary_key)

    def columns(self, prefix: str = "") -> sql.Composable:
        return sql.SQL(", ").join(sql.SQL(prefix) + ident(c.name) for c in self.table.columns)

    def target(self) -> sql.Composable:
        """What a version row holds: the logical columns, then the system ones."""
        return sql.SQL("{}, sys_from, sys_to, sys_op").format(self.columns())

    def rule(self, text: str, *aliases: str) -> sql.Composable:
        return sql.SQL(text.format(*aliases))

    def opened_sql(self) -> sql.Composable:
        """Rule "opened": a new version for every staged upsert."""
        return sql.SQL(
            "INSERT INTO {actual} ({target}) "
            "SELECT {cols}, %(delta)s, NULL, 0 FROM {staging} s WHERE s.sys_op = 0"
        ).format(
            actual=self.actual, target=self.target(), cols=self.columns("s."), staging=self.staging
        )

    def staged_sql(self) -> sql.Composable:
        return sql.SQL("SELECT count(*) FROM {}").format(self.staging)

    def _gone(self) -> sql.Composable:
        assert self.gone is not None, "only a piece keeps the keys closed by a delete"
        return self.gone

    # --- the PostgreSQL dialect: one statement ---------------------------------------------
    def one_statement(self) -> str:
        """All rules as writable CTEs; one row: the fields of `Applied`, in order."""
        piece = self.gone is not None
        text = (
            "WITH closed AS (DELETE FROM {actual} a USING {staging} s WHERE {a_s} "
            "RETURNING {a_cols}, a.sys_from, s.sys_op AS podd_closed_by), "
            "moved AS (INSERT INTO {history} ({target}) "
            "SELECT {cols}, sys_from, %(prev)s, podd_closed_by FROM closed c{older} "
            "RETURNING sys_op), "
        )
        if piece:
            text += (
                "recorded AS (INSERT INTO {gone} SELECT {keys}, sys_from FROM closed c "
                "WHERE {c_older} AND podd_closed_by = 1 RETURNING 1), "
                "flipped AS (UPDATE {history} h SET sys_op = 1 FROM closed c "
                "WHERE {c_this} AND c.podd_closed_by = 1 AND {h_c} AND {h_closed} "
                "RETURNING {h_keys}, h.sys_from), "
                "flipped_gone AS (INSERT INTO {gone} SELECT * FROM flipped RETURNING 1), "
            )
        text += (
            "opened AS ({opened} RETURNING 1) "
            "SELECT (SELECT count(*) FROM moved WHERE sys_op = 1), "
            "(SELECT count(*) FROM opened), ({staged}), "
        )
        text += (
            "(SELECT count(*) FROM closed c WHERE {c_this}), "
            "(SELECT count(*) FROM recorded), (SELECT count(*) FROM flipped_gone)"
            if piece
            else "0, 0, 0"
        )
        return render(
            sql.SQL(text).format(
                actual=self.actual,
                history=self.history,
                staging=self.staging,
                gone=self.gone or sql.SQL(""),
                a_s=self.on("a", "s"),
                h_c=self.on("h", "c"),
                a_cols=self.columns("a."),
                cols=self.columns(),
                target=self.target(),
                keys=self.keys(),
                h_keys=self.keys("h."),
                older=sql.SQL(" WHERE ") + self.rule(OLDER, "c") if piece else sql.SQL(""),
                c_older=self.rule(OLDER, "c"),
                c_this=self.rule(THIS_DELTA, "c"),
                h_closed=self.rule(CLOSED_BY_THIS_DELTA, "h", "c"),
                opened=self.opened_sql(),
                staged=self.staged_sql(),
            )
        )

    # --- the ADB dialect: a sequence -------------------------------------------------------
    def moved_sql(self, sys_op: int) -> sql.Composable:
        """Rule "moved", for the staged rows with this `sys_op`: its row count is the
        versions it closed."""
        older = sql.SQL(" AND ") + self.rule(OLDER, "a") if self.gone is not None else sql.SQL("")
        return sql.SQL(
            "INSERT INTO {history} ({target}) "
            "SELECT {a_cols}, a.sys_from, %(prev)s, s.sys_op "
            "FROM {actual} a JOIN {staging} s ON {a_s} WHERE s.sys_op = {op}{older}"
        ).format(
            history=self.history,
            target=self.target(),
            a_cols=self.columns("a."),
            actual=self.actual,
            staging=self.staging,
            a_s=self.on("a", "s"),
            op=sql.Literal(sys_op),
            older=older,
        )

    def recorded_sql(self) -> sql.Composable:
        """Rule "recorded" (before the versions leave `t_actual`)."""
        return sql.SQL(
            "INSERT INTO {gone} ({keys}, sys_from) SELECT {a_keys}, a.sys_from "
            "FROM {actual} a JOIN {staging} s ON {a_s} WHERE s.sys_op = 1 AND {older}"
        ).format(
            gone=self._gone(),
            keys=self.keys(),
            a_keys=self.keys("a."),
            actual=self.actual,
            staging=self.staging,
            a_s=self.on("a", "s"),
            older=self.rule(OLDER, "a"),
        )

    def _closing(self) -> sql.Composable:
        assert self.closing is not None, "only a piece keeps the versions it closes"
        return self.closing

    def closing_sql(self, distributed: bool) -> sql.Composable:
        """The current versions this piece closes, with the `sys_op` that closes them, from
        staging by key: the flips then filter these rows (a bounded few) by this delta's
        number, never `t_actual` or `t_history` by a constant, which the planner, not
        knowing the rows this transaction wrote, drives a scan from."""
        return sql.SQL(
            "CREATE TEMP TABLE {closing} ON COMMIT DROP AS SELECT {a_keys}, a.sys_from, "
            "s.sys_op AS podd_closed_by FROM {actual} a JOIN {staging} s ON {a_s}{distributed}"
        ).format(
            closing=self._closing(),
            a_keys=self.keys("a."),
            actual=self.actual,
            staging=self.staging,
            a_s=self.on("a", "s"),
            distributed=distributed_by(distributed, self.table.primary_key),
        )

    def _flip_to_delete_where(self) -> sql.Composable:
        return sql.SQL("c.podd_closed_by = 1 AND {this} AND {h_c} AND {closed}").format(
            this=self.rule(THIS_DELTA, "c"),
            h_c=self.on("h", "c"),
            closed=self.rule(CLOSED_BY_THIS_DELTA, "h", "c"),
        )

    def flipped_gone_sql(self) -> sql.Composable:
        """Rule "flipped to a delete", its keys into `gone` (before the flip itself)."""
        return sql.SQL(
            "INSERT INTO {gone} ({keys}, sys_from) SELECT {h_keys}, h.sys_from "
            "FROM {closing} c JOIN {history} h ON {h_c} WHERE {where}"
        ).format(
            gone=self._gone(),
            keys=self.keys(),
            h_keys=self.keys("h."),
            closing=self._closing(),
            history=self.history,
            h_c=self.on("h", "c"),
            where=self._flip_to_delete_where(),
        )

    def flipped_sql(self) -> sql.Composable:
        """Rule "flipped to a delete"."""
        return sql.SQL("UPDATE {history} h SET sys_op = 1 FROM {closing} c WHERE {where}").format(
            history=self.history, closing=self._closing(), where=self._flip_to_delete_where()
        )

    def removed_sql(self) -> sql.Composable:
        """Every current version of a staged key leaves `t_actual` (moved or replaced)."""
        return sql.SQL("DELETE FROM {actual} a USING {staging} s WHERE {a_s}").format(
            actual=self.actual, staging=self.staging, a_s=self.on("a", "s")
        )

    def sequence(
        self, *, first_piece: bool = False, distributed: bool = False
    ) -> list[tuple[str, str]]:
        """The ADB dialect's statements, in order, each named by what its row count is (one
        whose count means nothing by `UNCOUNTED`). A stream's first piece flips nothing: no earlier
        piece opened or closed a version of this delta."""
        steps: list[tuple[str, sql.Composable]] = []
        if self.gone is not None:
            steps.append(("recorded", self.recorded_sql()))
        if self.gone is not None and not first_piece:
            steps += [
                (UNCOUNTED, self.closing_sql(distributed)),
                ("flipped_gone", self.flipped_gone_sql()),
                ("flipped", self.flipped_sql()),
                (UNCOUNTED, sql.SQL("DROP TABLE {}").format(self._closing())),
            ]
        steps += [
            ("deleted", self.moved_sql(1)),
            ("moved_by_upsert", self.moved_sql(0)),
            ("removed", self.removed_sql()),
            ("opened", self.opened_sql()),
            ("staged", self.staged_sql()),
        ]
        return [(name, render(statement)) for name, statement in steps]

    # --- flipped to an upsert ---------------------------------------------------------------
    def flip_to_upsert_statements(self, dialect: Dialect) -> list[str]:
        """Rule "flipped to an upsert"; the first statement's result (PostgreSQL: its one
        row; ADB: its row count) is how many versions flipped."""
        values = {
            "gone": self._gone(),
            "history": self.history,
            "staging": self.staging,
            "g_s": self.on("g", "s"),
            "h_g": self.on("h", "g"),
            "g_keys": self.keys("g."),
        }
        if dialect is Dialect.POSTGRESQL:
            text = (
                "WITH back AS (DELETE FROM {gone} g USING {staging} s "
                "WHERE {g_s} AND s.sys_op = 0 RETURNING {g_keys}, g.sys_from), "
                "flipped AS (UPDATE {history} h SET sys_op = 0 FROM back g "
                "WHERE {h_g} AND h.sys_from = g.sys_from RETURNING 1) "
                "SELECT count(*) FROM flipped"
            )
            return [render(sql.SQL(text).format(**values))]
        flip = (
            "UPDATE {history} h SET sys_op = 0 FROM {gone} g JOIN {staging} s ON {g_s} "
            "WHERE s.sys_op = 0 AND {h_g} AND h.sys_from = g.sys_from"
        )
        leave = "DELETE FROM {gone} g USING {staging} s WHERE {g_s} AND s.sys_op = 0"
        return [render(sql.SQL(t).format(**values)) for t in (flip, leave)]


def apply_rows(
    conn: psycopg.Connection,
    dialect: Dialect,
    statements: ApplyStatements,
    params: dict[str, Any],
    *,
    first_piece: bool = False,
    distributed: bool = False,
) -> Applied:
    """Run the apply's rules in the open transaction (`first_piece`: a stream's first;
    `distributed`: tables it creates are `DISTRIBUTED BY`, a Greenplum server)."""
    if dialect is Dialect.POSTGRESQL:
        row = conn.execute(statements.one_statement(), params).fetchone()
        assert row is not None
        return Applied(*(int(v) for v in row))
    counts: dict[str, int] = {}
    for name, text in statements.sequence(first_piece=first_piece, distributed=distributed):
        if name == UNCOUNTED:
            conn.execute(text)
            continue
        cursor = conn.execute(text, params)
        counts[name] = _first(cursor) if name == "staged" else cursor.rowcount
    if counts.get("flipped", 0) != counts.get("flipped_gone", 0):
        raise AssertionError("a version flipped to a delete without its key recorded")
    moved = counts["deleted"] + counts["moved_by_upsert"]
    return Applied(
        deleted=counts["deleted"],
        opened=counts["opened"],
        staged=counts["staged"],
        replaced=counts["removed"] - moved,
        recorded=counts.get("recorded", 0),
        flipped=counts.get("flipped", 0),
    )


def flip_to_upsert(
    conn: psycopg.Connection, dialect: Dialect, statements: ApplyStatements, params: dict[str, Any]
) -> int:
    """Rule "flipped to an upsert" in the open transaction: how many versions flipped."""
    first, *rest = statements.flip_to_upsert_statements(dialect)
    cursor = conn.execute(first, params)
    flipped = _first(cursor) if dialect is Dialect.POSTGRESQL else cursor.rowcount
    for text in rest:
        conn.execute(text, params)
    return flipped


def _first(cursor: psycopg.Cursor[Any]) -> int:
    row = cursor.fetchone()
    assert row is not None
    return int(row[0])
