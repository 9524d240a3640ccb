"""Chunk KV: stored once per distinct snippet, moved to any position by RoPE re-rotation, and
selectively recomputed; refused where moved keys would be wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import (
    DynamicCache,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from copilot_cli.core.errors import InputError
from copilot_cli.core.models import cache_kwargs
from copilot_cli.kv.assemble import StoredPiece, assemble_cache
from copilot_cli.kv.rope import rerotate, rotary_of

SMALL = {
    "vocab_size": 300,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
}
FAMILIES = {
    "llama": lambda: LlamaForCausalLM(LlamaConfig(**SMALL)),
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**SMALL)),
    "llama3-scaled": lambda: LlamaForCausalLM(
        LlamaConfig(
            **SMALL,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 256,
            },
        )
    ),
    "linear-scaled": lambda: LlamaForCausalLM(
        LlamaConfig(**SMALL, rope_parameters={"rope_type": "linear", "factor": 4.0})
    ),
    "yarn": lambda: Qwen2ForCausalLM(
        Qwen2Config(
            **SMALL,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 256,
            },
        )
    ),
}


def _model(family: str):
    torch.manual_seed(0)
    return FAMILIES[family]().eval()


def _kv(model, ids: list[int], start: int = 0, cache=None):
    cache = cache if cache is not None else DynamicCache()
    positions = torch.arange(start, start + len(ids))[None]
    with torch.no_grad():
        model(torch.tensor([ids]), position_ids=positions, cache=cache, use_cache=True)
    return cache


def _piece(model, ids: list[int]) -> StoredPiece:
    cache = _kv(model, ids)
    return StoredPiece(
        list(ids), [la.keys[0] for la in cache.layers], [la.values[0] for la in cache.layers], 0
    )


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("shift", [1, 37, 700])
def test_a_chunk_moved_equals_the_chunk_prefilled_there(family, shift):
    model = _model(family)
    ids = list(range(5, 45))
    at_zero, there = _kv(model, ids), _kv(model, ids, start=shift)
    rotary = rotary_of(model)
    for layer_zero, layer_there in zip(at_zero.layers, there.layers, strict=True):
        moved = rerotate(layer_zero.keys, shift, rotary)
        assert torch.allclose(moved, layer_there.keys, atol=2e-5), family
        assert torch.allclose(layer_zero.values, layer_there.values, atol=2e-5)
        back = rerotate(moved, -shift, rotary)
        assert torch.allclose(back, layer_zero.keys, atol=2e-5)
    wrong = rerotate(at_zero.layers[0].keys, shift + 1, rotary)
    assert not torch.allclose(wrong, there.layers[0].keys, atol=1e-3)


PREFIX, FIRST, SECOND = list(range(50, 80)), list(range(100, 130)), list(range(140, 175))


def _max_key_diff(cache, other) -> float:
    return max(
        (a.keys - b.keys).abs().max().item()
        for a, b in zip(cache.layers, other.layers, strict=True)
    )


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_full_recompute_is_a_full_prefill_and_none_is_placement_only(family):
    model = _model(family)
    full = _kv(model, PREFIX + FIRST + SECOND)
    prefix, pieces = _piece(model, PREFIX), [_piece(model, FIRST), _piece(model, SECOND)]
    stored = [t.clone() for t in (*pieces[0].keys, *pieces[0].values, *prefix.values)]
    exact = assemble_cache(model, prefix, pieces, recompute=1.0)
    after = (*pieces[0].keys, *pieces[0].values, *prefix.values)
    assert all(torch.equal(a, b) for a, b in zip(stored, after, strict=True))  # never written
    assert exact.token_ids == PREFIX + FIRST + SECOND
    assert exact.recomputed_tokens == len(FIRST) + len(SECOND)
    assert _max_key_diff(exact.cache, full) < 1e-5
    placed = assemble_cache(model, prefix, pieces, recompute=0.0)
    assert placed.recomputed_tokens == 0
    assert _max_key_diff(placed.cache, full) > 1e-2  # the chunks never saw the prefix
    # with no recompute, each chunk's keys are its stored keys moved: nothing else changed
    first_at = len(PREFIX)
    moved = rerotate(pieces[0].keys[2], first_at, rotary_of(model))
    stored = placed.cache.layers[2].keys[0, :, first_at : first_at + len(FIRST)]
    assert torch.allclose(stored, moved)
    partial = assemble_cache(model, prefix, pieces, recompute=0.15)
    first_k, second_k = round(0.15 * len(FIRST)), round(0.15 * len(SECOND))
    assert partial.recomputed_tokens == first_k + second_k == 9
    assert _max_key_diff(partial.cache, full) < _max_key_diff(placed.cache, full)
    second_at = first_at + len(FIRST)
    for layer in range(len(full.layers)):
        for kind in ("keys", "values"):
            got = getattr(partial.cache.layers[layer], kind)[0]
            want = getattr(full.layers[layer], kind)[0]
            as_placed = getattr(placed.cache.layers[layer], kind)[0]
            # layer 0 is exact for every placed token (it depends on token and position)
            if layer == 0:
                assert torch.allclose(got, want, atol=1e-5), kind
            # the first chunk's first tokens are recomputed over the prefix and each other:
            # exact at every layer
            head = slice(first_at, first_at + first_k)
            assert torch.allclose(got[:, head], want[:, head], atol=1e-5), (layer, kind)
            # the rest of each chunk keeps its stored KV, moved
            for tail in (slice(first_at + first_k, second_at), slice(second_at + second_k, None)):
                assert torch.equal(got[:, tail], as_placed[:, tail]), (layer, kind)
    # the second chunk's first tokens were recomputed too (they read the first chunk's KV,
    # which is approximate, so they are not exact)
    second_head = slice(second_at, second_at + second_k)
    values = partial.cache.layers[2].values[0, :, second_head]
    assert not torch.equal(values, placed.cache.layers[2].values[0, :, second_head])


def test_code_after_the_chunks_reads_their_recomputed_kv():
    """A computed piece after the placed ones runs in the same pass as the recompute: what
    assembling the chunks, recomputing, then prefilling the piece over that cache gives."""
    model = _model("llama")
    after = list(range(200, 230))
    prefix, pieces = _piece(model, PREFIX), [_piece(model, FIRST), _piece(model, SECOND)]
    fused = assemble_cache(model, prefix, pieces + [after], recompute=0.3)
    assert fused.computed_tokens == len(after) and fused.recomputed_tokens == 9 + 10
    apart = assemble_cache(model, prefix, pieces, recompute=0.3)
    with torch.no_grad():
        model(torch.tensor([after]), **cache_kwargs(model, apart.cache))
    assert _max_key_diff(fused.cache, apart.cache) < 1e-5
    stale = assemble_cache(model, prefix, pieces, recompute=0.0)
    with torch.no_grad():
        model(torch.tensor([after]), **cache_kwargs(model, stale.cache))
    assert _max_key_diff(fused.cache, stale.cache) > 1e-3


def test_computed_pieces_between_chunks_attend_to_what_is_assembled():
    model = _model("llama")
    middle = list(range(200, 210))
    got = assemble_cache(
        model, _piece(model, PREFIX), [_piece(model, FIRST), middle], recompute=0.0
    )
    assert got.computed_tokens == len(middle) and got.placed_tokens == len(FIRST)
    assert got.token_ids == PREFIX + FIRST + middle
    exact = assemble_cache(model, _piece(model, PREFIX), [middle], recompute=0.0)
    assert _max_key_diff(exact.cache, _kv(model, PREFIX + middle)) < 1e-5


def test_models_whose_keys_cannot_move_are_refused():
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=300)).eval()
    with pytest.raises(InputError, match="no rotary position embedding"):
        rotary_of(gpt2)
    dynamic = LlamaForCausalLM(
        LlamaConfig(**SMALL, rope_parameters={"rope_type": "dynamic", "factor": 2.0})
    )
    with pytest.raises(InputError, match="changes with the sequence length"):
        rotary_of(dynamic)
    sliding = MistralForCausalLM(MistralConfig(**SMALL, sliding_window=32)).eval()
    rotary_of(sliding, prompt_tokens=32)
    with pytest.raises(InputError, match="sliding window"):
        assemble_cache(sliding, _piece(sliding, PREFIX), [_piece(sliding, FIRST)])
    model = _model("llama")
    with pytest.raises(InputError, match=r"within 0\.\.1"):
        assemble_cache(model, _piece(model, PREFIX), [_piece(model, FIRST)], recompute=1.5)


@pytest.mark.parametrize(
    ("config", "refusal"),
    [
        ("GPT2Config", "no rotary position embedding"),
        ("BloomConfig", "no rotary position embedding"),  # ALiBi
        ("Qwen3NextConfig", "recurrent state"),  # linear attention beside full attention
        ("JambaConfig", "no rotary position embedding"),  # mamba layers, no RoPE at all
        ("BambaConfig", "recurrent state"),  # mamba layers beside RoPE attention
        ("FalconH1Config", "recurrent state"),
        ("RecurrentGemmaConfig", "recurrent state"),
    ],
)
def test_engines_refuse_chunk_kv_from_the_config_alone(config, refusal):
    """What vLLM's connector checks (it holds a config, not the weights): the same refusals
    as a loaded model, and a plain RoPE model's frequencies."""
    import transformers

    from copilot_cli.kv.rope import rotary_of_config

    with pytest.raises(InputError, match=refusal):
        rotary_of_config(getattr(transformers, config)())
    plain = rotary_of_config(LlamaConfig(**SMALL))
    assert torch.equal(plain.inv_freq, rotary_of(_model("llama")).inv_freq)


@pytest.fixture(scope="module")
def chunk_kv(tmp_path_factory):
    """The sample repository chunked, and the KV of the shipped templates' prefixes and of its
    12 highest-ranked chunks stored in one folder (shipped model and tokenizer)."""
    from typer.testing import CliRunner

    from copilot_cli.cli import app
    from tests.context.conftest import SAMPLE

    runner, root = CliRunner(), tmp_path_factory.mktemp("chunk-kv")
    paths = {name: root / name for name in ("chunks.jsonl", "registry.json", "bundle", "kv")}
    chunks, registry, bundle, kv = paths.values()
    for args in (
        ["chunk", str(SAMPLE), "-o", str(chunks), "--registry", str(registry), "--jobs", "1"],
        ["compile-templates", "templates", "-o", str(bundle)],
        [
            *("prefill-kv", str(bundle), "-o", str(kv), "--chunks", str(chunks)),
            *("--registry", str(registry), "--top", "12", "--snippet-format", "xml", "--json"),
        ],
    ):
        ran = runner.invoke(app, args)
        assert ran.exit_code == 0, ran.output
    return {**paths, "first": json.loads(ran.stdout)}


def _stored_chunks(kv) -> dict:
    index = json.loads((kv / "index.json").read_text())
    return {n: e for n, e in index["prefixes"].items() if e.get("kind") == "chunk"}


def test_each_distinct_snippet_is_stored_once_after_one_shared_lead(chunk_kv, shipped):
    from copilot_cli.chunking import read_chunks, read_registry
    from copilot_cli.context.render import snippet_text
    from copilot_cli.kv.chunkkv import chunk_name, lead_ids

    records = read_chunks(chunk_kv["chunks.jsonl"]).chunks
    by_id = {r.id: r for r in records}
    top = [by_id[e.id] for e in read_registry(chunk_kv["registry.json"]).entries[:12]]
    snippets = {snippet_text(r.first_path, r.text, "xml") for r in top}
    stored = _stored_chunks(chunk_kv["kv"])
    assert set(stored) == {chunk_name(s) for s in snippets}
    lead = lead_ids(shipped.tokenizer)
    assert {e["lead_tokens"] for e in stored.values()} == {len(lead)}
    assert all(e["token_ids"][: len(lead)] == lead for e in stored.values())
    assert len({e["segments"][0] for e in stored.values()}) == 1  # the lead, computed once
    # snippets share their opening (`<snippet path="src/`): the radix tree stores it once too
    assert len({e["segments"][-1] for e in stored.values()}) == len(stored)


def test_a_rerun_reuses_every_chunk_and_inspect_reads_them(chunk_kv, runner):
    from copilot_cli.cli import app

    kv, chunks = chunk_kv["kv"], chunk_kv["chunks.jsonl"]
    args = [str(chunk_kv["bundle"]), "-o", str(kv), "--chunks", str(chunks), "--json"]
    args += ["--registry", str(chunk_kv["registry.json"]), "--top", "12"]
    ran = runner.invoke(app, ["prefill-kv", *args, "--snippet-format", "xml"])
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.stdout)["computed_tokens"] == 0
    assert chunk_kv["first"]["computed_tokens"] > 0
    ran = runner.invoke(app, ["inspect", str(kv)])
    assert ran.exit_code == 0 and "chunk/" in ran.output, ran.output


def _context(chunk_kv, count: int) -> list[dict[str, str]]:
    from copilot_cli.chunking import read_chunks

    records = read_chunks(chunk_kv["chunks.jsonl"]).chunks
    stored = {e["origin"].removeprefix("chunk:") for e in _stored_chunks(chunk_kv["kv"]).values()}
    chosen = [r for r in records if r.id in stored][:count]
    return [{"path": r.first_path, "text": r.text.rstrip("\n")} for r in chosen]


def test_a_request_reuses_stored_chunks_and_full_recompute_is_a_full_prefill(chunk_kv, shipped):
    from copilot_cli.core.tokens import prompt_ids
    from copilot_cli.kv import PrefixStore
    from copilot_cli.prompts import load_bundle
    from copilot_cli.serving import assemble_request, generate_with_prefix

    model, tok = shipped.model, shipped.tokenizer
    bundle, kv = load_bundle(chunk_kv["bundle"]), chunk_kv["kv"]
    inputs = {"language": "python", "code_before": "def mean(xs):\n"}
    context = _context(chunk_kv, 3)
    assembled, rest, _ = assemble_request(
        model, tok, bundle, kv, "code-completion", inputs, context, recompute=0.0
    )
    assert assembled.placed_tokens > 0 and assembled.recomputed_tokens == 0
    text = bundle.render("code-completion", **inputs, context=context)
    assert tok.decode(assembled.token_ids + rest) == tok.decode(prompt_ids(tok, text))
    kwargs = {"max_new_tokens": 10, "do_sample": False, "pad_token_id": tok.pad_token_id}
    ids = torch.tensor([assembled.token_ids + rest])
    plain = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
    store = PrefixStore(kv, model)
    for source in (kv, store):
        exact = generate_with_prefix(
            model, tok, bundle, source, "code-completion", inputs, context, 1.0, **kwargs
        )
        assert exact.tolist() == plain.tolist()
    assert store.in_use() == 0 and not store.segments._refs
    reused = generate_with_prefix(
        model, tok, bundle, kv, "code-completion", inputs, context, 0.15, **kwargs
    )
    assert reused.shape == plain.shape


def test_chunk_kv_of_another_model_is_refused(chunk_kv, tiny_llama_dir):
    from copilot_cli.core.errors import FingerprintMismatch
    from copilot_cli.core.models import ModelSpec, load_model
    from copilot_cli.kv.assemble import load_piece

    other = load_model(ModelSpec(str(tiny_llama_dir)))
    name = next(iter(_stored_chunks(chunk_kv["kv"])))
    with pytest.raises(FingerprintMismatch):
        load_piece(chunk_kv["kv"], other.model, name)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (["--top", "0"], "--top"),
        (["--snippet-format", "html"], "--snippet-format"),
        (["--registry", "registry.json"], "--registry"),
        (["--chunks", "missing.jsonl"], "--chunks"),
    ],
)
def test_bad_chunk_options_exit_2(chunk_kv, runner, extra, field, tmp_path):
    from copilot_cli.cli import app

    base = ["prefill-kv", str(chunk_kv["bundle"]), "-o", str(tmp_path / "kv")]
    if field in ("--top", "--snippet-format"):
        base += ["--chunks", str(chunk_kv["chunks.jsonl"])]
    extra = [str(chunk_kv[a]) if a in chunk_kv else a for a in extra]
    ran = runner.invoke(app, [*base, *extra])
    assert ran.exit_code == 2, ran.output
    assert field in ran.output and "Traceback" not in ran.output
    assert not (tmp_path / "kv").exists()


@pytest.fixture(scope="module")
def shared_kv(tmp_path_factory, shipped):
    """Six prefixes over three shared trunks (the shipped model): segments shared 2-6 ways."""
    from copilot_cli.kv import PrefillOptions, PrefixSource, prefill_sources

    out = tmp_path_factory.mktemp("shared") / "kv"
    sources = [
        PrefixSource(f"p{a}{b}", f"Role {a}.\n" * 4 + f"Rule {b}.\n" * 3, "test")
        for a in range(2)
        for b in range(3)
    ]
    prefill_sources(shipped, sources, PrefillOptions(out=out, chunk_size=64))
    return out


@settings(max_examples=40)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["acquire", "release", "squeeze"]), st.integers(0, 5)),
        max_size=30,
    )
)
def test_refcounts_never_leak_and_what_is_in_use_is_never_evicted(shared_kv, shipped, steps):
    from copilot_cli.kv import PrefixStore

    store = PrefixStore(shared_kv, shipped.model)
    names = sorted(store.kv.index.prefixes)
    open_requests: list[str] = []
    for action, pick in steps:
        name = names[pick]
        if action == "acquire":
            cache = store.acquire(name)
            assert cache.get_seq_length() == len(store.token_ids(name))
            open_requests.append(name)
        elif action == "release" and name in open_requests:
            open_requests.remove(name)
            store.release(name)
        elif action == "squeeze":
            store.max_bytes = pick * 20_000
        assert all(store.resident(n) for n in open_requests)
        held = store.segments._segments
        assert store.bytes_held == sum(s.nbytes for s in held.values())
        in_use = {h for n in open_requests for h in store.kv.prefix(n).segments}
        assert set(store.segments._refs) == in_use
        assert store.bytes_held <= store.max_bytes or set(held) <= in_use | set(list(held)[-1:])
    for name in open_requests:
        store.release(name)
    assert store.in_use() == 0 and not store.segments._refs


def test_a_corrupt_chunk_or_another_tokenizer_is_refused(chunk_kv, shipped, tmp_path):
    import shutil

    from copilot_cli.core.errors import ArtifactError, FingerprintMismatch
    from copilot_cli.kv.assemble import load_piece

    kv = Path(shutil.copytree(chunk_kv["kv"], tmp_path / "kv"))
    name, entry = next(iter(_stored_chunks(kv).items()))
    other_tokenizer = _other_tokenizer(tmp_path)
    with pytest.raises(FingerprintMismatch):
        load_piece(kv, shipped.model, name, tokenizer=other_tokenizer)
    segment = kv / "segments" / f"{entry['segments'][-1]}.safetensors"
    data = bytearray(segment.read_bytes())
    data[-5] ^= 0x40
    segment.write_bytes(bytes(data))
    with pytest.raises(ArtifactError):
        load_piece(kv, shipped.model, name)


def _other_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    from copilot_cli.core.models import SHIPPED_MODEL

    other = AutoTokenizer.from_pretrained(SHIPPED_MODEL)
    other.add_special_tokens({"additional_special_tokens": ["<|extra|>"]})
    other.save_pretrained(tmp_path / "other-tokenizer")
    return AutoTokenizer.from_pretrained(tmp_path / "other-tokenizer")


# -- tampered chunk KV: bounded by inspect, checked against the snippet's text at placement ----


def _resealed_copy(chunk_kv, tmp_path, edit):
    import shutil

    from copilot_cli.core.artifacts import DIGEST_KEY, canonical_json, sealed

    copy = Path(shutil.copytree(chunk_kv["kv"], tmp_path / "kv"))
    index = json.loads((copy / "index.json").read_text())
    index.pop(DIGEST_KEY)
    edit(index)
    (copy / "index.json").write_text(canonical_json(sealed(index)))
    return copy


def _swap_two_chunks(index):
    names = sorted(n for n, e in index["prefixes"].items() if e.get("kind") == "chunk")
    a, b = index["prefixes"][names[0]], index["prefixes"][names[1]]
    for key in ("token_ids", "tokens", "segments", "block_hashes"):
        a[key], b[key] = b[key], a[key]  # each name and text digest kept: only contents moved


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("lead_tokens", 0),
        ("lead_tokens", -5),
        ("lead_tokens", 10**6),
        ("kind", [1]),
        ("kind", "model"),
        ("lead_tokens", "3"),
    ],
)
def test_inspect_bounds_every_count_and_kind_of_a_chunk_entry(
    chunk_kv, runner, tmp_path, field, value
):
    from copilot_cli.cli import app

    def edit(index):
        name = next(n for n, e in index["prefixes"].items() if e.get("kind") == "chunk")
        index["prefixes"][name][field] = value

    copy = _resealed_copy(chunk_kv, tmp_path, edit)
    result = runner.invoke(app, ["inspect", str(copy)])
    assert result.exit_code == 1 and "bad:" in result.stderr, result.output
    assert field.split("_")[0] in result.stderr


def test_swapped_chunk_kv_is_refused_before_it_is_placed(chunk_kv, shipped, tmp_path):
    from copilot_cli.core.errors import ArtifactError
    from copilot_cli.prompts import load_bundle
    from copilot_cli.serving import generate_with_prefix

    copy = _resealed_copy(chunk_kv, tmp_path, _swap_two_chunks)
    bundle = load_bundle(chunk_kv["bundle"])
    inputs = {"language": "python", "code_before": "def mean(xs):\n"}
    stored = _stored_chunks(chunk_kv["kv"])
    records = {r["path"] + r["text"] for r in _context(chunk_kv, 40)}
    assert len(stored) >= 2 and records
    with pytest.raises(ArtifactError, match="other tokens than its snippet"):
        generate_with_prefix(
            shipped.model,
            shipped.tokenizer,
            bundle,
            copy,
            "code-completion",
            inputs,
            _context(chunk_kv, 40),
            0.0,
            max_new_tokens=2,
            do_sample=False,
        )


def test_special_token_spellings_in_repository_text_are_stored_as_text(shipped):
    from copilot_cli.context import snippet_text
    from copilot_cli.kv.chunkkv import lead_ids, snippet_sources

    tok = shipped.tokenizer
    text = "x = '<|bos|><|eos|><|pad|>'\n"
    [source] = snippet_sources(tok, [("a.py", text, "chunk:1")], "xml")
    own = list(source.token_ids[len(lead_ids(tok)) :])
    controls = {tok.convert_tokens_to_ids(t) for t in ("<|bos|>", "<|eos|>", "<|pad|>")}
    assert not controls & set(own)
    assert tok.decode(own) == snippet_text("a.py", text, "xml")


def test_a_snippet_path_cannot_add_an_attribute(shipped):
    from copilot_cli.context import render_block, snippet_text

    text = snippet_text('a" injected="1.py', "x = 1", "xml")
    assert text.startswith('<snippet path="a&#34; injected=&#34;1.py">')
    assert 'injected="' not in render_block([('a" injected="1.py', "x = 1")], "xml")


def test_auto_stores_snippets_in_the_format_the_bundle_writes(chunk_kv, shipped, tmp_path):
    """`--snippet-format auto` with a bundle follows its templates (a tokenizer with a
    file-separator token would choose file-sep alone; the llama.cpp endpoint test covers
    SmolLM2's): the shipped templates write xml snippets, the repository-completion template
    file-sep ones; a format given is kept."""
    from copilot_cli.kv import bundle_snippet_format
    from copilot_cli.prompts import CompileOptions, compile_templates, load_bundle
    from tests.context.conftest import REPO

    shipped_bundle = load_bundle(chunk_kv["bundle"])
    assert bundle_snippet_format(shipped_bundle, shipped.tokenizer) == "xml"
    assert bundle_snippet_format(shipped_bundle, shipped.tokenizer, "file-sep") == "file-sep"
    compile_templates(CompileOptions(REPO / "sample_data" / "fim_templates", tmp_path / "fim"))
    fim = load_bundle(tmp_path / "fim")
    assert bundle_snippet_format(fim, shipped.tokenizer) == "file-sep"
