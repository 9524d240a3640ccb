"""quantize --export gguf: the source GGUF with its embedding table re-encoded from our table.

GGUF tensor types are per tensor, and our schemes map onto two of llama.cpp's exactly:

    INT8 per row      -> Q8_0: each block of 32 values of a row takes the row's fp16 scale,
                         the int8 values unchanged (llama.cpp dequantizes d * q, as we do)
    INT8 group 32     -> Q8_0: each block its group's scale (Q8_0 itself, 8.5 bits a value)
    INT4 group 32     -> Q4_0: the group's fp16 scale, the values (q + 8, 1..15) repacked as
                         llama.cpp lays a block out (byte j: value j low, value j + 16 high)

One tensor has one type, so the rows we keep in FP16 cannot stay FP16 there: each becomes
blocks of the same type with scales of their own (per 32 values, not per row: closer than the
other rows), and the report says so.

The file is written at the byte level: the source's header fields are copied as they are, our
own keys (`copilot-opt.*`) appended, the tensor infos rewritten with new offsets, and every
tensor's data copied byte for byte, except `token_embd.weight` (and `output.weight` with
--include-lm-head on an untied model). Nothing is loaded into memory but the re-encoded table.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from copilot_cli import __version__
from copilot_cli.core import lazy
from copilot_cli.core.errors import ArtifactError, InputError
from copilot_cli.quant.scheme import QuantizedTable

gguf = lazy.module("gguf")

FORMAT = "copilot-opt.gguf-embeddings"
FORMAT_VERSION = 1
KEY = "copilot-opt."  # every key this module adds starts so
EMBEDDING = "token_embd.weight"
OUTPUT = "output.weight"
BLOCK = 32  # values per Q8_0 / Q4_0 block
Q4_0, Q8_0 = 2, 8  # GGML type ids
TYPE_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 8: "Q8_0", 30: "BF16"}
_STRING, _UINT32, _UINT64 = 8, 4, 10  # GGUF value types
_COPY_CHUNK = 16 << 20


@dataclass(frozen=True)
class Encoded:
    """A table re-encoded for llama.cpp: its GGML type and the bytes of its blocks."""

    ggml_type: int
    data: bytes

    @property
    def type_name(self) -> str:
        return TYPE_NAMES[self.ggml_type]


def _fp16(values: torch.Tensor) -> np.ndarray:
    return values.to(torch.float16).numpy().astype("<f2")


def encode(table: QuantizedTable, kept_ids: torch.Tensor, kept_rows: torch.Tensor) -> Encoded:
    """Our quantized table as Q8_0 (INT8) or Q4_0 (INT4, groups of 32) blocks, row-major; the
    kept FP16 rows quantized per block of their own."""
    rows, cols = table.rows, table.cols
    if cols % BLOCK:
        raise InputError(f"the hidden size {cols} is not a multiple of {BLOCK}", where="export")
    if table.group_size not in (None, BLOCK):
        raise InputError(
            f"Q8_0 and Q4_0 hold groups of {BLOCK} values: quantize with --group-size {BLOCK} "
            f"(this table has groups of {table.group_size})",
            where="export",
        )
    if table.bits == 8:
        per_row = table.group_size is None
        scales = table.scales.view(rows, 1).expand(rows, cols // BLOCK) if per_row else table.scales
        values = table.q.view(rows, cols // BLOCK, BLOCK)
        kind, blocks = Q8_0, _q8_blocks(scales, values)
        if kept_ids.numel():
            own_scales, own_values = _block_quantize(kept_rows.float(), 127)
            blocks[kept_ids.numpy()] = _q8_blocks(own_scales, own_values)
    else:
        nibbles = _unpack_nibbles(table.q, cols)  # q + 8, 1..15
        kind, blocks = Q4_0, _q4_blocks(table.scales, nibbles.view(rows, cols // BLOCK, BLOCK))
        if kept_ids.numel():
            own_scales, own_values = _block_quantize(kept_rows.float(), 7)
            blocks[kept_ids.numpy()] = _q4_blocks(own_scales, (own_values + 8).to(torch.uint8))
    return Encoded(kind, blocks.tobytes())


def _block_quantize(rows: torch.Tensor, top: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-block quantization of float rows: (fp16 scales [r, blocks], ints)."""
    blocks = rows.view(rows.shape[0], -1, BLOCK)
    scales = (blocks.abs().amax(dim=2) / top).to(torch.float16)
    safe = torch.where(scales == 0, torch.ones_like(scales), scales).float()
    values = torch.clamp(torch.round(blocks / safe[..., None]), -top, top).to(torch.int8)
    return scales, values


def _q8_blocks(scales: torch.Tensor, values: torch.Tensor) -> np.ndarray:
    dtype = np.dtype([("d", "<f2"), ("qs", "i1", (BLOCK,))])
    out = np.empty(tuple(values.shape[:2]), dtype=dtype)
    out["d"] = _fp16(scales)
    out["qs"] = values.to(torch.int8).numpy()
    return out


def _q4_blocks(scales: torch.Tensor, nibbles: torch.Tensor) -> np.ndarray:
    """Q4_0 blocks: byte j holds value j (low nibble) and value j + 16 (high nibble)."""
    dtype = np.dtype([("d", "<f2"), ("qs", "u1", (BLOCK // 2,))])
    out = np.empty(tuple(nibbles.shape[:2]), dtype=dtype)
    out["d"] = _fp16(scales)
    low, high = nibbles[..., : BLOCK // 2], nibbles[..., BLOCK // 2 :]
    out["qs"] = (low | (high << 4)).to(torch.uint8).numpy()
    return out


def _unpack_nibbles(packed: torch.Tensor, cols: int) -> torch.Tensor:
    """Our INT4 layout (byte = even column low, odd column high) to [rows, cols] nibbles."""
    out = torch.empty(packed.shape[0], cols, dtype=torch.uint8)
    out[:, 0::2] = packed & 0x0F
    out[:, 1::2] = packed >> 4
    return out


# -- the file -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceGGUF:
    """What the export reads of the source file (through gguf's reader, memory-mapped)."""

    path: Path
    reader: Any
    tied: bool  # no output tensor: llama.cpp reads token_embd for the output projection too

    def tensor(self, name: str) -> Any:
        return next((t for t in self.reader.tensors if t.name == name), None)


def open_source(path: Path, rows: int, cols: int) -> SourceGGUF:
    """The source GGUF, checked to hold a plain [vocab, hidden] embedding table of our shape.

    Raises:
        InputError: no embedding tensor, an embedding that is not one plain table (a second
            per-layer table, another shape), a vocabulary that does not match our table, or a
            file already exported by copilot-opt.
    """
    where = str(path)
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as exc:  # the reader raises many types on a damaged file
        raise InputError(f"not a readable GGUF file ({exc})", where=where) from None
    names = [t.name for t in reader.tensors]
    if EMBEDDING not in names:
        raise InputError(f"holds no embedding tensor ({EMBEDDING}): nothing to export", where=where)
    other = [n for n in names if "token_embd" in n and n != EMBEDDING]
    if other:
        raise InputError(
            f"its embedding is not one plain table (also {other[0]}): not exported", where=where
        )
    if any(str(k).startswith(KEY) for k in reader.fields):
        raise InputError(
            "was written by quantize --export already: export from the original", where=where
        )
    source = SourceGGUF(path, reader, tied=OUTPUT not in names)
    shape = [int(x) for x in source.tensor(EMBEDDING).shape]
    if shape != [cols, rows]:
        raise InputError(
            f"its embedding table is {shape[1] if len(shape) > 1 else '?'} x {shape[0]}, the "
            f"quantized one {rows} x {cols}: the vocabulary does not match the table",
            where=where,
        )
    return source


def write_export(
    source: SourceGGUF,
    out: Path,
    tables: dict[str, Encoded],
    keys: dict[str, Any],
    *,
    seal: bool = True,
) -> dict[str, Any]:
    """Write the export to `out` (the caller's staging folder): header fields as they are plus
    `keys` (and, with `seal`, each replaced tensor's sha256 under `copilot-opt.sha256.NAME`),
    `tables` (by GGUF tensor name) in place of those tensors, every other tensor's bytes
    copied. Returns what the report says of each replaced tensor."""
    reader = source.reader
    alignment = int(reader.alignment)
    replaced = {}
    layout = []  # (name, dims, type, size, source offset or None)
    for tensor in reader.tensors:
        new = tables.get(tensor.name)
        if new is not None:
            replaced[tensor.name] = {
                "type_before": TYPE_NAMES.get(
                    int(tensor.tensor_type), str(int(tensor.tensor_type))
                ),
                "type_after": new.type_name,
                "bytes_before": int(tensor.n_bytes),
                "bytes_after": len(new.data),
            }
        size = len(new.data) if new is not None else int(tensor.n_bytes)
        kind = new.ggml_type if new is not None else int(tensor.tensor_type)
        layout.append((tensor, [int(d) for d in tensor.shape], kind, size))
    digests = {name: hashlib.sha256(t.data).hexdigest() for name, t in tables.items()}
    extra = dict(keys)
    if seal:  # what inspect checks: each replaced tensor's bytes, and what it replaced
        for name, info in replaced.items():
            extra[f"{KEY}sha256.{name}"] = digests[name]
            extra[f"{KEY}type_before.{name}"] = info["type_before"]
            extra[f"{KEY}bytes_before.{name}"] = info["bytes_before"]
    with out.open("wb") as handle, source.path.open("rb") as original:
        _write_header(handle, reader, extra, layout, alignment)
        for tensor, _, _, size in layout:
            _pad(handle, alignment)
            new = tables.get(tensor.name)
            if new is not None:
                handle.write(new.data)
            else:
                _copy(original, int(tensor.data_offset), size, handle, source.path)
    return {"tensors": replaced, "sha256": digests}


def _write_header(
    handle: IO[bytes], reader: Any, extra: dict[str, Any], layout: list[Any], alignment: int
) -> None:
    fields = [f for f in reader.fields.values() if not f.name.startswith("GGUF.")]
    version = int(reader.fields["GGUF.version"].parts[-1][0])
    handle.write(b"GGUF" + struct.pack("<IQQ", version, len(layout), len(fields) + len(extra)))
    for field in fields:  # each key-value entry exactly as the source stores it
        handle.write(b"".join(part.tobytes() for part in field.parts))
    for key in sorted(extra):
        handle.write(_kv(key, extra[key]))
    offset = 0
    for tensor, dims, kind, size in layout:
        offset = -(-offset // alignment) * alignment
        name = tensor.name.encode("utf-8")
        handle.write(struct.pack("<Q", len(name)) + name + struct.pack("<I", len(dims)))
        handle.write(struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", kind, offset))
        offset += size


def _kv(key: str, value: Any) -> bytes:
    name = key.encode("utf-8")
    head = struct.pack("<Q", len(name)) + name
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{key}: only strings and counts are written")
    if isinstance(value, int):
        return head + struct.pack("<IQ", _UINT64, value)
    data = value.encode("utf-8")
    return head + struct.pack("<IQ", _STRING, len(data)) + data


def _pad(handle: IO[bytes], alignment: int) -> None:
    handle.write(b"\0" * (-handle.tell() % alignment))


def _copy(source: IO[bytes], start: int, size: int, handle: IO[bytes], path: Path) -> None:
    source.seek(start)
    left = size
    while left:
        chunk = source.read(min(left, _COPY_CHUNK))
        if not chunk:
            raise ArtifactError("the source GGUF ended early", where=str(path))
        handle.write(chunk)
        left -= len(chunk)


def export_keys(metadata: dict[str, Any], source_sha256: str, source_name: str) -> dict[str, Any]:
    """The `copilot-opt.*` keys of an export: what made it, from what, with which scheme."""
    return {
        f"{KEY}format": FORMAT,
        f"{KEY}format_version": FORMAT_VERSION,
        f"{KEY}version": __version__,
        f"{KEY}scheme": metadata["scheme"],
        f"{KEY}kept_rows": int(metadata["kept_rows"]),
        f"{KEY}kept_rows_encoding": "blocks of the table's type with scales of their own",
        f"{KEY}source.name": source_name,
        f"{KEY}source.sha256": source_sha256,
        f"{KEY}model_fingerprint": metadata["model_fingerprint"],
        f"{KEY}tokenizer_fingerprint": metadata["tokenizer_fingerprint"],
    }


def inspect_export(path: Path, verify: bool) -> tuple[dict[str, Any], list[str]]:
    """(what a GGUF export holds, problems): its `copilot-opt.*` keys; verified, each replaced
    tensor's bytes against the sha256 recorded when it was written.

    Raises:
        InputError: a GGUF copilot-opt did not write (no copilot-opt.* keys).
    """
    reader = gguf.GGUFReader(str(path))
    keys = {k: f.contents() for k, f in reader.fields.items() if k.startswith(KEY)}
    if keys.get(f"{KEY}format") != FORMAT:
        raise InputError("a GGUF file quantize --export did not write", where=str(path))
    tensors = {}
    problems = []
    for name in sorted(
        k.removeprefix(f"{KEY}sha256.")
        for k in keys
        if ".sha256." in k or k.startswith(f"{KEY}sha256.")
    ):
        tensor = next((t for t in reader.tensors if t.name == name), None)
        if tensor is None:
            problems.append(f"{name} is missing")
            continue
        tensors[name] = {
            "type_before": keys.get(f"{KEY}type_before.{name}"),
            "type_after": TYPE_NAMES.get(int(tensor.tensor_type), str(int(tensor.tensor_type))),
            "bytes_before": keys.get(f"{KEY}bytes_before.{name}"),
            "bytes_after": int(tensor.n_bytes),
        }
        if verify and hashlib.sha256(tensor.data).hexdigest() != keys[f"{KEY}sha256.{name}"]:
            problems.append(f"{name} is not the table quantize --export wrote: replaced or edited")
    if verify and not tensors:
        problems.append("records no replaced tensor")
    info = {
        "format": FORMAT,
        "format_version": keys.get(f"{KEY}format_version"),
        "scheme": keys.get(f"{KEY}scheme"),
        "kept_rows": keys.get(f"{KEY}kept_rows"),
        "source": keys.get(f"{KEY}source.name"),
        "source_sha256": keys.get(f"{KEY}source.sha256"),
        "model_fingerprint": keys.get(f"{KEY}model_fingerprint"),
        "tensors": tensors,
        "bytes": path.stat().st_size,
    }
    return info, problems
