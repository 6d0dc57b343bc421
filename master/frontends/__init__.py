"""Front-end processes (`--frontends N`): the process that serves gRPC beside its peers, the
supervisor that starts them, the relay's wire format and the master's end of the relay."""
