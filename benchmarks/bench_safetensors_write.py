"""Writing 256 MB of tensors: our deterministic atomic writer vs safetensors.torch.save_file.

The reference writer's header order depends on a hash map, so its bytes differ run to run; ours
are byte-identical. This checks that determinism and atomicity cost no speed.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit, median_seconds

from copilot_cli.core.artifacts import save_safetensors


def main() -> None:
    generator = torch.Generator().manual_seed(0)
    tensors = {f"layer.{i}.weight": torch.randn(1024, 2048, generator=generator) for i in range(32)}
    metadata = {f"key{i}": str(i) for i in range(20)}
    with tempfile.TemporaryDirectory() as tmp:
        ours = median_seconds(
            lambda: save_safetensors(Path(tmp) / "a.safetensors", tensors, metadata), repeat=3
        )

        def peer_durable() -> None:
            path = Path(tmp) / "b.safetensors"
            save_file(tensors, path, metadata)
            with path.open("rb+") as handle:
                os.fsync(handle.fileno())

        peer = median_seconds(peer_durable, repeat=3)
    emit(
        "write 256MB safetensors: deterministic+atomic vs save_file+fsync",
        ours,
        peer,
        "s",
        goal="ratio >= 0.8",
        passed=peer / ours >= 0.8,
    )


if __name__ == "__main__":
    main()
