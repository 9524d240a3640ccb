"""Model fingerprint of a generated multi-GB safetensors model (what a 2B-parameter fp16 model
weighs): per-tensor content hashes from the memory-mapped file, no torch.

Rows, side by side in one run:
  cold   ours (header + sha256 of each tensor's bytes) vs one plain sha256 pass over the file
         (the floor for any fingerprint that reads every byte)
  warm   ours with the per-file cache vs ours cold (what every run after the first costs)
  torch  ours cold vs loading the weights into torch and hashing every tensor (what a
         fingerprint of the loaded model costs)
The file is in the page cache (it was just written): the rows measure hashing, not the disk.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit, interleaved_seconds, median_seconds

from copilot_cli.core.artifacts import sha256_file
from copilot_cli.core.fingerprints import FileFactCache, model_fingerprint_from_folder

TENSORS = 128
TENSOR_BYTES = 32 << 20  # 128 x 32 MB = 4 GiB
CONFIG = {
    "model_type": "llama",
    "hidden_size": 2048,
    "num_hidden_layers": 32,
    "num_attention_heads": 16,
    "vocab_size": 32000,
}


def _write_model(folder: Path) -> Path:
    (folder / "config.json").write_text(json.dumps(CONFIG))
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    rows = TENSOR_BYTES // (2 * 2048)
    for i in range(TENSORS):
        begin = i * TENSOR_BYTES
        header[f"model.layers.{i // 4}.w{i % 4}.weight"] = {
            "dtype": "F16",
            "shape": [rows, 2048],
            "data_offsets": [begin, begin + TENSOR_BYTES],
        }
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-(len(raw) + 8) % 8)
    block = os.urandom(1 << 24)
    path = folder / "model.safetensors"
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)
        for _ in range(TENSORS * TENSOR_BYTES // len(block)):
            handle.write(block)
    return path


def _torch_hash(path: Path) -> None:
    import hashlib

    from safetensors.torch import load_file

    from copilot_cli.core.safetensors_io import tensor_bytes

    for _name, tensor in sorted(load_file(str(path)).items()):
        hashlib.sha256(tensor_bytes(tensor)).hexdigest()


def main() -> None:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        folder = Path(tmp)
        path = _write_model(folder)
        gib = path.stat().st_size / 2**30

        def cold() -> None:
            (folder / "cache.json").unlink(missing_ok=True)
            model_fingerprint_from_folder(folder, CONFIG, FileFactCache(path=folder / "cache.json"))

        t_cold, t_floor = interleaved_seconds(cold, lambda: sha256_file(path), rounds=3)
        cold()  # fill the cache
        t_warm = median_seconds(
            lambda: model_fingerprint_from_folder(
                folder, CONFIG, FileFactCache(path=folder / "cache.json")
            ),
            repeat=5,
        )
        t_cold2, t_torch = interleaved_seconds(cold, lambda: _torch_hash(path), rounds=2)
    emit(
        f"model fingerprint of a {gib:.0f} GiB safetensors model, cold: ours vs one sha256 pass",
        t_cold,
        t_floor,
        "s",
        goal="ratio >= 0.8 (within 1.25x of the hashing floor)",
        passed=t_floor / t_cold >= 0.8,
        note=f"{gib / t_cold:.2f} GiB/s cold, page cache warm; {TENSORS} tensors",
    )
    emit(
        f"model fingerprint of a {gib:.0f} GiB model, cached vs cold (every run after the first)",
        t_warm,
        t_cold,
        "s",
        goal="ratio >= 100",
        passed=t_cold / t_warm >= 100,
    )
    emit(
        f"model fingerprint of a {gib:.0f} GiB model, cold: ours vs loading it into torch to hash",
        t_cold2,
        t_torch,
        "s",
        goal="ratio >= 1",
        passed=t_torch / t_cold2 >= 1,
    )


if __name__ == "__main__":
    main()
