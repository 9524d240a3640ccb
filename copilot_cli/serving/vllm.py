"""A vLLM v1 KV connector that serves a `prefill-kv` folder (consumer side).

    KVTransferConfig(
        kv_connector="CopilotPrefixConnector",
        kv_connector_module_path="copilot_cli.serving.vllm",
        kv_role="kv_consumer",
        kv_connector_extra_config={"kv_dir": "build/kv"},
    )

Scheduler side: for each new request, the longest stored prefix of its prompt token ids (the
folder's radix tree, partial segments included), rounded down to vLLM's block size and always
leaving one prompt token to compute, is reported as externally cached, but only after every
segment it needs was read and verified (checksum, chain, fingerprints, geometry): a missing or
corrupt segment makes the request run as without the connector, with the error logged, so no
wrong cache is ever promised. Worker side: those tokens' keys and values are written into each
attention layer's paged cache through the attention backend's own cache-update op (so the
backend's block layout is its own business), from verified segments kept in host memory
(SegmentStore: LRU by bytes; `preload` reads the whole folder at engine start).

At engine start the served model's and tokenizer's fingerprints, the dtype and the attention
geometry are compared with the folder's: any difference stops the engine with one error line.
Optional extra config: `max_bytes` (host memory for segments, default 2 GiB), `preload`
(default true), `request_log` (a file the scheduler appends one line per served request to:
the input of `warm-plan`) and `plan` (a warm plan, `copilot-opt warm-plan`: its L0 prefixes
are read at start, L1 by a background thread in priority order, and prefixes neither planned
nor possibly in its L2 tier are never read from disk; `preload` is then not used).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)
from vllm.logger import init_logger

from copilot_cli import kv, warm
from copilot_cli.core import lazy
from copilot_cli.core.errors import CopilotError
from copilot_cli.core.models import DTYPE_NAMES
from copilot_cli.kv import DEFAULT_MAX_BYTES, KVCacheDir, PrefixMatch, RadixTree, SegmentStore
from copilot_cli.serving import vllm_chunks
from copilot_cli.serving.compat import EngineModel, check_servable, local_folder
from copilot_cli.serving.vllm_chunks import Placement

transformers = lazy.module("transformers")

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.request import Request

logger = init_logger(f"vllm.{__name__}")  # vLLM configures the "vllm" hierarchy only


@dataclass
class LoadSpec:
    """Write positions [start, end) of a request into its blocks: the stored prefix's (held by
    `segments`) up to `prefix_end`, then each placed snippet's (serving/vllm_chunks.py)."""

    request_id: str
    block_ids: list[int]
    start: int
    end: int
    segments: list[tuple[str, int, int]]  # (hash, start, length)
    prefix_end: int = 0
    placements: list[Placement] = field(default_factory=list)


@dataclass
class PrefixLoadMetadata(KVConnectorMetadata):
    loads: list[LoadSpec] = field(default_factory=list)


class CopilotPrefixConnector(KVConnectorBase_V1):
    """Serves the prefixes a `copilot-opt prefill-kv` folder holds (see the module doc)."""

    def __init__(
        self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: Any = None
    ) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = self._kv_transfer_config.kv_connector_extra_config or {}
        if not extra.get("kv_dir"):
            raise ValueError("copilot-opt connector: kv_connector_extra_config needs 'kv_dir'")
        self.block_size = vllm_config.cache_config.block_size
        try:
            self.kv = KVCacheDir(extra["kv_dir"])
            check_servable(self.kv, _engine_model(vllm_config, kv_cache_config))
        except CopilotError as exc:
            logger.error("copilot-opt connector refuses %s: %s", extra["kv_dir"], exc)
            raise RuntimeError(f"copilot-opt connector refuses the KV folder: {exc}") from None
        self.store = SegmentStore(
            self.kv.path,
            model_fingerprint=self.kv.model_fingerprint,
            tokenizer_fingerprint=self.kv.index.tokenizer_fingerprint,
            geometry=self.kv.index.geometry,
            max_bytes=int(extra.get("max_bytes", DEFAULT_MAX_BYTES)),
        )
        self.tree = RadixTree.from_index(self.kv.index)
        self.rotary, self.window = self._rotary(vllm_config)
        self._chain = {h: s.parent for h, s in self.kv.index.segments.items()}
        self._planned: dict[str, tuple[int, int, PrefixMatch, list[Placement]]] = {}
        self._to_load: dict[str, tuple[int, int, PrefixMatch, list[Placement]]] = {}
        self._bad: set[str] = set()
        self._checked: dict[str, tuple[int, int]] = {}  # segment -> (size, mtime_ns) verified
        self._bad_state: dict[str, tuple[int, int] | None] = {}
        self._load_errors: set[int] = set()
        self._layer_index: dict[str, int] = {}
        if kv_cache_config is not None:
            names = [n for g in kv_cache_config.kv_cache_groups for n in g.layer_names]
            self._layer_index = {name: i for i, name in enumerate(names)}
        self.plan = self._read_plan(extra.get("plan"))
        self.request_log = None
        if role == KVConnectorRole.SCHEDULER and extra.get("request_log"):
            self.request_log = warm.RequestLog(extra["request_log"])
        # a prefix's whole segment chain -> its name (what a request log names)
        self._names = {entry.segments: name for name, entry in self.kv.index.prefixes.items()}
        self._allowed = self._allowed_segments()
        if role == KVConnectorRole.WORKER and self.plan is not None:
            self._load_prefixes(self.plan.in_tier("L0"))  # L0: resident before any request
            l1 = self.plan.in_tier("L1")
            threading.Thread(
                target=self._load_prefixes, args=(l1,), name="copilot-kv-plan-L1", daemon=True
            ).start()
        elif role == KVConnectorRole.WORKER and extra.get("preload", True):
            threading.Thread(target=self._preload, name="copilot-kv-preload", daemon=True).start()
        logger.info(
            "copilot-opt connector: %d prefixes from %s (%s side)",
            len(self.kv.names()),
            self.kv.path,
            role.name.lower(),
        )

    def _rotary(self, vllm_config: VllmConfig) -> tuple[Any, int | None]:
        """The frequencies snippets' keys are re-rotated with, when the folder holds chunk KV
        (a model whose keys cannot move: the engine stops with one line)."""
        if not any(e.kind == "chunk" for e in self.kv.index.prefixes.values()):
            return None, None
        config = vllm_config.model_config.hf_config
        try:
            rotary = kv.rotary_of_config(config)
        except CopilotError as exc:
            raise RuntimeError(f"copilot-opt connector refuses chunk KV: {exc}") from None
        return rotary, self.kv.index.geometry.sliding_window

    # -- scheduler side -----------------------------------------------------------------------
    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        ids = list(request.prompt_token_ids or [])
        match = self.tree.match(ids)
        placements, region = self._placements(request, ids, match)
        usable = min(region, len(ids) - 1) // self.block_size * self.block_size
        placements = [p for p in placements if p.start < usable]
        if usable <= num_computed_tokens:
            return 0, False
        needed = match.covering(num_computed_tokens, min(usable, match.length))
        for placement in placements:
            needed += vllm_chunks.chunk_segments(self.kv.index, placement)
        if self._allowed is not None:  # a warm plan: only what it may hold is read from disk
            kept = []
            for segment in needed:
                if segment[0] not in self._allowed:
                    break
                kept.append(segment)
            if len(kept) < len(needed):
                end = kept[-1][1] + kept[-1][2] if kept else num_computed_tokens
                usable = min(usable, end) // self.block_size * self.block_size
                if usable <= num_computed_tokens:
                    return 0, False
                needed = match.covering(num_computed_tokens, usable)
        if not self._verified(needed):
            return 0, False
        self._planned[request.request_id] = (num_computed_tokens, usable, match, placements)
        self._log(request, match)
        return usable - num_computed_tokens, False

    def _placements(
        self, request: Request, ids: list[int], match: PrefixMatch
    ) -> tuple[list[Placement], int]:
        """(the snippets placed after the stored prefix, where the stored region ends)."""
        if self.rotary is None or (self.window and len(ids) > self.window):
            return [], match.length
        placements, last = vllm_chunks.plan(self.kv.index, request, ids, match.length)
        if not placements:
            return [], match.length
        return placements, max(placements[-1].end - last, match.length)

    def _log(self, request: Request, match: PrefixMatch) -> None:
        """One request-log line: the deepest stored prefix the request starts with; the
        session from `kv_transfer_params={"session": ...}`, else the request id."""
        if self.request_log is None:
            return
        chain = tuple(h for h, _, _ in match.segments)
        name = None
        for end in range(len(chain), 0, -1):
            name = self._names.get(chain[:end])
            if name is not None:
                break
        params = getattr(request, "kv_transfer_params", None) or {}
        session = str(params.get("session") or request.request_id)
        self.request_log.record(session, name)

    def _verified(self, segments: list[tuple[str, int, int]]) -> bool:
        """Every segment readable and intact: only then are tokens promised. Each file is
        verified once (again if it changes); the data is not kept here: the worker holds it."""
        for seg_hash, start, _ in segments:
            path = self.store.path(seg_hash)
            try:
                stat = path.stat()
            except OSError:
                stat = None
            state = None if stat is None else (stat.st_size, stat.st_mtime_ns)
            if state is not None and self._checked.get(seg_hash) == state:
                continue
            if seg_hash in self._bad and self._bad_state.get(seg_hash) == state:
                return False
            try:
                self.store.check(seg_hash, parent=self._chain.get(seg_hash), start=start)
            except CopilotError as exc:
                logger.error(
                    "copilot-opt connector: segment %s unusable, the request is computed: %s",
                    seg_hash[:16],
                    exc,
                )
                self._bad.add(seg_hash)
                self._bad_state[seg_hash] = state
                return False
            self._checked[seg_hash] = state  # type: ignore[assignment]
        return True

    def update_state_after_alloc(
        self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int
    ) -> None:
        plan = self._planned.pop(request.request_id, None)
        if num_external_tokens > 0 and plan is not None:
            start, _, match, placements = plan
            end = start + num_external_tokens
            self._to_load[request.request_id] = (start, end, match, placements)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        meta = PrefixLoadMetadata()
        for new in scheduler_output.scheduled_new_reqs:
            if new.req_id in self._to_load:
                meta.loads.append(self._spec(new.req_id, new.block_ids[0]))
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            resumed = req_id in getattr(cached, "resumed_req_ids", set())
            if resumed and req_id in self._to_load and cached.new_block_ids[i] is not None:
                meta.loads.append(self._spec(req_id, cached.new_block_ids[i][0]))
        self._to_load.clear()
        return meta

    def _spec(self, request_id: str, block_ids: list[int]) -> LoadSpec:
        start, end, match, placements = self._to_load[request_id]
        segments = match.covering(start, min(end, match.length))
        kept = [p for p in placements if p.start < end]
        return LoadSpec(request_id, list(block_ids), start, end, segments, match.length, kept)

    # -- worker side ------------------------------------------------------------------------
    def _read_plan(self, path: str | None) -> Any:
        """The warm plan (`plan` in the extra config), bound to this folder's fingerprints."""
        if not path:
            return None
        try:
            plan = warm.read_plan(path)
            plan.check_fits(self.kv.index, str(path))
        except CopilotError as exc:
            raise RuntimeError(f"copilot-opt connector refuses the warm plan: {exc}") from None
        return plan

    def _allowed_segments(self) -> set[str] | None:
        """With a plan: the segments of prefixes in L0/L1, or possibly in L2 (Bloom filter);
        the others are never read from disk (None: no plan, every segment allowed)."""
        if self.plan is None:
            return None
        planned = {i.id for tier in ("L0", "L1") for i in self.plan.in_tier(tier)}
        allowed: set[str] = set()
        for name, entry in self.kv.index.prefixes.items():
            if name in planned or self.plan.may_be_stored("prefix", name):
                allowed.update(entry.segments)
        return allowed

    def _load_prefixes(self, items: list[Any]) -> None:
        """Read and verify the segments of these plan items into host memory, in order."""
        prefixes = self.kv.index.prefixes
        for item in items:
            entry = prefixes.get(item.id)
            for seg_hash in entry.segments if entry is not None else ():
                if self.store.bytes_held >= self.store.max_bytes:
                    return
                try:
                    self.store.get(seg_hash)
                except CopilotError as exc:
                    logger.error(
                        "copilot-opt connector: segment %s unusable: %s", seg_hash[:16], exc
                    )

    def _preload(self) -> None:
        """Read and verify the folder's segments into host memory, most shared first."""
        for seg_hash in sorted(self._chain, key=lambda h: self._chain[h] != ""):
            if self.store.bytes_held >= self.store.max_bytes:
                return
            try:
                self.store.get(seg_hash)
            except CopilotError as exc:
                logger.error("copilot-opt connector: segment %s unusable: %s", seg_hash[:16], exc)

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, PrefixLoadMetadata):
            return
        for spec in meta.loads:
            try:
                keys, values = self._gather(spec)
            except CopilotError as exc:
                logger.error("copilot-opt connector: cannot load %s: %s", spec.request_id, exc)
                first, last = spec.start // self.block_size, (spec.end - 1) // self.block_size
                self._load_errors.update(spec.block_ids[first : last + 1])
                continue
            self._inject(forward_context, spec, keys, values)
            logger.info(
                "copilot-opt connector: loaded %d tokens for %s",
                spec.end - spec.start,
                spec.request_id,
            )

    def _gather(self, spec: LoadSpec) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per layer, the keys and values of positions [start, end) as [tokens, heads, dim]:
        the stored prefix's, then each placed snippet's (keys re-rotated to its place)."""
        parts_k: list[list[torch.Tensor]] = []
        parts_v: list[list[torch.Tensor]] = []
        taken: list[str] = []  # in use until joined: never evicted by the next one's read

        def add(seg_hash: str, lo: int, hi: int, delta: int = 0) -> None:
            segment = self.store.acquire(seg_hash)
            taken.append(seg_hash)
            if not parts_k:
                parts_k.extend([] for _ in segment.keys)
                parts_v.extend([] for _ in segment.values)
            keys, values = vllm_chunks.moved(segment, lo, hi, delta, self.rotary)
            for i, (k, v) in enumerate(zip(keys, values, strict=True)):
                parts_k[i].append(k)
                parts_v[i].append(v)

        try:
            prefix_end = min(spec.end, spec.prefix_end)
            for seg_hash, seg_start, seg_length in spec.segments:
                lo = max(spec.start, seg_start) - seg_start
                hi = min(prefix_end, seg_start + seg_length) - seg_start
                if hi > lo:
                    add(seg_hash, lo, hi)
            for placement in spec.placements:
                self._gather_placed(placement, spec, add)
            keys = [torch.cat(p, dim=1).transpose(0, 1).contiguous() for p in parts_k]
            values = [torch.cat(p, dim=1).transpose(0, 1).contiguous() for p in parts_v]
        finally:
            for seg_hash in taken:
                self.store.release(seg_hash)
        return keys, values

    def _gather_placed(self, placement: Placement, spec: LoadSpec, add: Any) -> None:
        """A placed snippet's positions inside [spec.start, spec.end), from its chunk's
        segments (its own tokens start at its lead), moved to where the request has it."""
        begin, end = max(spec.start, placement.start), min(spec.end, placement.end)
        if end <= begin:
            return
        delta = placement.start - placement.lead
        for seg_hash, seg_start, seg_length in vllm_chunks.chunk_segments(self.kv.index, placement):
            lo = max(begin - delta, seg_start) - seg_start
            hi = min(end - delta, seg_start + seg_length) - seg_start
            if hi > lo:
                add(seg_hash, lo, hi, delta)

    def _inject(
        self,
        forward_context: ForwardContext,
        spec: LoadSpec,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
    ) -> None:
        positions = torch.arange(spec.start, spec.end)
        blocks = torch.tensor(spec.block_ids, dtype=torch.int64)
        slots = blocks[positions // self.block_size] * self.block_size + positions % self.block_size
        for name, layer in forward_context.no_compile_layers.items():
            cache = getattr(layer, "kv_cache", None)
            if cache is None or name not in self._layer_index:
                continue
            if isinstance(cache, (list, tuple)):
                cache = cache[getattr(forward_context, "virtual_engine", 0)]
            index = self._layer_index[name]
            key = keys[index].to(cache.device, cache.dtype)
            value = values[index].to(cache.device, cache.dtype)
            layer.impl.do_kv_cache_update(layer, key, value, cache, slots.to(cache.device))

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # loads are synchronous: done in start_load_kv

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kw: Any) -> None:
        return  # a consumer: nothing is saved

    def wait_for_save(self) -> None:
        return

    def get_block_ids_with_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors


def _engine_model(vllm_config: VllmConfig, kv_cache_config: Any) -> EngineModel:
    model_config = vllm_config.model_config
    spec = kv_cache_config.kv_cache_groups[0].kv_cache_spec
    num_layers = sum(len(g.layer_names) for g in kv_cache_config.kv_cache_groups)
    tokenizer_dir = local_folder(model_config.tokenizer or model_config.model)
    return EngineModel(
        model_dir=local_folder(model_config.model),
        tokenizer=transformers.AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True),
        dtype=DTYPE_NAMES.get(model_config.dtype, str(model_config.dtype)),
        num_layers=num_layers,
        kv_heads=spec.num_kv_heads,
        head_dim=spec.head_size,
    )
