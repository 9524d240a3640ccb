"""Prompt templates: per-render cost and cold load of a compiled bundle vs plain Jinja2.

Peers (what a user would write instead):
  naive   Environment.from_string(source).render(...) on every request;
  cached  a jinja2 Template compiled once per process and reused (no input validation).
Ours renders from the precompiled bundle *with* JSON-Schema validation of the inputs.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import jinja2
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit, median_seconds

from copilot_cli.core.models import SHIPPED_MODEL, load_tokenizer
from copilot_cli.prompts import CompileOptions, compile_templates, load_bundle

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "templates"
NAME, FILE = "code-completion", "code_completion.j2"
TOKENIZER = load_tokenizer(str(SHIPPED_MODEL))


def _sample(path: Path) -> dict:
    return yaml.safe_load(path.read_text().split("---")[1])["samples"][0]


def _body(path: Path) -> str:
    return path.read_text().split("---", 2)[2].lstrip("\n")


def _plain_env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def per_render(out: Path) -> None:
    bundle = load_bundle(out)
    inputs = _sample(TEMPLATES / FILE)
    source = _body(TEMPLATES / FILE)
    env = _plain_env()
    cached = env.from_string(source)
    n = 2000

    def ours() -> None:
        for _ in range(n):
            bundle.render(NAME, **inputs)

    def ours_no_validation() -> None:
        runtime, entry = bundle._runtime, bundle.entry(NAME)
        for _ in range(n):
            runtime.render(entry["unit"], entry["content_hash"], "text", inputs)

    def cached_peer() -> None:
        for _ in range(n):
            cached.render(**inputs)

    def naive_peer() -> None:
        for _ in range(n // 20):
            _plain_env().from_string(source).render(**inputs)

    t_ours = median_seconds(ours, repeat=5) / n
    t_novalid = median_seconds(ours_no_validation, repeat=5) / n
    t_cached = median_seconds(cached_peer, repeat=5) / n
    t_naive = median_seconds(naive_peer, repeat=3) / (n // 20)
    emit(
        "render, bundle+validation vs cached jinja2 Template",
        t_ours * 1e6,
        t_cached * 1e6,
        "us",
        goal="ratio >= 1/1.2 (0.833)",
        passed=t_cached / t_ours >= 1 / 1.2,
        note=f"validation costs {(t_ours - t_novalid) * 1e6:.1f} us of {t_ours * 1e6:.1f} us",
    )
    emit(
        "render, bundle+validation vs from_string per call",
        t_ours * 1e6,
        t_naive * 1e6,
        "us",
        goal="ratio >= 50",
        passed=t_naive / t_ours >= 50,
    )


def cold_load() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(TEMPLATES / "parts", src / "parts")
        names = []
        for path in sorted(TEMPLATES.glob("*.j2")):
            for copy in range(9):
                text = path.read_text()
                name = f"{path.stem}-{copy}"
                text = text.replace("\nname: ", f"\nname: {copy}-", 1)
                (src / f"{name}.j2").write_text(text)
                names.append((f"{name}.j2", _sample(path)))
                if len(names) == 50:
                    break
            if len(names) == 50:
                break
        out = Path(tmp) / "out"
        compile_templates(CompileOptions(src, out), TOKENIZER)
        manifest_names = load_bundle(out).templates()

        def ours() -> None:
            bundle = load_bundle(out)
            for name in manifest_names:
                entry = bundle.entry(name)
                bundle._runtime.template(entry["unit"], entry["content_hash"])

        def peer() -> None:
            env = jinja2.Environment(
                loader=jinja2.FileSystemLoader(src),
                trim_blocks=True,
                lstrip_blocks=True,
                keep_trailing_newline=True,
            )
            for filename, _ in names:
                env.from_string(_body(src / filename))

        t_ours = median_seconds(ours, repeat=5)
        t_peer = median_seconds(peer, repeat=5)
    emit(
        "cold load of 50 templates, bundle vs compiling sources",
        t_ours * 1e3,
        t_peer * 1e3,
        "ms",
        goal="ratio >= 5",
        passed=t_peer / t_ours >= 5,
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bundle"
        compile_templates(CompileOptions(TEMPLATES, out), TOKENIZER)
        per_render(out)
    cold_load()


if __name__ == "__main__":
    main()
