#!/bin/bash
# Run once by compose.yaml's `kafka-init` (as the broker's admin) before the agent and the
# origin start: creates the protocol's four topics and grants each principal only what
# docs/operator/security.md's table says it needs. The broker refuses everything else
# (allow.everyone.if.no.acl.found=false), so the agent cannot write `delta.in` and an
# origin cannot write answers. Safe to run again.
set -euo pipefail

bootstrap=${KAFKA_BOOTSTRAP:-kafka:9092}
config=/etc/kafka/secrets/admin.properties
group=${PODD_GROUP_ID:-podd-replica-marketing}
bin=/opt/kafka/bin

topic() {
    "$bin/kafka-topics.sh" --bootstrap-server "$bootstrap" --command-config "$config" \
        --create --if-not-exists --topic "$1" --partitions "$2" --replication-factor 1
}

allow() {
    "$bin/kafka-acls.sh" --bootstrap-server "$bootstrap" --command-config "$config" --add "$@"
}

topic delta.in 4
topic delta.in.rs 1
topic delta.rq 1
topic delta.rs 1

allow --allow-principal User:agent --operation Read --operation Describe --topic delta.in --topic delta.rq
allow --allow-principal User:agent --operation Write --operation Describe --topic delta.in.rs --topic delta.rs
allow --allow-principal User:agent --operation Read --group "$group"
allow --allow-principal User:origin --operation Write --operation Describe --topic delta.in --topic delta.rq
allow --allow-principal User:origin --operation Read --operation Describe --topic delta.in.rs --topic delta.rs
