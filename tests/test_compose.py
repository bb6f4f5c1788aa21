"""compose/ cannot run here (no Docker engine): check that it is a deployment that could.

Every command a service runs is either an entry point of this project, parsed by that
command's own parser and turned into its settings with the service's environment, or Spark's
`spark-class` from the pyspark wheel the image installs. Host names point at services.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
import yaml
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from origin import cli as origin_cli
from protocol.schema import LogicalSchema
from replica_agent import cli as agent_cli
from replica_store.embedded_pg import psql_binary
from replica_store.store import ReplicaStore
from tests.conftest import REPO

COMPOSE = REPO / "compose" / "compose.yaml"
DOCKERFILE = REPO / "compose" / "Dockerfile"
_VARIABLE = re.compile(r"\$\{(\w+)(?::?([-?])([^}]*))?\}")


def _interpolate(match: re.Match[str]) -> str:
    """`${VAR:-default}` is its default (the user set nothing); `${VAR:?msg}` a secret."""
    return match.group(3) if match.group(2) == "-" else "compose-test-secret-of-32-chars"


def load_compose() -> dict[str, Any]:
    """The file with `${VAR...}` interpolated as Compose would, given only the secrets."""
    text = _VARIABLE.sub(_interpolate, COMPOSE.read_text())
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


def scripts() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    return dict(project["project"]["scripts"])


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    return dict(load_compose()["services"])


def test_the_deployment_has_every_part(services: dict[str, Any]) -> None:
    assert set(services) == {
        "kafka",
        "kafka-init",
        "postgres",
        "spark-master",
        "spark-worker",
        "replica-agent",
        "origin",
        "prometheus",
        "grafana",
    }
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:")  # the official image
    assert "controller" in kafka["environment"]["KAFKA_PROCESS_ROLES"]  # KRaft, no ZooKeeper
    assert services["postgres"]["image"].startswith("postgres:")
    declared = set(load_compose()["volumes"])
    for name, service in services.items():
        for dependency in service.get("depends_on", ()):
            assert dependency in services, f"{name} depends on unknown {dependency}"
        for volume in service.get("volumes", ()):
            source = volume.split(":")[0]
            if source.startswith("./"):  # a bind mount of a file of compose/
                assert (COMPOSE.parent / source).is_file(), f"{name}: no {source}"
            else:
                assert source in declared, f"{name}: undeclared volume {volume}"


def test_the_image_holds_every_package_and_spark(services: dict[str, Any]) -> None:
    text = DOCKERFILE.read_text()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = [p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]]
    assert "podd_runtime" in packages
    for package in packages:
        assert (REPO / package / "__init__.py").exists()
        assert f"COPY {package} {package}" in text
    # Nothing the wheel does not ship (the benchmarks, the tests) goes into the image.
    copied = {line.split()[1] for line in text.splitlines() if line.startswith("COPY ")}
    assert copied - {"pyproject.toml", "examples"} == set(packages)
    assert "openjdk-17" in text
    for name in ("spark-master", "spark-worker", "replica-agent", "origin"):
        assert services[name]["build"]["dockerfile"] == "compose/Dockerfile"


def _environment(monkeypatch: pytest.MonkeyPatch, service: dict[str, Any]) -> None:
    for key in [k for k in os.environ if k.startswith("PODD_")]:
        monkeypatch.delenv(key)
    for key, value in (service.get("environment") or {}).items():
        monkeypatch.setenv(key, str(value))


def _in_image(path: str) -> None:
    """A path under /app/ that the image copies from the repository."""
    assert path.startswith("/app/"), path
    assert (REPO / path.removeprefix("/app/")).is_file(), f"{path} is not in the image"


def test_the_agent_runs_with_valid_flags_against_the_services(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    service = services["replica-agent"]
    command = [str(c) for c in service["command"]]
    assert command[0] in scripts()
    _environment(monkeypatch, service)
    args = agent_cli.build_parser().parse_args(command[1:])
    settings = agent_cli.settings_from(args)
    assert args.command == "run"
    assert settings.datamart == ["marketing"]
    for path in settings.schema_file:
        _in_image(str(path))
    assert urlsplit(settings.broker or "").hostname in services
    assert urlsplit(settings.spark_master).hostname in services
    assert settings.replica_dsn is not None
    assert urlsplit(settings.replica_dsn.get_secret_value()).hostname in services
    assert settings.spark_conf["spark.driver.host"] == "replica-agent"
    # Executors read staged chunks and the passfile at the agent's path, on a shared volume;
    # the agent's other data stays its own.
    staging = f"podd-staging:{settings.staging_path}"
    assert staging in service["volumes"]
    assert staging in services["spark-worker"]["volumes"]
    assert not any(v.startswith("podd-data:") for v in services["spark-worker"]["volumes"])
    assert settings.spark_master == services["spark-worker"]["command"][2]
    assert settings.spark_conf["spark.executor.memory"] == "2g"
    assert str(settings.metrics_port) in service["ports"][0]
    assert settings.origin_key is not None  # only signed messages are read
    assert settings.security_protocol == "SASL_SSL"
    assert settings.sasl_username == "agent"
    assert settings.sasl_password is not None


def test_nothing_without_authentication_is_published_beyond_the_host(
    services: dict[str, Any],
) -> None:
    published = [p for s in services.values() for p in s.get("ports", ())]
    assert published
    assert all(str(p).startswith("127.0.0.1:") for p in published), published


def test_the_origin_runs_with_valid_flags(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    service = services["origin"]
    command = [str(c) for c in service["command"]]
    assert command[0] in scripts()
    _environment(monkeypatch, service)
    args = origin_cli.build_parser().parse_args(command[1:])
    settings = origin_cli.settings_from(args)
    assert args.command == "run"
    assert urlsplit(settings.broker or "").hostname in services
    assert settings.schema_file is not None
    _in_image(str(settings.schema_file))
    assert settings.datamart == "marketing"
    assert settings.state_timeout_seconds == 60
    assert settings.origin_key is not None  # it signs what it sends
    assert settings.security_protocol == "SASL_SSL"
    assert settings.sasl_username == "origin"


def test_spark_runs_from_the_wheels_spark_class(services: dict[str, Any]) -> None:
    import pyspark  # noqa: PLC0415

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    assert spark_class.exists()
    master = services["spark-master"]["command"]
    worker = services["spark-worker"]["command"]
    assert master[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    assert worker[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    assert urlsplit(worker[2]).hostname == "spark-master"
    assert urlsplit(worker[2]).port == int(master[master.index("--port") + 1])
    resources = services["spark-worker"]["environment"]
    assert resources["SPARK_WORKER_CORES"] == "2"  # defaults a user overrides by variable
    assert resources["SPARK_WORKER_MEMORY"] == "4g"


def test_long_running_services_restart_and_the_image_runs_unprivileged(
    services: dict[str, Any],
) -> None:
    for name in ("kafka", "postgres", "spark-master", "spark-worker", "replica-agent"):
        assert services[name].get("restart") == "unless-stopped", name
    users = [
        line.split()[1] for line in DOCKERFILE.read_text().splitlines() if line.startswith("USER ")
    ]
    assert users
    assert users[-1] not in ("root", "0")


def test_spark_joins_only_with_the_clusters_secret(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "-Dspark.authenticate.secret=compose-test-secret-of-32-chars"
    for name, variable in (
        ("spark-master", "SPARK_MASTER_OPTS"),
        ("spark-worker", "SPARK_WORKER_OPTS"),
    ):
        options = services[name]["environment"][variable]
        assert "-Dspark.authenticate=true" in options
        assert secret in options
    service = services["replica-agent"]
    _environment(monkeypatch, service)
    command = [str(c) for c in service["command"]]
    settings = agent_cli.settings_from(agent_cli.build_parser().parse_args(command[1:]))
    assert settings.spark_conf["spark.authenticate"] == "true"
    assert settings.spark_conf["spark.authenticate.secret"] == secret.split("=", 1)[1]


def test_the_agents_database_role_owns_the_replica_and_is_no_superuser(
    services: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    replica_dsn: str,
    marketing: LogicalSchema,
) -> None:
    """postgres-init.sh, run as the postgres image runs it, on the test PostgreSQL: the
    role it makes is the agent's DSN's user, and the agent's store is made by it."""
    service = services["replica-agent"]
    dsn = urlsplit(service["environment"]["PODD_REPLICA_DSN"])
    assert dsn.username == "podd_agent"
    assert services["postgres"]["environment"]["POSTGRES_USER"] != dsn.username
    psql = psql_binary()
    if psql is None:
        pytest.skip("no psql here")
    role, database = f"podd_agent_{uuid.uuid4().hex[:8]}", f"replica_{uuid.uuid4().hex[:8]}"
    admin = conninfo_to_dict(replica_dsn)
    with psycopg.connect(replica_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    try:
        env = {
            **os.environ,
            "PATH": f"{Path(psql).parent}:{os.environ['PATH']}",
            "PGHOST": str(admin.get("host", "")),
            "PGPORT": str(admin.get("port", "")),
            "PGPASSWORD": str(admin.get("password", "")),
            "POSTGRES_USER": str(admin["user"]),
            "POSTGRES_DB": database,
            "PODD_AGENT_DB_PASSWORD": "agent-password-1234",
            "PODD_AGENT_DB_ROLE": role,
        }
        done = subprocess.run(
            ["bash", str(REPO / "compose" / "postgres-init.sh")],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        agent_dsn = make_conninfo(
            replica_dsn, user=role, password="agent-password-1234", dbname=database
        )
        with psycopg.connect(agent_dsn) as conn:
            row = conn.execute(
                "SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles "
                "WHERE rolname = current_user"
            ).fetchone()
        assert row == (False, False, False)
        ReplicaStore(agent_dsn).ensure(marketing)  # every table, function and schema it needs
    finally:
        with psycopg.connect(replica_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')
