"""The PODD protocol, pure: the bottom layer every other package builds on.

Wire messages (frozen pydantic models) and their `.avsc` schemas, OCF codecs, Prostore types
and a DDL reader, the `delta.in` body decoder, the sequence rules (`sequence`), the gap items
(`gaps`), staged chunk file names (`chunk_files`), the apply semantics as a reference model,
and a seeded workload generator. No Kafka client, no Spark, no database import (a test reads
the imports). `docs/contracts/PROTOCOL.md` is the contract it implements.
"""
