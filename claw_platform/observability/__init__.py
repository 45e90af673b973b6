"""Traces of runs, Prometheus metrics and structured logs (O4, O5, O6)."""
