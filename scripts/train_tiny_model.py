"""Train the shipped tiny code model (sample_data/models/tiny-code-llama) from scratch on CPU.

The corpus is the Python standard library of the running interpreter, so the recipe needs no
download: a fixed, sorted file list, a held-out split chosen by a hash of each path, a
byte-level BPE tokenizer, then a small Llama with grouped-query attention.

    python scripts/train_tiny_model.py --out sample_data/models/tiny-code-llama

Deterministic for a given interpreter, torch build and thread count (a seeded generator, no
global random state besides torch's own init, which we seed once here on purpose).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sysconfig
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|user|>", "<|assistant|>", "<|system|>"]
SKIP_PARTS = {"site-packages", "test", "tests", "idle_test", "lib2to3", "__pycache__", "turtledemo"}
HELDOUT_PERCENT = 5

# A minimal chat template so `format: chat` prompt templates have something real to render with.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def corpus_files() -> tuple[list[Path], list[Path]]:
    """Return (train, heldout) stdlib files: sorted, split by a hash of the relative path."""
    root = Path(sysconfig.get_paths()["stdlib"])
    train, heldout = [], []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if SKIP_PARTS.intersection(rel.parts) or path.stat().st_size > 400_000:
            continue
        bucket = hashlib.sha256(rel.as_posix().encode()).digest()[0] * 100 // 256
        (heldout if bucket < HELDOUT_PERCENT else train).append(path)
    return train, heldout


def read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def token_stream(tok: Tokenizer, texts: list[str], eos_id: int) -> torch.Tensor:
    ids: list[int] = []
    for enc in tok.encode_batch(texts):
        ids.extend(enc.ids)
        ids.append(eos_id)
    return torch.tensor(ids, dtype=torch.long)


def build_model(vocab_size: int, special: dict[str, int]) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=704,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,  # grouped-query attention: 4 query heads per kv head
        max_position_embeddings=2048,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=special["<|bos|>"],
        eos_token_id=special["<|eos|>"],
        pad_token_id=special["<|pad|>"],
    )
    return LlamaForCausalLM(config)


@torch.no_grad()
def evaluate(model: LlamaForCausalLM, ids: torch.Tensor, seq_len: int, max_windows: int) -> float:
    """Mean next-token cross-entropy (nats) over non-overlapping windows of `ids`."""
    model.eval()
    total, count = 0.0, 0
    for start in range(0, min(len(ids) - 1, max_windows * seq_len), seq_len):
        window = ids[start : start + seq_len + 1]
        if len(window) < 2:
            break
        logits = model(window[:-1].unsqueeze(0)).logits[0]
        loss = torch.nn.functional.cross_entropy(logits, window[1:], reduction="sum")
        total += loss.item()
        count += len(window) - 1
    model.train()
    return total / count


def unigram_cross_entropy(train_ids: torch.Tensor, eval_ids: torch.Tensor, vocab: int) -> float:
    counts = torch.bincount(train_ids, minlength=vocab).double() + 1.0  # add-one smoothing
    logp = (counts / counts.sum()).log()
    return float(-logp[eval_ids[1:]].mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("sample_data/models/tiny-code-llama"))
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    started = time.perf_counter()
    train_files, heldout_files = corpus_files()
    train_texts = [read_text(p) for p in train_files]
    heldout_texts = [read_text(p) for p in heldout_files]
    print(f"corpus: {len(train_files)} train files, {len(heldout_files)} held-out files")

    tok = train_tokenizer(train_texts, args.vocab_size)
    special = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    train_ids = token_stream(tok, train_texts, special["<|eos|>"])
    heldout_ids = token_stream(tok, heldout_texts, special["<|eos|>"])
    print(
        f"tokens: {len(train_ids):,} train, {len(heldout_ids):,} held-out "
        f"({time.perf_counter() - started:.0f}s)"
    )

    model = build_model(tok.get_vocab_size(), special)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params:,} parameters")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = max(1, args.steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    gen = torch.Generator().manual_seed(1234)
    span = args.seq_len + 1
    train_start = time.perf_counter()
    for step in range(args.steps):
        starts = torch.randint(0, len(train_ids) - span, (args.batch,), generator=gen)
        batch = torch.stack([train_ids[s : s + span] for s in starts.tolist()])
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        logits = model(batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1)
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == args.steps - 1:
            rate = (step + 1) * args.batch * args.seq_len / (time.perf_counter() - train_start)
            print(
                f"step {step:5d} loss {loss.item():.3f} lr {lr_at(step):.2e} {rate:,.0f} tok/s",
                flush=True,
            )
    train_seconds = time.perf_counter() - train_start

    heldout_ce = evaluate(model, heldout_ids, args.seq_len, max_windows=200)
    unigram_ce = unigram_cross_entropy(train_ids, heldout_ids, tok.get_vocab_size())
    stats = {
        "parameters": n_params,
        "train_files": len(train_files),
        "heldout_files": len(heldout_files),
        "train_tokens": len(train_ids),
        "heldout_tokens": len(heldout_ids),
        "steps": args.steps,
        "batch": args.batch,
        "seq_len": args.seq_len,
        "tokens_seen": args.steps * args.batch * args.seq_len,
        "train_seconds": round(train_seconds, 1),
        "threads": args.threads,
        "heldout_loss": round(heldout_ce, 4),
        "heldout_perplexity": round(math.exp(heldout_ce), 2),
        "unigram_perplexity": round(math.exp(unigram_ce), 2),
        "perplexity_ratio": round(math.exp(unigram_ce - heldout_ce), 2),
        "torch": torch.__version__,
    }
    print(json.dumps(stats, indent=2))

    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        additional_special_tokens=["<|user|>", "<|assistant|>", "<|system|>"],
        model_max_length=2048,
        chat_template=CHAT_TEMPLATE,
    )
    fast.save_pretrained(args.out)
    counts = torch.bincount(train_ids, minlength=tok.get_vocab_size()).tolist()
    (args.out / "training").mkdir(exist_ok=True)
    (args.out / "training" / "unigram_counts.json").write_text(json.dumps(counts) + "\n")
    (args.out / "training" / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    sample = "\n".join(heldout_texts)[:12000]
    (args.out / "training" / "heldout_sample.txt").write_text(sample)
    (args.out / "training" / "heldout_files.txt").write_text(
        "\n".join(p.name for p in heldout_files) + "\n"
    )


if __name__ == "__main__":
    main()
