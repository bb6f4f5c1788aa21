"""The replica agent (`replica-agent`): a Faust app on a pure transfer tracker.

`tracker` (framing, dedup, completeness, sequence; no I/O), `staging` (durable chunk bodies
and an outbox of answers), `service` (asyncio, no Faust), `app` (thin Faust agents), settings,
logs, metrics, CLI. Builds on `protocol`, `podd_runtime`, `podd_kafka` and `spark_loader`;
nothing below imports it.
"""
