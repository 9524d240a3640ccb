"""The shipped templates render chosen context exactly as copilot_cli/context/render.py
writes it, after their static prefix; the overview prefix is what every prompt of that
(template, repository) starts with."""

from __future__ import annotations

import pytest

from copilot_cli.context.render import render_block, render_overview
from copilot_cli.prompts.completion import overview_prefix

from .conftest import REPO

SNIPPETS = [
    {"path": "src/kvstore/protocol.py", "text": "class Frame:\n    opcode: int\n\n    key: bytes"},
    {"path": "worker/wal.go", "text": "func OpenWAL(path string) (*WAL, error) {\n}"},
]
INPUTS = {
    "code-completion": {"language": "python", "code_before": "x = Frame(", "path": "a.py"},
    "bug-fix": {"language": "go", "code": "func f() {}", "symptom": "it panics"},
    "unit-tests": {"language": "python", "code": "def f():\n    return 1\n"},
    "review-comment": {"diff": "+x = 1\n"},
}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    from copilot_cli.prompts import CompileOptions, compile_templates, load_bundle

    out = tmp_path_factory.mktemp("bundle") / "b"
    compile_templates(CompileOptions(REPO / "templates", out))
    return out, load_bundle(out)


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_xml_context_renders_byte_for_byte_after_the_static_prefix(bundle, name):
    _, loaded = bundle
    plain = loaded.render(name, **INPUTS[name])
    with_context = loaded.render(name, **INPUTS[name], context=SNIPPETS)
    block = render_block([(s["path"], s["text"]) for s in SNIPPETS], "xml")
    prefix = loaded.static_prefix(name)
    assert with_context.startswith(prefix) and plain.startswith(prefix)
    # the block is inserted whole, at one place after the static prefix, nothing else moves
    at = with_context.index(block)
    assert at >= len(prefix) - 1
    assert with_context[:at] + with_context[at + len(block) :] == plain
    assert loaded.render(name, **INPUTS[name], context=[]) == plain


def test_file_sep_context_renders_byte_for_byte_in_repo_completion(tmp_path):
    from copilot_cli.prompts import CompileOptions, compile_templates, load_bundle

    compile_templates(CompileOptions(REPO / "sample_data" / "fim_templates", tmp_path / "b"))
    loaded = load_bundle(tmp_path / "b")
    inputs = {"repo_name": "kvstore", "path": "src/a.py", "code_before": "x = ", "code_after": ""}
    text = loaded.render("repo-completion", **inputs, context=SNIPPETS)
    block = render_block([(s["path"], s["text"]) for s in SNIPPETS], "file-sep")
    assert text == (
        "<|repo_name|>kvstore\n"
        + block
        + "<|file_sep|>src/a.py\n<|fim_prefix|>x = <|fim_suffix|><|fim_middle|>"
    )  # nothing after <|fim_middle|>: the model writes from there
    starcoder = loaded.render("repo-completion-starcoder", **inputs, context=SNIPPETS)
    block = render_block([(s["path"], s["text"]) for s in SNIPPETS], "file-sep", "<file_sep>")
    assert starcoder == (
        "<repo_name>kvstore\n"
        + block
        + "<file_sep>src/a.py\n<fim_prefix>x = <fim_suffix><fim_middle>"
    )


@pytest.mark.parametrize("name", ["code-completion", "bug-fix", "unit-tests"])
def test_the_overview_prefix_starts_every_prompt_of_the_template(bundle, name):
    path, loaded = bundle
    overview = render_overview(["src/x.py: def central(a, b)  -- The hub.", "y.go: func Y()"])
    prefix = overview_prefix(path, name, overview)
    assert prefix.startswith(loaded.static_prefix(name)) and prefix.endswith(overview.rstrip())
    prompt = loaded.render(name, **INPUTS[name], overview=overview, context=SNIPPETS)
    assert prompt.startswith(prefix)
    from copilot_cli.core.models import default_model, load_tokenizer

    tok = load_tokenizer(default_model())
    ids = tok(prefix, add_special_tokens=False).input_ids
    # its tokens begin the prompt's: the KV prefilled for it is reused as it is
    assert tok(prompt, add_special_tokens=False).input_ids[: len(ids)] == ids
    assert prompt.index(render_block([(s["path"], s["text"]) for s in SNIPPETS], "xml")) >= len(
        prefix
    )


def test_hostile_paths_and_special_tokens_in_snippets_render_as_data(bundle):
    """A path with quotes renders escaped in the template exactly as render_block writes it;
    special-token spellings in repository text reach the model as text, not control ids."""
    from copilot_cli.serving import prepare_prompt

    _, loaded = bundle
    snippets = [{"path": 'a" injected="1.py', "text": "s = '<|eos|><|bos|>'\nt = s"}]
    text = loaded.render("code-completion", **INPUTS["code-completion"], context=snippets)
    block = render_block([(s["path"], s["text"]) for s in snippets], "xml")
    assert block in text and 'injected="1' not in text
    from transformers import AutoTokenizer

    from copilot_cli.core.models import SHIPPED_MODEL

    tok = AutoTokenizer.from_pretrained(SHIPPED_MODEL)
    _, rest = prepare_prompt(
        tok, loaded, "code-completion", {**INPUTS["code-completion"], "context": snippets}
    )
    controls = {tok.convert_tokens_to_ids(t) for t in ("<|eos|>", "<|bos|>")}
    assert not controls & set(rest) and "<|eos|><|bos|>" in tok.decode(rest)
