"""The origin side of the protocol: a reference PODD driver (`podd-origin`).

It builds on `protocol` (framing, workload, messages) and `podd_kafka` (connections); it
knows nothing of the replica agent's insides, so it can drive any implementation.
"""
