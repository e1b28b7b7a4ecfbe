"""High availability (docs/ha.md): a shared store's standby and lease (``lease``), a
node's lifecycle through standby, takeover, replicated turn-taking, fencing and
failback (``lifecycle``, ``failback``). The replication link itself is
:mod:`meshgate.replication`; the witness :mod:`meshgate.witness`."""

from meshgate.ha.lease import LeaseKeeper, Standby
from meshgate.ha.lifecycle import HaLifecycle, NodeControl
from meshgate.ha.state import HaRole, HaState

__all__ = ["HaLifecycle", "HaRole", "HaState", "LeaseKeeper", "NodeControl", "Standby"]
