"""regress --engine llama.cpp: every variant computed by llama.cpp from GGUF files, the original
by llama.cpp on the original GGUF (`--model X.gguf`), or by transformers (`--original
transformers`).

Variant kinds:
    llamacpp=FILE.gguf   the variant's GGUF (a quantize --export, a llama-quantize output);
                         checked to have the original's vocabulary, and an export to have been
                         made from the original file
    kv=SLOTS_DIR         a slot folder of prefill-kv --engine llama.cpp: each case's prefix is
                         restored from its slot file, the rest computed on top of it

Every case is fed as token ids, so tokenization is the same for both sides; llama.cpp returns
the full distribution at every scored position, so KL and every statistic are exact, with the
same reports, thresholds and exit codes as the other engines.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any

import torch

from copilot_cli.core.artifacts import sha256_file
from copilot_cli.core.errors import InputError, ModelLoadError
from copilot_cli.core.gguf import check_gguf, copilot_keys, gguf_file
from copilot_cli.core.metrics import compare_logits
from copilot_cli.core.models import ModelSpec, context_length, load_model
from copilot_cli.core.options import OptionError
from copilot_cli.kv import check_slot_model, read_slot_index, verified_slot
from copilot_cli.regress.cases import Case
from copilot_cli.regress.engine import Runner
from copilot_cli.regress.options import RegressOptions
from copilot_cli.regress.variants import VariantSpec, parse_variant
from copilot_cli.serving import load_llamacpp

MAX_CONTEXT = 4096  # llama.cpp's context for scoring: the KV of this many tokens


class LlamaCppRunner(Runner):
    """llama.cpp for the variants (and, by default, the original)."""

    def __init__(self, loaded: Any, options: Any) -> None:

        self.llamacpp = load_llamacpp()  # one line, exit 2, when llama-cpp-python is missing
        super().__init__(loaded, options)
        self.original = gguf_file(str(options.model.name_or_path))
        self.engine_original = options.original != "transformers"
        if self.engine_original and self.original is None:
            raise OptionError(
                "model",
                "--engine llama.cpp computes the original from a GGUF: give --model X.gguf "
                "(or --original transformers)",
            )
        self._evaluators: dict[Path, Any] = {}
        self._checked: set[tuple[Path, str]] = set()  # variants, folders, slot files checked

    def _evaluator(self, gguf: Path) -> Any:
        gguf = gguf.resolve()
        if gguf not in self._evaluators:
            n_ctx = min(MAX_CONTEXT, context_length(self.model.config))
            try:
                check_gguf(gguf)  # not GGUF, cut short, or vocabulary only: said first
                self._evaluators[gguf] = self.llamacpp.Evaluator(gguf, n_ctx)
            except ModelLoadError as exc:
                raise InputError(exc.message, where=str(gguf)) from None
            except ValueError as exc:  # llama-cpp-python's word for any load failure
                raise InputError(f"llama.cpp cannot load it ({exc})", where=str(gguf)) from None
        return self._evaluators[gguf]

    # -- the original ------------------------------------------------------------------------

    @torch.no_grad()
    def base_rows(
        self, seqs: list[tuple[int, ...]], starts: list[int]
    ) -> tuple[list[torch.Tensor], list[list[int]]]:
        if not self.engine_original:
            return super().base_rows(seqs, starts)

        started = time.perf_counter()
        original = self._evaluator(self.original)
        rows = [
            torch.from_numpy(original.logits(list(s), start))
            for s, start in zip(seqs, starts, strict=True)
        ]
        self.forward_seconds += time.perf_counter() - started
        return rows, [self.base_generate(ids) for ids in seqs]

    def base_logits(self, case: Case) -> torch.Tensor:
        return self.base_rows([case.ids], [case.split])[0][0]

    def base_generate(self, ids: tuple[int, ...]) -> list[int]:
        if not self.engine_original:
            return super().base_generate(ids)
        if not self.options.gen_tokens:
            return []
        if ids not in self._base_gen:
            original = self._evaluator(self.original)
            self._base_gen[ids] = original.greedy(list(ids), self.options.gen_tokens)
        return self._base_gen[ids]

    # -- the variants ------------------------------------------------------------------------

    @torch.no_grad()
    def variant_rows(
        self, spec: VariantSpec, cases: list[Case]
    ) -> list[tuple[torch.Tensor, list[int] | None]]:

        started = time.perf_counter()
        evaluator = self._variant_evaluator(spec)
        kv = spec.kind("kv")
        out = []
        for case in cases:
            ids = list(case.ids)
            restored = self._restore(evaluator, kv.arg, case) if kv is not None else 0
            logits = torch.from_numpy(evaluator.logits(ids, case.split, restored=restored))
            gen = None
            if self.options.gen_tokens:
                if kv is not None:
                    end = evaluator.greedy_after_restore
                    self._restore(evaluator, kv.arg, case)
                    gen = end(ids, case.split, self.options.gen_tokens)
                else:
                    gen = evaluator.greedy(ids, self.options.gen_tokens)
            out.append((logits, gen))
        self.forward_seconds += time.perf_counter() - started
        return out

    def generate(self, spec: VariantSpec | None, case: Case) -> list[int]:
        if spec is None:
            return self.base_generate(case.ids)
        return self.variant_rows(spec, [case])[0][1] or []

    def _variant_evaluator(self, spec: VariantSpec) -> Any:
        component = spec.kind("llamacpp")
        gguf = Path(component.arg) if component is not None else self.original
        if gguf is None:
            raise OptionError(
                "variants",
                f"{spec.name}: name its GGUF (llamacpp=FILE.gguf), or give --model X.gguf",
            )
        evaluator = self._evaluator(gguf)
        self._check_variant(spec, evaluator)
        return evaluator

    def _check_variant(self, spec: VariantSpec, evaluator: Any) -> None:
        """The variant's GGUF has the original's vocabulary, and an export of ours was made
        from the original file (not from another model that shares the vocabulary)."""
        key = (evaluator.gguf, spec.name)
        if key in self._checked:
            return

        if self.original is not None and evaluator.gguf != self.original.resolve():
            reference = self._evaluator(self.original)
            if evaluator.vocabulary_fingerprint != reference.vocabulary_fingerprint:
                raise InputError(
                    f"variant {spec.name}: its vocabulary is not the original's",
                    where=str(evaluator.gguf),
                )
            made_from = copilot_keys(evaluator.gguf).get("copilot-opt.source.sha256")
            if made_from is not None and made_from != sha256_file(self.original):
                raise InputError(
                    f"variant {spec.name}: exported from another GGUF than {self.original.name}",
                    where=str(evaluator.gguf),
                )
        self._checked.add(key)

    def _restore(self, evaluator: Any, folder: str, case: Case) -> int:
        """The case's prefix restored from its slot file (the folder checked against the
        variant's GGUF once)."""

        index = read_slot_index(Path(folder))
        key = (evaluator.gguf, f"slots:{folder}")
        if key not in self._checked:
            check_slot_model(index, evaluator.gguf, evaluator.vocabulary_fingerprint, folder)
            self._checked.add(key)
        prefix = next(p for p in index.prefixes if p.name == case.prefix)
        if (Path(folder), prefix.file) not in self._checked:  # size and sha256, once a run
            verified_slot(Path(folder), prefix)
            self._checked.add((Path(folder), prefix.file))
        return evaluator.restore(Path(folder) / prefix.file, prefix.token_ids)

    def close(self) -> None:
        for evaluator in self._evaluators.values():
            evaluator.close()
        self._evaluators.clear()


# -- the cross-check against llama.cpp's own KL tool ------------------------------------------


def perplexity_base_tokens(path: Path) -> tuple[int, list[list[int]]]:
    """(n_ctx, chunks of token ids) of a `llama-perplexity --kl-divergence-base` file: the
    tokens llama.cpp's KL tool scores, so our numbers can be put beside its own."""

    data = path.read_bytes()
    if data[:8] != b"_logits_":
        raise InputError("not a llama-perplexity base file", where=str(path))
    n_ctx, _vocab, n_chunk = struct.unpack("<Iii", data[8:20])
    count = n_ctx * n_chunk
    ids = list(struct.unpack(f"<{count}i", data[20 : 20 + 4 * count]))
    return n_ctx, [ids[i * n_ctx : (i + 1) * n_ctx] for i in range(n_chunk)]


def chunks_mean_kl(original: Path, variant: Path, base_file: Path) -> float:
    """Mean KL(original || variant) over what `llama-perplexity --kl-divergence` scores: the
    chunks of its base file (BOS first where the model adds one), their second halves, each
    position predicting the next token; computed the way regress --engine llama.cpp does."""

    n_ctx, chunks = perplexity_base_tokens(base_file)
    spec = parse_variant(f"x=llamacpp={variant}", ("llamacpp", "kv"))
    options = RegressOptions(
        variants=(f"x=llamacpp={variant}",),
        engine="llama.cpp",
        gen_tokens=0,
        model=ModelSpec(str(original)),
    )
    runner = LlamaCppRunner(load_model(options.model), options)
    try:
        bos, add_bos = runner.llamacpp.bos_of(runner._evaluator(Path(original)))
        total, count = 0.0, 0
        for index, chunk in enumerate(chunks):
            ids = tuple([bos, *chunk[1:]] if add_bos else chunk)
            case = Case(f"chunk-{index}", "all", ids, n_ctx // 2)
            base = runner.base_rows([case.ids], [case.split])[0][0]
            [(logits, _)] = runner.variant_rows(spec, [case])
            metrics = compare_logits(base, logits, torch.tensor(case.ids[case.split + 1 :]))
            total += float(metrics.kl.sum())
            count += metrics.kl.numel()
    finally:
        runner.close()
    return total / count
