"""compose/'s Kafka: SASL_SSL only, ACLs per principal, secrets made by make-secrets.sh.

No Docker engine runs here: the script runs for real (openssl), and what it makes is
checked against what compose.yaml mounts and what the broker image reads; the ACLs that
kafka-init.sh grants are checked against docs/operator/security.md's table. The clients' TLS
settings meet a real broker in tests/test_kafka_tls.py.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from podd_kafka.settings import KafkaSettings
from replica_agent.settings import default_group_id
from tests.conftest import REPO
from tests.test_compose import load_compose

SCRIPT = REPO / "compose" / "make-secrets.sh"
INIT = REPO / "compose" / "kafka-init.sh"
#: docs/operator/security.md: (principal, operation, resource) a deployment grants.
DOCUMENTED_ACLS = {
    *{("agent", op, f"topic:{t}") for op in ("Read", "Describe") for t in ("delta.in", "delta.rq")},
    *{
        ("agent", op, f"topic:{t}")
        for op in ("Write", "Describe")
        for t in ("delta.in.rs", "delta.rs")
    },
    ("agent", "Read", "group:podd-replica-marketing"),
    *{
        ("origin", op, f"topic:{t}")
        for op in ("Write", "Describe")
        for t in ("delta.in", "delta.rq")
    },
    *{
        ("origin", op, f"topic:{t}")
        for op in ("Read", "Describe")
        for t in ("delta.in.rs", "delta.rs")
    },
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("compose")
    subprocess.run([str(SCRIPT), str(target)], check=True, capture_output=True)
    return target


def _env_file(made: Path) -> dict[str, str]:
    lines = (made / ".env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line)


def _mounted(service: dict[str, Any], compose: dict[str, Any]) -> dict[str, str]:
    """{path in the container: file under compose/} of a service's secrets."""
    found = {}
    for entry in service.get("secrets", ()):
        source = entry if isinstance(entry, str) else entry["source"]
        target = entry if isinstance(entry, str) else entry.get("target", source)
        path = target if target.startswith("/") else f"/run/secrets/{target}"
        found[path] = compose["secrets"][source]["file"]
    return found


def test_the_broker_has_one_protocol_sasl_ssl_and_refuses_what_no_acl_allows(
    compose: dict[str, Any],
) -> None:
    env = compose["services"]["kafka"]["environment"]
    protocols = {
        item.split(":")[1] for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    }
    assert protocols == {"SASL_SSL"}  # clients, the controller and the broker itself
    assert env["KAFKA_ADVERTISED_LISTENERS"].startswith("SASL_SSL://")
    assert env["KAFKA_AUTHORIZER_CLASS_NAME"].endswith("StandardAuthorizer")
    assert env["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    assert env["KAFKA_SUPER_USERS"] == "User:admin"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    # The image refuses to start in KRaft mode without a cluster id (it formats storage).
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", env["CLUSTER_ID"])
    assert env["KAFKA_LOG_DIRS"] == "/var/lib/kafka/data"
    assert "kafka-data:/var/lib/kafka/data" in compose["services"]["kafka"]["volumes"]


def test_every_file_the_broker_image_reads_is_made_and_mounted(
    compose: dict[str, Any], made: Path
) -> None:
    kafka = compose["services"]["kafka"]
    env = kafka["environment"]
    mounted = _mounted(kafka, compose)
    secrets = "/etc/kafka/secrets/"  # where the image looks for the *_FILENAME/_CREDENTIALS
    for key in (
        "KAFKA_SSL_KEYSTORE_FILENAME",
        "KAFKA_SSL_KEYSTORE_CREDENTIALS",
        "KAFKA_SSL_KEY_CREDENTIALS",
    ):
        assert secrets + env[key] in mounted, key
    assert env["KAFKA_SSL_TRUSTSTORE_LOCATION"] in mounted
    jaas = env["KAFKA_OPTS"].split("java.security.auth.login.config=", 1)[1].split()[0]
    assert jaas in mounted
    healthcheck = kafka["healthcheck"]["test"]
    assert healthcheck[healthcheck.index("--command-config") + 1] in mounted
    for path in mounted.values():
        assert (made / path.removeprefix("./")).is_file(), path
    # The keystore opens with the password the image will read, and holds kafka's key.
    store = made / "secrets" / "kafka.p12"
    password = (made / "secrets" / "kafka_keystore_creds").read_text()
    shown = subprocess.run(
        ["openssl", "pkcs12", "-in", str(store), "-passin", f"pass:{password}", "-nodes", "-info"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "PRIVATE KEY" in shown
    assert "CN=kafka" in shown or "CN = kafka" in shown


def _verify_for(secrets: Path, hostname: str) -> subprocess.CompletedProcess[str]:
    """`openssl verify` of the broker's certificate against the CA, for `hostname`."""
    return subprocess.run(
        [
            "openssl",
            "verify",
            "-CAfile",
            str(secrets / "ca.crt"),
            "-verify_hostname",
            hostname,
            str(secrets / "kafka.crt"),
        ],
        check=False,
        capture_output=True,
        text=True,
    )


def test_the_broker_certificate_is_valid_for_its_service_name(made: Path) -> None:
    secrets = made / "secrets"
    verified = _verify_for(secrets, "kafka")
    assert verified.returncode == 0, verified.stderr
    wrong = _verify_for(secrets, "elsewhere")
    assert wrong.returncode != 0


def test_the_users_passwords_agree_everywhere_and_stay_private(made: Path) -> None:
    env = _env_file(made)
    jaas = (made / "secrets" / "kafka_jaas.conf").read_text()
    assert f'user_agent="{env["PODD_AGENT_KAFKA_PASSWORD"]}"' in jaas
    assert f'user_origin="{env["PODD_ORIGIN_KAFKA_PASSWORD"]}"' in jaas
    admin = re.search(r'user_admin="([0-9a-f]+)"', jaas)
    assert admin is not None
    assert f'password="{admin.group(1)}"' in (made / "secrets" / "admin.properties").read_text()
    assert (
        len(
            {
                env["PODD_AGENT_KAFKA_PASSWORD"],
                env["PODD_ORIGIN_KAFKA_PASSWORD"],
                admin.group(1),
                env["POSTGRES_PASSWORD"],
            }
        )
        == 4
    )
    KafkaSettings(origin_key=env["PODD_ORIGIN_KEY"])  # long enough to be accepted

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(made / "secrets") == 0o700
    for private in ("secrets/ca.key", "secrets/kafka.key", ".env"):
        assert mode(made / private) == 0o600, private


def test_the_script_never_overwrites_secrets(made: Path) -> None:
    before = (made / ".env").read_text()
    again = subprocess.run([str(SCRIPT), str(made)], check=False, capture_output=True, text=True)
    assert again.returncode == 1
    assert "already exists" in again.stderr
    assert (made / ".env").read_text() == before


def test_clients_trust_the_ca_and_use_their_own_user(compose: dict[str, Any]) -> None:
    for name, user in (("replica-agent", "agent"), ("origin", "origin")):
        service = compose["services"][name]
        env = service["environment"]
        assert env["PODD_SECURITY_PROTOCOL"] == "SASL_SSL"
        assert env["PODD_SASL_USERNAME"] == user
        assert _mounted(service, compose)[env["PODD_SSL_CAFILE"]] == "./secrets/ca.crt"
    agent = compose["services"]["replica-agent"]
    assert agent["depends_on"]["kafka-init"]["condition"] == "service_completed_successfully"


def _granted() -> set[tuple[str, str, str]]:
    """(principal, operation, resource) from kafka-init.sh's `allow` lines."""
    group = load_compose()["services"]["kafka-init"]["environment"]["PODD_GROUP_ID"]
    granted = set()
    for line in INIT.read_text().splitlines():
        if not line.startswith("allow "):
            continue
        words = shlex.split(line.replace('"$group"', group))[1:]
        principal = words[words.index("--allow-principal") + 1].removeprefix("User:")
        operations = [words[i + 1] for i, w in enumerate(words) if w == "--operation"]
        resources = [
            f"{w.removeprefix('--')}:{words[i + 1]}"
            for i, w in enumerate(words)
            if w in ("--topic", "--group")
        ]
        granted |= {(principal, op, res) for op in operations for res in resources}
    return granted


def test_kafka_init_grants_exactly_the_readmes_acls(compose: dict[str, Any]) -> None:
    assert _granted() == DOCUMENTED_ACLS
    readme = (REPO / "docs" / "operator" / "security.md").read_text()
    assert "| the replica agent | `delta.in`, `delta.rq` | Read, Describe |" in readme
    # The group granted is the agent's own.
    command = [str(c) for c in compose["services"]["replica-agent"]["command"]]
    group = command[command.index("--group-id") + 1]
    assert group == default_group_id(["marketing"]) == "podd-replica-marketing"
    assert compose["services"]["kafka-init"]["environment"]["PODD_GROUP_ID"] == group
    # And it makes the protocol's topics, with the partitions the agent expects.
    made = dict(re.findall(r"^topic (\S+) (\d+)$", INIT.read_text(), re.MULTILINE))
    assert {t: int(n) for t, n in made.items()} == KafkaSettings().wanted_topics()


def test_kafka_init_runs_as_the_admin_against_the_broker(compose: dict[str, Any]) -> None:
    init = compose["services"]["kafka-init"]
    assert init["image"] == compose["services"]["kafka"]["image"]
    assert "./kafka-init.sh:/kafka-init.sh:ro" in init["volumes"]
    assert "/etc/kafka/secrets/admin.properties" in _mounted(init, compose)
    assert init["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert os.access(INIT, os.X_OK)
    checked = subprocess.run(["bash", "-n", str(INIT)], check=False, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
