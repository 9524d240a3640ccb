"""Prefill, store, load and continue: cached logits equal a full recompute on 3 architectures."""

import hashlib
import json
import os
import shutil

import pytest
import torch

from copilot_cli.core.errors import ArtifactError, FingerprintMismatch, InputError
from copilot_cli.core.models import ModelSpec, load_model
from copilot_cli.core.tokens import continuation_ids, prompt_ids
from copilot_cli.kv import (
    KVCacheDir,
    PrefillOptions,
    PrefixSource,
    PrefixStore,
    load_prefix,
    prefill_sources,
)
from copilot_cli.kv.format import read_segment

SHARED = "You are a careful assistant. Follow the rules below exactly.\n" * 6
SOURCES = [
    PrefixSource("alpha", SHARED + "Task: write tests for the function.\n", "test"),
    PrefixSource("beta", SHARED + "Task: write a docstring.\n", "test"),
    PrefixSource("gamma", SHARED, "test"),
]
PROBE = "def add(a, b):\n    return a + b\n"


def _build(path, tmp_path, sources=SOURCES, **options):
    loaded = load_model(ModelSpec(str(path)))
    result = prefill_sources(
        loaded, sources, PrefillOptions(out=tmp_path / "kv", chunk_size=16, **options)
    )
    return loaded, result


@pytest.mark.parametrize("arch", ["llama-gqa", "gpt2", "qwen2"])
def test_cached_prefix_continues_exactly(arch, arch_dirs, tmp_path):
    loaded, result = _build(arch_dirs[arch], tmp_path)
    model, tok = loaded.model, loaded.tokenizer
    probe = continuation_ids(tok, PROBE)
    for source in SOURCES:
        ids = prompt_ids(tok, source.text)
        cache = load_prefix(tmp_path / "kv", model, source.name, tokenizer=tok)
        with torch.no_grad():
            cached = model(torch.tensor([probe]), cache=cache).logits[0]
            full = model(torch.tensor([ids + probe])).logits[0, len(ids) :]
        assert (cached - full).abs().max().item() < 1e-4
    # shared leading tokens are computed and stored once
    assert result.distinct_tokens < result.sum_prefix_tokens
    assert result.computed_tokens == result.distinct_tokens


def test_stored_shapes_follow_the_model(arch_dirs, tmp_path):
    _build(arch_dirs["qwen2"], tmp_path)
    kv = KVCacheDir(tmp_path / "kv")
    segment = read_segment(kv.segment_path(kv.prefix("alpha").segments[0]))
    assert segment.keys[0].shape[0] == 1  # one kv head (grouped-query)
    assert segment.keys[0].shape[2] == 16  # head_dim 64 / 4 heads
    assert json.loads(segment.metadata["kv_heads"]) == [1, 1]
    assert json.loads(segment.metadata["rope"])["rope_theta"] > 0


def test_disk_grows_with_distinct_tokens(tiny_llama_dir, tmp_path):
    sources = [
        PrefixSource(f"t{i}", SHARED + f"Template number {i} does its own thing.\n", "t")
        for i in range(6)
    ]
    _, shared = _build(tiny_llama_dir, tmp_path, sources=sources)
    separate = 0
    for i, source in enumerate(sources):
        _, alone = _build(tiny_llama_dir, tmp_path / f"s{i}", sources=[source])
        separate += alone.bytes_on_disk
    assert shared.bytes_on_disk < 0.4 * separate


def test_each_load_returns_an_independent_cache(shipped, tmp_path):
    prefill_sources(shipped, SOURCES, PrefillOptions(out=tmp_path / "kv"))
    model, tok = shipped.model, shipped.tokenizer
    ids = prompt_ids(tok, SOURCES[0].text)
    first = load_prefix(tmp_path / "kv", model, "alpha")
    model.generate(
        torch.tensor([ids + continuation_ids(tok, PROBE)]),
        cache=first,
        max_new_tokens=5,
        do_sample=False,
        pad_token_id=tok.pad_token_id,
    )
    second = load_prefix(tmp_path / "kv", model, "alpha")
    assert second.get_seq_length() == len(ids)
    assert first.get_seq_length() > len(ids)


def test_prefix_store_shares_counts_and_evicts(shipped, tmp_path):
    prefill_sources(shipped, SOURCES, PrefillOptions(out=tmp_path / "kv"))
    store = PrefixStore(tmp_path / "kv", shipped.model)
    a1 = store.acquire("alpha")
    a2 = store.acquire("alpha")
    assert (store.misses, store.hits) == (1, 1)
    index = json.loads((tmp_path / "kv" / "index.json").read_text())
    chain = index["prefixes"]["alpha"]["segments"]
    (trunk,) = index["prefixes"]["gamma"]["segments"]  # gamma is the shared trunk alone
    assert chain[0] == trunk and len(chain) == 3  # trunk, "Task: write ", alpha's own end
    held = {h: store.segments.get(h) for h in chain}
    assert store.bytes_held == sum(s.nbytes for s in held.values())  # each segment once
    tok = shipped.tokenizer
    ids = prompt_ids(tok, SOURCES[0].text)
    shipped.model.generate(
        torch.tensor([ids + continuation_ids(tok, PROBE)]),
        cache=a1,
        max_new_tokens=4,
        do_sample=False,
        pad_token_id=tok.pad_token_id,
    )
    assert a2.get_seq_length() == len(ids)  # the other request did not see those tokens
    assert torch.equal(a2.layers[0].keys[0], torch.cat([s.keys[0] for s in held.values()], 1))
    store.acquire("gamma")  # the shared trunk alone: nothing new read, its tensors shared
    assert (store.misses, store.hits) == (1, 2)
    assert store.acquire("gamma").layers[0].keys.data_ptr() == held[trunk].keys[0].data_ptr()
    both = store.bytes_held
    store.max_bytes = 1  # no room: only what requests use stays
    assert store.evictions == 0 and store.bytes_held == both  # alpha and gamma are in use
    store.acquire("beta")  # shares two segments with alpha, reads its own end though over
    assert store.segments.refs(trunk) == 5 and store.segments.refs(chain[1]) == 3
    for name in ("alpha", "alpha", "gamma", "gamma", "beta"):
        store.release(name)
    assert store.in_use() == 0 and store.bytes_held == 0 and store.evictions == 4


def test_generate_with_prefix_is_token_identical(shipped, tmp_path):
    from pathlib import Path

    from copilot_cli.kv.builder import prefixes_from_bundle
    from copilot_cli.prompts import CompileOptions, compile_templates, load_bundle
    from copilot_cli.serving import generate_with_prefix

    repo = Path(__file__).resolve().parents[2]
    compile_templates(CompileOptions(repo / "templates", tmp_path / "b"), shipped.tokenizer)
    bundle = load_bundle(tmp_path / "b")
    sources = prefixes_from_bundle(tmp_path / "b", shipped.tokenizer_fingerprint)
    prefill_sources(shipped, sources, PrefillOptions(out=tmp_path / "kv"))
    model, tok = shipped.model, shipped.tokenizer
    cases = [
        ("code-completion", {"language": "python", "code_before": "def mean(xs):\n"}),
        ("review-comment", {"diff": "+x = eval(input())\n"}),
    ]
    store = PrefixStore(tmp_path / "kv", model)
    for name, inputs in cases:
        text = bundle.render(name, **inputs)
        add_special = bundle.entry(name).adds_special_tokens
        ids = torch.tensor([prompt_ids(tok, text, add_special=add_special)])
        kwargs = {"max_new_tokens": 12, "do_sample": False, "pad_token_id": tok.pad_token_id}
        plain = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
        for kv in (tmp_path / "kv", store):
            cached = generate_with_prefix(model, tok, bundle, kv, name, inputs, **kwargs)
            assert cached.tolist() == plain.tolist()
    # repository context comes after the static prefix: the same cached prefix serves it
    context = [{"path": "src/stats.py", "text": "def total(xs):\n    return sum(xs)"}]
    inputs = {"language": "python", "code_before": "def mean(xs):\n"}
    text = bundle.render("code-completion", **inputs, context=context)
    assert "def total(xs)" in text
    ids = torch.tensor([prompt_ids(tok, text, add_special=True)])
    plain = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
    cached = generate_with_prefix(
        model, tok, bundle, store, "code-completion", inputs, context=context, **kwargs
    )
    assert cached.tolist() == plain.tolist()


def test_fingerprint_mismatch_names_both(tiny_llama_dir, gpt2_dir, tmp_path):
    loaded, _ = _build(tiny_llama_dir, tmp_path)
    other = load_model(ModelSpec(str(gpt2_dir)))
    with pytest.raises(FingerprintMismatch) as info:
        load_prefix(tmp_path / "kv", other.model, "alpha")
    assert loaded.model_fingerprint[:16] in str(info.value)
    assert other.model_fingerprint[:16] in str(info.value)


def test_tokenizer_mismatch_is_refused(tiny_llama_dir, tmp_path):
    loaded, _ = _build(tiny_llama_dir, tmp_path)
    segment = next((tmp_path / "kv" / "segments").glob("*.safetensors"))
    data = read_segment(segment)
    assert data.metadata["tokenizer_fingerprint"] == loaded.tokenizer_fingerprint
    from transformers import AutoTokenizer

    other_dir = shutil.copytree(tiny_llama_dir, tmp_path / "other-tok")
    other = AutoTokenizer.from_pretrained(other_dir)
    other.add_special_tokens({"additional_special_tokens": ["<|extra|>"]})
    other.save_pretrained(other_dir)
    with pytest.raises(FingerprintMismatch, match="tokenizer"):
        load_prefix(
            tmp_path / "kv",
            loaded.model,
            "alpha",
            tokenizer=AutoTokenizer.from_pretrained(other_dir),
        )


@pytest.mark.parametrize("damage", ["truncate", "bitflip"])
def test_damaged_files_are_refused(tiny_llama_dir, tmp_path, damage):
    loaded, _ = _build(tiny_llama_dir, tmp_path)
    kv = KVCacheDir(tmp_path / "kv")
    path = kv.segment_path(kv.prefix("alpha").segments[-1])
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        path.write_bytes(bytes(data[:-100]))
        match = "does not fill"
    else:
        data[-50] ^= 0x10
        path.write_bytes(bytes(data))
        match = "digest"
    with pytest.raises(ArtifactError, match=match):
        load_prefix(tmp_path / "kv", loaded.model, "alpha")


def test_unknown_format_version(tiny_llama_dir, tmp_path):
    loaded, _ = _build(tiny_llama_dir, tmp_path)
    index_path = tmp_path / "kv" / "index.json"
    index = json.loads(index_path.read_text())
    index["format_version"] = 7
    index_path.write_text(json.dumps(index))
    with pytest.raises(ArtifactError, match="format_version 7"):
        load_prefix(tmp_path / "kv", loaded.model, "alpha")


def test_prefix_longer_than_context_is_refused(tiny_llama_dir, tmp_path):
    long = PrefixSource("long", "word " * 600, "test")
    with pytest.raises(InputError, match="does not fit the model's context of 512"):
        _build(tiny_llama_dir, tmp_path, sources=[long])


def test_sliding_window_prefix_is_refused(mistral_sliding_dir, tmp_path):
    long = PrefixSource("long", "word " * 40, "test")
    with pytest.raises(InputError, match="sliding window"):
        _build(mistral_sliding_dir, tmp_path, sources=[long])
    short = PrefixSource("short", "word " * 10, "test")
    loaded, _ = _build(mistral_sliding_dir, tmp_path, sources=[short])
    cache = load_prefix(tmp_path / "kv", loaded.model, "short")
    ids = prompt_ids(loaded.tokenizer, short.text)
    probe = continuation_ids(loaded.tokenizer, "x = 1\n")
    with torch.no_grad():
        cached = loaded.model(torch.tensor([probe]), cache=cache).logits[0]
        full = loaded.model(torch.tensor([ids + probe])).logits[0, len(ids) :]
    assert (cached - full).abs().max().item() < 1e-4


def test_empty_prefix_is_skipped_with_a_warning(tiny_llama_dir, tmp_path):
    _, result = _build(
        tiny_llama_dir, tmp_path, sources=[PrefixSource("empty", "", "e"), SOURCES[0]]
    )
    assert result.skipped == ["empty"]
    assert any("empty" in w for w in result.warnings)


def test_rebuild_is_byte_identical_and_reuses_segments(tiny_llama_dir, tmp_path):
    _build(tiny_llama_dir, tmp_path)
    digest = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (tmp_path / "kv").rglob("*")
        if p.is_file()
    }
    shutil.move(tmp_path / "kv", tmp_path / "first")
    _, again = _build(tiny_llama_dir, tmp_path)
    assert again.computed_tokens > 0
    assert digest == {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (tmp_path / "kv").rglob("*")
        if p.is_file()
    }
    _, third = _build(tiny_llama_dir, tmp_path)
    assert third.computed_tokens == 0 and third.reused_tokens == third.distinct_tokens


class _Hashes:
    """Counts full verifications (every one hashes the canonical header first)."""

    def __init__(self, monkeypatch) -> None:
        from copilot_cli.core import safetensors_io

        self.count = 0
        original = safetensors_io._canonical_header

        def counting(*args, **kwargs):
            self.count += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(safetensors_io, "_canonical_header", counting)


def _flip(path, keep_times: bool) -> None:
    before = path.stat()
    with path.open("r+b") as handle:  # in place: same inode, same size
        handle.seek(-50, 2)
        byte = handle.read(1)
        handle.seek(-50, 2)
        handle.write(bytes([byte[0] ^ 0x10]))
    if keep_times:  # mtime put back; the kernel still moves ctime
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.mark.parametrize("keep_times", [False, True])
def test_a_verified_segment_flipped_afterwards_is_still_refused(
    tiny_llama_dir, tmp_path, monkeypatch, keep_times
):
    from copilot_cli.core import verified

    loaded, _ = _build(tiny_llama_dir, tmp_path)
    monkeypatch.setattr(verified, "RACY_NS", 0)  # files here were written a moment ago
    verified.forget_verified()
    hashes = _Hashes(monkeypatch)
    load_prefix(tmp_path / "kv", loaded.model, "alpha")
    first = hashes.count
    assert first >= 1
    load_prefix(tmp_path / "kv", loaded.model, "alpha")
    assert hashes.count == first  # unchanged files are not hashed twice in a process
    kv = KVCacheDir(tmp_path / "kv")
    _flip(kv.segment_path(kv.prefix("alpha").segments[-1]), keep_times)
    with pytest.raises(ArtifactError, match="digest"):
        load_prefix(tmp_path / "kv", loaded.model, "alpha")
    with pytest.raises(ArtifactError, match="digest"):  # and on every later try
        load_prefix(tmp_path / "kv", loaded.model, "alpha")


def test_recently_changed_files_are_hashed_on_every_load(tiny_llama_dir, tmp_path, monkeypatch):
    from copilot_cli.core import verified

    loaded, _ = _build(tiny_llama_dir, tmp_path)  # written just now: within the racy window
    verified.forget_verified()
    hashes = _Hashes(monkeypatch)
    load_prefix(tmp_path / "kv", loaded.model, "alpha")
    first = hashes.count
    load_prefix(tmp_path / "kv", loaded.model, "alpha")
    assert hashes.count == 2 * first


def test_a_replaced_segment_is_verified_again(tiny_llama_dir, tmp_path, monkeypatch):
    from copilot_cli.core import verified

    loaded, _ = _build(tiny_llama_dir, tmp_path)
    monkeypatch.setattr(verified, "RACY_NS", 0)
    verified.forget_verified()
    load_prefix(tmp_path / "kv", loaded.model, "alpha")
    kv = KVCacheDir(tmp_path / "kv")
    path = kv.segment_path(kv.prefix("alpha").segments[-1])
    data = bytearray(path.read_bytes())
    data[-50] ^= 0x10
    replacement = path.with_suffix(".new")
    replacement.write_bytes(bytes(data))
    os.replace(replacement, path)  # a new inode under the same name
    with pytest.raises(ArtifactError, match="digest"):
        load_prefix(tmp_path / "kv", loaded.model, "alpha")


def test_inspect_hashes_every_byte_whatever_was_loaded_before(
    tiny_llama_dir, tmp_path, monkeypatch
):
    from copilot_cli.core import verified
    from copilot_cli.pipeline.inspect import inspect_artifact

    loaded, _ = _build(tiny_llama_dir, tmp_path)
    monkeypatch.setattr(verified, "RACY_NS", 0)
    load_prefix(tmp_path / "kv", loaded.model, "alpha")
    hashes = _Hashes(monkeypatch)
    inspection = inspect_artifact(tmp_path / "kv")
    assert not inspection.problems
    segments = len(list((tmp_path / "kv" / "segments").glob("*.safetensors")))
    assert hashes.count >= segments


def test_an_index_edited_after_a_load_is_refused(tiny_llama_dir, tmp_path, monkeypatch):
    from copilot_cli.core import verified

    loaded, _ = _build(tiny_llama_dir, tmp_path)
    monkeypatch.setattr(verified, "RACY_NS", 0)
    load_prefix(tmp_path / "kv", loaded.model, "alpha")
    index_path = tmp_path / "kv" / "index.json"
    index = json.loads(index_path.read_text())
    index["prefixes"]["alpha"]["template"] = "edited"
    index_path.write_text(json.dumps(index))  # digest not recomputed
    with pytest.raises(ArtifactError, match="digest"):
        load_prefix(tmp_path / "kv", loaded.model, "alpha")


def test_half_precision_verify_falls_back_to_the_models_noise_floor(
    tiny_llama_dir, tmp_path, monkeypatch
):
    """Past the fixed bound, a bfloat16 prefix is judged against the logits' own rounding noise
    (measured, not assumed), and a cache that is really wrong still fails that bound."""
    from copilot_cli.kv import verify

    loaded = load_model(ModelSpec(str(tiny_llama_dir), dtype="bfloat16"))
    prefill_sources(loaded, SOURCES[:1], PrefillOptions(out=tmp_path / "kv", dtype="bfloat16"))
    monkeypatch.setitem(verify.TOLERANCE, "bfloat16", -1.0)  # every prefix past the fixed bound
    (good,) = verify.verify_prefixes(loaded, tmp_path / "kv")
    assert good.noise_floor is not None and good.noise_floor >= 0  # a tiny model may be exact
    assert good.tolerance == pytest.approx(verify.FLOOR_HEADROOM * good.noise_floor)
    assert good.passed, good

    real_load = verify.load_prefix

    def shifted(*args, **kwargs):  # a cache whose keys are off, as a wrong or stale one is
        cache = real_load(*args, **kwargs)
        for layer in cache.layers:
            layer.keys.add_(1.0)
        return cache

    monkeypatch.setattr(verify, "load_prefix", shifted)
    (bad,) = verify.verify_prefixes(loaded, tmp_path / "kv")
    assert bad.noise_floor == pytest.approx(good.noise_floor)
    assert not bad.passed and bad.max_abs_diff > bad.tolerance


def test_float32_verify_never_widens_its_bound(tiny_llama_dir, tmp_path):
    loaded, _ = _build(tiny_llama_dir, tmp_path, sources=SOURCES[:1])
    from copilot_cli.kv import verify

    (report,) = verify.verify_prefixes(loaded, tmp_path / "kv")
    assert report.noise_floor is None and report.tolerance == verify.TOLERANCE["float32"]


@pytest.mark.parametrize("length", [1, 2])
def test_a_segment_chain_with_a_cycle_is_refused_not_followed_forever(
    tiny_llama_dir, tmp_path, length
):
    from safetensors import safe_open
    from safetensors.torch import save_file

    loaded, _ = _build(tiny_llama_dir, tmp_path)
    files = sorted((tmp_path / "kv" / "segments").glob("*.safetensors"))[:length]
    assert len(files) == length
    for i, path in enumerate(files):  # each names the next as its parent; the last the first
        with safe_open(str(path), "pt") as handle:
            tensors = {k: handle.get_tensor(k) for k in handle.keys()}  # noqa: SIM118 (safe_open, not a dict)
            metadata = dict(handle.metadata())
        metadata["parent"] = files[(i + 1) % length].stem
        save_file(tensors, str(path), metadata=metadata)
    with pytest.raises(ArtifactError, match="cycle"):
        load_prefix(files[0], loaded.model, "alpha")


def test_dtype_auto_keeps_the_saved_dtype_and_float32_converts(runner, tiny_llama_dir, tmp_path):
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from copilot_cli.cli import app

    saved = tmp_path / "bf16-model"
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.bfloat16)
    model.save_pretrained(saved)
    AutoTokenizer.from_pretrained(tiny_llama_dir).save_pretrained(saved)
    text = tmp_path / "p.txt"
    text.write_text("You are a careful code assistant.\n")
    help_text = runner.invoke(app, ["prefill-kv", "--help"]).output
    assert "[default: auto]" in " ".join(help_text.split())
    for flags, expected in (([], "bfloat16"), (["--dtype", "float32"], "float32")):
        out = tmp_path / f"kv-{expected}"
        args = ["prefill-kv", "--text", str(text), "-m", str(saved), "-o", str(out), *flags]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert json.loads((out / "index.json").read_text())["dtype"] == expected


def test_verify_recomputes_each_distinct_prefix_token_once(shipped_artifacts):
    from copilot_cli.core.models import SHIPPED_MODEL, load_model
    from copilot_cli.core.modelspec import ModelSpec
    from copilot_cli.core.tokens import continuation_ids
    from copilot_cli.kv import KVCacheDir, model_geometry
    from copilot_cli.kv.verify import PROBE_TEXT, verify_prefixes

    out, _ = shipped_artifacts
    loaded = load_model(ModelSpec(name_or_path=str(SHIPPED_MODEL)))
    kv = KVCacheDir(out / "kv")
    prefixes = [kv.prefix(name).token_ids for name in kv.names()]
    distinct = len({tuple(ids[: i + 1]) for ids in prefixes for i in range(len(ids))})
    assert distinct < sum(map(len, prefixes))  # the shipped templates share their start
    probe = len(continuation_ids(loaded.tokenizer, PROBE_TEXT))
    model_geometry(loaded.model)  # its one-token probe forward, cached on the model, not counted
    seen = []
    hook = loaded.model.register_forward_pre_hook(
        lambda _m, args, kwargs: seen.append((args[0] if args else kwargs["input_ids"]).shape[1]),
        with_kwargs=True,
    )
    try:
        reports = verify_prefixes(loaded, out / "kv")
    finally:
        hook.remove()
    assert [r.name for r in reports] == kv.names() and all(r.passed for r in reports)
    assert sum(seen) == distinct + 2 * probe * len(prefixes)  # + the probe, twice per prefix
