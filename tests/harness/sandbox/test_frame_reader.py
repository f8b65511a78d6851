"""The harness reads a child's frames whole however the bytes arrive, and refuses one over the limit on its header."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest

from harness.sandbox.children import FrameReader


@dataclass
class Receiver:
    """What a ``FrameReader`` tells its child: the frames delivered, and a violation."""

    reply_limit: int = 1 << 20
    delivered: list[tuple[int, bytes]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def deliver(self, sequence: int, body: bytes) -> None:
        self.delivered.append((sequence, body))

    def violate(self, reason: str) -> None:
        self.violations.append(reason)


def frame(sequence: int, body: bytes) -> bytes:
    return len(body).to_bytes(4, "little") + sequence.to_bytes(4, "little") + body


BODIES = [b'{"ok":true}', b"", os.urandom(70_000), b"x" * 9]
STREAM = b"".join(frame(n + 1, body) for n, body in enumerate(BODIES))


@pytest.mark.parametrize("piece", [1, 3, 7, 8, 9, 4096, 65_536, len(STREAM)])
def test_frames_arrive_whole_whatever_pieces_the_bytes_come_in(piece: int) -> None:
    receiver = Receiver()
    reader = FrameReader(receiver)  # type: ignore[arg-type]  # a receiver of frames, not a whole Child
    for start in range(0, len(STREAM), piece):
        reader.data_received(STREAM[start : start + piece])
    assert receiver.delivered == [(n + 1, body) for n, body in enumerate(BODIES)]
    assert receiver.violations == []


def test_every_split_of_a_frame_gives_the_same_body() -> None:
    stream = frame(5, b"0123456789abcdef") + frame(6, b"tail")
    for cut in range(1, len(stream)):
        receiver = Receiver()
        reader = FrameReader(receiver)  # type: ignore[arg-type]  # a receiver of frames, not a whole Child
        reader.data_received(stream[:cut])
        reader.data_received(stream[cut:])
        assert receiver.delivered == [(5, b"0123456789abcdef"), (6, b"tail")]


def test_a_frame_over_the_limit_is_refused_on_its_header_before_its_body() -> None:
    receiver = Receiver(reply_limit=100)
    reader = FrameReader(receiver)  # type: ignore[arg-type]  # a receiver of frames, not a whole Child
    reader.data_received(frame(1, b"y" * 101)[:8])
    assert receiver.delivered == []
    assert receiver.violations == ["the sandbox process sent a reply of 101 bytes (limit 100)"]
