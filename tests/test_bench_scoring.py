"""bench_context_quality decodes the greedy lines of all methods together (left-padded caches,
a mask, a position per row): each row must read what decoding it by itself reads."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_context_quality import Scorer


@pytest.fixture(scope="module")
def scorer(shipped_model_dir):
    model = AutoModelForCausalLM.from_pretrained(shipped_model_dir, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(shipped_model_dir, local_files_only=True)
    made = Scorer(SimpleNamespace(model=model, tokenizer=tokenizer))
    made.model = model.float()  # float32: a batch sums as one row does, to ~1e-6
    return made


def alone(scorer, prompt: list[int], first: int, steps: int) -> list[int]:
    """Plain greedy decoding of one sequence, no mask and no positions given."""
    cache = DynamicCache()
    tokens = [first]
    with torch.inference_mode():
        scorer.forward(prompt, cache, 1)
        for _ in range(steps):
            tokens.append(int(scorer.forward([tokens[-1]], cache, 1).logits[0, -1].argmax()))
    return tokens


def test_rows_decoded_together_read_as_each_decoded_alone(scorer):
    tok = scorer.tok
    texts = [
        "def add(a, b):\n    return",
        "import os\n\n\ndef main():\n    path = os.path.join(",
        "class Stack:\n    def __init__(self):\n        self.items = []\n\n"
        "    def push(self, item):\n",
        "x =",
    ]
    target = tok("    value = compute(first, second)", add_special_tokens=False).input_ids
    states = [scorer.prefill(tok(text).input_ids, target) for text in texts]
    prompts = [tok(t).input_ids + s.greedy[:-1] for t, s in zip(texts, states, strict=True)]
    pending = [k for k, s in enumerate(states) if not scorer.finished(s.greedy, target)]
    assert len(pending) >= 2  # a batch of several rows
    states, prompts = [states[k] for k in pending], [prompts[k] for k in pending]
    firsts = [s.greedy[-1] for s in states]
    scorer.decode_together(states, target)
    lengths = {len(s.greedy) for s in states}
    assert max(lengths) > 2  # some row decoded several steps
    for prompt, first, state in zip(prompts, firsts, states, strict=True):
        greedy = state.greedy
        expected = alone(scorer, prompt, first, len(greedy) - 1)
        assert greedy == expected
        assert scorer.finished(greedy, target)  # every row ran to its own end
        assert not scorer.finished(greedy[:-1], target)
