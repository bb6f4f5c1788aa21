"""A protocol conformance harness (`podd-conformance`): named scenarios that drive any
replica agent over Kafka as an origin would, and judge its answers (and, given the replica's
DSN, its tables) against PROTOCOL.md, REPLICA.md and the reference model of `protocol`.
"""
