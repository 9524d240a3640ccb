"""llama.cpp slot files (prefill-kv --engine llama.cpp) on SmolLM2-135M's GGUF: written by the
command, verified by inspect, restored before a request with output token-identical to
computing everything, llama.cpp's own counter showing the restored tokens were not computed;
slots for another model, damaged or lying about their tokens are refused before use. Needs
`make llamacpp-env` and `make real-models` (make test-llamacpp does both)."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from copilot_cli.cli import app

REPO = Path(__file__).resolve().parents[1]
GEN_TOKENS = 24


@pytest.fixture(scope="module")
def gguf() -> Path:
    from copilot_cli import instruments

    path = instruments.root() / instruments.SMOLLM2_GGUF
    if not path.is_file():
        pytest.skip(f"no SmolLM2 GGUF in {instruments.root()} (make real-models)")
    return path


@pytest.fixture(scope="module")
def slots(gguf, tmp_path_factory) -> dict:
    from copilot_cli import CompileOptions, compile_templates

    root = tmp_path_factory.mktemp("slots")
    compile_templates(CompileOptions(REPO / "templates", root / "bundle"))
    args = ["prefill-kv", str(root / "bundle"), "--engine", "llama.cpp", "-m", str(gguf)]
    result = CliRunner().invoke(app, [*args, "-o", str(root / "slots"), "--json"])
    assert result.exit_code == 0, result.output
    return {"root": root, "folder": root / "slots", "index": json.loads(result.stdout)}


@pytest.fixture(scope="module")
def server(slots, gguf):
    from copilot_cli.serving.llamacpp import SlotServer

    return SlotServer(slots["folder"], gguf)


def _requests(root: Path) -> list[tuple[str, str]]:
    from copilot_cli.prompts import load_bundle

    bundle = load_bundle(root / "bundle")
    out = []
    for name in bundle.templates():
        source = REPO / "templates" / bundle.entry(name).source
        samples = yaml.safe_load(source.read_text().split("---")[1]).get("samples", [])
        out += [(name, bundle.render(name, **inputs)) for inputs in samples[:2]]
    return out


def test_the_command_writes_a_slot_per_prefix_and_inspect_verifies_them(slots, gguf):
    index = slots["index"]
    assert index["format"] == "copilot-opt.llamacpp-slots" and index["prefixes"]
    assert len(index["prefixes"]) >= 3  # one per shipped template
    for prefix in index["prefixes"]:
        assert (slots["folder"] / prefix["file"]).stat().st_size == prefix["bytes"] > 0
    result = CliRunner().invoke(app, ["inspect", str(slots["folder"]), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kind"] == "llama.cpp slots"


def test_restored_prefixes_give_the_same_tokens_and_are_not_recomputed(slots, server):
    from copilot_cli.serving.llamacpp import tokens_of

    served = 0
    for name, text in _requests(slots["root"]):
        tokens = tokens_of(server.llm, text)
        restored = server.complete(tokens, GEN_TOKENS, restore=True)
        computed = server.complete(tokens, GEN_TOKENS, restore=False)
        assert restored.tokens == computed.tokens, name
        stored = server.index.longest(tokens)
        assert stored is not None and restored.restored == len(stored.token_ids), name
        # llama.cpp's own count: the restored tokens were not evaluated again
        assert restored.prompt_tokens_evaluated <= len(tokens) - restored.restored, name
        assert computed.prompt_tokens_evaluated >= len(tokens) - 1, name
        served += restored.restored
    assert served > 0


def test_slots_for_another_model_or_damaged_are_refused_before_a_restore(slots, gguf, tmp_path):
    import shutil

    from copilot_cli.core.artifacts import DIGEST_KEY, sealed
    from copilot_cli.core.errors import ArtifactError, FingerprintMismatch
    from copilot_cli.serving.llamacpp import SlotServer, tokens_of

    def edited(name: str, edit) -> Path:
        folder = Path(shutil.copytree(slots["folder"], tmp_path / name))
        data = json.loads((folder / "slots.json").read_text())
        data.pop(DIGEST_KEY)
        edit(data, folder)
        (folder / "slots.json").write_text(json.dumps(sealed(data)))
        return folder

    other = edited("other", lambda d, f: d.update(gguf_sha256="0" * 64))
    with pytest.raises(FingerprintMismatch, match="made for model"):
        SlotServer(other, gguf)

    def damage(data, folder):
        path = folder / data["prefixes"][0]["file"]
        raw = bytearray(path.read_bytes())
        raw[len(raw) // 2] ^= 0x01
        path.write_bytes(bytes(raw))

    damaged = edited("damaged", damage)
    server = SlotServer(damaged, gguf)
    first = server.index.prefixes[0]
    tokens = [*first.token_ids, *tokens_of(server.llm, "def f():")[1:]]
    with pytest.raises(ArtifactError, match="damaged"):
        server.restore(tokens)
    result = CliRunner().invoke(app, ["inspect", str(damaged)])
    assert result.exit_code == 1 and "damaged" in result.output


def test_a_slot_whose_tokens_are_not_the_index_tokens_is_refused(slots, gguf, tmp_path):
    """An index resealed to claim other tokens for a file: llama.cpp reads the file's own
    tokens back, and they must be the claimed ones."""
    import shutil

    from copilot_cli.core.artifacts import DIGEST_KEY, sealed
    from copilot_cli.core.errors import ArtifactError
    from copilot_cli.serving.llamacpp import SlotServer, tokens_of

    folder = Path(shutil.copytree(slots["folder"], tmp_path / "lying"))
    data = json.loads((folder / "slots.json").read_text())
    data.pop(DIGEST_KEY)
    first = data["prefixes"][0]
    first["token_ids"][-2] = (first["token_ids"][-2] + 1) % 1000
    (folder / "slots.json").write_text(json.dumps(sealed(data)))
    server = SlotServer(folder, gguf)
    tokens = [*first["token_ids"], *tokens_of(server.llm, "def f():")[1:]]
    with pytest.raises(ArtifactError, match="did not restore"):
        server.restore(tokens)


def test_cli_refusals_are_one_line(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["prefill-kv", "--engine", "llama.cpp", "--text", __file__])
    assert result.exit_code == 2 and "needs --model FILE.gguf" in result.stderr
    result = runner.invoke(
        app, ["prefill-kv", "--engine", "tgi", "-m", "x.gguf", "--text", __file__]
    )
    assert result.exit_code == 2


def test_serve_answers_over_http_from_the_restored_slot(slots, server, gguf):
    """`copilot-opt serve --engine llama.cpp` as a user starts it: the answer is the computed
    greedy continuation, and its timings say the prefix was restored."""
    import subprocess
    import sys

    from copilot_cli.serving.llamacpp import tokens_of

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = ["serve", str(slots["folder"]), "--engine", "llama.cpp", "-m", str(gguf)]
    process = subprocess.Popen(
        [sys.executable, "-m", "copilot_cli", *args, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    _, text = _requests(slots["root"])[0]
    body = json.dumps({"prompt": text, "n_predict": 8}).encode()
    reply = None
    try:
        for _ in range(300):
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body)
                with urllib.request.urlopen(request, timeout=60) as response:
                    reply = json.loads(response.read())
                break
            except OSError:
                assert process.poll() is None, process.stdout.read().decode()
                time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert reply is not None
    expected = server.complete(tokens_of(server.llm, text), 8, restore=False)
    assert reply["tokens"] == expected.tokens
    assert reply["timings"]["restored"] > 0
    assert reply["timings"]["prompt_tokens_evaluated"] < len(tokens_of(server.llm, text))


def test_serve_without_a_gguf_is_one_line(tmp_path):
    result = CliRunner().invoke(app, ["serve", str(tmp_path), "--engine", "llama.cpp"])
    assert result.exit_code == 2 and "needs --model FILE.gguf" in result.stderr


def test_build_prepares_llama_cpp_slots_as_prefill_kv_does(gguf, tmp_path):
    """`prefill_kv: {engine: llama.cpp}` in a build config: the build's kv folder holds the slot
    files prefill-kv --engine llama.cpp writes (same prefixes, same token ids, same bytes); a
    rebuild has nothing to do; a flag llama.cpp ignores is refused before any step runs."""
    config = tmp_path / "copilot-opt.yaml"
    body = {
        "model": str(gguf),
        "templates": str(REPO / "templates"),
        "repositories": [],
        "chunk": {"enabled": False},
        "quantize": {"enabled": False},
        "regress": {"enabled": False},
        "prefill_kv": {"engine": "llama.cpp"},
    }
    config.write_text(yaml.safe_dump(body))
    out = tmp_path / "build"
    result = CliRunner().invoke(app, ["build", "--config", str(config), "-o", str(out)])
    assert result.exit_code == 0, result.output
    direct = tmp_path / "direct"
    args = ["prefill-kv", str(out / "templates"), "--engine", "llama.cpp", "-m", str(gguf)]
    made = CliRunner().invoke(app, [*args, "-o", str(direct)])
    assert made.exit_code == 0, made.output
    built = json.loads((out / "kv" / "slots.json").read_text())
    assert len(built["prefixes"]) >= 3
    assert (out / "kv" / "slots.json").read_bytes() == (direct / "slots.json").read_bytes()
    for prefix in built["prefixes"]:
        assert (out / "kv" / prefix["file"]).read_bytes() == (direct / prefix["file"]).read_bytes()
    again = CliRunner().invoke(app, ["build", "--config", str(config), "-o", str(out)])
    assert again.exit_code == 0 and "nothing to do" in again.output
    body["prefill_kv"]["block_size"] = 32
    config.write_text(yaml.safe_dump(body))
    refused = CliRunner().invoke(app, ["build", "--config", str(config), "-o", str(out)])
    assert refused.exit_code == 2
    assert "prefill_kv.block_size: not honoured by --engine llama.cpp" in refused.stderr
