"""The journal's segment files as they lie on disk: how they are named and found,
and reading them all back at recovery (a torn tail cut off). Stateless: which
segment holds what live message is the journal's (gateway/store/journal.py)."""

from __future__ import annotations

import logging
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

from gateway.broker.message import Message
from gateway.store.records import replay

log = logging.getLogger("gateway.store.journal")  # its lines are the journal's: same logger name

SEGMENT_SUFFIX = ".log"


def segment_numbers(directory: Path) -> list[int]:
    """The numbers of the segment files in ``directory``, oldest first."""
    return sorted(int(p.stem) for p in directory.glob("*" + SEGMENT_SUFFIX) if p.stem.isdigit())


def segment_path(directory: Path, number: int) -> Path:
    return directory / f"{number:08d}{SEGMENT_SUFFIX}"


@dataclass
class Replayed:
    """What recovery read: the segments found, what is live (by queue key and message
    id: the queue key and the message), and the segment files' total size."""

    segments: list[int]
    live: dict[tuple[str, str], tuple[str, Message]]
    size: int


def replay_segments(directory: Path) -> Replayed:
    """Replay every segment in order, keeping what was added and not removed."""
    live: dict[tuple[str, str], tuple[str, Message]] = {}
    segments = segment_numbers(directory)
    size = 0
    for number in segments:
        path = segment_path(directory, number)
        _replay_segment(path, number, live, last=number == segments[-1])
        size += path.stat().st_size
    return Replayed(segments, live, size)


def _replay_segment(path: Path, number: int, live: dict, last: bool) -> None:
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if not size:
            return
        # Mapped, not read: only the records' own bytes are copied out, so a
        # segment holding a 100 MiB message (or many dead ones) is never all in memory.
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            pos = replay(data, size, number, live)
    if pos < size:
        if last:
            # A torn tail from a crash mid-write: nothing after it was ever acknowledged.
            log.warning("journal %s: truncating %d bytes of torn tail", path.name, size - pos)
            with open(path, "r+b") as f:
                f.truncate(pos)
        else:
            log.error("journal %s: corrupt record at offset %d; skipping the rest of the segment", path.name, pos)
