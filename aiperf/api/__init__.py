"""The master's gRPC API: generated messages/stubs and a typed client.

`aiperf_pb2` / `aiperf_pb2_grpc` are generated from `protos/aiperf.proto` by
`make protos`; do not edit them. `client` wraps them for workers and the CLI.
"""
