"""The ADQM store: a replica in ClickHouse, laid out as Prostore's ADQM plugin lays out a
datamart (docs/contracts/REPLICA.md, "The ADQM store"), behind the same `Store` and `DeltaWrite`
interface as PostgreSQL (`replica_store.interface`)."""
