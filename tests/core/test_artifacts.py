import os

import pytest

from copilot_cli.core.artifacts import (
    atomic_write,
    canonical_json,
    decode_metadata,
    encode_metadata,
    sha256_bytes,
    sha256_file,
    write_if_changed,
    write_json,
)
from copilot_cli.core.errors import ArtifactError


def test_crash_mid_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_write(target) as handle:
        handle.write(b"half of the new conte")
        raise RuntimeError("crash")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["out.bin"]


def test_crash_before_first_write_leaves_nothing(tmp_path):
    target = tmp_path / "sub" / "new.json"
    with pytest.raises(KeyboardInterrupt), atomic_write(target, "w") as handle:
        handle.write("{")
        raise KeyboardInterrupt
    assert not target.exists()
    assert os.listdir(tmp_path / "sub") == []


def test_successful_write_replaces_and_is_readable(tmp_path):
    target = tmp_path / "out.json"
    write_json(target, {"b": 1, "a": [1, 2], "ü": "é"})
    assert target.read_text(encoding="utf-8") == canonical_json({"a": [1, 2], "b": 1, "ü": "é"})
    assert target.read_text(encoding="utf-8").index('"a"') < target.read_text().index('"b"')
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_write_if_changed_skips_identical_bytes(tmp_path):
    target = tmp_path / "f"
    assert write_if_changed(target, b"x")
    mtime = target.stat().st_mtime_ns
    assert not write_if_changed(target, b"x")
    assert target.stat().st_mtime_ns == mtime
    assert write_if_changed(target, b"y")


def test_hashes_agree(tmp_path):
    data = os.urandom(3 * (1 << 20) + 17)
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert sha256_file(path) == sha256_bytes(data)


def test_metadata_round_trip_and_missing_key():
    encoded = encode_metadata({"s": "text", "n": 3, "l": [1, {"b": 2, "a": 1}]})
    assert encoded == {"s": "text", "n": "3", "l": '[1, {"a": 1, "b": 2}]'}
    assert decode_metadata(encoded, "l", where="f") == [1, {"a": 1, "b": 2}]
    with pytest.raises(ArtifactError, match="'missing'"):
        decode_metadata(encoded, "missing", where="f")
