"""One writer per datamart on a ClickHouse server: a lease in the registry's database.

ClickHouse has no lock a client can hold, so a writer (an agent, a loader, a restore)
claims each datamart with a row in `writer_lease` and renews it while it runs; a claim
lapses `LEASE_SECONDS` after its last renewal (a writer killed with -9 holds nothing for
longer). Times are the server's (`now64`), so writers' clocks do not matter.

A claim whose holder was a process of this host that has ended (a supervisor restarting an
agent killed with -9) is ended at once, not after it lapses. The holder is the claim made
first among those not lapsed or released: two writers that
both found a datamart free and both claimed it agree, once each reads the other's claim,
on which holds it; the other lets go (`DatamartInUseError`). Each claims, then reads: a
claim counts only once the read after it names its own token.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from collections.abc import Sequence
from typing import Any

from podd_runtime.lock_file import holder_text
from replica_store.adqm.names import Names, literal
from replica_store.errors import DatamartInUseError, OwnershipLostError

#: A claim not renewed for this long lapses (renewed every 10 s by the agent's hold check).
LEASE_SECONDS = 45


_HOLDER = re.compile(r" on (\S+) pid (\d+)$")


def _gone(holder: str) -> bool:
    """Whether a holder (`process_name`: `<role> on <host> pid <pid>`) was a process of this
    host that has ended: its claim can be taken at once instead of after it lapses."""
    found = _HOLDER.search(holder)
    if found is None or found[1] != socket.gethostname()[: len(found[1])]:
        return False
    try:
        os.kill(int(found[2]), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def lease_ddl(names: Names, on_cluster: str = "") -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {names.meta_table('writer_lease')}{on_cluster} "
        "(datamart String, token String, holder String, claimed_at DateTime64(6, 'UTC'), "
        "at DateTime64(6, 'UTC'), expires_at DateTime64(6, 'UTC')) "
        "ENGINE = MergeTree ORDER BY (datamart, at)"
    )


class WriterLease:
    """This process's claim on `datamarts`."""

    def __init__(self, client: Any, names: Names, datamarts: Sequence[str], role: str) -> None:
        self.client = client
        self.names = names
        self.datamarts = list(datamarts)
        self.holder = holder_text(role)
        self.token = secrets.token_hex(8)
        self._claimed: list[str] = []

    def acquire(self) -> None:
        try:
            for datamart in self.datamarts:
                self._claim(datamart)
        except BaseException:
            self.release()
            raise

    def renew(self) -> None:
        """Still the holder? Renewed; `OwnershipLostError` if another writer holds it now."""
        for datamart in self._claimed:
            holder = self._holder(datamart)
            if holder is not None and holder[0] != self.token:
                raise OwnershipLostError(
                    f"this process lost its hold on {datamart}: {holder[1]} holds it now"
                )
            self._write(datamart, "claimed_at_or_now", LEASE_SECONDS)

    def release(self) -> None:
        for datamart in self._claimed:
            self._write(datamart, "claimed_at_or_now", 0)
        self._claimed = []

    def _claim(self, datamart: str) -> None:
        holder = self._holder(datamart)
        if holder is not None and holder[0] != self.token and _gone(holder[1]):
            self._lapse(datamart, holder[0])  # its process ended (kill -9): no wait
            holder = self._holder(datamart)
        if holder is not None and holder[0] != self.token:
            raise DatamartInUseError(f"datamart {datamart} is written by {holder[1]}")
        self._write(datamart, "now", LEASE_SECONDS)
        self._claimed.append(datamart)
        holder = self._holder(datamart)
        if holder is None or holder[0] != self.token:
            by = "another writer" if holder is None else holder[1]
            raise DatamartInUseError(f"datamart {datamart} is written by {by}")

    def _lapse(self, datamart: str, token: str) -> None:
        """End the claim of a holder whose process is gone."""
        table = self.names.meta_table("writer_lease")
        self.client.command(
            f"INSERT INTO {table} SELECT {literal(datamart)}, {literal(token)}, "
            f"'(gone)', now64(6), now64(6), now64(6)"
        )

    def _write(self, datamart: str, claimed: str, seconds: int) -> None:
        table = self.names.meta_table("writer_lease")
        first = (
            "now64(6)"
            if claimed == "now"
            else f"(SELECT coalesce(minOrNull(claimed_at), now64(6)) FROM {table} "
            f"WHERE datamart = {literal(datamart)} AND token = {literal(self.token)})"
        )
        self.client.command(
            f"INSERT INTO {table} SELECT {literal(datamart)}, {literal(self.token)}, "
            f"{literal(self.holder)}, {first}, now64(6), now64(6) + toIntervalSecond({seconds})"
        )

    def _holder(self, datamart: str) -> tuple[str, str] | None:
        """(token, holder) of the first claim not lapsed or released, if any."""
        table = self.names.meta_table("writer_lease")
        rows = self.client.query(
            "SELECT token, holder FROM (SELECT token, argMax(holder, at) AS holder, "
            "argMax(expires_at, at) AS expires, argMax(claimed_at, at) AS claimed "
            f"FROM {table} WHERE datamart = {literal(datamart)} GROUP BY token) "
            "WHERE expires > now64(6) ORDER BY claimed, token LIMIT 1"
        ).result_rows
        return None if not rows else (str(rows[0][0]), str(rows[0][1]))
