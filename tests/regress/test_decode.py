"""The gate's own greedy loop gives exactly the tokens of transformers' `generate()`."""

import copy
import json
from pathlib import Path

import pytest
import torch
from transformers import DynamicCache

from copilot_cli.core.models import ModelSpec, cache_kwargs, load_model
from copilot_cli.core.tokens import prompt_ids
from copilot_cli.kv import PrefillOptions, PrefixSource, load_prefix, prefill_sources
from copilot_cli.regress import RegressOptions
from copilot_cli.regress.decode import eos_ids, greedy, plain_greedy
from copilot_cli.regress.engine import Runner
from copilot_cli.regress.variants import degrade_cache

REPO = Path(__file__).resolve().parents[2]
N = 12


@pytest.fixture(scope="module")
def shipped():
    return load_model(ModelSpec())


@pytest.fixture(scope="module")
def prompts(shipped):
    lines = (REPO / "sample_data" / "prompts.jsonl").read_text().splitlines()
    return [prompt_ids(shipped.tokenizer, json.loads(line)["prompt"]) for line in lines[::4]]


def reference(model, ids, n=N, cache=None):
    kwargs = {"max_new_tokens": n, "min_new_tokens": n, "do_sample": False, "pad_token_id": 0}
    if cache is not None:
        kwargs.update(cache_kwargs(model, cache))
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids)), **kwargs)
    return out[0, len(ids) :].tolist()


def test_plain_prompts_match_generate(shipped, prompts):
    assert plain_greedy(shipped.model)
    eos = eos_ids(shipped.model, shipped.tokenizer)
    assert eos == [shipped.tokenizer.eos_token_id]
    for ids in prompts:
        assert greedy(shipped.model, torch.tensor([ids]), N, eos) == reference(shipped.model, ids)


def test_cached_prefix_and_degraded_cache_match_generate(shipped, prompts, tmp_path):
    model = shipped.model
    eos = eos_ids(model, shipped.tokenizer)
    prefix = prompt_ids(shipped.tokenizer, "You write careful Python code.\n" * 6)
    prefill_sources(
        shipped,
        [PrefixSource("sys", "You write careful Python code.\n" * 6, "t")],
        PrefillOptions(out=tmp_path / "kv"),
    )
    for rest in prompts[:4]:
        ids = prefix + rest[1:]  # no second BOS
        mine = greedy(
            model, torch.tensor([ids]), N, eos, load_prefix(tmp_path / "kv", model, "sys")
        )
        theirs = reference(model, ids, cache=load_prefix(tmp_path / "kv", model, "sys"))
        assert mine == theirs
        cache = DynamicCache(config=model.config)
        with torch.no_grad():
            model(torch.tensor([ids[:-1]]), **cache_kwargs(model, cache))
        degrade_cache(cache, "int8")
        second = copy.deepcopy(cache)
        assert greedy(model, torch.tensor([ids]), N, eos, cache) == reference(
            model, ids, cache=second
        )


def test_eos_is_kept_out_as_min_new_tokens_does(shipped, prompts):
    model = shipped.model
    ids = prompts[0]
    free = greedy(model, torch.tensor([ids]), N, [])
    banned = free[0]  # the token greedy would pick first becomes "EOS"
    config = model.generation_config
    saved = config.eos_token_id
    try:
        config.eos_token_id = banned
        mine = greedy(model, torch.tensor([ids]), N, eos_ids(model, shipped.tokenizer))
        assert banned not in mine
        assert mine == reference(model, ids)
    finally:
        config.eos_token_id = saved


def test_a_generation_config_with_processors_goes_through_generate(shipped, prompts):
    model = shipped.model
    config = model.generation_config
    try:
        config.repetition_penalty = 1.5
        assert not plain_greedy(model)
        runner = Runner(
            shipped,
            RegressOptions(
                prompts=REPO / "sample_data" / "prompts.jsonl", gen_tokens=N, null_control=True
            ),
        )
        ids = prompts[1]
        penalised = runner._decode(torch.tensor([ids]), None)
        assert penalised == reference(model, ids)
        config.repetition_penalty = None
        assert plain_greedy(model)
        assert penalised != greedy(model, torch.tensor([ids]), N, eos_ids(model, shipped.tokenizer))
    finally:
        config.repetition_penalty = None
