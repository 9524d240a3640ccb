"""An input schema never reaches outside its own document (no network, no file), and its
patterns run with bounded work: refused at compile time with the template named, exit 2."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from copilot_cli.core.artifacts import canonical_json, sealed
from copilot_cli.core.errors import CopilotError
from copilot_cli.prompts import CompileOptions, TemplateError, compile_templates, load_bundle
from tests.prompts.conftest import write_template

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def server():
    """A local HTTP server that counts the requests it receives."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            body = json.dumps({"type": "string"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    httpd.shutdown()


def _schema(ref_value: str, key: str = "$ref") -> dict:
    return {"type": "object", "properties": {"x": {key: ref_value}}, "required": ["x"]}


def _compile(folder: Path, out: Path) -> None:
    compile_templates(CompileOptions(folder, out, use_tokenizer=False))


@pytest.mark.parametrize("key", ["$ref", "$dynamicRef"])
def test_a_remote_reference_is_refused_and_never_fetched(template_dir, tmp_path, server, key):
    url, seen = server
    write_template(template_dir, "t.j2", "{{ x }}", inputs=_schema(f"{url}/x.json", key))
    with pytest.raises(TemplateError, match="points outside the schema") as info:
        _compile(template_dir, tmp_path / "out")
    assert "t.j2" in str(info.value)
    assert seen == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("ref", ["file:///etc/passwd", "other.json", "../x.json#/a", "/abs.json"])
def test_file_and_relative_references_are_refused(template_dir, tmp_path, ref):
    write_template(template_dir, "t.j2", "{{ x }}", inputs=_schema(ref))
    with pytest.raises(TemplateError, match="points outside the schema"):
        _compile(template_dir, tmp_path / "out")


def test_an_id_that_renames_the_schema_to_a_uri_is_refused(template_dir, tmp_path, server):
    url, seen = server
    schema = {**_schema("#/$defs/s"), "$id": f"{url}/root.json", "$defs": {"s": {"type": "string"}}}
    write_template(template_dir, "t.j2", "{{ x }}", inputs=schema)
    with pytest.raises(TemplateError, match="cannot name a URI"):
        _compile(template_dir, tmp_path / "out")
    assert seen == []


def test_references_within_the_schema_work(template_dir, tmp_path):
    schema = {**_schema("#/$defs/name"), "$defs": {"name": {"type": "string", "minLength": 2}}}
    write_template(template_dir, "t.j2", "{{ x }}", inputs=schema, samples=[{"x": "ab"}])
    _compile(template_dir, tmp_path / "out")
    bundle = load_bundle(tmp_path / "out")
    assert bundle.render("t", x="hello") == "hello"
    with pytest.raises(CopilotError, match="too short"):
        bundle.render("t", x="h")


def test_a_property_named_ref_is_data_not_a_reference(template_dir, tmp_path):
    schema = {"type": "object", "properties": {"$ref": {"type": "string"}, "x": {"type": "string"}}}
    write_template(template_dir, "t.j2", "{{ x }}", inputs=schema)
    _compile(template_dir, tmp_path / "out")


def test_a_bundle_resealed_with_a_remote_reference_is_refused_at_render(
    template_dir, tmp_path, server
):
    url, seen = server
    write_template(template_dir, "t.j2", "{{ x }}")
    _compile(template_dir, tmp_path / "out")
    manifest_path = tmp_path / "out" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["digest"]
    manifest["templates"][0]["schema"]["properties"]["x"] = {"$ref": f"{url}/x.json"}
    manifest_path.write_text(canonical_json(sealed(manifest)))
    with pytest.raises(CopilotError):
        load_bundle(tmp_path / "out").render("t", x="v")
    assert seen == []


# -- patterns --------------------------------------------------------------------------------

CATASTROPHIC = "^(a+)+$"  # exponential in Python's backtracking re on "aaaa...!"


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    """The CLI in its own process, with a timeout far above what bounded work takes: without
    the bound these inputs run for hours."""
    return subprocess.run(
        [sys.executable, "-m", "copilot_cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def test_a_catastrophic_schema_pattern_runs_in_linear_time(template_dir, tmp_path):
    inputs = {"type": "object", "properties": {"x": {"type": "string", "pattern": CATASTROPHIC}}}
    write_template(template_dir, "t.j2", "{{ x }}", inputs=inputs, samples=[{"x": "a" * 60 + "!"}])
    result = _run(["compile-templates", str(template_dir), "-o", str(tmp_path / "out")])
    assert result.returncode == 2, result.stderr
    assert "samples[0]" in result.stderr and "does not match" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_pattern_properties_and_additional_properties_are_bounded_too(template_dir, tmp_path):
    inputs = {
        "type": "object",
        "properties": {"x": {"type": "string"}},
        "patternProperties": {CATASTROPHIC: {"type": "integer"}},
        "additionalProperties": False,
    }
    write_template(template_dir, "t.j2", "{{ x }}", inputs=inputs, samples=[{"x": "v"}])
    _compile(template_dir, tmp_path / "out")
    bundle = load_bundle(tmp_path / "out")
    assert bundle.render("t", x="v", aaa=1) == "v"
    with pytest.raises(CopilotError, match="not allowed"):
        bundle.render("t", x="v", **{"a" * 60 + "!": 1})


def test_a_pattern_that_does_not_compile_names_the_template(template_dir, tmp_path):
    inputs = {"type": "object", "properties": {"x": {"type": "string", "pattern": "(unclosed"}}}
    write_template(template_dir, "t.j2", "{{ x }}", inputs=inputs)
    with pytest.raises(TemplateError, match=r"t\.j2"):
        _compile(template_dir, tmp_path / "out")


def test_prune_protect_with_a_catastrophic_pattern_finishes(tmp_path):
    text = tmp_path / "in.txt"
    text.write_text(("a" * 60 + "! ") * 20 + "\nkeep this line with words in it\n")
    result = _run(["prune", str(text), "--rate", "0.5", "--protect", CATASTROPHIC])
    assert result.returncode == 0, result.stderr


def test_prune_protect_that_needs_backtracking_stops_at_its_deadline(tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("é" + "a" * 60 + "!\n")  # non-ASCII: \w runs in the backtracking engine
    result = _run(["prune", str(text), "--rate", "0.5", "--protect", r"^(\w|\w\w)*$"])
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: --protect: pattern") and "ran past" in result.stderr
