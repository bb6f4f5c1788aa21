"""Faust's Kafka side: broker credentials, and a consumer whose fetch wait is paced."""

from __future__ import annotations

from typing import Any

import aiokafka
import faust
from faust.transport.drivers import aiokafka as faust_kafka

from podd_kafka.client import sasl_login, ssl_context
from podd_kafka.fetch_pace import FetchPace
from replica_agent.settings import AgentSettings


def faust_credentials(settings: AgentSettings) -> faust.types.auth.CredentialsT | None:
    context = ssl_context(settings)
    login = sasl_login(settings)
    if login is not None:
        return faust.SASLCredentials(
            username=login[0],
            password=login[1],
            ssl_context=context,
            mechanism=settings.sasl_mechanism,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


def consumer_transport(pace: FetchPace) -> type[faust_kafka.Transport]:
    """Faust's aiokafka transport, its consumer's fetch wait set by `pace`.

    Faust builds its consumer with `fetch_max_wait_ms=1500` and no setting to change it;
    a delta's chunks then waited up to that long on the way in. The consumer is attached
    to `pace` before it starts (it builds its fetcher from the wait at start)."""

    class ConsumerThread(faust_kafka.AIOKafkaConsumerThread):
        def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
            consumer = super()._create_worker_consumer(transport)
            pace.attach(consumer)
            return consumer

    class FetchWaitConsumer(faust_kafka.Consumer):
        def _new_consumer_thread(self) -> faust_kafka.AIOKafkaConsumerThread:
            return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    class Transport(faust_kafka.Transport):
        Consumer = FetchWaitConsumer

    return Transport
