"""What the doctor's finding kinds share (management/doctor.py and its siblings): how a
finding is made, and durations and requests as the findings show them."""

from __future__ import annotations

from typing import Any

import msgspec

from model.diagnosis import Finding, NodeFactSheet, Severity
from model.durations import spoken as duration
from model.requests import Request


def new_finding(kind: str, severity: Severity, sheet: NodeFactSheet, vhost: str, subject: str, summary: str,
                 evidence: str, explanation: str, keys: list[str], remedy) -> Finding:
    return Finding(id=f"{kind}/{sheet.node[:8]}/{vhost}/{subject}", kind=kind, severity=severity, node=sheet.node,
                   node_name=sheet.name, vhost=vhost, subject=subject, summary=summary, evidence=evidence,
                   explanation=explanation, config_keys=keys, remedy=remedy)


def as_json(request: Request) -> dict[str, Any]:
    encoded = msgspec.to_builtins(request)
    return {key: value for key, value in encoded.items() if value is not None}


def quoted(values: list[str]) -> str:
    return "[" + ", ".join(f'"{value}"' for value in values) + "]"


def age(milliseconds: int | None) -> str:
    return duration((milliseconds or 0) / 1000.0)


def vhost_option(vhost: str) -> str:
    """The CLI's ``--vhost`` option for a vhost other than the default one."""
    return "" if vhost == "/" else f" --vhost {vhost}"
