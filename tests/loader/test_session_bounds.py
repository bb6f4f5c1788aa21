"""Every replica connection is bounded in time, and a gone client's statement ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest

from podd_runtime.dsn import with_session_bounds
from spark_loader.settings import LoaderSettings

_SLEEPER = """
import os, sys, psycopg
conn = psycopg.connect(os.environ["SLEEPER_DSN"], application_name=sys.argv[1])
print("connected", flush=True)
conn.execute("SELECT pg_sleep(600)")
"""


def test_the_session_bounds_reach_every_connection(replica_dsn: str) -> None:
    dsn = LoaderSettings(db_statement_timeout_seconds=1.5, db_lock_timeout_seconds=0.25)
    bounded = dsn.session_dsn(replica_dsn)
    with psycopg.connect(bounded) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone() == ("1500ms",)
        assert conn.execute("SHOW lock_timeout").fetchone() == ("250ms",)
        # The server probes a silent client too: a dead host's locks end in about a minute.
        assert conn.execute("SHOW tcp_keepalives_idle").fetchone() == ("30",)
        (name,) = conn.execute("SHOW application_name").fetchone() or ("",)
        assert name.startswith("podd on ")
        # The server ends the statement of a client that is gone (PostgreSQL 14+).
        assert conn.execute("SHOW client_connection_check_interval").fetchone() == ("10s",)
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute("SELECT pg_sleep(5)")


def _backend_of(dsn: str, name: str) -> int | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchone()
    return None if row is None else int(row[0])


def _killed_sleeper_lives_on(dsn: str, name: str, within: float) -> bool:
    """Starts a client sleeping in a statement, kills it -9, and says whether its backend
    was still there `within` seconds later."""
    child = subprocess.Popen(
        [sys.executable, "-c", _SLEEPER, name],
        env={**os.environ, "SLEEPER_DSN": dsn},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "connected"
        deadline = time.monotonic() + 10
        while _backend_of(dsn, name) is None:
            assert time.monotonic() < deadline, "the sleeping client never showed up"
            time.sleep(0.1)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if _backend_of(dsn, name) is None:
            return False
        time.sleep(0.2)
    return True


def test_a_killed_clients_statement_ends_within_the_check_interval(replica_dsn: str) -> None:
    """The server only notices a gone client when it next talks to it: a statement of a
    killed driver (the apply, holding its locks) would otherwise run to its end."""
    settings = LoaderSettings(db_client_check_seconds=1)
    checked = settings.session_dsn(replica_dsn)
    assert not _killed_sleeper_lives_on(checked, "podd-test-checked-sleeper", within=15)
    # The control: without the check, the same statement outlives its client.
    unchecked = with_session_bounds(
        replica_dsn,
        connect_timeout=10,
        statement_timeout_ms=60_000,
        lock_timeout_ms=1000,
        keepalives_idle=30,
    )
    try:
        assert _killed_sleeper_lives_on(unchecked, "podd-test-unchecked-sleeper", within=5)
    finally:
        with psycopg.connect(replica_dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'podd-test-unchecked-sleeper'"
            )


def test_a_server_that_cannot_be_reached_gets_no_client_check() -> None:
    """Asked once at start: a server that is down then gets DSNs without the setting
    (an older server would refuse every connection over it)."""
    down = "postgresql://nobody@127.0.0.1:1/none"
    assert "client_connection_check_interval" not in LoaderSettings().session_dsn(down)
