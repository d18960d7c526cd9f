"""New weights loaded while a sequence is being decoded: with ``recompute_on_new_weights`` every
token after the swap is the new weights' alone (its KV cache re-prefilled under them); without, the
later tokens are sampled over keys and values the old weights computed."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch

from agentrl.engines.base import SamplingParams
from agentrl.engines.hf import HFEngine
from agentrl.models.loading import load_causal_lm

SAMPLED = SamplingParams(max_new_tokens=24, temperature=1.0, seed=3)  # plain log-softmax log-probs
SWAP_AFTER = 8  # tokens sampled before the new weights are loaded


def teacher_forced(model: torch.nn.Module, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """Each token's log-prob under ``model``, given the prompt and the tokens before it."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]


def generate_with_a_swap(engine: HFEngine, prompt: list[int], new_weights: dict) -> tuple[list, list, int]:
    """Generate ``prompt``, loading ``new_weights`` from another thread once ``SWAP_AFTER`` tokens are
    out; the tokens, their log-probs, and how many tokens the old weights had sampled when the new
    ones went in. The loader is started between two decode steps and the loop's next step waits for
    it (the engine's ``StepLock``), so the swap falls at the same token on any machine."""
    swapped_at: list[int] = []
    batcher = engine._continuous
    settle = batcher._settle_finished  # runs on the decode thread, between two steps

    def stream():  # read inside update_weights, under the engine's lock
        swapped_at.append(len(batcher.rows[0].tokens))
        yield from new_weights.items()

    def settle_then_load():
        settle()
        if loader.ident is not None or not batcher.rows:  # started already, or nothing running
            return
        if len(batcher.rows[0].tokens) >= SWAP_AFTER:
            loader.start()
            deadline = time.monotonic() + 30
            while not swapped_at and engine._exec_lock.waiting == 0 and time.monotonic() < deadline:
                time.sleep(0.0005)  # until the loader holds the lock or waits for it

    loader = threading.Thread(target=engine.update_weights, args=(stream(),))
    batcher._settle_finished = settle_then_load
    result = asyncio.run(engine.generate(prompt, SAMPLED))
    loader.join(30)
    assert SWAP_AFTER <= swapped_at[0] <= SWAP_AFTER + 1 < len(result.token_ids) - 4  # mid-sequence
    return result.token_ids, result.log_probs, swapped_at[0]


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "continue"])
def test_tokens_after_new_weights_are_the_new_weights_alone_only_when_the_cache_is_recomputed(
    tiny_dir, tiny_dir_other_weights, tokenizer, recompute
):
    old, new = load_causal_lm(tiny_dir).eval(), load_causal_lm(tiny_dir_other_weights).eval()
    model = load_causal_lm(tiny_dir)
    engine = HFEngine(model, tokenizer, eos_token_ids=[], continuous=True, recompute_on_new_weights=recompute)
    prompt = tokenizer("Where was Plaimvei founded?", add_special_tokens=False).input_ids
    tokens, sampled, swap = generate_with_a_swap(engine, prompt, dict(new.state_dict()))
    engine.shutdown()

    sampled = torch.tensor(sampled)
    before, after = slice(0, swap), slice(swap, None)
    assert (sampled[before] - teacher_forced(old, prompt, tokens)[before]).abs().max() < 1e-4
    gap = (sampled[after] - teacher_forced(new, prompt, tokens)[after]).abs()
    if recompute:
        assert gap.max() < 1e-4
        assert engine.stats.recomputed_rows == 1
        assert engine.stats.forwards[("recompute", 1)].tokens == len(prompt) + swap - 1
    else:
        assert gap.max() > 1e-3  # the old weights' keys and values still shape the later tokens
        assert engine.stats.recomputed_rows == 0


def test_recompute_needs_continuous_batching(tiny_dir, tokenizer):
    with pytest.raises(ValueError, match="recompute_on_new_weights needs continuous=True"):
        HFEngine(load_causal_lm(tiny_dir), tokenizer, continuous=False, recompute_on_new_weights=True)
