"""Continuous batching in the transformers engine: a request joins the running batch at the next
decode step and leaves it when done, and what it gets does not depend on who it ran with."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from agentrl.engines.base import SamplingParams
from agentrl.engines.hf import HFEngine
from agentrl.models.loading import load_causal_lm

LONG = SamplingParams(max_new_tokens=40, greedy=True)
SHORT = SamplingParams(max_new_tokens=4, greedy=True)


@pytest.fixture
def engine(tiny_dir, tokenizer):
    engine = HFEngine(
        load_causal_lm(tiny_dir), tokenizer, max_batch_size=8, eos_token_ids=[], continuous=True
    )
    yield engine
    engine.shutdown()


@pytest.fixture
def prompts(tokenizer) -> list[list[int]]:
    texts = ["What is the capital of France?", "Doc", "The quick brown fox jumps", "Who wrote it"]
    return [tokenizer(t, add_special_tokens=False).input_ids for t in texts]


def alone(engine: HFEngine, prompt: list[int], params: SamplingParams):
    return engine.generate_batch_sync([prompt], params)[0]


async def steps_until(engine: HFEngine, count: int) -> None:
    while engine.stats.decode_steps < count:
        await asyncio.sleep(0.001)


def test_a_late_request_joins_the_running_batch_and_finishes_before_the_long_one(engine, prompts):
    async def late_arrival():
        long = asyncio.ensure_future(engine.generate(prompts[0], LONG))
        await steps_until(engine, 3)  # the long request is decoding
        short = await engine.generate(prompts[1], SHORT)
        return short, long.done(), await long

    short, long_was_running, long = asyncio.run(late_arrival())
    assert long_was_running is False, "the short request waited for the long one to finish"
    assert engine.stats.max_batch_size_seen == 2
    assert short.token_ids == alone(engine, prompts[1], SHORT).token_ids
    assert long.token_ids == alone(engine, prompts[0], LONG).token_ids
    assert long.log_probs == pytest.approx(alone(engine, prompts[0], LONG).log_probs, abs=1e-4)


def test_the_coalescing_engine_makes_the_same_late_request_wait(tiny_dir, tokenizer, prompts):
    engine = HFEngine(load_causal_lm(tiny_dir), tokenizer, eos_token_ids=[], continuous=False)

    async def late_arrival():
        long = asyncio.ensure_future(engine.generate(prompts[0], LONG))
        while not engine._exec_lock.locked():  # the long request's batch is generating
            await asyncio.sleep(0.001)
        assert not long.done()
        await engine.generate(prompts[1], SHORT)
        return long.done(), await long

    long_was_done, _ = asyncio.run(late_arrival())
    engine.shutdown()
    assert long_was_done, "under coalescing the running batch completes before the next one starts"


def test_rows_with_different_parameters_share_forwards_and_keep_their_own_samples(engine, prompts):
    sampled = [SamplingParams(max_new_tokens=12, temperature=1.0, top_k=20, seed=s) for s in (3, 4)]
    requests = [(prompts[0], LONG), (prompts[1], sampled[0]), (prompts[2], sampled[1]), (prompts[3], SHORT)]
    batcher = engine._continuous
    collect = batcher._arrivals  # runs on the decode thread

    def collect_once_all_are_queued(block: bool):
        # The decode thread may wake between two submits; the test is about one shared batch,
        # so its first collection waits until the event loop has queued all four requests.
        deadline = time.monotonic() + 10
        while block and batcher.inbox.qsize() < len(requests) and time.monotonic() < deadline:
            time.sleep(0.001)
        batcher._arrivals = collect
        return collect(block)

    batcher._arrivals = collect_once_all_are_queued

    async def together():
        return await asyncio.gather(*(engine.generate(p, params) for p, params in requests))

    results = asyncio.run(together())
    assert engine.stats.coalesced_batches == 1 and engine.stats.max_batch_size_seen == 4
    for (prompt, params), result in zip(requests, results, strict=True):
        reference = asyncio.run(engine.generate(prompt, params))
        assert result.token_ids == reference.token_ids
        assert len(result.token_ids) == params.max_new_tokens


def test_more_requests_than_rows_wait_for_room_and_none_is_lost_or_duplicated(tiny_dir, tokenizer, prompts):
    engine = HFEngine(
        load_causal_lm(tiny_dir), tokenizer, max_batch_size=3, eos_token_ids=[], continuous=True
    )
    budgets = [3, 9, 5, 2, 7, 4, 6, 8]

    async def flood():
        return await asyncio.gather(
            *(
                engine.generate(prompts[i % 4], SamplingParams(max_new_tokens=n, greedy=True))
                for i, n in enumerate(budgets)
            )
        )

    results = asyncio.run(flood())
    engine.shutdown()
    assert [len(r.token_ids) for r in results] == budgets
    assert engine.stats.max_batch_size_seen == 3 and engine.stats.requests == len(budgets)


def test_a_cancelled_request_leaves_the_batch_and_the_others_finish_unchanged(engine, prompts):
    async def cancel_one():
        doomed = asyncio.ensure_future(engine.generate(prompts[0], LONG))
        kept = asyncio.ensure_future(engine.generate(prompts[2], LONG))
        await steps_until(engine, 2)
        doomed.cancel()
        return await kept, doomed.cancelled(), engine.stats.decode_steps

    kept, cancelled, _ = asyncio.run(cancel_one())
    assert cancelled
    assert kept.token_ids == alone(engine, prompts[2], LONG).token_ids
    assert engine.stats.requests == 2 + 1  # the two above and the reference run, nothing resent


def test_a_failed_forward_fails_its_rows_and_the_engine_serves_the_next_request(engine, prompts, monkeypatch):
    original = engine.decoder.next_token_logits
    calls = {"n": 0}

    def fail_on_third_forward(*args, **kwargs):  # an injected fault
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected forward failure")
        return original(*args, **kwargs)

    monkeypatch.setattr(engine.decoder, "next_token_logits", fail_on_third_forward)
    with pytest.raises(RuntimeError, match="injected forward failure"):
        asyncio.run(engine.generate(prompts[0], LONG))
    after = asyncio.run(engine.generate(prompts[1], SHORT))
    assert after.token_ids == alone(engine, prompts[1], SHORT).token_ids


def test_shutdown_fails_requests_in_flight_instead_of_hanging(engine, prompts):
    async def shut_down_midway():
        pending = asyncio.ensure_future(engine.generate(prompts[0], SamplingParams(max_new_tokens=400)))
        await steps_until(engine, 2)
        await asyncio.to_thread(engine.shutdown)
        return await asyncio.wait_for(pending, timeout=30)

    with pytest.raises(RuntimeError, match="shut down"):
        asyncio.run(shut_down_midway())


def test_a_sliding_window_cache_is_refused_naming_the_option_to_turn_it_off(tokenizer):
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        use_sliding_window=True,
        sliding_window=8,
        max_window_layers=0,
    )
    torch.manual_seed(0)
    engine = HFEngine(Qwen2ForCausalLM(config), tokenizer, eos_token_ids=[], continuous=True)
    try:
        with pytest.raises(NotImplementedError, match="continuous=False"):
            asyncio.run(engine.generate([5, 6, 7], SHORT))
    finally:
        engine.shutdown()


def test_the_model_runs_in_eval_mode_switched_once_per_batch_and_its_caller_finds_its_mode_back(
    tiny_dir, tokenizer, prompts
):
    model = load_causal_lm(tiny_dir).train()
    engine = HFEngine(model, tokenizer, max_batch_size=8, eos_token_ids=[], continuous=True)
    modes_in_forward: list[bool] = []
    model.register_forward_pre_hook(lambda module, args: modes_in_forward.append(module.training))
    switches = []
    train = model.train

    def counted_train(mode: bool = True):  # the real switch, counted
        switches.append(mode)
        return train(mode)

    model.train = counted_train

    async def two_requests():
        results = await asyncio.gather(engine.generate(prompts[0], LONG), engine.generate(prompts[1], SHORT))
        return results, model.training

    try:
        results, training_when_back = asyncio.run(two_requests())
    finally:
        engine.shutdown()
    assert len(modes_in_forward) >= LONG.max_new_tokens and not any(modes_in_forward)
    assert training_when_back, "the caller resumed before the model's mode was restored"
    assert switches == [False, True], "the mode is switched per batch, not per decode step"
    assert [len(r.token_ids) for r in results] == [LONG.max_new_tokens, SHORT.max_new_tokens]


@pytest.mark.parametrize("continuous", [True, False], ids=["continuous", "coalescing"])
def test_every_forward_is_tallied_by_kind_and_rows_with_the_real_tokens_it_fed(
    tiny_dir, tokenizer, prompts, continuous
):
    engine = HFEngine(
        load_causal_lm(tiny_dir), tokenizer, max_batch_size=8, eos_token_ids=[], continuous=continuous
    )
    params = SamplingParams(max_new_tokens=5, greedy=True)
    try:
        engine.generate_batch_sync(prompts[:3], params)  # one batch: a prefill, then 4 decode steps
        asyncio.run(engine.generate(prompts[3], params))  # alone, through generate
    finally:
        engine.shutdown()
    tallies = {key: (t.count, t.tokens) for key, t in engine.stats.forwards.items()}
    assert tallies == {
        ("prefill", 3): (1, sum(len(p) for p in prompts[:3])),
        ("decode", 3): (4, 4 * 3),
        ("prefill", 1): (1, len(prompts[3])),
        ("decode", 1): (4, 4),
    }
    assert all(t.seconds > 0 for t in engine.stats.forwards.values())
