"""llama.cpp serving an editor's whole request: the static prefix restored from its slot file,
each stored snippet's KV placed at its position the way llama.cpp's own `--cache-reuse` moves
cached chunks (restored into a scratch sequence, its lead dropped, its positions shifted so
llama.cpp re-rotates the keys, then copied into the request's sequence), the rest computed.

A snippet's KV was computed after a canonical lead, not after this request's text, so a part
of it is recomputed (llama.cpp only appends to a sequence, so the recomputed tokens are the
ones it can compute in place): the first `first_tokens` of each snippet (where the
deviation is largest: the tokens that stood right after the lead) and the last `last_tokens`
of the stored region (what the code after it reads most). Defaults measured in
benchmarks/bench_served_llamacpp.py (docs/kv.md, "Chunk KV in the engines").

Refused with one line at start: a model whose cached keys llama.cpp cannot move (no RoPE,
recurrent or hybrid layers: `llama_memory_can_shift` is false). A request longer than the
model's sliding window is computed without placement, and the answer says so.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from copilot_cli.core.errors import ArtifactError, InputError
from copilot_cli.kv import check_slot_model, read_slot_index, verified_slot
from copilot_cli.serving.generated import Generated
from copilot_cli.serving.llamacpp import DEFAULT_CONTEXT, open_model, vocabulary_fingerprint

FIRST_TOKENS = 16
LAST_TOKENS = 128
BATCH = 512
SCRATCH = 1  # the sequence a snippet is restored into before it is moved


class ContextEngine:
    """One GGUF and its slot folder (prefixes and snippets), one request at a time."""

    name = "llama.cpp"

    def __init__(
        self,
        folder: Path,
        gguf: Path,
        *,
        n_ctx: int = DEFAULT_CONTEXT,
        first_tokens: int = FIRST_TOKENS,
        last_tokens: int = LAST_TOKENS,
    ) -> None:
        self.folder = Path(folder)
        self.index = read_slot_index(self.folder)
        self.llm = open_model(gguf, 256)  # the model and its vocabulary; its context unused
        check_slot_model(self.index, gguf, vocabulary_fingerprint(self.llm), str(self.folder))
        self.n_ctx = n_ctx
        self.context_length = n_ctx
        self.ctx = _context(self.llm.model, n_ctx)
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.chunks = {p.name: p for p in self.index.prefixes if p.kind == "chunk"}
        if self.chunks and not llama_cpp.llama_memory_can_shift(self.memory):
            raise InputError(
                "llama.cpp cannot move this model's cached keys (no RoPE, or recurrent or "
                "hybrid layers): chunk KV is refused for it; prefill without --chunks",
                where=str(gguf),
            )
        self.window = int(llama_cpp.llama_model_n_swa(self.llm.model)) or None
        self.first_tokens, self.last_tokens = first_tokens, last_tokens
        vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        self.vocab = int(self.llm.n_vocab())
        self.end_ids = [t for t in range(self.vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)]
        self.batch = llama_cpp.llama_batch_init(BATCH, 0, 2)
        self.lock = threading.Lock()
        self._verified: set[str] = set()

    def stored_chunks(self) -> set[str]:
        return set(self.chunks)

    def detokenize(self, tokens: list[int]) -> bytes:
        return self.llm.detokenize(tokens)

    def generate(
        self,
        composed: Any,
        max_tokens: int,
        on_token: Callable[[int], bool] | None = None,
        *,
        restore: bool = True,
        place: bool = True,
    ) -> Generated:
        """The request's prompt laid out (restored, placed, computed), then `max_tokens`
        greedy tokens, each handed to `on_token` as it comes. `restore` / `place` off: the
        static prefix / the snippets computed instead (what a bench compares with)."""
        ids = composed.ids
        self._fits(len(ids) + max_tokens)
        with self.lock:
            started = time.perf_counter()
            restored, placed, recomputed, last, note = self._prompt(composed, restore, place)
            first = time.perf_counter()
            tokens, reason = self._continue(last, len(ids), max_tokens, on_token)
            done = time.perf_counter()
        return Generated(
            tokens=tokens,
            finish_reason=reason,
            prompt_tokens=len(ids),
            cached_tokens=restored + placed,
            recomputed_tokens=recomputed,
            prompt_ms=(first - started) * 1000,
            predicted_ms=(done - first) * 1000,
            note=note,
        )

    def score(
        self, composed: Any, reference: list[int], *, restore: bool = True, place: bool = True
    ) -> np.ndarray:
        """float32 [len(reference), vocab]: the next-token logits after the prompt and after
        each reference token but the last (teacher forcing), the prompt laid out as
        `generate` lays it out."""
        ids = composed.ids
        self._fits(len(ids) + len(reference))
        with self.lock:
            *_, last, _ = self._prompt(composed, restore, place)
            rows = [last]
            for offset, token in enumerate(reference[:-1]):
                rows.append(self._decode([token], len(ids) + offset, True))
        return np.stack(rows)

    def _fits(self, tokens: int) -> None:
        if tokens > self.n_ctx:
            raise InputError(
                f"{tokens} tokens (prompt and prediction) do not fit the engine's context "
                f"({self.n_ctx})",
                where="n_predict",
            )

    def _prompt(self, composed: Any, restore: bool, place: bool) -> tuple[int, int, int, Any, str]:
        """(restored, placed, recomputed, last logits, note) of the prompt laid out."""
        ids = composed.ids
        llama_cpp.llama_memory_clear(self.memory, True)
        restored = self._restore_prefix(ids) if restore else 0
        note = ""
        if place and self.window and len(ids) > self.window:
            place, note = False, f"longer than the sliding window ({self.window}): no placement"
        placed, recomputed, last = self._lay_out(composed.segments(), restored, place)
        return restored, placed, recomputed, last, note

    def _restore_prefix(self, ids: list[int]) -> int:
        prefix = self.index.longest(ids)
        if prefix is None:
            return 0
        return self._load(prefix, 0)

    def _load(self, prefix: Any, sequence: int) -> int:
        """A slot file into `sequence` (its size and sha256 checked once a run)."""
        if prefix.file not in self._verified:
            verified_slot(self.folder, prefix)
            self._verified.add(prefix.file)
        capacity = len(prefix.token_ids)
        array, count = (llama_cpp.llama_token * capacity)(), ctypes.c_size_t(0)
        read = llama_cpp.llama_state_seq_load_file(
            self.ctx, str(self.folder / prefix.file).encode(), sequence, array, capacity,
            ctypes.byref(count),
        )  # fmt: skip
        if read == 0 or tuple(array[: count.value]) != prefix.token_ids:
            raise ArtifactError(f"llama.cpp did not restore {prefix.name}", where=prefix.file)
        return int(count.value)

    def _lay_out(self, segments: list[Any], restored: int, place: bool) -> tuple[int, int, Any]:
        """Every segment past the restored prefix placed or computed in order; returns (placed
        tokens, recomputed tokens, the logits of the last prompt token)."""
        placed = recomputed = 0
        last_stored = max((i for i, s in enumerate(segments) if s.stored), default=-1)
        logits = None
        for number, segment in enumerate(segments):
            if segment.end <= restored:
                continue
            final = number == len(segments) - 1
            stored = self.chunks.get(segment.stored or "")
            if stored is not None and place and segment.start >= restored:
                tail = self.last_tokens if number == last_stored else 0
                moved, computed, out = self._place(segment, stored, tail, final)
                placed, recomputed = placed + moved, recomputed + computed
            else:
                begin = max(segment.start, restored)
                out = self._decode(segment.ids[begin - segment.start :], begin, final)
            logits = out if out is not None else logits
        if logits is None:
            raise ArtifactError("the prompt's last token was never computed")
        return placed, recomputed, logits

    def _place(self, segment: Any, stored: Any, tail: int, final: bool) -> tuple[int, int, Any]:
        """A stored snippet at `segment.start`: its first tokens computed, the middle moved
        from its slot file, its last `tail` tokens computed. Its ids are checked against the
        slot's (after the lead): another snippet's KV is never placed."""
        lead = stored.lead_tokens
        if list(stored.token_ids[lead:]) != segment.ids:
            raise ArtifactError(
                f"the slot of {stored.name[:22]}... holds other tokens than its snippet",
                where=stored.file,
            )
        size = len(segment.ids)
        first = min(self.first_tokens, size)
        keep = size - min(max(tail, 1 if final else 0), size - first)
        out = self._decode(segment.ids[:first], segment.start, final and keep == first == size)
        if keep > first:
            self._load(stored, SCRATCH)
            memory, delta = self.memory, segment.start - lead
            llama_cpp.llama_memory_seq_rm(memory, SCRATCH, 0, lead + first)
            llama_cpp.llama_memory_seq_rm(memory, SCRATCH, lead + keep, -1)
            llama_cpp.llama_memory_seq_add(memory, SCRATCH, lead + first, -1, delta)
            llama_cpp.llama_memory_seq_cp(memory, SCRATCH, 0, -1, -1)
            llama_cpp.llama_memory_seq_rm(memory, SCRATCH, -1, -1)
        if keep < size:
            out = self._decode(segment.ids[keep:], segment.start + keep, final)
        return max(keep - first, 0), first + size - keep, out

    def _decode(self, tokens: list[int], start: int, want_last: bool) -> Any:
        """Feed `tokens` into sequence 0 from position `start`; the last one's logits when
        asked."""
        last = None
        batch = self.batch
        for begin in range(0, len(tokens), BATCH):
            chunk = tokens[begin : begin + BATCH]
            batch.n_tokens = len(chunk)
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = start + begin + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = want_last and begin + i == len(tokens) - 1
            if llama_cpp.llama_decode(self.ctx, batch) != 0:
                raise ArtifactError("llama.cpp could not evaluate the request")
            if want_last and begin + len(chunk) == len(tokens):
                pointer = llama_cpp.llama_get_logits_ith(self.ctx, len(chunk) - 1)
                last = np.ctypeslib.as_array(pointer, shape=(self.vocab,)).copy()
        return last

    def _continue(
        self, logits: Any, position: int, count: int, on_token: Callable[[int], bool] | None
    ) -> tuple[list[int], str]:
        out: list[int] = []
        while len(out) < count:
            token = int(np.argmax(logits))
            if token in self.end_ids:
                return out, "stop"
            out.append(token)
            if on_token is not None and on_token(token) is False:
                return out, "stop"  # a stop string
            if len(out) == count:
                break
            logits = self._decode([token], position, True)
            position += 1
        return out, "length"

    def close(self) -> None:
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)
        self.llm.close()


def _context(model: Any, n_ctx: int) -> Any:
    """A llama.cpp context with two sequences in one unified cache (the request's and the
    scratch one a snippet is restored into), all cores."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_batch = params.n_ubatch = BATCH
    params.n_seq_max = 2
    params.kv_unified = True
    # as llama-cpp-python's own contexts (flash attention off): slot files written by one are
    # read by the other (their value layout is the same)
    params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    params.n_threads = params.n_threads_batch = os.cpu_count() or 1
    ctx = llama_cpp.llama_init_from_model(model, params)
    if not ctx:
        raise ArtifactError("llama.cpp could not create a context")
    return ctx
