"""Context policies and turn rewards through the real rollout, in both tool-call formats.

A scripted policy searches every turn (a tag tool or a schema tool answering at once); the
rollout, the formats and collation are the real ones. What is promised: with a context
policy, a conversation over its budget loses older results (``keep_last``: to the marker) or
older turns (``drop_turns``) and continues as a new step whose prompt is the compacted
conversation, with every rollout invariant holding in every step; a tool's reward and the
``reward.turn`` rules sit on their turns' last sampled tokens; the driver puts the outcome on
the last step only and gives the estimator the trajectories' steps.
"""

from __future__ import annotations

import pytest
import torch
from support.dialects import DIALECTS, Dialect
from support.prompts import question_prompt
from support.scripted_engine import ScriptedEngine, assert_rollout_invariants

from agentrl.agent import LLMGenerationManager, Segment
from agentrl.agent.formats.hermes import CALL_OPEN
from agentrl.config.schema import (
    AlgorithmConfig,
    ContextConfig,
    RewardConfig,
    RolloutConfig,
    TurnRewardConfig,
)
from agentrl.core.advantages import get_advantage_estimator
from agentrl.tools.base import ToolResult
from agentrl.tools.spec import ToolSpec
from agentrl.trainer.shaping import advantages_and_returns, outcome_on_last_tokens
from agentrl.workers.reward import turn_scores

pytestmark = pytest.mark.timeout(60)

MARKER = "[older result omitted]"


class NumberedSearch:
    """A search tool (tag ``search`` and a JSON schema, so both formats call it) answering call k
    with ``result k`` padded to a fixed length; the call whose query holds ``gold`` finds the
    answer, Paris, and earns ``reward`` (a tool's own reward)."""

    name = tag = "search"
    timeout_s = 5.0
    spec = ToolSpec(
        "search",
        "Search.",
        {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    )

    def __init__(self, reward: float | None = None) -> None:
        self.reward = reward

    def _answer(self, query: str) -> ToolResult:
        found = "Paris is the capital." if "gold" in query else "nothing relevant"
        reward = self.reward if "gold" in query else None
        return ToolResult(f"result for {query.strip()}: {found} " + "filler " * 12, reward=reward)

    async def execute(self, calls: list[str]) -> list[ToolResult]:
        return [self._answer(c) for c in calls]

    async def call(self, arguments: list[dict]) -> list[ToolResult]:
        return [self._answer(a["query"]) for a in arguments]


def searching_policy(dialect: Dialect, turns: int, gold_at: int = -1):
    """Search ``turns`` times (query k; the one at ``gold_at`` mentions gold), then answer."""
    served = [0]

    def policy(context: str) -> str:
        k = served[0]
        served[0] += 1
        if k >= turns:
            return "<answer> Paris </answer>"
        query = f"query {k}" + (" gold" if k == gold_at else "")
        return dialect.call("search", "query", query)

    return policy


def rollout(
    tokenizer,
    dialect: Dialect,
    policy,
    *,
    context: ContextConfig | None = None,
    reward=None,
    window=(1024, 2048),
):
    engine = ScriptedEngine(tokenizer, policy)
    config = RolloutConfig(
        max_turns=6,
        max_obs_length=256,
        max_tokens_per_turn=64 if dialect.name == "tags" else 128,
        context=context or ContextConfig(),
        **dialect.config,
    )
    manager = LLMGenerationManager(
        engine,
        tokenizer,
        config,
        tools=[NumberedSearch(reward)],
        max_prompt_length=window[0],
        max_response_length=window[1],
    )
    prompt = question_prompt(tokenizer, "What is the capital of France?", "nq", {"target": ["Paris"]}, 0)
    (t,) = manager.run([prompt]).trajectories
    return t, engine


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_keep_last_replaces_older_results_with_the_marker_and_continues_as_a_new_step(tokenizer, dialect):
    context = ContextConfig(policy="keep_last", max_tokens=260, keep=1, marker=MARKER)
    t, engine = rollout(tokenizer, dialect, searching_policy(dialect, 5), context=context)
    assert t.finished and t.answer == "Paris" and t.num_turns == 6
    assert t.num_steps > 1 and t.context_compactions == t.num_steps - 1
    assert {s.reason for s in t.steps[1:]} | {t.step_reason} == {"context_compacted"}
    assert_rollout_invariants([t], engine, tokenizer)
    last_prompt = tokenizer.decode(t.prompt_ids, skip_special_tokens=False)
    # every earlier result is the marker but the last kept one; the calls that asked stay
    results_in_prompt = [k for k in range(5) if f"result for query {k}:" in last_prompt]
    first_turn_of_last_step = t.step_turns[0]
    assert results_in_prompt == [first_turn_of_last_step - 1]
    assert last_prompt.count(MARKER) == first_turn_of_last_step - 1
    assert all(f"query {k}" in last_prompt for k in range(first_turn_of_last_step))


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_drop_turns_keeps_the_question_and_only_the_last_turns(tokenizer, dialect):
    context = ContextConfig(policy="drop_turns", max_tokens=260, keep=1)
    t, engine = rollout(tokenizer, dialect, searching_policy(dialect, 5), context=context)
    assert t.finished and t.num_steps > 1 and t.context_compactions >= 1
    assert_rollout_invariants([t], engine, tokenizer)
    last_prompt = tokenizer.decode(t.prompt_ids, skip_special_tokens=False)
    first_turn_of_last_step = t.step_turns[0]
    assert "capital of France" in last_prompt
    kept = [k for k in range(5) if f"query {k}" in last_prompt]
    assert kept == [first_turn_of_last_step - 1]  # only the turn before this step's first
    question = tokenizer.decode(t.prompt.prompt_ids, skip_special_tokens=False)
    call_open = CALL_OPEN if dialect.name == "hermes" else "<search>"
    assert last_prompt.count(call_open) - question.count(call_open) == 1  # the one kept turn's call


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_without_a_context_policy_the_same_trajectory_is_one_step(tokenizer, dialect):
    t, engine = rollout(tokenizer, dialect, searching_policy(dialect, 3))
    assert t.num_steps == 1 and t.context_compactions == 0 and t.steps == []
    assert_rollout_invariants([t], engine, tokenizer)


def test_a_context_policy_without_a_budget_is_refused_naming_the_key(tokenizer):
    with pytest.raises(ValueError, match="actor.rollout.context.max_tokens"):
        rollout(
            tokenizer,
            DIALECTS[0],
            searching_policy(DIALECTS[0], 1),
            context=ContextConfig(policy="keep_last"),
        )


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_a_tools_reward_and_the_search_hit_rule_sit_on_their_turns_last_tokens(tokenizer, dialect):
    t, _ = rollout(tokenizer, dialect, searching_policy(dialect, 3, gold_at=1), reward=0.5)
    assert t.turn_rewards == [0.0, 0.5, 0.0, 0.0]
    from agentrl.agent import collate

    batch = collate([t], tokenizer.pad_token_id, tokenizer)
    rules = RewardConfig(turn=TurnRewardConfig(search_hit=0.2, malformed_call=-0.1))
    scores, metrics = turn_scores(batch, rules)
    ends = batch["response_turn_ends"][0].nonzero().flatten().tolist()
    assert len(ends) == 4 and all(batch["response_mask"][0, e] == 1 for e in ends)
    assert ends[-1] == int(batch["response_mask"][0].nonzero().max())  # the answer's last token
    assert scores[0, ends].tolist() == pytest.approx([0.0, 0.7, 0.0, 0.0])
    assert float(scores.abs().sum()) == pytest.approx(0.7)  # nothing anywhere else
    assert metrics["reward/turn_reward/turn_1"] == pytest.approx(0.7)


def test_the_outcome_sits_on_the_last_step_and_a_trajectory_counts_once_in_its_group(tokenizer):
    dialect = DIALECTS[0]
    context = ContextConfig(policy="keep_last", max_tokens=260, keep=1, marker=MARKER)
    long, _ = rollout(tokenizer, dialect, searching_policy(dialect, 5), context=context)
    short, _ = rollout(tokenizer, dialect, searching_policy(dialect, 1), context=context)
    short.group_id = long.group_id  # two samples of one prompt
    from agentrl.agent import collate

    batch = collate([long, short], tokenizer.pad_token_id, tokenizer)
    assert len(batch) == long.num_steps + 1
    batch["scores"] = torch.tensor([1.0] * long.num_steps + [0.0])
    batch["token_level_scores"] = outcome_on_last_tokens(batch)
    assert batch["token_level_scores"][: long.num_steps - 1].abs().sum() == 0  # not on earlier steps
    assert batch["token_level_scores"][long.num_steps - 1].sum() == 1.0
    batch["token_level_rewards"] = batch["token_level_scores"]
    batch["turn_scores"] = torch.zeros_like(batch["token_level_scores"])
    algo = AlgorithmConfig(adv_estimator="grpo")
    advantages, _ = advantages_and_returns(batch, get_advantage_estimator("grpo"), algo, use_critic=False)
    mask = batch["response_mask"].bool()
    per_row = [float(advantages[i][mask[i]].mean()) for i in range(len(batch))]
    # two trajectories scored 1 and 0: +0.707 and -0.707 on every token of every one of their rows
    assert per_row[: long.num_steps] == pytest.approx([0.7071] * long.num_steps, abs=1e-3)
    assert per_row[-1] == pytest.approx(-0.7071, abs=1e-3)


def test_a_stepped_trajectory_dumps_every_step_and_sft_reads_each_as_an_example(tokenizer, tmp_path):
    from agentrl.agent.dump import dump_trajectories
    from agentrl.agent.viewer import read_dump, render_html
    from agentrl.trainer.sft import load_sft_examples

    dialect = DIALECTS[0]
    context = ContextConfig(policy="keep_last", max_tokens=260, keep=1, marker=MARKER)
    t, _ = rollout(tokenizer, dialect, searching_policy(dialect, 5), context=context)
    path = dump_trajectories([t], tmp_path / "dump.jsonl", tokenizer, rewards=[1.0])
    (record,) = read_dump(path)
    assert record["num_steps"] == t.num_steps == len(record["steps"]) > 1
    assert [s["prompt_ids"] for s in record["steps"]] == [s.prompt_ids for s in t.all_steps]
    assert [s["turns"] for s in record["steps"]] == [s.turns for s in t.all_steps]
    examples = load_sft_examples(path)
    assert [(e.prompt_ids, e.response_ids) for e in examples] == [
        (s.prompt_ids, s.response_ids) for s in t.all_steps
    ]
    page = render_html([record])
    assert all(f"step {k} (" in page for k in range(t.num_steps)) and MARKER in page


def test_the_whole_response_text_keeps_the_observation_at_every_step_boundary(tokenizer):
    dialect = DIALECTS[0]
    context = ContextConfig(policy="keep_last", max_tokens=260, keep=1, marker=MARKER)
    t, _ = rollout(tokenizer, dialect, searching_policy(dialect, 5), context=context)
    assert t.num_steps > 1
    text = tokenizer.decode(t.response_ids_of_all_steps(), skip_special_tokens=False)
    assert text.count("<information>") == text.count("</information>") == 5  # one per search
    assert all(step.tail_ids for step in t.steps) and not any(
        Segment.MODEL in [seg for seg, _, _ in step.segment_spans][-1:] and step.segments[-1] != Segment.MODEL
        for step in t.steps
    )


def test_a_step_that_would_have_no_room_to_sample_ends_the_trajectory_instead(tokenizer):
    dialect = DIALECTS[0]
    # a marker far longer than the results it replaces: the compacted conversation outgrows the window
    context = ContextConfig(policy="keep_last", max_tokens=200, keep=1, marker="omitted " * 300)
    t, engine = rollout(tokenizer, dialect, searching_policy(dialect, 5), context=context, window=(256, 512))
    assert t.truncation.context and not t.finished
    assert all(step.num_model_tokens > 0 for step in t.all_steps)  # the last step holds the outcome
    assert_rollout_invariants([t], engine, tokenizer)


@pytest.mark.parametrize(
    ("context", "key"),
    [
        (ContextConfig(policy="keep_last", max_tokens=200, keep=0), "context.keep must be >= 1"),
        (ContextConfig(policy="drop_turns", max_tokens=5000, keep=1), "below the context window"),
        (ContextConfig(policy="keep_last", max_tokens=200, marker=""), "context.marker"),
    ],
)
def test_a_context_policy_that_could_not_work_is_refused_naming_the_key(tokenizer, context, key):
    with pytest.raises(ValueError, match=key):
        rollout(tokenizer, DIALECTS[0], searching_policy(DIALECTS[0], 1), context=context)


def test_skipping_the_old_log_prob_pass_is_refused_where_steps_could_add_rows():
    from agentrl.config import ConfigError, load_config
    from agentrl.trainer.shaping import single_step_or_refuse

    overrides = ["actor.skip_old_log_prob=true", "actor.rollout.context.policy=keep_last"]
    overrides += ["actor.rollout.context.max_tokens=512", "actor.update.mini_batch_size=1024"]
    with pytest.raises(ConfigError, match="context.policy=keep_last"):
        load_config(["grpo"], overrides)
    single_step_or_refuse(8, 8)
    with pytest.raises(ValueError, match="actor.skip_old_log_prob=true needs one optimiser step"):
        single_step_or_refuse(9, 8)
