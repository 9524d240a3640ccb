"""prune on the shipped model: rate control, protected spans, code validity, CLI bad input."""

import itertools
import json
import re
from pathlib import Path

import pytest

from copilot_cli.cli import app
from copilot_cli.core.errors import InputError
from copilot_cli.core.models import ModelSpec, load_model
from copilot_cli.core.syntax import parses
from copilot_cli.core.tokens import encode_with_offsets, leading_special_ids
from copilot_cli.prune import PruneOptions, prune_text
from copilot_cli.prune.pruner import _attempts, _code_frame, importance, spread_keys, word_units
from copilot_cli.prune.scoring import TokenScores, score_tokens
from copilot_cli.prune.search import PATTERNS, PROBE_TOKENS, Probe

REPO = Path(__file__).resolve().parents[2]
PROSE = (REPO / "sample_data" / "repo" / "docs" / "architecture.md").read_text()
CODE = (REPO / "sample_data" / "repo" / "src" / "kvstore" / "ttl_cache.py").read_text()


@pytest.fixture(scope="module")
def shipped():
    return load_model(ModelSpec())


@pytest.mark.parametrize(
    "method",
    [
        "entropy",
        "attention",
        "hybrid",
        "ewma",
        "spread",
        pytest.param("search", marks=pytest.mark.slow),
    ],
)
@pytest.mark.parametrize("rate", [0.5, 0.33])
def test_rate_is_met_within_5_percent(shipped, method, rate):
    result = prune_text(PruneOptions(text=PROSE, rate=rate, method=method), shipped)
    assert result.original_tokens >= 200
    assert abs(result.achieved_rate - rate) <= 0.05 * rate
    assert (
        len(shipped.tokenizer(result.text, add_special_tokens=False).input_ids)
        == result.kept_tokens
    )


def test_protected_spans_survive_whole(shipped):
    text = (
        "The cache never evicts the entry it is inserting, so a value larger than 1024 "
        "bytes is not stored. Dr. Ada Lovelace reviewed it in New York; see `LRUCache.put` "
        "and max_entries. The TICKET-4711 marker must stay. "
    ) * 3
    result = prune_text(PruneOptions(text=text, rate=0.4, protect=(r"TICKET-\d+",)), shipped)
    for span in (
        "never",
        "not",
        "1024",
        "Ada Lovelace",
        "New York",
        "`LRUCache.put`",
        "max_entries",
        "TICKET-4711",
    ):
        assert text.count(span) == result.text.count(span), span


def test_words_are_removed_whole(shipped):
    result = prune_text(PruneOptions(text=PROSE, rate=0.5), shipped)
    original_words = set(re.findall(r"[A-Za-z]+", PROSE))
    assert set(re.findall(r"[A-Za-z]+", result.text)) <= original_words


def test_code_still_parses(shipped):
    assert parses(CODE, "python")
    for rate in (0.7, 0.5, 0.33):
        result = prune_text(PruneOptions(text=CODE, rate=rate), shipped)
        assert result.parses and parses(result.text, "python")
        assert abs(result.achieved_rate - rate) <= 0.05 * rate


def test_long_inputs_are_windowed_and_deterministic(shipped):
    text = PROSE * 6  # longer than the model's 2048-token context
    first = prune_text(PruneOptions(text=text, rate=0.5, window=256, overlap=64), shipped)
    second = prune_text(PruneOptions(text=text, rate=0.5, window=256, overlap=64), shipped)
    assert first.original_tokens > 2048
    assert first.text == second.text


def test_word_units_cover_all_tokens(shipped):
    encoding = shipped.tokenizer.backend_tokenizer.encode(PROSE, add_special_tokens=False)
    units = word_units(PROSE, list(encoding.offsets))
    assert units[0][0] == 0 and units[-1][1] == len(encoding.ids)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(units))


@pytest.mark.parametrize(
    ("method", "threshold", "share"), [("entropy", 0.7, 0.3), ("hybrid", 0.5, None)]
)
def test_fixed_threshold_keeps_the_tokens_scoring_above_it(shipped, method, threshold, share):
    ids, _ = encode_with_offsets(shipped.tokenizer, PROSE)
    lead = leading_special_ids(shipped.tokenizer)
    scores = score_tokens(shipped.model, lead + ids)
    lead = len(lead)
    score = importance(
        TokenScores(scores.surprisal[lead:], scores.entropy[lead:], scores.attention[lead:]),
        method,
    )
    expected = float((score >= threshold).double().mean())
    if share is not None:
        assert abs(expected - share) < 0.01  # a percentile threshold on ranks
    result = prune_text(PruneOptions(text=PROSE, threshold=threshold, method=method), shipped)
    assert abs(result.achieved_rate - expected) <= 0.05 * expected
    assert abs(result.requested_rate - expected) < 0.01


def test_bad_options():
    from copilot_cli.prune import PruneOptions

    # library errors name the option; the CLI maps it to its flag (test_cli_bad_input_exit_2)
    with pytest.raises(InputError, match=r"^rate:"):
        PruneOptions(rate=1.5)
    with pytest.raises(InputError, match=r"^rate:"):
        PruneOptions()
    with pytest.raises(InputError, match=r"^threshold:"):
        PruneOptions(rate=0.5, threshold=0.5)
    with pytest.raises(InputError, match=r"^threshold:"):
        PruneOptions(threshold=-1.0)
    with pytest.raises(InputError, match=r"^threshold:"):
        PruneOptions(threshold=2.0)  # a percentile: [0, 1]
    assert PruneOptions(method="ewma", threshold=2.0).threshold == 2.0  # ewma: a multiple
    assert PruneOptions(method="ewma").threshold is None  # ewma alone: 1.2x its level (seed)
    with pytest.raises(InputError, match=r"^method:"):
        PruneOptions(rate=0.5, method="magic")
    with pytest.raises(InputError, match=r"^threshold: method spread has no scores"):
        PruneOptions(method="spread", threshold=0.5)
    with pytest.raises(InputError, match=r"^rate:"):
        PruneOptions(method="spread")
    with pytest.raises(InputError, match=r"^threshold: method search has no scores"):
        PruneOptions(method="search", threshold=0.5)
    with pytest.raises(InputError, match=r"\(\[a-"):
        PruneOptions(rate=0.5, protect=("([a-",))


def test_cli(runner, tmp_path):
    source = tmp_path / "in.py"
    source.write_text(CODE)
    result = runner.invoke(app, ["prune", str(source), "--rate", "0.5", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["parses"] is True and payload["removed_spans"]
    result = runner.invoke(app, ["prune", str(source), "--rate", "0.5", "-o", str(tmp_path / "o")])
    assert result.exit_code == 0 and parses((tmp_path / "o").read_text(), "python")


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (b"", ["--rate", "0.5"], "empty"),
        (b"text here", ["--rate", "0"], "--rate"),
        (b"text here", ["--rate", "1.5"], "--rate"),
        (b"\x89PNG\x00\x00binary", ["--rate", "0.5"], "binary"),
        (b"text here", ["--rate", "0.5", "--protect", "(unclosed"], "(unclosed"),
        (b"text here", ["--rate", "0.5", "--threshold", "0.5"], "--threshold"),
        (b"text here", ["--threshold", "-2"], "--threshold"),
    ],
)
def test_cli_bad_input_exit_2(runner, tmp_path, content, args, message):
    source = tmp_path / "in.txt"
    source.write_bytes(content)
    result = runner.invoke(app, ["prune", str(source), *args])
    assert result.exit_code == 2 and message in result.stderr


def test_regress_prune_variant(runner, tmp_path):
    prompts = tmp_path / "p.jsonl"
    lines = (REPO / "sample_data" / "prompts.jsonl").read_text().splitlines()[:4]
    prompts.write_text("\n".join(lines) + "\n")
    result = runner.invoke(
        app,
        [
            "regress",
            "--prompts",
            str(prompts),
            "-v",
            "p=prune=rate:0.5,method:hybrid",
            "--gen-tokens",
            "2",
            "--max-mean-kl",
            "10",
            "--min-same-top1",
            "0",
            "--max-prompt-kl",
            "100",
            "--allow-lax-thresholds",
            "--json",
            "-",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["variants"][0]["summary"]["kl_mean"] > 0


def test_spread_keys_remove_evenly():
    keys = spread_keys(240)
    order = sorted(range(240), key=keys.__getitem__)
    for removed in (40, 120, 200):
        gone = set(order[:removed])
        for start in range(0, 240 - 24):
            in_window = sum(1 for index in range(start, start + 24) if index in gone)
            assert abs(in_window - 24 * removed / 240) <= 3, (removed, start)


def _kept_by_half(tokenizer, text, result):
    _, offsets = encode_with_offsets(tokenizer, text)
    removed = [any(s <= a < e for s, e in result.removed_spans) for a, _ in offsets]
    half = len(removed) // 2
    return [1 - sum(part) / len(part) for part in (removed[:half], removed[half:])]


def test_spread_needs_no_model_and_spreads_removal_over_the_text(shipped):
    from dataclasses import replace

    for text in (PROSE, CODE):
        options = PruneOptions(text=text, rate=0.5, method="spread")
        result = prune_text(options, shipped)
        # no forward pass: the same output without a model at all
        assert prune_text(options, replace(shipped, model=None)).text == result.text
        # both halves lose a part near their share (the units go evenly, but a whole
        # definition is one unit and may go at once), where hybrid's recency weight takes
        # most from the first half
        first, second = _kept_by_half(shipped.tokenizer, text, result)
        assert 0.25 <= first <= 0.75 and 0.25 <= second <= 0.75, (first, second)
        hybrid = prune_text(PruneOptions(text=text, rate=0.5), shipped)
        first, second = _kept_by_half(shipped.tokenizer, text, hybrid)
        assert second - first > 0.3


# a fixed copy of real code (the head of an earlier pruner.py): a test input that does not move
# when the source it was taken from is edited
LONG_CODE = (Path(__file__).parent / "data" / "long_code.py.txt").read_text()


def test_probe_measures_what_a_text_moves_and_reuses_shared_prefixes_exactly(shipped):
    probe = Probe(shipped, LONG_CODE)
    assert len(probe.continuation) == PROBE_TOKENS
    assert probe.divergence(LONG_CODE) == pytest.approx(0.0, abs=1e-5)
    cut = LONG_CODE[:1500] + LONG_CODE[2100:]
    near = probe.divergence(LONG_CODE[:2800] + LONG_CODE[3000:])
    reused = probe.divergence(cut)  # shares 1500 characters with the last: those from cache
    probe.prefix.cache = None
    assert probe.divergence(cut) == pytest.approx(reused, rel=1e-4, abs=1e-6)
    assert reused > 0 and near > 0
    assert probe.divergence(LONG_CODE[-300:]) > max(reused, near)  # losing most moves most


@pytest.mark.slow
def test_search_mixes_spread_patterns_to_move_the_models_predictions_least(shipped):
    options = PruneOptions(text=LONG_CODE, rate=0.33, method="search")
    result = prune_text(options, shipped)
    assert result.parses is True and result.mode == "code-lines"
    assert abs(result.achieved_rate - 0.33) <= 0.05 * 0.33
    assert prune_text(options, shipped).text == result.text  # deterministic
    # the spans say what went: the output is the text without them
    pieces, previous = [], 0
    for start, end in result.removed_spans:
        pieces.append(LONG_CODE[previous:start])
        previous = end
    assert "".join(pieces) + LONG_CODE[previous:] == result.text
    # on its probe, better than every single spread pattern it started from, and not one
    # of them (a mix of parts)
    probe = Probe(shipped, LONG_CODE)
    patterns = _spread_patterns(shipped, LONG_CODE, 0.33)
    spread = prune_text(PruneOptions(text=LONG_CODE, rate=0.33, method="spread"), shipped)
    assert patterns[0] == spread.text and len(set(patterns)) == PATTERNS
    found = probe.divergence(result.text)
    assert all(found < probe.divergence(text) for text in patterns)
    assert result.text not in patterns


def _spread_patterns(loaded, text, rate):
    """What spread gives at each phase search starts from."""
    ids, offsets = encode_with_offsets(loaded.tokenizer, text)
    goal = max(1, round(rate * len(ids)))
    attempt = _attempts(text, offsets, None, _code_frame(text, None), goal, loaded.tokenizer, ())
    return [attempt(k / PATTERNS).text for k in range(PATTERNS)]


@pytest.mark.slow
def test_search_fits_texts_longer_than_the_models_context(tiny_llama_dir):
    loaded = load_model(ModelSpec(str(tiny_llama_dir)))  # 512 positions
    assert len(encode_with_offsets(loaded.tokenizer, LONG_CODE)[0]) > 1000  # > 512 - 64
    result = prune_text(PruneOptions(text=LONG_CODE, rate=0.5, method="search"), loaded)
    assert result.parses is True
    assert abs(result.achieved_rate - 0.5) <= 0.05 * 0.5
