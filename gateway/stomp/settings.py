"""The STOMP listener's settings (the ``[stomp]`` table): frame limits, heart-beats,
the connection cap and how long a persistent producer may wait for store room. Apart
from the protocol so that the parts it hands them to (CONNECT, flow control) need not
import it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StompSettings:
    max_frame_size: int = 100 * 1024 * 1024  # ActiveMQ's maxFrameSize
    max_headers: int = 1000
    max_header_length: int = 10240
    heartbeat_send_ms: int = 10000
    heartbeat_receive_ms: int = 10000
    heartbeat_grace: float = 1.5
    max_connections: int = 100000
    no_space_fail_after_ms: int = 0  # a persistent producer waiting for store room this long gets an ERROR
