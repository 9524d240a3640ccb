"""Predictors of what will be used in the next window, and their evaluation on held-out time.

Every predictor answers one question: given the log up to `now`, how likely is each item
(a prefix, a chunk) to be used in [now, now + window)? Three are measured against each other:

- frequency × recency: uses weighted by exp(-age / tau) (tau = 4 windows);
- Markov (order 1 and an interpolated order 2): P(item in a session's next request | items of
  its last requests), over the sessions active at `now`, plus frequency × recency for sessions
  that start in the window;
- GRU: a small recurrent model (torch) over each session's requests (multi-hot items in,
  next request's items out), trained on the log, in place of the Markov step.

`evaluate` cuts the log at 80% of its time span: predictors learn from the part before, then at
each window boundary after it predict the next window from everything before the boundary,
and are scored by the share of the window's item uses that a budget-bounded resident set
(highest probability first) would have held.
"""

from __future__ import annotations

import abc
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from copilot_cli.core import lazy
from copilot_cli.warm.log import Request

torch = lazy.module("torch")

Item = tuple[str, str]  # (kind, id)
ACTIVE_GAP = 600.0  # a session with no request for 10 minutes is over


class FrequencyRecency:
    name = "frequency-recency"

    def __init__(self, window: float) -> None:
        self.window = window
        self.tau = 4 * window

    def fit(self, requests: list[Request]) -> None:
        pass

    def scores(self, history: list[Request], now: float) -> dict[Item, float]:
        weight: dict[Item, float] = defaultdict(float)
        for request in history:
            decay = math.exp(-(now - request.t) / self.tau)
            for item in request.items():
                weight[item] += decay
        # expected uses in the window at the decayed rate, as a probability of at least one
        return {item: 1 - math.exp(-w * self.window / self.tau) for item, w in weight.items()}


def _sessions(requests: list[Request]) -> dict[str, list[Request]]:
    out: dict[str, list[Request]] = defaultdict(list)
    for request in requests:
        out[request.session].append(request)
    return out


class _SessionModel(abc.ABC):
    """Next-request probabilities per active session, combined with frequency × recency."""

    name = "session"

    def __init__(self, window: float) -> None:
        self.window = window
        self.base = FrequencyRecency(window)

    @abc.abstractmethod
    def next_request(self, recent: list[Request]) -> dict[Item, float]:
        """P(item in the session's next request) given its last requests."""

    def scores(self, history: list[Request], now: float) -> dict[Item, float]:
        miss: dict[Item, float] = {
            item: 1 - p for item, p in self.base.scores(history, now).items()
        }
        for requests in _sessions(history).values():
            if now - requests[-1].t > ACTIVE_GAP:
                continue
            for item, p in self.next_request(requests[-2:]).items():
                miss[item] = miss.get(item, 1.0) * (1 - min(p, 1.0))
        return {item: 1 - m for item, m in miss.items()}


class Markov(_SessionModel):
    """Order 1: P(j in next | i in last); order 2 interpolates the request before (weight 0.3)."""

    def __init__(self, window: float, order: int = 1) -> None:
        super().__init__(window)
        self.order = order
        self.name = f"markov-{order}"
        self.pairs: list[dict[Item, Counter]] = [defaultdict(Counter) for _ in range(order)]
        self.seen: list[Counter] = [Counter() for _ in range(order)]

    def fit(self, requests: list[Request]) -> None:
        for session in _sessions(requests).values():
            for k in range(1, len(session)):
                nxt = set(session[k].items())
                for lag in range(1, self.order + 1):
                    if k - lag < 0:
                        continue
                    for i in set(session[k - lag].items()):
                        self.seen[lag - 1][i] += 1
                        self.pairs[lag - 1][i].update(nxt)

    def next_request(self, recent: list[Request]) -> dict[Item, float]:
        weights = [1.0] if self.order == 1 else [0.7, 0.3]
        out: dict[Item, float] = defaultdict(float)
        for lag, weight in enumerate(weights, 1):
            if len(recent) < lag:
                continue
            items = set(recent[-lag].items())
            for i in items:
                total = self.seen[lag - 1][i]
                for j, count in self.pairs[lag - 1][i].items():
                    out[j] = max(out[j], weight * count / total) if total else out[j]
        return out


class GRUPredictor(_SessionModel):
    """A GRU over sessions: multi-hot items of a request in, the next request's items out."""

    name = "gru"

    def __init__(self, window: float, hidden: int = 64, epochs: int = 8, seed: int = 0) -> None:
        super().__init__(window)
        self.hidden, self.epochs, self.seed = hidden, epochs, seed
        self.vocab: dict[Item, int] = {}
        self.model = None

    def _multi_hot(self, requests: list[Request]):
        rows = torch.zeros(len(requests), len(self.vocab))
        for r, request in enumerate(requests):
            for item in request.items():
                if item in self.vocab:
                    rows[r, self.vocab[item]] = 1.0
        return rows

    def fit(self, requests: list[Request]) -> None:
        torch.manual_seed(self.seed)
        for request in requests:
            for item in request.items():
                self.vocab.setdefault(item, len(self.vocab))
        self.items = list(self.vocab)
        size = len(self.vocab)
        self.model = torch.nn.ModuleDict(
            {
                "inp": torch.nn.Linear(size, self.hidden),
                "gru": torch.nn.GRU(self.hidden, self.hidden, batch_first=True),
                "out": torch.nn.Linear(self.hidden, size),
            }
        )
        sequences = [s for s in _sessions(requests).values() if len(s) > 1]
        optimizer = torch.optim.Adam(self.model.parameters(), lr=3e-3)
        loss_fn = torch.nn.BCEWithLogitsLoss(reduction="none")
        for _ in range(self.epochs):
            for start in range(0, len(sequences), 32):
                batch = sequences[start : start + 32]
                longest = max(len(s) for s in batch)
                x = torch.zeros(len(batch), longest - 1, size)
                y = torch.zeros(len(batch), longest - 1, size)
                mask = torch.zeros(len(batch), longest - 1, 1)
                for b, session in enumerate(batch):
                    hot = self._multi_hot(session)
                    x[b, : len(session) - 1], y[b, : len(session) - 1] = hot[:-1], hot[1:]
                    mask[b, : len(session) - 1] = 1
                logits = self._forward(x)
                loss = (loss_fn(logits, y) * mask).sum() / mask.sum() / size
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

    def _forward(self, x):
        h, _ = self.model["gru"](torch.relu(self.model["inp"](x)))
        return self.model["out"](h)

    def next_request(self, recent: list[Request]) -> dict[Item, float]:
        with torch.no_grad():
            p = torch.sigmoid(self._forward(self._multi_hot(recent).unsqueeze(0))[0, -1])
        top = torch.topk(p, min(32, len(self.items)))
        return {self.items[i]: float(v) for v, i in zip(top.values, top.indices, strict=True)}


PREDICTORS: dict[str, Callable[[float], object]] = {
    "frequency-recency": FrequencyRecency,
    "markov-1": lambda w: Markov(w, 1),
    "markov-2": lambda w: Markov(w, 2),
    "gru": GRUPredictor,
}


@dataclass
class Evaluation:
    predictor: str
    hit_rate: float  # share of item uses in held-out windows that were resident
    resident_bytes: float  # mean bytes of the resident set
    windows: int
    uses: int

    def to_dict(self) -> dict[str, object]:
        return {
            "hit_rate": round(self.hit_rate, 4),
            "resident_bytes": round(self.resident_bytes),
            "windows": self.windows,
            "uses": self.uses,
        }


class Sizes(dict):
    """Item -> bytes when loaded alone, and what it is made of: a prefix's KV segments (a
    template trunk shared by many prefixes is one part, held once), a chunk is one part."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: dict[Item, tuple[tuple[str, int], ...]] = {}

    def add(self, item: Item, parts: list[tuple[str, int]]) -> None:
        self.parts[item] = tuple(parts)
        self[item] = sum(size for _, size in parts)

    def new_parts(self, item: Item, held: set[str]) -> list[tuple[str, int]]:
        """The parts of `item` not in `held` (what loading it would add)."""
        parts = self.parts.get(item, ((f"{item[0]}:{item[1]}", self[item]),))
        return [(name, size) for name, size in parts if name not in held]


def resident_set(scores: dict[Item, float], sizes: dict[Item, int], budget: int) -> set[Item]:
    """Highest probability first (ties by id) while the bytes fit; a part shared with an item
    already chosen costs nothing again."""
    chosen, held, used = set(), set(), 0
    for item in sorted(scores, key=lambda i: (-scores[i], i)):
        if item not in sizes:
            continue
        new = _new_parts(sizes, item, held)
        cost = sum(size for _, size in new)
        if used + cost > budget:
            continue
        chosen.add(item)
        held.update(name for name, _ in new)
        used += cost
    return chosen


def _new_parts(sizes: dict[Item, int], item: Item, held: set[str]) -> list[tuple[str, int]]:
    if isinstance(sizes, Sizes):
        return sizes.new_parts(item, held)
    return [(f"{item[0]}:{item[1]}", sizes[item])]


def resident_bytes(items: set[Item], sizes: dict[Item, int]) -> int:
    """Bytes of `items` held together (shared parts once)."""
    held: set[str] = set()
    total = 0
    for item in sorted(items):
        new = _new_parts(sizes, item, held)
        held.update(name for name, _ in new)
        total += sum(size for _, size in new)
    return total


def offline_optimum(uses: list[Item], sizes: dict[Item, int], budget: int) -> float:
    """Belady's rule over parts, replaying `uses` in order: an item is a hit when all its parts
    are resident; missing parts are loaded, then the resident part used farthest in the future
    (never, first) is evicted until the bytes fit. The hit rate no online policy beats by
    much at the same budget (with sizes that differ it is a heuristic bound, not exact)."""
    part_uses: list[list[tuple[str, int]]] = [_new_parts(sizes, i, set()) for i in uses]
    next_use: dict[str, list[int]] = {}
    for step in range(len(uses) - 1, -1, -1):
        for name, _ in part_uses[step]:
            next_use.setdefault(name, []).append(step)
    resident: dict[str, int] = {}
    used = hits = 0
    for parts in part_uses:
        names = [name for name, _ in parts]
        for name in names:
            next_use[name].pop()
        hits += all(name in resident for name in names)
        for name, size in parts:
            if name not in resident:
                resident[name] = size
                used += size
        for victim in sorted(resident, key=lambda n: -_upcoming(next_use, n, len(uses))):
            if used <= budget:
                break
            if victim not in names:
                used -= resident.pop(victim)
    return hits / len(uses) if uses else 0.0


def _upcoming(next_use: dict[str, list[int]], name: str, never: int) -> int:
    pending = next_use.get(name)
    return pending[-1] if pending else never


def evaluate(
    predictor: object,
    requests: list[Request],
    sizes: dict[Item, int],
    budget: int,
    window: float,
    split: float = 0.8,
) -> Evaluation:
    first, last = requests[0].t, requests[-1].t
    cut = first + split * (last - first)
    predictor.fit([r for r in requests if r.t < cut])
    hits = uses = windows = 0
    resident_total = 0.0
    boundary = cut
    while boundary < last:
        history = [r for r in requests if r.t < boundary]
        upcoming = [r for r in requests if boundary <= r.t < boundary + window]
        resident = resident_set(predictor.scores(history, boundary), sizes, budget)
        resident_total += resident_bytes(resident, sizes)
        for request in upcoming:
            for item in request.items():
                if item in sizes:
                    uses += 1
                    hits += item in resident
        windows += 1
        boundary += window
    return Evaluation(
        getattr(predictor, "name", type(predictor).__name__),
        hits / uses if uses else 0.0,
        resident_total / max(windows, 1),
        windows,
        uses,
    )
