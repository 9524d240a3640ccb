"""Model fingerprint of a 512 MB weights folder: cached file hashes vs hashing on every run.

peer: what a tool without a hash cache does (sha256 of every weight file on every run).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit, median_seconds

from copilot_cli.core.artifacts import sha256_file
from copilot_cli.core.fingerprints import FileHashCache, model_fingerprint_from_folder

SIZE = 512 << 20


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32}
        (folder / "config.json").write_text(json.dumps(config))
        with (folder / "model.safetensors").open("wb") as handle:
            for _ in range(SIZE >> 24):
                handle.write(os.urandom(1 << 24))
        cache = FileHashCache(folder / "hash-cache.json")
        model_fingerprint_from_folder(folder, config, cache)  # first run fills the cache

        ours = median_seconds(
            lambda: model_fingerprint_from_folder(folder, config, FileHashCache(cache.path))
        )
        peer = median_seconds(lambda: sha256_file(folder / "model.safetensors"), repeat=3)
    emit(
        "fingerprint 512MB weights (warm cache vs rehash)",
        ours,
        peer,
        "s",
        goal="ratio >= 100",
        passed=peer / ours >= 100,
    )


if __name__ == "__main__":
    main()
