import pytest

from kvstore.protocol import FrameReader, Opcode, ProtocolError, decode_frame, encode_frame


def test_round_trip():
    data = encode_frame(Opcode.SET, b"key", b"value")
    frame, end = decode_frame(data)
    assert frame is not None and end == len(data)
    assert (frame.opcode, frame.key, frame.value) == (Opcode.SET, b"key", b"value")


def test_partial_frame_waits_for_more_bytes():
    data = encode_frame(Opcode.GET, b"abc")
    frame, offset = decode_frame(data[:-1])
    assert frame is None and offset == 0


def test_reader_handles_split_frames():
    reader = FrameReader()
    data = encode_frame(Opcode.PING) + encode_frame(Opcode.GET, b"k")
    assert reader.feed(data[:5]) == []
    frames = reader.feed(data[5:])
    assert [f.opcode for f in frames] == [Opcode.PING, Opcode.GET]
    assert reader.pending == 0


def test_bad_magic():
    with pytest.raises(ProtocolError):
        decode_frame(b"XX" + bytes(7))
