"""The kvstore wire protocol: length-prefixed frames with a one-byte opcode.

Frame layout (all integers big-endian):

    +--------+--------+-----------+-------------+---------------+
    | magic  | opcode | key length| value length| key | value   |
    | 2 bytes| 1 byte | 2 bytes   | 4 bytes     |     |         |
    +--------+--------+-----------+-------------+---------------+
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple

MAGIC = b"KV"
HEADER = struct.Struct(">2sBHI")
MAX_KEY = 1 << 16 - 1
MAX_VALUE = 64 << 20


class Opcode(enum.IntEnum):
    GET = 1
    SET = 2
    DELETE = 3
    PING = 4
    STATS = 5
    REPLY_OK = 0x80
    REPLY_MISSING = 0x81
    REPLY_ERROR = 0x82


class ProtocolError(ValueError):
    """A frame that cannot be decoded."""


@dataclass(frozen=True)
class Frame:
    opcode: Opcode
    key: bytes = b""
    value: bytes = b""

    def encode(self) -> bytes:
        return encode_frame(self.opcode, self.key, self.value)


def encode_frame(opcode: Opcode, key: bytes = b"", value: bytes = b"") -> bytes:
    """Encode one frame; raise ProtocolError when the key or value is too long."""
    if len(key) > MAX_KEY:
        raise ProtocolError(f"key of {len(key)} bytes exceeds {MAX_KEY}")
    if len(value) > MAX_VALUE:
        raise ProtocolError(f"value of {len(value)} bytes exceeds {MAX_VALUE}")
    return HEADER.pack(MAGIC, int(opcode), len(key), len(value)) + key + value


def decode_frame(buffer: bytes, offset: int = 0) -> Tuple[Optional[Frame], int]:
    """Decode the frame starting at ``offset``.

    Returns ``(frame, next_offset)``; ``(None, offset)`` when the buffer does not yet hold a
    whole frame, so a reader can append more bytes and call again.
    """
    if len(buffer) - offset < HEADER.size:
        return None, offset
    magic, opcode, key_len, value_len = HEADER.unpack_from(buffer, offset)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {magic!r} at offset {offset}")
    try:
        op = Opcode(opcode)
    except ValueError:
        raise ProtocolError(f"unknown opcode {opcode:#x} at offset {offset}") from None
    if value_len > MAX_VALUE:
        raise ProtocolError(f"value length {value_len} exceeds {MAX_VALUE}")
    start = offset + HEADER.size
    end = start + key_len + value_len
    if len(buffer) < end:
        return None, offset
    key = bytes(buffer[start : start + key_len])
    value = bytes(buffer[start + key_len : end])
    return Frame(op, key, value), end


def iter_frames(buffer: bytes) -> Iterator[Frame]:
    """Yield every complete frame in ``buffer``; trailing partial bytes are ignored."""
    offset = 0
    while True:
        frame, offset = decode_frame(buffer, offset)
        if frame is None:
            return
        yield frame


class FrameReader:
    """Incremental decoder: feed it bytes as they arrive, collect whole frames."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.frames_read = 0

    def feed(self, data: bytes) -> List[Frame]:
        self._buffer.extend(data)
        frames: List[Frame] = []
        offset = 0
        while True:
            frame, offset_next = decode_frame(bytes(self._buffer), offset)
            if frame is None:
                break
            frames.append(frame)
            offset = offset_next
        if offset:
            del self._buffer[:offset]
        self.frames_read += len(frames)
        return frames

    @property
    def pending(self) -> int:
        return len(self._buffer)
