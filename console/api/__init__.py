"""The REST management API under /api/v1/ (and Prometheus /metrics)."""
