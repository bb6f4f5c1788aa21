"""`podd-broker`: the embedded Tansu broker in the foreground, for trying things by hand.

    podd-broker [--port 9092]

It prints its bootstrap address and serves until interrupted (Ctrl-C or SIGTERM). Messages
are kept in memory only: they are gone when it stops. Production uses Apache Kafka.
"""

from __future__ import annotations

import argparse
import signal
import threading
from collections.abc import Sequence
from types import FrameType

from podd_kafka.broker import embedded_broker
from podd_runtime.exit_codes import run_command
from protocol.console import log_to_stderr


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="podd-broker", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9092)
    args = parser.parse_args(argv)
    log_to_stderr()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def serve() -> int:
        with embedded_broker(args.port) as address:
            print(f"kafka://{address} (in memory; Ctrl-C stops it)", flush=True)
            stop.wait()
        return 0

    return run_command("podd-broker", serve)


if __name__ == "__main__":
    raise SystemExit(main())
