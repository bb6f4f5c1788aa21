"""One writer per datamart, on a real PostgreSQL: a second holder is refused by name, the
hold survives a lost session, and a hold taken over meanwhile is reported lost."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from podd_runtime.errors import DirectoryInUseError
from replica_store.errors import DatamartInUseError, OwnershipLostError
from replica_store.ownership import DatamartOwnership, owner_key, session_name


def name() -> str:
    return f"own_{uuid.uuid4().hex[:8]}"


def terminate(dsn: str, role: str) -> int:
    """End the sessions of `role`'s holder, as a failover or an administrator would."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s",
            (f"podd:% {role} on %",),
        ).fetchall()
    return len(rows)


def test_a_second_holder_of_a_datamart_is_refused_naming_the_first(replica_dsn: str) -> None:
    shared, other = name(), name()
    with DatamartOwnership(replica_dsn, [shared], None, "agent-a"):
        second = DatamartOwnership(replica_dsn, [other, shared], None, "agent-b")
        with pytest.raises(DatamartInUseError, match=rf"{shared} is already written by agent-a"):
            second.acquire()
        # refused whole: the datamart it could take is not kept either
        with DatamartOwnership(replica_dsn, [other], None, "agent-c"):
            pass
    with DatamartOwnership(replica_dsn, [shared], None, "agent-b"):
        pass  # free once the first let go


def test_a_shared_staging_directory_is_refused_naming_its_holder(
    replica_dsn: str, tmp_path: Path
) -> None:
    lock = tmp_path / "staging" / ".owner"
    with (
        DatamartOwnership(replica_dsn, [name()], lock, "agent-a"),
        pytest.raises(DirectoryInUseError, match=r"in use by agent-a on .* pid"),
    ):
        DatamartOwnership(replica_dsn, [name()], lock, "agent-b").acquire()
    with DatamartOwnership(replica_dsn, [name()], lock, "agent-b"):
        pass


def test_a_killed_holder_leaves_no_stale_lock(replica_dsn: str, tmp_path: Path) -> None:
    """kill -9 of the holder: the kernel drops its flock, the server its session's lock."""
    datamart, lock = name(), tmp_path / ".owner"
    code = (
        "import sys, time\n"
        "from replica_store.ownership import DatamartOwnership\n"
        f"held = DatamartOwnership({replica_dsn!r}, [{datamart!r}], __import__('pathlib')"
        f".Path({str(lock)!r}), 'doomed')\n"
        "held.acquire()\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert child.stdout is not None
    assert child.stdout.readline() == b"held\n"
    with pytest.raises(DatamartInUseError, match="doomed"):
        DatamartOwnership(replica_dsn, [datamart], None, "next").acquire()
    child.kill()
    child.wait(10)
    with DatamartOwnership(replica_dsn, [datamart], lock, "next"):
        pass


def test_a_lost_session_is_taken_again_and_a_hold_taken_over_is_reported_lost(
    replica_dsn: str,
) -> None:
    datamart = name()
    role_a, role_b = f"a-{datamart}", f"b-{datamart}"
    held = DatamartOwnership(replica_dsn, [datamart], None, role_a)
    held.acquire()
    try:
        held.check()  # nothing lost: nothing to do
        assert terminate(replica_dsn, role_a) == 1
        held.check()  # the session ended; nobody took the datamart: held again
        with pytest.raises(DatamartInUseError, match=role_a):
            DatamartOwnership(replica_dsn, [datamart], None, role_b).acquire()

        assert terminate(replica_dsn, role_a) == 1
        with (
            DatamartOwnership(replica_dsn, [datamart], None, role_b),
            pytest.raises(OwnershipLostError, match=f"already written by {role_b}"),
        ):
            held.check()
    finally:
        held.release()


def test_sessions_the_last_holder_of_the_staging_root_left_are_ended_at_start(
    replica_dsn: str, tmp_path: Path
) -> None:
    """A host that died keeps its sessions (and their locks) on the server until keepalives
    give up; a process restarted on its staging root ends them instead of waiting on them.
    The leftover session here carries the token the dead holder wrote in the lock file."""
    datamart, lock = name(), tmp_path / ".owner"
    with DatamartOwnership(replica_dsn, [name()], lock, "earlier") as earlier:
        token = earlier.token
    assert f"token {token}" in lock.read_text()
    leftover = psycopg.connect(
        replica_dsn, autocommit=True, application_name=session_name(token, "earlier")
    )
    try:
        leftover.execute("SELECT pg_advisory_lock(%s)", (owner_key(datamart),))
        with DatamartOwnership(replica_dsn, [datamart], lock, "restarted") as restarted:
            assert restarted.token != token
            with pytest.raises(psycopg.OperationalError):
                leftover.execute("SELECT 1")  # ended by the server
    finally:
        leftover.close()


def test_a_live_holder_named_like_this_process_is_never_ended(
    replica_dsn: str, tmp_path: Path
) -> None:
    """Two processes with host networking, both pid 1 in their containers, had the same
    `... on <host> pid 1` session name: the later one took the other's sessions for its own
    earlier run's and ended them, taking over a datamart that was being written. Sessions are
    now told apart by a random token, whatever their host, pid or name."""
    datamart = name()
    same_name = f"replica-agent on {socket.gethostname()} pid {os.getpid()}"
    live = psycopg.connect(replica_dsn, autocommit=True, application_name=same_name)
    try:
        live.execute("SELECT pg_advisory_lock(%s)", (owner_key(datamart),))
        with pytest.raises(DatamartInUseError, match="already written by replica-agent on"):
            DatamartOwnership(
                replica_dsn, [datamart], tmp_path / ".owner", "replica-agent"
            ).acquire()
        live.execute("SELECT 1")  # still alive
    finally:
        live.close()


def test_the_token_is_never_cut_from_a_long_session_name() -> None:
    token = "0123456789abcdef"
    named = session_name(token, "replica-agent " + "x" * 200)
    assert named.startswith(f"podd:{token} replica-agent ")
    assert len(named.encode()) <= 63
