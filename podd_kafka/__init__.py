"""Kafka plumbing shared by the replica agent and the origin side: connection settings,
aiokafka options, topic creation, and the embedded Tansu broker. Builds on `protocol` and
`podd_runtime` only; neither Faust nor Spark is imported here.
"""
