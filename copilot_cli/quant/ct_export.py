"""quantize --export compressed-tensors: a complete checkpoint whose embedding table is stored
in the compressed-tensors format that vLLM (its `CompressedTensorsEmbeddingWNA16Int`, a
dequantizing gather) and transformers (with the `compressed-tensors` package) load.

Every scheme is stored `pack-quantized`, the layout vLLM's embedding method reads:
    `model.embed_tokens.weight_packed`  int32 [vocab, hidden / (32 / bits)]: each value
                                        q + 2^(bits - 1), unsigned, packed from the lowest bits
    `...weight_scale`                   float32 [vocab, 1] (INT8 per row: strategy channel) or
                                        [vocab, hidden / g] (groups: strategy group) - our fp16
                                        scales, exactly
    `...weight_shape`                   int64 [2]

The loader dequantizes q x scale in float32: bit-identical to our own apply path for every
row we quantized. The rows we keep in FP16 have no place in one scheme per tensor: they are
stored quantized like the others (the report says how many). The output projection stays full
precision (untied: `lm_head.weight` written apart) unless --include-lm-head, which stores it
in the same scheme (target `lm_head`). Everything else is the model's own tensors, in the
dtype it was loaded in; config.json, tokenizer and generation config beside them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from copilot_cli.core.artifacts import save_safetensors, write_bytes
from copilot_cli.core.errors import InputError
from copilot_cli.quant.scheme import QuantizedTable

# The compressed-tensors release whose checkpoints this writer's layout was checked against
# (its loader reads them back bit-identically: tests/quant/test_exports.py).
CT_VERSION = "0.20.1"
WEIGHTS = "model.safetensors"


FORMAT = "pack-quantized"


def _scheme(table: QuantizedTable) -> tuple[str, dict[str, Any]]:
    if table.group_size is None:
        return FORMAT, {"num_bits": table.bits, "strategy": "channel", "group_size": None}
    return FORMAT, {"num_bits": table.bits, "strategy": "group", "group_size": table.group_size}


def quantization_config(table: QuantizedTable, with_head: bool) -> dict[str, Any]:
    """config.json's `quantization_config` for our table (and the head, same scheme)."""
    fmt, weights = _scheme(table)
    group = {
        "format": fmt,
        "input_activations": None,
        "output_activations": None,
        "weights": {"dynamic": False, "symmetric": True, "type": "int", **weights},
    }
    groups = {"group_0": {**group, "targets": ["Embedding"]}}
    if with_head:
        groups["group_1"] = {**group, "targets": ["lm_head"]}
    return {
        "config_groups": groups,
        "format": fmt,
        "global_compression_ratio": None,
        "ignore": [],
        "kv_cache_scheme": None,
        "quant_method": "compressed-tensors",
        "quantization_status": "compressed",
        "sparsity_config": {},
        "transform_config": {},
        "version": CT_VERSION,
    }


def stored_tensors(prefix: str, table: QuantizedTable) -> dict[str, torch.Tensor]:
    """The tensors of one quantized module under `prefix` (`model.embed_tokens`)."""
    if table.bits == 8:
        unsigned = table.q.to(torch.int32) + 128
    else:  # our nibbles are q + 8 already: low nibble = even column
        unsigned = torch.empty(table.rows, table.cols, dtype=torch.int32)
        unsigned[:, 0::2] = (table.q & 0x0F).to(torch.int32)
        unsigned[:, 1::2] = (table.q >> 4).to(torch.int32)
    per_word = 32 // table.bits
    words = unsigned.view(table.rows, table.cols // per_word, per_word)
    packed = torch.zeros(table.rows, table.cols // per_word, dtype=torch.int32)
    for i in range(per_word):
        packed |= words[..., i] << (table.bits * i)
    scales = table.scales.float()
    return {
        f"{prefix}.weight_packed": packed,
        f"{prefix}.weight_scale": scales.view(-1, 1) if table.group_size is None else scales,
        f"{prefix}.weight_shape": torch.tensor([table.rows, table.cols], dtype=torch.int64),
    }


def _module_names(model: Any) -> tuple[str, str | None]:
    """(input embedding's module name, output projection's) in the model's state dict."""
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    names = {id(m): n for n, m in model.named_modules()}
    if id(embedding) not in names or type(embedding) is not torch.nn.Embedding:
        raise InputError(
            f"its input embedding is a {type(embedding).__name__}, not a plain table: "
            "compressed-tensors quantizes torch.nn.Embedding modules only",
            where="export",
        )
    return names[id(embedding)], names.get(id(head)) if head is not None else None


def write_checkpoint(
    loaded: Any, tables: dict[str, Any], out: Path, with_head: bool
) -> dict[str, Any]:
    """The checkpoint folder `out`: config.json (with quantization_config), model.safetensors,
    the tokenizer's files and generation_config.json. Returns what the report says."""
    model = loaded.model
    embed_name, head_name = _module_names(model)
    if with_head and head_name is None:
        raise InputError("the model has no output projection to quantize", where="export")
    out.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    skip = {f"{embed_name}.weight"}
    if with_head:
        skip.add(f"{head_name}.weight")
    for name, tensor in model.state_dict(keep_vars=False).items():
        if name not in skip:
            tensors[name] = tensor.detach().to("cpu").contiguous()
    if head_name is not None and not with_head:  # untied: the full-precision head apart
        tensors[f"{head_name}.weight"] = model.get_output_embeddings().weight.detach().cpu()
    tensors.update(stored_tensors(embed_name, tables["embed"].table))
    if with_head:
        head = tables.get("lm_head", tables["embed"])  # tied: the same table, stored twice
        tensors.update(stored_tensors(head_name, head.table))
    save_safetensors(out / WEIGHTS, dict(sorted(tensors.items())), {"format": "pt"})
    config = model.config.to_dict()
    config["tie_word_embeddings"] = False
    config["quantization_config"] = quantization_config(tables["embed"].table, with_head)
    body = json.dumps(config, indent=2, sort_keys=True) + "\n"
    write_bytes(out / "config.json", body.encode("utf-8"))
    loaded.tokenizer.save_pretrained(out)
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(out)
    return {
        "format": _scheme(tables["embed"].table)[0],
        "lm_head": "quantized" if with_head else "full precision",
        "bytes": (out / WEIGHTS).stat().st_size,
    }
