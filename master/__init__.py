"""Master service: gRPC API, SQL store, run lifecycle, scoring."""
