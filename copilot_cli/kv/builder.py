"""prefill-kv: compute the static prefixes' KV caches once and write them as verified segments."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from copilot_cli import __version__
from copilot_cli.core import lazy, progress
from copilot_cli.core.artifacts import (
    FINGERPRINT_SCHEME,
    canonical_json,
    sealed,
    sha256_text,
    write_if_changed,
)
from copilot_cli.core.errors import ArtifactError, CheckFailed, FingerprintMismatch, InputError
from copilot_cli.core.locks import output_lock
from copilot_cli.core.models import DTYPE_NAMES, LoadedModel, load_model
from copilot_cli.core.options import OptionError
from copilot_cli.core.outputs import claim_folder, mark
from copilot_cli.core.tokens import prompt_ids
from copilot_cli.kv.chunkkv import bundle_snippet_format, chunk_sources, context_openings
from copilot_cli.kv.format import (
    FORMAT_VERSION,
    INDEX,
    INDEX_FORMAT,
    SEGMENTS_DIR,
    block_hashes,
    read_segment,
    segment_hash,
    write_segment,
)
from copilot_cli.kv.geometry import model_geometry
from copilot_cli.kv.options import PrefillOptions, PrefixSource
from copilot_cli.kv.prefill import WorkItem
from copilot_cli.kv.radix import RadixTree, Segment
from copilot_cli.kv.units import compute
from copilot_cli.kv.verify import VerifyReport, verify_prefixes
from copilot_cli.prompts import load_bundle

transformers = lazy.module("transformers")


@dataclass
class PrefixReport:
    name: str
    origin: str
    tokens: int
    segments: int
    block_hashes: int


@dataclass
class PrefillResult:
    out: Path
    prefixes: list[PrefixReport]
    skipped: list[str]
    sum_prefix_tokens: int
    distinct_tokens: int
    computed_tokens: int
    reused_tokens: int
    bytes_on_disk: int
    seconds: float
    warnings: list[str] = field(default_factory=list)
    verify: list[VerifyReport] = field(default_factory=list)

    @property
    def failures(self) -> list[str]:
        """Prefixes whose cached logits differ from recomputed ones beyond the tolerance."""
        return [r.name for r in self.verify if not r.passed]

    def raise_for_failures(self) -> None:
        """Raise CheckFailed (exit 1) when --verify found a prefix off."""
        if self.failures:
            raise CheckFailed(
                "verify: cached logits differ beyond tolerance for " + ", ".join(self.failures)
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in self.__dict__.items() if k not in ("prefixes", "verify")},
            "out": str(self.out),
            "prefixes": [p.__dict__ for p in self.prefixes],
            "verify": [r.to_dict() for r in self.verify],
        }


def prefixes_from_bundle(bundle_path: Path, tokenizer_fingerprint: str) -> list[PrefixSource]:
    """Static prefixes of every template in a compiled bundle."""

    bundle = load_bundle(bundle_path)
    made_with = bundle.tokenizer_fingerprint
    if made_with and made_with != tokenizer_fingerprint:
        raise FingerprintMismatch(
            "tokenizer", expected=tokenizer_fingerprint, found=made_with, where=str(bundle_path)
        )
    return [
        PrefixSource(
            name=name,
            text=bundle.static_prefix(name),
            origin=f"template:{name}",
            add_special=bundle.entry(name).adds_special_tokens,
        )
        for name in bundle.templates()
    ]


def prefixes_from_files(paths: list[Path]) -> list[PrefixSource]:
    """One prefix per text file, named after the file."""
    sources = []
    for path in paths:
        try:
            text = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            raise InputError("file does not exist", where=str(path)) from None
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 ({exc.reason})", where=str(path)) from exc
        sources.append(PrefixSource(name=path.name, text=text, origin=f"text:{path}"))
    return sources


class _SegmentWriter:
    """Computes or reuses each segment, writing new ones atomically as they are produced."""

    def __init__(self, loaded: LoadedModel, options: PrefillOptions, dtype: str) -> None:
        self.loaded = loaded
        self.options = options
        self.dtype = dtype
        self.geometry = model_geometry(loaded.model)
        self.hash_of: dict[int, str] = {}
        self.files: dict[str, dict[str, Any]] = {}
        self.computed = 0
        self.reused = 0

    def segment_id(self, segment: Segment) -> str:
        parent = self.hash_of.get(id(segment.parent), "") if segment.parent else ""
        value = segment_hash(parent, segment.token_ids, self.loaded.model_fingerprint, self.dtype)
        self.hash_of[id(segment)] = value
        return value

    def run(self, tree: RadixTree, full_ids: dict[int, list[int]]) -> None:
        """Every segment reused (its file intact) or computed, then written: the computing
        runs where the executor puts it (kv/units.py; Ray actors with --ray), the writing here."""
        segments = list(tree.segments())
        ids = [self.segment_id(s) for s in segments]
        paths = [self.options.out / SEGMENTS_DIR / f"{i}.safetensors" for i in ids]
        existing = [self._reuse(path, seg_id) for path, seg_id in zip(paths, ids, strict=True)]
        items = [
            WorkItem(k, s.start, s.token_ids, None if e is None else (e.keys, e.values))
            for k, (s, e) in enumerate(zip(segments, existing, strict=True))
        ]
        position = {id(s): k for k, s in enumerate(segments)}
        parents = [position.get(id(s.parent), -1) for s in segments]
        # nothing to compute, nothing to start (a Ray cluster included)
        computed = (
            compute(self.loaded, items, parents, self.options)
            if any(e is None for e in existing)
            else ()
        )
        for key, keys, values in computed:
            self._write(segments[key], ids[key], paths[key], keys, values, full_ids)
        for segment, seg_id, path, found in zip(segments, ids, paths, existing, strict=True):
            if found is not None:
                self.reused += len(segment.token_ids)
            self.files[seg_id] = {
                "file": f"{SEGMENTS_DIR}/{seg_id}.safetensors",
                "start": segment.start,
                "length": len(segment.token_ids),
                "parent": self.hash_of.get(id(segment.parent), "") if segment.parent else "",
                "bytes": path.stat().st_size,
            }

    def _write(
        self,
        segment: Segment,
        seg_id: str,
        path: Path,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
        full_ids: dict[int, list[int]],
    ) -> None:
        self.computed += len(segment.token_ids)
        size = self.options.block_size
        hashes = block_hashes(full_ids[id(segment)], size, self.loaded.model_fingerprint)
        write_segment(
            path,
            keys=keys,
            values=values,
            token_ids=segment.token_ids,
            start=segment.start,
            parent=self.hash_of.get(id(segment.parent), "") if segment.parent else "",
            seg_hash=seg_id,
            geometry=self.geometry,
            model_fingerprint=self.loaded.model_fingerprint,
            tokenizer_fingerprint=self.loaded.tokenizer_fingerprint,
            dtype=self.dtype,
            block_size=size,
            hashes=hashes[(segment.start + size - 1) // size :],
        )

    def _reuse(self, path: Path, seg_id: str) -> Any:
        if not path.is_file():
            return None
        try:
            data = read_segment(
                path, model_fingerprint=self.loaded.model_fingerprint, geometry=self.geometry
            )
        except ArtifactError:
            return None  # damaged or foreign: recompute and overwrite
        if data.metadata.get("segment_hash") != seg_id or data.metadata.get("dtype") != self.dtype:
            return None
        return data


def prefill_kv(options: PrefillOptions, loaded: LoadedModel | None = None) -> PrefillResult:
    """Prefill the static prefixes of `options.bundle` and the `options.texts` files, write them
    as verified segments, and (with `options.verify`) compare cached vs recomputed logits.
    Loads `options.model` in `options.dtype` when no model is handed in.

    Raises:
        InputError / OptionError: no prefix, a prefix longer than the context or window.
        FingerprintMismatch: the bundle was made for another tokenizer.
    """
    if options.bundle is None and not options.texts and options.chunks is None:
        raise OptionError("bundle", "give a prompt bundle, a text file or a chunks file")
    claim_kv_folder(options.out)
    if loaded is None:
        with progress.progress("loading model"):
            loaded = load_model(options.model_spec())
    sources = []
    if options.bundle is not None:
        sources += prefixes_from_bundle(options.bundle, loaded.tokenizer_fingerprint)
    sources += prefixes_from_files(list(options.texts))
    if options.chunks is not None:
        fmt = options.snippet_format
        if options.bundle is not None:  # each template with its context block opened
            bundle = load_bundle(options.bundle)
            fmt = bundle_snippet_format(bundle, loaded.tokenizer, fmt)
            sources += context_openings(bundle, loaded.tokenizer, fmt)
        sources += chunk_sources(
            options.chunks,
            options.registry,
            options.top,
            loaded.tokenizer,
            loaded.tokenizer_fingerprint,
            fmt,
        )
    bar = progress.progress("prefilling") if options.ray is None else None
    with bar or contextlib.nullcontext():  # on Ray the cluster run draws its own bar
        result = prefill_sources(loaded, sources, options)
    if options.verify:
        with progress.progress("verifying"):
            result.verify = verify_prefixes(loaded, options.out)
    return result


def claim_kv_folder(out: Path) -> None:
    """Refuse an output folder that is not new, empty or a KV folder (nothing is touched)."""
    claim_folder(out, "out", fmt=INDEX_FORMAT, manifest=INDEX, label="KV folder")


def prefill_sources(
    loaded: LoadedModel, sources: list[PrefixSource], options: PrefillOptions
) -> PrefillResult:
    """Tokenize, share, prefill and write every prefix; the index is written last.

    Raises:
        InputError: a prefix longer than the model's context or sliding window, or no prefix.
    """
    started = time.perf_counter()
    model = loaded.model
    dtype = DTYPE_NAMES.get(next(model.parameters()).dtype)
    if dtype is None:
        raise OptionError("dtype", f"unsupported model dtype {next(model.parameters()).dtype}")
    geometry = model_geometry(model)
    for name, value in (("block_size", options.block_size), ("chunk_size", options.chunk_size)):
        if value > geometry.context_length:
            raise OptionError(
                name, f"{value} is more than the model's context ({geometry.context_length})"
            )
    tree, token_ids, skipped, warnings = _tree(loaded, sources, geometry)
    writer = _SegmentWriter(loaded, options, dtype)
    full_ids = {id(s): [t for c in s.chain() for t in c.token_ids] for s in tree.segments()}
    by_name = {s.name: s for s in sources}
    claim_kv_folder(options.out)
    existed = options.out.exists()
    fresh = not existed or not any(options.out.iterdir())
    with (
        output_lock(options.out, "prefill-kv"),
        torch.no_grad(),
        _undone_if(fresh, options.out, remove=not existed),
    ):
        mark(options.out, INDEX_FORMAT)
        writer.run(tree, full_ids)
        prefixes = _index_entries(tree, token_ids, by_name, writer, options, loaded)
        _write_index(options, loaded, dtype, geometry, prefixes, writer.files)
    reports = [
        PrefixReport(
            name=name,
            origin=entry["origin"],
            tokens=entry["tokens"],
            segments=len(entry["segments"]),
            block_hashes=len(entry["block_hashes"]),
        )
        for name, entry in prefixes.items()
    ]
    return PrefillResult(
        out=options.out,
        prefixes=sorted(reports, key=lambda r: r.name),
        skipped=skipped,
        sum_prefix_tokens=sum(len(ids) for ids in token_ids.values()),
        distinct_tokens=tree.total_tokens(),
        computed_tokens=writer.computed,
        reused_tokens=writer.reused,
        bytes_on_disk=sum(f["bytes"] for f in writer.files.values()),
        seconds=time.perf_counter() - started,
        warnings=warnings,
    )


@contextlib.contextmanager
def _undone_if(fresh: bool, folder: Path, *, remove: bool) -> Iterator[None]:
    """A run into a new (or empty) folder that fails leaves it as it found it: no segments
    without an index. (Into an existing KV folder, the old index stays whole and its segments
    untouched; new segments a failed run wrote are content-addressed, reused by the rerun.)"""
    try:
        yield
    except BaseException:
        if fresh:
            for child in list(folder.iterdir()) if folder.is_dir() else []:
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
            if remove:
                with contextlib.suppress(OSError):
                    folder.rmdir()
        raise


def _tree(
    loaded: LoadedModel, sources: list[PrefixSource], geometry: Any
) -> tuple[RadixTree, dict[str, list[int]], list[str], list[str]]:
    """Every non-empty prefix tokenized into one radix tree (each checked against the model)."""
    tree, token_ids, skipped, warnings = RadixTree(), {}, [], []
    for source in sources:
        if source.token_ids is not None:
            ids = list(source.token_ids)
        else:
            ids = prompt_ids(loaded.tokenizer, source.text, add_special=source.add_special)
        if not ids:
            skipped.append(source.name)
            warnings.append(f"{source.origin}: empty prefix skipped")
            continue
        if len(ids) >= geometry.context_length:
            raise InputError(
                f"prefix of {len(ids)} tokens does not fit the model's context of "
                f"{geometry.context_length} (one position must stay for the request)",
                where=source.origin,
            )
        if geometry.sliding_window and len(ids) > geometry.sliding_window:
            raise InputError(
                f"prefix of {len(ids)} tokens is longer than the model's sliding window "
                f"({geometry.sliding_window}); caches beyond the window are refused",
                where=source.origin,
            )
        tree.insert(source.name, ids)
        token_ids[source.name] = ids
    if not token_ids:
        raise InputError("no non-empty prefix to prefill")
    return tree, token_ids, skipped, warnings


def _index_entries(
    tree: RadixTree,
    token_ids: dict[str, list[int]],
    by_name: dict[str, PrefixSource],
    writer: _SegmentWriter,
    options: PrefillOptions,
    loaded: LoadedModel,
) -> dict[str, dict[str, Any]]:
    prefixes = {}
    for name, ids in token_ids.items():
        chain = tree.end_of(name).chain()
        prefixes[name] = {
            "origin": by_name[name].origin,
            "text_sha256": sha256_text(by_name[name].text),
            "add_special_tokens": by_name[name].add_special,
            "tokens": len(ids),
            "token_ids": ids,
            "segments": [writer.hash_of[id(s)] for s in chain],
            "block_hashes": block_hashes(ids, options.block_size, loaded.model_fingerprint),
        }
        if by_name[name].kind != "prefix":
            prefixes[name] |= {"kind": by_name[name].kind, "lead_tokens": by_name[name].lead_tokens}
    return dict(sorted(prefixes.items()))


def _write_index(
    options: PrefillOptions,
    loaded: LoadedModel,
    dtype: str,
    geometry: Any,
    prefixes: dict[str, dict[str, Any]],
    files: dict[str, dict[str, Any]],
) -> None:
    """index.json last (readers see the new segments only once it names them), then the
    segments no prefix uses any more are removed."""
    index = {
        "format": INDEX_FORMAT,
        "format_version": FORMAT_VERSION,
        "copilot_opt_version": __version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "model_fingerprint": loaded.model_fingerprint,
        "tokenizer_fingerprint": loaded.tokenizer_fingerprint,
        "fingerprint_scheme": FINGERPRINT_SCHEME,
        "dtype": dtype,
        "block_size": options.block_size,
        "geometry": {
            **geometry.to_metadata(),
            "context_length": geometry.context_length,
            "sliding_window": geometry.sliding_window,
        },
        "prefixes": prefixes,
        "segments": dict(sorted(files.items())),
    }
    write_if_changed(options.out / INDEX, canonical_json(sealed(index)).encode("utf-8"))
    for stale in (options.out / SEGMENTS_DIR).glob("*.safetensors"):
        if stale.stem not in files:
            stale.unlink()
