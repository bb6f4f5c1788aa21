"""Writers of realistic CDC topics (Qlik Replicate, DataWorks) from a seeded source database,
for the tests, the demo and the benchmark.

Kept apart from `podd_cdc` (they import nothing of it): a test passes only if the readers
understand what these writers write, not because both share a mistake. What the replica must
hold is computed from the raw changes here (`SourceDatabase`), never by the cutter.
"""
