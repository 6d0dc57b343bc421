"""The master's gRPC edge: the servicers, protobuf <-> plain-type conversions, the bearer-token
check and the server every worker and operator reaches. Protobuf stops here."""
