"""Put a quantized embedding table (and head) into a loaded transformers model."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from copilot_cli.core.fingerprints import model_fingerprint, tokenizer_fingerprint
from copilot_cli.quant import format as qformat
from copilot_cli.quant.module import QuantizedEmbedding, QuantizedLMHead


def quantized_modules(
    tables: dict[str, qformat.StoredTable], metadata: dict[str, str], model: Any
) -> tuple[QuantizedEmbedding, Any]:
    """(input embedding module, output head module or None) built from stored tables."""
    embedding = model.get_input_embeddings()
    dtype = (
        next(embedding.parameters()).dtype
        if list(embedding.parameters())
        else next(model.parameters()).dtype
    )
    stored = tables["embed"]
    module = QuantizedEmbedding(
        stored.table,
        stored.kept_ids,
        stored.kept_rows,
        dtype,
        getattr(embedding, "padding_idx", None),
    )
    head = None
    mode = metadata.get("lm_head", "none")
    if mode == "tied":
        head = QuantizedLMHead(module, _bias(model))
    elif mode == "separate":
        out = tables["lm_head"]
        head = QuantizedLMHead(
            QuantizedEmbedding(out.table, out.kept_ids, out.kept_rows, dtype), _bias(model)
        )
    return module, head


def _bias(model: Any) -> Any:
    output = model.get_output_embeddings()
    bias = getattr(output, "bias", None)
    return None if bias is None else bias.detach().clone()


def load_quantized(
    model: Any, path: Path | str, *, tokenizer: Any | None = None
) -> tuple[QuantizedEmbedding, Any]:
    """Read quantize's output (fingerprints and checksum checked) into modules for `model`:
    (input embedding, output head or None), on the model's device."""
    path = Path(path)
    file = path / qformat.FILENAME if path.is_dir() else path
    tables, metadata = qformat.read(
        file,
        model_fingerprint=model_fingerprint(model),
        tokenizer_fingerprint=tokenizer_fingerprint(tokenizer) if tokenizer is not None else None,
    )
    module, head = quantized_modules(tables, metadata, model)
    device = next(model.parameters()).device
    return module.to(device), None if head is None else head.to(device)


@contextlib.contextmanager
def swapped_embeddings(model: Any, module: QuantizedEmbedding, head: Any = None) -> Iterator[None]:
    """Serve `model` with the quantized modules inside the block, the originals after it."""
    original_in = model.get_input_embeddings()
    original_out = model.get_output_embeddings()
    try:
        model.set_input_embeddings(module)
        if head is not None:
            model.set_output_embeddings(head)
        yield
    finally:
        model.set_input_embeddings(original_in)
        if head is not None:
            model.set_output_embeddings(original_out)


def apply_quantized_embeddings(
    model: Any, path: Path | str, *, tokenizer: Any | None = None
) -> Any:
    """Replace `model`'s embedding (and head, if it was quantized) with quantized modules.

    `path` is quantize's output folder or its embeddings.safetensors. The model's fingerprint
    (and the tokenizer's, when given) must match the file's. The model keeps working with
    `generate`; the float table is released unless a tied, unquantized head still holds it.

    Raises:
        FingerprintMismatch: the file was made for another model or tokenizer.
        ArtifactError: a missing, corrupt or unknown-version file.
    """
    module, head = load_quantized(model, path, tokenizer=tokenizer)
    model.set_input_embeddings(module)
    if head is not None:
        model.set_output_embeddings(head)
    return model
