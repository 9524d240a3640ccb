"""build's context step, its files: the repository overview (folder/overview.json) and, for
every template of the bundle that takes an `overview`, its static text + the overview
(folder/TEMPLATE.txt), the static prefix that step prefills."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from copilot_cli.context import OverviewOptions, OverviewResult, open_session
from copilot_cli.core.artifacts import write_bytes
from copilot_cli.core.errors import ArtifactError
from copilot_cli.prompts import load_bundle, overview_prefix


def overview_prefixes(
    options: OverviewOptions, bundle: Path, folder: Path, tokenizer: Any
) -> tuple[OverviewResult, list[Path]]:
    """Write the overview and each overview template's prefix file; returns the overview and
    the prefix files."""

    session = open_session(options.chunks, options.registry, tokenizer)
    result = session.overview(options)
    folder.mkdir(parents=True, exist_ok=True)
    body = json.dumps(result.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    write_bytes(folder / "overview.json", body.encode("utf-8"))
    written = []
    loaded = load_bundle(bundle)
    for name in loaded.templates():
        schema = loaded.entry(name).schema
        if "overview" in schema.get("properties", {}) and result.text:
            path = folder / f"{name}.txt"
            if path.parent != folder:  # names are checked at compile and load; never a path
                raise ArtifactError(f"template name {name!r} is not a file name", where=str(bundle))
            write_bytes(path, overview_prefix(loaded, name, result.text).encode("utf-8"))
            written.append(path)
    return result, written
