"""Faust's broker credentials from the shared Kafka settings."""

from __future__ import annotations

import faust

from podd_kafka.client import sasl_login, ssl_context
from replica_agent.settings import AgentSettings


def faust_credentials(settings: AgentSettings) -> faust.types.auth.CredentialsT | None:
    context = ssl_context(settings)
    login = sasl_login(settings)
    if login is not None:
        return faust.SASLCredentials(
            username=login[0], password=login[1], ssl_context=context,
            mechanism=settings.sasl_mechanism,
        )  # fmt: skip
    if context is not None:
        return faust.SSLCredentials(context)
    return None
