"""prune vs random token dropping and Selective-Context-style self-information pruning, at
equal rates 0.5 and 0.33, on the shipped model.

Quality: the first half of each sample prompt is compressed, the second half is the
continuation; regress's metrics (mean KL, same top-1) compare the model's predictions on the
continuation after the compressed vs the full context. For code contexts, the share of outputs
that still parse (tree-sitter). Rate accuracy: achieved vs requested rate on the sample
repository's files of 200+ tokens. LLMLingua is not run here: llmlingua 0.2.2 needs
transformers 4.x and a tiktoken download, neither available offline in this environment.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit

from copilot_cli.core.metrics import Accumulator, compare_logits
from copilot_cli.core.models import ModelSpec, load_model
from copilot_cli.core.prompt_sets import load_prompts
from copilot_cli.core.syntax import parser_for
from copilot_cli.core.tokens import prompt_ids
from copilot_cli.prune import prune
from copilot_cli.prune.protect import looks_like_code
from copilot_cli.prune.scoring import score_tokens

ROOT = Path(__file__).resolve().parents[1]


def random_drop(text, tokenizer, rate, seed=0):
    encoding = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
    rng = random.Random(seed)
    keep = sorted(rng.sample(range(len(encoding.ids)), max(1, round(rate * len(encoding.ids)))))
    return "".join(text[slice(*encoding.offsets[i])] for i in keep)


def selective_context(text, model, tokenizer, rate):
    """Drop the tokens of lowest self-information (Li et al. 2023, token level)."""
    encoding = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
    scores = score_tokens(model, list(encoding.ids)).surprisal
    keep_n = max(1, round(rate * len(encoding.ids)))
    keep = sorted(torch.argsort(scores, descending=True, stable=True)[:keep_n].tolist())
    return "".join(text[slice(*encoding.offsets[i])] for i in keep)


def quality(loaded, prompts, compress) -> tuple[float, float, float]:
    model, tokenizer = loaded.model, loaded.tokenizer
    acc = Accumulator()
    code_total = code_ok = 0
    parser = parser_for("python")
    for item in prompts:
        ids = prompt_ids(tokenizer, item["prompt"])
        split = max(1, len(ids) // 2)
        context = tokenizer.decode(ids[:split])
        pruned = compress(context)
        if looks_like_code(context):
            code_total += 1
            code_ok += not parser.parse(pruned.encode()).root_node.has_error
        new_ids = prompt_ids(tokenizer, pruned)
        with torch.no_grad():
            base = model(torch.tensor([ids])).logits[0, split:-1]
            variant = model(torch.tensor([new_ids + ids[split:]])).logits[0, len(new_ids) : -1]
        acc.add(compare_logits(base, variant, torch.tensor(ids[split + 1 :])))
    summary = acc.summary()
    return summary.kl_mean, summary.same_top1, code_ok / code_total if code_total else 1.0


def main() -> None:
    torch.set_num_threads(2)
    loaded = load_model(ModelSpec())
    model, tokenizer = loaded.model, loaded.tokenizer
    prompts = load_prompts(ROOT / "sample_data" / "prompts.jsonl")
    for rate in (0.5, 0.33):
        ours = quality(loaded, prompts, lambda t, r=rate: prune(t, model, tokenizer, rate=r).text)
        peers = {
            "random dropping": quality(
                loaded, prompts, lambda t, r=rate: random_drop(t, tokenizer, r)
            ),
            "Selective-Context self-information": quality(
                loaded, prompts, lambda t, r=rate: selective_context(t, model, tokenizer, r)
            ),
        }
        for name, peer in peers.items():
            emit(
                f"prune rate {rate}: continuation mean KL, ours vs {name}",
                ours[0],
                peer[0],
                "nats",
                goal="ratio >= 1",
                passed=ours[0] <= peer[0],
                note=f"same top-1 {ours[1]:.3f} vs {peer[1]:.3f}; code still parses "
                f"{ours[2]:.0%} vs {peer[2]:.0%}",
            )
    # rate accuracy and speed on files of 200+ tokens
    files = [
        p
        for p in sorted((ROOT / "sample_data" / "repo").rglob("*"))
        if p.suffix in (".py", ".md", ".ts", ".go", ".rs") and p.stat().st_size > 1500
    ]
    worst = 0.0
    tokens = 0
    started = time.perf_counter()
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        for rate in (0.5, 0.33):
            result = prune(text, model, tokenizer, rate=rate)
            if result.original_tokens >= 200:
                worst = max(worst, abs(result.achieved_rate - rate) / rate)
            tokens += result.original_tokens
    seconds = time.perf_counter() - started
    emit(
        "prune achieved vs requested rate (worst relative error, inputs >= 200 tokens)",
        worst,
        0.05,
        "fraction",
        goal="<= 0.05",
        passed=worst <= 0.05,
        note=f"{len(files)} files x 2 rates",
    )
    emit(
        "prune scoring speed on the shipped model",
        tokens / seconds,
        0.0,
        "tokens/s",
        higher_is_better=True,
        note="LLMLingua not run offline (see module docstring)",
    )


if __name__ == "__main__":
    main()
