"""The Spark side of a load: a complete staged transfer → executors decode its chunks and keep
the last row per key → binary COPY into the store's staging → the store applies it.

Knows no Kafka. Builds on `protocol`, `podd_runtime` and `replica_store`.
"""
