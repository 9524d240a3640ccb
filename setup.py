"""The wheel carries the shipped defaults (the tiny code model, the prompt templates, the sample
repository and prompts, the example copilot-opt.yaml) under copilot_cli/shipped/, in the
layout they have in the repository, so an installed package finds them as a clone does
(copilot_cli/paths.py). Everything else is in pyproject.toml.

setuptools builds in a fresh temporary folder, removed when the build ends, not in `build/`
of the clone: that is where the README's `copilot-opt build -o build` writes (which refuses a
folder holding files it did not write), and a reused build folder keeps a module deleted from
the source and puts it in the next wheel."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = (
    "copilot-opt.yaml",
    "templates",
    "sample_data/models/tiny-code-llama",
    "sample_data/prompts.jsonl",
    "sample_data/repo",
)


class BuildWithShippedData(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads them from the clone itself
            return
        target = Path(self.build_lib) / "copilot_cli" / "shipped"
        for name in SHIPPED:
            source, dest = ROOT / name, target / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, dest, dirs_exist_ok=True)
            else:
                shutil.copy2(source, dest)


BUILD_BASE = tempfile.mkdtemp(prefix="copilot-opt-setuptools-")
atexit.register(shutil.rmtree, BUILD_BASE, ignore_errors=True)

setup(cmdclass={"build_py": BuildWithShippedData}, options={"build": {"build_base": BUILD_BASE}})
