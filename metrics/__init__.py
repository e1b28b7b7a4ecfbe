"""Metrics: every node's model snapshots and events, written to Redis streams."""
