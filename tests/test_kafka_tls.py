"""The Kafka clients' TLS settings on a real broker, with compose/make-secrets.sh's CA.

Tansu 0.6 cannot serve TLS itself (its `--cert` and `--key` flags refuse each other), so a
TLS-terminating proxy made from the script's broker certificate and key stands in front of
it, and Tansu advertises the proxy: every connection a client makes (bootstrap and the
broker it is told of) is TLS, verified against the script's CA and host name. SASL cannot
be tried here: Tansu keeps SCRAM users only in storage engines this build lacks.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError

from podd_kafka.broker import embedded_broker
from podd_kafka.client import aiokafka_options, ensure_topics
from podd_kafka.settings import KafkaSettings
from podd_runtime.ports import free_port
from tests.conftest import REPO


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    made = tmp_path_factory.mktemp("compose")
    subprocess.run(
        [str(REPO / "compose" / "make-secrets.sh"), str(made)],
        env={**os.environ, "KAFKA_HOSTS": "localhost"},
        check=True,
        capture_output=True,
    )
    return made / "secrets"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def _tls_proxy(secrets: Path, listen: int, broker: int) -> asyncio.Server:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(secrets / "kafka.crt", secrets / "kafka.key")

    async def relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        broker_r, broker_w = await asyncio.open_connection("127.0.0.1", broker)
        await asyncio.gather(_pipe(client_r, broker_w), _pipe(broker_r, client_w))

    return await asyncio.start_server(relay, "127.0.0.1", listen, ssl=context)


@pytest.fixture(scope="module")
def tls_broker(secrets: Path) -> Iterator[tuple[int, int]]:
    """(Tansu's own port, the TLS proxy's port it advertises as `localhost`)."""
    proxy = free_port()
    with embedded_broker(advertised=f"localhost:{proxy}") as bootstrap:
        yield int(bootstrap.rsplit(":", 1)[1]), proxy


def test_a_client_with_the_scripts_ca_produces_and_consumes_over_tls(
    secrets: Path, tls_broker: tuple[int, int]
) -> None:
    broker, proxy = tls_broker
    settings = KafkaSettings(
        broker=f"kafka://localhost:{proxy}",
        security_protocol="SSL",
        ssl_cafile=secrets / "ca.crt",
        topic_delta_in="tls-delta.in",
    )
    bootstrap = settings.bootstrap_servers()

    async def round_trip() -> tuple[list[str], bytes | None]:
        server = await _tls_proxy(secrets, proxy, broker)
        try:
            created = await ensure_topics(settings, bootstrap)
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **aiokafka_options(settings))
            await producer.start()
            try:
                await producer.send_and_wait("tls-delta.in", b"over tls", partition=0)
            finally:
                await producer.stop()
            consumer = AIOKafkaConsumer(
                "tls-delta.in",
                bootstrap_servers=bootstrap,
                auto_offset_reset="earliest",
                **aiokafka_options(settings),
            )
            await consumer.start()
            try:
                record = await asyncio.wait_for(consumer.getone(), 30)
            finally:
                await consumer.stop()
            return created, record.value
        finally:
            server.close()

    created, value = asyncio.run(round_trip())
    assert "tls-delta.in" in created
    assert value == b"over tls"


def test_a_broker_certificate_from_another_ca_is_refused(
    secrets: Path, tls_broker: tuple[int, int], tmp_path: Path
) -> None:
    broker, proxy = tls_broker
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=another CA",
            "-keyout",
            str(tmp_path / "other.key"),
            "-out",
            str(tmp_path / "other.crt"),
        ],
        check=True,
        capture_output=True,
    )
    settings = KafkaSettings(
        broker=f"kafka://localhost:{proxy}",
        security_protocol="SSL",
        ssl_cafile=tmp_path / "other.crt",
    )

    async def connect() -> None:
        server = await _tls_proxy(secrets, proxy, broker)
        try:
            producer = AIOKafkaProducer(
                bootstrap_servers=settings.bootstrap_servers(),
                request_timeout_ms=5000,
                **aiokafka_options(settings),
            )
            try:
                await producer.start()
            finally:
                await producer.stop()
        finally:
            server.close()

    with pytest.raises(KafkaConnectionError):
        asyncio.run(connect())
