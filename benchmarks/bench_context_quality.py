"""Does the context help the model predict the line? `copilot-opt context` against what code
assistants do today, scored by SmolLM2-135M itself, on repositories selection was tuned on and
on repositories it never saw. Needs `make real-models` (else skipped) and, for the BM25 peer,
.venv-peers (made by `make bench`).

Sets (benchmarks/corpora.py fetches them at pinned versions):
  tuning:   Python asyncio, email, importlib (the standard library); Go gin 1.8.1, cobra 1.6.1,
            urfave/cli 2.3.0; JavaScript fastify 4.28.1, express 4.21.2. Selection's constants
            were chosen on these.
  held-out: Python black 24.4.2, httpx 0.27.0 (PyPI sdists, black's test fixtures left out);
            Go logrus 1.9.0, gorilla/mux 1.8.0; JavaScript mocha 10.2.0 (its browser bundle left
            out), ws 8.16.0. Never used to choose anything.
  held-out-2: Python rich 13.7.1, click 8.1.7; Go echo 4.2.1, chi 5.0.7; JavaScript knex
            3.1.0, pino 8.19.0. Run only by name (`--set held-out-2`); measured once, on
            2026-12-07, after the line before the cursor was made to count twice in a
            window's rank (the first set had been measured after earlier changes).
  held-out-3: Python jinja2 3.1.4, requests 2.32.3, flask 3.0.3; Go hcl 1.0.0, pflag 1.0.6,
            testify 1.8.1; JavaScript joi 17.13.3, mongoose 8.4.1, sequelize 6.37.3 (their
            dist/ builds left out; each repository holds over 64 points). Run only by name
            (`--set held-out-3`). 192 points per language, three times either earlier set:
            both showed ours ahead of the best peer on NLL by 0.04-0.06 with a per-point
            spread (SD of the paired difference) of 0.36-0.49, too few points for that lead
            to clear 2 standard errors; 576 points put the SE near 0.018. Sized and fixed
            before it was first measured; measured once, 2026-12-07, with selection as the
            second set saw it (ours level with BM25 windows on NLL; its SE came out 0.024).

Points (bench_context's rule): a line of file F that uses a name defined in 1-3 other files of
the repository and not in F, sampled evenly over the repositories of a language. A request
sees F up to the line (its indentation included) and nothing at or after it: every selector
gets the prefix only.

Methods, packed into the same 1,024-token budget of the same tokenizer and rendered the same
way (`context --format file-sep`, what `auto` gives SmolLM2): ours (`session.select`, prefix
only; ours+suffix also sees the lines after the target line, as a FIM editor sends them);
Jaccard windows (20 lines, stride 10, over the other files, against the 20 lines before the
cursor: Copilot's neighbouring snippets / RepoCoder); BM25 windows (bm25s 0.3.16 over the same
windows, the same query); an aider-style repository map; none; and an oracle that is shown the
chunks defining the names the target line uses (what no selector can know).

The model reads the repository-level layout it was trained on (SmolLM2's tokenizer has
StarCoder's `<repo_name>` and `<file_sep>`): `<repo_name>` + the context block + the current
file's separator and path + its last 40 lines before the cursor; the target line follows. (A
base model of 135M parameters does not follow the instruction templates' `<completion>` form:
its greedy lines there are mostly markup.) Scores per point and method, from one forward over
prompt + target (bfloat16 weights, the same for every method): the mean token NLL of the line,
greedy exact match and edit similarity (1 - normalised Levenshtein, stripped) of the greedy
completion cut at the line's end (decoded on from the first token that differs from the
line; a point's methods decode in one batch, their caches left-padded and masked). Rows:
ours minus each peer, paired over points, with its standard error.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_context as bc
from common import emit
from corpora import corpus

from copilot_cli import instruments

BUDGET = 1024
PEERS = ("none", "jaccard-windows", "bm25-windows", "repo-map")
METHODS = ("ours", *PEERS, "oracle")
PREFIX_LINES = bc.PREFIX_LINES
SEPARATOR = "<file_sep>"
FRESH = "held-out-2"  # run only by name (measured once, 2026-12-07)
THIRD = "held-out-3"  # run only by name (measured once, 2026-12-07)
PER_LANGUAGE = {"tuning": 24, "held-out": 64, FRESH: 64, THIRD: 192}
LANGUAGES = ("python", "go", "javascript")
EXCLUDE = {  # what is not the repository's own code: test fixtures, a bundled build
    "black-24.4.2.tar": ("tests/data/*",),
    "mocha-10.2.0": ("mocha.js",),
    "joi-17.13.3": ("dist/*",),
    "mongoose-8.4.1": ("dist/*",),
}


def sets(wanted: str) -> dict[str, dict[str, list[Path]]]:
    """The sets `--set` names ("all": tuning and held-out; the second and third held-out
    sets only by their names, so that no run measures them by accident)."""
    found = {}
    if wanted in ("all", "tuning"):
        go, js = corpus("go"), corpus("javascript")
        found["tuning"] = {
            "python": [bc.STDLIB / name for name in ("asyncio", "email", "importlib")],
            "go": sorted(p for p in go.iterdir() if p.is_dir()),
            "javascript": sorted(p for p in js.iterdir() if p.is_dir()),
        }
    for name, suffix in (("held-out", "heldout"), (FRESH, "heldout2"), (THIRD, "heldout3")):
        if wanted == name or (wanted == "all" and name == "held-out"):
            held = {lang: corpus(f"{lang}-{suffix}") for lang in LANGUAGES}
            found[name] = {
                lang: sorted(p for p in held[lang].iterdir() if p.is_dir()) for lang in held
            }
    return found


class Repo(bc.Repo):
    """bench_context's repository with its exclusions, its context in the layout the model
    reads (file-sep), and windows with their text."""

    FORMAT, SEPARATOR = "file-sep", "<file_sep>"

    def __init__(self, language: str, path: Path, tokenizer, model_dir: Path, tmp: Path):
        self.exclude = EXCLUDE.get(path.name, ())
        super().__init__(language, path, tokenizer, model_dir, tmp)

    def chunk_options(self, **kwargs):
        return super().chunk_options(exclude=self.exclude, **kwargs)

    def files(self) -> list[str]:
        from fnmatch import fnmatch

        found = bc.source_files(self.path, self.language)
        return [f for f in found if not any(fnmatch(f, x) for x in self.exclude)]

    def bm25_windows(self, points: list[bc.Point]) -> dict[int, list[int]]:
        """bm25s's ranking of the windows for each point's 20 lines before the cursor."""
        if not bc.PEERS_PYTHON.exists() or not points:
            return {}
        texts = ["\n".join(self.tags.lines[f][s - 1 : e]) for f, s, e, _ids in self.windows]
        queries = ["\n".join(p.prefix.split("\n")[-20:]) for p in points]
        proc = subprocess.run(
            [str(bc.PEERS_PYTHON), str(bc.ROOT / "benchmarks" / "peers" / "bm25s_peer.py")],
            input=json.dumps({"corpus": texts, "queries": queries, "k": 400}),
            capture_output=True,
            text=True,
            check=True,
        )
        ranked = json.loads(proc.stdout)["ranked"]
        return {id(p): row for p, row in zip(points, ranked, strict=True)}

    def windows_in_order(self, point: bc.Point, order: list[int], budget: int) -> list[bc.Item]:
        items, taken = [], {}
        for w in order:
            file, start, end, _ids = self.windows[w]
            if file == point.file:
                continue
            if any(s <= end and start <= e for s, e in taken.get(file, [])):
                continue  # overlapping windows: the better one is in
            taken.setdefault(file, []).append((start, end))
            items.append(
                bc.Item(file, start, end, "\n".join(self.tags.lines[file][start - 1 : end]))
            )
        return self.pack(items, budget)

    def oracle(self, point: bc.Point, budget: int) -> list[bc.Item]:
        """The chunks holding the definitions of the names the target line uses."""
        index = self.session.index
        order = []
        for name in point.names:
            for file, line in self.tags.defs[name]:
                for i in index.files.get(file, ()):
                    if index.lines[i][0] <= line <= index.lines[i][1] and i not in order:
                        order.append(i)
        return self.pack(self.chunk_items(order, point.file), budget)


# --- the model ----------------------------------------------------------------------------


def levenshtein(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def edit_similarity(a: str, b: str) -> float:
    if not a and not b:
        return 1.0
    return 1.0 - levenshtein(a, b) / max(len(a), len(b))


@dataclass
class Decoding:
    """One method's state after its forward over prompt + target: the NLL of the target, the
    greedy tokens so far (the matching ones, then the first that differs), and the cache cut
    to the prompt and the matching tokens, `length` positions long."""

    nll: float
    greedy: list[int]
    cache: object
    length: int


@dataclass
class Score:
    nll: float
    exact: bool
    similarity: float
    greedy: str


class Scorer:
    """One forward per (point, method) over the prompt and the target line; greedy decoding
    goes on from the first token that differs. The prompt is the repository-level layout the
    model was trained on (SmolLM2's tokenizer has StarCoder's `<repo_name>` and `<file_sep>`):
    `<repo_name>` + the context block as `context --format file-sep` renders it + the current
    file's separator and its last PREFIX_LINES lines before the cursor; the target follows."""

    def __init__(self, loaded):
        import torch

        from copilot_cli.core.models import cache_kwargs, truncate

        self.torch, self.tok = torch, loaded.tokenizer
        self.model = loaded.model.to(torch.bfloat16)
        self.cache_kwargs, self.truncate = cache_kwargs, truncate
        self.seconds = 0.0
        self.forwards = 0

    def forward(self, ids: list[int], cache, keep: int):
        return self.model(
            self.torch.tensor([ids]),
            use_cache=True,
            logits_to_keep=keep,
            **self.cache_kwargs(self.model, cache),
        )

    def prompt_ids(self, point: bc.Point, repo: str, items: list[bc.Item]) -> list[int]:
        from copilot_cli.context import render_block
        from copilot_cli.context.render import snippet_ids

        before = "\n".join(point.prefix.split("\n")[-PREFIX_LINES:])
        block = render_block([(i.path, i.text) for i in items], "file-sep", SEPARATOR)
        ids = self.tok(f"<repo_name>{repo}\n", add_special_tokens=False).input_ids
        ids += snippet_ids(self.tok, block, "file-sep", SEPARATOR) if items else []
        ids += snippet_ids(self.tok, f"{SEPARATOR}{point.file}\n", "file-sep", SEPARATOR)
        return ids + self.tok(before, add_special_tokens=False).input_ids

    def score_many(self, point: bc.Point, repo: str, chosen: dict) -> dict[str, Score]:
        """Each method's score for one point: its own forward over prompt + target, then the
        greedy lines of all the methods decoded together, one batched step per token."""
        started = time.perf_counter()
        target = self.tok(point.target, add_special_tokens=False).input_ids
        prompts = [self.prompt_ids(point, repo, items) for items in chosen.values()]
        states = [self.prefill(prompt, target) for prompt in prompts]
        pending = [s for s in states if not self.finished(s.greedy, target)]
        if pending:
            self.decode_together(pending, target)
        scores = {}
        for method, state in zip(chosen, states, strict=True):
            line = self.tok.decode(state.greedy).split("\n")[0].strip()
            exact = line == point.target.strip()
            scores[method] = Score(state.nll, exact, edit_similarity(line, point.target), line)
        self.seconds += time.perf_counter() - started
        self.forwards += len(chosen)
        return scores

    def prefill(self, prompt: list[int], target: list[int]) -> Decoding:
        """One forward over prompt + target: its Decoding, greedy up to the first miss."""
        from transformers import DynamicCache

        torch = self.torch
        cache = DynamicCache()
        with torch.inference_mode():
            logits = self.forward(prompt + target, cache, len(target) + 1).logits[0].float()
            logprobs = torch.log_softmax(logits[:-1], dim=-1)
            nll = float(-logprobs[torch.arange(len(target)), torch.tensor(target)].mean())
        best = logits.argmax(-1).tolist()
        same = 0
        while same < len(target) and best[same] == target[same]:
            same += 1
        self.truncate(cache, len(prompt) + same)
        return Decoding(nll, target[:same] + [best[same]], cache, len(prompt) + same)

    def finished(self, greedy: list[int], target: list[int]) -> bool:
        """A greedy line ends at its first line break, or 8 tokens past the target's length."""
        return "\n" in self.tok.decode(greedy) or len(greedy) >= len(target) + 8

    def decode_together(self, states: list[Decoding], target: list[int]) -> None:
        """Greedy steps for every state at once: the caches left-padded to one length, the
        padding masked out, each row at its own position; a row that is done leaves the
        batch. (bfloat16 sums in another order than one row alone: about 1 greedy line in
        20 differs from decoding each method by itself, either way; the NLL does not.)"""
        torch = self.torch
        rows = list(range(len(states)))
        lengths = torch.tensor([[s.length] for s in states])
        cache, mask = self.batched_cache([s.cache for s in states], [s.length for s in states])
        step = torch.tensor([[s.greedy[-1]] for s in states])
        with torch.inference_mode():
            for taken in range(len(target) + 8):
                mask = torch.cat([mask, torch.ones(len(rows), 1, dtype=mask.dtype)], dim=1)
                out = self.model(
                    step,
                    attention_mask=mask,
                    position_ids=lengths + taken,
                    use_cache=True,
                    logits_to_keep=1,
                    **self.cache_kwargs(self.model, cache),
                )
                step = out.logits[:, -1].argmax(-1, keepdim=True)
                for row, token in zip(rows, step[:, 0].tolist(), strict=True):
                    states[row].greedy.append(token)
                done = [self.finished(states[row].greedy, target) for row in rows]
                keep = [k for k, finished in enumerate(done) if not finished]
                if not keep:
                    return
                if len(keep) < len(rows):
                    chosen = torch.tensor(keep)
                    for layer in cache.layers:
                        layer.keys, layer.values = layer.keys[chosen], layer.values[chosen]
                    rows = [rows[k] for k in keep]
                    mask, lengths, step = mask[chosen], lengths[chosen], step[chosen]

    def batched_cache(self, caches: list, lengths: list[int]) -> tuple:
        """One DynamicCache of every cache, each left-padded to the longest, and its mask."""
        from transformers import DynamicCache

        functional, longest = self.torch.nn.functional, max(lengths)
        pads = [(0, 0, longest - n, 0) for n in lengths]
        layers = []
        for depth in range(len(caches[0].layers)):
            rows = [(c.layers[depth], pad) for c, pad in zip(caches, pads, strict=True)]
            keys = self.torch.cat([functional.pad(layer.keys, pad) for layer, pad in rows])
            values = self.torch.cat([functional.pad(layer.values, pad) for layer, pad in rows])
            layers.append((keys, values))
        mask = self.torch.tensor([[0] * (longest - n) + [1] * n for n in lengths])
        return DynamicCache(layers), mask


# --- the run ------------------------------------------------------------------------------


def choose(repo: Repo, method: str, point: bc.Point, bm25: dict[int, list[int]]) -> list[bc.Item]:
    if method == "ours":
        return repo.ours(point, BUDGET, with_suffix=False)
    if method == "ours+suffix":  # the lines after the target line too, as FIM editors send
        return repo.ours(point, BUDGET, with_suffix=True)
    if method == "ours-peek":  # tuning only: the target line shown to selection (a bound)
        peek = bc.Point(**{**point.__dict__, "suffix": point.target})
        return repo.ours(peek, BUDGET, with_suffix=True)
    if method == "jaccard-windows":
        return repo.jaccard(point, BUDGET)
    if method == "bm25-windows":
        return repo.windows_in_order(point, bm25.get(id(point), []), BUDGET)
    if method == "repo-map":
        return repo.repo_map(point, BUDGET)
    if method == "oracle":
        return repo.oracle(point, BUDGET)
    return []


def sample_points(
    name: str, paths: dict[str, list[Path]], make_repo, rng: random.Random
) -> tuple[list[Repo], list[bc.Point]]:
    repos: list[Repo] = []
    points: list[bc.Point] = []
    for language, found_paths in paths.items():
        per_repo = math.ceil(PER_LANGUAGE[name] / len(found_paths))
        mine = []
        for path in found_paths:
            repos.append(make_repo(language, path))
            found = bc.points_of(language, len(repos) - 1, repos[-1].tags, rng)
            mine += rng.sample(found, min(per_repo, len(found)))
        mine = rng.sample(mine, min(PER_LANGUAGE[name], len(mine)))
        points += sorted(mine, key=lambda p: (p.repo, p.file, p.line))
    return repos, points


def paired(ours: list[float], peer: list[float]) -> tuple[float, float]:
    diffs = [a - b for a, b in zip(ours, peer, strict=True)]
    if len(diffs) < 2:
        return (diffs[0] if diffs else 0.0), 0.0
    return statistics.mean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))


def evaluate(name, repos, points, scorer, methods, cache=None) -> dict[str, list[Score]]:
    """Every method's scores per point; `cache` (a dict) keeps the peers' between runs of
    a tuning session, keyed by point and method (ours is always scored afresh)."""
    bm25: dict[int, list[int]] = {}
    if "bm25-windows" in methods:
        for r, repo in enumerate(repos):
            bm25.update(repo.bm25_windows([p for p in points if p.repo == r]))
    scores: dict[str, list[Score]] = {m: [] for m in methods}
    started = time.perf_counter()
    for k, point in enumerate(points):
        repo = repos[point.repo]
        keys = {m: f"{name}|{repo.path.name}|{point.file}|{point.line}|{m}" for m in methods}
        known = {
            m: Score(**cache[keys[m]])
            for m in methods
            if cache is not None and m != "ours" and keys[m] in cache
        }
        chosen = {m: choose(repo, m, point, bm25) for m in methods if m not in known}
        known.update(scorer.score_many(point, repo.path.name, chosen) if chosen else {})
        for method in methods:
            scores[method].append(known[method])
            if cache is not None:
                cache[keys[method]] = known[method].__dict__
        if (k + 1) % 20 == 0:
            print(
                f"[{name}] {k + 1}/{len(points)} points, {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    return scores


def summary(points, scores, language: str | None = None) -> dict[str, dict[str, float]]:
    keep = [k for k, p in enumerate(points) if language is None or p.language == language]
    out = {}
    for method, rows in scores.items():
        mine = [rows[k] for k in keep]
        out[method] = {
            "nll": statistics.mean(s.nll for s in mine),
            "exact": statistics.mean(s.exact for s in mine),
            "similarity": statistics.mean(s.similarity for s in mine),
        }
    return out


def report(name: str, points, scores, emit_rows: bool) -> None:
    methods = list(scores)
    for language in (None, *LANGUAGES):
        table = summary(points, scores, language)
        print(
            json.dumps(
                {
                    "set": name,
                    "language": language or "all",
                    "points": sum(language in (None, p.language) for p in points),
                    **{m: {k: round(v, 4) for k, v in t.items()} for m, t in table.items()},
                }
            ),
            flush=True,
        )
    if "ours" not in scores:
        return
    diffs = {}
    for peer in (m for m in methods if m != "ours"):
        row = {}
        for metric in ("nll", "exact", "similarity"):
            mean, se = paired(
                [float(getattr(s, metric)) for s in scores["ours"]],
                [float(getattr(s, metric)) for s in scores[peer]],
            )
            row[metric] = (round(mean, 4), round(se, 4))
        diffs[peer] = row
    print(json.dumps({"set": name, "ours minus": diffs}), flush=True)
    if not emit_rows:
        return
    table = summary(points, scores)
    peers = [m for m in methods if m in PEERS]
    languages = {lang: sum(p.language == lang for p in points) for lang in LANGUAGES}
    best = min(peers, key=lambda m: table[m]["nll"])
    mean, se = diffs[best]["nll"]
    goal = name in ("held-out", FRESH, THIRD)
    emit(
        f"context quality ({name} set, {len(points)} points {languages}): SmolLM2-135M mean NLL "
        f"of the target line at {BUDGET} tokens, ours vs the best peer ({best})",
        table["ours"]["nll"],
        table[best]["nll"],
        "nats/token",
        goal="lower than the best peer by > 2 standard errors (paired)" if goal else "",
        passed=(mean < 0 and -mean > 2 * se) if goal else None,
        note=f"paired difference {mean:+.4f} (SE {se:.4f}); "
        + ", ".join(f"{m} {t['nll']:.3f}" for m, t in table.items()),
    )
    for metric, label in (("similarity", "edit similarity"), ("exact", "exact match")):
        best = max(peers, key=lambda m, k=metric: table[m][k])
        mean, se = diffs[best][metric]
        emit(
            f"context quality ({name} set): greedy {label} of the line at {BUDGET} tokens, ours "
            f"vs the best peer ({best})",
            table["ours"][metric],
            table[best][metric],
            "share" if metric == "exact" else "mean similarity",
            higher_is_better=True,
            goal=">= the best peer" if goal else "",
            passed=table["ours"][metric] >= table[best][metric] if goal else None,
            note=f"paired difference {mean:+.4f} (SE {se:.4f}); "
            + ", ".join(f"{m} {t[metric]:.3f}" for m, t in table.items()),
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--set", choices=("tuning", "held-out", FRESH, THIRD, "all"), default="all")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--points", type=int, default=0, help="per language (0: the default)")
    parser.add_argument("--no-emit", action="store_true", help="print summaries only")
    parser.add_argument("--peer-cache", type=Path, help="keep the peers' scores here (tuning)")
    parser.add_argument(
        "--const", action="append", default=[], help="NAME=VALUE: a selection constant (tuning)"
    )
    args = parser.parse_args()
    from copilot_cli.context import select, windows

    for item in args.const:
        name, _, value = item.partition("=")
        for module in (select, windows):
            if hasattr(module, name):
                setattr(module, name, type(getattr(module, name))(float(value)))
    cache = (
        json.loads(args.peer_cache.read_text())
        if args.peer_cache and args.peer_cache.exists()
        else ({} if args.peer_cache else None)
    )
    if not instruments.available():
        print(f"skipped: no real instruments in {instruments.root()} (make real-models)")
        return
    from copilot_cli.core.models import ModelSpec, load_model

    if args.points:
        PER_LANGUAGE.update({k: args.points for k in PER_LANGUAGE})
    methods = args.methods.split(",")
    smollm2 = instruments.root() / instruments.SMOLLM2
    loaded = load_model(ModelSpec(str(smollm2)))
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        scorer = Scorer(loaded)
        started = time.perf_counter()
        for name, paths in sets(args.set).items():
            rng = random.Random(f"context-quality-{name}")
            repos, points = sample_points(
                name,
                paths,
                lambda lang, path: Repo(lang, path, loaded.tokenizer, smollm2, tmp),
                rng,
            )
            print(f"{name}: {len(points)} points over {len(repos)} repositories", flush=True)
            scores = evaluate(name, repos, points, scorer, methods, cache)
            if args.peer_cache:
                args.peer_cache.write_text(json.dumps(cache))
            report(name, points, scores, emit_rows=not args.no_emit)
        print(
            f"scored {scorer.forwards} (point, method) pairs in {scorer.seconds:.0f} s; "
            f"all {time.perf_counter() - started:.0f} s",
            flush=True,
        )
        if not args.no_emit and args.set == "all" and not args.points:
            minutes = (time.perf_counter() - started) / 60
            emit(
                "context quality bench: wall time of both sets (chunking, selection, scoring)",
                minutes,
                30.0,
                "minutes",
                goal="<= 30 minutes on 2 cores",
                passed=minutes <= 30,
                note=f"{scorer.forwards} (point, method) pairs scored in {scorer.seconds:.0f} s",
            )


if __name__ == "__main__":
    main()
