"""aiokafka options from `KafkaSettings`, and creation of the protocol's topics."""

from __future__ import annotations

import ssl
from typing import Any

import structlog
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.helpers import create_ssl_context

from podd_kafka.errors import BrokerError
from podd_kafka.settings import KafkaSettings

log = structlog.get_logger("podd_kafka")


def ssl_context(settings: KafkaSettings) -> ssl.SSLContext | None:
    if settings.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    context: ssl.SSLContext = create_ssl_context(
        cafile=str(settings.ssl_cafile) if settings.ssl_cafile else None,
        certfile=str(settings.ssl_certfile) if settings.ssl_certfile else None,
        keyfile=str(settings.ssl_keyfile) if settings.ssl_keyfile else None,
    )
    return context


def sasl_login(settings: KafkaSettings) -> tuple[str, str] | None:
    """(username, password) when the protocol is SASL; refuses a half-configured login."""
    if not settings.security_protocol.startswith("SASL"):
        return None
    if settings.sasl_username is None or settings.sasl_password is None:
        raise BrokerError(f"{settings.security_protocol} needs a SASL username and password")
    return settings.sasl_username, settings.sasl_password.get_secret_value()


def aiokafka_options(settings: KafkaSettings) -> dict[str, Any]:
    """Keyword arguments for any aiokafka client: security protocol, TLS, SASL."""
    options: dict[str, Any] = {"security_protocol": settings.security_protocol}
    context = ssl_context(settings)
    if context is not None:
        options["ssl_context"] = context
    login = sasl_login(settings)
    if login is not None:
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_plain_username"], options["sasl_plain_password"] = login
    return options


async def ensure_topics(settings: KafkaSettings, bootstrap: list[str]) -> list[str]:
    """Create the protocol's topics that do not exist; returns the names created."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **aiokafka_options(settings))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [
            NewTopic(name, partitions, settings.topic_replication_factor)
            for name, partitions in settings.wanted_topics().items()
            if name not in existing
        ]
        if missing:
            await admin.create_topics(missing)
            log.info("topics created", topics={t.name: t.num_partitions for t in missing})
        return [t.name for t in missing]
    finally:
        await admin.close()


async def partition_count(
    settings: KafkaSettings, bootstrap: list[str], topic: str, *, create_with: int | None = None
) -> int | None:
    """How many partitions `topic` has (None: it does not exist). With `create_with`, a
    missing topic is first created with that many partitions (never auto-created)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **aiokafka_options(settings))
    await admin.start()
    try:
        if create_with is not None and topic not in set(await admin.list_topics()):
            await admin.create_topics(
                [NewTopic(topic, create_with, settings.topic_replication_factor)]
            )
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    found = [t for t in described if t.get("topic") == topic and not t.get("error_code")]
    return len(found[0]["partitions"]) if found and found[0].get("partitions") else None
