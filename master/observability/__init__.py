"""The master's Prometheus metrics."""
