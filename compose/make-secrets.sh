#!/bin/sh
# Makes every secret compose.yaml needs, once, with openssl only:
#
#   DIR/secrets/ca.crt, ca.key          a private CA (ca.key never leaves this directory)
#   DIR/secrets/kafka.crt, kafka.key    the broker's certificate (SAN: $KAFKA_HOSTS) and key
#   DIR/secrets/kafka.p12               both, as the PKCS12 keystore the broker reads
#   DIR/secrets/kafka_keystore_creds    the keystore's password
#   DIR/secrets/kafka_jaas.conf         the broker's SASL/PLAIN users: admin, agent, origin
#   DIR/secrets/admin.properties        the admin's client settings (healthcheck, kafka-init)
#   DIR/.env                            POSTGRES_PASSWORD, PODD_AGENT_DB_PASSWORD (the agent's
#                                       database role), SPARK_AUTH_SECRET, PODD_ORIGIN_KEY and
#                                       the agent's and origin's Kafka passwords and
#                                       GRAFANA_ADMIN_PASSWORD, which Compose
#                                       reads itself
#
# DIR is this script's directory unless given. Every password is random. It refuses to
# overwrite: remove DIR/secrets and DIR/.env to make new ones (then `docker compose down -v`:
# the broker's data was made under the old ones).
#
# Modes: the directory is 0700 (nobody else on the host reads it); the files the containers
# read are 0644, since the broker runs as its image's own user and bind-mounted files keep
# the host's owner; ca.key, kafka.key and .env are 0600 and mounted nowhere.
set -eu

dir=${1:-$(dirname "$0")}
hosts=${KAFKA_HOSTS:-kafka}
out="$dir/secrets"
if [ -e "$out" ] || [ -e "$dir/.env" ]; then
    echo "make-secrets: $out or $dir/.env already exists; remove both to make new secrets" >&2
    exit 1
fi
mkdir -p "$out"
chmod 0700 "$out"
umask 0077

random() { openssl rand -hex 24; }
store_password=$(random)
admin_password=$(random)
agent_password=$(random)
origin_password=$(random)
san=$(printf '%s' "$hosts" | tr ',' '\n' | sed 's/^/DNS:/' | paste -sd, -)
first_host=$(printf '%s' "$hosts" | cut -d, -f1)

openssl req -x509 -newkey rsa:3072 -nodes -days 825 -subj "/CN=podd-replica compose CA" \
    -keyout "$out/ca.key" -out "$out/ca.crt" 2>/dev/null
openssl req -newkey rsa:3072 -nodes -subj "/CN=$first_host" \
    -keyout "$out/kafka.key" -out "$out/kafka.csr" 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" >"$out/kafka.ext"
openssl x509 -req -in "$out/kafka.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
    -CAcreateserial -days 825 -extfile "$out/kafka.ext" -out "$out/kafka.crt" 2>/dev/null
openssl pkcs12 -export -in "$out/kafka.crt" -inkey "$out/kafka.key" -certfile "$out/ca.crt" \
    -name kafka -passout "pass:$store_password" -out "$out/kafka.p12"
rm -f "$out/kafka.csr" "$out/kafka.ext" "$out/ca.srl"
printf '%s' "$store_password" >"$out/kafka_keystore_creds"

cat >"$out/kafka_jaas.conf" <<EOF
KafkaServer {
    org.apache.kafka.common.security.plain.PlainLoginModule required
    username="admin"
    password="$admin_password"
    user_admin="$admin_password"
    user_agent="$agent_password"
    user_origin="$origin_password";
};
EOF

cat >"$out/admin.properties" <<EOF
security.protocol=SASL_SSL
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$admin_password";
ssl.truststore.type=PEM
ssl.truststore.location=/etc/kafka/secrets/ca.crt
EOF

cat >"$dir/.env" <<EOF
POSTGRES_PASSWORD=$(random)
PODD_AGENT_DB_PASSWORD=$(random)
SPARK_AUTH_SECRET=$(random)
PODD_ORIGIN_KEY=$(openssl rand -hex 32)
PODD_AGENT_KAFKA_PASSWORD=$agent_password
PODD_ORIGIN_KAFKA_PASSWORD=$origin_password
GRAFANA_ADMIN_PASSWORD=$(random)
EOF

chmod 0644 "$out/ca.crt" "$out/kafka.crt" "$out/kafka.p12" "$out/kafka_keystore_creds" \
    "$out/kafka_jaas.conf" "$out/admin.properties"
echo "make-secrets: wrote $out and $dir/.env"
