"""Message forges: what a hostile or broken peer sends, made by hand so that the harness,
the reliability runs and the tests can send it. `hostile`: malformed `delta.in`/`delta.rq`
messages of every kind; `ocf`: Avro containers built byte by byte (bad headers, bad blocks,
foreign codecs); `raw_batches`: Kafka record batches broken below the client."""
