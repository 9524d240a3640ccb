"""llama.cpp serving the slot files prefill-kv computed (kv/llamacpp.py): each prefix restored
before a request instead of recomputed (needs llama-cpp-python: make llamacpp-env).

A restore is checked three ways
before its tokens are trusted: the index (digest, GGUF sha256, vocabulary fingerprint), the
file's sha256, and the token ids llama.cpp reads back from it; afterwards llama.cpp's own
counters say how many prompt tokens it evaluated (`prompt_tokens_evaluated`), so a restore
that silently did nothing shows.
"""

from __future__ import annotations

import ctypes
import json
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from copilot_cli.core.errors import ArtifactError
from copilot_cli.kv import (
    DEFAULT_SLOT_CONTEXT as DEFAULT_CONTEXT,
)
from copilot_cli.kv import check_slot_model as check_model
from copilot_cli.kv import (
    clear_context,
    open_model,
    tokens_of,
    verified_slot,
    vocabulary_fingerprint,
)
from copilot_cli.kv import read_slot_index as read_index
from copilot_cli.serving.protocol import send_json


@dataclass
class Completion:
    tokens: list[int]
    restored: int  # prompt tokens restored from a slot file
    prompt_tokens_evaluated: int  # llama.cpp's own count
    first_token_seconds: float


class SlotServer:
    """llama.cpp with a slot folder: each request restores the longest stored prefix of its
    prompt, then computes the rest. The folder is checked against the model at start."""

    def __init__(self, folder: Path, gguf: Path, n_ctx: int = DEFAULT_CONTEXT) -> None:
        self.folder = Path(folder)
        self.index = read_index(self.folder)
        self.llm = open_model(gguf, n_ctx)
        check_model(self.index, gguf, vocabulary_fingerprint(self.llm), str(self.folder))
        self._checked: set[str] = set()

    def restore(self, tokens: list[int]) -> int:
        """Load the longest stored prefix of `tokens` into sequence 0 (0: none fits)."""
        prefix = self.index.longest(tokens)
        clear_context(self.llm)
        if prefix is None:
            return 0
        path = self.folder / prefix.file
        if prefix.file not in self._checked:
            verified_slot(self.folder, prefix)
            self._checked.add(prefix.file)
        capacity = len(prefix.token_ids)
        array, count = (llama_cpp.llama_token * capacity)(), ctypes.c_size_t(0)
        read = llama_cpp.llama_state_seq_load_file(
            self.llm.ctx, str(path).encode(), 0, array, capacity, ctypes.byref(count)
        )
        if read == 0 or tuple(array[: count.value]) != prefix.token_ids:
            raise ArtifactError(f"llama.cpp did not restore {prefix.name}", where=str(path))
        self.llm.n_tokens = count.value
        self.llm.input_ids[: count.value] = prefix.token_ids
        return count.value

    def complete(self, tokens: list[int], max_tokens: int, *, restore: bool = True) -> Completion:
        """Greedy tokens after `tokens`, the prefix restored first (or everything computed)."""
        started = time.perf_counter()
        llama_cpp.llama_perf_context_reset(self.llm.ctx)
        restored = self.restore(tokens) if restore else clear_context(self.llm)
        out: list[int] = []
        first = 0.0
        for token in self.llm.generate(tokens, top_k=1, temp=0.0, reset=True):
            if not out:
                first = time.perf_counter() - started
            out.append(int(token))
            if len(out) == max_tokens:
                break
        evaluated = llama_cpp.llama_perf_context(self.llm.ctx).n_p_eval
        return Completion(out, restored, int(evaluated), first)


def serve_http(server: SlotServer, host: str, port: int) -> None:
    """A small HTTP server in the foreground: POST /completion with {"prompt": text,
    "n_predict": N} restores the longest stored prefix, computes the rest and answers
    {"content", "tokens", "timings": {"restored", "prompt_tokens_evaluated",
    "first_token_ms"}}. One request at a time (one llama.cpp sequence)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            try:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                tokens = tokens_of(server.llm, str(body["prompt"]))
                done = server.complete(tokens, int(body.get("n_predict", 16)))
                reply, status = _reply(server, done), 200
            except (KeyError, TypeError, ValueError) as exc:
                reply, status = {"error": f"bad request: {exc}"}, 400
            send_json(self, status if self.path == "/completion" else 404, reply)

        def log_message(self, *args: Any) -> None:
            return

    HTTPServer((host, port), Handler).serve_forever()


def _reply(server: SlotServer, done: Completion) -> dict[str, Any]:
    return {
        "content": server.llm.detokenize(done.tokens).decode("utf-8", errors="replace"),
        "tokens": done.tokens,
        "timings": {
            "restored": done.restored,
            "prompt_tokens_evaluated": done.prompt_tokens_evaluated,
            "first_token_ms": round(done.first_token_seconds * 1000, 3),
        },
    }


# -- what regress --engine llama.cpp scores ---------------------------------------------------
# Sequences are fed through llama.cpp's own batch API (one sequence, batches of n_batch
# tokens), asking for logits only where they are scored: a 2,000-token prompt costs one
# prefill and no [n_ctx, vocab] buffer. Greedy continuations keep the end-of-generation tokens
# out for their length, as regress does in transformers (`min_new_tokens`).


class Evaluator:
    """One GGUF in llama.cpp: `logits`, `greedy`, `restore`."""

    def __init__(self, gguf: Path, n_ctx: int) -> None:
        self.gguf = Path(gguf)
        self.llm = open_model(self.gguf, n_ctx)
        self.n_ctx = n_ctx
        self.n_batch = int(self.llm.n_batch)
        self.vocab = int(self.llm.n_vocab())
        handle = llama_cpp.llama_model_get_vocab(self.llm.model)
        self.end_ids = [t for t in range(self.vocab) if llama_cpp.llama_vocab_is_eog(handle, t)]
        self._fingerprint: str | None = None

    @property
    def vocabulary_fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = vocabulary_fingerprint(self.llm)
        return self._fingerprint

    def clear(self) -> None:
        self.llm.reset()
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.llm.ctx), True)

    def logits(self, tokens: list[int], start: int, *, restored: int = 0) -> np.ndarray:
        """float32 [len(tokens) - 1 - start, vocab]: the logits at positions start..len-2
        (each predicting the next token). Positions below `restored` are already in the
        cache (a restored prefix); the rest are computed here, on top of it."""
        if not restored:
            self.clear()
        if len(tokens) > self.n_ctx:
            raise ArtifactError(
                f"a case of {len(tokens)} tokens does not fit llama.cpp's context ({self.n_ctx})",
                where=str(self.gguf),
            )
        wanted = range(max(start, restored), len(tokens) - 1)
        return self._decode(tokens[restored:], restored, wanted)

    def greedy(self, tokens: list[int], count: int) -> list[int]:
        """`count` greedy tokens after `tokens` (computed from scratch)."""
        if count == 0:
            return []
        self.clear()
        last = self._decode(tokens, 0, range(len(tokens) - 1, len(tokens)))[-1]
        return self._continue(last, len(tokens), count)

    def greedy_after_restore(self, tokens: list[int], restored: int, count: int) -> list[int]:
        """As `greedy`, the first `restored` tokens of `tokens` already in the cache."""
        if count == 0:
            return []
        last = self._decode(tokens[restored:], restored, range(len(tokens) - 1, len(tokens)))
        return self._continue(last[-1], len(tokens), count)

    def _continue(self, logits: np.ndarray, position: int, count: int) -> list[int]:
        out: list[int] = []
        while True:
            scores = logits.copy()
            scores[self.end_ids] = -np.inf
            token = int(scores.argmax())
            out.append(token)
            if len(out) == count:
                return out
            logits = self._decode([token], position, range(position, position + 1))[-1]
            position += 1

    def restore(self, path: Path, token_ids: tuple[int, ...]) -> int:
        """Load a slot file into sequence 0 (cleared first); its token ids must be
        `token_ids`. Returns how many tokens it holds."""
        self.clear()
        capacity = len(token_ids)
        array, count = (llama_cpp.llama_token * capacity)(), ctypes.c_size_t(0)
        read = llama_cpp.llama_state_seq_load_file(
            self.llm.ctx, str(path).encode(), 0, array, capacity, ctypes.byref(count)
        )
        if read == 0 or tuple(array[: count.value]) != tuple(token_ids):
            raise ArtifactError("llama.cpp did not restore this slot file", where=str(path))
        return int(count.value)

    def _decode(self, tokens: list[int], first: int, wanted: range) -> np.ndarray:
        """Feed `tokens` at positions first.. ; the logits of the positions in `wanted`."""
        rows: list[np.ndarray] = []
        batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        try:
            for begin in range(0, len(tokens), self.n_batch):
                chunk = tokens[begin : begin + self.n_batch]
                batch.n_tokens = len(chunk)
                for i, token in enumerate(chunk):
                    position = first + begin + i
                    batch.token[i] = token
                    batch.pos[i] = position
                    batch.n_seq_id[i] = 1
                    batch.seq_id[i][0] = 0
                    batch.logits[i] = position in wanted
                if llama_cpp.llama_decode(self.llm.ctx, batch) != 0:
                    raise ArtifactError("llama.cpp could not evaluate a case", where=str(self.gguf))
                for i in range(len(chunk)):
                    if batch.logits[i]:
                        pointer = llama_cpp.llama_get_logits_ith(self.llm.ctx, i)
                        rows.append(np.ctypeslib.as_array(pointer, shape=(self.vocab,)).copy())
        finally:
            llama_cpp.llama_batch_free(batch)
        if not rows:
            return np.zeros((0, self.vocab), dtype=np.float32)
        return np.stack(rows).astype(np.float32, copy=False)

    def close(self) -> None:
        close = getattr(self.llm, "close", None)
        if close is not None:
            close()


def bos_of(evaluator: Evaluator) -> tuple[int, bool]:
    """(the BOS id, whether the model adds it in front of a sequence)."""
    vocab = llama_cpp.llama_model_get_vocab(evaluator.llm.model)
    return int(llama_cpp.llama_vocab_bos(vocab)), bool(llama_cpp.llama_vocab_get_add_bos(vocab))
