"""The replica store: a replica's layout, catalog and registry, the statements that apply a
delta, ownership of a datamart, and the embedded PostgreSQL.

Knows no Kafka and no Spark. Builds on `protocol` and `podd_runtime`. Holds the
staged-transfer format (`transfer`: chunk files and manifest, the truth after a crash beside
the registry), the store (`store`, REPLICA.md's layout), the statements of both dialects,
the delta's transaction, a reader of any replica laid out as REPLICA.md says
(`replica_reader`), and the embedded PostgreSQL (`embedded_pg`).
"""
