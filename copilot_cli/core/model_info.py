"""A summary of a loaded model: what it is, its fingerprints, and its attention geometry."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from copilot_cli.core.models import LoadedModel, context_length


@dataclass(frozen=True)
class ModelInfo:
    source: str
    model_type: str
    parameters: int
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    context_length: int
    dtype: str
    device: str
    tied_embeddings: bool
    model_fingerprint: str
    tokenizer_fingerprint: str
    special_tokens: dict[str, Any]
    has_chat_template: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def describe_model(loaded: LoadedModel) -> ModelInfo:
    """Summarize `loaded` (architecture, sizes, fingerprints) for `copilot-opt model-info`."""
    config = loaded.config
    heads = int(getattr(config, "num_attention_heads", 0) or getattr(config, "n_head", 0))
    hidden = int(getattr(config, "hidden_size", 0) or getattr(config, "n_embd", 0))
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or (hidden // heads if heads else 0))
    layers = int(getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layer", 0))
    first = next(loaded.model.parameters())
    return ModelInfo(
        source=loaded.source,
        model_type=str(config.model_type),
        parameters=sum(p.numel() for p in loaded.model.parameters()),
        layers=layers,
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=hidden,
        vocab_size=int(config.vocab_size),
        context_length=context_length(config),
        dtype=str(first.dtype).removeprefix("torch."),
        device=str(first.device),
        tied_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        model_fingerprint=loaded.model_fingerprint,
        tokenizer_fingerprint=loaded.tokenizer_fingerprint,
        special_tokens=dict(loaded.tokenizer.special_tokens_map),
        has_chat_template=bool(getattr(loaded.tokenizer, "chat_template", None)),
    )
