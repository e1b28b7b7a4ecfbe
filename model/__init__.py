"""The typed model of the mesh, shared by every reader and writer: the nodes,
the management plane, the metrics streams, the console and the pipeline.

Plain msgspec structs with no dependency on Twisted or the broker, so Django and
PySpark import it as they are. JSON everywhere; docs/management.md lists every
field and its unit."""

from model.mesh import (
    SCHEMA_VERSION,
    Addresses,
    ChannelSummary,
    ClusterView,
    Connection,
    Link,
    MetricsStatus,
    Node,
    NodeSummary,
    PartialQueue,
    QueueSummary,
    RemoteDemand,
    Snapshot,
    Standby,
    TopicSubscription,
)

__all__ = [
    "SCHEMA_VERSION",
    "Addresses",
    "ChannelSummary",
    "ClusterView",
    "Connection",
    "Link",
    "MetricsStatus",
    "Node",
    "NodeSummary",
    "PartialQueue",
    "QueueSummary",
    "RemoteDemand",
    "Snapshot",
    "Standby",
    "TopicSubscription",
]
