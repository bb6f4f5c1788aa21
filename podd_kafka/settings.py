"""Kafka connection settings shared by `replica-agent` and `podd-origin` (`PODD_*` variables).

Both sides name the same four topics, so one set of variables configures a pair of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

Compression = Literal["gzip", "snappy", "lz4", "zstd"]
#: The shortest origin key accepted (a short secret is guessed; 32 random hex is typical).
MIN_KEY_CHARS = 16
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


class KafkaSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PODD_", extra="ignore", populate_by_name=True, hide_input_in_errors=True
    )

    #: Kafka bootstrap servers (`kafka://host:port`, comma-separated); None: embedded Tansu.
    broker: str | None = None
    #: The topic of `delta.in` (a delta's chunks); a set of four topics per datamart, or shared.
    topic_delta_in: str = "delta.in"
    #: The topic of `delta.in.rs` (the outcome of a transfer).
    topic_delta_in_rs: str = "delta.in.rs"
    #: The topic of `delta.rq` (the origin asks the replica's state).
    topic_delta_rq: str = "delta.rq"
    #: The topic of `delta.rs` (the replica's state).
    topic_delta_rs: str = "delta.rs"
    #: Partitions of `delta.in` when it is created here (the others get one).
    delta_in_partitions: int = Field(default=4, ge=1)
    #: The replication factor of the topics created here.
    topic_replication_factor: int = Field(default=1, ge=1)
    #: How long a consumer's fetch may wait for data on the broker (latency-bound readers:
    #: the agent's `delta.in`/`delta.rq`, the origin's answers). Measured: Faust's fixed
    #: 1,500 ms held a 1-row delta's chunks 0.55 s on the way to the agent; 20 ms, 0.02 s.
    #: This wait holds while messages flow (and for a second after the last one).
    fetch_max_wait_ms: int = Field(default=20, ge=1, le=30_000)
    #: The fetch wait once a consumer has been quiet for a second (`podd_kafka.fetch_pace`):
    #: idle polling at 20 ms cost an agent, an origin and Tansu 0.21 CPU-s a second, at
    #: 200 ms 0.05. On Tansu the first message after a quiet spell may wait this long; on
    #: Apache Kafka, which answers a waiting fetch when data arrives, 500 costs nothing.
    #: Equal to `fetch_max_wait_ms`: no pacing.
    fetch_idle_wait_ms: int = Field(default=200, ge=1, le=30_000)
    #: The most a Kafka record batch may decompress to in any consumer here; a batch beyond
    #: it (or corrupt, or in a codec not read) is skipped whole (`podd_kafka.batch_guard`).
    max_batch_decoded_mib: float = Field(default=256, gt=0)
    #: The codec of the record batches this side produces (None: uncompressed).
    compression_type: Compression | None = None
    #: The secret shared by a replica and its origins: every protocol message is signed with
    #: it and only signed ones are read (`protocol.signing`). None: nothing signed.
    origin_key: SecretStr | None = None
    #: The key being rotated out: still accepted on what is read, never used to sign.
    origin_key_previous: SecretStr | None = None
    #: How clients connect to Kafka: `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`.
    security_protocol: SecurityProtocol = "PLAINTEXT"
    #: The SASL mechanism, with `sasl_username` and `sasl_password`.
    sasl_mechanism: SaslMechanism = "PLAIN"
    #: The SASL user.
    sasl_username: str | None = None
    #: The SASL password (never logged).
    sasl_password: SecretStr | None = None
    #: The CA certificate that signed the brokers' (PEM); unset: the system's.
    ssl_cafile: Path | None = None
    #: This client's certificate (PEM), for brokers that ask for one.
    ssl_certfile: Path | None = None
    #: This client's private key (PEM).
    ssl_keyfile: Path | None = None

    @field_validator("origin_key", "origin_key_previous")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_KEY_CHARS:
            raise ValueError(f"origin_key must be at least {MIN_KEY_CHARS} characters")
        return value

    def signing_secret(self) -> bytes | None:
        return None if self.origin_key is None else self.origin_key.get_secret_value().encode()

    def previous_secret(self) -> bytes | None:
        """The key being rotated out (accepted only while a key is set)."""
        key = self.origin_key_previous
        return None if key is None or self.origin_key is None else key.get_secret_value().encode()

    def bootstrap_servers(self, embedded: str | None = None) -> list[str]:
        """`host:port` items, from `broker` or the embedded broker's address."""
        source = self.broker or embedded
        if not source:
            return []
        return [
            item.strip().removeprefix("kafka://")
            for item in source.replace(";", ",").split(",")
            if item.strip()
        ]

    def topic_environment(self) -> dict[str, str]:
        """The four topic names as the `PODD_TOPIC_*` variables a child process reads."""
        return {
            "PODD_TOPIC_DELTA_IN": self.topic_delta_in,
            "PODD_TOPIC_DELTA_IN_RS": self.topic_delta_in_rs,
            "PODD_TOPIC_DELTA_RQ": self.topic_delta_rq,
            "PODD_TOPIC_DELTA_RS": self.topic_delta_rs,
        }

    def wanted_topics(self) -> dict[str, int]:
        """The protocol's four topics and their partition counts."""
        return {
            self.topic_delta_in: self.delta_in_partitions,
            self.topic_delta_in_rs: 1,
            self.topic_delta_rq: 1,
            self.topic_delta_rs: 1,
        }
