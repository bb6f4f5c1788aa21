"""The origin side of the protocol: a reference PODD driver (`podd-origin`) and the demo.

It builds on `protocol` (framing, workload, messages, gaps) and `podd_kafka` (connections);
the demo (`podd-demo`) also starts the embedded PostgreSQL and reads the replica through
`spark_loader`, and runs the agent as a child process (`podd_runtime`). It knows nothing of
the replica agent's insides, so it can drive any implementation.
"""
