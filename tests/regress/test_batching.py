"""regress in batches: the same numbers as one case at a time, each original forward once,
greedy tokens continued from the scored forward's cache."""

from pathlib import Path

import pytest
import torch

import copilot_cli.regress.engine as regress_engine
import copilot_cli.regress.forward as forward
from copilot_cli.core.models import ModelSpec, load_model
from copilot_cli.core.prompt_sets import load_prompts
from copilot_cli.quant import QuantizeOptions, quantize_embeddings
from copilot_cli.regress import RegressOptions, run_regress
from copilot_cli.regress.cases import build_cases
from copilot_cli.regress.decode import eos_ids, greedy
from copilot_cli.regress.forward import forward_rows, plan_batches

REPO = Path(__file__).resolve().parents[2]
PROMPTS = REPO / "sample_data" / "prompts.jsonl"


@pytest.fixture(scope="module")
def shipped():
    return load_model(ModelSpec())


@pytest.fixture(scope="module")
def setup(tmp_path_factory, shipped):
    root = tmp_path_factory.mktemp("batching")
    quantize_embeddings(QuantizeOptions(out=root / "q8", prompts=None), shipped)
    prompts = root / "prompts.jsonl"
    prompts.write_text("\n".join(PROMPTS.read_text().splitlines()[::3]) + "\n")  # 12 prompts
    return root, prompts


def _run(shipped, root, prompts, batch_size):
    variants = (f"q8=quant={root / 'q8'}", "i8=kv-dtype=int8", "half=prune=0.5")
    options = RegressOptions(
        prompts=prompts,
        variants=variants,
        gen_tokens=4,
        max_tokens=64,
        batch_size=batch_size,
        null_control=True,
    )
    return run_regress(options, shipped)


def test_batches_give_the_numbers_of_one_case_at_a_time(shipped, setup):
    root, prompts = setup
    one, four = _run(shipped, root, prompts, 1), _run(shipped, root, prompts, 4)
    for a, b in zip(one.variants, four.variants, strict=True):
        assert a.name == b.name and a.summary.positions == b.summary.positions > 100
        assert a.prompt_kl.keys() == b.prompt_kl.keys()
        for case, kl in a.prompt_kl.items():
            assert b.prompt_kl[case] == pytest.approx(kl, rel=1e-3, abs=1e-7), (a.name, case)
        assert a.summary.same_top1 == b.summary.same_top1
        assert a.generation == b.generation  # the same greedy tokens
    control = four.variants[-1]
    assert control.name == "null-control" and control.summary.kl_max == 0.0  # same rows, bits


def test_the_original_runs_once_per_batch_for_prompts_and_split(shipped, setup, monkeypatch):
    root, prompts = setup
    calls = []
    real = regress_engine.forward_rows

    def counted(model, seqs, starts, **kw):
        calls.append(len(seqs))
        return real(model, seqs, starts, **kw)

    monkeypatch.setattr(regress_engine, "forward_rows", counted)
    options = RegressOptions(
        prompts=prompts,
        variants=(f"q8=quant={root / 'q8'}", "i8=kv-dtype=int8"),
        gen_tokens=0,
        max_tokens=64,
        batch_size=4,
    )
    run_regress(options, shipped)
    # 12 prompts in batches of 4: 3 forwards of the original (shared by the prompts and split
    # sets) + 3 of the quant variant; kv-dtype runs per case through its own cache
    assert calls == [4, 4, 4, 4, 4, 4]


def test_a_continuation_from_the_forward_cache_is_the_one_from_scratch(shipped):
    model, tokenizer = shipped.model, shipped.tokenizer
    items = load_prompts(PROMPTS)[:6]
    cases = build_cases("prompts", items, tokenizer, 64)
    seqs = [case.ids for case in cases]
    rows = forward_rows(model, seqs, [0] * len(seqs), keep_cache=True)
    eos = eos_ids(model, tokenizer)
    for row, ids in enumerate(seqs):
        mine = greedy(model, torch.tensor([ids]), 8, eos, forward.row_cache(model, rows, row))
        assert mine == greedy(model, torch.tensor([ids]), 8, eos)
        alone = forward_rows(model, [ids], [0], keep_cache=False).logits[0]
        assert torch.allclose(rows.logits[row], alone, atol=1e-4)


def test_batches_are_sorted_by_length_and_bounded_by_logits():
    lengths = {0: 50, 1: 10, 2: 30, 3: 10, 4: 70}
    assert plan_batches(lengths, 2, 100) == [[1, 3], [2, 0], [4]]
    # a vocabulary so large that two rows of 70 pass the budget: one row each
    assert plan_batches({0: 70, 1: 70}, 8, forward.LOGIT_BUDGET // 100) == [[0], [1]]
