"""The CDC origin: Qlik Replicate and DataWorks topics cut into PODD deltas (docs/contracts/CDC.md).

Decoders (`qlik`, `dataworks`) turn a Kafka value into records; the `cutter` decides deltas
from records alone; the `cutlog` makes each cut durable before its first `delta.in`; the
`runner` reads the topics and drives the replica through `origin.session`.
"""
