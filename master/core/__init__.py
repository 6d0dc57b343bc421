"""The master's logic: the Master, the rules a run is checked and scored by, workers'
heartbeats, identities and budgets, retention, audits, listings, and the progress writer.
No protobuf and no SQL: requests come in as plain types, the store is an interface."""
