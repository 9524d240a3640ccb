"""Saved baselines: the original model's log-probabilities, so CI need not rerun it.

Format `copilot-opt.regress-baseline`, version 1 (safetensors). For case c of case set s
(`s` = the case set's hash prefix, see cases.py):
    {s}.{c}.logprobs        float32 [positions, vocab]            (full mode, --baseline-topk 0)
    {s}.{c}.topk_ids        int32   [positions, k]                (top-k mode)
    {s}.{c}.topk_logprobs   float32 [positions, k]
    {s}.{c}.target_logprob  float32 [positions]   log-prob of the actual next token
    {s}.{c}.generated       int64   [n]           the base's greedy continuation
Metadata: fingerprints, prompts hash, case sets (hash -> number of cases), topk, gen_tokens.

Size trade-off: full mode stores positions × vocab × 4 bytes (34 prompts × ~50 positions ×
8192 = 56 MB on the shipped model; ×16 for a 128k vocabulary) and gives exact KL. Top-k mode
stores positions × k × 8 bytes (k = 64: 0.9 MB) and gives a lower bound of KL that is tight
when the top-k hold nearly all the mass; same-top-1, Δp and perplexity stay exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from copilot_cli.core.artifacts import check_header, decode_metadata, save_safetensors
from copilot_cli.core.errors import ArtifactError, InputError
from copilot_cli.core.inspection import Inspection, Problem, checked, unreadable
from copilot_cli.core.safetensors_io import read_header, read_verified, tensor_view

FORMAT = "copilot-opt.regress-baseline"
FORMAT_VERSION = 2  # 2: sealed by a digest over header and data
_CASE_TENSORS = {
    "logprobs": ("F32", 2),
    "topk_ids": ("I32", 2),
    "topk_logprobs": ("F32", 2),
    "target_logprob": ("F32", 1),
    "generated": ("I64", 1),
}


@dataclass
class BaseCase:
    logprobs: torch.Tensor | None
    topk_ids: torch.Tensor | None
    topk_logprobs: torch.Tensor | None
    target_logprob: torch.Tensor
    generated: list[int]


class BaselineWriter:
    def __init__(self, topk: int) -> None:
        self.topk = topk
        self.tensors: dict[str, torch.Tensor] = {}
        self.sets: dict[str, int] = {}

    def add(
        self,
        set_hash: str,
        index: int,
        logits: torch.Tensor,
        targets: torch.Tensor,
        generated: list[int],
    ) -> None:
        key = f"{set_hash[:16]}.{index}"
        log_p = torch.log_softmax(logits.float(), dim=-1)
        if self.topk:
            values, ids = log_p.topk(min(self.topk, log_p.shape[-1]), dim=-1)
            self.tensors[f"{key}.topk_ids"] = ids.to(torch.int32)
            self.tensors[f"{key}.topk_logprobs"] = values.contiguous()
        else:
            self.tensors[f"{key}.logprobs"] = log_p.contiguous()
        self.tensors[f"{key}.target_logprob"] = (
            log_p.gather(1, targets.long().unsqueeze(1)).squeeze(1).contiguous()
        )
        self.tensors[f"{key}.generated"] = torch.tensor(generated, dtype=torch.int64)
        self.sets[set_hash] = max(self.sets.get(set_hash, 0), index + 1)

    def save(self, path: Path, provenance: dict[str, Any]) -> None:
        metadata = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "topk": self.topk,
            "case_sets": self.sets,
            **provenance,
        }
        save_safetensors(path, self.tensors, metadata)


class Baseline:
    """A loaded baseline, checked against the model, tokenizer and prompts in use."""

    def __init__(
        self,
        path: Path,
        *,
        model_fingerprint: str | None,
        tokenizer_fingerprint: str | None,
        prompts_hash: str | None,
    ) -> None:
        """Every byte checked (digest), then format, fingerprints and prompts (each when given)."""
        where = str(path)
        if not path.is_file():
            raise InputError("baseline file does not exist", where=where)
        header, metadata, buffer, start = read_verified(path)
        check_header(
            metadata,
            where=where,
            fmt=FORMAT,
            version=FORMAT_VERSION,
            model_fingerprint=model_fingerprint,
            tokenizer_fingerprint=tokenizer_fingerprint,
        )
        if prompts_hash is not None and metadata.get("prompts_hash") != prompts_hash:
            raise ArtifactError(
                "made for other prompts (prompts hash differs): save a new "
                "baseline with --save-baseline",
                where=where,
            )
        self.path = path
        self.metadata = metadata
        try:
            self.topk = int(metadata.get("topk", "0"))
            self.gen_tokens = int(metadata.get("gen_tokens", "0"))
        except ValueError as exc:
            raise ArtifactError(f"malformed metadata ({exc})", where=where) from None
        self.sets = decode_metadata(metadata, "case_sets", where=where)
        if not isinstance(self.sets, dict) or not all(
            isinstance(v, int) for v in self.sets.values()
        ):
            raise ArtifactError("malformed case_sets", where=where)
        self._header, self._buffer, self._start = header, buffer, start

    def require(self, set_hash: str, count: int, what: str) -> None:
        if self.sets.get(set_hash) != count:
            raise ArtifactError(
                f"holds no base log-probs for the {what} cases (the case "
                "sequences differ): save a new baseline",
                where=str(self.path),
            )

    def _tensor(self, name: str, dtype: str, dims: int) -> torch.Tensor:
        entry = self._header.get(name)
        if entry is None or entry["dtype"] != dtype or len(entry["shape"]) != dims:
            raise ArtifactError(
                f"{name}: missing or not {dtype} with {dims} dims", where=str(self.path)
            )
        return tensor_view(self._buffer, self._start, entry)

    def case(self, set_hash: str, index: int) -> BaseCase:
        """The base model's numbers for one case (each tensor's dtype and rank checked)."""
        key = f"{set_hash[:16]}.{index}"

        def get(name: str) -> torch.Tensor:
            kind = name.rsplit(".", 1)[1]
            dtype, dims = _CASE_TENSORS[kind]
            return self._tensor(name, dtype, dims)

        if self.topk:
            return BaseCase(
                None,
                get(f"{key}.topk_ids"),
                get(f"{key}.topk_logprobs"),
                get(f"{key}.target_logprob"),
                get(f"{key}.generated").tolist(),
            )
        return BaseCase(
            get(f"{key}.logprobs"),
            None,
            None,
            get(f"{key}.target_logprob"),
            get(f"{key}.generated").tolist(),
        )


def inspect_baseline(path: Path, *, verify: bool = True, expected: Any = None) -> Any:
    """A baseline file described; verified: every byte, and every case's tensors present with
    their dtype and rank (`expected`: a core.inspection.Expected, fingerprints compared)."""

    try:
        header, metadata = read_header(path)
    except ArtifactError as exc:
        return unreadable(str(path), "regress-baseline", str(path), exc, verify=verify)
    keys = ("format", "format_version", "topk", "gen_tokens", "prompts_hash")
    info: dict[str, Any] = {key: metadata.get(key) for key in keys}
    info.update(
        model_fingerprint=metadata.get("model_fingerprint"),
        tokenizer_fingerprint=metadata.get("tokenizer_fingerprint"),
        tensors=len(header),
        bytes=path.stat().st_size,
    )
    problems: list[Problem] = []
    if verify:

        def every_case() -> None:
            baseline = Baseline(
                path,
                model_fingerprint=getattr(expected, "model_fingerprint", None),
                tokenizer_fingerprint=getattr(expected, "tokenizer_fingerprint", None),
                prompts_hash=None,
            )
            for set_hash, count in baseline.sets.items():
                for index in range(count):
                    baseline.case(set_hash, index)

        checked(problems, str(path), every_case)
    return Inspection(str(path), "regress-baseline", info, verify, problems)
