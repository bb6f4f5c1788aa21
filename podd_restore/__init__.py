"""`podd-restore`: a replica restored from a Prostore backup topic (BACKUP_TO_KAFKA).

Layers: `plan` is pure (increments, completeness, the order of deltas); `scan` reads the
topic (aiokafka); `restore_staging` stages chunk bodies durably and assembles each delta
into the loader's staged-transfer format; `runner` applies deltas through the same
`spark_loader.DeltaLoader` as `delta.in`; `cli` is the console script. It imports
`protocol`, `podd_runtime`, `podd_kafka` and `spark_loader`, never the agent.
"""
