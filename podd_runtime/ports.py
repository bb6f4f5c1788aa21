"""A free TCP port on the loopback interface, for the embedded servers and child agents.

The port is handed to another process, which binds it later. Between the two, any socket
the kernel gives an ephemeral port to (a client's connection, or a server bound to port 0
such as Spark's accumulator server in the agent itself) could take it, and the later bind
fails. So the port is drawn at random from below the kernel's ephemeral range, which
`bind(0)` and `connect` never hand out, and checked free by binding it once.
"""

from __future__ import annotations

import errno
import random
import socket
from contextlib import closing
from pathlib import Path

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Where the draw begins: above the registered ports most services listen on.
_LOWEST = 20_000
_ATTEMPTS = 200


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where unreadable)."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port() -> int:
    """A port below the ephemeral range that nothing listens on now; an ephemeral one if
    none of `_ATTEMPTS` draws is free (or the range starts too low to draw from)."""
    highest = ephemeral_start() - 1
    draw = random.SystemRandom()
    if highest > _LOWEST:
        for _ in range(_ATTEMPTS):
            port = draw.randint(_LOWEST, highest)
            if _bindable(port):
                return port
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bindable(port: int) -> bool:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
        return True
