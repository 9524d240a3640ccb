"""Run LLMLingua (llmlingua 0.2.2, in .venv-llmlingua with transformers 4.46) on contexts.

stdin: {"model": folder, "contexts": [...], "rates": [...]}
stdout: {"rate": {"texts": [...], "seconds": s, "tokens": n}}
llmlingua counts tokens with tiktoken, which downloads its encoding at first use; here the
counter is pointed at the model's own tokenizer instead (no download, and the rate is then
measured in the same tokens as ours).
"""

from __future__ import annotations

import json
import sys
import time

import tiktoken
from transformers import AutoTokenizer


class _OwnTokenizer:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def encode(self, text, **_):
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def decode(self, ids, **_):
        return self.tokenizer.decode(ids)


def main() -> None:
    job = json.load(sys.stdin)
    own = _OwnTokenizer(AutoTokenizer.from_pretrained(job["model"]))
    tiktoken.encoding_for_model = lambda *_args, **_kw: own
    tiktoken.get_encoding = lambda *_args, **_kw: own
    from llmlingua import PromptCompressor

    compressor = PromptCompressor(model_name=job["model"], device_map="cpu")
    out = {}
    for rate in job["rates"]:
        texts = []
        tokens = 0
        started = time.perf_counter()
        for context in job["contexts"]:
            result = compressor.compress_prompt(context, rate=rate)
            texts.append(result["compressed_prompt"])
            tokens += len(own.encode(context))
        out[str(rate)] = {
            "texts": texts,
            "seconds": time.perf_counter() - started,
            "tokens": tokens,
        }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
