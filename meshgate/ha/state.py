"""Where a process stands in high availability (docs/ha.md). ``str`` values: the
status reports them as they are (``ha_state``, ``ha_role`` of model.mesh.Node)."""

from __future__ import annotations

from enum import StrEnum


class HaState(StrEnum):
    STARTING = "starting"
    STANDBY = "standby"  # waiting for the data dir (shared store) or following as the backup (replicated)
    ACTIVE = "active"  # holding the data dir: serving


class HaRole(StrEnum):
    """A member of a replicated pair: serving, or following the serving one."""

    NONE = ""  # not replicated
    PRIMARY = "primary"
    BACKUP = "backup"
