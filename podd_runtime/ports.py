"""A free TCP port on the loopback interface, for the embedded servers and child agents."""

from __future__ import annotations

import socket
from contextlib import closing


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
