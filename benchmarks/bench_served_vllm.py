"""An editor request served by vLLM with chunk KV (the connector places each stored snippet's
KV, keys re-rotated, after the stored prefix; serving/vllm_chunks.py) vs the static prefix only,
on SmolLM2-135M's transformers folder (float32): time to first token, and fidelity against a
full prefill (mean KL of the 32 next-token distributions of the full prefill's own greedy
continuation, teacher-forced, and greedy agreement). The full prefill is transformers' (dense);
vLLM's rows are its 1,024 most likely tokens per position (regress --engine vllm's top-k KL, a
lower bound within 5% of the exact KL on this model: tests_vllm/test_smollm2.py). vLLM's own
full prefill and the prefix-only serving are scored the same way (the floors, in each note).

A connector cannot run the model, so nothing inside the placed region is recomputed; what vLLM
may compute is the region's last N tokens (`copilot_compute_last`), and this bench measures N
in {0, 128, 256, 512} to choose the default. Each variant's requests carry their own cache salt,
so vLLM's prefix cache never mixes their KV; a request is sent once to be served (placed; all
but its last token), then again with the continuation appended for its prompt log-probabilities,
which vLLM computes for the positions its cache does not hold. TTFT requests each get a fresh
salt (nothing cached but what the connector serves). Requests: the code-completion template, 5
stored snippets of the sample repository, 60 lines before a cursor (~2k tokens;
benchmarks/served_requests.py). Runs in .venv-vllm and needs `make real-models`. Goals (the
served-request issue): TTFT >= 2x the prefix-only TTFT; KL <= 0.05 and agreement >= 90%.
"""

# venv: .venv-vllm

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from served_requests import GEN, emit_served, fidelity_text, prepare, requests

from copilot_cli.core.progress import stdout_to_stderr

REQUESTS = 8
SNIPPETS = 5
COMPUTE_LAST = (0, 128, 256, 512)  # vLLM CPU blocks are 128 tokens: finer steps round alike


TOPK = 1024
VARIANTS = ("vllm", None, *COMPUTE_LAST)  # vLLM's own full prefill, prefix only, placements


def main() -> None:
    from copilot_cli import instruments

    model = instruments.root() / instruments.SMOLLM2
    if not model.is_dir():
        print("skipped: make real-models first", file=sys.stderr)
        return
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from copilot_cli.core.models import load_tokenizer

    tokenizer = load_tokenizer(str(model))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        paths = prepare(work, tokenizer)
        kv = prefill(paths, model, work / "kv")
        composed = requests(paths, tokenizer, REQUESTS, SNIPPETS)
        reference = full_prefill(model, composed)
        report(model, kv, composed, reference)


def prefill(paths: dict[str, Path], model: Path, out: Path) -> Path:
    """The bundle's prefixes and every chunk's KV (xml snippets), float32."""
    from copilot_cli import ModelSpec, PrefillOptions, prefill_kv

    prefill_kv(
        PrefillOptions(
            out=out,
            bundle=paths["bundle"],
            chunks=paths["chunks"],
            snippet_format="xml",
            dtype="float32",
            model=ModelSpec(str(model), dtype="float32"),
        )
    )
    return out


def full_prefill(model: Path, composed) -> list[tuple[list[int], object]]:
    """Per request, transformers' greedy continuation and the log-probabilities of each of its
    tokens' positions (the whole vocabulary), one forward pass over prompt + continuation."""
    import torch

    from copilot_cli import ModelSpec
    from copilot_cli.core.models import load_model

    loaded = load_model(ModelSpec(str(model), dtype="float32"))
    out = []
    with torch.no_grad():
        for request in composed:
            ids = torch.tensor([request.ids])
            generated = loaded.model.generate(
                ids, max_new_tokens=GEN, min_new_tokens=GEN, do_sample=False
            )
            tokens = generated[0, len(request.ids) :].tolist()
            logits = loaded.model(generated[:, :-1]).logits[0, len(request.ids) - 1 :]
            out.append((tokens, torch.log_softmax(logits.double(), -1)))
    return out


def engine(model: Path, kv: Path):
    from vllm import LLM

    from copilot_cli.serving import ServeOptions, transfer_config

    config = transfer_config(ServeOptions(kv_dir=kv, model=str(model)))
    with stdout_to_stderr():
        return LLM(
            model=str(model),
            dtype="float32",
            enforce_eager=True,
            enable_prefix_caching=True,  # the second send of a request reuses the first's
            max_logprobs=TOPK,
            seed=0,
            kv_transfer_config=config,
        )


def prompt(composed, ids: list[int], variant, salt: str) -> tuple[dict, dict]:
    """A request as the endpoint's vLLM engine sends it (its stored snippets named, for a
    placing variant) and the `extra_args` of its sampling parameters carrying them."""
    from copilot_cli.serving.vllm_chunks import CHUNKS_KEY, COMPUTE_LAST_KEY

    if not isinstance(variant, int):
        return {"prompt_token_ids": ids, "cache_salt": salt}, {}
    placed = [[s.stored, s.start] for s in composed.segments() if s.stored]
    params = {CHUNKS_KEY: placed, COMPUTE_LAST_KEY: variant}
    return {"prompt_token_ids": ids, "cache_salt": salt}, {"kv_transfer_params": params}


def send(llm, request: tuple[dict, dict], **sampling):
    from vllm import SamplingParams

    body, extra = request
    params = SamplingParams(
        max_tokens=1, temperature=0.0, detokenize=False, extra_args=extra or None, **sampling
    )
    return llm.generate([body], params, use_tqdm=False)[0]


def scored(llm, request, tokens: list[int], variant, salt: str):
    """(the variant's top-k rows at the continuation's positions, tokens the connector
    served): served once as the endpoint sends it, then with the continuation appended (its
    rows computed by vLLM: only positions past what its cache holds are)."""
    # all but the last token: vLLM then holds no block past the last prompt position, whose
    # logits give the first scored row (a prompt of whole blocks would be cached to its end)
    served = send(llm, prompt(request, list(request.ids[:-1]), variant, salt))
    whole = prompt(request, list(request.ids) + tokens, variant, salt)
    out = send(llm, whole, prompt_logprobs=TOPK, skip_reading_prefix_cache=False)
    if out.num_cached_tokens >= len(request.ids):
        raise RuntimeError(f"vLLM's cache covered a scored position ({out.num_cached_tokens})")
    entries = out.prompt_logprobs[len(request.ids) : len(request.ids) + len(tokens)]
    return sparse(entries, tokens), served.num_cached_tokens


def sparse(entries, targets):
    """The top-k rows (best first, each row's target among them) as SparseLogprobs."""
    import torch

    from copilot_cli.core.metrics import SparseLogprobs

    ids = torch.full((len(entries), TOPK + 1), -1, dtype=torch.long)
    values = torch.full((len(entries), TOPK + 1), -torch.inf, dtype=torch.float64)
    for row, (entry, target) in enumerate(zip(entries, targets, strict=True)):
        ranked = sorted(entry.items(), key=lambda item: (item[1].rank, item[0]))
        if len(ranked) > TOPK + 1:
            ranked = ranked[:TOPK] + [item for item in ranked[TOPK:] if item[0] == target][:1]
        ids[row, : len(ranked)] = torch.tensor([token for token, _ in ranked])
        values[row, : len(ranked)] = torch.tensor([e.logprob for _, e in ranked])
    return SparseLogprobs(ids, values, cap=values[:, TOPK - 1].clone())


def report(model: Path, kv: Path, composed, reference) -> None:
    import torch

    from copilot_cli.core.metrics import compare_sparse

    llm = engine(model, kv)
    fidelity = {v: [] for v in VARIANTS}
    cached = {v: [] for v in VARIANTS}
    ttft = {v: [] for v in VARIANTS}
    try:
        for number, (request, (tokens, base)) in enumerate(zip(composed, reference, strict=True)):
            for variant in VARIANTS:
                rows, served = scored(llm, request, tokens, variant, f"fidelity-{variant}-{number}")
                metrics = compare_sparse(base, rows, torch.tensor(tokens))
                agree = float((rows.argmax() == torch.tensor(tokens)).double().mean())
                fidelity[variant].append((float(metrics.kl.mean()), agree))
                cached[variant].append(served)
        for number, request in enumerate(composed):
            for round_ in range(2):  # interleaved, the second round counted
                for variant in VARIANTS[1:]:
                    salt = f"ttft-{variant}-{number}-{round_}"  # nothing cached under it
                    sent = prompt(request, list(request.ids), variant, salt)
                    started = time.perf_counter()
                    send(llm, sent)
                    if round_:
                        ttft[variant].append((time.perf_counter() - started) * 1000)
    finally:
        stop(llm)
    emit_rows(composed, fidelity, ttft, cached)


def emit_rows(composed, fidelity, ttft, cached) -> None:
    sizes = [len(c.ids) for c in composed]
    placed = [sum(len(s.ids) for s in c.segments() if s.stored) for c in composed]
    base = statistics.median(ttft[None])

    def measured(variant) -> str:
        return fidelity_text(fidelity[variant])

    note = (
        f"{len(composed)} requests of {min(sizes)}-{max(sizes)} tokens, {SNIPPETS} stored "
        f"snippets each ({statistics.mean(placed) / statistics.mean(sizes):.0%} of the prompt); "
        f"SmolLM2-135M float32, vLLM CPU offline engine, medians of TTFT; KL over {GEN} "
        f"tokens vs transformers' full prefill (top-{TOPK}); floors: vLLM's own full prefill "
        f"{measured('vllm')}, prefix only {measured(None)} "
        f"({statistics.mean(cached[None]):.0f} tokens from the connector)"
    )
    for last in COMPUTE_LAST:
        emit_served(
            f"vLLM chunk KV (last {last} tokens of the placed region computed): "
            "TTFT vs static prefix only",
            ttft[last],
            base,
            fidelity[last],
            f"{measured(last)}; {statistics.mean(cached[last]):.0f} tokens from the connector; "
            f"{note}",
        )


def stop(llm) -> None:
    with contextlib.suppress(Exception):
        llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    main()
