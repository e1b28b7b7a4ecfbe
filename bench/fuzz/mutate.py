"""Mutations of valid frames, and the random cutting of a byte stream into writes.

Every choice comes from the ``random.Random`` passed in, so a case is the same
bytes for the same seed. Sizes stay bounded (a mutated frame is at most
``MAX_GROWTH`` bytes longer than its original): "huge" is what a length field
claims, never what is sent."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence

MAX_GROWTH = 64 * 1024
# Values that tend to sit on a boundary of some length, count or index check.
INTERESTING_INTS = (0, 1, 2, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000,
                    0xFFFFFFFF, 0x100000000, 0x7FFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF)
INTERESTING_BYTES = b"\x00\x01\x7f\x80\xff\n\r:\\ \t{}[]\",%"
# What a text protocol's number may be replaced with: huge, negative, not a number at all.
INTERESTING_NUMBERS = (b"0", b"-1", b"1", b"4294967296", b"18446744073709551616", b"99999999999999999999999999",
                       b"1e9", b"0x10", b" 5", b"5 ", b"+5", b"\xd9\xa3", b"", b"NaN", b"-0")

# A length field a target knows of: (offset, size in bytes); big-endian unsigned.
LengthField = tuple[int, int]


class Mutator:
    """``mutate(frame, corpus)`` applies one to three mutations. ``lengths(frame)``
    (from the target) names the frame's length fields, so "huge lengths" hits them
    rather than only random offsets."""

    def __init__(self, rng: random.Random, lengths: Callable[[bytes], Sequence[LengthField]] | None = None) -> None:
        self.rng = rng
        self.lengths = lengths or (lambda frame: ())
        self.operations: list[Callable[[bytes, Sequence[bytes]], bytes]] = [
            self.flip_bits, self.set_byte, self.truncate, self.duplicate, self.delete, self.insert_random,
            self.huge_length, self.overwrite_int, self.splice, self.swap_number, self.random_bytes,
        ]

    def mutate(self, frame: bytes, corpus: Sequence[bytes]) -> bytes:
        for _ in range(self.rng.choice((1, 1, 1, 2, 2, 3))):
            frame = self.rng.choice(self.operations)(frame, corpus)
        return frame

    # -- the operations ---------------------------------------------------------------------

    def flip_bits(self, frame: bytes, corpus: Sequence[bytes]) -> bytes:
        if not frame:
            return frame
        data = bytearray(frame)
        for _ in range(self.rng.randint(1, 8)):
            data[self.rng.randrange(len(data))] ^= 1 << self.rng.randrange(8)
        return bytes(data)

    def set_byte(self, frame: bytes, corpus: Sequence[bytes]) -> bytes:
        if not frame:
            return bytes([self.rng.choice(INTERESTING_BYTES)])
        data = bytearray(frame)
        data[self.rng.randrange(len(data))] = self.rng.choice(INTERESTING_BYTES)
        return bytes(data)

    def truncate(self, frame: bytes, corpus: Sequence[bytes]) -> bytes:
        return frame[:self.rng.randrange(len(frame))] if frame else frame

    def duplicate(self, frame: bytes, corpus: Sequence[bytes]) -> bytes:
        """A slice repeated (a header, a field), or the whole frame twice."""
        if not frame or self.rng.random() < 0.3:
            return frame * 2
        start = self.rng.randrange(len(frame))
        piece = frame[start:start + self.rng.randint(1, 64)]
        times = self.rng.choice((1, 2, 16, 256))
        return frame[:start] + (piece * times)[:MAX_GROWTH] + frame[start:]

    def delete(self, frame: bytes, corpus: Sequence[bytes]) -> bytes:
        if not frame:
            return frame
        start = self.rng.randrange(len(frame))
        return frame[:start] + frame[start + self.rng.randint(1, 32):]

    def insert_random(self, frame: bytes, corpus: Sequence[bytes]) -> bytes:
        at = self.rng.randint(0, len(frame))
        return frame[:at] + self.rng.randbytes(self.rng.randint(1, 32)) + frame[at:]

    def huge_length(self, frame: bytes, corpus: Sequence[bytes]) -> bytes:
        """A length field of the frame set to a boundary value (huge, zero, off by one)."""
        fields = [(offset, size) for offset, size in self.lengths(frame) if offset + size <= len(frame)]
        if not fields:
            return self.overwrite_int(frame, corpus)
        offset, size = self.rng.choice(fields)
        current = int.from_bytes(frame[offset:offset + size], "big")
        value = self.rng.choice((*INTERESTING_INTS, current + 1, max(current - 1, 0), current * 2, current + 4096))
        return frame[:offset] + (value % (1 << (8 * size))).to_bytes(size, "big") + frame[offset + size:]

    def overwrite_int(self, frame: bytes, corpus: Sequence[bytes]) -> bytes:
        """A 1, 2, 4 or 8-byte boundary integer at a random offset (where a binary
        protocol's counts and lengths live)."""
        size = self.rng.choice((1, 2, 4, 8))
        if len(frame) < size:
            return frame
        at = self.rng.randrange(len(frame) - size + 1)
        value = self.rng.choice(INTERESTING_INTS) % (1 << (8 * size))
        return frame[:at] + value.to_bytes(size, "big") + frame[at + size:]

    def splice(self, frame: bytes, corpus: Sequence[bytes]) -> bytes:
        """A piece of another valid frame put into this one (headers and fields
        where they do not belong)."""
        other = self.rng.choice(corpus) if corpus else frame
        if not other:
            return frame
        start = self.rng.randrange(len(other))
        piece = other[start:start + self.rng.randint(1, 128)]
        at = self.rng.randint(0, len(frame))
        replace = self.rng.randint(0, len(piece)) if self.rng.random() < 0.5 else 0
        return frame[:at] + piece + frame[at + replace:]

    def swap_number(self, frame: bytes, corpus: Sequence[bytes]) -> bytes:
        """A decimal number in the frame (a content-length, a heart-beat, a priority)
        replaced by a strange one."""
        digits = [i for i in range(len(frame)) if 48 <= frame[i] <= 57 and (i == 0 or not 48 <= frame[i - 1] <= 57)]
        if not digits:
            return self.set_byte(frame, corpus)
        start = end = self.rng.choice(digits)
        while end < len(frame) and 48 <= frame[end] <= 57:
            end += 1
        return frame[:start] + self.rng.choice(INTERESTING_NUMBERS) + frame[end:]

    def random_bytes(self, frame: bytes, corpus: Sequence[bytes]) -> bytes:
        return self.rng.randbytes(self.rng.choice((1, 4, 16, 64, 512, 4096)))


def split_writes(rng: random.Random, data: bytes) -> list[bytes]:
    """``data`` cut into the writes that send it: whole, in random pieces, or
    (for a short stretch) byte by byte, so a parser sees every boundary."""
    if not data:
        return []
    mode = rng.random()
    if mode < 0.4 or len(data) == 1:
        return [data]
    if mode < 0.9:
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 8))))
    else:
        start = rng.randrange(len(data))
        cuts = list(range(start, min(len(data), start + 64)))[1:] or [start]
        cuts = [c for c in cuts if 0 < c < len(data)]
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]
