"""The loader: a complete staged transfer → the replica, in one PostgreSQL transaction.

Knows no Kafka. Builds on `protocol` and `podd_runtime`. Holds the staged-transfer format
(`transfer`), the replica store (`store`, REPLICA.md's layout, catalog and registry), the
Spark slice jobs, the apply SQL, a reader of any replica laid out as REPLICA.md says
(`replica_reader`), and the embedded PostgreSQL.
"""
