import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from copilot_cli.core.artifacts import save_safetensors, sha256_file
from copilot_cli.core.errors import ArtifactError
from copilot_cli.core.safetensors_io import read_header


def _tensors():
    return {
        "b.f32": torch.arange(12, dtype=torch.float32).reshape(3, 4),
        "a.bf16": torch.linspace(-1, 1, 7).to(torch.bfloat16),
        "c.i8": torch.tensor([-128, 0, 127], dtype=torch.int8),
        "d.f16": torch.randn(2, 3, 5).to(torch.float16),
        "e.empty": torch.zeros(0, 4),
    }


def test_written_file_loads_with_the_reference_reader(tmp_path):
    tensors = _tensors()
    path = tmp_path / "x.safetensors"
    save_safetensors(path, tensors, {"format": "test", "layers": [1, 2], "n": 3})
    loaded = load_file(path)
    assert sorted(loaded) == sorted(tensors)
    for name, tensor in tensors.items():
        assert loaded[name].dtype == tensor.dtype
        assert torch.equal(loaded[name], tensor)
    with safe_open(path, "pt") as handle:
        metadata = handle.metadata()
    digest = metadata.pop("digest")
    assert metadata == {"format": "test", "layers": "[1, 2]", "n": "3"}
    assert len(digest) == 32 and int(digest, 16) >= 0


def test_same_inputs_give_identical_bytes_across_processes(tmp_path):
    script = (
        "import sys, torch\n"
        "from copilot_cli.core.artifacts import save_safetensors\n"
        "t = {f't{i}': torch.arange(i + 1, dtype=torch.float32) for i in range(20)}\n"
        "save_safetensors(sys.argv[1], t, {f'key{i}': str(i) for i in range(30)})\n"
    )
    digests = set()
    for i in range(3):
        out = tmp_path / f"{i}.safetensors"
        subprocess.run([sys.executable, "-c", script, str(out)], check=True)
        digests.add(sha256_file(out))
    assert len(digests) == 1


def test_data_starts_aligned(tmp_path):
    path = tmp_path / "x.safetensors"
    save_safetensors(path, _tensors(), {"k": "v"})
    header_len = int.from_bytes(path.read_bytes()[:8], "little")
    assert (8 + header_len) % 8 == 0


def test_truncated_file_is_refused_before_reading_tensors(tmp_path):
    path = tmp_path / "x.safetensors"
    save_safetensors(path, _tensors(), {})
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(ArtifactError, match="truncated"):
        read_header(path)


def test_tiny_or_garbage_file_is_refused(tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes(b"abc")
    with pytest.raises(ArtifactError, match="too short"):
        read_header(path)
    path.write_bytes((10**12).to_bytes(8, "little") + b"{}")
    with pytest.raises(ArtifactError, match="header length"):
        read_header(path)
