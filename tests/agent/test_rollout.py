"""Multi-turn rollouts with a scripted policy against a real retriever server.

Tests that take ``dialect`` run in both tool-call formats (``tags``, and ``hermes`` on the
tiny tokenizer with the project's Hermes-style template): the same invariants, each
format's own text.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
import torch
from support.dialects import DIALECTS, Dialect
from support.prompts import question_prompt
from support.scripted_engine import (
    ScriptedEngine,
    SeedRecordingEngine,
    assert_rollout_invariants,
    fake_log_prob,
    response_part,
)
from support.tag_tools import RecordingTagTool

from agentrl.agent import LLMGenerationManager, PromptSpec, Segment, collate, rollout_metrics
from agentrl.agent.dump import dump_trajectories
from agentrl.agent.observations import FINAL_TURN_NOTE, INVALID_ACTION_HINT
from agentrl.config.schema import ExperimentConfig, RewardConfig, RolloutConfig, ToolConfig
from agentrl.engines.base import SamplingParams
from agentrl.tools.base import ToolResult
from agentrl.tools.calculator import CalculatorTool
from agentrl.tools.retrieval.search import SearchTool
from agentrl.workers.base import RunContext
from agentrl.workers.reward import RuleRewardWorker

pytestmark = pytest.mark.timeout(60)

QUESTIONS = ["What is the capital of France?", "Who wrote Pride and Prejudice?", "When did Apollo 11 land?"]


TAGS = Dialect("tags")


@pytest.fixture(params=DIALECTS, ids=lambda d: d.name)
def dialect(request) -> Dialect:
    return request.param


def search_then_answer(context: str, dialect: Dialect = TAGS) -> str:
    """Search once per question, then answer from what came back."""
    if not dialect.results_seen(context):
        topic = "capital of France" if "France" in context else "Pride and Prejudice author"
        call = dialect.call("search", "query", topic)
        # tags: the turn stops at </search>, so the rest is never sampled; hermes: it ends at eos
        return f"<think>I need to search.</think>{call}" + (
            " trailing text never sampled" * (dialect == TAGS)
        )
    return "<think>Found it.</think><answer> Paris </answer>"


def always_search(context: str, dialect: Dialect = TAGS) -> str:
    n = dialect.results_seen(context)
    return f"<think>more</think>{dialect.call('search', 'query', f'query number {n}')}"


def make_manager(
    engine,
    tokenizer,
    tools,
    *,
    schedule="concurrent",
    max_turns=2,
    max_obs_length=256,
    max_prompt_length=512,
    max_response_length=1024,
    max_tokens_per_turn=None,  # 64; hermes calls are longer (JSON): 128
    policy="observe",
    dialect=TAGS,
    **fields,
):
    config = RolloutConfig(
        schedule=schedule,
        max_turns=max_turns,
        max_obs_length=max_obs_length,
        max_tokens_per_turn=max_tokens_per_turn or (64 if dialect == TAGS else 128),
        check_token_drift=True,
        tool_error_policy=policy,
        **dialect.config,
        **fields,
    )
    return LLMGenerationManager(
        engine,
        tokenizer,
        config,
        tools=tools,
        max_prompt_length=max_prompt_length,
        max_response_length=max_response_length,
    )


def prompts(tokenizer, questions=QUESTIONS, data_source="nq"):
    return [question_prompt(tokenizer, q, data_source, {"target": ["x"]}, i) for i, q in enumerate(questions)]


class ReweightedEngine(ScriptedEngine):
    """New weights reach the engine while trajectories are in flight: once its 3rd call has sampled,
    it samples with version 1, whose log-probs differ, and says so through the rollout's counter
    (as the actor does after the swap)."""

    def __init__(self, tokenizer, policy, weights) -> None:
        super().__init__(tokenizer, policy)
        self.weights = weights  # the rollout's WeightsVersion, set as the actor would set it

    def log_prob_of(self, token_id: int) -> float:
        return fake_log_prob(token_id) * (1 + self.weights.value)

    async def generate(self, prompt_ids, params):
        result = await super().generate(prompt_ids, params)
        if len(self.calls) == 3:
            self.weights.value = 1
        return result


def test_a_trajectory_continued_across_a_weight_update_carries_both_versions_and_their_log_probs(
    tokenizer, retriever_url
):
    engine = ReweightedEngine(tokenizer, search_then_answer, None)
    manager = make_manager(engine, tokenizer, [SearchTool(retriever_url, topk=1)])
    engine.weights = manager.weights
    manager.weights.value = 0
    trajs = manager.run(prompts(tokenizer), n=1).trajectories  # 3 questions: calls 1-3 are first turns
    batch = assert_rollout_invariants(trajs, engine, tokenizer)
    versions, mask = batch["response_versions"], batch["response_mask"]
    for i, t in enumerate(trajs):
        assert t.turn_versions == [0, 1]  # the search turn before the update, the answer after it
        ends = [k for k in range(versions.shape[1]) if batch["response_turn_ends"][i, k]]
        first = versions[i, : ends[0] + 1][mask[i, : ends[0] + 1] > 0]
        second = versions[i, ends[0] + 1 :][mask[i, ends[0] + 1 :] > 0]
        assert set(first.tolist()) == {0} and set(second.tolist()) == {1}
        # each token's log-prob is the one of the weights that sampled it
        ids, lps = batch["responses"][i], batch["rollout_log_probs"][i]
        for k in range(versions.shape[1]):
            if mask[i, k] > 0:
                expected = fake_log_prob(int(ids[k])) * (1 + int(versions[i, k]))
                assert float(lps[k]) == pytest.approx(expected)


@pytest.mark.parametrize("schedule", ["concurrent", "lockstep"])
def test_multi_turn_search_then_answer(tokenizer, retriever_url, schedule, dialect):
    engine = ScriptedEngine(tokenizer, lambda ctx: search_then_answer(ctx, dialect))
    manager = make_manager(
        engine, tokenizer, [SearchTool(retriever_url, topk=1)], schedule=schedule, dialect=dialect
    )
    result = manager.run(prompts(tokenizer), n=2)
    trajs = result.trajectories
    batch = assert_rollout_invariants(trajs, engine, tokenizer)

    assert len(trajs) == 6
    for t, text in zip(trajs, batch["response_text"], strict=True):
        assert (t.num_turns, t.num_tool_calls, t.num_valid_actions, t.finished) == (2, 1, 2, True)
        assert t.tool_calls == {"search": 1} and t.tool_failures == 0 and not t.truncation.any
        assert t.tool_calls_invalid == {} and t.calls_over_budget == 0
        assert [(c.turn, c.name, c.status) for c in t.calls] == [(0, "search", "ok")]
        if dialect == TAGS:
            # the turn stopped at </search>: the sampled text ends there and the rest was never sampled
            assert "</search>\n\n<information>Doc 1(Title:" in text and "trailing text" not in text
        else:
            assert "</tool_call>\ntool\n<tool_response>\nDoc 1(Title:" in text
        assert text.endswith("<answer> Paris </answer>")
        assert t.token_drift is not None
    assert 'Doc 1(Title: "Paris")' in batch["response_text"][0]
    # tags: the turn's stop strings are the tool's closing tag and </answer>; hermes: eos alone
    stops = ("</search>", "</answer>") if dialect == TAGS else ()
    assert {c.params.stop for c in engine.calls} == {stops}
    assert all(c.batched == (schedule == "lockstep") for c in engine.calls)
    metrics = result.metrics  # the rollout returns its metrics with its trajectories
    assert metrics == rollout_metrics(trajs, ["search"]) | {
        "rollout/tool_busy_s": metrics["rollout/tool_busy_s"]
    }
    assert metrics["rollout/finished"] == 1.0 and metrics["rollout/tool_calls/search"] == 1.0
    assert metrics["rollout/tool_calls"] == 1.0 and metrics["rollout/tool_busy_s"] > 0
    assert all(t.tool_metrics == {"docs": 1.0} for t in trajs) and metrics["rollout/tool/docs"] == 1.0


@pytest.mark.parametrize("schedule", ["concurrent", "lockstep"])
def test_seeded_rollouts_give_every_row_turn_and_step_its_own_random_stream(
    tokenizer, retriever_url, schedule, dialect
):
    """8 trajectories x 3 turns sample from 24 distinct seeds; the next step's seed shares none."""
    engine = SeedRecordingEngine(tokenizer, lambda ctx: always_search(ctx, dialect))
    manager = make_manager(
        engine,
        tokenizer,
        [SearchTool(retriever_url, topk=1)],
        schedule=schedule,
        max_turns=2,
        dialect=dialect,
    )
    specs = prompts(tokenizer, [*QUESTIONS, "Which planet is the largest?"])
    used = {}
    for base in (1000, 1001, 1000):  # two consecutive training steps, then the first again
        engine.seeds.clear()
        trajs = manager.run(specs, SamplingParams(max_new_tokens=64, seed=base), n=2).trajectories
        assert len(trajs) == 8 and sum(t.num_turns for t in trajs) == 24
        assert len(engine.seeds) == 24 and len(set(engine.seeds)) == 24, "row-turns share a random stream"
        used.setdefault(base, []).append(sorted(engine.seeds))
    assert not set(used[1000][0]) & set(used[1001][0]), "consecutive steps share random streams"
    assert used[1000][0] == used[1000][1], "the same seed must reproduce the same streams"


def test_an_answer_split_across_turns_is_rejected_by_the_rollout_and_scores_zero(tokenizer, retriever_url):
    """``<answer> Paris`` hits the turn budget, the invalid-action hint follows, the next turn
    writes ``</answer>``: two invalid actions, not finished, and the reward role gives EM 0."""
    opened = "<think>I know it.</think><answer> Paris"
    budget = len(tokenizer.encode(opened, add_special_tokens=False))

    def split_answer(context: str) -> str:
        return "</answer>" if INVALID_ACTION_HINT in response_part(context) else opened + "<think>"

    engine = ScriptedEngine(tokenizer, split_answer)
    manager = make_manager(
        engine, tokenizer, [SearchTool(retriever_url)], max_turns=1, max_tokens_per_turn=budget
    )
    specs = [PromptSpec(p.prompt_ids, "nq", {"target": ["Paris"]}) for p in prompts(tokenizer, QUESTIONS[:1])]
    (traj,) = manager.run(specs).trajectories
    assert (traj.num_invalid_actions, traj.finished, traj.answer) == (2, False, None)
    batch = collate([traj], tokenizer.pad_token_id, tokenizer)
    assert "<answer> Paris" in batch["response_text"][0] and batch["response_text"][0].endswith("</answer>")
    scores, metrics = RuleRewardWorker(
        RewardConfig(), RunContext.from_config(ExperimentConfig())
    ).compute_scores(batch)
    assert scores.tolist() == [0.0] and metrics["reward/has_answer"] == 0.0


def test_collate_contract(tokenizer, retriever_url):
    engine = ScriptedEngine(tokenizer, search_then_answer)
    manager = make_manager(engine, tokenizer, [SearchTool(retriever_url)])
    specs = prompts(
        tokenizer, ["France?", "Who wrote Pride and Prejudice, the famous English novel of 1813?"]
    )
    trajs = manager.run(specs).trajectories
    batch = collate(trajs, tokenizer.pad_token_id, tokenizer)
    b, p, r = 2, max(len(s.prompt_ids) for s in specs), max(len(t.response_ids) for t in trajs)
    assert batch["prompts"].shape == (b, p) and batch["responses"].shape == (b, r)
    assert (
        batch["input_ids"].shape == batch["attention_mask"].shape == batch["position_ids"].shape == (b, p + r)
    )
    assert batch["response_segments"].dtype == torch.int8 and batch["response_mask"].dtype == torch.float32
    for i, (spec, t) in enumerate(zip(specs, trajs, strict=True)):
        lp, lr = len(spec.prompt_ids), len(t.response_ids)
        assert batch["prompts"][i, p - lp :].tolist() == spec.prompt_ids  # left-padded
        assert torch.all(batch["prompts"][i, : p - lp] == tokenizer.pad_token_id)
        assert batch["responses"][i, :lr].tolist() == t.response_ids  # right-padded
        assert batch["attention_mask"][i].tolist() == [0] * (p - lp) + [1] * (lp + lr) + [0] * (r - lr)
        assert batch["position_ids"][i, p - lp :].tolist()[: lp + lr] == list(range(lp + lr))
        expected_lp = [
            fake_log_prob(tok) if seg == Segment.MODEL else 0.0
            for tok, seg in zip(t.response_ids, t.segments, strict=True)
        ]
        assert batch["rollout_log_probs"][i, :lr].tolist() == pytest.approx(expected_lp)
    for key in (
        "group_id",
        "uid",
        "data_source",
        "ground_truth",
        "extra_info",
        "response_text",
        "num_turns",
        "tool_calls",
        "tool_calls_invalid",
        "tool_outputs",
        "answer",
        "num_valid_actions",
        "num_invalid_actions",
        "finished",
        "truncated",
        "obs_truncations",
        "context_truncated",
        "response_truncated",
        "turn_budget_hits",
        "tool_failures",
        "token_drift",
    ):
        assert key in batch, key


@pytest.mark.parametrize("schedule", ["concurrent", "lockstep"])
def test_max_turns_then_forced_final_answer_turn(tokenizer, retriever_url, schedule, dialect):
    def policy(context: str) -> str:
        if FINAL_TURN_NOTE in dialect.response(context):
            return "<answer> Paris </answer>"
        return always_search(context, dialect)

    engine = ScriptedEngine(tokenizer, policy)
    manager = make_manager(
        engine, tokenizer, [SearchTool(retriever_url)], schedule=schedule, max_turns=3, dialect=dialect
    )
    (t,) = manager.run(prompts(tokenizer, QUESTIONS[:1])).trajectories
    assert_rollout_invariants([t], engine, tokenizer)
    assert (t.num_tool_calls, t.num_turns, t.finished) == (3, 4, True)
    stops = [c.params.stop for c in engine.calls]
    if dialect == TAGS:
        assert stops == [("</search>", "</answer>")] * 3 + [("</answer>",)]
    else:
        assert stops == [()] * 4
    # only the observation after the last allowed search carries the note
    text = tokenizer.decode(t.response_ids)
    assert text.count(FINAL_TURN_NOTE) == 1 and text.index(FINAL_TURN_NOTE) > text.index("query number 2")
    # the tools' own outputs are kept apart from the note the manager adds around them
    assert [tag for tag, _ in t.tool_outputs] == ["search"] * 3
    assert all(out in text and FINAL_TURN_NOTE not in out for _, out in t.tool_outputs)


def test_policy_that_never_answers_stops_after_final_turn(tokenizer, retriever_url, dialect):
    engine = ScriptedEngine(tokenizer, lambda ctx: always_search(ctx, dialect))
    manager = make_manager(engine, tokenizer, [SearchTool(retriever_url)], max_turns=2, dialect=dialect)
    result = manager.run(prompts(tokenizer, QUESTIONS[:1]))
    (t,) = result.trajectories
    assert_rollout_invariants([t], engine, tokenizer)
    # two searches executed; on the final turn a call is no action (tags: <search> is not a stop
    # string there and the turn runs to eos), counted as such
    assert (t.num_tool_calls, t.num_turns, t.num_invalid_actions, t.finished) == (2, 3, 1, False)
    assert t.finish_reasons == (["stop", "stop", "eos"] if dialect == TAGS else ["eos"] * 3)
    assert t.tool_calls_invalid == {"no_action": 1}
    assert result.metrics["rollout/tool_calls/invalid/no_action"] == 1


def test_invalid_action_gets_hint_and_counts(tokenizer, retriever_url):
    def policy(context: str) -> str:
        response = response_part(context)
        return ["I am not sure what to do", "<search>   </search>", "<answer> Paris </answer>"][
            response.count("previous action is invalid")
        ]

    engine = ScriptedEngine(tokenizer, policy)
    manager = make_manager(engine, tokenizer, [SearchTool(retriever_url)], max_turns=3)
    (t,) = manager.run(prompts(tokenizer, QUESTIONS[:1])).trajectories
    assert_rollout_invariants([t], engine, tokenizer)
    assert (t.num_invalid_actions, t.num_valid_actions, t.num_tool_calls, t.finished) == (2, 1, 0, True)
    assert tokenizer.decode(t.response_ids).count(INVALID_ACTION_HINT) == 2
    assert t.tool_outputs == [], "a hint is not a tool output"


def test_turn_budget_hit_is_counted(tokenizer, retriever_url, dialect):
    engine = ScriptedEngine(
        tokenizer, lambda ctx: "<think>" + "very long thoughts " * 20 + "</think><answer> x </answer>"
    )
    manager = make_manager(
        engine, tokenizer, [SearchTool(retriever_url)], max_turns=1, max_tokens_per_turn=16, dialect=dialect
    )
    (t,) = manager.run(prompts(tokenizer, QUESTIONS[:1])).trajectories
    assert_rollout_invariants([t], engine, tokenizer)
    assert t.truncation.turn_budget_hits == 2 and t.num_invalid_actions == 2 and not t.finished
    assert t.tool_calls_invalid == {"truncated": 2}
    assert all(len(c.result.token_ids) == 16 for c in engine.calls)


def test_observation_truncated_to_max_obs_length_keeps_closing_tag(tokenizer, retriever_url, dialect):
    engine = ScriptedEngine(
        tokenizer,
        lambda ctx: (
            dialect.call("search", "query", "capital of Germany museums")
            if not dialect.results_seen(ctx)
            else "<answer> Berlin </answer>"
        ),
    )
    manager = make_manager(
        engine, tokenizer, [SearchTool(retriever_url, topk=3)], max_obs_length=80, dialect=dialect
    )
    (t,) = manager.run(prompts(tokenizer, QUESTIONS[:1])).trajectories
    assert_rollout_invariants([t], engine, tokenizer)
    obs = [(s, e) for seg, s, e in t.segment_spans if seg == Segment.OBSERVATION]
    assert len(obs) == 1
    # tags: exactly the budget (the wrapper whole); hermes: the template re-rendered around the cut
    assert obs[0][1] - obs[0][0] == 80 if dialect == TAGS else 60 < obs[0][1] - obs[0][0] <= 80
    closing = (
        "</information>\n\n" if dialect == TAGS else "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    text = tokenizer.decode(t.response_ids[obs[0][0] : obs[0][1]], skip_special_tokens=False)
    assert text.endswith(closing)
    assert t.truncation.observations_cut == 1 and t.truncation.observation_tokens_cut > 0 and t.finished


def test_over_long_prompt_is_kept_whole_and_truncation_counted(tokenizer, retriever_url):
    engine = ScriptedEngine(tokenizer, always_search)
    specs = prompts(
        tokenizer,
        [
            "Tell me about the river that flows north through the valley. " * 4,  # over max_prompt_length
            QUESTIONS[0],  # within it
            "Tell me about the river that flows north through the valley. " * 40,  # over the whole budget
        ],
    )
    max_prompt = len(specs[0].prompt_ids) - 60
    assert len(specs[1].prompt_ids) < max_prompt and len(specs[2].prompt_ids) > max_prompt + 150
    manager = make_manager(
        engine,
        tokenizer,
        [SearchTool(retriever_url)],
        max_turns=5,
        max_prompt_length=max_prompt,
        max_response_length=150,
    )
    trajs = manager.run(specs).trajectories
    assert_rollout_invariants(trajs, engine, tokenizer)
    for spec, t in zip(specs, trajs, strict=True):
        assert t.prompt_ids == spec.prompt_ids  # never dropped, never cut
        assert len(t.response_ids) <= 150
    long_t, short_t, huge_t = trajs
    assert len(long_t.prompt_ids) + len(long_t.response_ids) <= max_prompt + 150
    assert long_t.truncation.context and not long_t.truncation.response_budget and long_t.num_turns >= 1
    assert short_t.truncation.response_budget and not short_t.truncation.context
    assert huge_t.truncation.context and huge_t.response_ids == [] and huge_t.num_turns == 0
    batch = collate(trajs, tokenizer.pad_token_id, tokenizer)
    assert batch["context_truncated"].tolist() == [True, False, True]
    assert batch["response_truncated"].tolist() == [False, True, False]
    assert batch["prompts"][2, -len(specs[2].prompt_ids) :].tolist() == specs[2].prompt_ids
    assert batch["response_mask"][2].sum() == 0


def test_group_ids_unique_across_datasets_and_calls(tokenizer, retriever_url):
    engine = ScriptedEngine(tokenizer, search_then_answer)
    manager = make_manager(engine, tokenizer, [SearchTool(retriever_url)])
    # same dataset row index (0) in two datasets
    specs = prompts(tokenizer, QUESTIONS[:1], "nq") + prompts(tokenizer, QUESTIONS[:1], "hotpotqa")
    first = manager.run(specs, n=3).trajectories
    second = manager.run(specs, n=3).trajectories
    groups = [t.group_id for t in first]
    assert groups[:3] == [groups[0]] * 3 and groups[3:] == [groups[3]] * 3 and groups[0] != groups[3]
    assert len({t.uid for t in first}) == 6
    assert not {t.group_id for t in first} & {t.group_id for t in second}
    assert [t.prompt.data_source for t in first] == ["nq"] * 3 + ["hotpotqa"] * 3


@pytest.mark.parametrize("schedule", ["concurrent", "lockstep"])
def test_retriever_down_observe_continues_with_error(tokenizer, dead_url, schedule, dialect):
    engine = ScriptedEngine(tokenizer, lambda ctx: search_then_answer(ctx, dialect))
    tool = SearchTool(dead_url, timeout_s=0.5, max_retries=1)
    manager = make_manager(engine, tokenizer, [tool], schedule=schedule, dialect=dialect)
    trajs = manager.run(prompts(tokenizer, QUESTIONS[:2])).trajectories
    assert_rollout_invariants(trajs, engine, tokenizer)
    for t in trajs:
        assert t.tool_failures == 1 and t.finished and t.tool_calls == {"search": 1}
        assert [c.status for c in t.calls] == ["failed"]
        text = tokenizer.decode(t.response_ids)
        assert dialect.result_open + "Error: the tool call failed (RetrieverUnavailable: retriever at" in text
        assert dead_url in text


def test_retriever_down_raise_policy_fails_with_client_error(tokenizer, dead_url):
    from agentrl.tools.retrieval.client import RetrieverUnavailable

    engine = ScriptedEngine(tokenizer, search_then_answer)
    manager = make_manager(
        engine, tokenizer, [SearchTool(dead_url, timeout_s=0.5, max_retries=1)], policy="raise"
    )
    with pytest.raises(RetrieverUnavailable, match=dead_url.replace("/retrieve", "")):
        manager.run(prompts(tokenizer, QUESTIONS[:2]))


class FlakyTool(RecordingTagTool):
    """Injected failures: raises on 'boom', hangs on 'hang', answers otherwise."""

    def __init__(self) -> None:
        super().__init__("flaky", "search", timeout_s=0.5)

    async def answer(self, call: str) -> ToolResult:
        if call == "boom":
            raise RuntimeError("backend exploded")
        if call == "hang":
            await asyncio.sleep(3600)
        return ToolResult(f"result for {call}")


@pytest.mark.parametrize("schedule", ["concurrent", "lockstep"])
def test_tool_failure_costs_only_its_trajectory(tokenizer, schedule, dialect):
    queries = {"q-ok": "fine", "q-boom": "boom", "q-hang": "hang"}

    def policy(context: str) -> str:
        if dialect.results_seen(context):
            return "<answer> done </answer>"
        key = next(k for k in queries if k in context)
        return dialect.call("search", "query", queries[key])

    engine = ScriptedEngine(tokenizer, policy)
    tool = FlakyTool()
    manager = make_manager(engine, tokenizer, [tool], schedule=schedule, dialect=dialect)
    trajs = manager.run(prompts(tokenizer, list(queries))).trajectories
    assert_rollout_invariants(trajs, engine, tokenizer)
    ok, boom, hang = trajs
    assert ok.tool_failures == 0 and "result for fine" in tokenizer.decode(ok.response_ids)
    assert boom.tool_failures == 1 and "RuntimeError: backend exploded" in tokenizer.decode(boom.response_ids)
    assert hang.tool_failures == 1 and "ToolTimeout" in tokenizer.decode(hang.response_ids)
    assert all(t.finished for t in trajs)
    assert ["fine", "boom", "hang"] in tool.batches  # the calls went out as one batch first


def test_tool_failure_raise_policy(tokenizer):
    engine = ScriptedEngine(tokenizer, lambda ctx: "<search>boom</search>")
    manager = make_manager(engine, tokenizer, [FlakyTool()], policy="raise")
    with pytest.raises(RuntimeError, match="backend exploded"):
        manager.run(prompts(tokenizer, QUESTIONS[:1]))


def test_calculator_plugged_in_by_config(tokenizer, retriever_url):
    config = RolloutConfig(
        max_turns=2,
        tools=[
            ToolConfig(options={"url": retriever_url}),
            ToolConfig("agentrl.tools.calculator:CalculatorTool"),
        ],
    )

    def policy(context: str) -> str:
        response = response_part(context)
        if "<information>" not in response:
            return "<think>compute</think><calculate> 3 * (4 + 5) </calculate>"
        return "<answer> 27 </answer>"

    engine = ScriptedEngine(tokenizer, policy)
    manager = LLMGenerationManager(engine, tokenizer, config, max_prompt_length=512, max_response_length=512)
    assert isinstance(manager.tools["calculate"], CalculatorTool)
    (t,) = manager.run(prompts(tokenizer, QUESTIONS[:1])).trajectories
    assert_rollout_invariants([t], engine, tokenizer)
    assert t.tool_calls == {"calculate": 1} and t.finished
    assert "</calculate>\n\n<information>27</information>\n\n" in tokenizer.decode(t.response_ids)
    assert engine.calls[0].params.stop == ("</search>", "</calculate>", "</answer>")


def test_bad_config_is_rejected_by_name(tokenizer):
    engine = ScriptedEngine(tokenizer, search_then_answer)
    with pytest.raises(ValueError, match="rollout.schedule"):
        LLMGenerationManager(
            engine,
            tokenizer,
            RolloutConfig(schedule="async"),
            max_prompt_length=8,
            max_response_length=8,
            tools=[],
        )
    with pytest.raises(ValueError, match="rollout.tool_error_policy"):
        LLMGenerationManager(
            engine,
            tokenizer,
            RolloutConfig(tool_error_policy="ignore"),
            max_prompt_length=8,
            max_response_length=8,
            tools=[],
        )
    manager = make_manager(engine, tokenizer, [])
    with pytest.raises(TypeError, match=r"prompts\[0\] must be a PromptSpec"):
        manager.run([[1, 2, 3]])
    with pytest.raises(ValueError, match="prompt_ids must not be empty"):
        PromptSpec(prompt_ids=[])


def test_dump_and_viewer(tokenizer, retriever_url, tmp_path, dialect):
    engine = ScriptedEngine(tokenizer, lambda ctx: search_then_answer(ctx, dialect))
    manager = make_manager(engine, tokenizer, [SearchTool(retriever_url)], dialect=dialect)
    trajs = manager.run(
        prompts(tokenizer, QUESTIONS[:2]), sampling=SamplingParams(max_new_tokens=128)
    ).trajectories
    path = dump_trajectories(trajs, tmp_path / "dump.jsonl", tokenizer, rewards=[1.0, 0.0], step=3)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 2 and records[0]["reward"] == 1.0 and records[0]["step"] == 3
    rec = records[0]
    assert rec["loss_mask"] == [int(s == 1) for s in rec["segments"]]
    assert [s["segment"] for s in rec["spans"]] == ["model", "observation", "model"]
    assert "".join(s["text"] for s in rec["spans"]) == tokenizer.decode(
        rec["response_ids"], skip_special_tokens=False
    )
    assert dialect.result_open in rec["spans"][1]["text"] and rec["spans"][1]["loss_mask"] == 0
    # every call with its arguments, status and the tool message the policy read for it
    (call,) = rec["calls"]
    assert {k: call[k] for k in ("turn", "name", "arguments", "status")} == {
        "turn": 0,
        "name": "search",
        "arguments": {"query": "capital of France"},
        "status": "ok",
    }
    # the message before the observation's cut to max_obs_length
    assert call["message"].startswith("Doc 1(Title:") and call["message"][:60] in rec["spans"][1]["text"]
    assert rec["tool_calls_invalid"] == {} and rec["calls_over_budget"] == 0

    out = tmp_path / "dump.html"
    subprocess.run([sys.executable, "-m", "agentrl.agent.viewer", str(path), "--out", str(out)], check=True)
    page = out.read_text()
    assert page.count('<span class="observation" title') == 2 and page.count('<span class="model" title') == 4
    assert ("&lt;information&gt;" if dialect == TAGS else "&lt;tool_response&gt;") in page
    assert (
        page.count('<table class="calls">') == 2
        and "{&quot;query&quot;: &quot;capital of France&quot;}" in page
    )
