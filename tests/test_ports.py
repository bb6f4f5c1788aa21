"""`free_port` hands out ports the kernel never gives to `bind(0)` or an outgoing
connection, so a port picked for a child cannot be taken before the child binds it (an agent
once lost its metrics port to its own Spark accumulator server)."""

from __future__ import annotations

import socket
from contextlib import closing

from podd_runtime.ports import ephemeral_start, free_port


def test_ports_are_below_the_ephemeral_range_and_free() -> None:
    start = ephemeral_start()
    ports = {free_port() for _ in range(50)}
    assert all(20_000 <= port < start for port in ports)
    assert len(ports) > 40  # drawn at random, not the same port each time
    for port in list(ports)[:5]:
        with closing(socket.socket()) as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_in_use_is_never_handed_out() -> None:
    listeners = []
    try:
        for _ in range(200):
            sock = socket.socket()
            sock.bind(("127.0.0.1", free_port()))
            sock.listen()
            listeners.append(sock)
        taken = {sock.getsockname()[1] for sock in listeners}
        assert all(free_port() not in taken for _ in range(500))
    finally:
        for sock in listeners:
            sock.close()


def test_bind_zero_never_returns_a_drawn_port() -> None:
    start = ephemeral_start()
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        assert sock.getsockname()[1] >= start
