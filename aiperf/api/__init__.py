"""The master's gRPC API and its Python clients: the one part of `aiperf` with I/O.

The rest of `aiperf` is pure; this package talks to the network and runs
threads. `aiperf_pb2` / `aiperf_pb2_grpc` are generated from
`protos/aiperf.proto` by `make protos`; do not edit them. `client` holds the
wire-level clients for workers and the CLI, `stream` the Connect multiplexer they
send heartbeats and progress reports on, `calls` their shared error and retry
rule, `enums` the lower-case names of the API's enums. Protobuf stops here: `session`
answers a worker with the plain records of `records` (converted by `wire`), and `views`
turns the control replies into the JSON-ready dicts the CLI reads.
"""
