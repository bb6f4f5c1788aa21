"""`podd-broker` serves the embedded Tansu in the foreground until told to stop."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

from podd_kafka.client import ensure_topics
from podd_kafka.settings import KafkaSettings
from podd_runtime.ports import free_port


def test_the_broker_serves_until_sigterm() -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "podd_kafka.cli", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(f"kafka://127.0.0.1:{port}")
        created = asyncio.run(ensure_topics(KafkaSettings(), [f"127.0.0.1:{port}"]))
        assert "delta.in" in created
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
