"""Kafka client options from settings, for Faust and for aiokafka, and topic creation."""

from __future__ import annotations

import ssl
from typing import Any

import faust
import structlog
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.helpers import create_ssl_context

from replica_agent.errors import AgentError
from replica_agent.settings import AgentSettings

log = structlog.get_logger("replica_agent.kafka")


def _ssl_context(settings: AgentSettings) -> ssl.SSLContext | None:
    if settings.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    context: ssl.SSLContext = create_ssl_context(
        cafile=str(settings.ssl_cafile) if settings.ssl_cafile else None,
        certfile=str(settings.ssl_certfile) if settings.ssl_certfile else None,
        keyfile=str(settings.ssl_keyfile) if settings.ssl_keyfile else None,
    )
    return context


def faust_credentials(settings: AgentSettings) -> faust.types.auth.CredentialsT | None:
    context = _ssl_context(settings)
    if settings.security_protocol.startswith("SASL"):
        if settings.sasl_username is None or settings.sasl_password is None:
            raise AgentError(f"{settings.security_protocol} needs a SASL username and password")
        return faust.SASLCredentials(
            username=settings.sasl_username,
            password=settings.sasl_password.get_secret_value(),
            ssl_context=context,
            mechanism=settings.sasl_mechanism,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


def aiokafka_options(settings: AgentSettings) -> dict[str, Any]:
    options: dict[str, Any] = {"security_protocol": settings.security_protocol}
    context = _ssl_context(settings)
    if context is not None:
        options["ssl_context"] = context
    if settings.security_protocol.startswith("SASL"):
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_plain_username"] = settings.sasl_username
        options["sasl_plain_password"] = (
            settings.sasl_password.get_secret_value() if settings.sasl_password else None
        )
    return options


def wanted_topics(settings: AgentSettings) -> dict[str, int]:
    """Our four topics and their partition counts."""
    return {
        settings.topic_delta_in: settings.delta_in_partitions,
        settings.topic_delta_in_rs: 1,
        settings.topic_delta_rq: 1,
        settings.topic_delta_rs: 1,
    }


async def ensure_topics(settings: AgentSettings, bootstrap: list[str]) -> list[str]:
    """Create the topics that do not exist; returns the names created."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **aiokafka_options(settings))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [
            NewTopic(name, partitions, settings.topic_replication_factor)
            for name, partitions in wanted_topics(settings).items()
            if name not in existing
        ]
        if missing:
            await admin.create_topics(missing)
            log.info("topics created", topics={t.name: t.num_partitions for t in missing})
        return [t.name for t in missing]
    finally:
        await admin.close()
